"""The seeded Gumbel sampler (``SeededGumbelSampler``) per decoding step: noise hashed on every
token of the vocabulary (``prune=False``, what CUDA runs) against noise hashed only on the tokens
that can still win each row's draw (``prune=True``, what CPU runs), on the same logits in one
process. With ``llm=`` the logits are a real model's next-token logits for the first ``rows=``
dev questions (one forward pass, bf16); without it they are Gaussian with ``spread=``.

    python -m benchmarks ops bench_sampler llm=/work/models/qwen2.5-coder-1.5b \\
        data=../shared/data/hotpotqa/dev.json rows=32

Reports each variant's median milliseconds per step over ``steps=`` steps (each step hashes new
noise), the ratio, the mean number of tokens hashed per row, and how many of the draws agree
(they must all agree: pruning drops only tokens that cannot win).
"""
from __future__ import annotations

import os
import statistics
import sys
from dataclasses import dataclass

from benchmarks._harness import Common, Record, opt, report, script_args, time_once


@dataclass
class Config(Common):
    llm: str = opt("", "a local causal LM whose logits to sample (default: synthetic)")
    data: str = opt("", "dev questions for llm='s prompts")
    rows: int = opt(32, "rows (questions) sampled per step")
    vocab: int = opt(151_936, "synthetic logits only: vocabulary size")
    spread: float = opt(3.0, "synthetic logits' standard deviation")
    temperature: float = opt(0.7, "sampling temperature")
    steps: int = opt(10, "decoding steps timed")


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


def main(argv=None) -> int:
    args = script_args(Config, __doc__, __file__, argv)
    if args.llm and not args.data:
        print("hpengine: error: llm= needs data= (the dev questions whose prompts give the logits)", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from hpengine.models import SeededGumbelSampler
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
            ms[prune].append(time_once(lambda: out.__setitem__(prune, sampler(ids, scores)), args.device) * 1e3)
        agree += int((out[False].argmax(1) == out[True].argmax(1)).sum())
        kept += int(torch.isfinite(out[True]).sum())
    full, pruned = statistics.median(ms[False]), statistics.median(ms[True])
    result = {"logits": args.llm or f"gaussian sd {args.spread}", "rows": rows, "vocab": vocab,
              "temperature": args.temperature, "steps": args.steps, "ms_per_step_full": round(full, 2),
              "ms_per_step_pruned": round(pruned, 2), "speedup": round(full / pruned, 1),
              "tokens_hashed_per_row": round(kept / (rows * args.steps), 1),
              "draws_agree": f"{agree}/{rows * args.steps}", "threads": torch.get_num_threads()}
    print(result, flush=True)
    case = {"rows": rows, "vocab": vocab}
    records = [Record("sampler", "pruned" if prune else "full", case, statistics.median(ms[prune]) / 1e3, rows,
                      args.steps, 0.0) for prune in (False, True)]
    report(__file__, args, records, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
