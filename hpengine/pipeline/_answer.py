"""What :meth:`Engine.ask <hpengine.pipeline.Engine.ask>` returns: an answer whose passages carry
their title, text and score, with the evidence chain: the engine's prediction, resolved against the
index for a reader (``Engine.answer`` keeps passage ids, for batch jobs)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class ScoredPassage:
    """One ranked passage of an :class:`Answer`.

    Attributes:
        id: the passage's position in the index.
        title, text: the passage.
        score: the cosine of the question's and the passage's embeddings; None when the index holds
            no passage embeddings (``embed_passages=False``). The order is the method's ranking,
            which for the graph methods is not the order of this score.
    """

    id: int
    title: str
    text: str
    score: float | None = None


@dataclass
class Answer:
    """The engine's answer to one question, for a reader.

    Attributes:
        question: the question.
        answer: with an LLM, its answer; without one (``is_llm_answer`` False), the best bridge
            entity of the evidence: a pointer into the passages, not a read answer.
        passages: :class:`ScoredPassage` list, best first (the method's ranking).
        chain: the evidence chain, one :class:`~hpengine.pipeline.HopRecord` per hop (its
            ``subquery``, ``answer`` and ``facts``: :class:`~hpengine.pipeline.ChainFact` with
            ``text``, ``title`` and ``score``).
        notes: what the method did differently for this question (e.g. a dense fallback).
        is_llm_answer: whether an LLM read ``answer``.
    """

    question: str
    answer: str
    passages: list
    chain: list
    notes: list = field(default_factory=list)
    is_llm_answer: bool = False

    def __str__(self) -> str:
        label = "A" if self.is_llm_answer else "best bridge entity (no LLM)"
        lines = [f"Q: {self.question}", f"{label}: {self.answer or '(none found)'}"]
        for rank, p in enumerate(self.passages[:5], 1):
            score = "" if p.score is None else f" ({p.score:.3f})"
            lines.append(f"  {rank}. {p.title}{score}")
        for t, hop in enumerate(self.chain, 1):
            facts = "; ".join(f.text for f in hop.facts[:2])
            lines.append(f"  hop {t}: {hop.subquery!r} -> {hop.answer!r}: {facts}")
        return "\n".join(lines)


def answers_from_predictions(predictions: list, index, question_emb: Tensor | None, *,
                             is_llm_answer: bool = False) -> list:
    """One :class:`Answer` per :class:`~hpengine.pipeline.Prediction`, its passage ids resolved
    against ``index`` and scored by cosine with the question.

    Shapes:
        question_emb ``[Q, D]`` (the engine's query embeddings of the predictions' questions);
        ``index.passage_emb`` ``[P, D]``.
    """
    width = max((len(p.passages) for p in predictions), default=0)
    scores = [[None] * width for _ in predictions]
    if index.passage_emb is not None and question_emb is not None and width:
        emb = index.passage_emb
        ids = torch.tensor([list(p.passages) + [0] * (width - len(p.passages)) for p in predictions],
                           dtype=torch.int64, device=emb.device)  # [Q, W], padding scored and dropped
        rows = emb.index_select(0, ids.reshape(-1)).view(*ids.shape, -1).float()  # [Q, W, D]
        # one host copy for the batch: the answers' printable numbers
        scores = torch.einsum("qwd,qd->qw", rows, question_emb.float().to(emb.device)).tolist()
    answers = []
    for pred, row in zip(predictions, scores):
        passages = [ScoredPassage(int(i), index.passages[i].title, index.passages[i].text, s)
                    for i, s in zip(pred.passages, row)]
        answers.append(Answer(pred.question, pred.answer, passages, list(pred.chain), list(pred.notes),
                              is_llm_answer))
    return answers
