"""The shared-prefix cache of batched generation (``model.prefix_cache``) against plain batched
generation, side by side in one process: GRAG-MH's first planner step (every path of every
question, one batched ``generate``, whose prompts share the instruction and worked examples) on
the first N dev questions, with the same model, batch settings and prompts.

    python -m benchmarks ops bench_prefix_cache data=../shared/data/hotpotqa/dev.json \\
        llm=/work/models/qwen2.5-coder-1.5b questions=24 repeats=2

Reports each variant's best wall time over ``repeats=``, the ratio, the shared prefix's length
and how many completions are the same (greedy in bf16: a near-tie can go the other way when the
floating-point order changes). ``noise_batch_size=N`` also runs plain generation once at batch
size N and counts its completions that equal plain's at ``batch_size=``: the same kind of
floating-point reordering without the cache, as the floor to read the cache's count against.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from benchmarks._harness import Common, Record, opt, report, require, script_args, time_once


@dataclass
class Config(Common):
    data: str = opt("", "a dev question file (JSON list or JSONL)")
    llm: str = opt("", "a local causal instruction LM")
    questions: int = opt(24, "dev questions")
    paths: int = opt(3, "paths per question")
    repeats: int = opt(2, "runs per variant (the best is reported)")
    batch_size: int = opt(32, "generation batch size")
    max_batch_tokens: int = opt(16384, "tokens per generation batch")
    noise_batch_size: int = opt(0, "also run plain generation at this batch size, as the noise floor (0: off)")

    REQUIRED = ("data", "llm")


def main(argv=None) -> int:
    args = script_args(Config, __doc__, __file__, argv)
    require(args, __file__)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch
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
        out = {}
        seconds = time_once(lambda: out.setdefault("steps", planner.next_steps(asked, [[] for _ in asked], paths)))
        return planner, out["steps"], seconds

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
    print(result, flush=True)
    case = {"prompts": len(asked), "batch_size": args.batch_size}
    records = [Record("prefix_cache", "cached" if c else "plain", case, min(runs[c]["seconds"]), len(asked),
                      len(runs[c]["seconds"]), 0.0) for c in (False, True)]
    report(__file__, args, records, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
