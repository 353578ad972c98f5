"""Differentiable dense top-k as a module: top-k keys by cosine, scores differentiable."""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.nn._base import IndexModule, Retrieved, check_queries, unit_rows
from hpengine.retrieval import dense_topk
from hpengine.sparse import inverse_or_zero

_OVER = ("passages", "facts", "entities")


class DifferentiableDense(IndexModule):
    """Top-``k`` keys (passages, facts or entity names) by cosine with each query.

    The ids come from :func:`hpengine.retrieval.dense_topk` (exact, chunked over the keys, under
    ``torch.no_grad``: the selection passes no gradient); the scores are the cosines of the
    selected keys recomputed differentiably, ``<q/|q|, key_i/|key_i|>`` in the queries' dtype
    (float32 for half inputs), so gradients reach the query embeddings and, when ``keys`` is
    trainable, the selected keys' embeddings.

    Not the engine's ``dense`` method (:class:`hpengine.pipeline.retrievers.DenseRetriever`, question
    text in, ranked passages and answers out): this takes query embeddings and trains.

    Args:
        keys: float ``[N, D]`` key embeddings (registered as the buffer ``keys``).
        k: keys returned per query.
        chunk_size: keys per chunk of the search.
        persistent, trainable: see :class:`~hpengine.nn.IndexModule` (``trainable=("keys",)``).

    Shapes:
        forward: ``[Q, D] -> ids [Q, k], scores [Q, k]``.

    Example:
        >>> m = DifferentiableDense(torch.eye(3), k=2)
        >>> m(torch.tensor([[1.0, 0.5, 0.0]])).ids
        tensor([[0, 1]])
    """

    trainable_names = ("keys",)

    def __init__(self, keys: Tensor, k: int = 5, *, chunk_size: int = 65536, persistent: bool = False,
                 trainable=()):
        super().__init__(persistent=persistent, trainable=trainable)
        if not isinstance(keys, Tensor) or not keys.dtype.is_floating_point or keys.dim() != 2:
            raise ValueError(f"keys must be a float [N, D] tensor (got {getattr(keys, 'dtype', type(keys))} "
                             f"{tuple(getattr(keys, 'shape', ()))})")
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be a non-negative int (got {k!r})")
        self.k = k
        self.chunk_size = chunk_size
        self._add_tensor("keys", keys)

    @classmethod
    def from_index(cls, index, over: str = "passages", k: int = 5, **kwargs) -> "DifferentiableDense":
        """Over ``index.passage_emb`` (default), ``index.fact_emb`` or ``index.entity_emb``."""
        if over not in _OVER:
            raise ValueError(f"over must be one of {list(_OVER)} (got {over!r})")
        keys = {"passages": index.passage_emb, "facts": index.fact_emb, "entities": index.entity_emb}[over]
        if keys is None:
            raise ValueError("the index has no passage embeddings (built with embed_passages=False); "
                             "use over='facts' (got over='passages')")
        return cls(keys, k, **kwargs)

    @torch.no_grad()
    def search(self, query_embeddings: Tensor, k: int | None = None) -> Tensor:
        """The top-``k`` ids only (no gradient): int64 ``[Q, k]``, ``-1`` padded."""
        keys = self.keys.detach()
        qn = unit_rows(query_embeddings.detach().float())
        inv_norm = inverse_or_zero(torch.linalg.vector_norm(keys.float(), dim=1))
        return dense_topk(qn, keys, self.k if k is None else k, self.chunk_size, key_scale=inv_norm)[1]

    def score(self, query_embeddings: Tensor, ids: Tensor) -> Tensor:
        """Differentiable cosines of each query with its ``ids`` (``-1``: ``-inf``), ``[Q, n]``."""
        dtype = query_embeddings.dtype if query_embeddings.dtype in (torch.float32, torch.float64) else torch.float32
        q = unit_rows(query_embeddings.to(dtype))
        picked = unit_rows(self.keys[ids.clamp(min=0)].to(dtype))  # [Q, n, D]
        cos = (picked * q.unsqueeze(1)).sum(-1)
        return torch.where(ids >= 0, cos, torch.full_like(cos, float("-inf")))

    def forward(self, query_embeddings: Tensor) -> Retrieved:
        """Top-``k`` keys of each query: ``Retrieved(ids [Q, k], scores [Q, k])``."""
        check_queries(query_embeddings, self.keys)
        ids = self.search(query_embeddings)
        return Retrieved(ids, self.score(query_embeddings, ids))
