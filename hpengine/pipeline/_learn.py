"""Training the learned method's ranker on an engine's own candidates (docs/methods/learned.md):
the candidates and features of every question (:meth:`LearnedRetriever.candidate_features`, one
engine batch at a time), the gold passages among them, and a listwise fit
(:func:`hpengine.nn.fit_ranker`)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from hpengine.nn import fit_ranker, save_ranker
from hpengine.pipeline.retrievers._learned import FEATURES, LearnedRetriever


@dataclass
class RankerExamples:
    """The candidates of N questions as a trainer reads them.

    Attributes:
        candidates: int64 ``[N, C]`` passage ids (``-1`` padded).
        features: float32 ``[N, C, len(FEATURES)]``.
        valid: bool ``[N, C]``; gold: bool ``[N, C]`` (the candidate is a gold passage).
        num_gold: int64 ``[N]`` gold passages of each question in the index (recall's denominator).
    """

    candidates: Tensor
    features: Tensor
    valid: Tensor
    gold: Tensor
    num_gold: Tensor

    def __len__(self) -> int:
        return self.candidates.shape[0]

    def subset(self, rows) -> "RankerExamples":
        rows = torch.as_tensor(rows, dtype=torch.int64)
        return RankerExamples(*(t.index_select(0, rows) for t in (self.candidates, self.features, self.valid,
                                                                    self.gold, self.num_gold)))

    @staticmethod
    def concat(parts: list) -> "RankerExamples":
        """Examples of several engines (their candidate widths padded to the widest)."""
        width = max(p.candidates.shape[1] for p in parts)

        def pad(t, value):
            extra = width - t.shape[1]
            return torch.nn.functional.pad(t, (0, 0, 0, extra) if t.dim() == 3 else (0, extra), value=value)

        return RankerExamples(torch.cat([pad(p.candidates, -1) for p in parts]),
                              torch.cat([pad(p.features, 0.0) for p in parts]),
                              torch.cat([pad(p.valid, False) for p in parts]),
                              torch.cat([pad(p.gold, False) for p in parts]),
                              torch.cat([p.num_gold for p in parts]))


def gold_passage_ids(index, questions: list) -> list:
    """Per question (:class:`~hpengine.eval.Question`), the ids of its distinct gold passages that
    the index holds (matched by title and text, whitespace stripped, as evaluation does)."""
    where = {(p.title.strip(), p.text.strip()): i for i, p in enumerate(index.passages)}
    return [sorted({where[g] for g in ((t.strip(), x.strip()) for t, x in q.gold_passages) if g in where})
            for q in questions]


def ranker_examples(engine, questions: list, *, batch_size: int = 64, progress=None) -> RankerExamples:
    """The learned method's candidates and features of every question, with its gold passages.

    Args:
        engine: an :class:`~hpengine.pipeline.Engine` with ``retriever="learned"`` (no ranker is read).
        questions: :class:`~hpengine.eval.Question` s with gold passages.
        progress: ``(done, total) -> None`` after each batch.
    """
    retriever = engine.retriever
    if not isinstance(retriever, LearnedRetriever):
        raise TypeError(f"ranker_examples needs an engine with retriever='learned' (got {engine.method!r})")
    gold_ids = gold_passage_ids(engine.index, questions)
    parts = []
    for start in range(0, len(questions), batch_size):
        texts = [q.question for q in questions[start:start + batch_size]]
        with torch.no_grad():
            emb = engine.steps.encode(texts)
            cand, feats, valid = retriever.candidate_features(texts, emb)
        cand, feats, valid = cand.cpu(), feats.cpu(), valid.cpu()
        gold = torch.zeros_like(valid)
        for i, ids in enumerate(gold_ids[start:start + batch_size]):
            if ids:
                gold[i] = torch.isin(cand[i], torch.tensor(ids)) & valid[i]
        num_gold = torch.tensor([len(ids) for ids in gold_ids[start:start + batch_size]])
        parts.append(RankerExamples(cand, feats, valid, gold, num_gold))
        if progress is not None:
            progress(min(start + batch_size, len(questions)), len(questions))
    return RankerExamples.concat(parts)


def rank_candidates(model, examples: RankerExamples) -> Tensor:
    """int64 ``[N, C]``: candidate positions of each question, best first by ``model``."""
    with torch.no_grad():
        scores = model(examples.features, examples.valid)
    return torch.sort(scores, dim=1, descending=True, stable=True).indices


def recall_at(order: Tensor, examples: RankerExamples, k: int) -> float:
    """Mean recall@k over the questions with gold passages in the index, the candidates taken in
    ``order`` ``[N, C]`` (a gold passage outside the candidates is a miss)."""
    has = examples.num_gold > 0
    hits = examples.gold.gather(1, order[:, :k]).sum(1).float()
    return float((hits[has] / examples.num_gold[has].float()).mean()) if bool(has.any()) else float("nan")


def list_order(examples: RankerExamples, name: str = "fusion") -> Tensor:
    """int64 ``[N, C]``: the candidates in the order of one of the lists (:data:`LISTS`; its
    passages first, by their ``rr_<name>`` feature; the others after, in candidate order)."""
    rr = examples.features[..., FEATURES.index(f"rr_{name}")].masked_fill(~examples.valid, -1.0)
    return torch.sort(rr, dim=1, descending=True, stable=True).indices


def fusion_order(examples: RankerExamples) -> Tensor:
    """int64 ``[N, C]``: the candidates in the fusion's order, the baseline a ranker is measured
    against (:func:`list_order`)."""
    return list_order(examples, "fusion")


def train_ranker(examples: RankerExamples, *, hidden: int = 16, epochs: int = 300, lr: float = 0.01,
                 weight_decay: float = 1e-4, seed: int = 0, log=None):
    """:func:`hpengine.nn.fit_ranker` on ``examples``."""
    return fit_ranker(examples.features, examples.gold, examples.valid, hidden=hidden, epochs=epochs, lr=lr,
                      weight_decay=weight_decay, seed=seed, log=log)


def ranker_meta(engine, examples: RankerExamples, **settings) -> dict:
    """What a ranker file records: the feature schema, the index's encoder, the candidate settings."""
    cfg = engine.config
    return {"features": list(FEATURES), "encoder": str(engine.index.meta.get("encoder", "")),
            "candidate_width": cfg.candidate_width, "passage_width": cfg.passage_width,
            "questions": len(examples), **settings}


def write_ranker(model, path, meta: dict) -> None:
    """Write a trained ranker with ``meta`` (:func:`ranker_meta`) to ``path`` (safetensors)."""
    save_ranker(model, path, meta)
