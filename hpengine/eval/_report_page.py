"""The report's HTML: inline CSS, inline SVG plots, an inline script for the per-question browser."""
from __future__ import annotations

import html
import json
import math
import re

from hpengine.eval._report_browser import default_measure
from hpengine.eval._report_data import CURVE_KS, TABLE_KS, ReportData
from hpengine.eval._report_plots import FUNNEL_STAGES, facet_svg, funnel_svg, recall_curve_svg

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1600px;padding:16px 24px;
color:#1d2330;background:#fff}
h1{font-size:22px;margin:4px 0 2px}
h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #e3e6ec;padding-bottom:4px}
.sub{color:#5b6475;font-size:12.5px}
.note{background:#fff7e0;border-left:3px solid #e0a800;padding:6px 10px;margin:8px 0;
font-size:12.5px}
table{border-collapse:collapse;font-size:12.5px}th,td{border:1px solid #e3e6ec;padding:4px 7px;vertical-align:top}
th{background:#f4f6f9;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.best{font-weight:700;background:#eef7ee}.settings{font-family:ui-monospace,monospace;
font-size:11.5px;white-space:pre-wrap}
.stages{font-family:ui-monospace,monospace;font-size:11.5px}
#summary td,#cost td{overflow-wrap:anywhere}#summary td.num,#cost td.num{overflow-wrap:normal;white-space:nowrap}
#summary .path{font-size:11.5px}#summary td.settings{min-width:26ch}h3{font-size:15px;margin:18px 0 6px}
.plot svg{max-width:100%;height:auto}.wide{overflow-x:auto}.plots{display:flex;flex-wrap:wrap;gap:12px}
#controls{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:8px 0;position:sticky;top:0;background:#fff;
padding:6px 0;z-index:2;border-bottom:1px solid #e3e6ec}
#controls input[type=search]{width:320px;padding:4px 6px}#controls select{padding:3px}
.q{border:1px solid #e3e6ec;border-radius:6px;margin:6px 0}.q>summary{cursor:pointer;padding:6px 10px;list-style:none}
.q>summary::-webkit-details-marker{display:none}.q[open]>summary{background:#f4f6f9}
.qid{color:#5b6475;font-size:11.5px;margin-right:6px}.tag{display:inline-block;font-size:11px;padding:0 6px;
border-radius:8px;background:#e8ecf3;margin-left:4px}
.badge{display:inline-block;font-size:11px;padding:0 6px;border-radius:8px;margin-left:4px}
.ok{background:#d8f0d8;color:#1c5e1c}.bad{background:#f6dada;color:#8a1f1f}.miss{background:#fff0c2;color:#6b5200}
.part{background:#fde6c8;color:#7a4300}.plain{background:#e8ecf3;color:#1d2330}
.body{padding:6px 12px 10px}.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(300px,1fr));gap:12px}
.col{border-left:3px solid #cfd6e2;padding-left:8px}.col h4{margin:4px 0}
ol.ranked{margin:2px 0 6px 18px;padding:0}ol.ranked li.gold{color:#1c5e1c;font-weight:600}
ol.ranked li.gold::after{content:" \\2605 gold"}
.hop{margin:4px 0 6px}.fact{font-size:12.5px;margin:1px 0 1px 12px}.fact .s{font-family:ui-monospace,monospace;
color:#5b6475;font-size:11.5px}.gp{font-size:12.5px;margin:2px 0}.gp b{color:#1c5e1c}
button{padding:4px 10px}
"""

_SCRIPT = r"""
(function(){
const D = JSON.parse(document.getElementById('report-data').textContent);
const R = D.runs, Q = D.questions;
const $ = id => document.getElementById(id);
const ENT = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'};
const esc = s => String(s == null ? '' : s).replace(/[&<>"]/g, c => ENT[c]);
// metrics: null (undefined, e.g. recall without gold) and non-finite ("n/a" in the data) print n/a
const fmt = v => Number.isFinite(v) ? v.toFixed(3) : 'n/a';
const solved = (q, j, m) => { const r = q.runs[j]; return m === 'em' ? r.em === 1 : r.recall5 === 1; };
// a run's badge by its own measure (R[j].measure): EM for LLM answers, R@5 for a no-LLM run, whose
// answer is a by-product of the retrieval; partial recall is amber, no gold (null recall) plain
const grade = (r, j) => R[j].measure === 'em' ? (r.em === 1 ? 'ok' : 'bad')
  : r.recall5 === 1 ? 'ok' : r.recall5 > 0 ? 'part' : Number.isFinite(r.recall5) ? 'bad' : 'plain';
// the runs whose index lacks some of the question's gold passages (runs may use different indexes)
const lacking = q => q.runs.map((r, j) => r.gold_missing > 0 ? R[j].name : null).filter(n => n !== null);
let PAGE = 50, shown = PAGE, matches = [];
for (const q of Q) q.hay = [q.id, q.question, q.gold.join(' '), ...q.runs.map(r => r.answer),
  ...q.passages.map(p => p[0])].join(' ').toLowerCase();
function fill(sel, opts){ for (const [v, t] of opts){ const o = document.createElement('option'); o.value = v;
  o.textContent = t; sel.appendChild(o);} }
const facets = [...new Set(Q.flatMap(q => Object.keys(q.facets)))];
const typeSel = $('f-type');
fill(typeSel, [['', 'all types']]);
for (const f of facets) fill(typeSel, [...new Set(Q.map(q => q.facets[f]).filter(v => v != null))].sort()
  .map(v => [f + '=' + v, f + ': ' + v]));
fill($('f-a'), [['', 'any run'], ...R.map((r, j) => [String(j), r.name])]);
fill($('f-b'), [['', 'any run'], ...R.map((r, j) => [String(j), r.name])]);
function card(q){
  const d = document.createElement('details'); d.className = 'q'; d.dataset.id = q.id;
  const badges = q.runs.map((r, j) => `<span class="badge ${grade(r, j)}" data-measure="${R[j].measure}" `
    + `title="${esc(R[j].name)}: EM ${fmt(r.em)}, F1 ${fmt(r.f1)}, R@5 ${fmt(r.recall5)}">${esc(R[j].name)} `
    + (R[j].measure === 'em' ? `EM ${r.em === 1 ? '✓' : '✗'} R@5 ${fmt(r.recall5)}` : `R@5 ${fmt(r.recall5)}`)
    + '</span>').join('');
  const tags = Object.entries(q.facets).map(([k, v]) => `<span class="tag">${esc(v)}</span>`).join('');
  const names = lacking(q);
  const miss = q.gold_not_in_index ? `<span class="badge miss" title="gold passages not in the index of `
    + `${esc(names.length === R.length ? 'every run' : names.join(', '))}: no method can retrieve them">`
    + 'gold not in index</span>' : '';
  d.innerHTML = `<summary><span class="qid">${esc(q.id)}</span>${esc(q.question)}${tags}${miss}<br>${badges}</summary>`;
  d.addEventListener('toggle', () => {  // the body is built on first open: the DOM stays small
    if (d.open && !d.querySelector('.body')) d.insertAdjacentHTML('beforeend', body(q)); });
  return d;
}
function body(q){
  let h = `<div class="body"><div><b>gold answer:</b> ${esc(q.gold.join(' | '))}</div>`;
  if (q.passages.length){ h += '<div><b>gold passages:</b>' + q.passages.map(p =>
    `<div class="gp"><b>${esc(p[0])}</b>: ${esc(p[1])}</div>`).join('') + '</div>'; }
  h += '<div class="cols">';
  q.runs.forEach((r, j) => {
    const em = R[j].measure === 'em';
    h += `<div class="col"><h4>${esc(R[j].name)}</h4><div><b>answer${em ? '' : ' (no LLM: the evidence\'s '
      + 'bridge entity)'}:</b> ${esc(r.answer)} <span class="badge ${em ? grade(r, j) : 'plain'}">EM ${fmt(r.em)}`
      + `</span> F1 ${fmt(r.f1)}</div>`
      + r.notes.map(n => `<div class="sub">note: ${esc(n)}</div>`).join('')
      + (r.gold_missing > 0 ? `<div class="sub gm">${r.gold_missing} gold passage(s) not in this run's index: `
        + 'never retrieved</div>' : '')
      + `<div><b>ranked passages</b> ${em ? `(R@5 ${fmt(r.recall5)})` : `<span class="badge ${grade(r, j)}">`
        + `R@5 ${fmt(r.recall5)}</span>`}:</div><ol class="ranked">`
      + r.ranked.map(p => `<li class="${p[1] ? 'gold' : ''}">${esc(p[0])}</li>`).join('') + '</ol>';
    if (r.chain.length){ h += '<div><b>evidence chain</b></div>';
      r.chain.forEach((c, t) => {
        h += `<div class="hop">hop ${t + 1}: <i>${esc(c.subquery)}</i> → <b>${esc(c.answer)}</b>`
        + c.facts.map(f => `<div class="fact"><span class="s" title="fact score; BFS distance to the carried frontier">`
          + `${f.score == null ? '' : fmt(f.score)} `
          + `d=${f.distance == null || f.distance < 0 ? '–' : Number.isFinite(f.distance) ? f.distance : 'n/a'}`
          + `</span> [${esc(f.title)}] ${esc(f.text)}</div>`).join('')
        + (c.linked.length ? `<div class="fact">linked: ${c.linked.map(esc).join(', ')}</div>` : '') + '</div>'; }); }
    h += '</div>'; });
  return h + '</div></div>';
}
function apply(){
  const text = $('f-search').value.trim().toLowerCase().split(/\s+/).filter(Boolean);
  const type = typeSel.value, a = $('f-a').value, b = $('f-b').value, m = $('f-metric').value;
  const g = $('f-gold').value;
  const [fk, fv] = type ? [type.slice(0, type.indexOf('=')), type.slice(type.indexOf('=') + 1)] : [null, null];
  matches = Q.filter(q => text.every(w => q.hay.includes(w)) && (!fk || q.facets[fk] === fv)
    && (a === '' || solved(q, +a, m)) && (b === '' || !solved(q, +b, m))
    && (g === '' || (g === 'missing') === q.gold_not_in_index));
  shown = PAGE; render();
}
function render(){
  const list = $('questions'); list.textContent = '';
  for (const q of matches.slice(0, shown)) list.appendChild(card(q));
  $('count').textContent = `${matches.length} of ${Q.length} questions`;
  $('more').style.display = matches.length > shown ? '' : 'none';
}
$('more').addEventListener('click', () => { shown += PAGE; render(); });
for (const id of ['f-search', 'f-type', 'f-gold', 'f-a', 'f-b', 'f-metric']) $(id).addEventListener('input', apply);
apply();
})();
"""


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
              f"<script>{_SCRIPT}</script>")


def render_page(data: ReportData, title: str = "hpengine evaluation report") -> str:
    """The whole page as one HTML string (styles, plots and script inline)."""
    e = html.escape
    names = [run.name for run in data.runs]
    n = data.rows[0]["questions"] if data.rows else 0
    parts = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{e(title)}</title>"
             '<meta name="viewport" content="width=device-width, initial-scale=1">'
             f"<style>{_CSS}</style></head><body>",
             f"<h1>{e(title)}</h1><div class=\"sub\">{len(names)} run(s) over {n} questions: "
             f"{e(', '.join(names))}</div>"]
    parts += [f'<div class="note">{e(note)}</div>' for note in data.notes]
    parts += [_summary_section(data), _plots_sections(data, names), _questions_section(data, names), "</body></html>"]
    return "\n".join(parts)


__all__ = ["NOT_AVAILABLE", "json_script_text", "render_page"]
