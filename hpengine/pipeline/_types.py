"""What the engine returns: a prediction per question with its evidence chain (every method)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ChainFact:
    """One fact of the evidence chain."""

    text: str
    title: str  # its passage's title
    passage: int  # its passage id
    score: float  # the method's score (HyperProve: alpha-mixed; PPR: PPR mass)
    distance: int  # BFS distance to the carried frontier; -1 when unreachable, first hop, or not a walk


@dataclass
class HopRecord:
    """One hop of the chain: the sub-query it searched, the answer read from it, its facts."""

    subquery: str  # as rewritten with the answers of earlier hops
    answer: str
    facts: list  # ChainFact
    linked: list = field(default_factory=list)  # passage ids linked to the hop (titled with its bridges / answer)


@dataclass
class Prediction:
    """The engine's output for one question."""

    question: str
    answer: str
    chain: list  # HopRecord per hop
    passages: list  # ranked passage ids
    diagnostics: list = field(default_factory=list)  # per hop: {stage: passage ids}
    notes: list = field(default_factory=list)  # what the method did differently for this question
    # methods with several reasoning paths: per path {"steps": n, "answer": str, "score": float}, in
    # path order; path i's steps are the next n records of ``chain``
    paths: list = field(default_factory=list)

    def to_dict(self, index) -> dict:
        out = {
            "question": self.question, "prediction": self.answer,
            "retrieved": [index.passages[p].title for p in self.passages],
            "chain": [{"subquery": h.subquery, "answer": h.answer, "facts": [vars(f) for f in h.facts],
                       "linked": [index.passages[p].title for p in h.linked]} for h in self.chain],
        }
        if self.notes:
            out["notes"] = list(self.notes)
        if self.paths:
            out["paths"] = [dict(x) for x in self.paths]
        return out


def path_stats(preds: list) -> dict | None:
    """Over the predictions with reasoning paths (:attr:`Prediction.paths`): paths and distinct
    paths per question (by their (sub-question, answer) steps and final answer), steps per path,
    and how many votes were unanimous (every path's normalised answer the same). None when no
    prediction has paths."""
    from hpengine.eval import normalize_answer

    with_paths = [p for p in preds if p.paths]
    if not with_paths:
        return None
    steps = distinct = unanimous = paths = 0
    for p in with_paths:
        start, seen = 0, set()
        for path in p.paths:
            n = path["steps"]
            seen.add((tuple((h.subquery, h.answer) for h in p.chain[start:start + n]), path["answer"]))
            start += n
            steps += n
        paths += len(p.paths)
        distinct += len(seen)
        unanimous += len({normalize_answer(x["answer"]) for x in p.paths}) == 1
    q = len(with_paths)
    return {"questions": q, "paths_per_question": round(paths / q, 3),
            "distinct_paths_per_question": round(distinct / q, 3), "steps_per_path": round(steps / paths, 3),
            "unanimous_votes": unanimous}

