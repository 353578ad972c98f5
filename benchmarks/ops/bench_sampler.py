"""The seeded Gumbel sampler (``SeededGumbelSampler``) per decoding step: noise hashed on every
token of the vocabulary (``prune=False``, what CUDA runs) against noise hashed only on the tokens
that can still win each row's draw (``prune=True``, what CPU runs), on the same logits in one
process. With ``--llm`` the logits are a real model's next-token logits for the first ``--rows``
dev questions (one forward pass, bf16); without it they are Gaussian with ``--spread``.

    python benchmarks/ops/bench_sampler.py --llm /work/models/qwen2.5-coder-1.5b \\
        --data ../shared/data/hotpotqa/dev.json --rows 32 --out benchmarks/results/sampler.json

Reports each variant's median milliseconds per step over ``--steps`` steps (each step hashes new
noise), the ratio, the mean number of tokens hashed per row, and how many of the draws agree
(they must all agree: pruning drops only tokens that cannot win).
"""
from __future__ import annotations

import argparse
import os
import sys
import statistics
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _presets


def _logits(args, torch):
    """``[rows, V]`` float32 next-token logits: the model's for the first dev questions, or synthetic."""
    if not args.llm:
        gen = torch.Generator().manual_seed(0)
        return torch.randn(args.rows, args.vocab, generator=gen) * args.spread
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hpengine.eval import load_questions

    tokenizer = AutoTokenizer.from_pretrained(args.llm)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(args.llm, dtype=torch.bfloat16).eval()
    questions = [q.question for q in load_questions(args.data)[: args.rows]]
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                             add_generation_prompt=True) for q in questions]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.inference_mode():
        return model(**batch).logits[:, -1, :].float()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llm", default="", help="a local causal LM whose logits to sample (default: synthetic)")
    ap.add_argument("--data", default="", help="dev questions for --llm's prompts")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=151_936, help="synthetic logits only")
    ap.add_argument("--spread", type=float, default=3.0, help="synthetic logits' standard deviation")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--out", default="", help="also write the result JSON here (benchmarks/results/NAME.json)")
    args = ap.parse_args()
    if args.llm and not args.data:
        ap.error("--llm needs --data (the dev questions whose prompts give the logits)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from _harness import emit

    from hpengine.models import SeededGumbelSampler

    if args.threads:
        torch.set_num_threads(args.threads)
    scores = _logits(args, torch)
    rows, vocab = scores.shape
    variants = {prune: SeededGumbelSampler([args.temperature] * rows, range(rows), start=1, prune=prune)
                for prune in (False, True)}
    ms = {False: [], True: []}
    agree = kept = 0
    for step in range(args.steps):
        ids = torch.zeros(rows, 1 + step, dtype=torch.long)
        out = {}
        for prune, sampler in variants.items():
            start = time.perf_counter()
            out[prune] = sampler(ids, scores)
            ms[prune].append((time.perf_counter() - start) * 1e3)
        agree += int((out[False].argmax(1) == out[True].argmax(1)).sum())
        kept += int(torch.isfinite(out[True]).sum())
    full, pruned = statistics.median(ms[False]), statistics.median(ms[True])
    result = {"logits": args.llm or f"gaussian sd {args.spread}", "rows": rows, "vocab": vocab,
              "temperature": args.temperature, "steps": args.steps, "ms_per_step_full": round(full, 2),
              "ms_per_step_pruned": round(pruned, 2), "speedup": round(full / pruned, 1),
              "tokens_hashed_per_row": round(kept / (rows * args.steps), 1),
              "draws_agree": f"{agree}/{rows * args.steps}", "threads": torch.get_num_threads()}
    emit(result, args.out)


if __name__ == "__main__":
    main()
