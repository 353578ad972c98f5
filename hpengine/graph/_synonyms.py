"""Synonym-aware entities (docs/methods/index.md#synonyms): names whose embeddings have cosine >= eta are synonyms.

The exact nearest-neighbour search is tiled (``[block, block]`` similarity tiles merged with
``torch.topk``) or delegated to FAISS, so memory stays O(block² + Nq·k), never O(V²); its time is
quadratic in the names. Above ``exact_max_keys`` keys the default (``backend="auto"``) switches to
an approximate inverted-file search (``"ivf"``): FAISS k-means cells, each name compared only with
the keys of its ``nprobe`` nearest cells, by exact float32 matmul tiles (benchmarks/README.md#synonym-search).
Embeddings are assumed L2-normalised (as :class:`hpengine.models.Encoder` returns them), so the
inner product is the cosine.
"""
from __future__ import annotations

import warnings

import torch
from torch import Tensor

from hpengine.sparse import coalesce_pairs
from hpengine.typing import WITH_FAISS, WITH_FAISS_GPU

_BACKENDS = ("auto", "faiss", "ivf", "torch")
# Size switch of backend="auto": up to this many keys the exact tiled search (the three dev corpora
# have at most 73,813 entity names, so their indexes stay exact); above it the IVF search
# (bench_synonyms.py: at 100k names, one thread, exact ~4 min; IVF recall 1.0 in ~10 s).
EXACT_MAX_KEYS = 100_000
IVF_CELL_SIZE = 256  # mean keys per k-means cell (nlist = keys // cell_size); see bench_synonyms.py
IVF_NPROBE = 8  # cells searched per query
_KMEANS_ITER = 5  # k-means iterations of the cell training (2: recall -0.006 at 160k names, 0: -0.05)
_KMEANS_POINTS_PER_CELL = 16  # keys sampled per cell for the training (FAISS max_points_per_centroid)


def _check_embeddings(queries: Tensor, keys: Tensor) -> None:
    for arg, x in (("queries", queries), ("keys", keys)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{arg} must be a torch.Tensor (got {type(x).__name__})")
        if x.ndim != 2:
            raise ValueError(f"{arg} must be 2-D [N, D] (got shape {tuple(x.shape)})")
        if not x.is_floating_point():
            raise TypeError(f"{arg} must be a floating tensor (got {x.dtype})")
    if queries.shape[1] != keys.shape[1]:
        raise ValueError(f"queries and keys must have the same dim D (got {queries.shape[1]} and {keys.shape[1]})")
    if queries.device != keys.device:
        raise ValueError(f"queries and keys must be on one device (got {queries.device} and {keys.device})")


def _check_options(threshold, max_per_entity, block_size, query_offset, backend) -> None:
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {list(_BACKENDS)} (got {backend!r})")
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [-1, 1] (got {threshold!r})")
    if not isinstance(max_per_entity, int) or max_per_entity < 0:
        raise ValueError(f"max_per_entity must be an int >= 0, 0 meaning no cap (got {max_per_entity!r})")
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be an int >= 1 (got {block_size!r})")
    if not isinstance(query_offset, int) or query_offset < 0:
        raise ValueError(f"query_offset must be an int >= 0 (got {query_offset!r})")


def _check_ivf_options(exact_max_keys, cell_size, nprobe, seed) -> None:
    for name, value, lo in (("exact_max_keys", exact_max_keys, 0), ("cell_size", cell_size, 1),
                            ("nprobe", nprobe, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ValueError(f"{name} must be an int >= {lo} (got {value!r})")


def synonym_pairs(queries: Tensor, keys: Tensor, *, threshold: float = 0.8, max_per_entity: int = 16,
                  block_size: int = 2048, query_offset: int = 0, exclude_self: bool = True,
                  backend: str = "auto", exact_max_keys: int = EXACT_MAX_KEYS, cell_size: int = IVF_CELL_SIZE,
                  nprobe: int = IVF_NPROBE, seed: int = 0, return_similarity: bool = False):
    """Directed synonym pairs: for each query, its nearest keys with cosine >= ``threshold``.

    Query ``i`` is entity ``query_offset + i`` of the key table, so new entities can be matched
    against all entities (``queries = keys[query_offset:]``) without re-searching old ones.

    The exact backends cost time quadratic in the names; ``"ivf"`` is approximate and about linear
    (benchmarks/README.md#synonym-search). It splits the keys into ``Nk // cell_size`` cells by
    FAISS spherical k-means (``seed``; trained single-threaded on at most 16 keys per cell) and
    compares each query, by exact float32 matmul tiles, only with the keys of its ``nprobe``
    nearest cells. So every pair it returns has its exact cosine (>= ``threshold``); it misses the
    pairs whose key lies outside the probed cells. With an uncapped search (or a cap that does not
    bind) its pairs are a subset of the exact ones; when the cap binds, a missed neighbour can let
    the next one in. The cells depend only on the keys, ``seed`` and the FAISS build, so the output
    is deterministic for a machine and thread count (as the torch backend's float32 rounding is).

    Args:
        queries: ``[Nq, D]`` L2-normalised embeddings (not checked: the inner product is taken
            as the cosine).
        keys: ``[Nk, D]`` L2-normalised embeddings, same device as ``queries``.
        threshold: eta; pairs with cosine ``>=`` it are kept. Default 0.8 (MiniLM's eta).
        max_per_entity: keep at most this many keys per query (the most similar ones; which of
            several tied keys at the cap is kept is unspecified). 0 means no cap. Default 16.
        block_size: rows of queries, and of keys, per similarity tile (torch and ivf backends:
            memory is about ``block_size² + 2·block_size·max_per_entity`` floats), queries per
            search call (faiss). Default 2048.
        query_offset: key id of the first query. Default 0.
        exclude_self: drop the pair ``(query_offset + i, query_offset + i)``. Default True.
        backend: ``"auto"`` (``"torch"`` up to ``exact_max_keys`` keys, else ``"ivf"``; torch
            when FAISS is missing, with a warning), ``"torch"`` (exact: tiled matmul +
            ``torch.topk`` on the input device, the reference), ``"faiss"`` (exact
            ``IndexFlatIP``; GPU FAISS for CUDA inputs when installed) or ``"ivf"`` (approximate,
            above; k-means on the host, tiles on the input device). Default auto.
        exact_max_keys: the size switch of ``"auto"``. Default 100,000.
        cell_size: ivf: mean keys per cell. Default 256.
        nprobe: ivf: cells searched per query (more: higher recall, proportionally slower).
            Default 8.
        seed: ivf: k-means seed. Default 0.
        return_similarity: also return the float32 cosine of each pair. Default False.

    Returns:
        int64 ``[2, n]`` pairs ``(query_offset + i, j)`` on the input device, sorted by query then
        by decreasing similarity. Not symmetric (see :func:`symmetrize_pairs`). With
        ``return_similarity`` a tuple ``(pairs, similarity)``, similarity float32 ``[n]``.

    Shapes:
        queries ``[Nq, D]``, keys ``[Nk, D]`` -> ``[2, n]`` with ``n <= Nq · max_per_entity``.

    Example:
        >>> emb = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]]), dim=1)
        >>> synonym_pairs(emb, emb, threshold=0.8)
        tensor([[0, 1],
                [1, 0]])
    """
    _check_embeddings(queries, keys)
    _check_options(threshold, max_per_entity, block_size, query_offset, backend)
    _check_ivf_options(exact_max_keys, cell_size, nprobe, seed)
    if backend == "auto":
        backend = "torch" if keys.shape[0] <= exact_max_keys else "ivf"
        if backend == "ivf" and not WITH_FAISS:
            warnings.warn(f"synonym_pairs: {keys.shape[0]} keys > exact_max_keys={exact_max_keys} but FAISS is "
                          f"missing, so the exact (quadratic) torch search runs; install faiss-cpu", stacklevel=2)
            backend = "torch"
    if queries.shape[0] == 0 or keys.shape[0] == 0:
        pairs, sim = torch.zeros(2, 0, dtype=torch.long, device=queries.device), queries.new_zeros(0).float()
    elif backend == "faiss":
        pairs, sim = _faiss_pairs(queries, keys, threshold, max_per_entity, block_size, query_offset, exclude_self)
    elif backend == "ivf":
        pairs, sim = _ivf_pairs(queries, keys, threshold, max_per_entity, block_size, query_offset, exclude_self,
                                cell_size, nprobe, seed)
    else:
        search = _block_pairs_topk if max_per_entity > 0 else _block_pairs_all
        parts = []
        for start in range(0, queries.shape[0], block_size):
            block = queries[start:start + block_size].float()
            parts.append(search(block, keys, query_offset + start, threshold, max_per_entity, block_size, exclude_self))
        pairs, sim = torch.cat([p for p, _ in parts], dim=1), torch.cat([s for _, s in parts])
    return (pairs, sim) if return_similarity else pairs


def _similarity_tile(block: Tensor, keys: Tensor, block_id: Tensor, key_start: int, key_block: int,
                     exclude_self: bool) -> Tensor:
    """float32 ``[b, kb]`` cosines of a query block against ``keys[key_start:key_start+key_block]``."""
    tile = block @ keys[key_start:key_start + key_block].float().T
    if exclude_self:
        key_id = torch.arange(key_start, key_start + tile.shape[1], device=tile.device)
        tile.masked_fill_(block_id[:, None] == key_id[None, :], float("-inf"))
    return tile


def _block_pairs_topk(block: Tensor, keys: Tensor, first_id: int, threshold: float, k: int,
                      key_block: int, exclude_self: bool) -> tuple[Tensor, Tensor]:
    """Top-``k`` keys per query of one block, merged over key tiles (running top-k)."""
    block_id = torch.arange(first_id, first_id + block.shape[0], device=block.device)
    best_sim = block.new_full((block.shape[0], 0), float("-inf"))
    best_key = torch.zeros(block.shape[0], 0, dtype=torch.long, device=block.device)
    for key_start in range(0, keys.shape[0], key_block):
        tile = _similarity_tile(block, keys, block_id, key_start, key_block, exclude_self)
        sim, key = tile.topk(min(k, tile.shape[1]), dim=1)
        best_sim = torch.cat([best_sim, sim], dim=1)
        best_key = torch.cat([best_key, key + key_start], dim=1)
        if best_sim.shape[1] > k:
            best_sim, pos = best_sim.topk(k, dim=1)
            best_key = best_key.gather(1, pos)
    # topk returns each row sorted by decreasing similarity, so row-major nonzero keeps that order;
    # the output size is data-dependent (offline index build, not a hot path)
    row, col = (best_sim >= threshold).nonzero(as_tuple=True)
    return torch.stack([block_id[row], best_key[row, col]]), best_sim[row, col]


def _block_pairs_all(block: Tensor, keys: Tensor, first_id: int, threshold: float, k: int,
                     key_block: int, exclude_self: bool) -> tuple[Tensor, Tensor]:
    """Every key with cosine >= threshold (no cap), tile by tile, sorted by query then similarity."""
    block_id = torch.arange(first_id, first_id + block.shape[0], device=block.device)
    rows, cols, sims = [], [], []
    for key_start in range(0, keys.shape[0], key_block):
        tile = _similarity_tile(block, keys, block_id, key_start, key_block, exclude_self)
        row, col = (tile >= threshold).nonzero(as_tuple=True)  # data-dependent size: offline build
        rows.append(row)
        cols.append(col + key_start)
        sims.append(tile[row, col])
    row, col, sim = torch.cat(rows), torch.cat(cols), torch.cat(sims)
    order = torch.argsort(sim, descending=True, stable=True)
    order = order[torch.argsort(row[order], stable=True)]
    return torch.stack([block_id[row[order]], col[order]]), sim[order]


def _faiss_index(keys_np, device: torch.device):
    import faiss

    index = faiss.IndexFlatIP(keys_np.shape[1])
    if device.type == "cuda" and WITH_FAISS_GPU:  # exact search either way; GPU only for speed
        index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), device.index or 0, index)
    index.add(keys_np)
    return index


def _faiss_pairs(queries: Tensor, keys: Tensor, threshold: float, k: int, block_size: int,
                 query_offset: int, exclude_self: bool) -> tuple[Tensor, Tensor]:
    """Same contract as the torch backend, with a FAISS exact inner-product index."""
    if not WITH_FAISS:
        raise ImportError("backend='faiss' needs FAISS: pip install 'hpengine[gpu]' or faiss-cpu (got no faiss)")
    import numpy as np

    device = queries.device
    index = _faiss_index(keys.detach().float().cpu().contiguous().numpy(), device)
    queries_np = queries.detach().float().cpu().contiguous().numpy()
    parts = []
    for start in range(0, queries_np.shape[0], block_size):
        block = queries_np[start:start + block_size]
        first_id = query_offset + start
        if k > 0:
            pairs = _faiss_block_topk(index, block, first_id, threshold, k, exclude_self)
        else:
            pairs = _faiss_block_range(index, block, first_id, threshold, exclude_self, np)
        parts.append(pairs)
    return torch.cat([p for p, _ in parts], dim=1).to(device), torch.cat([s for _, s in parts]).to(device)


def _faiss_block_topk(index, block, first_id: int, threshold: float, k: int,
                      exclude_self: bool) -> tuple[Tensor, Tensor]:
    # one extra neighbour, because the query itself (a key too) usually comes back first
    kk = min(k + int(exclude_self), index.ntotal)
    sim, key = (torch.from_numpy(a) for a in index.search(block, kk))
    block_id = torch.arange(first_id, first_id + block.shape[0])
    is_dropped = key < 0  # faiss pads with -1 when fewer than kk keys exist
    if exclude_self:
        is_dropped |= key == block_id[:, None]
    sim = sim.masked_fill(is_dropped, float("-inf"))
    sim, pos = sim.topk(min(k, kk), dim=1)
    key = key.gather(1, pos)
    row, col = (sim >= threshold).nonzero(as_tuple=True)
    return torch.stack([block_id[row], key[row, col]]), sim[row, col]


def _faiss_block_range(index, block, first_id: int, threshold: float, exclude_self: bool,
                       np) -> tuple[Tensor, Tensor]:
    # faiss keeps inner products strictly above the radius: step one float32 ulp down to get ">="
    radius = float(np.nextafter(np.float32(threshold), np.float32(-np.inf)))
    lims, sim, key = index.range_search(block, radius)
    lims, sim, key = torch.from_numpy(lims).long(), torch.from_numpy(sim), torch.from_numpy(key).long()
    row = torch.repeat_interleave(torch.arange(block.shape[0]), lims[1:] - lims[:-1])
    keep = sim >= threshold
    if exclude_self:
        keep &= key != row + first_id
    row, key, sim = row[keep], key[keep], sim[keep]
    order = torch.argsort(sim, descending=True, stable=True)
    order = order[torch.argsort(row[order], stable=True)]
    return torch.stack([row[order] + first_id, key[order]]), sim[order]


def _ivf_pairs(queries: Tensor, keys: Tensor, threshold: float, k: int, block_size: int, query_offset: int,
               exclude_self: bool, cell_size: int, nprobe: int, seed: int) -> tuple[Tensor, Tensor]:
    """Same contract as the torch backend, searching only the keys of each query's ``nprobe`` nearest cells.

    An inverted file whose lists are scanned cell by cell as matmul tiles (all queries probing a
    cell against its keys) instead of query by query as FAISS ``IndexIVFFlat`` does: on an
    all-pairs search that scan is memory bound, the tiles are not (bench_synonyms.py).
    """
    if not WITH_FAISS:
        raise ImportError("backend='ivf' needs FAISS for its k-means: pip install faiss-cpu (got no faiss)")
    num_queries = queries.shape[0]
    keys32, queries32 = keys.float(), queries.float()
    centroids = _train_cells(keys32, max(1, keys.shape[0] // cell_size), seed)  # [C, D] float32
    # a self-join (queries are keys[query_offset:]) probes each vector once: its best probe is its cell
    is_self_join = (query_offset + num_queries <= keys.shape[0] and queries.dtype == keys.dtype
                    and torch.equal(queries, keys[query_offset:query_offset + num_queries]))
    probes = min(nprobe, centroids.shape[0])
    key_probe = _nearest_cells(keys32, centroids, probes if is_self_join else 1, block_size)  # [Nk, P] int64
    if is_self_join:
        query_probe = key_probe[query_offset:query_offset + num_queries]
    else:
        query_probe = _nearest_cells(queries32, centroids, probes, block_size)  # [Nq, P] int64
    query_row = torch.arange(num_queries, device=keys.device).repeat_interleave(probes)
    row, col, sim = _grouped_search(queries32, query_offset, query_row, query_probe.reshape(-1), keys32,
                                    key_probe[:, 0], centroids.shape[0], threshold, k, block_size, exclude_self)
    return torch.stack([row + query_offset, col]), sim


def _train_cells(keys: Tensor, num_cells: int, seed: int) -> Tensor:
    """float32 ``[C, D]`` unit centroids: FAISS spherical k-means on the host, single-threaded."""
    import faiss

    if num_cells == 1:  # one cell holds every key: the search is exact and the centroid unused
        return keys.new_ones(1, keys.shape[1])
    kmeans = faiss.Kmeans(keys.shape[1], num_cells, niter=_KMEANS_ITER, seed=seed, spherical=True,
                          max_points_per_centroid=_KMEANS_POINTS_PER_CELL, min_points_per_centroid=1)
    # k-means assigns by BLAS products whose rounding depends on the thread count: one thread
    # makes the cells the same on every machine size (training on a 16-per-cell sample is cheap)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        kmeans.train(keys.detach().cpu().contiguous().numpy())
    finally:
        faiss.omp_set_num_threads(threads)
    return torch.from_numpy(kmeans.centroids).to(keys.device)


def _nearest_cells(x: Tensor, centroids: Tensor, probes: int, block_size: int) -> Tensor:
    """int64 ``[N, probes]`` ids of each row's most similar centroids, tiles of <= block_size² floats."""
    rows = max(1, block_size * block_size // centroids.shape[0])
    return torch.cat([(x[start:start + rows] @ centroids.T).topk(probes, dim=1).indices
                      for start in range(0, x.shape[0], rows)])


def _grouped_search(queries: Tensor, first_id: int, slot_row: Tensor, slot_cell: Tensor, keys: Tensor,
                    key_cell: Tensor, num_cells: int, threshold: float, k: int, block_size: int,
                    exclude_self: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Pairs >= threshold of each query with the keys of the cells it probes, its ``k`` best (0: all).

    ``slot_row``/``slot_cell`` ``[n]``: query row and probed cell of each probe (no cell twice per
    row); ``key_cell`` ``[Nk]``: the one cell of each key. Query ``i`` has id ``first_id + i`` for
    ``exclude_self``. Returns (row, key, cosine) sorted by row, then decreasing cosine.
    """
    key_order = torch.argsort(key_cell, stable=True)  # keys grouped by cell
    slot_order = torch.argsort(slot_cell, stable=True)  # probes grouped by cell
    row_of_slot = slot_row[slot_order]
    # per-cell sizes drive a host loop over cells (offline build, not a hot path)
    key_count = torch.bincount(key_cell, minlength=num_cells).tolist()
    slot_count = torch.bincount(slot_cell, minlength=num_cells).tolist()
    rows, cols, sims = [], [], []
    key_start = slot_start = 0
    for num_keys, num_slots in zip(key_count, slot_count):
        if num_keys and num_slots:
            key_id = key_order[key_start:key_start + num_keys]
            cell_keys = keys[key_id]
            for start in range(slot_start, slot_start + num_slots, block_size):
                query_row = row_of_slot[start:min(start + block_size, slot_start + num_slots)]
                row, col, sim = _cell_candidates(queries[query_row], query_row + first_id, cell_keys, key_id,
                                                 threshold, k, block_size, exclude_self)
                rows.append(query_row[row])
                cols.append(col)
                sims.append(sim)
        key_start += num_keys
        slot_start += num_slots
    if not rows:
        return slot_row[:0], slot_row[:0], queries.new_zeros(0)
    row, col, sim = torch.cat(rows), torch.cat(cols), torch.cat(sims)
    order = torch.argsort(sim, descending=True, stable=True)
    order = order[torch.argsort(row[order], stable=True)]
    row, col, sim = row[order], col[order], sim[order]
    if k > 0:  # up to k candidates from each probed cell: keep the k most similar of each query
        is_kept = torch.arange(row.numel(), device=row.device) - torch.searchsorted(row, row) < k
        row, col, sim = row[is_kept], col[is_kept], sim[is_kept]
    return row, col, sim


def _cell_candidates(block: Tensor, block_id: Tensor, cell_keys: Tensor, key_id: Tensor, threshold: float, k: int,
                     key_block: int, exclude_self: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Rows, key ids and cosines of one cell's pairs >= threshold, at most ``k`` per row and tile (k = 0: all).

    ``block`` float32 ``[b, D]`` with query ids ``block_id`` ``[b]``; ``cell_keys`` float32
    ``[m, D]`` with key ids ``key_id`` ``[m]``; tiles of ``b x key_block``. The caller caps each
    query at its ``k`` best over all tiles and cells; the per-tile cap only bounds memory.
    """
    rows, cols, sims = [], [], []
    for start in range(0, cell_keys.shape[0], key_block):
        tile = block @ cell_keys[start:start + key_block].T  # [b, kb] float32
        tile_key = key_id[start:start + key_block]
        if exclude_self:
            tile.masked_fill_(block_id[:, None] == tile_key[None, :], float("-inf"))
        is_kept = tile >= threshold
        # data-dependent sizes and a host check: offline build, not a hot path. Pairs above eta are
        # rare, so a top-k runs only on the tiles where some row has more than k of them.
        if k > 0 and bool((is_kept.sum(1) > k).any()):
            sim, pos = tile.topk(k, dim=1)
            row, col = (sim >= threshold).nonzero(as_tuple=True)
            rows.append(row)
            cols.append(tile_key[pos[row, col]])
            sims.append(sim[row, col])
            continue
        row, col = is_kept.nonzero(as_tuple=True)
        rows.append(row)
        cols.append(tile_key[col])
        sims.append(tile[row, col])
    return torch.cat(rows), torch.cat(cols), torch.cat(sims)


def symmetrize_pairs(pairs: Tensor) -> Tensor:
    """Both directions of every pair, without duplicates, sorted by first then second id.

    Args:
        pairs: int64 ``[2, n]``.

    Returns:
        int64 ``[2, n']`` with ``(b, a)`` present for every ``(a, b)``, lexicographically sorted.

    Shapes:
        ``[2, n]`` -> ``[2, n']``, ``n' <= 2n``.

    Example:
        >>> symmetrize_pairs(torch.tensor([[0, 2, 1], [1, 0, 0]]))
        tensor([[0, 0, 1, 2],
                [1, 2, 0, 0]])
    """
    _check_pairs("pairs", pairs)
    if pairs.shape[1] == 0:
        return pairs.clone()
    return torch.unique(torch.cat([pairs, pairs.flip(0)], dim=1), dim=1)


def _check_pairs(arg: str, pairs: Tensor) -> None:
    if not isinstance(pairs, Tensor):
        raise TypeError(f"{arg} must be a torch.Tensor (got {type(pairs).__name__})")
    if pairs.ndim != 2 or pairs.shape[0] != 2:
        raise ValueError(f"{arg} must have shape [2, n] (got {tuple(pairs.shape)})")
    if pairs.dtype != torch.long:
        raise TypeError(f"{arg} must be int64 (got {pairs.dtype})")


def expand_with_synonyms(fact_entity: Tensor, synonym_pairs: Tensor, num_facts: int, num_entities: int) -> Tensor:
    """``A_i⁺ = A_i ∪ Syn(A_i)``: add every synonym of a fact's entities to the fact
    (docs/methods/index.md#synonyms).

    ``Syn(a) = {b : (a, b) in synonym_pairs}``; one step, not a transitive closure. Pairs are
    used as given: symmetrize them first (:func:`symmetrize_pairs`) for a symmetric relation.
    Vectorised as a sort-join on the entity column (CSR expansion), no loop over facts.

    Args:
        fact_entity: int64 ``[2, nnz]`` (fact, entity) pairs.
        synonym_pairs: int64 ``[2, n]`` (entity, synonym) pairs, same device.
        num_facts: H.
        num_entities: V.

    Returns:
        int64 ``[2, nnz']`` (fact, entity) pairs, coalesced, sorted by fact then entity.

    Shapes:
        ``[2, nnz]``, ``[2, n]`` -> ``[2, nnz']``, ``nnz' <= nnz · (1 + max out-degree)``.

    Example:
        >>> expand_with_synonyms(torch.tensor([[0, 1], [0, 2]]), torch.tensor([[0], [2]]), 2, 3)
        tensor([[0, 0, 1],
                [0, 2, 2]])
    """
    _check_pairs("fact_entity", fact_entity)
    _check_pairs("synonym_pairs", synonym_pairs)
    if fact_entity.device != synonym_pairs.device:
        raise ValueError(f"fact_entity and synonym_pairs must be on one device "
                         f"(got {fact_entity.device} and {synonym_pairs.device})")
    src, dst = synonym_pairs[0], synonym_pairs[1]
    order = torch.argsort(src, stable=True)
    dst_sorted = dst[order]
    counts = torch.bincount(src, minlength=num_entities)  # [V] synonyms per entity
    ptr = torch.cumsum(counts, 0) - counts  # [V] first slot of each entity in dst_sorted
    degree = counts[fact_entity[1]]  # [nnz] synonyms of each incidence's entity
    fact = torch.repeat_interleave(fact_entity[0], degree)  # output size is data-dependent (offline)
    first = torch.repeat_interleave(ptr[fact_entity[1]], degree)
    group_start = torch.repeat_interleave(torch.cumsum(degree, 0) - degree, degree)
    slot = first + torch.arange(fact.numel(), device=fact.device) - group_start
    added = torch.stack([fact, dst_sorted[slot]])
    return coalesce_pairs(torch.cat([fact_entity, added], dim=1), num_facts, num_entities)


__all__ = ["expand_with_synonyms", "symmetrize_pairs", "synonym_pairs"]
