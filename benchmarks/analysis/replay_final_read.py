"""Replay the final reads of an LLM-mode run from its JSON records on exactly the same facts:
with and without the chain's (sub-question, answer) pairs in the prompt
(``EngineConfig.final_with_steps`` "always" / "never"; with both reads also "comparisons": the
steps for choice and yes/no questions only), each scored as read and after ``resolve_choice`` (a
choice question's answer mapped back to its option through the chain). Costs one batched read
per variant instead of a whole run.

    python -m benchmarks analysis replay_final_read --run llm100/2wikimultihopqa_hyperprove.json \\
        --questions ../shared/data/2wikimultihopqa/dev.json --llm ~/.cache/hpengine/models/qwen2.5-coder-1.5b

"same as the run" counts the answers equal to the run's own (before ``resolve_choice``); for the
variant the run used it checks that the replay is faithful (bf16 batching may flip a few).
``--reads steps`` or ``--reads nosteps`` reads one variant only.
"""
from __future__ import annotations

import argparse
import json
import time



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="bench_qa.py JSON of a hyperprove LLM-mode run")
    ap.add_argument("--questions", required=True, help="the dev.json it ran on (for the question types)")
    ap.add_argument("--llm", required=True)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--reads", default="steps,nosteps", help="comma-separated: steps, nosteps")
    ap.add_argument("--save", help="write the replayed answers per variant to this JSON file")
    args = ap.parse_args()
    names = args.reads.split(",")
    unknown = set(names) - {"steps", "nosteps"}
    if unknown:
        raise SystemExit(f"--reads: unknown variant(s) {sorted(unknown)} (steps, nosteps)")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks._harness import write_json
    from hpengine.eval import exact_match, f1_score
    from hpengine.models import Reader
    from hpengine.pipeline import is_comparison, resolve_choice

    records = next(iter(json.load(open(args.run))["results"].values()))["records"]
    types = [q.get("type", "all") for q in json.load(open(args.questions))[: len(records)]]
    tokenizer = AutoTokenizer.from_pretrained(args.llm)
    model = AutoModelForCausalLM.from_pretrained(args.llm, dtype=torch.bfloat16).eval()
    reader = Reader(model, tokenizer, batch_size=args.batch_size)
    questions = [r["question"] for r in records]
    facts = [[f["text"] for hop in r["chain"] for f in hop["facts"]] for r in records]
    steps = [[(hop["subquery"], hop["answer"]) for hop in r["chain"]] for r in records]
    saved = {}
    if set(names) == {"steps", "nosteps"}:
        names.append("comparisons")  # derived from the two reads, no read of its own
    for name in names:
        start = time.perf_counter()
        if name == "comparisons":  # no read: the steps read for comparisons, the other elsewhere
            read = [saved["steps" if is_comparison(q) else "nosteps"]["read"][i] for i, q in enumerate(questions)]
        else:
            read = reader.read(questions, facts, final=True, steps=steps if name == "steps" else None)
        same = sum(a == r["prediction"] or resolve_choice(q, a, st) == r["prediction"]
                   for a, r, q, st in zip(read, records, questions, steps))
        print(f"{name}: {time.perf_counter() - start:.0f} s, same as the run: {same}/{len(records)}")
        resolved = [resolve_choice(q, a, st) for q, a, st in zip(questions, read, steps)]
        saved[name] = {"read": read, "resolved": resolved}
        for label, pred in (("as read", read), ("+ resolve_choice", resolved)):
            em = [exact_match(a, r["gold"]) for a, r in zip(pred, records)]
            f1 = [f1_score(a, r["gold"]) for a, r in zip(pred, records)]
            by_type: dict = {}
            for t, e in zip(types, em):
                by_type.setdefault(t, []).append(e)
            print(f"   {label}: EM {sum(em) / len(em):.3f} F1 {sum(f1) / len(f1):.3f}; EM by type:",
                  {t: round(sum(v) / len(v), 3) for t, v in by_type.items()}, flush=True)
    if args.save:
        write_json(saved, args.save)


if __name__ == "__main__":
    main()
