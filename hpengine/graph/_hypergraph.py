"""The atomic-fact hypergraph: facts (hyperedges) over entities, each from one passage."""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.sparse import (
    SparseChain,
    TransitionOperator,
    augmented_incidence,
    coalesce_pairs,
    csr_from_sorted_pairs,
    expanded_rows,
    node_degree,
    sort_keys,
    unique_keys,
)


#: a graph given with synonyms keeps them as factors when the factors' entries are at most this
#: share of the expanded incidence's (measured by benchmarks/e2e/bench_structure.py:
#: at 0.38, the 100k scaling index, PPR 1.19x and the walk 1.59x faster; at 0.97-1.03, two dev
#: indexes, PPR 21-26% and the walk 50-65% slower)
FACTORED_MAX_RATIO = 0.6


def _check_index(name: str, t: Tensor, ndim: int) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (got {type(t).__name__})")
    if t.dtype != torch.int64:
        raise TypeError(f"{name} must be int64 (got {t.dtype})")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s) (got shape {tuple(t.shape)})")


class HyperGraph:
    """Incidence structure of the index (docs/methods/index.md#incidence-and-degrees), on one device.

    Holds ``B_he`` as coalesced COO pairs, the fact -> passage map ``sigma`` (``fact_passage``),
    the sizes, and lazily built CSR caches and transition operators. Build it with
    :meth:`from_incidence`. ``B_he`` is either given expanded (``fact_entity``, after synonym
    expansion) or as the extracted pairs and the synonym pairs (``synonyms``): then it is
    ``bin(B_raw (I + S))``, kept as those factors (docs/methods/index.md#the-expanded-incidence-as-factors)
    and materialised only where ``fact_entity`` is read.

    Attributes:
        fact_entity: int64 ``[2, nnz]`` unique (fact, entity) pairs of ``B_he`` sorted by fact then
            entity (built on first read for a factored graph).
        raw_fact_entity: the pairs given (``fact_entity`` itself unless ``synonyms`` is set).
        synonyms: int64 ``[2, n]`` (entity, synonym) pairs, or None.
        fact_passage: int64 ``[H]``.
        num_facts, num_entities, num_passages: H, V, P.

    Example:
        >>> g = HyperGraph.from_incidence(torch.tensor([[0, 1, 2], [0, 0, 1]]),
        ...                               torch.tensor([0, 0, 1]), num_entities=2, num_passages=2)
        >>> g.transition().to_dense()
        tensor([[0., 1., 0.],
                [1., 0., 0.],
                [0., 0., 0.]])
    """

    def __init__(self, fact_entity: Tensor, fact_passage: Tensor, num_entities: int, num_passages: int,
                 synonyms: Tensor | None = None, factored: bool | None = None):
        self.raw_fact_entity = fact_entity
        self.synonyms = synonyms
        self.keep_factored = factored
        self.fact_passage = fact_passage
        self.num_facts = int(fact_passage.numel())
        self.num_entities = int(num_entities)
        self.num_passages = int(num_passages)
        self._cache: dict = {}

    @classmethod
    def from_incidence(cls, fact_entity: Tensor, fact_passage: Tensor, num_entities: int,
                       num_passages: int, *, coalesced: bool = False, synonyms: Tensor | None = None,
                       factored: bool | None = None) -> "HyperGraph":
        """Build a graph from (fact, entity) pairs and the fact -> passage map.

        Args:
            fact_entity: int64 ``[2, nnz]`` (fact, entity) pairs *after* synonym expansion, or
                before it when ``synonyms`` is given; duplicate pairs count once.
            fact_passage: int64 ``[H]`` source passage of each fact.
            num_entities: V (entities may have no fact).
            num_passages: P (passages may have no fact).
            coalesced: the pairs are already unique and sorted by fact then entity (as
                :func:`~hpengine.graph.expand_with_synonyms` returns them): kept as they are instead
                of sorted again (at a million passages the sort of 76M pairs is ~20 s and 2 GB of
                temporaries). Ids are range-checked either way; :meth:`validate` checks the order.
            synonyms: optional int64 ``[2, n]`` (entity, synonym) pairs: the graph's incidence is
                then ``fact_entity`` with every synonym of a fact's entities added (what
                :func:`~hpengine.graph.expand_with_synonyms` materialises), built from factors.
            factored: with ``synonyms``, whether the transition operator keeps the factors (True),
                materialises the expansion from them (False) or decides by size (None; see
                :class:`~hpengine.sparse.TransitionOperator`).

        Returns:
            A :class:`HyperGraph` on the inputs' device.

        Shapes:
            fact_entity ``[2, nnz]``, fact_passage ``[H]``, synonyms ``[2, n]``.
        """
        _check_index("fact_entity", fact_entity, 2)
        _check_index("fact_passage", fact_passage, 1)
        if fact_entity.shape[0] != 2:
            raise ValueError(f"fact_entity must be [2, nnz] (got shape {tuple(fact_entity.shape)})")
        if fact_entity.device != fact_passage.device:
            raise ValueError(f"fact_entity is on {fact_entity.device} but fact_passage is on {fact_passage.device}")
        for name, v in (("num_entities", num_entities), ("num_passages", num_passages)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name} must be a non-negative int (got {v!r})")
        num_facts = fact_passage.numel()
        # O(nnz) bounds checks: construction is a public boundary, not a hot path.
        if fact_entity.numel():
            if int(fact_entity[0].min()) < 0 or int(fact_entity[0].max()) >= num_facts:
                raise ValueError(f"fact ids in fact_entity must lie in [0, {num_facts}) "
                                 f"(got range [{int(fact_entity[0].min())}, {int(fact_entity[0].max())}])")
            if int(fact_entity[1].min()) < 0 or int(fact_entity[1].max()) >= num_entities:
                raise ValueError(f"entity ids in fact_entity must lie in [0, {num_entities}) "
                                 f"(got range [{int(fact_entity[1].min())}, {int(fact_entity[1].max())}])")
        if num_facts and (int(fact_passage.min()) < 0 or int(fact_passage.max()) >= num_passages):
            raise ValueError(f"fact_passage values must lie in [0, {num_passages}) "
                             f"(got range [{int(fact_passage.min())}, {int(fact_passage.max())}])")
        if synonyms is not None:
            _check_index("synonyms", synonyms, 2)
            if synonyms.shape[0] != 2 or synonyms.device != fact_entity.device:
                raise ValueError(f"synonyms must be [2, n] on {fact_entity.device} "
                                 f"(got shape {tuple(synonyms.shape)} on {synonyms.device})")
            if synonyms.numel() and (int(synonyms.min()) < 0 or int(synonyms.max()) >= num_entities):
                raise ValueError(f"synonym entity ids must lie in [0, {num_entities}) "
                                 f"(got range [{int(synonyms.min())}, {int(synonyms.max())}])")
        pairs = fact_entity if coalesced else coalesce_pairs(fact_entity, num_facts, max(num_entities, 1))
        return cls(pairs, fact_passage.contiguous(), num_entities, num_passages, synonyms=synonyms, factored=factored)

    @property
    def factored(self) -> bool:
        """Whether the incidence is given as the extracted pairs and the synonym pairs (its
        transition operator then keeps factors or materialises them: ``transition().factored``)."""
        return self.synonyms is not None

    @property
    def fact_entity(self) -> Tensor:
        """int64 ``[2, nnz]`` (fact, entity) pairs of ``B_he``, sorted, unique (a factored graph
        materialises them on first read: ``nnz`` grows faster than the corpus)."""
        if self.synonyms is None:
            return self.raw_fact_entity
        if "fact_entity" not in self._cache:
            from hpengine.graph._synonyms import expand_with_synonyms

            self._cache["fact_entity"] = expand_with_synonyms(self.raw_fact_entity, self.synonyms, self.num_facts,
                                                              self.num_entities)
        return self._cache["fact_entity"]

    # ------------------------------------------------------------------ basics
    @property
    def device(self) -> torch.device:
        return self.fact_passage.device

    @property
    def nnz(self) -> int:
        """Number of (fact, entity) incidences (passage memberships not counted)."""
        if self.factored:  # the operator's B holds one passage column per fact besides them
            return self.transition().nnz - self.num_facts
        return int(self.fact_entity.shape[1])

    def to(self, device) -> "HyperGraph":
        """A copy on ``device`` (caches are rebuilt there on demand)."""
        device = torch.device(device)
        if device == self.device:
            return self
        return HyperGraph(self.raw_fact_entity.to(device), self.fact_passage.to(device), self.num_entities,
                          self.num_passages, synonyms=None if self.synonyms is None else self.synonyms.to(device),
                          factored=self.keep_factored)

    def entity_degree(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """``d_e [V]``: facts per entity."""
        if self.factored:  # exact integer counts (float32 holds them below 2^24 facts per entity)
            return self.transition().column_degree[: self.num_entities].to(dtype)
        return node_degree(self.fact_entity[1], self.num_entities, dtype)

    def passage_degree(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """``d_d [P]``: facts per passage."""
        return node_degree(self.fact_passage, self.num_passages, dtype)

    def entity_passage_count(self, chunk: int = 1 << 24) -> Tensor:
        """int64 ``[V]``: how many distinct passages hold a fact with each entity (HippoRAG's node
        specificity is its inverse).

        Read from the transition's ``B^T`` rows a block of about ``chunk`` incidences at a time,
        so its temporaries stay small at any size (one sort of all 76M pairs of a million-passage
        index held 3 GB). The result does not depend on ``chunk``.
        """
        v, p = self.num_entities, max(self.num_passages, 1)
        out = torch.zeros(v, dtype=torch.int64, device=self.device)
        if not v or not self.nnz:
            return out
        if self.transition().factored:
            return self._entity_passage_count_factored(chunk)
        bt = self.transition().bt.outer  # rows [0, V) are the entities, their facts in order
        crow = bt.crow_indices()[: v + 1].long()
        facts = bt.col_indices()
        lo = 0
        while lo < v:  # blocks of entity rows, not single entities
            hi = int(torch.searchsorted(crow, crow[lo] + chunk, right=True)) - 1
            hi = min(v, max(hi, lo + 1))
            a, b = int(crow[lo]), int(crow[hi])
            rows = torch.repeat_interleave(torch.arange(hi - lo, device=self.device), crow[lo + 1:hi + 1] - crow[lo:hi])
            keys = unique_keys(rows.mul_(p).add_(self.fact_passage.index_select(0, facts[a:b])), inplace=True)
            out[lo:hi] = torch.bincount(keys // p, minlength=hi - lo)
            lo = hi
        return out

    def _entity_passage_count_factored(self, chunk: int) -> Tensor:
        """:meth:`entity_passage_count` of a factored graph: an entity's passages are those of the
        extracted entities it is related to (itself included), so the rows of
        ``bin((I + S)^T EP)`` (``EP`` the extracted entity-passage pairs) are counted, a block of
        about ``chunk`` gathered pairs at a time."""
        v, p, c = self.num_entities, max(self.num_passages, 1), self.num_entities + self.num_passages
        raw = self.raw_fact_entity
        keys = unique_keys(raw[1] * p + self.fact_passage.index_select(0, raw[0]), inplace=True)
        ep = csr_from_sorted_pairs(torch.stack([keys // p, keys % p]), c, p,
                                   torch.ones(keys.numel(), device=self.device))
        related_t = self.transition().bt.outer  # (I + S)^T over all columns; rows [0, V) are the entities
        crow = related_t.crow_indices().long()[: v + 1]
        reach = crow[1:] - crow[:-1]
        row_of = torch.repeat_interleave(torch.arange(v, device=self.device), reach)
        ep_len = (ep.crow_indices()[1:] - ep.crow_indices()[:-1]).long()
        work = torch.zeros(v, dtype=torch.int64, device=self.device).index_add_(
            0, row_of, ep_len.index_select(0, related_t.col_indices()[: int(crow[-1])].long()))
        bound = torch.cumsum(work, 0)
        chain = SparseChain(related_t, ep)
        out = torch.empty(v, dtype=torch.int64, device=self.device)
        lo = 0
        while lo < v:  # blocks of entity rows, not single entities
            done = int(bound[lo - 1]) if lo else 0
            hi = min(v, max(lo + 1, int(torch.searchsorted(bound, done + chunk, right=True))))
            out[lo:hi] = expanded_rows(chain, torch.arange(lo, hi, device=self.device))[0]
            lo = hi
        return out

    # ------------------------------------------------------------ sparse views
    def incidence(self, kind: str = "entity") -> Tensor:
        """Binary incidence as ``torch.sparse_csr`` (built once, cached).

        Args:
            kind: ``"entity"`` for ``B_he [H, V]``, ``"passage"`` for ``B_hd [H, P]``,
                ``"entity_t"``/``"passage_t"`` for the transposes.
        """
        valid = ("entity", "passage", "entity_t", "passage_t")
        if kind not in valid:
            raise ValueError(f"kind must be one of {list(valid)} (got {kind!r})")
        if kind not in self._cache:
            facts = torch.arange(self.num_facts, device=self.device)
            if kind.startswith("entity"):
                pairs, ncols = self.fact_entity, self.num_entities
            else:
                pairs, ncols = torch.stack([facts, self.fact_passage]), self.num_passages
            if kind.endswith("_t"):
                key = sort_keys(pairs[1] * self.num_facts + pairs[0], inplace=True)
                pairs, shape = torch.stack([key // self.num_facts, key % self.num_facts]), (ncols, self.num_facts)
            else:
                shape = (self.num_facts, ncols)
            ones = torch.ones(pairs.shape[1], device=self.device)
            self._cache[kind] = csr_from_sorted_pairs(pairs, shape[0], shape[1], ones)
        return self._cache[kind]

    def transition(self, dtype: torch.dtype = torch.float32) -> TransitionOperator:
        """The factored structural transition operator ``T_s``, cached per dtype
        (docs/methods/index.md#structural-transition-matrix-t_s).

        Rows of ``T_s`` sum to 1, or to 0 for a fact that shares no entity and no passage with
        any other fact.

        Returns:
            :class:`hpengine.sparse.TransitionOperator` on this graph's device.
        """
        key = ("transition", dtype)
        if key not in self._cache:
            columns = self.num_entities + self.num_passages
            if self.synonyms is not None and self.keeps_factors:
                pairs = augmented_incidence(self.raw_fact_entity, self.fact_passage, self.num_entities)
                op = TransitionOperator(pairs, self.num_facts, columns, dtype, relation=self.synonyms)  # entity ids
            else:  # are column ids
                pairs = augmented_incidence(self.fact_entity, self.fact_passage, self.num_entities)
                op = TransitionOperator(pairs, self.num_facts, columns, dtype)
            self._cache[key] = op
        return self._cache[key]

    @property
    def keeps_factors(self) -> bool:
        """Whether :meth:`transition` keeps the synonym expansion as factors: as asked
        (``factored``), else when the factors' entries are at most ``FACTORED_MAX_RATIO`` of the
        expanded incidence's. Both counts are estimated from the pairs alone (the expansion's as if
        no column were reached twice, which overcounts by about 1.5%)."""
        if self.synonyms is None:
            return False
        if self.keep_factored is not None:
            return bool(self.keep_factored)
        v = max(self.num_entities, 1)
        syn = unique_keys(self.synonyms[0] * v + self.synonyms[1])
        syn = syn[syn // v != syn % v]  # self pairs add nothing to I + N
        reach = 1 + torch.bincount(syn // v, minlength=self.num_entities)  # [V] |row e of I + N|
        raw = self.raw_fact_entity
        expanded = int(reach.index_select(0, raw[1]).sum()) + self.num_facts  # + one passage column per fact
        factors = int(raw.shape[1]) + self.num_facts + self.num_entities + self.num_passages + int(syn.numel())
        return factors <= FACTORED_MAX_RATIO * expanded

    def validate(self) -> "HyperGraph":
        """O(nnz) invariants: sorted unique pairs, ids in range. Raises ``ValueError``."""
        fe = self.raw_fact_entity
        if fe.numel():
            key = fe[0] * max(self.num_entities, 1) + fe[1]
            if bool((key[1:] <= key[:-1]).any()):
                raise ValueError("fact_entity pairs must be sorted and unique (use HyperGraph.from_incidence)")
            if int(fe[1].max()) >= self.num_entities or int(fe.min()) < 0 or int(fe[0].max()) >= self.num_facts:
                raise ValueError("fact_entity ids out of range")
        if self.num_facts and (int(self.fact_passage.max()) >= self.num_passages or int(self.fact_passage.min()) < 0):
            raise ValueError("fact_passage ids out of range")
        return self

    def __repr__(self) -> str:
        return (f"HyperGraph(num_facts={self.num_facts}, num_entities={self.num_entities}, "
                f"num_passages={self.num_passages}, nnz={self.nnz}, factored={self.factored}, device={self.device})")

