"""Index build over ``torchrun``.

Every rank runs the same build (:func:`~hpengine.jobs.run_index`) with a
rank-sharded extractor and encoder: each extracts its contiguous share of the passages and runs
its share of the encoder's own batches of each list of texts (facts, entity names, passages:
:class:`ShardedEncoder`), and the shares are gathered in order, so every rank holds the same
facts, entities and embeddings as one process (bit-identical: same padded batches; sharding texts
instead changed bf16 results by ~1e-3, enough to flip synonym pairs near the threshold); synonyms
and incidence are then built identically on every rank (no collectives) and only rank 0 saves
(atomic, as :meth:`~hpengine.graph.Index.save`). That is the build with ``shard_size=0``.

The streaming build (``shard_size`` > 0, the default; :func:`_run_index_streaming`) shares shards
instead: rank ``r`` extracts and embeds shards ``k`` with ``k % R == r`` into the index's build
folder, no embedding crosses between ranks, and rank 0, which holds the writer lock for the whole
job, merges the shards from disk and saves. A killed run resumes from the finished shards, with
any number of ranks.
"""
from __future__ import annotations

import copy
import os
import time

import torch

from hpengine._profiling import peak_rss_mb
from hpengine.distributed._launch import _dist, _exchange, _map_devices, launched_by_torchrun, process_group
from hpengine.graph import IndexStore


class ShardedExtractor:
    """An extractor that extracts this rank's contiguous share of the passages and gathers all
    shares in order (every rank gets every passage's facts). ``stats`` sums the ranks'."""

    def __init__(self, inner, group=None):
        self.inner, self.group = inner, group
        self.stats: dict = {}
        self.own_seconds = 0.0

    def extract(self, passages: list, progress: bool = False) -> list:
        dist = _dist()
        rank, world = dist.get_rank(self.group), dist.get_world_size(self.group)
        lo, hi = _share(len(passages), rank, world)

        def work():
            start = time.perf_counter()
            out = self.inner.extract(passages[lo:hi], progress=progress and rank == 0) if hi > lo else []
            self.own_seconds += time.perf_counter() - start
            return out, dict(getattr(self.inner, "stats", None) or {})

        shares = _exchange(work, self.group)
        keys = {k for _, stats in shares for k in stats}
        self.stats = {k: sum(stats.get(k, 0) for _, stats in shares) for k in sorted(keys)
                      if all(isinstance(stats.get(k, 0), (int, float)) for _, stats in shares)}
        return [facts for part, _ in shares for facts in part]


class ShardedEncoder:
    """An encoder whose forward passes are spread over the ranks, with the embeddings of one process.

    For an :class:`~hpengine.models.Encoder` the texts are planned into the batches the encoder
    itself would run (``Encoder.plan_batches``: tokenised, sorted longest first, cut by
    ``max_tokens_per_batch`` or ``batch_size``); batch ``k`` runs on
    rank ``k % world_size`` as one forward pass over the same texts in the same order, so every
    embedding is computed from the same padded batch as in one process (bit-identical on the
    same hardware). Other encoders (no ``plan_batches``: one text at a time by contract, e.g.
    test fakes) get contiguous shares. The shares are all-gathered in input order, as float32 on the
    inner encoder's output device. Other attributes are the inner encoder's.
    """

    def __init__(self, inner, group=None):
        self.inner, self.group = inner, group
        self.own_seconds = 0.0

    def __getattr__(self, name):
        if name in ("inner", "group", "own_seconds"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def encode(self, texts: list, progress: bool = False, **kwargs):
        dist = _dist()
        rank, world = dist.get_rank(self.group), dist.get_world_size(self.group)
        texts = list(texts)
        if hasattr(self.inner, "plan_batches") and texts:
            plan = self.inner.plan_batches(texts, kind=kwargs.get("kind", "passage"),
                                           batch_size=kwargs.get("batch_size"))
            mine = [b for k, b in enumerate(plan) if k % world == rank]
        else:
            lo, hi = _share(len(texts), rank, world)
            mine = [list(range(lo, hi))] if hi > lo else []
        rest = {k: v for k, v in kwargs.items() if k != "batch_size"}

        def work():
            start = time.perf_counter()
            parts = [self.inner.encode([texts[i] for i in ids], batch_size=len(ids), **rest) for ids in mine]
            self.own_seconds += time.perf_counter() - start
            device = str(parts[0].device) if parts else None
            return [i for ids in mine for i in ids], (torch.cat(parts).detach().cpu() if parts else None), device

        shares = _exchange(work, self.group)
        if not texts:
            return self.inner.encode([], **kwargs)
        dim = next(e.shape[1] for _, e, _ in shares if e is not None)
        out = torch.empty(len(texts), dim, dtype=torch.float32)
        for ids, emb, _ in shares:
            if ids:
                out[torch.tensor(ids)] = emb.float()
        device = next(d for _, e, d in shares if d is not None)
        return out.to(shares[rank][2] or device)


def _share(n: int, rank: int, world: int) -> tuple:
    """``[lo, hi)`` of rank ``rank`` in ``world`` contiguous near-equal shares of ``n`` items."""
    base, extra = divmod(n, world)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


def run_index_distributed(cfg, *, overwrite: bool = False, progress: bool = True):
    """``hpengine index`` under torchrun: :func:`~hpengine.jobs.run_index` with extraction and
    embedding sharded over the ranks; rank 0 saves and returns ``(index, report)``, the others
    return None. Outside torchrun this is ``run_index``.

    The LLM extractor's cache is per rank (``<cache_dir>/rank<R>of<N>``), so a killed run resumes
    when restarted with the same number of ranks.
    """
    from hpengine.jobs import run_index

    if not launched_by_torchrun():
        return run_index(cfg, overwrite=overwrite, progress=progress)
    cfg = copy.deepcopy(cfg)
    _map_devices(cfg)
    with process_group(cfg.device):
        dist = _dist()
        rank, world = dist.get_rank(), dist.get_world_size()
        if cfg.extractor.kind == "llm":
            base = cfg.extractor.cache_dir or str(IndexStore(cfg.out).extract_cache)
            cfg.extractor.cache_dir = os.path.join(base, f"rank{rank}of{world}")
        if cfg.shard_size:
            return _run_index_streaming(cfg, rank, world, overwrite, progress)
        wrapped = {}

        def wrap(extractor, encoder):
            wrapped["extractor"], wrapped["encoder"] = ShardedExtractor(extractor), ShardedEncoder(encoder)
            return wrapped["extractor"], wrapped["encoder"]

        out = run_index(cfg, overwrite=overwrite, progress=progress and rank == 0, wrap=wrap,
                        save=lambda index: _exchange(lambda: index.save(cfg.out) if rank == 0 else None))
        mine = {"rank": rank, "extract_seconds": round(wrapped["extractor"].own_seconds, 3),
                "embed_seconds": round(wrapped["encoder"].own_seconds, 3), "peak_rss_mb": round(peak_rss_mb(), 1)}
        per_rank = [None] * world
        dist.all_gather_object(per_rank, mine)
        if rank != 0:
            return None
        index, report = out
        report["distributed"] = {"world_size": world, "backend": str(dist.get_backend()), "per_rank": per_rank}
        return index, report


def _run_index_streaming(cfg, rank: int, world: int, overwrite: bool, progress: bool):
    """The streaming build over the ranks; rank 0 returns ``(index, report)``, the others None.
    Every step is one :func:`_exchange`, so an error on any rank stops every rank with it."""
    import contextlib

    from hpengine.jobs import build_from_corpus, check_output_dir, index_writer, load_index_corpus, make_models

    state = {}
    with contextlib.ExitStack() as stack:
        def open_store():
            state["loaded"] = load_index_corpus(cfg, "index")
            if rank != 0:
                return None
            check_output_dir(cfg.out, overwrite=overwrite)
            writer = state["writer"] = stack.enter_context(index_writer(cfg, overwrite))
            return str(writer.build_folder())

        folder = _exchange(open_store)[0]

        def my_shards():
            start = time.perf_counter()
            state["models"] = make_models(cfg)
            ran = build_from_corpus(cfg, state["loaded"], cfg.corpus, progress and rank == 0, None,
                                    shard_folder=folder, merge=False, models=state["models"],
                                    my_shards=lambda pending: [k for k in pending if k % world == rank])
            return {"rank": rank, "shards_run": len(ran), "shard_seconds": round(time.perf_counter() - start, 3),
                    "peak_rss_mb": round(peak_rss_mb(), 1)}

        per_rank = _exchange(my_shards)

        def merge():
            if rank != 0:
                return None
            index, report = build_from_corpus(cfg, state["loaded"], cfg.corpus, progress, None, shard_folder=folder,
                                              my_shards=lambda pending: [], models=state["models"])
            report["shards_run"] = sum(r["shards_run"] for r in per_rank)  # the ranks ran them, not this call
            report["resumed_shards"] = report["shards"] - report["shards_run"]
            report["distributed"] = {"world_size": world, "backend": str(_dist().get_backend()),
                                     "per_rank": per_rank}
            index.save(cfg.out, writer=state["writer"])
            state["writer"].discard_build()
            state["built"] = index, report
            return None

        _exchange(merge)
    if rank != 0:
        return None
    return state["built"]
