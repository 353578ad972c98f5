"""End-to-end QA evaluation: dense vs HyperProve on the dev questions of the real benchmarks.

    # indexes first (fast extractor): python -m benchmarks e2e bench_index --corpus ../shared/data/<d>/corpus.json --out IDX/<d>
    python -m benchmarks e2e bench_qa --data-root ../shared/data --index-root IDX            # no-LLM mode, all questions
    python -m benchmarks e2e bench_qa --data-root ../shared/data --index-root IDX \\
        --llm ~/.cache/hpengine/models/qwen2.5-coder-1.5b --max-questions 100 --batch-size 16   # LLM decomposer + reader

One index and encoder load per dataset; every retriever in a table uses the same embedder, reader,
corpus and evidence budget (docs/methods/index.md#evaluation-protocol). Writes a markdown table and,
with --out, a JSON file with all metrics, per-hop diagnostics and per-question records. Any
RetrievalConfig / method config field
(HyperProveConfig, DenseConfig, PPRConfig; a method ignores the others' fields) can be overridden with --set retrieval.alpha=0.5 engine.num_hops=3.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

from benchmarks._harness import write_json  # noqa: E402
from benchmarks._presets import DATASETS, apply_overrides  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", required=True)
    ap.add_argument("--index-root", required=True)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--retrievers", nargs="+", default=["dense", "hyperprove"])
    ap.add_argument("--llm", default="")
    ap.add_argument("--llm-batch-size", type=int, default=32,
                    help="prompts per LLM generate call at most (model.batch_size)")
    ap.add_argument("--llm-max-batch-tokens", type=int, default=16384,
                    help="padded prompt tokens per generate call at most (model.max_batch_tokens; 0: no cap)")
    ap.add_argument("--llm-prefix-cache", action=argparse.BooleanOptionalAction, default=None,
                    help="read the prompts' shared token prefix once per generate call (model.prefix_cache; "
                         "default: its default, on)")
    ap.add_argument("--max-questions", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--set", nargs="*", default=[], help="overrides like retrieval.alpha=0.5 engine.num_hops=3")
    ap.add_argument("--out", default="")
    ap.add_argument("--checkpoint-dir", default="",
                    help="resumable runs: each finished batch goes to DIR/<dataset>_<retriever>.jsonl first")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from hpengine.config import EncoderConfig, EvalConfig, ModelConfig, RetrievalConfig
    from hpengine.eval import load_questions
    from hpengine.graph import Index
    from hpengine.jobs import evaluate, peek_index_meta
    from hpengine.models import encoder_for_index, load_llm
    from hpengine.pipeline import Engine, get_retriever

    encoders = {}  # each index is queried with its own encoder (MiniLM, E5, ...), loaded once per kind
    model_cfg = ModelConfig(llm=args.llm, device=args.device, batch_size=args.llm_batch_size,
                            max_batch_tokens=args.llm_max_batch_tokens,
                            **({} if args.llm_prefix_cache is None else {"prefix_cache": args.llm_prefix_cache}))
    args.llm_prefix_cache = model_cfg.prefix_cache  # the out JSON's args record the setting used
    decomposer, reader = load_llm(model_cfg)
    retrieval = apply_overrides(RetrievalConfig(), args.set, "retrieval")
    rows, results = [], {}
    for name in args.datasets:
        meta = peek_index_meta(Path(args.index_root) / name) or {}
        if meta.get("encoder") not in encoders:
            encoders[meta.get("encoder")] = encoder_for_index(meta, EncoderConfig(name_or_path="", device=args.device))
        encoder = encoders[meta.get("encoder")]
        index = Index.load(Path(args.index_root) / name, device=args.device, expected_encoder=encoder.name)
        questions = load_questions(str(Path(args.data_root) / name / "dev.json"))
        for retriever in args.retrievers:
            config_class = get_retriever(retriever).config_class
            engine_cfg = apply_overrides(config_class(diagnostics=retriever == "hyperprove"), args.set, "engine")
            engine = Engine(index, encoder, retrieval, engine_cfg, decomposer=decomposer, reader=reader)
            for c in (decomposer, reader):
                if c is not None:
                    c.stats.update({k: 0 for k in c.stats})
            start = time.perf_counter()
            ckpt = str(Path(args.checkpoint_dir) / f"{name}_{retriever}.jsonl") if args.checkpoint_dir else ""
            res = evaluate(engine, questions, EvalConfig(max_questions=args.max_questions, batch_size=args.batch_size,
                                                         checkpoint=ckpt), progress=True)
            res["dataset"] = name
            results[f"{name}/{retriever}"] = res
            rows.append((name, retriever, res["num_questions"], res["recall@2"], res["recall@5"], res["em"], res["f1"],
                         res["questions_per_second"], time.perf_counter() - start, res.get("hop_diagnostics")))
            print(f"{name:16} {retriever:10} n={res['num_questions']} R@2={res['recall@2']:.3f} R@5={res['recall@5']:.3f} "
                  f"EM={res['em']:.3f} F1={res['f1']:.3f} q/s={res['questions_per_second']}", flush=True)
    print()
    print("| dataset | retriever | questions | R@2 | R@5 | EM | F1 | questions/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.3f} | {r[4]:.3f} | {r[5]:.3f} | {r[6]:.3f} | {r[7]} |")
    for r in rows:
        if r[9]:
            print(f"{r[0]} {r[1]} per-hop gold-passage recall: " +
                  " | ".join(", ".join(f"{k} {v:.3f}" for k, v in hop.items()) for hop in r[9]))
    if args.out:
        write_json({"args": vars(args), "retrieval": dataclasses.asdict(retrieval), "results": results}, args.out,
                   ensure_ascii=False)


if __name__ == "__main__":
    main()
