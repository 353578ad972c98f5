"""Forced approximate search on the real dev sets: each method's recall with the exact dense fact
and passage search against the same run with FAISS IVF forced on (``retrieval.seed_backend=
faiss_ivf``, what ``auto`` picks from ``approximate_min_keys`` keys on), plus the search's own
recall (the share of the exact top-k fact and passage ids that IVF finds) and its speed.

With ``--synonyms nndescent`` the approximate setting also replaces the index's synonym pairs
(an exact search at build time on these sizes) by the approximate NN-descent search over the same
name embeddings and settings (``graph.synonym_backend=nndescent``, what ``auto`` picks above
``synonym_exact_max_keys`` names), and reports the pair recall: every approximate search on.

    python -m benchmarks e2e bench_approximate --index-root /work/idx --datasets 2wikimultihopqa musique hotpotqa \
        --threads 2 --label approximate_dev

An index per dataset at ``INDEX_ROOT/NAME`` (``--index-suffix``: ``INDEX_ROOT/NAME<suffix>``) (``hpengine index corpus=DATA/NAME/corpus.json
out=INDEX_ROOT/NAME``); its dev questions at ``DATA/NAME/dev.json`` (``--data-dir``, default
../shared/data). ``--nlist`` / ``--nprobe`` override the IVF defaults (1024 cells, 16 probed; cells
are lowered to keys / 39 for small indexes). Prints a table of R@2 / R@5 per method and setting
with the difference in points; ``--label NAME`` saves ``benchmarks/results/NAME.json``.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from benchmarks._harness import add_dev_set_args, load_dev_set, run_dev_sets  # noqa: E402



def search_recall(exact_ids: torch.Tensor, approx_ids: torch.Tensor) -> float:
    """Mean over rows of |approx ∩ exact| / |exact| (``-1`` padding ignored).

    Shapes:
        ``[Q, k], [Q, k] -> float``.
    """
    hits, total = 0, 0
    for e, a in zip(exact_ids.tolist(), approx_ids.tolist()):
        want = {i for i in e if i >= 0}
        hits += len(want & {i for i in a if i >= 0})
        total += len(want)
    return hits / total if total else float("nan")


def search_report(index, question_emb: torch.Tensor, retrieval, k_facts: int, k_passages: int) -> dict:
    """IVF against exact on the question embeddings: recall and seconds, facts and passages."""
    from hpengine.retrieval import DenseIndex

    out = {}
    for name, keys, k in (("facts", index.fact_emb, k_facts), ("passages", index.passage_emb, k_passages)):
        exact = DenseIndex(keys, backend="exact")
        start = time.perf_counter()
        ivf = DenseIndex(keys, backend="faiss_ivf", nlist=retrieval.faiss_nlist, nprobe=retrieval.faiss_nprobe)
        build = time.perf_counter() - start
        start = time.perf_counter()
        e = exact.search(question_emb, k)[1]
        exact_s = time.perf_counter() - start
        start = time.perf_counter()
        a = ivf.search(question_emb, k)[1]
        ivf_s = time.perf_counter() - start
        cells = ivf._faiss.nlist
        out[name] = {"keys": int(keys.shape[0]), "k": k, "recall": round(search_recall(e, a), 4),
                     "cells": int(cells), "probed": int(ivf._faiss.nprobe), "ivf_build_seconds": round(build, 3),
                     "exact_seconds": round(exact_s, 4), "ivf_seconds": round(ivf_s, 4)}
    return out


def approximate_synonyms(index):
    """``(index with its synonyms searched again by NN-descent, report)``: the build's settings
    (η, cap, digit rule) over the index's own name embeddings; the report has the pair counts,
    the recall of the exact pairs and the seconds."""
    import dataclasses

    from hpengine.graph import entity_synonyms
    from hpengine.jobs import built_graph_config

    cfg = dataclasses.replace(built_graph_config(index.meta), synonym_backend="nndescent")
    start = time.perf_counter()
    approx = entity_synonyms(index.entity_emb, index.entities, cfg)
    seconds = time.perf_counter() - start
    exact = {tuple(p) for p in index.synonyms.t().tolist()}
    found = {tuple(p) for p in approx.t().tolist()}
    report = {"names": index.num_entities, "exact_pairs": len(exact) // 2, "approximate_pairs": len(found) // 2,
              "recall": round(len(exact & found) / len(exact), 4) if exact else float("nan"),
              "seconds": round(seconds, 2)}
    changed = dataclasses.replace(index, synonyms=approx, _graph=None, _lookups=None)
    return changed, report


def run_dataset(name: str, args) -> dict:
    from hpengine.config import EvalConfig, RetrievalConfig
    from hpengine.jobs import evaluate
    from hpengine.pipeline import Engine, get_retriever

    exact_index, encoder, questions = load_dev_set(name, args)
    index = exact_index
    forced = dict(seed_backend="faiss_ivf")
    if args.nlist:
        forced["faiss_nlist"] = args.nlist
    if args.nprobe:
        forced["faiss_nprobe"] = args.nprobe
    report = {"questions": len(questions), "methods": {}}
    if args.synonyms == "nndescent":
        index, report["synonyms"] = approximate_synonyms(exact_index)
        print(f"{name}: synonym pairs {report['synonyms']}", flush=True)
    question_emb = encoder.encode([q.question for q in questions], kind="query").to(index.fact_emb.dtype)
    retrieval = RetrievalConfig(**forced)
    report["search"] = search_report(index, question_emb, retrieval, retrieval.num_seeds, 10)
    print(f"{name}: {len(questions)} questions; search recall facts {report['search']['facts']['recall']:.4f} "
          f"passages {report['search']['passages']['recall']:.4f}", flush=True)
    for method in args.methods:
        row = {}
        for setting, kwargs, on in (("exact", dict(seed_backend="exact"), exact_index), ("approximate", forced, index)):
            engine = Engine(on, encoder, RetrievalConfig(**kwargs), get_retriever(method).config_class())
            res = evaluate(engine, questions, EvalConfig(batch_size=args.batch_size), progress=False)
            row[setting] = {k: res[k] for k in ("recall@2", "recall@5", "wall_seconds", "questions_per_second")}
        row["delta_points"] = {k: round(100 * (row["approximate"][k] - row["exact"][k]), 2)
                               for k in ("recall@2", "recall@5")}
        report["methods"][method] = row
        print(f"  {method:10} R@5 exact {row['exact']['recall@5']:.4f} approximate {row['approximate']['recall@5']:.4f}"
              f" ({row['delta_points']['recall@5']:+.2f} points)", flush=True)
    return report


def table(reports: dict) -> str:
    lines = ["| dataset | method | R@2 exact | R@2 IVF | R@5 exact | R@5 IVF | ΔR@5 (points) | q/s exact / IVF |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, rep in reports.items():
        for method, row in rep["methods"].items():
            e, a = row["exact"], row["approximate"]
            lines.append(f"| {name} | {method} | {e['recall@2']:.4f} | {a['recall@2']:.4f} | {e['recall@5']:.4f} | "
                         f"{a['recall@5']:.4f} | {row['delta_points']['recall@5']:+.2f} | "
                         f"{e['questions_per_second']:.1f} / {a['questions_per_second']:.1f} |")
    lines += ["", "| dataset | search | keys | k | cells / probed | recall | exact s | IVF s | IVF build s |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rep in reports.items():
        for what, s in rep["search"].items():
            lines.append(f"| {name} | {what} | {s['keys']:,} | {s['k']} | {s['cells']} / {s['probed']} | "
                         f"{s['recall']:.4f} | {s['exact_seconds']:.3f} | {s['ivf_seconds']:.3f} | "
                         f"{s['ivf_build_seconds']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dev_set_args(ap, methods=["dense", "hyperprove", "ppr"], encoder_dtype="float32")
    ap.add_argument("--nlist", type=int, default=0)
    ap.add_argument("--nprobe", type=int, default=0)
    ap.add_argument("--synonyms", choices=["exact", "nndescent"], default="exact",
                    help="nndescent: the approximate setting searches the synonyms again by NN-descent too")
    return run_dev_sets(ap.parse_args(argv), run_dataset, table)


if __name__ == "__main__":
    sys.exit(main())
