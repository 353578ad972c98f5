"""Replay the final reads of a GRAG-MH LLM-mode run with each path's final read capped at K
passages (``GragConfig.final_passages``): each recorded step's retrieval is rerun at the given
settings (checked against the record's passages), each path reads the question's final answer
again from its steps' passages, and the paths vote as the engine does. Costs one batched read per
cap instead of a whole run.

    python benchmarks/replay_grag_final_read.py --run OUT/hotpotqa_grag.json --index IDX/hotpotqa \\
        --llm /work/models/qwen2.5-coder-1.5b --caps 5 [--set engine.fact_weight=0]

``--set`` takes the run's settings where they differ from today's defaults (a run made before
``fact_weight`` existed needs ``engine.fact_weight=0``); "steps whose passages differ" must be 0
for a faithful replay. Cap 0 is every passage read, in read order (the run's own read).
"""
from __future__ import annotations

import argparse
import json
import re
import time


def _paths(rec: dict) -> tuple[list, list]:
    """Per path: its chain records and its score, from the record's ``paths`` (runs before that
    field: its notes)."""
    if rec.get("paths"):
        steps, scores = [x["steps"] for x in rec["paths"]], [x["score"] for x in rec["paths"]]
    else:
        notes = [n for n in rec.get("notes", []) if n.startswith("grag path")]
        steps = [int(re.search(r": (\d+) steps", n).group(1)) for n in notes]
        scores = [float(re.search(r"score (-?[\d.]+)$", n).group(1)) for n in notes]
    out, i = [], 0
    for s in steps:
        out.append(rec["chain"][i:i + s])
        i += s
    return out, scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="bench_qa.py JSON of a grag LLM-mode run")
    ap.add_argument("--index", required=True, help="the index it ran on (with GRAG parts)")
    ap.add_argument("--llm", required=True)
    ap.add_argument("--caps", default="5", help="comma-separated final_passages values (0: every passage read)")
    ap.add_argument("--set", nargs="*", default=[], help="engine.FIELD=VALUE settings of the run")
    ap.add_argument("--max-questions", type=int, default=0, help="the run's first N records only (0: all)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-batch-tokens", type=int, default=16384)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bench_qa import _apply
    from hpengine.config import EncoderConfig, GragConfig
    from hpengine.eval import exact_match, f1_score, normalize_answer
    from hpengine.graph import Index
    from hpengine.models import Reader
    from hpengine.pipeline import Engine, encoder_for_index, peek_index_meta
    from hpengine.pipeline.retrievers import final_read_passages

    records = next(iter(json.load(open(args.run))["results"].values()))["records"]
    records = records[: args.max_questions] if args.max_questions else records
    enc = encoder_for_index(peek_index_meta(args.index), EncoderConfig(name_or_path=""))
    index = Index.load(args.index, expected_encoder=enc.name)
    cfg = _apply(GragConfig(), args.set, "engine")
    engine = Engine(index, enc, config=cfg)
    items = [(qi, pi, si, cfg.search_template.format(subquery=h["subquery"], question=r["question"]).strip())
             for qi, r in enumerate(records) for pi, ch in enumerate(_paths(r)[0]) for si, h in enumerate(ch)]
    step_ids, differ = {}, 0
    for start in range(0, len(items), 256):
        chunk = items[start:start + 256]
        texts = [t for *_, t in chunk]
        found = engine.retriever.search.search(texts, engine.steps.encode(texts), cfg.passage_width)
        for (qi, pi, si, _), row in zip(chunk, found["ranked"][:, : cfg.reader_passages].tolist()):
            ids = [p for p in row if p >= 0]
            step_ids[qi, pi, si] = ids
            differ += [index.passages[p].title for p in ids] != _paths(records[qi])[0][pi][si]["linked"]
    print(f"{len(items)} steps, steps whose passages differ from the run's: {differ}", flush=True)

    tokenizer = AutoTokenizer.from_pretrained(args.llm)
    model = AutoModelForCausalLM.from_pretrained(args.llm, dtype=torch.bfloat16).eval()
    reader = Reader(model, tokenizer, batch_size=args.batch_size, max_batch_tokens=args.max_batch_tokens)
    ps = index.passages
    n = len(records)
    for cap in (int(c) for c in args.caps.split(",")):
        questions, facts, steps, owner = [], [], [], []
        for qi, r in enumerate(records):
            for pi, chain in enumerate(_paths(r)[0]):
                order = final_read_passages([step_ids[qi, pi, si] for si in range(len(chain))], cap)
                questions.append(r["question"])
                facts.append([f"{ps[p].title}: {ps[p].text}" for p in order])
                steps.append([(h["subquery"], h["answer"]) for h in chain] or None)
                owner.append((qi, pi))
        start, tokens = time.perf_counter(), reader.stats["tokens_in"]
        finals = reader.read(questions, facts, final=True, steps=steps)
        seconds = time.perf_counter() - start
        per: dict = {}
        for (qi, pi), a in zip(owner, finals):
            per.setdefault(qi, []).append((pi, a))
        em = f1 = same = 0.0
        for qi, r in enumerate(records):
            scores = _paths(r)[1]
            pred = r["prediction"]
            if qi in per:  # the engine's vote: most paths, then the best path score, then the earlier path
                votes: dict = {}
                for pi, a in per[qi]:
                    votes.setdefault(normalize_answer(a), []).append(pi)
                key = max(votes, key=lambda k: (len(votes[k]), max(scores[i] for i in votes[k]), -votes[k][0]))
                pred = dict(per[qi])[max(votes[key], key=lambda i: (scores[i], -i))]
            same += normalize_answer(pred) == normalize_answer(r["prediction"])
            em += exact_match(pred, r["gold"])
            f1 += f1_score(pred, r["gold"])
        print(f"final_passages {cap}: EM {em / n:.3f} F1 {f1 / n:.3f}, answers as in the run {same:.0f}/{n}, "
              f"{len(questions)} prompts, {reader.stats['tokens_in'] - tokens:,} tokens in, {seconds:.0f} s "
              f"(the run: EM {sum(r['em'] for r in records) / n:.3f} F1 {sum(r['f1'] for r in records) / n:.3f})",
              flush=True)


if __name__ == "__main__":
    main()
