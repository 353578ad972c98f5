"""Training the learned method's ranker on an engine's own candidates (docs/methods/learned.md):
the candidates and features of every question (:meth:`LearnedRetriever.candidate_features`, one
engine batch at a time), the gold passages among them, and a listwise fit
(:func:`hpengine.nn.fit_ranker`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from hpengine.config import TrainJobConfig
# is_ranker_file: re-exported for the jobs, which reach hpengine.nn only through the pipeline
from hpengine.nn import fit_query_adapter, fit_ranker, is_ranker_file, save_ranker  # noqa: F401
from hpengine.pipeline.retrievers._learned import FEATURES, LearnedRetriever


@dataclass
class RankerExamples:
    """The candidates of N questions as a trainer reads them.

    Attributes:
        candidates: int64 ``[N, C]`` passage ids (``-1`` padded).
        features: float32 ``[N, C, len(FEATURES)]``.
        valid: bool ``[N, C]``; gold: bool ``[N, C]`` (the candidate is a gold passage).
        num_gold: int64 ``[N]`` gold passages of each question in the index (recall's denominator).
        question_set: int64 ``[N]``, the question set (file) each question came from: 0 for the
            examples of one set (the default), ``0 .. S-1`` from :meth:`of_sets`; what
            :func:`set_weights` balances.
    """

    candidates: Tensor
    features: Tensor
    valid: Tensor
    gold: Tensor
    num_gold: Tensor
    question_set: Tensor | None = None

    def __post_init__(self):
        if self.question_set is None:
            self.question_set = torch.zeros(self.candidates.shape[0], dtype=torch.int64)

    def __len__(self) -> int:
        return self.candidates.shape[0]

    def subset(self, rows) -> "RankerExamples":
        rows = torch.as_tensor(rows, dtype=torch.int64)
        return RankerExamples(*(t.index_select(0, rows) for t in (self.candidates, self.features, self.valid,
                                                                    self.gold, self.num_gold, self.question_set)))

    @staticmethod
    def concat(parts: list) -> "RankerExamples":
        """Examples of several batches or engines in one (their candidate widths padded to the
        widest), each question keeping its ``question_set``."""
        width = max(p.candidates.shape[1] for p in parts)

        def pad(t, value):
            extra = width - t.shape[1]
            return torch.nn.functional.pad(t, (0, 0, 0, extra) if t.dim() == 3 else (0, extra), value=value)

        return RankerExamples(torch.cat([pad(p.candidates, -1) for p in parts]),
                              torch.cat([pad(p.features, 0.0) for p in parts]),
                              torch.cat([pad(p.valid, False) for p in parts]),
                              torch.cat([pad(p.gold, False) for p in parts]),
                              torch.cat([p.num_gold for p in parts]),
                              torch.cat([p.question_set for p in parts]))

    @staticmethod
    def of_sets(parts: list) -> "RankerExamples":
        """:meth:`concat` of the examples of several question sets, part ``i`` as question set ``i``."""
        return RankerExamples.concat([dataclasses.replace(p, question_set=torch.full((len(p),), i, dtype=torch.int64))
                                      for i, p in enumerate(parts)])


def set_weights(question_set: Tensor, counted: Tensor | None = None) -> Tensor:
    """float32 ``[N]``: each question's weight in the loss when every question set weighs the same
    whatever its size, ``N_c / (S * n_s)`` for a counted question of set ``s``: ``n_s`` is the set's
    counted questions, ``S`` the sets with one, ``N_c`` all counted questions; so the weights of the
    counted questions average 1, and one set gives each of them 1. ``counted``: bool ``[N]``, the
    questions the loss counts (those with a gold candidate, as :func:`hpengine.nn.listwise_loss`
    does; None: all); the others weigh 0, so a set's share does not shrink with its questions
    whose gold passages no member found.

    Example:
        >>> set_weights(torch.tensor([0, 0, 0, 1]))
        tensor([0.6667, 0.6667, 0.6667, 2.0000])
        >>> set_weights(torch.tensor([0, 0, 1, 1]), counted=torch.tensor([True, True, True, False]))
        tensor([0.7500, 0.7500, 1.5000, 0.0000])
    """
    counted = torch.ones_like(question_set, dtype=torch.bool) if counted is None else counted.bool()
    ids, inverse = torch.unique(question_set, return_inverse=True)
    counts = torch.bincount(inverse[counted], minlength=len(ids)).float()
    sets = max(int((counts > 0).sum()), 1)
    weight = float(counted.sum()) / (sets * counts.clamp_min(1.0))
    return torch.where(counted, weight[inverse], torch.zeros(()))


def gold_passage_ids(index, questions: list) -> list:
    """Per question (:class:`~hpengine.eval.Question`), the ids of its distinct gold passages that
    the index holds (matched by title and text, whitespace stripped, as evaluation does)."""
    where = {(p.title.strip(), p.text.strip()): i for i, p in enumerate(index.passages)}
    return [sorted({where[g] for g in ((t.strip(), x.strip()) for t, x in q.gold_passages) if g in where})
            for q in questions]


def ranker_examples(engine, questions: list, *, batch_size: int = 64, adapter=None, progress=None) -> RankerExamples:
    """The learned method's candidates and features of every question, with its gold passages.

    Args:
        engine: an :class:`~hpengine.pipeline.Engine` with ``retriever="learned"`` (no ranker is read).
        questions: :class:`~hpengine.eval.Question` s with gold passages.
        adapter: a :class:`~hpengine.nn.QueryAdapter` the question embeddings go through first
            (the one the ranker will carry), or None.
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
            emb = adapter.to(emb.device)(emb) if adapter is not None else emb
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


def adapter_part(engine, questions: list, *, batch_size: int = 64) -> tuple:
    """What :func:`hpengine.nn.fit_query_adapter` reads of one index: ``(passage_emb [P, D],
    fact_emb [H, D], question_emb [N, D], gold_passages [N, G], gold_facts [N, F])``, the gold
    facts being every fact of a gold passage (int64 ids, ``-1`` padded)."""
    index = engine.index
    if index.passage_emb is None:
        raise ValueError("a query adapter needs passage embeddings (the index was built with embed_passages=False)")
    with torch.no_grad():
        emb = torch.cat([engine.steps.encode([q.question for q in questions[i:i + batch_size]]).float()
                         for i in range(0, len(questions), batch_size)])
    gold = gold_passage_ids(index, questions)
    fact_passage = index.fact_passage
    facts = [torch.nonzero(torch.isin(fact_passage, torch.tensor(ids, device=fact_passage.device))).flatten()
             if ids else fact_passage[:0] for ids in gold]
    return (index.passage_emb, index.fact_emb, emb, _padded([torch.tensor(g, dtype=torch.int64) for g in gold]),
            _padded(facts))


def _padded(rows: list) -> Tensor:
    """int64 ``[N, max(1, longest)]`` of the id lists ``rows``, ``-1`` padded."""
    out = torch.full((len(rows), max([1, *(len(r) for r in rows)])), -1, dtype=torch.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r.cpu()
    return out


def train_adapter(parts: list, *, steps: int = 150, seed: int = 0, log=None):
    """:func:`hpengine.nn.fit_query_adapter` on :func:`adapter_part` s of one or several indexes."""
    device = parts[0][2].device
    parts = [tuple(t.to(device) for t in part) for part in parts]
    return fit_query_adapter(parts, steps=steps, seed=seed, log=log)


def rank_candidates(model, examples: RankerExamples) -> Tensor:
    """int64 ``[N, C]``: candidate positions of each question, best first by ``model``."""
    with torch.no_grad():
        scores = model(examples.features, examples.valid)
    return torch.sort(scores, dim=1, descending=True, stable=True).indices


def recall_at(order: Tensor, examples: RankerExamples, k: int) -> float:
    """Mean recall@k over the questions with gold passages in the index, the candidates taken in
    ``order`` ``[N, C]`` (a gold passage outside the candidates is a miss)."""
    per = recall_per_question(order, examples, k)
    return float(per.mean()) if len(per) else float("nan")


def recall_per_question(order: Tensor, examples: RankerExamples, k: int) -> Tensor:
    """float32 ``[N']``: recall@k of each of the ``N'`` questions with gold passages in the index,
    the candidates taken in ``order`` ``[N, C]`` (what :func:`recall_at` averages)."""
    has = examples.num_gold > 0
    hits = examples.gold.gather(1, order[:, :k]).sum(1).float()
    return hits[has] / examples.num_gold[has].float()


def paired_difference(mine: Tensor, base: Tensor, resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``mine - base`` (float ``[N]`` each, two methods' scores of
    the same N questions) and its 95% percentile interval over the questions resampled with
    replacement (paired: both scores of a question travel together), from a fixed generator so that
    runs repeat; NaN three times for N = 0. How far the sampling of N questions pins a difference down.

    Raises:
        ValueError: ``mine`` and ``base`` are not two ``[N]`` tensors of the same N.

    Example:
        >>> mean, low, high = paired_difference(torch.tensor([1.0, 0.5, 1.0, 0.0]), torch.tensor([0.5, 0.5, 1.0, 0.0]))
        >>> mean, low <= mean <= high
        (0.125, True)
    """
    if mine.dim() != 1 or mine.shape != base.shape:
        raise ValueError(f"paired_difference needs two [N] tensors of the same N (got {tuple(mine.shape)} and "
                         f"{tuple(base.shape)})")
    diff = (mine.float() - base.float()).cpu()
    if len(diff) == 0:
        return float("nan"), float("nan"), float("nan")
    gen = torch.Generator().manual_seed(seed)
    means = diff[torch.randint(len(diff), (resamples, len(diff)), generator=gen)].mean(1)
    low, high = torch.quantile(means, torch.tensor([0.025, 0.975])).tolist()
    return float(diff.mean()), low, high


def list_order(examples: RankerExamples, name: str = "fusion") -> Tensor:
    """int64 ``[N, C]``: the candidates in the order of one of the lists (:data:`LISTS`; its
    passages first, by their ``rr_<name>`` feature; the others after, in candidate order)."""
    rr = examples.features[..., FEATURES.index(f"rr_{name}")].masked_fill(~examples.valid, -1.0)
    return torch.sort(rr, dim=1, descending=True, stable=True).indices


def fusion_order(examples: RankerExamples) -> Tensor:
    """int64 ``[N, C]``: the candidates in the fusion's order, the baseline a ranker is measured
    against (:func:`list_order`)."""
    return list_order(examples, "fusion")


def train_ranker(examples: RankerExamples, *, hidden: int = TrainJobConfig.hidden, epochs: int = TrainJobConfig.epochs,
                 lr: float = TrainJobConfig.lr, weight_decay: float = TrainJobConfig.weight_decay,
                 fusion_prior: bool = TrainJobConfig.fusion_prior, balance_sets: bool = TrainJobConfig.balance_sets,
                 seed: int = 0, log=None, adapter=None):
    """:func:`hpengine.nn.fit_ranker` on ``examples``; ``fusion_prior``: the score starts from the
    fusion's order (``rr_fusion`` as the ranker's prior; docs/methods/learned.md); ``balance_sets``:
    every question set (``examples.question_set``, :meth:`RankerExamples.of_sets`) weighs the same in
    the loss (:func:`set_weights`); ``adapter``: the query adapter the examples' candidates were
    computed with (:func:`ranker_examples`), carried by the ranker. The defaults are
    :class:`hpengine.config.TrainJobConfig`'s."""
    model = fit_ranker(examples.features, examples.gold, examples.valid, hidden=hidden, epochs=epochs, lr=lr,
                       weight_decay=weight_decay, seed=seed, log=log,
                       prior=FEATURES.index("rr_fusion") if fusion_prior else -1,
                       weight=set_weights(examples.question_set, (examples.gold & examples.valid).any(1))
                       if balance_sets else None)
    if adapter is not None:
        model.query_adapter = adapter.cpu().eval()
        for p in model.query_adapter.parameters():
            p.requires_grad_(False)
    return model


def ranker_meta(engine, examples: RankerExamples, **settings) -> dict:
    """What a ranker file records: the feature schema, the index's encoder, the candidate settings."""
    cfg = engine.config
    return {"features": list(FEATURES), "encoder": str(engine.index.meta.get("encoder", "")),
            "candidate_width": cfg.candidate_width, "mention_width": cfg.mention_width,
            "passage_width": cfg.passage_width,
            "questions": len(examples), **settings}


def write_ranker(model, path, meta: dict) -> None:
    """Write a trained ranker with ``meta`` (:func:`ranker_meta`) to ``path`` (safetensors)."""
    save_ranker(model, path, meta)
