"""End to end with and without the CPU kernels: each method answers every dev question of each
index in batches of 64 (question encoding included, as `hpengine eval` does), with
``HPENGINE_KERNELS=off`` and with the default, alternating, best of ``--passes`` each; the ratio of
the two, and whether every question's passages are the same (kernels/README.md, "End to end").

    python -m benchmarks e2e kernels_e2e --set 2wikimultihopqa=IDX_W:QUESTIONS_W --set hotpotqa=IDX_H:QUESTIONS_H \\
        --methods hyperprove fusion --threads 2
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from benchmarks._harness import RESULTS, write_json


def answer_all(engine, texts: list, batch: int, mode: str) -> tuple[float, list]:
    """Seconds to answer ``texts`` with ``HPENGINE_KERNELS=mode``, and every question's passages."""
    os.environ["HPENGINE_KERNELS"] = mode
    start = time.perf_counter()
    passages = [list(p.passages) for i in range(0, len(texts), batch) for p in engine.answer(texts[i:i + batch])]
    return time.perf_counter() - start, passages


def run(args) -> dict:
    from hpengine.config import EvalJobConfig
    from hpengine.eval import load_questions
    from hpengine.jobs import make_engine
    from hpengine.pipeline import get_retriever

    torch.set_num_threads(args.threads)
    out = {"threads": args.threads, "batch": args.batch, "passes": args.passes, "sets": {}}
    for spec in args.set:
        name, _, rest = spec.partition("=")
        index, _, questions = rest.partition(":")
        texts = [q.question for q in load_questions(questions)]
        texts = texts[: args.max_questions] if args.max_questions else texts
        row = {"questions": len(texts)}
        for method in args.methods:
            engine = make_engine(EvalJobConfig(index=index, engine=get_retriever(method).config_class()))
            answer_all(engine, texts[: args.batch], args.batch, "auto")  # builds or loads the kernels once
            best, records = {"off": float("inf"), "auto": float("inf")}, {}
            for _ in range(args.passes):
                for mode in ("off", "auto"):
                    seconds, records[mode] = answer_all(engine, texts, args.batch, mode)
                    best[mode] = min(best[mode], seconds)
            row[method] = {"torch_q_per_s": round(len(texts) / best["off"], 2),
                           "kernels_q_per_s": round(len(texts) / best["auto"], 2),
                           "ratio": round(best["off"] / best["auto"], 2),
                           "same_passages": records["off"] == records["auto"]}
            print(f"{name} {method}: PyTorch path {row[method]['torch_q_per_s']} q/s, kernels "
                  f"{row[method]['kernels_q_per_s']} q/s, {row[method]['ratio']}x, same passages: "
                  f"{row[method]['same_passages']}", flush=True)
        out["sets"][name] = row
    os.environ.pop("HPENGINE_KERNELS", None)
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", action="append", required=True, help="NAME=INDEX:QUESTIONS (repeat)")
    p.add_argument("--methods", nargs="+", default=["hyperprove", "fusion"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--max-questions", type=int, default=0)
    p.add_argument("--label", default="run")
    args = p.parse_args(argv)
    out = run(args)
    print(f"written to {write_json(out, RESULTS / 'e2e' / f'kernels_e2e_{args.label}.json')}")


if __name__ == "__main__":
    main()
