"""Query time of retriever=learned beside the fusion on the same index and questions, in one
process: each method answers every question in batches of 64, twice, alternating, and the best pass
of each counts (docs/methods/learned.md, "Cost").

    python benchmarks/analysis/learned_cost.py --set musique=IDX_M:QUESTIONS_M --set 2wikimultihopqa=IDX_W:QUESTIONS_W
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness
from _harness import RESULTS, write_json  # noqa: E402


def timed(engine, texts: list, batch: int) -> float:
    start = time.perf_counter()
    for i in range(0, len(texts), batch):
        engine.answer(texts[i:i + batch])
    return time.perf_counter() - start


def run(args) -> dict:
    from hpengine.config import EvalJobConfig, FusionConfig, LearnedConfig
    from hpengine.eval import load_questions
    from hpengine.jobs import make_engine

    torch.set_num_threads(args.threads)
    out = {"threads": args.threads, "batch": args.batch, "sets": {}}
    for spec in args.set:
        name, _, rest = spec.partition("=")
        index, _, questions = rest.partition(":")
        texts = [q.question for q in load_questions(questions)]
        engines = {"fusion": make_engine(EvalJobConfig(index=index, engine=FusionConfig())),
                   "learned": make_engine(EvalJobConfig(index=index, engine=LearnedConfig(ranker=args.ranker)))}
        best = {m: float("inf") for m in engines}
        for _ in range(args.passes):
            for m, engine in engines.items():
                best[m] = min(best[m], timed(engine, texts, args.batch))
        row = {m: {"seconds": round(s, 2), "q_per_s": round(len(texts) / s, 1)} for m, s in best.items()}
        row["questions"] = len(texts)
        row["learned_over_fusion_time"] = round(best["learned"] / best["fusion"], 2)
        out["sets"][name] = row
        print(f"{name}: {len(texts)} questions, fusion {row['fusion']['q_per_s']} q/s, learned "
              f"{row['learned']['q_per_s']} q/s, time ratio {row['learned_over_fusion_time']}")
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", action="append", required=True, help="NAME=INDEX:QUESTIONS (repeat)")
    p.add_argument("--ranker", default="", help="a ranker file (default: the one shipped for the index's encoder)")
    p.add_argument("--label", default="run")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    out = run(args)
    print(f"written to {write_json(out, RESULTS / 'learned' / f'cost_{args.label}.json')}")


if __name__ == "__main__":
    main()
