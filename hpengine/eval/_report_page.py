"""The report's HTML: the per-run tables, the sections with their inline SVG plots, the browser's
controls and data; the style sheet and the script come from ``_report_assets``."""
from __future__ import annotations

import html
import json
import math
import re

from hpengine.eval._report_assets import CSS, SCRIPT
from hpengine.eval._report_browser import default_measure
from hpengine.eval._report_data import CURVE_KS, TABLE_KS, ReportData
from hpengine.eval._report_plots import FUNNEL_STAGES, facet_svg, funnel_svg, recall_curve_svg

#: what the page prints for a number that is undefined (a mean over nothing) or not finite
NOT_AVAILABLE = "n/a"
#: characters that could end or alter the JSON data block (``</script>``, ``<!--``) or a JS string
_JSON_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
                        0x2028: "\\u2028", 0x2029: "\\u2029"}
_SURROGATE = re.compile("[\ud800-\udfff]")


def _finite(value: float) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def _num(value, digits: int = 3) -> str:
    """A table number: "–" when the run does not record it, "n/a" when it is NaN or infinite."""
    if value is None:
        return "–"
    if not _finite(value):
        return NOT_AVAILABLE
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return html.escape(str(value))


def _metric(value, digits: int = 3) -> str:
    """A Recall@k / EM / F1 cell: "n/a" when undefined (null, e.g. no question with gold) or not finite."""
    return NOT_AVAILABLE if value is None else _num(value, digits)


def _json_safe(obj):
    """``obj`` with NaN and infinities as the string "n/a": the embedded data stays strict JSON
    (``JSON.parse`` refuses ``NaN``) and the page prints them as "n/a"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return NOT_AVAILABLE
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def json_script_text(obj) -> str:
    r"""``obj`` as JSON to sit inside ``<script type="application/json">``: ``<``, ``>``, ``&``,
    U+2028 and U+2029 are written as ``\u003c``-style escapes (as Django's ``json_script`` and
    Jinja's ``htmlsafe_json_dumps`` do), so no string can end the element (``</script>``), open a
    comment that swallows the rest of the page (``<!--<script>``) or read as markup. ``JSON.parse``
    of the element's text gives back the original strings.

    Example:
        >>> json_script_text({"a": "</script><!--"})
        '{"a":"\\u003c/script\\u003e\\u003c!--"}'
    """
    text = json.dumps(_json_safe(obj), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # a lone surrogate (JSON allows "\ud800") stays an escape: the page is written as UTF-8
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text.translate(_JSON_SCRIPT_ESCAPES))


def _setting(value) -> str:
    return value if isinstance(value, str) else json.dumps(_json_safe(value), ensure_ascii=False)


def _paths_cell(stats: dict | None) -> str:
    """The run's ``reasoning_paths`` in a line (methods with several reasoning paths), else "–"."""
    if not stats:
        return "–"

    def g(key):
        return format(stats[key], "g") if _finite(stats[key]) else NOT_AVAILABLE

    return (f'{g("paths_per_question")} per question ({g("distinct_paths_per_question")} distinct), '
            f'{g("steps_per_path")} steps each, {stats["unanimous_votes"]} of {stats["questions"]} unanimous')


_CEILING_TITLE = ("the highest Recall@k any method can reach on this run's index: the mean over questions with "
                  "gold of the share of their gold passages that are in the index")


_QUALITY_COLS = [f"R@{k}" for k in TABLE_KS] + ["EM", "F1"]


def _best(rows: list) -> dict:
    """Per quality column, the best value among the runs (``None`` with fewer than two known values)."""
    getters = [lambda r, k=k: r["recall"][k] for k in TABLE_KS] + [lambda r: r["em"], lambda r: r["f1"]]
    best = {}
    for col, getter in zip(_QUALITY_COLS, getters):
        known = [v for v in map(getter, rows) if v is not None and _finite(v)]
        best[col] = max(known) if len(known) > 1 else None
    return best


def _metric_cell(key: str, value, best, title: str = "") -> str:
    cls = "num best" if best is not None and value == best else "num"
    return f'<td class="{cls}" data-key="{key}"' + (f' title="{title}"' if title else "") + f">{_metric(value)}</td>"


def _run_cell(row: dict) -> str:
    return (f'<td data-key="name">{html.escape(row["name"])}'
            f'<div class="sub path" data-key="path">{html.escape(row["path"])}</div></td>')


def _quality_row(data: ReportData, j: int, best: dict) -> str:
    row = data.rows[j]
    settings = "\n".join(f"{k}={_setting(v[j])}" for k, v in data.differing.items()) or "–"
    cells = [_run_cell(row), f'<td data-key="method">{html.escape(row["method"])}</td>',
             f'<td class="settings" data-key="settings">{html.escape(settings)}</td>',
             f'<td class="num" data-key="questions">{_num(row["questions"])}</td>']
    for k in TABLE_KS:
        title = "from the records' ranks" if row["recall_source"][k] != "run" else "from the run file"
        cells.append(_metric_cell(f"recall@{k}", row["recall"][k], best[f"R@{k}"], title))
    cells += [f'<td class="num" data-key="recall_ceiling" title="{_CEILING_TITLE}">'
              f'{_metric(row["recall_ceiling"])}</td>',
              f'<td class="num" data-key="gold_not_in_index">{_num(row["gold_not_in_index"])}</td>',
              _metric_cell("em", row["em"], best["EM"]), _metric_cell("f1", row["f1"], best["F1"])]
    return f'<tr data-run="{j}">' + "".join(cells) + "</tr>"


def _summary_table(data: ReportData) -> str:
    """What each run reached: its method, the settings that differ, Recall@k, the ceiling, EM and F1."""
    head = ("<tr><th>run</th><th>method</th><th>settings that differ</th><th>questions</th>"
            + "".join(f"<th>{c}</th>" for c in _QUALITY_COLS[:len(TABLE_KS)])
            + f'<th title="{_CEILING_TITLE}">R@k ceiling</th>'
              '<th title="questions with gold passages that are not in the index">gold not in index</th>'
            + "".join(f"<th>{c}</th>" for c in _QUALITY_COLS[len(TABLE_KS):]) + "</tr>")
    best = _best(data.rows)
    body = "".join(_quality_row(data, j, best) for j in range(len(data.rows)))
    return f'<div class="wide"><table id="summary">{head}{body}</table></div>'


def _cost_row(row: dict, j: int) -> str:
    stages = ", ".join(f"{k} {_num(v, 2)}" for k, v in row["seconds"].items()) or "–"
    tokens = "–" if row["llm_tokens_in"] is None else f'{row["llm_tokens_in"]:,} / {row["llm_tokens_out"] or 0:,}'
    cells = [f'<td>{html.escape(row["name"])}</td>',
             f'<td class="num" data-key="questions_per_second">{_num(row["questions_per_second"])}</td>',
             f'<td class="num" data-key="wall_seconds">{_num(row["wall_seconds"], 1)}</td>',
             f'<td class="stages" data-key="seconds">{html.escape(stages)}</td>',
             f'<td class="num" data-key="llm_tokens">{html.escape(tokens)}</td>',
             f'<td class="num" data-key="peak_rss_mb">{_num(row["peak_rss_mb"], 0)}</td>',
             f'<td data-key="reasoning_paths">{html.escape(_paths_cell(row["reasoning_paths"]))}</td>']
    return f'<tr data-run="{j}">' + "".join(cells) + "</tr>"


def _cost_table(data: ReportData) -> str:
    """What each run cost: speed, seconds per stage, LLM tokens, peak memory, and its reasoning paths.
    A table of its own beside the summary, so that neither outgrows a 1,280 px window."""
    head = ("<tr><th>run</th><th>questions/s</th><th>wall s</th><th>seconds per stage</th>"
            "<th>LLM tokens in / out</th><th>peak RSS MiB</th><th>reasoning paths</th></tr>")
    body = "".join(_cost_row(row, j) for j, row in enumerate(data.rows))
    return f'<div class="wide"><table id="cost">{head}{body}</table></div>'


def _funnel_tables(data: ReportData) -> str:
    out = []
    for run, hops in zip(data.runs, data.funnels):
        if not hops:
            continue
        stages = [s for s in FUNNEL_STAGES if any(s in h for h in hops)]
        rows = "".join(f"<tr><td>hop {t}</td>" + "".join(f'<td class="num">{_num(h.get(s))}</td>' for s in stages)
                       + "</tr>" for t, h in enumerate(hops, 1))
        out.append(f"<table><tr><th>{html.escape(run.name)}</th>"
                   + "".join(f"<th>{s}</th>" for s in stages) + f"</tr>{rows}</table>")
    return '<div class="plots">' + "".join(out) + "</div>"


def _funnel_hint(data: ReportData) -> str:
    """In place of a missing funnel: how to get it. Hop diagnostics are off by default (they copy each
    hop's seeds and local subgraph to the host), so a default run has none."""
    without = [run.name for run, hops in zip(data.runs, data.funnels) if not hops]
    if not without:
        return ""
    if len(without) == len(data.runs):
        what = "No run here records hop diagnostics, so there is no funnel to draw. To get it, rerun"
    else:
        what = f"Not in the funnel (no hop diagnostics recorded): {', '.join(without)}. To add a run, rerun it as"
    return (f'<div class="note" id="funnel-hint">{html.escape(what)} a multi-hop method (HyperProve) with '
            "<code>hpengine eval ... engine.diagnostics=true</code>. It is off by default: it copies each hop's "
            "seeds and local subgraph to the host.</div>")


def _metric_select(measures: list) -> str:
    """The "solved" filter's measure; its default by :func:`default_measure` (R@5 unless every run has
    LLM answers)."""
    chosen = default_measure(measures)
    options = (("em", "EM = 1"), ("r5", "all gold passages in top 5"))
    return ('<select id="f-metric" title="what counts as solved">'
            + "".join(f'<option value="{v}"{" selected" if v == chosen else ""}>{t}</option>' for v, t in options)
            + "</select>")


def _plot(name: str, svg: str) -> str:
    return f'<div class="plot" data-plot="{html.escape(name)}">{svg}</div>'


def _summary_section(data: ReportData) -> str:
    return ('<h2 id="s-summary">Summary</h2>' + _summary_table(data)
            + '<div class="sub">Best value per column in bold. R@k, EM and F1 as in the run files; '
              "R@k cut-offs a run file does not hold are computed from its records' ranked passages. "
              "R@k ceiling: the highest Recall@k any method can reach, since gold passages that are not in "
              "the index are never retrieved (1 when the index holds every gold passage).</div>"
            + '<h3 id="s-cost">Speed, memory and LLM use</h3>' + _cost_table(data))


def _plots_sections(data: ReportData, names: list) -> str:
    """Recall@k curves, the question-type bars (when the questions have types) and the per-hop funnel."""
    out = '<h2 id="s-recall">Recall@k</h2>' + _plot("recall", recall_curve_svg(names, CURVE_KS, data.curves))
    if data.facets:
        out += ('<h2 id="s-types">By question type</h2><div class="plots">'
                + "".join(_plot(f"facet-{facet}", facet_svg(facet, table, names))
                          for facet, table in data.facets.items()) + "</div>")
    out += ('<h2 id="s-funnel">Per-hop funnel</h2><div class="sub">Share of the gold passages reached '
            "by the dense seeds, the local subgraph, the selected facts, the linked articles and the "
            "chain so far, per hop.</div>" + _funnel_hint(data))
    if any(data.funnels):
        out += _plot("funnel", funnel_svg(names, data.funnels)) + _funnel_tables(data)
    return out


def _questions_section(data: ReportData, names: list) -> str:
    """The browser's controls and list, its data as JSON and the script that fills the list."""
    payload = {"runs": [{"name": name, "measure": m} for name, m in zip(names, data.measures)],
               "questions": data.questions}
    return ('<h2 id="s-questions">Questions</h2><div id="controls">'
            '<input id="f-search" type="search" placeholder="search questions, answers, titles, ids">'
            '<select id="f-type" title="question type"></select>'
            '<select id="f-gold" title="questions whose gold passages are not all in the index">'
            '<option value="">any gold</option><option value="missing">gold not in index</option>'
            '<option value="present">all gold in index</option></select>'
            'solved by <select id="f-a"></select> and not by <select id="f-b"></select>'
            + _metric_select(data.measures)
            + '<span id="count" class="sub"></span></div><div id="questions"></div>'
              '<button id="more" type="button">show more</button>'
              f'<script type="application/json" id="report-data">{json_script_text(payload)}</script>'
              f"<script>{SCRIPT}</script>")


def render_page(data: ReportData, title: str = "hpengine evaluation report") -> str:
    """The whole page as one HTML string (styles, plots and script inline)."""
    e = html.escape
    names = [run.name for run in data.runs]
    n = data.rows[0]["questions"] if data.rows else 0
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{e(title)}</title>"
             '<meta name="viewport" content="width=device-width, initial-scale=1">'
             f"<style>{CSS}</style></head><body>",
             f"<h1>{e(title)}</h1><div class=\"sub\">{len(names)} run(s) over {n} questions: "
             f"{e(', '.join(names))}</div>"]
    parts += [f'<div class="note">{e(note)}</div>' for note in data.notes]
    parts += [_summary_section(data), _plots_sections(data, names), _questions_section(data, names), "</body></html>"]
    return "\n".join(parts)


__all__ = ["NOT_AVAILABLE", "json_script_text", "render_page"]
