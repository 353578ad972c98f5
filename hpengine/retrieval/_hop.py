"""One HyperProve retrieval hop (docs/methods/hyperprove.md#step-by-step) for a batch of questions, as
tensor operations."""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
from torch import Tensor
from torch.profiler import record_function

from hpengine.config import RetrievalConfig
from hpengine.graph import HyperGraph
from hpengine.retrieval._bfs import batched_bfs
from hpengine.retrieval._chunking import HOP_BUDGET_MB, HopPlan, plan_hop, resolve_memory_budget_mb
from hpengine.retrieval._dense import DenseIndex
from hpengine.retrieval._topk import blocked_topk
from hpengine.retrieval._walk import restart_distribution, top_visited, walk_visits

_FIELDS = tuple(f.name for f in dataclasses.fields(RetrievalConfig))


class HopResult(NamedTuple):
    """Output of :func:`hyperprove_hop` for ``Q`` questions (all on the inputs' device).

    Attributes:
        fact_ids: int64 ``[Q, K]`` selected facts, best first; ``-1`` padding.
        scores: float32 ``[Q, K]`` their scores; ``-inf`` padding.
        distance: int64 ``[Q, K]`` hops from each selected fact to the nearest frontier fact in
            the thresholded local graph; ``-1`` when unreachable (within ``struct_depth``), when
            the frontier is empty, and at padding.
        frontier: int64 ``[Q, F + K]`` the updated frontier ``cat(frontier, fact_ids)``.
        seeds: int64 ``[Q, S]`` the dense seeds (diagnostics); ``-1`` padding.
        subgraph: int64 ``[Q, M]`` the local subgraph, frontier and seeds first, then by walk
            visits (diagnostics); ``-1`` padding.
    """

    fact_ids: Tensor
    scores: Tensor
    distance: Tensor
    frontier: Tensor
    seeds: Tensor
    subgraph: Tensor


def _resolve_config(cfg: RetrievalConfig | None, overrides: dict) -> RetrievalConfig:
    if cfg is None:
        cfg = RetrievalConfig()
    elif not isinstance(cfg, RetrievalConfig):
        raise TypeError(f"cfg must be a hpengine.config.RetrievalConfig or None (got {type(cfg).__name__})")
    unknown = sorted(set(overrides) - set(_FIELDS))
    if unknown:
        raise TypeError(f"hyperprove_hop() got unexpected keyword argument(s) {unknown}; "
                        f"valid overrides are the RetrievalConfig fields {sorted(_FIELDS)} (got {unknown})")
    return dataclasses.replace(cfg, **overrides) if overrides else cfg  # replace re-runs __post_init__


def _check_ids(name: str, t: Tensor, num_q: int, device: torch.device) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (got {type(t).__name__})")
    if t.dtype != torch.int64:
        raise TypeError(f"{name} must be int64 (got {t.dtype})")
    if t.dim() != 2 or t.shape[0] != num_q:
        raise ValueError(f"{name} must be [Q, n] with Q={num_q} (got shape {tuple(t.shape)})")
    if t.device != device:
        raise ValueError(f"{name} must be on the graph's device {device} (got {t.device})")


def hyperprove_hop(graph: HyperGraph, fact_embeddings: Tensor, query_embeddings: Tensor,
                   frontier: Tensor | None = None, *, active: Tensor | None = None, seeds: Tensor | None = None,
                   index: DenseIndex | None = None, cfg: RetrievalConfig | None = None,
                   workspace: dict | None = None, **overrides) -> HopResult:
    """One HyperProve retrieval hop (docs/methods/hyperprove.md#step-by-step) for ``Q`` questions at once.

    Per question, with ``F`` its carried frontier ``F_{t-1}``:

    1. **Seeds**: the top-S facts by ``cos(query, fact)`` (``index``: exact chunked matmul or FAISS,
       ``cfg.seed_backend``), or the given ``seeds``.
    2. **Walk**: restart mass ``r0`` = the distinct seeds weighted by ``max(cos, 0)``
       (``seed_weighting``), normalised to 1, plus ``frontier_weight`` spread over the distinct
       frontier facts, all normalised to 1; ``x_{t+1} = (1 - restart) T_s^T x_t + restart r0`` for
       ``walk_steps`` steps on dense ``[H, Qc]`` blocks; visits ``= sum_t x_t``.
    3. **Subgraph**: frontier and seeds, then the facts with the most visit mass (> 0), at most
       ``M = subgraph_size``; ``T*`` = ``T_s`` restricted to it and row-normalised again
       (``[Q, M, M]`` blocks from ``TransitionOperator.local_blocks``).
    4. **BFS**: edges ``T*_ij > theta``; candidates = facts at most ``L = bfs_depth`` edges from a
       seed (seeds included), minus the frontier.
    5. **Struct**: ``d`` = edges from a candidate to the nearest frontier fact, searched for
       ``struct_depth`` rounds (0: ``L``; longer paths count as unreachable);
       ``struct = 1 / d``, 0 when unreachable or when the frontier is empty.
    6. **Score** ``= alpha * cos + (1 - alpha) * struct``; the top-K candidates are selected and
       appended to the frontier.

    Questions run in chunks of ``Qc`` (see :func:`hpengine.retrieval.plan_hop` for the memory
    formula; ``cfg.memory_budget_mb`` or ``cfg.query_chunk_size``) and results are written into
    preallocated ``[Q, ...]`` outputs on the device. Nothing loops over questions; the walk, BFS and
    scoring make no host sync. ``local_blocks`` syncs twice per chunk to size its join (the CPU kernel,
    ``kernels/k_local_blocks_cpu.cpp``, runs the blocks and the BFS without forming them), and the CPU
    FAISS backends copy queries to the host.

    Args:
        graph: the :class:`hpengine.HyperGraph` (its cached float32 ``graph.transition()`` is used).
        fact_embeddings: ``[H, D]`` float embeddings of the facts (any float dtype; cosines are
            computed in float32).
        query_embeddings: ``[Q, D]`` float embeddings of the (rewritten) sub-queries.
        frontier: int64 ``[Q, F]`` fact ids of ``F_{t-1}``, ``-1`` padded; ``None`` (default) or
            ``F = 0`` on the first hop. Repeated ids count once.
        active: bool ``[Q]``; ``False`` masks a question's hop off: ids ``-1``, scores ``-inf``,
            its frontier unchanged (plus ``-1`` padding); default all ``True``. Masked questions
            are still computed (compacting them would need a host sync).
        seeds: optional int64 ``[Q, S']`` precomputed seed ids (``-1`` padded, repeats count once)
            instead of the dense top-S.
        index: optional :class:`DenseIndex` over ``fact_embeddings`` (build it once per graph, as
            building a FAISS index is expensive); default: built here from ``cfg``.
        cfg: :class:`hpengine.config.RetrievalConfig` (default ``RetrievalConfig()``).
        workspace: optional dict that keeps the large scratch buffers (walk blocks, cosines, local
            blocks; up to about ``memory_budget_mb``) between calls: pass the same dict to every hop
            on one graph and device. Without it the buffers are allocated per call, which on CPU
            costs page faults comparable to the arithmetic at ``Q`` of a few hundred.
        **overrides: any ``RetrievalConfig`` field (``num_seeds``, ``subgraph_size``,
            ``walk_steps``, ``restart``, ``frontier_weight``, ``seed_weighting``, ``theta``,
            ``bfs_depth``, ``struct_depth``, ``alpha``, ``top_k``, ``seed_backend``, ...), validated
            as the dataclass does; unknown names raise ``TypeError``.

    Returns:
        :class:`HopResult` ``(fact_ids [Q, K], scores [Q, K], distance [Q, K], frontier [Q, F + K],
        seeds [Q, S], subgraph [Q, M])``.

    Raises:
        ValueError: shapes, sizes or devices disagree, or ``F + S > M`` while ``M < H`` (the frontier
            and the seeds must fit in the subgraph; a graph of at most ``M`` facts is the subgraph
            itself, and seeds, subgraph and frontier larger than it shrink to it).
        TypeError: wrong types or dtypes, unknown overrides.

    Shapes:
        fact_embeddings ``[H, D]``, query_embeddings ``[Q, D]``, frontier ``[Q, F]``, active ``[Q]``,
        seeds ``[Q, S']`` -> ``[Q, K]`` x3, ``[Q, F + K]``, ``[Q, S]``, ``[Q, M]``.

    Example:
        >>> from hpengine.graph import HyperGraph
        >>> g = HyperGraph.from_incidence(torch.tensor([[0, 1, 1, 2], [0, 0, 1, 1]]), torch.tensor([0, 1, 2]),
        ...                               num_entities=2, num_passages=3)
        >>> facts = torch.eye(3)
        >>> out = hyperprove_hop(g, facts, torch.tensor([[1.0, 0.2, 0.0]]), num_seeds=1, top_k=2, alpha=0.5)
        >>> out.fact_ids, out.frontier
        (tensor([[0, 1]]), tensor([[0, 1]]))
        >>> hyperprove_hop(g, facts, torch.tensor([[0.0, 0.0, 1.0]]), out.frontier, num_seeds=1, top_k=1).fact_ids
        tensor([[2]])
    """
    cfg = _resolve_config(cfg, overrides)
    if not isinstance(graph, HyperGraph):
        raise TypeError(f"graph must be a hpengine.HyperGraph (got {type(graph).__name__})")
    for name, x in (("fact_embeddings", fact_embeddings), ("query_embeddings", query_embeddings)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor (got {type(x).__name__})")
        if not x.dtype.is_floating_point:
            raise TypeError(f"{name} must be floating point (got {x.dtype})")
        if x.dim() != 2:
            raise ValueError(f"{name} must be 2-D (got shape {tuple(x.shape)})")
        if x.device != graph.device:
            raise ValueError(f"{name} must be on the graph's device {graph.device} (got {x.device})")
    num_facts, dim = fact_embeddings.shape
    num_q = query_embeddings.shape[0]
    device = graph.device
    if num_facts != graph.num_facts:
        raise ValueError(f"fact_embeddings must have H={graph.num_facts} rows (got {num_facts})")
    if query_embeddings.shape[1] != dim:
        raise ValueError(f"query_embeddings must have D={dim} columns like fact_embeddings "
                         f"(got {query_embeddings.shape[1]})")
    if frontier is None:
        frontier = torch.full((num_q, 0), -1, dtype=torch.int64, device=device)
    _check_ids("frontier", frontier, num_q, device)
    if active is None:
        active = torch.ones(num_q, dtype=torch.bool, device=device)
    if not isinstance(active, Tensor) or active.dtype != torch.bool or active.shape != (num_q,):
        raise ValueError(f"active must be a bool [Q] = [{num_q}] tensor (got "
                         f"{getattr(active, 'dtype', type(active).__name__)} {tuple(getattr(active, 'shape', ()))})")
    if active.device != device:
        raise ValueError(f"active must be on the graph's device {device} (got {active.device})")
    if seeds is not None:
        _check_ids("seeds", seeds, num_q, device)
    if index is None:
        backend = "exact" if seeds is not None else cfg.seed_backend  # given seeds: cosines only
        index = DenseIndex(fact_embeddings, backend=backend, nlist=cfg.faiss_nlist, nprobe=cfg.faiss_nprobe,
                           approximate_min_keys=cfg.approximate_min_keys, codes=cfg.faiss_codes)
    elif not isinstance(index, DenseIndex):
        raise TypeError(f"index must be a hpengine.retrieval.DenseIndex (got {type(index).__name__})")
    elif index.num_keys != num_facts or index.dim != dim or index.device != device:
        raise ValueError(f"index must hold H={num_facts} keys of dim {dim} on {device} "
                         f"(got {index.num_keys} x {index.dim} on {index.device})")

    m = min(cfg.subgraph_size, num_facts)
    num_seed_cols = seeds.shape[1] if seeds is not None else cfg.num_seeds
    search_k = min(cfg.num_seeds, num_facts)
    width_f = frontier.shape[1]
    forced_width = width_f + (seeds.shape[1] if seeds is not None else search_k)
    # when the subgraph is the whole graph (m == H: a graph smaller than M) every forced id fits,
    # however wide the padded frontier; a tiny index must answer, not fail
    if num_facts and forced_width > m and m < num_facts:
        raise ValueError(f"frontier width F plus seeds S must fit in the subgraph min(M, H) = {m}; raise "
                         f"retrieval.subgraph_size (got F={width_f}, S={forced_width - width_f})")
    k = cfg.top_k

    fact_ids = torch.full((num_q, k), -1, dtype=torch.int64, device=device)
    scores = torch.full((num_q, k), float("-inf"), dtype=torch.float32, device=device)
    distance = torch.full((num_q, k), -1, dtype=torch.int64, device=device)
    seeds_out = torch.full((num_q, num_seed_cols), -1, dtype=torch.int64, device=device)
    subgraph_out = torch.full((num_q, cfg.subgraph_size), -1, dtype=torch.int64, device=device)
    if num_facts and num_q:
        op = graph.transition()
        plan = plan_hop(num_q, num_facts=num_facts, num_columns=op.num_columns, subgraph_size=cfg.subgraph_size,
                        dim=dim, mean_row_nnz=op.nnz / num_facts,
                        memory_budget_mb=resolve_memory_budget_mb(cfg.memory_budget_mb, device, HOP_BUDGET_MB),
                        query_chunk_size=cfg.query_chunk_size, embedding_bytes=fact_embeddings.element_size(),
                        device_type=device.type)
        if workspace is None:
            workspace = {}
        elif not isinstance(workspace, dict):
            raise TypeError(f"workspace must be a dict or None (got {type(workspace).__name__})")
        for lo in range(0, num_q, plan.chunk_size):  # chunks of questions, merged in place on the device
            hi = min(num_q, lo + plan.chunk_size)
            chunk_seeds = seeds[lo:hi] if seeds is not None else None
            ids, sc, dist, sd, sub = _hop_chunk(op, index, query_embeddings[lo:hi], frontier[lo:hi], chunk_seeds,
                                                cfg, plan, m, search_k, workspace)
            fact_ids[lo:hi, : ids.shape[1]] = ids
            scores[lo:hi, : ids.shape[1]] = sc
            distance[lo:hi, : ids.shape[1]] = dist
            seeds_out[lo:hi, : sd.shape[1]] = sd
            subgraph_out[lo:hi, :m] = sub
    off = ~active.unsqueeze(1)
    fact_ids.masked_fill_(off, -1)
    scores.masked_fill_(off, float("-inf"))
    distance.masked_fill_(off, -1)
    seeds_out.masked_fill_(off, -1)
    subgraph_out.masked_fill_(off, -1)
    return HopResult(fact_ids, scores, distance, torch.cat([frontier, fact_ids], dim=1), seeds_out, subgraph_out)


def _buffer(workspace: dict, name: str, numel: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A flat buffer of at least ``numel`` elements, reused across the chunks of one call."""
    flat = workspace.get(name)
    if flat is None or flat.numel() < numel or flat.dtype != dtype:
        flat = workspace[name] = torch.empty(numel, dtype=dtype, device=device)
    return flat[:numel]


def _hop_chunk(op, index: DenseIndex, queries: Tensor, frontier: Tensor, seeds: Tensor | None,
               cfg: RetrievalConfig, plan: HopPlan, m: int, search_k: int, workspace: dict):
    """The hop for one chunk of ``Qc`` questions; see :func:`hyperprove_hop`.

    Shapes:
        queries ``[Qc, D]``, frontier ``[Qc, F]``, seeds ``[Qc, S']`` -> ids, scores, distance
        ``[Qc, min(K, m)]``, seeds ``[Qc, S]``, subgraph ``[Qc, m]``.
    """
    num_q = queries.shape[0]
    num_facts = op.num_facts
    # record_function scopes name the stages in torch.profiler traces (python -m benchmarks ops bench_hop profile=true)
    with record_function("hop.seeds"):  # 1. dense seeds and their cosines (exact float32, any backend)
        cos_all = None
        if seeds is None and index.backend == "exact":
            # one [Qc, H] cosine matrix serves the seeds and, later, the candidates' cosines
            cos_all = index.scores(queries, chunk_size=plan.key_chunk,
                                   out=_buffer(workspace, "cos", num_q * num_facts, torch.float32,
                                               op.device).view(num_q, num_facts))
            seed_cos, seeds = blocked_topk(cos_all, search_k, dim=1)
        else:
            if seeds is None:
                _, seeds = index.search(queries, search_k, chunk_size=plan.key_chunk)
            seed_cos = index.cosine(queries, seeds)  # [Qc, S]
    with record_function("hop.walk"):  # 2. walk with restart from the seeds and the frontier
        restart_ids, restart_mass = restart_distribution(seeds, seed_cos, frontier,
                                                         frontier_weight=cfg.frontier_weight,
                                                         seed_weighting=cfg.seed_weighting)
        visits = walk_visits(op, restart_ids, restart_mass, walk_steps=cfg.walk_steps, restart=cfg.restart,
                             workspace=workspace)  # [H, Qc]
    with record_function("hop.top_m"):  # 3. local subgraph: frontier and seeds forced in (they fit)
        subgraph = top_visited(visits, torch.cat([frontier, seeds], dim=1), m)  # [Qc, m]
        valid = subgraph >= 0
    # 4. BFS from the seeds; 5. distance to the frontier (reversed edges)
    is_seed = (subgraph.unsqueeze(2) == seeds.unsqueeze(1)).any(2) & valid  # [Qc, m]
    is_front = (subgraph.unsqueeze(2) == frontier.unsqueeze(1)).any(2) & valid  # [Qc, m]
    struct_depth = cfg.struct_depth if cfg.struct_depth > 0 else cfg.bfs_depth
    if cfg.theta == 0:
        # T* > 0 has the symmetric pattern of W_s, so "from the seeds" and "to the frontier" are the
        # same search direction: one pass over the block per round serves both searches
        depths, reverse = [max(cfg.bfs_depth, struct_depth)] * 2, [True, True]
    else:
        depths, reverse = [cfg.bfs_depth, struct_depth], [False, True]
    if op.uses_join_kernel():  # the CPU kernel: the BFS walks the blocks' edges, never forms them
        with record_function("hop.local_bfs"):
            both = op.local_bfs(subgraph, torch.stack([is_seed, is_front], dim=2), depths, reverse,
                                theta=cfg.theta)  # [Qc, m, 2] int64
    else:
        with record_function("hop.local_blocks"):
            block = op.local_blocks(subgraph, out=_buffer(workspace, "block", num_q * m * m, op.dtype, op.device)
                                    .view(num_q, m, m), max_pairs=plan.max_pairs)
            if cfg.theta > 0:  # with theta == 0 the block (entries >= 0) is its own adjacency: T* > 0
                torch.nn.functional.threshold_(block, cfg.theta, 0.0)  # keeps T*_ij > theta, in place
        with record_function("hop.bfs"):
            if cfg.theta == 0:
                both = batched_bfs(block, torch.stack([is_seed, is_front], dim=2), depths[0], reverse=True)
            else:
                both = torch.stack([batched_bfs(block, is_seed, depths[0]),
                                    batched_bfs(block, is_front, depths[1], reverse=True)], dim=2)  # [Qc, m, 2]
    from_seed, to_front = both[..., 0], both[..., 1]
    if cfg.theta == 0:
        reached = (from_seed >= 0) & (from_seed <= cfg.bfs_depth)
        to_front = torch.where(to_front <= struct_depth, to_front, -1)
    else:
        reached = from_seed >= 0
    with record_function("hop.score"):  # 6. scores over the m slots, one topk
        if cos_all is not None:
            cos = torch.where(valid, torch.gather(cos_all, 1, subgraph.clamp(min=0)), 0.0)  # [Qc, m]
        else:
            cos = index.cosine(queries, subgraph)  # [Qc, m] float32
        struct = torch.where(to_front >= 1, 1.0 / to_front.clamp(min=1).float(), 0.0)
        score = cfg.alpha * cos + (1.0 - cfg.alpha) * struct
        candidate = reached & valid & ~is_front
        score = torch.where(candidate, score, float("-inf"))
        top_scores, slot = torch.topk(score, min(cfg.top_k, m), dim=1)
        found = top_scores > float("-inf")
        ids = torch.where(found, torch.gather(subgraph, 1, slot), -1)
        dist = torch.where(found, torch.gather(to_front, 1, slot), -1)
    return ids, top_scores, dist, seeds, subgraph
