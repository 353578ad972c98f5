"""Replay the retrieval of an LLM-mode run from its JSON records, with no LLM: the recorded
(rewritten) sub-questions are the plans and the recorded hop answers are the reads, so an
engine change that leaves the reads alone (search text, linking, ranking, hop parameters) is
measured on the LLM-mode chains in seconds instead of a ~25-minute run.

    python -m benchmarks analysis replay_retrieval --run llm100/hotpotqa_hyperprove.json \\
        --questions ../shared/data/hotpotqa/dev.json --index IDX/hotpotqa \\
        --set engine.search_template={subquery} --set engine.search_template='{subquery} {question}'

Each ``--set`` is one variant (space-separated overrides, as in bench_qa.py); no ``--set`` replays
the defaults. With the run's own settings the replay reproduces the run's recall exactly. Where
a change alters a hop's facts, the real reader could answer differently: confirm with a run.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex



class RecordedLLM:
    """Decomposer + reader stand-in that plays back one run's records (all questions, one batch)."""

    def __init__(self, records: list):
        self.records = records
        self.hop = 0

    def decompose(self, questions: list) -> list:
        self.hop = 0
        return [[h["subquery"] for h in r["chain"]] or [r["question"]] for r in self.records]

    def read(self, questions: list, facts: list, final: bool = False, steps=None) -> list:
        if final:
            return [r["prediction"] for r in self.records]
        t, self.hop = self.hop, self.hop + 1
        return [r["chain"][t]["answer"] if t < len(r["chain"]) else "unknown" for r in self.records]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="bench_qa.py JSON of a hyperprove LLM-mode run")
    ap.add_argument("--questions", required=True, help="the dev.json it ran on (gold passages)")
    ap.add_argument("--index", required=True)
    ap.add_argument("--set", action="append", default=[], help="one variant: 'engine.x=1 retrieval.y=2'")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from benchmarks._presets import apply_overrides  # the override syntax of bench_qa.py --set

    from hpengine.config import EncoderConfig, RetrievalConfig
    from hpengine.eval import load_questions, recall_at_k
    from hpengine.config import HyperProveConfig
    from hpengine.graph import Index
    from hpengine.models import make_encoder
    from hpengine.pipeline import Engine

    records = next(iter(json.load(open(args.run))["results"].values()))["records"]
    questions = load_questions(args.questions)[: len(records)]
    for q, r in zip(questions, records):
        if q.question != r["question"]:
            raise ValueError(f"{args.run}: record {r.get('id')!r} is not question {q.id!r} of {args.questions}")
    encoder = make_encoder(EncoderConfig())
    index = Index.load(args.index, expected_encoder=encoder.name)
    gold = [[(t.strip(), x.strip()) for t, x in q.gold_passages] for q in questions]
    for variant in args.set or [""]:
        sets = shlex.split(variant)
        llm = RecordedLLM(records)
        engine = Engine(index, encoder, apply_overrides(RetrievalConfig(), sets, "retrieval"),
                        apply_overrides(HyperProveConfig(), sets, "engine"), decomposer=llm, reader=llm)
        preds = engine.answer([q.question for q in questions])
        ranked = [[(index.passages[i].title, index.passages[i].text) for i in p.passages] for p in preds]
        r2, r5 = (sum(recall_at_k(r, g, k) for r, g in zip(ranked, gold)) / len(gold) for k in (2, 5))
        print(f"{variant or 'defaults'}: R@2 {r2:.3f} R@5 {r5:.3f} ({len(gold)} questions)", flush=True)


if __name__ == "__main__":
    main()
