"""One differentiable HyperProve hop as a module: the discrete selection of the library op,
differentiable scores."""
from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from hpengine.config import RetrievalConfig
from hpengine.nn._base import check_queries, unit_rows
from hpengine.nn._graph import GraphModule
from hpengine.retrieval import DenseIndex, HopResult, hyperprove_hop


class DifferentiableHyperProveHop(GraphModule):
    """One batched HyperProve hop (docs/methods/hyperprove.md, :func:`hpengine.retrieval.hyperprove_hop`) as a module.

    The selection (dense seeds, random walk, local subgraph, BFS, distances to the frontier,
    top-K) is the library op run under ``torch.no_grad`` on the current values: it is discrete
    and passes **no gradient**. The selected facts are then re-scored differentiably with the
    op's own formula, ``alpha * cos(q, x_k) + (1 - alpha) * struct_k`` with ``struct_k = 1 / d_k``
    (0 when unreachable or with an empty frontier), so the returned scores equal the op's
    (float32 rounding aside) and carry gradients to the query embeddings, to ``fact_emb`` and
    to ``alpha`` when they are trainable (``trainable=("fact_emb", "alpha")``) or set as
    ``nn.Parameter`` afterwards. ``struct`` is a function of integer distances: constant.

    Args:
        graph: the :class:`~hpengine.HyperGraph` (``index.graph``).
        fact_emb: float ``[H, D]`` fact embeddings.
        cfg: hop parameters (:class:`~hpengine.config.RetrievalConfig`); ``cfg.alpha`` initialises
            the ``alpha`` buffer, the rest is used as given.
        persistent, trainable: see :class:`~hpengine.nn.IndexModule`.

    Shapes:
        forward: query_embeddings ``[Q, D]``, frontier ``[Q, F]``, active ``[Q]`` ->
        :class:`~hpengine.retrieval.HopResult` (``fact_ids, scores, distance [Q, K]``,
        ``frontier [Q, F + K]``, ``seeds [Q, S]``, ``subgraph [Q, M]``).

    Example:
        >>> from hpengine.graph import HyperGraph
        >>> g = HyperGraph.from_incidence(torch.tensor([[0, 1, 1, 2], [0, 0, 1, 1]]), torch.tensor([0, 1, 2]),
        ...                               num_entities=2, num_passages=3)
        >>> hop = DifferentiableHyperProveHop(g, torch.eye(3), RetrievalConfig(num_seeds=1, top_k=2, alpha=0.5))
        >>> q = torch.tensor([[1.0, 0.2, 0.0]], requires_grad=True)
        >>> out = hop(q)
        >>> out.fact_ids
        tensor([[0, 1]])
        >>> out.scores.sum().backward(); q.grad.shape
        torch.Size([1, 3])
    """

    trainable_names = ("fact_emb", "alpha")

    def __init__(self, graph, fact_emb: Tensor, cfg: RetrievalConfig | None = None, *, persistent: bool = False,
                 trainable=()):
        super().__init__(persistent=persistent, trainable=trainable)
        cfg = cfg or RetrievalConfig()
        if not isinstance(cfg, RetrievalConfig):
            raise TypeError(f"cfg must be a hpengine.config.RetrievalConfig (got {type(cfg).__name__})")
        self.cfg = cfg
        self._add_graph(graph)
        if fact_emb.shape[0] != self.num_facts:
            raise ValueError(f"fact_emb must have H={self.num_facts} rows (got shape {tuple(fact_emb.shape)})")
        self._add_tensor("fact_emb", fact_emb)
        self._add_tensor("alpha", torch.tensor(float(cfg.alpha), device=fact_emb.device))
        self._workspace: dict = {}

    @classmethod
    def from_index(cls, index, cfg: RetrievalConfig | None = None, **kwargs) -> "DifferentiableHyperProveHop":
        return cls(index.graph, index.fact_emb, cfg, **kwargs)

    def _apply(self, fn, recurse: bool = True):
        self._workspace = {}
        return super()._apply(fn, recurse)

    def _dense_index(self) -> DenseIndex:
        emb = self.fact_emb.detach()
        r = self.cfg
        return self._cached_for("dense_index", emb, lambda: DenseIndex.from_config(emb, r))

    def forward(self, query_embeddings: Tensor, frontier: Tensor | None = None, active: Tensor | None = None,
                seeds: Tensor | None = None) -> HopResult:
        """The hop for ``Q`` queries; ``frontier``, ``active``, ``seeds`` as in
        :func:`~hpengine.retrieval.hyperprove_hop`. ``scores`` is differentiable, ``-inf`` at padding."""
        check_queries(query_embeddings, self.fact_emb)
        # the selection uses alpha's current value: one host read per call (not a hot loop)
        alpha_value = float(self.alpha.detach())
        cfg = self.cfg if alpha_value == self.cfg.alpha else dataclasses.replace(self.cfg, alpha=alpha_value)
        with torch.no_grad():
            hop = hyperprove_hop(self.graph, self.fact_emb.detach(), query_embeddings.detach(), frontier,
                                 active=active, seeds=seeds, index=self._dense_index(), cfg=cfg,
                                 workspace=self._workspace)
        return hop._replace(scores=self.score(query_embeddings, hop.fact_ids, hop.distance))

    def score(self, query_embeddings: Tensor, fact_ids: Tensor, distance: Tensor) -> Tensor:
        """``alpha * cos + (1 - alpha) * struct`` of chosen facts, differentiable.

        Shapes:
            query_embeddings ``[Q, D]``, fact_ids int64 ``[Q, n]`` (``-1`` padded), distance int64
            ``[Q, n]`` (``-1``: unreachable) -> ``[Q, n]`` (float32, or float64 for float64 queries).
        """
        dtype = torch.float64 if query_embeddings.dtype == torch.float64 else torch.float32
        q = unit_rows(query_embeddings.to(dtype))
        facts = unit_rows(self.fact_emb[fact_ids.clamp(min=0)].to(dtype))  # [Q, n, D]
        cos = (facts * q.unsqueeze(1)).sum(-1)
        struct = torch.where(distance >= 1, 1.0 / distance.clamp(min=1).to(dtype), torch.zeros_like(cos))
        alpha = self.alpha.to(dtype)
        score = alpha * cos + (1.0 - alpha) * struct
        return torch.where(fact_ids >= 0, score, torch.full_like(score, float("-inf")))
