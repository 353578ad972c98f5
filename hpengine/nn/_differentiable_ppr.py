"""Differentiable personalised PageRank as a module: PPR seeded from query-entity similarities,
differentiable through the personalization and the solve."""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.nn._base import Retrieved, check_queries, unit_rows
from hpengine.nn._graph import GraphModule
from hpengine.retrieval import dense_topk, personalized_pagerank
from hpengine.sparse import inverse_or_zero

_WEIGHTING = ("softmax", "relu")
_OUTPUT = ("passages", "facts")


class DifferentiablePPR(GraphModule):
    """Passages (or facts) by personalised PageRank mass from the entities each query links to.

    Per query: the ``links`` entity names with the highest cosine (selection under
    ``torch.no_grad``: discrete, no gradient); their cosines ``s`` recomputed differentiably;
    the personalization mass ``softmax(s / temperature)`` (``weighting="softmax"``, the default)
    or ``relu(s - threshold)`` (``"relu"``; a query whose links are all below ``threshold`` gets
    uniform, constant mass over them); then :func:`hpengine.retrieval.personalized_pagerank`
    over the entity-fact-passage star graph, whose custom autograd Function backpropagates
    through the personalization by the adjoint solve. The top-``k`` passages by mass are returned
    (top-k: discrete); their masses are the scores, differentiable with respect to the query
    embeddings and, when trainable, ``entity_emb``.

    This is the differentiable core of the engine's ``ppr`` method
    (:class:`hpengine.pipeline.retrievers.PPRRetriever`), not all of it, and it seeds differently:
    the engine links NER mentions of the question text and adds fact seeds and a passage reset
    (text steps); this module seeds from the embedding similarities alone.

    Args:
        graph: the :class:`~hpengine.HyperGraph` (``index.graph``).
        entity_emb: float ``[V, D]`` entity-name embeddings.
        k: passages (or facts) returned per query.
        links: entities linked per query.
        weighting, temperature, threshold: the personalization (above).
        damping, tol, max_iter, method: of :func:`~hpengine.retrieval.personalized_pagerank`
            (use ``tol`` ~1e-12 for float64 gradient checks).
        output: ``"passages"`` (default) or ``"facts"``: which nodes are ranked.
        persistent, trainable: see :class:`~hpengine.nn.IndexModule` (``trainable=("entity_emb",)``).

    Shapes:
        forward: ``[Q, D] -> ids [Q, k], scores [Q, k]``; :meth:`mass`: ``[Q, D] -> [Q, P]`` (or ``[Q, H]``).
    """

    trainable_names = ("entity_emb",)

    def __init__(self, graph, entity_emb: Tensor, k: int = 5, *, links: int = 5, weighting: str = "softmax",
                 temperature: float = 0.1, threshold: float = 0.0, damping: float = 0.85, tol: float = 1e-6,
                 max_iter: int = 100, method: str = "chebyshev", output: str = "passages", persistent: bool = False,
                 trainable=()):
        super().__init__(persistent=persistent, trainable=trainable)
        if weighting not in _WEIGHTING:
            raise ValueError(f"weighting must be one of {list(_WEIGHTING)} (got {weighting!r})")
        if output not in _OUTPUT:
            raise ValueError(f"output must be one of {list(_OUTPUT)} (got {output!r})")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0 (got {temperature!r})")
        for name, v in (("k", k), ("links", links)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int (got {v!r})")
        self.k, self.links, self.weighting = k, links, weighting
        self.temperature, self.threshold = float(temperature), float(threshold)
        self.damping, self.tol, self.max_iter, self.method = damping, tol, max_iter, method
        self.output = output
        self._add_graph(graph)
        if entity_emb.shape[0] != self.num_entities:
            raise ValueError(f"entity_emb must have V={self.num_entities} rows (got shape {tuple(entity_emb.shape)})")
        self._add_tensor("entity_emb", entity_emb)

    @classmethod
    def from_index(cls, index, k: int = 5, **kwargs) -> "DifferentiablePPR":
        return cls(index.graph, index.entity_emb, k, **kwargs)

    def personalization(self, query_embeddings: Tensor) -> tuple[Tensor, Tensor]:
        """``(ids, mass)``: int64 ``[Q, L]`` linked entity ids (star-graph node ids = entity ids)
        and ``[Q, L]`` mass (rows sum to 1), differentiable. ``L = min(links, V)``.

        Raises:
            ValueError: the graph has no entities.
        """
        check_queries(query_embeddings, self.entity_emb)
        if self.num_entities == 0:
            raise ValueError("PPR needs entities to link to (got V = 0)")
        num_links = min(self.links, self.num_entities)
        with torch.no_grad():
            keys = self.entity_emb.detach()
            inv_norm = inverse_or_zero(torch.linalg.vector_norm(keys.float(), dim=1))
            ids = dense_topk(unit_rows(query_embeddings.detach().float()), keys, num_links, key_scale=inv_norm)[1]
        dtype = torch.float64 if query_embeddings.dtype == torch.float64 else torch.float32
        q = unit_rows(query_embeddings.to(dtype))
        sim = (unit_rows(self.entity_emb[ids].to(dtype)) * q.unsqueeze(1)).sum(-1)  # [Q, L]
        if self.weighting == "softmax":
            return ids, torch.softmax(sim / self.temperature, dim=1)
        mass = torch.relu(sim - self.threshold)
        total = mass.sum(1, keepdim=True)
        uniform = torch.full_like(mass, 1.0 / num_links)
        return ids, torch.where(total > 0, mass / torch.where(total > 0, total, torch.ones_like(total)), uniform)

    def mass(self, query_embeddings: Tensor) -> Tensor:
        """PPR mass of every passage (or fact) per query, ``[Q, P]`` (``[Q, H]``), differentiable."""
        ids, mass = self.personalization(query_embeddings)
        v, h, p = self.num_entities, self.num_facts, self.num_passages
        nodes = slice(v + h, v + h + p) if self.output == "passages" else slice(v, v + h)
        return personalized_pagerank(self.graph, (ids, mass), damping=self.damping, tol=self.tol,
                                     max_iter=self.max_iter, method=self.method, nodes=nodes)

    def forward(self, query_embeddings: Tensor) -> Retrieved:
        """Top-``k`` passages (facts) by PPR mass: ``Retrieved(ids [Q, k], scores [Q, k])``."""
        mass = self.mass(query_embeddings)
        scores, ids = torch.topk(mass, min(self.k, mass.shape[1]), dim=1)
        return Retrieved(ids, scores)
