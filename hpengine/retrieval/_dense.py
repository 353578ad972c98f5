"""Dense top-k over fact (or passage) embeddings: exact chunked matmul, or FAISS
(HyperProve's seeds: docs/methods/hyperprove.md#dense-seeds)."""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from hpengine import typing as hp_typing
from hpengine.sparse import inverse_or_zero

_BACKENDS = ("auto", "exact", "faiss_flat", "faiss_ivf")
#: ``backend="auto"`` searches exactly below this many keys and by FAISS IVF from it on
APPROXIMATE_MIN_KEYS = 1_000_000
#: IVF trains on every key up to this many bytes of float32 copy, on a sample of that size above
IVF_TRAIN_MAX_BYTES = 1 << 30
#: ``codes="auto"``: IVF keeps full codes (float32, or fp16 for half keys) up to this many bytes of
#: them, product-quantizer codes above (3.86M half fact vectors would add 3 GB of fp16 codes)
PQ_MIN_BYTES = 512 << 20
#: product-quantizer codes: candidates re-scored exactly per key wanted (3.86M facts of the 1M-passage
#: index, 256 questions, top 8: recall 0.979 against exact search at 8 and at 64, the same as full
#: fp16 codes at nprobe 128, where the cells probed are what limits it; with one byte per 8 dims it took
#: 64 candidates per key to reach 0.976)
PQ_REFINE = 8
_CODES = ("auto", "full", "pq")
#: queries re-scored at a time after a product-quantizer search (bounds the gathered keys)
_RESCORE_QUERIES = 64


def resolve_codes(codes: str, num_keys: int, dim: int, element_size: int) -> str:
    """The IVF codes a ``codes`` setting gives: ``"auto"`` is ``"full"`` while the full codes
    (``num_keys * dim`` values of 4 bytes, 2 for half keys) take at most ``PQ_MIN_BYTES``, else
    ``"pq"``.

    Example:
        >>> resolve_codes("auto", 100_000, 384, 4), resolve_codes("auto", 3_861_030, 384, 2)
        ('full', 'pq')
    """
    if codes not in _CODES:
        raise ValueError(f"codes must be one of {list(_CODES)} (got {codes!r})")
    if codes != "auto":
        return codes
    full_bytes = num_keys * dim * min(element_size, 4)
    return "pq" if full_bytes > PQ_MIN_BYTES else "full"


def pq_subquantizers(dim: int) -> int:
    """Sub-vectors of a product-quantizer code: the largest divisor of ``dim`` up to ``dim // 4``
    (one byte per 4 dimensions: 96 bytes for 384, 1/8 of fp16 codes).

    Example:
        >>> pq_subquantizers(384), pq_subquantizers(100), pq_subquantizers(7)
        (96, 25, 1)
    """
    return max([m for m in range(1, max(dim // 4, 1) + 1) if dim % m == 0])


def resolve_backend(backend: str, num_keys: int, approximate_min_keys: int = APPROXIMATE_MIN_KEYS) -> str:
    """The search a ``backend`` setting gives for ``num_keys`` keys: ``"auto"`` is ``"exact"``
    below ``approximate_min_keys`` and ``"faiss_ivf"`` from it on; the others are what they say.

    Example:
        >>> resolve_backend("auto", 50_000), resolve_backend("auto", 2_000_000), resolve_backend("exact", 10**9)
        ('exact', 'faiss_ivf', 'exact')
    """
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {list(_BACKENDS)} (got {backend!r})")
    if backend != "auto":
        return backend
    return "faiss_ivf" if num_keys >= approximate_min_keys else "exact"


def _check_embeddings(name: str, x: Tensor, ndim: int) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (got {type(x).__name__})")
    if not x.dtype.is_floating_point:
        raise TypeError(f"{name} must be floating point (got {x.dtype})")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions (got shape {tuple(x.shape)})")


def dense_topk(queries: Tensor, keys: Tensor, k: int, chunk_size: int = 65536, *,
               key_scale: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Exact top-``k`` keys by inner product, chunked over the keys and merged on the device.

    Each chunk of keys is multiplied in float32 (also for fp16/bf16 inputs), its top-``k`` is
    concatenated with the running best and reduced again with ``torch.topk``; the ``[Q, N]``
    score matrix is never formed. Peak extra memory is ``4 * Q * (chunk_size + 2k)`` bytes plus one
    float32 copy of a key chunk.

    Args:
        queries: ``[Q, D]`` float tensor.
        keys: ``[N, D]`` float tensor on the same device.
        k: number of keys kept per query (``>= 0``); when ``k > N`` the tail is padded.
        chunk_size: keys per chunk (default 65536).
        key_scale: optional ``[N]`` per-key factor applied to the scores (for example the inverse
            key norms, which turns inner products into cosines without copying ``keys``).

    Returns:
        ``(scores, ids)``: float32 ``[Q, k]`` sorted descending, int64 ``[Q, k]``; padding is
        ``-inf`` / ``-1``. Ties are broken arbitrarily.

    Shapes:
        queries ``[Q, D]``, keys ``[N, D]`` -> ``[Q, k]``, ``[Q, k]``.

    Example:
        >>> q = torch.tensor([[1.0, 0.0]])
        >>> dense_topk(q, torch.tensor([[0.0, 1.0], [2.0, 0.0], [1.0, 1.0]]), 2)
        (tensor([[2., 1.]]), tensor([[1, 2]]))
    """
    _check_embeddings("queries", queries, 2)
    _check_embeddings("keys", keys, 2)
    if queries.shape[1] != keys.shape[1]:
        raise ValueError(f"queries and keys must have the same dim D (got {queries.shape[1]} and {keys.shape[1]})")
    if queries.device != keys.device:
        raise ValueError(f"queries must be on the keys' device {keys.device} (got {queries.device})")
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be a non-negative int (got {k!r})")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int (got {chunk_size!r})")
    num_keys = keys.shape[0]
    if key_scale is not None and (key_scale.shape != (num_keys,) or key_scale.device != keys.device):
        raise ValueError(f"key_scale must be [N] = [{num_keys}] on {keys.device} "
                         f"(got {tuple(key_scale.shape)} on {key_scale.device})")
    num_q = queries.shape[0]
    best_scores = queries.new_full((num_q, k), float("-inf"), dtype=torch.float32)
    best_ids = torch.full((num_q, k), -1, dtype=torch.int64, device=queries.device)
    if k == 0 or num_keys == 0 or num_q == 0:
        return best_scores, best_ids
    q32 = queries.float()
    for start in range(0, num_keys, chunk_size):  # loop over key chunks, never over queries
        chunk = keys[start:start + chunk_size].float()
        scores = q32 @ chunk.T  # [Q, Nc] float32
        if key_scale is not None:
            scores.mul_(key_scale[start:start + chunk.shape[0]].float())
        kc = min(k, chunk.shape[0])
        top_scores, top_ids = torch.topk(scores, kc, dim=1)
        merged_scores = torch.cat([best_scores, top_scores], dim=1)
        merged_ids = torch.cat([best_ids, top_ids + start], dim=1)
        best_scores, pos = torch.topk(merged_scores, k, dim=1)
        best_ids = torch.gather(merged_ids, 1, pos)
    # -inf scores only come from padding columns: keep their ids at -1
    best_ids = torch.where(torch.isneginf(best_scores), -1, best_ids)
    return best_scores, best_ids


class DenseIndex:
    """Cosine top-k over a fixed set of key embeddings, built once and searched many times.

    ``backend`` selects the search: ``"auto"`` (``"exact"`` below ``approximate_min_keys`` keys,
    ``"faiss_ivf"`` from there on: :func:`resolve_backend`; ``backend`` holds the resolved one),
    ``"exact"`` (:func:`dense_topk` with the inverse key norms as
    ``key_scale``; the keys are not copied), ``"faiss_flat"`` (exact inner product in FAISS on
    normalised keys) or ``"faiss_ivf"`` (approximate: ``nlist`` k-means cells, ``nprobe`` of them
    searched; ``nlist`` is lowered to ``N // 39`` for small ``N``, FAISS' minimum training ratio).
    FAISS runs on the GPU (``faiss.StandardGpuResources``) when the keys are on CUDA and
    ``hpengine.typing.WITH_FAISS_GPU`` is set; CUDA keys with a CPU-only FAISS raise.

    Whatever the backend, :meth:`cosine` gives exact float32 cosines of chosen keys (used to weight
    seeds and score candidates), so results agree across backends wherever the same ids are found.

    Args:
        keys: ``[N, D]`` float embeddings (any float dtype; kept by reference).
        backend: ``"exact"`` (default), ``"auto"``, ``"faiss_flat"`` or ``"faiss_ivf"``.
        nlist: IVF cells (default 1024). nprobe: IVF cells searched (default 256: at 1M passages the
            top 5 passages' recall is 0.987, 0.969 at 128, for twice the search time, ~2 s per 512
            questions; at 128 the top 8 facts' recall was 0.987-0.998 on the dev sets, 0.82-0.93 at 16).
        approximate_min_keys: where ``"auto"`` turns approximate (default 1,000,000).
        codes: what the IVF cells store: ``"full"`` (the normalised keys: float32, fp16 for half keys),
            ``"pq"`` (product-quantizer codes, one byte per 4 dims, whose ``refine * k`` best
            candidates are re-scored by exact cosines from ``keys``) or ``"auto"`` (``"pq"`` once full
            codes would pass ``PQ_MIN_BYTES``, 512 MiB: :func:`resolve_codes`; ``codes`` holds the
            resolved one, None for the other backends).
        refine: candidates per key wanted with ``"pq"`` codes (default 8).
        release: for approximate backends, called with each block of ``keys`` the build has read
            (views of ``keys``), to hand them back (the engine passes
            :func:`~hpengine.graph.page_out` for memory-mapped embeddings, so a build over 3 GB of
            them does not leave them resident); not called for ``"exact"``.
        chunk_size: keys per chunk of the exact search (default 65536).

    Shapes:
        keys ``[N, D]``; ``search``: ``[Q, D] -> [Q, k], [Q, k]``; ``cosine``: ``[Q, D], [Q, n] -> [Q, n]``.

    Example:
        >>> index = DenseIndex(torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]))
        >>> scores, ids = index.search(torch.tensor([[0.0, 1.0]]), 2)
        >>> ids
        tensor([[1, 2]])
    """

    def __init__(self, keys: Tensor, *, backend: str = "exact", nlist: int = 1024, nprobe: int = 256,
                 chunk_size: int = 65536, approximate_min_keys: int = APPROXIMATE_MIN_KEYS, codes: str = "auto",
                 refine: int = PQ_REFINE, release=None):
        _check_embeddings("keys", keys, 2)
        for name, v in (("nlist", nlist), ("nprobe", nprobe), ("chunk_size", chunk_size),
                        ("approximate_min_keys", approximate_min_keys), ("refine", refine)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int (got {v!r})")
        backend = resolve_backend(backend, int(keys.shape[0]), approximate_min_keys)
        codes = resolve_codes(codes, int(keys.shape[0]), int(keys.shape[1]), keys.element_size())
        self.keys = keys
        self.backend = backend
        self.codes = codes if backend == "faiss_ivf" else None
        self.refine = refine
        self.chunk_size = chunk_size
        # an exact index reads every key on every search: nothing to hand back
        self._release = release if backend != "exact" else None
        norms = torch.empty(keys.shape[0], dtype=torch.float32, device=keys.device)  # [N], a chunk at a time
        for lo in range(0, keys.shape[0], chunk_size):
            norms[lo:lo + chunk_size] = torch.linalg.vector_norm(keys[lo:lo + chunk_size].float(), dim=1)
            self._released(keys[lo:lo + chunk_size])
        self.inv_norm = inverse_or_zero(norms)
        self._faiss = None
        self._faiss_gpu = False
        if backend != "exact":
            self._build_faiss(nlist, nprobe)

    def _released(self, rows: Tensor) -> None:
        """Rows the build has read, handed to ``release`` (approximate backends only)."""
        if self._release is not None:
            self._release(rows)

    @classmethod
    def from_config(cls, keys: Tensor, cfg, *, release=None) -> "DenseIndex":
        """Build from a :class:`hpengine.config.RetrievalConfig` (``seed_backend``, ``faiss_*``,
        ``approximate_min_keys``)."""
        return cls(keys, backend=cfg.seed_backend, nlist=cfg.faiss_nlist, nprobe=cfg.faiss_nprobe,
                   approximate_min_keys=cfg.approximate_min_keys, codes=cfg.faiss_codes, release=release)

    @property
    def exact(self) -> bool:
        """Whether :meth:`search` is exact (``"exact"`` or ``"faiss_flat"``)."""
        return self.backend != "faiss_ivf"

    @property
    def num_keys(self) -> int:
        return int(self.keys.shape[0])

    @property
    def dim(self) -> int:
        return int(self.keys.shape[1])

    @property
    def device(self) -> torch.device:
        return self.keys.device

    def _build_faiss(self, nlist: int, nprobe: int) -> None:
        if not hp_typing.WITH_FAISS:
            raise ImportError(f"seed_backend={self.backend!r} needs FAISS: install the faiss-cpu package "
                              f"(an hpengine dependency) or the `gpu` extra for faiss-gpu (got no importable faiss)")
        import faiss

        use_gpu = self.device.type == "cuda"
        if use_gpu and not hp_typing.WITH_FAISS_GPU:
            raise NotImplementedError(f"seed_backend={self.backend!r} with keys on {self.device} needs GPU FAISS "
                                      f"(the `gpu` extra); use seed_backend='exact' or move the keys to the CPU "
                                      f"(got a CPU-only faiss)")
        num, dim = self.keys.shape
        if self.backend == "faiss_flat":
            index = faiss.IndexFlatIP(dim)
        else:
            cells = max(1, min(nlist, num // 39))
            quantizer = faiss.IndexFlatIP(dim)
            if self.codes == "pq":  # one byte per 4 dims (96 B for 384), candidates re-scored exactly
                bits = max(1, min(8, (num // 39).bit_length() - 1))  # 2^bits centroids need ~39 rows each
                index = faiss.IndexIVFPQ(quantizer, dim, cells, pq_subquantizers(dim), bits, faiss.METRIC_INNER_PRODUCT)
            elif self.keys.dtype in (torch.float16, torch.bfloat16):  # half keys: half codes (half the memory)
                index = faiss.IndexIVFScalarQuantizer(quantizer, dim, cells, faiss.ScalarQuantizer.QT_fp16,
                                                      faiss.METRIC_INNER_PRODUCT)
            else:
                index = faiss.IndexIVFFlat(quantizer, dim, cells, faiss.METRIC_INNER_PRODUCT)
            index.train(self._training_matrix(self._training_rows(cells)))
            index.nprobe = min(nprobe, cells)
            self._quantizer = quantizer  # the IVF index does not own it
        for lo in range(0, num, self.chunk_size):  # FAISS builds on the host, a chunk at a time
            index.add(self._normalised(torch.arange(lo, min(lo + self.chunk_size, num))))
            self._released(self.keys[lo:lo + self.chunk_size])
        if use_gpu:
            import faiss.contrib.torch_utils  # noqa: F401  (lets GPU indexes take torch CUDA tensors)

            self._resources = faiss.StandardGpuResources()
            options = faiss.GpuClonerOptions()
            options.useFloat16 = self.codes == "pq"  # GPU IVF-PQ needs half lookup tables past 48-byte codes
            index = faiss.index_cpu_to_gpu(self._resources, self.device.index or 0, index, options)
            self._faiss_gpu = True
        self._faiss = index

    def _normalised(self, rows: Tensor):
        """float32 numpy ``[n, D]``: the unit-norm keys ``rows`` on the host."""
        rows = rows.to(self.device)
        return (self.keys[rows].float() * self.inv_norm[rows].unsqueeze(1)).cpu().numpy()

    def _training_matrix(self, rows: Tensor):
        """float32 numpy ``[n, D]``: the unit-norm keys ``rows`` (ascending), gathered a block at a
        time; each block's span of keys goes to ``release`` once copied (a sample spread over all
        keys touches every page of them)."""
        out = np.empty((rows.numel(), self.dim), dtype=np.float32)
        for lo in range(0, rows.numel(), self.chunk_size):
            block = rows[lo:lo + self.chunk_size]
            out[lo:lo + block.numel()] = self._normalised(block)
            self._released(self.keys[int(block[0]):int(block[-1]) + 1])
        return out

    def _training_rows(self, cells: int) -> Tensor:
        """The keys IVF's k-means trains on: all of them while their float32 copy is at most
        ``IVF_TRAIN_MAX_BYTES``, else an evenly spaced sample of that size (at least 256 per cell,
        what FAISS would sample anyway)."""
        num, dim = self.keys.shape
        take = max(IVF_TRAIN_MAX_BYTES // (4 * dim), 256 * cells)
        if num <= take:
            return torch.arange(num)
        return torch.linspace(0, num - 1, take).long()

    def search(self, queries: Tensor, k: int, *, chunk_size: int | None = None) -> tuple[Tensor, Tensor]:
        """Top-``k`` keys by cosine.

        Args:
            queries: ``[Q, D]`` float tensor on the index's device.
            k: keys per query (``>= 0``).
            chunk_size: keys per chunk of the exact search (default: the index's ``chunk_size``).

        Returns:
            float32 ``[Q, k]`` cosines (descending) and int64 ``[Q, k]`` ids, ``-inf`` / ``-1`` padded
            (FAISS IVF may find fewer than ``k``). The FAISS backends copy queries to the host and
            back unless they run on the GPU.

        Shapes:
            ``[Q, D] -> [Q, k], [Q, k]``.
        """
        _check_embeddings("queries", queries, 2)
        if queries.shape[1] != self.dim:
            raise ValueError(f"queries must have D={self.dim} (got {queries.shape[1]})")
        if queries.device != self.device:
            raise ValueError(f"queries must be on the index's device {self.device} (got {queries.device})")
        qn = queries.float() * inverse_or_zero(torch.linalg.vector_norm(queries.float(), dim=1)).unsqueeze(1)
        if self._faiss is None:
            return dense_topk(qn, self.keys, k, chunk_size or self.chunk_size, key_scale=self.inv_norm)
        if k == 0 or qn.shape[0] == 0:
            return dense_topk(qn, self.keys[:0], k)
        if self.codes == "pq":
            return self._search_rescored(qn, k)
        return self._faiss_search(qn, k)

    def _faiss_search(self, qn: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """FAISS' own top-``k`` of unit queries: float32 scores (``-inf`` padded), int64 ids."""
        if self._faiss_gpu:
            scores, ids = self._faiss.search(qn.contiguous(), k)
        else:
            s, i = self._faiss.search(qn.cpu().numpy(), k)  # host round trip: CPU FAISS
            scores, ids = torch.from_numpy(s).to(self.device), torch.from_numpy(i).to(self.device)
        ids = ids.long()
        scores = torch.where(ids >= 0, scores.float(), float("-inf"))
        return scores, ids

    def _search_rescored(self, qn: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """Product-quantizer candidates (``refine * k`` per query), re-scored by exact cosines."""
        wide = min(self.num_keys, self.refine * k)
        _, cand = self._faiss_search(qn, wide)  # [Q, wide]
        scores = torch.empty(qn.shape[0], wide, dtype=torch.float32, device=qn.device)
        for lo in range(0, qn.shape[0], _RESCORE_QUERIES):  # bounds the gathered [q, wide, D] keys
            scores[lo:lo + _RESCORE_QUERIES] = self.cosine(qn[lo:lo + _RESCORE_QUERIES], cand[lo:lo + _RESCORE_QUERIES])
        scores = torch.where(cand >= 0, scores, float("-inf"))
        top, pos = torch.topk(scores, min(k, wide), dim=1)
        ids = torch.where(torch.isneginf(top), -1, torch.gather(cand, 1, pos))
        if top.shape[1] < k:  # fewer keys than k: pad as dense_topk does
            pad = k - top.shape[1]
            top = torch.cat([top, top.new_full((top.shape[0], pad), float("-inf"))], dim=1)
            ids = torch.cat([ids, ids.new_full((ids.shape[0], pad), -1)], dim=1)
        return top, ids

    def scores(self, queries: Tensor, *, out: Tensor | None = None, chunk_size: int | None = None) -> Tensor:
        """Exact float32 cosines of every query with every key (the ``[Q, N]`` matrix).

        For callers that need many cosines per query anyway (the hop takes its seeds and its
        candidates' cosines from one such matrix). Float32 keys take one matmul; other dtypes are
        converted one chunk of ``chunk_size`` keys at a time.

        Args:
            queries: ``[Q, D]`` float tensor on the index's device.
            out: optional contiguous float32 ``[Q, N]`` buffer.
            chunk_size: keys converted at a time for non-float32 keys (default: the index's).

        Returns:
            float32 ``[Q, N]``; 0 for zero-norm vectors. Memory: ``4 * Q * N`` bytes.

        Shapes:
            ``[Q, D] -> [Q, N]``.
        """
        _check_embeddings("queries", queries, 2)
        if queries.shape[1] != self.dim or queries.device != self.device:
            raise ValueError(f"queries must be [Q, {self.dim}] on {self.device} "
                             f"(got {tuple(queries.shape)} on {queries.device})")
        num_q = queries.shape[0]
        if out is None:
            out = torch.empty(num_q, self.num_keys, dtype=torch.float32, device=self.device)
        elif out.shape != (num_q, self.num_keys) or out.dtype != torch.float32 or not out.is_contiguous():
            raise ValueError(f"out must be a contiguous float32 [{num_q}, {self.num_keys}] tensor "
                             f"(got {out.dtype} {tuple(out.shape)})")
        q32 = queries.float()
        qn = q32 * inverse_or_zero(torch.linalg.vector_norm(q32, dim=1)).unsqueeze(1)
        if self.keys.dtype == torch.float32:
            torch.mm(qn, self.keys.T, out=out)
        else:
            step = chunk_size or self.chunk_size
            for start in range(0, self.num_keys, step):
                chunk = self.keys[start:start + step].float()
                out[:, start:start + chunk.shape[0]] = qn @ chunk.T
        return out.mul_(self.inv_norm)

    def cosine(self, queries: Tensor, ids: Tensor) -> Tensor:
        """Exact float32 cosines of each query with its own list of keys.

        Args:
            queries: ``[Q, D]``; ids: int64 ``[Q, n]`` key ids, ``-1`` for padding.

        Returns:
            float32 ``[Q, n]``; 0 at padding and for zero-norm vectors.

        Shapes:
            ``[Q, D], [Q, n] -> [Q, n]``; memory ``n * D * (4 + itemsize)`` bytes per query.
        """
        if ids.dim() != 2 or ids.shape[0] != queries.shape[0]:
            raise ValueError(f"ids must be [Q, n] with Q={queries.shape[0]} (got shape {tuple(ids.shape)})")
        safe = ids.clamp(min=0).reshape(-1)
        q32 = queries.float()
        qn = q32 * inverse_or_zero(torch.linalg.vector_norm(q32, dim=1)).unsqueeze(1)  # [Q, D]
        gathered = self.keys.index_select(0, safe).view(*ids.shape, self.dim).float()  # [Q, n, D]
        dots = torch.bmm(gathered, qn.unsqueeze(2)).squeeze(2)  # [Q, n] float32
        return torch.where(ids >= 0, dots * self.inv_norm.index_select(0, safe).view(ids.shape), 0.0)

    def __repr__(self) -> str:
        return (f"DenseIndex(backend={self.backend!r}, codes={self.codes!r}, num_keys={self.num_keys}, dim={self.dim}, "
                f"device={self.device})")
