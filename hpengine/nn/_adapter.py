"""A query adapter learned through the retrieval modules (docs/methods/learned.md, "Learning into the
question's embedding"): a linear map of the frozen question embeddings, identity at the start,
trained so that the gold passages and their facts score higher among their nearest keys. The
learned method applies it before its members run, so HyperProve's and PPR's seeds move with it,
not only the final ordering."""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.nn._differentiable_dense import DifferentiableDense


class QueryAdapter(torch.nn.Module):
    """``normalize(q W^T)``: a ``[D, D]`` linear map, identity at the start, onto unit vectors.

    Shapes:
        forward: float ``[Q, D]`` -> float ``[Q, D]`` (unit rows, the input's dtype).

    Example:
        >>> a = QueryAdapter(4)
        >>> q = torch.nn.functional.normalize(torch.randn(3, 4), dim=1)
        >>> torch.allclose(a(q), q)
        True
    """

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.weight = torch.nn.Parameter(torch.eye(dim))

    def forward(self, query: Tensor) -> Tensor:
        if query.dim() != 2 or query.shape[1] != self.dim:
            raise ValueError(f"query embeddings must be [Q, {self.dim}] (got {tuple(query.shape)})")
        out = torch.nn.functional.normalize(query.float() @ self.weight.t(), dim=1)
        return out.to(query.dtype)

    def distance_to_identity(self) -> Tensor:
        """``||W - I||^2``: the pull toward the encoder's own embedding."""
        return (self.weight - torch.eye(self.dim, device=self.weight.device)).pow(2).sum()


def dense_listwise_loss(module: DifferentiableDense, query: Tensor, gold: Tensor, candidates: int,
                        temperature: float) -> Tensor:
    """``-log sum_gold softmax(cos / T)`` over a question's ``candidates`` nearest keys plus its
    gold keys, averaged over the questions with a gold key.

    Shapes:
        query float ``[Q, D]``; gold int64 ``[Q, G]`` key ids (``-1`` padded) -> scalar.
    """
    top = module.search(query, candidates)  # which keys compete: no gradient
    known = (gold.unsqueeze(2) == top.unsqueeze(1)).any(2)
    ids = torch.cat([top, torch.where(known, torch.full_like(gold, -1), gold)], dim=1)
    is_gold = ((ids.unsqueeze(2) == gold.unsqueeze(1)) & (gold.unsqueeze(1) >= 0)).any(2) & (ids >= 0)
    has = is_gold.any(1)
    if not bool(has.any()):
        return query.sum() * 0.0
    logp = torch.log_softmax(module.score(query, ids) / temperature, dim=1)
    return -torch.logsumexp(logp.masked_fill(~is_gold, float("-inf")), dim=1)[has].mean()


def fit_query_adapter(parts: list, *, steps: int = 150, lr: float = 2e-3, temperature: float = 0.05,
                      fact_weight: float = 0.5, to_identity: float = 1.0, candidates: int = 50, seed: int = 0,
                      log=None) -> QueryAdapter:
    """A :class:`QueryAdapter` trained full-batch with Adam on one or several indexes at once.

    Args:
        parts: per index, ``(passage_emb [P, D], fact_emb [H, D], query_emb [Q, D],
            gold_passages [Q, G], gold_facts [Q, F])`` (unit rows; int64 ids, ``-1`` padded);
            every index has the same encoder (one ``D``).
        fact_weight: weight of the loss over facts (HyperProve's and PPR's seeds) beside the loss
            over passages.
        to_identity: weight of ``||W - I||^2``.
        log: ``(step, loss) -> None`` every 50 steps and at the end.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> keys = torch.nn.functional.normalize(torch.randn(30, 8, generator=g), dim=1)
        >>> q = torch.nn.functional.normalize(keys[:6] + torch.randn(6, 8, generator=g), dim=1)
        >>> gold = torch.arange(6).unsqueeze(1)
        >>> losses = []
        >>> _ = fit_query_adapter([(keys, keys, q, gold, gold)], steps=60, lr=0.02, to_identity=0.0,
        ...                       log=lambda step, loss: losses.append(loss))
        >>> losses[-1] < losses[0]
        True
    """
    torch.manual_seed(seed)
    dim = parts[0][2].shape[1]
    adapter = QueryAdapter(dim).to(parts[0][2].device)
    modules = [(DifferentiableDense(passage_emb, k=5), DifferentiableDense(fact_emb, k=5), emb.float(), gp, gf)
               for passage_emb, fact_emb, emb, gp, gf in parts]
    opt = torch.optim.Adam(adapter.parameters(), lr=lr)
    for step in range(steps):
        loss = sum(_one_loss(adapter, m, temperature, fact_weight, candidates) for m in modules) / len(modules)
        total = loss + to_identity * adapter.distance_to_identity()
        opt.zero_grad()
        total.backward()
        opt.step()
        if log is not None and (step % 50 == 0 or step == steps - 1):
            log(step, float(loss.detach()))
    return adapter.eval()


def _one_loss(adapter: QueryAdapter, part: tuple, temperature: float, fact_weight: float, candidates: int) -> Tensor:
    passages, facts, emb, gold_passages, gold_facts = part
    q = adapter(emb)
    loss = dense_listwise_loss(passages, q, gold_passages, candidates, temperature)
    if fact_weight:
        loss = loss + fact_weight * dense_listwise_loss(facts, q, gold_facts, candidates, temperature)
    return loss
