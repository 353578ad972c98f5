"""The numbers a report shows per run: labels, the settings that differ, Recall@k from the records'
ranks, the recall ceiling, the summary rows, the question-type breakdown and the runs' warnings."""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from hpengine.eval._report_data import CURVE_KS, TABLE_KS, Run

_MUSIQUE_HOPS = re.compile(r"^(\d+)hop")


def run_label(result: dict) -> str:
    """``dense``, ``hyperprove + LLM (qwen...)``: the method of one run."""
    retriever = str(result.get("retriever", "?"))
    if not result.get("llm"):
        return retriever
    llm = (result.get("config", {}).get("model") or {}).get("llm") or ""
    return f"{retriever} + LLM" + (f" ({Path(str(llm)).name})" if llm else "")


def make_runs(results: list, paths: list | None = None, names: list | None = None) -> list:
    """Wrap results as :class:`Run` with unique names (the file stem is added to repeated labels)."""
    from hpengine.errors import UserError

    paths = list(paths) if paths is not None else [""] * len(results)
    if names is not None and len(names) != len(results):
        raise UserError(f"names must give one name per run ({len(results)} runs) (got {len(names)} names)")
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


def _mean(values: list) -> float | None:
    """The mean of the finite values; ``None`` when there are none (undefined: shown as "–")."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def recall_curves(runs: list) -> list:
    """Recall@k for ``CURVE_KS`` per run from the records' ``gold_ranks``, averaged over the
    questions with gold (``None`` entries when no question has gold)."""
    return [[_mean([recall_from_ranks(r["gold_ranks"], k) for r in run.records]) for k in CURVE_KS]
            for run in runs]


def gold_missing(record: dict) -> int:
    """How many of the record's gold passages are not in the index (never retrieved by any method)."""
    return len(record["gold_ranks"]) - record["gold_in_index"]


def recall_ceiling(records: list) -> tuple:
    """``(ceiling, questions)``: the highest Recall@k any method could reach on the index of these
    records (the mean over questions with gold of the share of their gold passages that are in the
    index; ``None`` when no question has gold), and how many questions have gold passages that are
    not in the index.

    Example:
        >>> recall_ceiling([{"gold_ranks": [0, None], "gold_in_index": 1},
        ...                 {"gold_ranks": [None], "gold_in_index": 1}, {"gold_ranks": [], "gold_in_index": 0}])
        (0.75, 1)
    """
    shares = [r["gold_in_index"] / len(r["gold_ranks"]) for r in records if r["gold_ranks"]]
    return _mean(shares), sum(gold_missing(r) > 0 for r in records)


def summary_rows(runs: list, curves: list) -> list:
    """One row per run. Recall@k, EM and F1 are the run file's own top-level values where it has them
    (``recall@2``, ``recall@5`` by default); other cut-offs come from the curve, with
    ``recall_source[k] = "curve"``. ``recall_ceiling`` and ``gold_not_in_index``: see
    :func:`recall_ceiling`."""
    rows = []
    for run, curve in zip(runs, curves):
        r = run.result
        recall, source = {}, {}
        for k in TABLE_KS:
            if f"recall@{k}" in r:
                recall[k], source[k] = r[f"recall@{k}"], "run"
            else:
                recall[k], source[k] = (curve[CURVE_KS.index(k)] if k in CURVE_KS else None), "curve"
        ceiling, lacking = recall_ceiling(run.records)
        rows.append({
            "name": run.name, "path": run.path, "method": run_label(r),
            "questions": r.get("num_questions", len(run.records)),
            "recall": recall, "recall_source": source,
            "recall_ceiling": ceiling, "gold_not_in_index": lacking,
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
                per_run.append({"n": len(recs), "recall@5": _mean([record_recall5(r) for r in recs]),
                                "em": _mean([r.get("em") for r in recs])})
            table[value] = per_run
        out[facet] = table
    return out


def record_recall5(rec: dict) -> float | None:
    """The record's ``recall@5``; from its ranks when the run's ``eval.recall_ks`` left it out."""
    if "recall@5" in rec:
        return rec["recall@5"]
    if rec["gold_ranks"]:  # [] (no gold): undefined, like evaluate()'s null recall
        return recall_from_ranks(rec["gold_ranks"], 5)
    return None


def run_warnings(runs: list) -> list:
    """What ``evaluate()`` warned about (e.g. gold passages missing from the index), each warning once
    with the runs it applies to: ``"dense, ppr: ..."``, or ``"all runs: ..."`` when every one of
    several runs has it."""
    by_text: dict = {}
    for run in runs:
        for warning in run.result.get("warnings") or []:
            by_text.setdefault(str(warning), {})[run.name] = None
    return [f"{'all runs' if len(names) == len(runs) > 1 else ', '.join(names)}: {text}"
            for text, names in by_text.items()]


__all__ = ["differing_settings", "facet_breakdown", "gold_missing", "make_runs", "question_type", "recall_ceiling",
           "recall_curves", "recall_from_ranks", "record_recall5", "run_label", "run_warnings", "summary_rows"]
