"""Synonym-aware entities (docs/methods/index.md#synonyms): names whose embeddings have cosine >= eta are synonyms.

The exact nearest-neighbour search is tiled (``[block, block]`` similarity tiles merged with
``torch.topk``) or delegated to FAISS, so memory stays O(block² + Nq·k), never O(V²); its time is
quadratic in the names. Above ``exact_max_keys`` keys the default (``backend="auto"``) switches to
an approximate search (``"nndescent"``): the k-nearest-neighbour graph of the names by NN-descent
(pynndescent), its candidates re-scored exactly (benchmarks/ops/bench_synonyms.py measures both).
Embeddings are assumed L2-normalised (as :class:`hpengine.models.Encoder` returns them), so the
inner product is the cosine.
"""
from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from hpengine.sparse import unique_keys
from hpengine.typing import WITH_FAISS, WITH_FAISS_GPU

_BACKENDS = ("auto", "faiss", "nndescent", "torch")
# Size switch of backend="auto": up to this many keys the exact tiled search. The dev corpora have
# at most 73,813 entity names (HotpotQA), so their indexes keep the exact search and its output.
# bench_synonyms.py, MiniLM names, one thread: exact 122 s at 80k names and growing 4x per 2x;
# nndescent 34 s at 160k (recall 0.996) plus a one-off numba compilation of about a minute.
EXACT_MAX_KEYS = 100_000
ANN_NEIGHBORS = 24  # candidates per name (17: recall 0.991 at 160k names; 24: 0.996, 1.4x the time)
# ann_dims=0 (by size): NN-descent holds a float32 copy of what it searches. Up to this many bytes it
# searches the full embeddings, above it their ANN_PROJECTED_DIMS-dimensional projection (3x less
# memory for 384-dim names; 200k MiniLM names: recall 0.990 against 0.997, 0.73x the time).
ANN_FULL_MAX_BYTES = 2 << 30
ANN_PROJECTED_DIMS = 128
# NN-descent's own memory grows with the names it holds (about 1.4 KB per name beside their vectors):
# a self-join over more names than this runs in name blocks (cells of a k-means of the searched
# vectors, every name in its two nearest cells), so one graph holds about this many names at a time.
ANN_BLOCK_KEYS = 1 << 19


def resolve_synonym_backend(backend: str, num_keys: int, exact_max_keys: int = EXACT_MAX_KEYS) -> str:
    """``"auto"`` as :func:`synonym_pairs` resolves it: ``"torch"`` (exact) up to ``exact_max_keys``
    keys, ``"nndescent"`` above; any other backend as given."""
    if backend != "auto":
        return backend
    return "torch" if num_keys <= exact_max_keys else "nndescent"


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


def _check_ann_options(exact_max_keys, ann_neighbors, seed, ann_dims) -> None:
    for name, value, lo in (("exact_max_keys", exact_max_keys, 0), ("ann_neighbors", ann_neighbors, 2),
                            ("seed", seed, 0), ("ann_dims", ann_dims, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ValueError(f"{name} must be an int >= {lo} (got {value!r})")


def synonym_pairs(queries: Tensor, keys: Tensor, *, threshold: float = 0.8, max_per_entity: int = 16,
                  block_size: int = 2048, query_offset: int = 0, exclude_self: bool = True,
                  backend: str = "auto", exact_max_keys: int = EXACT_MAX_KEYS, ann_neighbors: int = ANN_NEIGHBORS,
                  seed: int = 0, ann_dims: int = 0, return_similarity: bool = False):
    """Directed synonym pairs: for each query, its nearest keys with cosine >= ``threshold``.

    Query ``i`` is entity ``query_offset + i`` of the key table, so new entities can be matched
    against all entities (``queries = keys[query_offset:]``) without re-searching old ones.

    The exact backends cost time quadratic in the names; ``"nndescent"`` is approximate and grows
    about linearly (benchmarks/ops/bench_synonyms.py). It builds the ``ann_neighbors``-nearest
    neighbour graph of the keys by NN-descent (pynndescent, inner product, seeded by ``seed``),
    takes each query's graph neighbours as candidates (its row of the graph when the queries are
    keys, ``keys[query_offset:query_offset + Nq]``; a search of that graph otherwise) and re-scores
    them exactly (float32, on the input device) before the threshold and the cap. So every pair it
    returns has its exact cosine (>= ``threshold``); it misses a pair whose key is not among the
    query's candidates. With a cap that does not bind its pairs are a subset of the exact ones;
    when the cap binds, a missed neighbour can let the next one in. With ``max_per_entity=0`` (no
    cap) a query has at most ``ann_neighbors`` pairs. The graph depends on the keys, ``seed`` and
    the number of threads; the first call in a process compiles pynndescent's numba code (about a
    minute, cached on disk after). NN-descent holds a float32 copy of what it searches: above
    2 GiB of it (1.4M names of 384 dims) it searches the names' projection onto their top
    ``ann_dims`` principal directions instead (:func:`principal_projection`, made in blocks from
    the input's dtype), and the candidates are still re-scored on the full embeddings.

    Args:
        queries: ``[Nq, D]`` L2-normalised embeddings (not checked: the inner product is taken
            as the cosine).
        keys: ``[Nk, D]`` L2-normalised embeddings, same device as ``queries``.
        threshold: eta; pairs with cosine ``>=`` it are kept. Default 0.8 (MiniLM's eta).
        max_per_entity: keep at most this many keys per query (the most similar ones; which of
            several tied keys at the cap is kept is unspecified). 0 means no cap. Default 16.
        block_size: rows of queries, and of keys, per similarity tile (torch backend:
            memory is about ``block_size² + 2·block_size·max_per_entity`` floats), queries per
            search call (faiss). Default 2048.
        query_offset: key id of the first query. Default 0.
        exclude_self: drop the pair ``(query_offset + i, query_offset + i)``. Default True.
        backend: ``"auto"`` (``"torch"`` up to ``exact_max_keys`` keys, else ``"nndescent"``),
            ``"torch"`` (exact: tiled matmul + ``torch.topk`` on the input device, the reference),
            ``"faiss"`` (exact ``IndexFlatIP``; GPU FAISS for CUDA inputs when installed) or
            ``"nndescent"`` (approximate, above; the graph on the host, re-scoring on the input
            device). Default auto.
        exact_max_keys: the size switch of ``"auto"``. Default 100,000.
        ann_neighbors: nndescent: graph neighbours per key, the candidates of each query (at
            least ``max_per_entity + 1``; more: higher recall, slower). Default 24.
        seed: nndescent: random seed of the graph build. Default 0.
        ann_dims: nndescent: dimensions of the searched projection; ``0`` (default) by size
            (the full embeddings while their float32 copy is at most 2 GiB, else 128); at least
            the embedding dimension means the full embeddings.
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
    _check_ann_options(exact_max_keys, ann_neighbors, seed, ann_dims)
    backend = resolve_synonym_backend(backend, keys.shape[0], exact_max_keys)
    if queries.shape[0] == 0 or keys.shape[0] == 0:
        pairs, sim = torch.zeros(2, 0, dtype=torch.long, device=queries.device), queries.new_zeros(0).float()
    elif backend == "faiss":
        pairs, sim = _faiss_pairs(queries, keys, threshold, max_per_entity, block_size, query_offset, exclude_self)
    elif backend == "nndescent":
        num_candidates = min(max(ann_neighbors, max_per_entity + 1), keys.shape[0])
        candidates = _nndescent_candidates(queries, keys, query_offset, num_candidates, seed, ann_dims)
        pairs, sim = _rescore_candidates(queries, keys, candidates, threshold=threshold, max_per_entity=max_per_entity,
                                        block_size=block_size, query_offset=query_offset, exclude_self=exclude_self)
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


def searched_dims(num_keys: int, dim: int, ann_dims: int = 0) -> int:
    """Dimensions NN-descent searches (``ann_dims`` of :func:`synonym_pairs`; ``dim``: no projection)."""
    if ann_dims == 0:
        ann_dims = dim if num_keys * dim * 4 <= ANN_FULL_MAX_BYTES else ANN_PROJECTED_DIMS
    return min(ann_dims, dim)


def principal_projection(keys: Tensor, dims: int, block_size: int = 1 << 16) -> Tensor:
    """float32 ``[D, dims]``: the top ``dims`` eigenvectors of the keys' uncentred second-moment
    matrix ``KᵀK`` (accumulated in float64 over blocks), the projection that keeps most of their
    inner products. Deterministic; the columns ordered by decreasing eigenvalue.

    Shapes:
        keys ``[N, D]`` (any float dtype) -> ``[D, dims]``.
    """
    dim = keys.shape[1]
    moment = torch.zeros(dim, dim, dtype=torch.float64, device=keys.device)
    for lo in range(0, keys.shape[0], block_size):
        block = keys[lo:lo + block_size].float()
        moment += (block.T @ block).double()
    _, vectors = torch.linalg.eigh(moment)  # ascending eigenvalues
    return vectors[:, -dims:].flip(1).float().contiguous()


def _searched_array(x: Tensor, projection: Tensor | None, block_size: int = 1 << 16):
    """float32 numpy ``[N, d]`` on the host: ``x`` or its projection, made block by block."""
    if projection is None:
        return x.detach().float().cpu().contiguous().numpy()
    out = torch.empty(x.shape[0], projection.shape[1], dtype=torch.float32)
    for lo in range(0, x.shape[0], block_size):
        out[lo:lo + block_size] = (x[lo:lo + block_size].detach().float() @ projection.to(x.device)).cpu()
    return out.numpy()


@contextlib.contextmanager
def _numba_threads():
    """The thread count for NN-descent (torch's); numba sets the process's OpenMP thread count,
    which torch shares, so both are restored afterwards."""
    import numba

    threads, numba_threads = torch.get_num_threads(), numba.get_num_threads()
    try:
        yield min(threads, numba.config.NUMBA_NUM_THREADS)
    finally:
        numba.set_num_threads(numba_threads)
        torch.set_num_threads(threads)


def _cells_of(keys: Tensor, projection: Tensor | None, num_cells: int, seed: int, rows: int = 1 << 16) -> Tensor:
    """int64 ``[N, 2]``: each key's two nearest cells of a spherical k-means (FAISS, seeded) of the
    searched vectors, trained on at most 256 keys per cell."""
    import faiss

    gen = torch.Generator().manual_seed(seed)
    sample = torch.randperm(keys.shape[0], generator=gen)[:256 * num_cells].sort().values
    train = torch.nn.functional.normalize(torch.from_numpy(_searched_array(keys[sample], projection)), dim=1)
    kmeans = faiss.Kmeans(train.shape[1], num_cells, niter=20, seed=seed, spherical=True)
    kmeans.train(train.numpy())
    centroids = torch.from_numpy(kmeans.centroids)
    out = torch.empty(keys.shape[0], 2, dtype=torch.int64)
    for lo in range(0, keys.shape[0], rows):
        block = torch.from_numpy(_searched_array(keys[lo:lo + rows], projection))
        out[lo:lo + rows] = (block @ centroids.T).topk(2, dim=1).indices
    return out


def _blocked_graph(keys: Tensor, projection: Tensor | None, num_candidates: int, seed: int, jobs: int) -> Tensor:
    """int32 ``[N, 2C]`` candidate keys per key (-1: none) from NN-descent graphs over name blocks:
    the cells of :func:`_cells_of`, about ``ANN_BLOCK_KEYS / 2`` keys each, every key in its two
    nearest, so a pair is found when both names share a cell (a pair at cosine >= η almost always
    does). Memory: one cell's graph at a time, and the ``[N, 2C]`` int32 candidates."""
    from pynndescent import NNDescent

    n = keys.shape[0]
    cells = _cells_of(keys, projection, -(-2 * n // ANN_BLOCK_KEYS), seed)
    out = torch.full((n, 2 * num_candidates), -1, dtype=torch.int32)
    for cell in range(int(cells.max()) + 1):
        ids = torch.nonzero((cells == cell).any(1)).squeeze(1)
        if len(ids) <= num_candidates:  # a small cell: all of it are candidates
            local = torch.arange(len(ids)).expand(len(ids), -1)
        else:
            index = NNDescent(_searched_array(keys[ids], projection), metric="dot", n_neighbors=num_candidates,
                              random_state=seed + cell, n_jobs=jobs, low_memory=True, verbose=False)
            local = torch.from_numpy(index.neighbor_graph[0].astype("int64"))
            del index
        found = torch.where(local >= 0, ids[local.clamp(min=0)], -1)
        second = cells[ids, 1] == cell  # this cell fills the key's first or second half of candidates
        for half, rows in ((0, ~second), (1, second)):
            out[ids[rows], half * num_candidates:half * num_candidates + found.shape[1]] = found[rows].int()
    return out


def _nndescent_candidates(queries: Tensor, keys: Tensor, query_offset: int, num_candidates: int,
                          seed: int, ann_dims: int = 0) -> Tensor:
    """Integer ``[Nq, C]`` candidate key ids per query (-1: none) from pynndescent's k-NN graph of the
    keys (or of their projection, :func:`searched_dims`); above ``ANN_BLOCK_KEYS`` keys a self-join
    takes ``2C`` candidates from graphs over name blocks (:func:`_blocked_graph`)."""
    num_queries = queries.shape[0]
    if num_candidates >= keys.shape[0]:  # every key is a candidate: no graph (nor pynndescent's import) needed
        return torch.arange(keys.shape[0], device=queries.device).expand(num_queries, -1)
    try:
        from pynndescent import NNDescent
    except ImportError as exc:
        raise ImportError("backend='nndescent' needs pynndescent: pip install pynndescent") from exc
    dims = searched_dims(keys.shape[0], keys.shape[1], ann_dims)
    projection = principal_projection(keys, dims) if dims < keys.shape[1] else None
    is_self_join = (query_offset + num_queries <= keys.shape[0] and queries.dtype == keys.dtype
                    and torch.equal(queries, keys[query_offset:query_offset + num_queries]))
    with _numba_threads() as jobs:
        if is_self_join and keys.shape[0] > ANN_BLOCK_KEYS:
            graph = _blocked_graph(keys, projection, num_candidates, seed, jobs)
            return graph[query_offset:query_offset + num_queries].to(queries.device)
        index = NNDescent(_searched_array(keys, projection), metric="dot", n_neighbors=num_candidates,
                          random_state=seed, n_jobs=jobs, low_memory=True, verbose=False)
        if is_self_join:
            graph = index.neighbor_graph[0][query_offset:query_offset + num_queries]
        else:
            graph = index.query(_searched_array(queries, projection), k=num_candidates)[0]
    return torch.from_numpy(graph.astype("int64")).to(queries.device)


def _rescore_candidates(queries: Tensor, keys: Tensor, candidates: Tensor, *, threshold: float = 0.8,
                       max_per_entity: int = 16, block_size: int = 2048, query_offset: int = 0,
                       exclude_self: bool = True) -> tuple[Tensor, Tensor]:
    """Exact cosines of candidate pairs, then the threshold and the per-query cap.

    The approximate search's second half: whatever proposed the candidates, every returned pair
    has its exact float32 cosine. With all keys as candidates it equals the exact search up to
    the order of tied pairs.

    Args:
        queries: ``[Nq, D]``, query ``i`` is key ``query_offset + i`` for ``exclude_self``.
        keys: ``[Nk, D]``.
        candidates: int64 ``[Nq, C]`` key ids, ``-1`` for none; repeated ids are kept once.
        threshold, max_per_entity, block_size, query_offset, exclude_self: as :func:`synonym_pairs`.

    Returns:
        (pairs int64 ``[2, n]`` ``(query_offset + i, key)``, cosine float32 ``[n]``), sorted by
        query then decreasing cosine.
    """
    rows, cols, sims = [], [], []
    for start in range(0, queries.shape[0], block_size):
        cand = candidates[start:start + block_size].long()
        block = queries[start:start + block_size].float()
        sim = torch.einsum("bd,bcd->bc", block, keys[cand.clamp(min=0)].float())  # [b, C]
        block_id = torch.arange(start, start + block.shape[0], device=block.device) + query_offset
        is_dropped = cand < 0
        if exclude_self:
            is_dropped |= cand == block_id[:, None]
        # a repeated candidate counts once: keep its first slot
        sorted_cand, pos = cand.sort(dim=1, stable=True)
        is_repeat = torch.zeros_like(is_dropped)
        is_repeat.scatter_(1, pos[:, 1:], sorted_cand[:, 1:] == sorted_cand[:, :-1])
        sim = sim.masked_fill(is_dropped | is_repeat, float("-inf"))
        sim, pos = sim.sort(dim=1, descending=True, stable=True)
        if max_per_entity > 0:
            sim, pos = sim[:, :max_per_entity], pos[:, :max_per_entity]
        row, col = (sim >= threshold).nonzero(as_tuple=True)  # data-dependent size: offline build
        rows.append(block_id[row])
        cols.append(cand.gather(1, pos)[row, col])
        sims.append(sim[row, col])
    if not rows:
        return torch.zeros(2, 0, dtype=torch.long, device=queries.device), queries.new_zeros(0).float()
    return torch.stack([torch.cat(rows), torch.cat(cols)]), torch.cat(sims)


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
    n = int(pairs.max()) + 1
    key = unique_keys(torch.cat([pairs[0] * n + pairs[1], pairs[1] * n + pairs[0]]), inplace=True)
    return torch.stack([key // n, key % n])


def _check_pairs(arg: str, pairs: Tensor) -> None:
    if not isinstance(pairs, Tensor):
        raise TypeError(f"{arg} must be a torch.Tensor (got {type(pairs).__name__})")
    if pairs.ndim != 2 or pairs.shape[0] != 2:
        raise ValueError(f"{arg} must have shape [2, n] (got {tuple(pairs.shape)})")
    if pairs.dtype != torch.long:
        raise TypeError(f"{arg} must be int64 (got {pairs.dtype})")


#: keys made per block of :func:`expand_with_synonyms` (bounds its temporaries: 32 MiB each)
EXPAND_CHUNK = 1 << 22


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
    if fact_entity.numel() == 0:
        return fact_entity.new_zeros((2, 0))
    src, dst = synonym_pairs[0], synonym_pairs[1]
    # symmetrize_pairs' output is sorted by its first id already
    in_order = src.numel() < 2 or bool((src[1:] >= src[:-1]).all())
    dst_sorted = dst if in_order else dst[torch.argsort(src, stable=True)]
    counts = torch.bincount(src, minlength=num_entities)  # [V] synonyms per entity
    ptr = torch.cumsum(counts, 0) - counts  # [V] first slot of each entity in dst_sorted
    raw = unique_keys(fact_entity[0] * num_entities + fact_entity[1], inplace=True)  # [nnz] fact-major
    fact, entity = raw // num_entities, raw % num_entities
    # blocks of whole facts with about EXPAND_CHUNK keys each: a fact's keys are all in one block and
    # blocks are in fact order, so the blocks' sorted distinct keys, one after another, are the
    # result; every temporary is a block's (a million-passage index makes ~76M keys)
    ends = torch.cumsum(counts[entity] + 1, 0)  # [nnz] keys made up to each raw pair
    bounds = [0]
    while bounds[-1] < raw.numel():
        lo = bounds[-1]
        hi = max(lo + 1, int(torch.searchsorted(ends, int(ends[lo]) + EXPAND_CHUNK)))
        if hi < raw.numel():  # back to the first pair of the fact it would split, or past a fact
            start = int(torch.searchsorted(fact, fact[hi]))  # that alone is longer than a block
            hi = start if start > lo else int(torch.searchsorted(fact, fact[lo], right=True))
        bounds.append(min(hi, raw.numel()))
    parts = [_expand_block(raw[a:b], fact[a:b], entity[a:b], counts, ptr, dst_sorted, num_entities)
             for a, b in zip(bounds[:-1], bounds[1:])]
    out = torch.empty((2, sum(p.numel() for p in parts)), dtype=torch.int64, device=raw.device)
    at = 0
    for k in range(len(parts)):
        part, parts[k] = parts[k], None
        torch.floor_divide(part, num_entities, out=out[0, at:at + part.numel()])
        torch.remainder(part, num_entities, out=out[1, at:at + part.numel()])
        at += part.numel()
    return out


def _expand_block(raw: Tensor, fact: Tensor, entity: Tensor, counts: Tensor, ptr: Tensor, dst_sorted: Tensor,
                  num_entities: int) -> Tensor:
    """Sorted distinct keys ``fact * V + entity`` of a block of whole facts: its raw keys ``[n]`` and
    every synonym of their entities (``dst_sorted[ptr[e]:ptr[e] + counts[e]]``)."""
    degree = counts[entity]  # [n] synonyms of each incidence's entity
    total = int(degree.sum())  # output size is data-dependent (offline)
    slot = torch.arange(total, device=raw.device)
    slot -= torch.repeat_interleave(torch.cumsum(degree, 0) - degree, degree, output_size=total)  # rank in group
    slot += torch.repeat_interleave(ptr[entity], degree, output_size=total)  # + the entity's first synonym slot
    key = torch.empty(raw.numel() + total, dtype=torch.int64, device=raw.device)
    key[:raw.numel()] = raw
    added = key[raw.numel():]
    added.copy_(torch.repeat_interleave(fact, degree, output_size=total)).mul_(num_entities)
    added += dst_sorted[slot]
    del slot
    return unique_keys(key, inplace=True)


__all__ = ["expand_with_synonyms", "symmetrize_pairs", "synonym_pairs"]
