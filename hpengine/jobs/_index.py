"""The ``index`` job: corpus in, saved index out, build report printed."""
from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from hpengine.config import IndexConfig
from hpengine.errors import OutputExistsError, UserError
from hpengine.graph import Index, IndexStore, add_passages, build_index, build_index_sharded, load_corpus
from hpengine.jobs._paths import check_index_dir, check_output_dir, check_writable
from hpengine.models import make_encoder, make_extractor


#: extractor settings that do not change what it extracts: this run's
_EXTRACTOR_RUNTIME = ("device", "cache_dir", "n_process", "spacy_batch_size", "llm_batch_size")
#: encoder settings that do not change its embeddings
_ENCODER_RUNTIME = ("device", "local_files_only")


def load_index_corpus(cfg: IndexConfig, command: str, loaded=None):
    """The passages of ``cfg.corpus``, or ``loaded`` (a :class:`~hpengine.graph.CorpusLoad` of records
    given in memory, :func:`~hpengine.graph.load_records`); refused when there are none."""
    if loaded is None and not cfg.corpus:
        raise UserError(f"{command} needs corpus=PATH (a JSON list or JSONL of {{title, text}}, CSV, Parquet); "
                        f"the built-in demo corpus is for `hpengine demo` (got no corpus=)")
    loaded = load_corpus(cfg.corpus) if loaded is None else loaded
    if not loaded.passages:
        r = loaded.report
        raise UserError(f"corpus={cfg.corpus or 'records'!r} has no passages to index ({r['num_records']} records, "
                        f"{r['empty_skipped']} with empty text, {r['duplicates_dropped']} duplicates)")
    return loaded


def run_index(cfg: IndexConfig, *, overwrite: bool = False, progress: bool = True, wrap=None, save=None,
              loaded=None):
    """Build and save the index described by ``cfg``.

    Args:
        cfg: ``corpus`` is required (unless ``loaded``); ``out`` is the folder written.
        loaded: the passages as a :class:`~hpengine.graph.CorpusLoad` instead of ``cfg.corpus``
            (records given in memory, :func:`~hpengine.graph.load_records`). Default None.
        overwrite: replace an index already at ``cfg.out`` (default False: refuse).
        progress: progress bars.
        wrap: ``(extractor, encoder) -> (extractor, encoder)``, and ``save``: ``index -> None``
            instead of ``index.save(cfg.out)``: hooks of the torchrun build
            (:func:`~hpengine.distributed.run_index_distributed`).

    Returns:
        ``(index, report)``; the report includes the corpus-loading counts and, per stage,
        seconds and peak memory.

    Raises:
        UserError: no corpus, a corpus without passages, or an ``out`` that must not be
            replaced; all checked before extraction starts.
    """
    check_output_dir(cfg.out, overwrite=overwrite)
    corpus_path = cfg.corpus
    loaded = load_index_corpus(cfg, "index", loaded)
    if save is not None:  # a torchrun build: rank 0 saves (under the lock), every rank hears how it went
        index, report = build_from_corpus(cfg, loaded, corpus_path, progress, wrap)
        save(index)
        return index, report
    with index_writer(cfg, overwrite) as writer:
        index, report = build_from_corpus(cfg, loaded, corpus_path, progress, wrap,
                                          shard_folder=writer.build_folder() if cfg.shard_size else None)
        index.save(cfg.out, writer=writer)
        writer.discard_build()
    return index, report


@contextlib.contextmanager
def index_writer(cfg: IndexConfig, overwrite: bool):
    """The writer lock of ``cfg.out`` for a build, held for the block; refused when another process
    committed an index there since the path checks and ``overwrite`` is off."""
    with IndexStore(cfg.out).writer(timeout=cfg.lock_timeout, command="hpengine index") as writer:
        if writer.previous is not None and not overwrite:
            raise OutputExistsError(f"out={cfg.out!r} received an index from another process; pass "
                                    f"overwrite=true to replace it")
        yield writer


def shard_settings(cfg: IndexConfig, encoder) -> dict:
    """What, besides the passages, changes what a shard of the streaming build holds: the
    extractor's and encoder's settings (not where or how fast they run) and the encoder's dtype."""
    extractor = {k: v for k, v in dataclasses.asdict(cfg.extractor).items() if k not in _EXTRACTOR_RUNTIME}
    enc = {k: v for k, v in dataclasses.asdict(cfg.encoder).items() if k not in _ENCODER_RUNTIME}
    model = getattr(encoder, "model", None)
    return {"extractor": extractor, "encoder_config": enc, "encoder_dtype": str(getattr(model, "dtype", ""))}


def make_models(cfg: IndexConfig) -> tuple:
    """``(extractor, encoder)`` of an index build."""
    return make_extractor(cfg.extractor, IndexStore(cfg.out)), make_encoder(cfg.encoder)


def build_from_corpus(cfg: IndexConfig, loaded, corpus_path: str, progress: bool, wrap, shard_folder=None,
                      my_shards=None, merge: bool = True, models=None):
    """The index of ``loaded``'s passages, with GRAG-MH's parts when configured: streamed through
    ``shard_folder`` when given (``my_shards`` and ``merge`` as :func:`build_index_sharded`'s;
    with ``merge`` False, the shards this call ran), else in one piece. ``models``:
    ``(extractor, encoder)`` already made (else :func:`make_models`)."""
    store = IndexStore(cfg.out)
    extractor, encoder = models if models is not None else make_models(cfg)
    if wrap is not None:  # a torchrun build (distributed/_index.py): rank-sharded extractor and encoder
        extractor, encoder = wrap(extractor, encoder)
    meta = {"build_config": dataclasses.asdict(cfg), "corpus": corpus_path}
    if shard_folder is not None:
        built = build_index_sharded(loaded.passages, extractor=extractor, encoder=encoder, shard_folder=shard_folder,
                                    shard_size=cfg.shard_size, graph_cfg=cfg.graph, embed_passages=cfg.embed_passages,
                                    device=cfg.device, progress=progress, meta=meta,
                                    settings=shard_settings(cfg, encoder), my_shards=my_shards, merge=merge)
        if not merge:
            return built
        index, report = built
    else:
        index, report = build_index(loaded.passages, extractor=extractor, encoder=encoder, graph_cfg=cfg.graph,
                                    embed_passages=cfg.embed_passages, device=cfg.device, progress=progress,
                                    meta=meta)
    report = {"corpus": corpus_path, "corpus_report": loaded.report, **report}
    if cfg.grag.build:  # GRAG-MH's parts (triples, communities, summary nodes) saved with the index
        from hpengine.jobs._grag_build import build_grag

        index.grag, report["grag"] = build_grag(index, encoder, cfg.grag, cache_dir=str(store.grag_cache),
                                                progress=progress)
    index.meta["build_report"] = report
    return index, report


def run_add(cfg: IndexConfig, *, progress: bool = True, loaded=None):
    """Add the passages of ``cfg.corpus`` (or ``loaded``, as :func:`run_index`'s) to the saved index
    at ``cfg.out`` (incremental).

    Raises:
        UserError: no corpus, a corpus without passages, or no index at ``cfg.out``; checked
            before any model loads.
    """
    check_index_dir(cfg.out, "out")
    loaded = load_index_corpus(cfg, "add", loaded)
    check_writable(cfg.out, "out")
    with IndexStore(cfg.out).writer(timeout=cfg.lock_timeout, command="hpengine add") as writer:
        encoder = make_encoder(cfg.encoder)  # after the lock: a locked or read-only index is refused at once
        index = Index.load(cfg.out, device=cfg.device, expected_encoder=encoder.name)  # the latest, under the lock
        extractor = make_extractor(cfg.extractor, IndexStore(cfg.out))
        had_grag = index.grag is not None
        new, report = add_passages(index, loaded.passages, extractor=extractor, encoder=encoder,
                                   graph_cfg=cfg.graph, progress=progress)
        report = {"corpus": cfg.corpus, "corpus_report": loaded.report, **report}
        if not report["added_passages"]:  # every passage is already there: no new generation
            return index, {**report, "unchanged": True}
        if had_grag and new.grag is None:  # the parts describe the passages before the add
            new.meta["grag_stale"] = report["grag_stale"] = (
                f"`hpengine add` added {report['added_passages']} passages after the GRAG parts were built, so they "
                f"were dropped; rebuild them with `hpengine grag-build {cfg.out}`")
        new.meta.setdefault("add_reports", []).append(report)
        new.save(cfg.out, writer=writer, append=True)  # the new rows only; the rest is linked
        report["generation"] = writer.previous.number
    return new, report


def format_add_report(report: dict, out: str | Path) -> str:
    """Human-readable report of an add: how many passages it added and skipped as already present."""
    skipped = report.get("skipped_known_passages", 0)
    if report.get("unchanged"):
        return (f"nothing to add to {out}: all {skipped} passages are already in the index; it is unchanged (no new "
                f"generation)")
    lines = format_report(report, out).splitlines()
    lines[0] += f" (generation {report['generation']})"
    lines.insert(1, f"  added {report['added_passages']} passages ({report['added_facts']} facts, "
                    f"{report['added_entities']} new entities); skipped {skipped} already present")
    if "grag_stale" in report:
        lines.append(f"  {report['grag_stale']}")
    return "\n".join(lines)


def format_report(report: dict, out: str | Path) -> str:
    """Human-readable build report."""
    lines = [f"index written to {out}"]
    for key in ("passages", "facts", "entities", "synonym_pairs", "nnz_raw", "nnz"):
        if key in report:
            lines.append(f"  {key:<16} {report[key]:>10,}")
    cr = report.get("corpus_report", {})
    if cr:
        lines.append("  corpus: " + ", ".join(f"{k}={v}" for k, v in cr.items()))
    if "extractor" in report:
        lines.append("  extractor: " + ", ".join(f"{k}={v}" for k, v in report["extractor"].items()))
    lines.append("  seconds per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in report["seconds"].items())
                 + f" (total {report['total_seconds']:.1f})")
    if "grag" in report:
        g = report["grag"]
        lines.append(f"  grag: {g['triples']:,} triples, {g['communities']:,} communities / summary nodes "
                     f"({g['summaries']}), {g['total_seconds']:.1f} s")
    lines.append(f"  peak RSS {report['peak_rss_mb']:.0f} MiB"
                 + (f", peak CUDA {report['peak_cuda_mb']:.0f} MiB" if "peak_cuda_mb" in report else ""))
    return "\n".join(lines)
