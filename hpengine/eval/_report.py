"""Evaluation reports: ``hpengine eval`` outputs in, one self-contained HTML page out.

The page (:func:`build_report`) holds a summary table (one row per run), Recall@k curves
(k = 1..10), a breakdown by question type, the per-hop funnel of runs with diagnostics and a
per-question browser. Plots are matplotlib figures inlined as SVG; the browser is a small
inline script over the runs' records embedded as JSON. Nothing is fetched when the page opens.

This module computes the numbers; ``_report_plots`` draws them and ``_report_page`` lays out
the HTML. Library code: no Hydra, explicit arguments.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Cut-offs of the Recall@k curves; the summary table shows the ones in ``TABLE_KS``.
CURVE_KS = tuple(range(1, 11))
TABLE_KS = (1, 2, 5, 10)
#: Run-file keys a report needs; anything else is optional.
_REQUIRED_KEYS = ("num_questions", "records")
_MUSIQUE_HOPS = re.compile(r"^(\d+)hop")


@dataclass
class Run:
    """One ``hpengine eval`` output, as read by :func:`load_run`.

    Attributes:
        name: label on the page (retriever, ``+ LLM``, and the file stem when labels repeat).
        result: the JSON object as written by ``evaluate()`` / ``run_eval()``.
        path: the file it came from ("" for an in-memory result).
    """

    name: str
    result: dict
    path: str = ""

    @property
    def records(self) -> list:
        return self.result["records"]


@dataclass
class ReportData:
    """What the page shows, computed from the runs and (optionally) their question file.

    Attributes:
        runs: the runs, in the order given.
        rows: summary-table rows, one dict per run (see :func:`summary_rows`).
        differing: config keys whose values differ between the runs, ``{key: [value per run]}``.
        curves: Recall@k for ``CURVE_KS``, one list per run (``None`` entries: not computable).
        curve_source: how the curves were computed: ``"ranks"`` (exact, from ``gold_ranks``),
            ``"titles"`` (approximate: gold passages matched by title) or ``"none"``.
        facets: question-type breakdowns, ``{facet: {value: [per-run {"n", "recall@5", "em"}]}}``.
        funnels: per run, its ``hop_diagnostics`` (``None`` when the run has none).
        questions: per question, the record for the browser (see :func:`browser_records`).
        notes: remarks shown at the top of the page (approximations, missing files).
    """

    runs: list
    rows: list
    differing: dict
    curves: list
    curve_source: str
    facets: dict
    funnels: list
    questions: list
    notes: list = field(default_factory=list)


def default_report_path(run_path: str | os.PathLike) -> str:
    """Where ``hpengine report RUN.json`` writes its page: ``RUN.html`` beside the run file.

    Example:
        >>> default_report_path("runs/dense.json")
        'runs/dense.html'
    """
    path = Path(run_path)
    return str(path.with_suffix(".html") if path.suffix == ".json" else path.with_name(path.name + ".html"))


def load_run(path: str | os.PathLike) -> dict:
    """Read one ``hpengine eval`` output file and check it is one.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: not JSON, or not an eval output (names the file and the missing key).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"run file {path} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None
    check_run(result, path)
    return result


def check_run(result: Any, where: str = "run") -> None:
    """Raise ``ValueError`` naming ``where`` unless ``result`` looks like an ``evaluate()`` output."""
    if not isinstance(result, dict):
        raise ValueError(f"{where}: expected the JSON object written by `hpengine eval output=...` "
                         f"(got {type(result).__name__})")
    missing = [k for k in _REQUIRED_KEYS if k not in result]
    if missing:
        raise ValueError(f"{where}: not an `hpengine eval` output: missing key(s) {', '.join(missing)} "
                         f"(got keys {', '.join(sorted(result)[:8]) or 'none'})")
    records = result["records"]
    if not isinstance(records, list) or not all(isinstance(r, dict) and "id" in r for r in records):
        raise ValueError(f"{where}: 'records' must be a list of objects with an 'id' "
                         f"(got {type(records).__name__})")


def check_same_questions(runs: list) -> None:
    """Refuse runs over different question sets, naming the runs and an id that differs.

    Raises:
        ValueError: when two runs' record ids are not the same set.
    """
    first = runs[0]
    ids = {str(r["id"]) for r in first.records}
    for run in runs[1:]:
        other = {str(r["id"]) for r in run.records}
        if other != ids:
            extra = sorted(other - ids)[:1] or sorted(ids - other)[:1]
            raise ValueError(
                f"runs on different question sets: {first.path or first.name} ({len(ids)} questions) and "
                f"{run.path or run.name} ({len(other)} questions) (got question id {extra[0]!r} in only one "
                f"of them; compare runs of the same question file)")


def run_label(result: dict) -> str:
    """``dense``, ``hyperprove + LLM (qwen...)``: the method of one run."""
    retriever = str(result.get("retriever", "?"))
    if not result.get("llm"):
        return retriever
    llm = (result.get("config", {}).get("model") or {}).get("llm") or ""
    return f"{retriever} + LLM" + (f" ({Path(str(llm)).name})" if llm else "")


def make_runs(results: list, paths: list | None = None, names: list | None = None) -> list:
    """Wrap results as :class:`Run` with unique names (the file stem is added to repeated labels)."""
    paths = list(paths) if paths is not None else [""] * len(results)
    if names is not None and len(names) != len(results):
        raise ValueError(f"names must give one name per run ({len(results)} runs) (got {len(names)} names)")
    labels = list(names) if names is not None else [run_label(r) for r in results]
    if names is None:
        for i, label in enumerate(labels):
            if labels.count(label) > 1:
                labels[i] = f"{label} [{Path(paths[i]).stem or i + 1}]"
    if len(set(labels)) != len(labels):  # still repeated (same stems, or given names): number them
        labels = [f"{label} #{i + 1}" for i, label in enumerate(labels)]
    return [Run(name=n, result=r, path=str(p)) for n, r, p in zip(labels, results, paths)]


def _flatten(obj: Any, prefix: str = "") -> dict:
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: obj}


def differing_settings(runs: list) -> dict:
    """Settings that differ between the runs: ``{key: [value per run]}`` over the flattened
    ``config`` (``retrieval.*``, ``engine.*``, ``model.*``, ``index``).
    The question file is left out (the runs answer the same questions by construction), and so are
    the retriever and the LLM flag, which the method column shows, and the keys that not every run
    has (one method's own parameters, e.g. PPR's damping next to a HyperProve run)."""
    flat = []
    for run in runs:
        config = dict(run.result.get("config") or {})
        config.pop("questions", None)
        flat.append({k: v for k, v in _flatten(config).items() if k != "engine.retriever"})
    out = {}
    for key in (k for k in flat[0] if all(k in f for f in flat[1:])):
        values = [f[key] for f in flat]
        if len(runs) > 1 and any(v != values[0] for v in values[1:]):
            out[key] = values
    return out


# --- per-question gold and Recall@k ---------------------------------------------------------


def question_type(qid: str, meta: dict | None) -> dict:
    """The facets of one question: ``type`` (2Wiki, HotpotQA when present), ``level`` (HotpotQA
    when present) and ``hops`` (MuSiQue, from ids such as ``2hop__150763_14904``).

    Example:
        >>> question_type("3hop1__9_8_7", None)
        {'hops': '3-hop'}
    """
    facets = {}
    meta = meta or {}
    for key in ("type", "level"):
        if isinstance(meta.get(key), (str, int)) and str(meta[key]):
            facets[key] = str(meta[key])
    match = _MUSIQUE_HOPS.match(str(qid))
    if match:
        facets["hops"] = f"{match.group(1)}-hop"
    return facets


def _gold_keys(question) -> list:
    # the corpus loader strips whitespace; evaluate() compares gold passages the same way
    return list(dict.fromkeys((t.strip(), x.strip()) for t, x in question.gold_passages))


def gold_ranks_from_titles(retrieved: list, gold: list) -> list:
    """Approximate ``gold_ranks`` for run files written before the field existed: each gold
    passage takes the first not-yet-taken position whose title equals its title. Exact when
    titles are unique (2Wiki, HotpotQA); MuSiQue repeats titles, where a same-titled other
    paragraph can be counted as the gold one.

    Example:
        >>> gold_ranks_from_titles(["A", "B", "A"], [("A", "a1"), ("A", "a2"), ("C", "c")])
        [0, 2, None]
    """
    taken, ranks = set(), []
    for title, _ in gold:
        rank = next((i for i, t in enumerate(retrieved) if t == title and i not in taken), None)
        if rank is not None:
            taken.add(rank)
        ranks.append(rank)
    return ranks


def recall_from_ranks(ranks: list, k: int) -> float:
    """``|gold in top-k| / |gold|`` from the 0-based ranks of the gold passages (``None``: not
    retrieved); ``nan`` without gold, like :func:`hpengine.eval.recall_at_k`.

    Example:
        >>> recall_from_ranks([0, 3, None], 2)
        0.3333333333333333
    """
    if not ranks:
        return float("nan")
    return sum(r is not None and r < k for r in ranks) / len(ranks)


def record_ranks(record: dict, question) -> tuple:
    """``(ranks, source)``: ``gold_ranks`` recorded by ``evaluate()`` ("ranks"), else matched by title
    against the question file's gold passages ("titles"), else ``(None, "none")``."""
    if isinstance(record.get("gold_ranks"), list):
        return record["gold_ranks"], "ranks"
    if question is not None:
        return gold_ranks_from_titles(record.get("retrieved", []), _gold_keys(question)), "titles"
    return None, "none"


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None and not math.isnan(v)]
    return sum(values) / len(values) if values else None


def recall_curves(runs: list, questions: dict) -> tuple:
    """``(curves, source)``: Recall@k for ``CURVE_KS`` per run, averaged over questions with gold
    (``None`` entries where no run record allows it), and the least exact source used."""
    curves, sources = [], set()
    for run in runs:
        per_k = {k: [] for k in CURVE_KS}
        for rec in run.records:
            ranks, source = record_ranks(rec, questions.get(str(rec["id"])))
            sources.add(source)
            if ranks is None:
                continue
            for k in CURVE_KS:
                per_k[k].append(recall_from_ranks(ranks, k))
        curves.append([_mean(per_k[k]) for k in CURVE_KS])
    source = "none" if "none" in sources else "titles" if "titles" in sources else "ranks"
    return curves, source


def summary_rows(runs: list, curves: list) -> list:
    """One row per run. Recall@k, EM and F1 are the run file's own top-level values where it has them
    (``recall@2``, ``recall@5`` by default); other cut-offs come from the curve, with
    ``recall_source[k] = "curve"``."""
    rows = []
    for run, curve in zip(runs, curves):
        r = run.result
        recall, source = {}, {}
        for k in TABLE_KS:
            if f"recall@{k}" in r:
                recall[k], source[k] = r[f"recall@{k}"], "run"
            else:
                recall[k], source[k] = (curve[CURVE_KS.index(k)] if k in CURVE_KS else None), "curve"
        rows.append({
            "name": run.name, "path": run.path, "method": run_label(r),
            "questions": r.get("num_questions", len(run.records)),
            "recall": recall, "recall_source": source,
            "em": r.get("em"), "f1": r.get("f1"),
            "questions_per_second": r.get("questions_per_second"), "wall_seconds": r.get("wall_seconds"),
            "seconds": dict(r.get("seconds") or {}),
            "llm_tokens_in": r.get("llm_tokens_in"), "llm_tokens_out": r.get("llm_tokens_out"),
            "peak_rss_mb": r.get("peak_rss_mb"), "reasoning_paths": r.get("reasoning_paths"),
        })
    return rows


def facet_breakdown(runs: list, facets_by_id: dict) -> dict:
    """``{facet: {value: [{"n", "recall@5", "em"} per run]}}`` over the facets the questions have;
    Recall@5 per question is the record's own ``recall@5`` when present, else from its ranks."""
    names = list(dict.fromkeys(f for facets in facets_by_id.values() for f in facets))
    out = {}
    for facet in names:
        values = sorted({facets[facet] for facets in facets_by_id.values() if facet in facets})
        table = {}
        for value in values:
            per_run = []
            for run in runs:
                recs = [r for r in run.records if facets_by_id.get(str(r["id"]), {}).get(facet) == value]
                per_run.append({"n": len(recs), "recall@5": _mean([_record_recall5(r) for r in recs]),
                                "em": _mean([r.get("em") for r in recs])})
            table[value] = per_run
        out[facet] = table
    return out


def _record_recall5(rec: dict) -> float | None:
    if "recall@5" in rec:
        return rec["recall@5"]
    if rec.get("gold_ranks"):  # [] (no gold): undefined, like evaluate()'s null recall
        return recall_from_ranks(rec["gold_ranks"], 5)
    return None


# --- the per-question browser ----------------------------------------------------------------


def browser_records(runs: list, questions: dict, facets_by_id: dict) -> list:
    """Per question (first run's order): id, text, gold answers and passages, facets, and per run the
    answer, EM/F1, Recall@5, ranked passages with gold marks and the evidence chain."""
    by_run = [{str(r["id"]): r for r in run.records} for run in runs]
    out = []
    for rec0 in runs[0].records:
        qid = str(rec0["id"])
        q = questions.get(qid)
        entry = {"id": qid, "question": rec0.get("question") or (q.question if q else ""),
                 "gold": list(rec0.get("gold") or (q.answers if q else [])),
                 "facets": facets_by_id.get(qid, {}),
                 "passages": [[t, x] for t, x in _gold_keys(q)] if q else [], "runs": []}
        for lookup in by_run:
            rec = lookup.get(qid, {})
            ranks, _ = record_ranks(rec, q)
            marks = dict.fromkeys(r for r in (ranks or ()) if r is not None)
            entry["runs"].append({
                "answer": rec.get("prediction", ""), "em": rec.get("em"), "f1": rec.get("f1"),
                "notes": [str(n) for n in rec.get("notes", [])],
                "recall5": _record_recall5(rec) if _record_recall5(rec) is not None
                else (recall_from_ranks(ranks, 5) if ranks else None),
                "ranked": [[t, i in marks] for i, t in enumerate(rec.get("retrieved", []))],
                "chain": [{"subquery": h.get("subquery", ""), "answer": h.get("answer", ""),
                           "facts": [{k: f.get(k) for k in ("title", "text", "score", "distance")}
                                     for f in h.get("facts", [])],
                           "linked": list(h.get("linked", []))} for h in rec.get("chain", [])],
            })
        out.append(entry)
    return out


# --- assembling --------------------------------------------------------------------------------


def _questions_path(result: dict, run_path: str) -> str | None:
    config = result.get("config") or {}
    if "questions" not in config:
        return None
    given = config["questions"]
    if not given:  # evaluate()'s default: the built-in demo questions
        from hpengine.graph import builtin_questions_path

        return str(builtin_questions_path())
    candidates = [given] if os.path.isabs(given) else [given, os.path.join(os.path.dirname(run_path), given)]
    return next((c for c in candidates if os.path.isfile(c)), None)


def collect(runs: list, questions: list | None = None, questions_path: str | None = None) -> ReportData:
    """Compute everything the page shows (:class:`ReportData`) from checked, same-question runs.

    Args:
        runs: :class:`Run` objects (see :func:`make_runs`); at least one.
        questions: the question records (``hpengine.eval.Question``); default: read from
            ``questions_path``, else from the first run's ``config.questions``.
        questions_path: a question file to read when ``questions`` is not given.
    """
    from hpengine.eval._questions import load_questions

    notes = []
    if questions is None:
        path = questions_path or _questions_path(runs[0].result, runs[0].path)
        if path:
            questions = load_questions(path)
        else:
            given = (runs[0].result.get("config") or {}).get("questions")
            notes.append(f"question file {given!r} not found: gold passages and question types are not shown "
                         f"(pass questions=PATH)" if given else
                         "the run has no question file in its config: gold passages are not shown")
            questions = []
    for run in runs:  # what evaluate() warned about (e.g. gold passages missing from the index)
        notes += [f"{run.name}: {w}" for w in run.result.get("warnings") or []]
    by_id = {q.id: q for q in questions}
    facets_by_id = {str(r["id"]): question_type(str(r["id"]), by_id[str(r["id"])].meta
                                                if str(r["id"]) in by_id else None) for r in runs[0].records}
    curves, source = recall_curves(runs, by_id)
    if source == "titles":
        notes.append("Recall@k curves (and R@k not in the run files) match gold passages by title: these runs "
                     "predate `gold_ranks` in the records. Exact where titles are unique (2Wiki, HotpotQA); "
                     "MuSiQue repeats titles, where this can over-count.")
    elif source == "none":
        notes.append("Recall@k curves need `gold_ranks` in the records or the question file.")
    return ReportData(runs=runs, rows=summary_rows(runs, curves), differing=differing_settings(runs),
                      curves=curves, curve_source=source, facets=facet_breakdown(runs, facets_by_id),
                      funnels=[run.result.get("hop_diagnostics") for run in runs],
                      questions=browser_records(runs, by_id, facets_by_id), notes=notes)


def build_report(results: list, *, paths: list | None = None, names: list | None = None,
                 questions: list | None = None, questions_path: str | None = None,
                 title: str = "hpengine evaluation report") -> str:
    """One self-contained HTML page comparing ``hpengine eval`` results.

    Args:
        results: eval outputs (dicts as written by ``run_eval``); all over the same questions.
        paths: the files they came from (shown on the page, and used to find a relative
            ``config.questions``); default none.
        names: labels per run; default: retriever (+ LLM), with the file stem when repeated.
        questions: the question records; default: read from ``questions_path`` or the first
            run's ``config.questions`` (the built-in demo questions when that is empty).
        questions_path: question file to read when ``questions`` is not given.
        title: the page title.

    Returns:
        The HTML text.

    Raises:
        ValueError: no results, a result that is not an eval output, or runs over different
            question sets (naming them).
    """
    if not results:
        raise ValueError("a report needs at least one run (got none)")
    paths = list(paths) if paths is not None else [""] * len(results)
    for i, (result, path) in enumerate(zip(results, paths)):
        check_run(result, path or f"run {i + 1}")
    runs = make_runs(results, paths, names)
    check_same_questions(runs)
    from hpengine.eval._report_page import render_page

    return render_page(collect(runs, questions, questions_path), title=title)


def write_report(runs: list, out: str | os.PathLike | None = None, **kwargs) -> str:
    """Write :func:`build_report` of ``runs`` (run-file paths or result dicts) to ``out``
    (default: :func:`default_report_path` of the first run file), atomically; returns the path."""
    paths = [os.fspath(r) if isinstance(r, (str, os.PathLike)) else "" for r in runs]
    results = [load_run(p) if p else r for r, p in zip(runs, paths)]
    if out is None:
        if not paths or not paths[0]:
            raise ValueError("out= is required when the first run is not a file (got an in-memory result)")
        out = default_report_path(paths[0])
    html = build_report(results, paths=paths, **kwargs)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, out)
    return str(out)


__all__ = ["ReportData", "Run", "build_report", "collect", "default_report_path", "load_run", "write_report"]
