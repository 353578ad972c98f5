"""Sweep one retriever's settings on the dev questions (no LLM): one index load per dataset,
one run per variant, R@2 / R@5 printed as a markdown table.

    python -m benchmarks e2e sweep --data-root ../shared/data --index-root IDX --retriever ppr \\
        --variants "" "engine.damping=0.5" "engine.link_threshold=0.7 engine.seed_weighting=similarity"

A variant is a space-separated list of ``engine.FIELD=VALUE`` / ``retrieval.FIELD=VALUE``
overrides (the syntax of bench_qa.py --set); "" is the defaults. --out saves every result.
"""
from __future__ import annotations

import argparse
import os
import shlex
import time
from pathlib import Path

from benchmarks._harness import write_json  # noqa: E402
from benchmarks._presets import DATASETS, apply_overrides  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", required=True)
    ap.add_argument("--index-root", required=True)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--retriever", default="ppr")
    ap.add_argument("--variants", nargs="+", default=[""])
    ap.add_argument("--max-questions", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from hpengine.config import EncoderConfig, EvalConfig, RetrievalConfig
    from hpengine.eval import load_questions
    from hpengine.graph import Index
    from hpengine.jobs import evaluate
    from hpengine.jobs import peek_index_meta
    from hpengine.models import encoder_for_index
    from hpengine.pipeline import Engine, get_retriever

    encoders = {}  # each index's own encoder, loaded once per kind
    config_class = get_retriever(args.retriever).config_class
    rows, results = [], {}
    for name in args.datasets:
        meta = peek_index_meta(Path(args.index_root) / name) or {}
        if meta.get("encoder") not in encoders:
            encoders[meta.get("encoder")] = encoder_for_index(meta, EncoderConfig(name_or_path=""))
        encoder = encoders[meta.get("encoder")]
        index = Index.load(Path(args.index_root) / name, expected_encoder=encoder.name)
        questions = load_questions(str(Path(args.data_root) / name / "dev.json"))
        for variant in args.variants:
            sets = shlex.split(variant)
            engine = Engine(index, encoder, apply_overrides(RetrievalConfig(), sets, "retrieval"),
                            apply_overrides(config_class(), sets, "engine"))
            start = time.perf_counter()
            res = evaluate(engine, questions, EvalConfig(max_questions=args.max_questions, batch_size=args.batch_size),
                           progress=False)
            seconds = time.perf_counter() - start
            fallback = sum(1 for r in res["records"] if r.get("notes"))
            rows.append((name, variant or "defaults", res["recall@2"], res["recall@5"], fallback, seconds))
            results[f"{name}/{variant}"] = {k: v for k, v in res.items() if k != "records"}
            print(f"{name:16} {variant or 'defaults':50} R@2={res['recall@2']:.3f} R@5={res['recall@5']:.3f} "
                  f"noted={fallback} {seconds:.1f}s", flush=True)
    print("\n| dataset | variant | R@2 | R@5 | questions with a note | seconds |\n|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r[0]} | `{r[1]}` | {r[2]:.3f} | {r[3]:.3f} | {r[4]} | {r[5]:.1f} |")
    if args.out:
        write_json({"args": vars(args), "results": results}, args.out)


if __name__ == "__main__":
    main()
