"""What a method hands the engine (:class:`Retrieved`) and what the engine returns: a prediction
per question with its evidence chain (every method)."""
from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor


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


@dataclass
class Retrieved:
    """A method's own work on a batch of Q questions; the engine finishes the rest (the answer
    where the method gives none, the chain record, padding, predictions).

    Attributes:
        ranked: int64 ``[Q, W]`` passage ids, best first, ``-1`` padded.
        evidence: ``(fact ids, scores)`` int64 / float ``[Q, K]`` that the no-LLM answer reads
            (their best bridge entity); None: the facts of the top ``reader_passages`` passages.
        hop_facts: per question, the :class:`ChainFact` list of the one chain hop a single-step
            method records (answered with the final answer); None: no chain.
        hop_linked: per question, the passage ids linked to that hop (None: none).
        answers: per question, the answer the method reached itself (multi-step methods); None:
            the engine answers (LLM: reads the top ``reader_passages`` passages; no LLM: from
            ``evidence``).
        chains: per question, the :class:`HopRecord` list of a method that records its own hops.
        diagnostics, notes, paths: per question (None: empty), as in :class:`Prediction`.
    """

    ranked: Tensor
    evidence: tuple | None = None
    hop_facts: list | None = None
    hop_linked: list | None = None
    answers: list | None = None
    chains: list | None = None
    diagnostics: list | None = None
    notes: list | None = None
    paths: list | None = None
