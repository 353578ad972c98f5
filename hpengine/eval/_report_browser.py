"""The per-question browser's data: per question its text, gold answers and passages, facets, and
per run the answer, metrics, ranked passages with the gold ones marked and the evidence chain."""
from __future__ import annotations

from hpengine.eval._report_summary import gold_missing, record_recall5


def _gold_keys(question) -> list:
    # the corpus loader strips whitespace; evaluate() compares gold passages the same way
    return list(dict.fromkeys((t.strip(), x.strip()) for t, x in question.gold_passages))


def _chain(rec: dict) -> list:
    """The record's evidence chain as the browser shows it: per hop the sub-question, its answer,
    the facts (title, text, score, BFS distance) and the linked titles."""
    return [{"subquery": h.get("subquery", ""), "answer": h.get("answer", ""),
             "facts": [{k: f.get(k) for k in ("title", "text", "score", "distance")} for f in h.get("facts", [])],
             "linked": list(h.get("linked", []))} for h in rec.get("chain", [])]


def _run_entry(rec: dict) -> dict:
    """One run's part of a question: answer, EM/F1, notes, Recall@5, gold passages not in its index,
    ranked titles with gold marks, evidence chain."""
    marks = dict.fromkeys(r for r in rec["gold_ranks"] if r is not None)
    return {"answer": rec.get("prediction", ""), "em": rec.get("em"), "f1": rec.get("f1"),
            "notes": [str(n) for n in rec.get("notes", [])],
            "recall5": record_recall5(rec), "gold_missing": gold_missing(rec),
            "ranked": [[t, i in marks] for i, t in enumerate(rec.get("retrieved", []))],
            "chain": _chain(rec)}


def run_measure(result: dict) -> str:
    """How the browser judges one run's answer to a question: ``"em"`` (exact match) when an LLM wrote
    the run's answers (the run file's ``"llm": true``), else ``"r5"`` (every gold passage in the top 5).
    A no-LLM answer is the evidence's best bridge entity, a by-product of the retrieval: the run is
    judged by what it retrieved.

    Example:
        >>> run_measure({"llm": False}), run_measure({"llm": True})
        ('r5', 'em')
    """
    return "em" if result.get("llm") else "r5"


def default_measure(measures: list) -> str:
    """The question filter's default measure: EM when every run has LLM answers, else R@5, the one
    measure every run has (a no-LLM run would fail EM on questions it retrieved for).

    Example:
        >>> default_measure(["em", "r5"]), default_measure(["em", "em"])
        ('r5', 'em')
    """
    return "em" if measures and all(m == "em" for m in measures) else "r5"


def browser_records(runs: list, questions: dict, facets_by_id: dict) -> list:
    """Per question (first run's order): id, text, gold answers and passages, facets, whether some run's
    index lacks a gold passage (``gold_not_in_index``), and per run the answer, EM/F1, Recall@5,
    gold passages not in its index (``gold_missing``), ranked passages with gold marks and the
    evidence chain."""
    by_run = [{str(r["id"]): r for r in run.records} for run in runs]
    out = []
    for rec0 in runs[0].records:
        qid = str(rec0["id"])
        q = questions.get(qid)
        entry = {"id": qid, "question": rec0.get("question") or (q.question if q else ""),
                 "gold": list(rec0.get("gold") or (q.answers if q else [])),
                 "facets": facets_by_id.get(qid, {}),
                 "passages": [[t, x] for t, x in _gold_keys(q)] if q else [],
                 "runs": [_run_entry(lookup[qid]) for lookup in by_run]}  # same question sets: check_same_questions
        entry["gold_not_in_index"] = any(r["gold_missing"] for r in entry["runs"])
        out.append(entry)
    return out


__all__ = ["browser_records", "default_measure", "run_measure"]
