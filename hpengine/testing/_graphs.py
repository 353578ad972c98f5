"""Synthetic hypergraphs for tests and benchmarks (fixed seeds, CPU generator, any device).

Every hypergraph generator returns ``(fact_entity [2, nnz], fact_passage [H], num_entities,
num_passages)``, the arguments of :meth:`hpengine.HyperGraph.from_incidence`; :func:`random_csr`
gives a sparse matrix for the kernels' tests.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor


def random_hypergraph(seed: int, num_facts: int = 40, num_entities: int = 15, num_passages: int = 12,
                      nnz: int = 60, device="cpu") -> tuple[Tensor, Tensor, int, int]:
    """Small random hypergraph with every awkward case the transition must handle.

    It has isolated facts, facts without entities (the last 3), single-fact passages, a hub
    entity (entity 0, in every other fact) and duplicate (fact, entity) pairs. The last fact has
    no entity and is alone in its passage, so it is isolated (all-zero row of ``T_s``).

    Args:
        seed: seed of the CPU generator.
        num_facts, num_entities, num_passages: H, V, P (H >= 4, V >= 2, P >= 3).
        nnz: number of random (fact, entity) draws before the hub and the duplicates.
        device: where the tensors are placed.

    Shapes:
        returns ``([2, nnz'], [H], V, P)``.
    """
    g = torch.Generator().manual_seed(seed)
    facts = torch.randint(0, num_facts - 3, (nnz,), generator=g)  # last 3 facts: no entity
    ents = torch.randint(1, num_entities, (nnz,), generator=g)
    hub = torch.arange(0, num_facts - 3, 2)  # entity 0 is a hub
    fe = torch.cat([torch.stack([facts, ents]), torch.stack([hub, torch.zeros_like(hub)]),
                    torch.stack([facts[:5], ents[:5]])], dim=1)  # duplicates
    fp = torch.randint(0, num_passages - 2, (num_facts,), generator=g)
    fp[-1] = num_passages - 1  # a fact without entity alone in its passage: isolated
    return fe.to(device), fp.to(device), num_entities, num_passages


def _check_shape_args(num_facts: int, facts_per_passage: float, zipf_exponent: float) -> None:
    if num_facts < 1:
        raise ValueError(f"num_facts must be >= 1 (got {num_facts})")
    if facts_per_passage < 1 or zipf_exponent <= 0:
        raise ValueError(f"facts_per_passage must be >= 1 and zipf_exponent > 0 "
                         f"(got {facts_per_passage}, {zipf_exponent})")


def _passage_runs(num_facts: int, facts_per_passage: float, g: torch.Generator) -> tuple[Tensor, int]:
    """``(fact_passage [H], P)``: passages as consecutive runs of ``1 + Poisson(facts_per_passage - 1)`` facts."""
    sizes = 1 + torch.poisson(torch.full((num_facts,), facts_per_passage - 1.0), generator=g).long()
    ends = torch.cumsum(sizes, 0)
    num_passages = int(torch.searchsorted(ends, torch.tensor(num_facts), right=False)) + 1
    return torch.searchsorted(ends[:num_passages], torch.arange(num_facts), right=True), num_passages


def _zipf_entities(pool: int, count: int, zipf_exponent: float, g: torch.Generator) -> Tensor:
    """``[count]`` entity ids in ``[0, pool)`` drawn with weights ``(a + 1) ** -zipf_exponent``, then
    relabelled by a random permutation (hub ids are not all small: keeps sort orders honest)."""
    weights = torch.arange(1, pool + 1, dtype=torch.float64).pow(-zipf_exponent)
    ents = torch.multinomial(weights, count, replacement=True, generator=g) if count \
        else torch.zeros(0, dtype=torch.long)
    return torch.randperm(pool, generator=g)[ents]


def power_law_hypergraph(num_facts: int, *, seed: int = 0, facts_per_passage: float = 6.0,
                         entities_per_fact: float = 2.0, entity_ratio: float = 0.3, zipf_exponent: float = 0.7,
                         title_prob: float = 0.6, device="cpu") -> tuple[Tensor, Tensor, int, int]:
    """Corpus-like hypergraph whose entity degrees follow a power law.

    Passages hold ``1 + Poisson(facts_per_passage - 1)`` consecutive facts. Each passage has its
    own title entity (the Wikipedia article's subject), which each of its facts mentions with
    probability ``title_prob``. Every fact also mentions ``Poisson(entities_per_fact)`` entities
    drawn from a shared pool of ``entity_ratio * H`` entities with Zipf weights
    ``w_a ∝ (a + 1) ** -zipf_exponent``; a Zipf exponent ``s`` gives a degree distribution
    ``P(deg = k) ∝ k ** -(1 + 1 / s)`` (``s = 0.7``: tail exponent about 2.4, and the largest hub
    holds about 1% of all mentions, like "United States" in a Wikipedia corpus).

    Args:
        num_facts: H.
        seed: seed of the CPU generator.
        facts_per_passage: mean passage size (>= 1).
        entities_per_fact: mean number of pool entities per fact.
        entity_ratio: size of the entity pool relative to H.
        zipf_exponent: ``s`` above (> 0).
        title_prob: probability that a fact mentions its passage's title entity.
        device: where the tensors are placed.

    Returns:
        ``(fact_entity, fact_passage, num_entities, num_passages)``; entity ids ``[0, P)`` are the
        titles and ``[P, P + pool)`` the pool.

    Shapes:
        returns ``([2, nnz], [H], V, P)``.
    """
    _check_shape_args(num_facts, facts_per_passage, zipf_exponent)
    g = torch.Generator().manual_seed(seed)
    fact_passage, num_passages = _passage_runs(num_facts, facts_per_passage, g)
    # title mentions
    has_title = torch.rand(num_facts, generator=g) < title_prob
    facts_t = torch.arange(num_facts)[has_title]
    title_pairs = torch.stack([facts_t, fact_passage[facts_t]])
    # pool mentions with Zipf popularity
    pool = max(1, int(math.ceil(entity_ratio * num_facts)))
    counts = torch.poisson(torch.full((num_facts,), float(entities_per_fact)), generator=g).long()
    facts_p = torch.repeat_interleave(torch.arange(num_facts), counts)
    ents = _zipf_entities(pool, facts_p.numel(), zipf_exponent, g) + num_passages
    fact_entity = torch.cat([title_pairs, torch.stack([facts_p, ents])], dim=1)
    return fact_entity.to(device), fact_passage.to(device), num_passages + pool, num_passages


def zipf_fact_hypergraph(num_facts: int, *, seed: int = 0, max_entities: int = 4, facts_per_passage: float = 6.0,
                         entity_ratio: float = 0.3, zipf_exponent: float = 0.7,
                         device="cpu") -> tuple[Tensor, Tensor, int, int]:
    """Hypergraph of facts with 0 to ``max_entities`` entities of Zipf popularity.

    Each fact draws ``k ~ Uniform{0, ..., max_entities}`` mentions from one entity pool of
    ``entity_ratio * H`` entities with weights ``w_a ∝ (a + 1) ** -zipf_exponent`` (repeated
    draws of one entity by one fact collapse, so a fact has at most ``k`` distinct entities; facts
    with none are isolated). Passages hold ``1 + Poisson(facts_per_passage - 1)`` consecutive
    facts. Unlike :func:`power_law_hypergraph` there are no title entities: every entity comes from
    the shared pool.

    Returns:
        ``(fact_entity, fact_passage, num_entities, num_passages)``, ``fact_entity`` without
        duplicate pairs, sorted by fact.

    Shapes:
        returns ``([2, nnz], [H], V, P)``.

    Example:
        >>> fe, fp, v, p = zipf_fact_hypergraph(1000, seed=0)
        >>> int(torch.bincount(fe[0], minlength=1000).max()) <= 4, v
        (True, 300)
    """
    _check_shape_args(num_facts, facts_per_passage, zipf_exponent)
    if max_entities < 0:
        raise ValueError(f"max_entities must be >= 0 (got {max_entities})")
    g = torch.Generator().manual_seed(seed)
    fact_passage, num_passages = _passage_runs(num_facts, facts_per_passage, g)
    pool = max(1, int(math.ceil(entity_ratio * num_facts)))
    counts = torch.randint(0, max_entities + 1, (num_facts,), generator=g)
    facts = torch.repeat_interleave(torch.arange(num_facts), counts)
    ents = _zipf_entities(pool, facts.numel(), zipf_exponent, g)
    pairs = torch.unique(facts * pool + ents)  # sorted by fact, duplicates collapsed
    fact_entity = torch.stack([pairs // pool, pairs % pool])
    return fact_entity.to(device), fact_passage.to(device), pool, num_passages


__all__ = ["power_law_hypergraph", "random_hypergraph", "zipf_fact_hypergraph"]


def random_csr(rows: int, cols: int, density: float, dtype: torch.dtype, index_dtype: torch.dtype,
               seed: int) -> Tensor:
    """A random CSR matrix ``[rows, cols]`` on the CPU, entries in [0, 1) kept with probability
    ``density``, row ``rows // 2`` empty, columns ascending in each row, ``index_dtype`` indices.

    Example:
        >>> m = random_csr(4, 5, 0.5, torch.float32, torch.int32, seed=0)
        >>> m.shape, m.crow_indices().dtype, int(m.crow_indices()[3] - m.crow_indices()[2])
        (torch.Size([4, 5]), torch.int32, 0)
    """
    from hpengine.sparse import csr_with_values

    g = torch.Generator().manual_seed(seed)
    dense = torch.rand(rows, cols, generator=g, dtype=torch.float64)
    dense = (dense * (torch.rand(rows, cols, generator=g) < density)).to(dtype)
    dense[rows // 2] = 0.0  # an empty row
    crow = torch.zeros(rows + 1, dtype=torch.int64)
    crow[1:] = (dense != 0).sum(1).cumsum(0)
    nz = dense.nonzero()
    return csr_with_values(crow.to(index_dtype), nz[:, 1].to(index_dtype), dense[nz[:, 0], nz[:, 1]], (rows, cols))
