"""The shared-prefix cache of batched generation (``model.prefix_cache``) against plain batched
generation, side by side in one process: GRAG-MH's first planner step (every path of every
question, one batched ``generate``, whose prompts share the instruction and worked examples) on
the first N dev questions, with the same model, batch settings and prompts.

    python benchmarks/ops/bench_prefix_cache.py --data ../shared/data/hotpotqa/dev.json \\
        --llm /work/models/qwen2.5-coder-1.5b --questions 24 --repeats 2 --out benchmarks/results/prefix_cache.json

Reports each variant's best wall time over ``--repeats``, the ratio, the shared prefix's length
and how many completions are the same (greedy in bf16: a near-tie can go the other way when the
floating-point order changes). ``--noise-batch-size N`` also runs plain generation once at batch
size N and counts its completions that equal plain's at ``--batch-size``: the same kind of
floating-point reordering without the cache, as the floor to read the cache's count against.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _presets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a dev question file (JSON list or JSONL)")
    ap.add_argument("--llm", required=True, help="a local causal instruction LM")
    ap.add_argument("--questions", type=int, default=24)
    ap.add_argument("--paths", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-batch-tokens", type=int, default=16384)
    ap.add_argument("--noise-batch-size", type=int, default=0,
                    help="also run plain generation at this batch size, as the noise floor (0: off)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", default="", help="also write the result JSON here (benchmarks/results/NAME.json)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from _harness import emit
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hpengine.eval import load_questions
    from hpengine.models import TreePlanner

    if args.threads:
        torch.set_num_threads(args.threads)
    questions = [q.question for q in load_questions(args.data)[: args.questions]]
    tokenizer = AutoTokenizer.from_pretrained(args.llm)
    model = AutoModelForCausalLM.from_pretrained(args.llm, dtype=torch.bfloat16).eval()
    asked = [q for q in questions for _ in range(args.paths)]
    paths = [p for _ in questions for p in range(args.paths)]

    def first_step(batch_size: int, cached: bool) -> tuple:
        """One batched first planner step: (its planner, its sub-questions, seconds)."""
        planner = TreePlanner(model, tokenizer, batch_size=batch_size, max_batch_tokens=args.max_batch_tokens,
                              prefix_cache=cached)
        start = time.perf_counter()
        steps = planner.next_steps(asked, [[] for _ in asked], paths)
        return planner, steps, time.perf_counter() - start

    runs: dict = {}
    for _ in range(args.repeats):
        for cached in (False, True):
            planner, steps, seconds = first_step(args.batch_size, cached)
            run = runs.setdefault(cached, {"seconds": [], "steps": steps, "tokens_in": planner.stats["tokens_in"],
                                           "prefix": planner.stats["prefix_tokens"]})
            run["seconds"].append(round(seconds, 2))
            print(f"prefix_cache={cached}: {seconds:.1f} s", flush=True)
    plain, cached = min(runs[False]["seconds"]), min(runs[True]["seconds"])
    same = sum(a == b for a, b in zip(runs[False]["steps"], runs[True]["steps"]))
    noise = {}
    if args.noise_batch_size:
        _, steps, seconds = first_step(args.noise_batch_size, False)
        noise = {"noise_batch_size": args.noise_batch_size, "seconds_plain_noise_batch": round(seconds, 2),
                 "same_completions_noise_batch": sum(a == b for a, b in zip(runs[False]["steps"], steps))}
        print(f"plain at batch size {args.noise_batch_size}: {seconds:.1f} s", flush=True)
    result = {"llm": args.llm, "data": args.data, "prompts": len(asked), "tokens_in": runs[False]["tokens_in"],
              "shared_prefix_tokens": runs[True]["prefix"], "seconds_plain": runs[False]["seconds"],
              "seconds_prefix_cache": runs[True]["seconds"], "speedup": round(plain / cached, 3),
              "same_completions": same, **noise, "threads": torch.get_num_threads()}
    emit(result, args.out)


if __name__ == "__main__":
    main()
