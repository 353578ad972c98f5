"""The ``index`` job: corpus in, saved index out, build report printed."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from hpengine.config import IndexConfig
from hpengine.graph._builder import add_passages, build_index
from hpengine.graph._corpus import builtin_corpus_path, load_corpus
from hpengine.graph._index import Index
from hpengine.pipeline._factory import make_encoder, make_extractor


def run_index(cfg: IndexConfig, *, progress: bool = True):
    """Build and save the index described by ``cfg``.

    Returns:
        ``(index, report)``; the report includes the corpus-loading counts and, per stage,
        seconds and peak memory.
    """
    corpus_path = cfg.corpus or str(builtin_corpus_path())
    loaded = load_corpus(corpus_path)
    extractor = make_extractor(cfg.extractor, cfg.out)
    encoder = make_encoder(cfg.encoder)
    meta = {"build_config": dataclasses.asdict(cfg), "corpus": corpus_path}
    index, report = build_index(loaded.passages, extractor=extractor, encoder=encoder, graph_cfg=cfg.graph,
                                embed_passages=cfg.embed_passages, device=cfg.device, progress=progress, meta=meta)
    report = {"corpus": corpus_path, "corpus_report": loaded.report, **report}
    index.meta["build_report"] = report
    index.save(cfg.out)
    return index, report


def run_add(cfg: IndexConfig, *, progress: bool = True):
    """Add the passages of ``cfg.corpus`` to the saved index at ``cfg.out`` (incremental)."""
    encoder = make_encoder(cfg.encoder)
    index = Index.load(cfg.out, device=cfg.device, expected_encoder=encoder.name)
    loaded = load_corpus(cfg.corpus or str(builtin_corpus_path()))
    extractor = make_extractor(cfg.extractor, cfg.out)
    index, report = add_passages(index, loaded.passages, extractor=extractor, encoder=encoder, graph_cfg=cfg.graph,
                                 progress=progress)
    report = {"corpus": cfg.corpus, "corpus_report": loaded.report, **report}
    index.meta.setdefault("add_reports", []).append(report)
    index.save(cfg.out)
    return index, report


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
    lines.append(f"  peak RSS {report['peak_rss_mb']:.0f} MiB"
                 + (f", peak CUDA {report['peak_cuda_mb']:.0f} MiB" if "peak_cuda_mb" in report else ""))
    return "\n".join(lines)


def report_json(report: dict) -> str:
    return json.dumps(report, indent=2, default=str)
