"""Recount the self-consistency vote of GRAG-MH LLM-mode runs from their recorded paths, with
the engine's vote as it is now (``self_consistency_vote``): no model, no retrieval. A path's
answer and score come from the record's ``paths`` (runs before that field: its notes), so this
measures a change to the vote alone on runs already made.

    python -m benchmarks analysis revote_grag OUT/hotpotqa_grag.json OUT/musique_grag.json

Prints, per run, EM / F1 as recorded and as recounted, how many predictions change, how many votes
are unanimous (every voting path's normalised answer the same) and the oracle F1 (the best of the
voting paths per question: what a perfect vote could reach).
``--paths 0,3,4`` recounts over those paths alone (positions in each record's ``paths``), so a run
with more paths than a variant needs (greedy paths 0-2 and sampled paths 3-4, say) measures every
subset of its paths from one run:

    python -m benchmarks analysis revote_grag OUT/hotpotqa_grag.json --paths 0,1,2

A run still in progress is recounted from its checkpoint (``eval.checkpoint``, bench_qa
``--checkpoint-dir``) with its question file for the gold answers:

    python -m benchmarks analysis revote_grag CKPT/hotpotqa_grag.jsonl --questions ../shared/data/hotpotqa/dev.json
"""
from __future__ import annotations

import argparse
import ast
import json
import re

_NOTE = re.compile(r"grag path \d+: (\d+) steps, answer (.*), score (-?[\d.]+)$")


def recorded_paths(rec: dict) -> tuple[list, list, list]:
    """A GRAG-MH record's per-path chain records, answers and scores, from its ``paths`` (runs
    before that field: its notes, ``"grag path p: n steps, answer 'a', score s"``)."""
    if rec.get("paths"):
        steps = [p["steps"] for p in rec["paths"]]
        answers, scores = [p["answer"] for p in rec["paths"]], [p["score"] for p in rec["paths"]]
    else:
        found = [m for m in (_NOTE.match(n) for n in rec.get("notes", [])) if m]
        steps = [int(m.group(1)) for m in found]
        answers, scores = [ast.literal_eval(m.group(2)) for m in found], [float(m.group(3)) for m in found]
    chains, i = [], 0
    for n in steps:
        chains.append(rec["chain"][i:i + n])
        i += n
    return chains, answers, scores


def checkpoint_records(path: str, questions: str) -> dict:
    """``{name: {"records": [...]}}`` from an eval checkpoint (JSONL): each finished prediction with
    its gold answers (from ``questions``, by id), EM and F1, in the shape of a bench_qa run's."""
    from hpengine.eval import exact_match, f1_score, load_questions

    gold = {str(q.id): q.answers for q in load_questions(questions)}
    records = []
    with open(path) as f:
        for line in f:
            try:
                batch = json.loads(line)
            except json.JSONDecodeError:  # a torn last line
                continue
            for qid, p in zip(batch.get("ids", []), batch.get("predictions", [])):
                g = gold[qid.split("\t", 1)[0]]  # a checkpoint names a question "id<TAB>text"
                records.append({"prediction": p["answer"], "gold": g, "em": exact_match(p["answer"], g),
                                "f1": f1_score(p["answer"], g), "paths": p.get("paths", []),
                                "chain": p["chain"], "notes": p.get("notes", [])})
    return {path: {"records": records}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="bench_qa.py JSON files of grag LLM-mode runs")
    ap.add_argument("--questions", default="", help="question file, for runs given as eval checkpoints (JSONL)")
    ap.add_argument("--paths", default="", help="comma-separated path positions to vote over (default: all)")
    args = ap.parse_args()
    keep = [int(p) for p in args.paths.split(",")] if args.paths else None

    from hpengine.eval import exact_match, f1_score, normalize_answer
    from hpengine.pipeline.retrievers import self_consistency_vote

    print("| run | questions | EM recorded | F1 recorded | EM recounted | F1 recounted | changed | unanimous "
          "| oracle F1 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in args.runs:
        runs = checkpoint_records(path, args.questions) if args.questions else json.load(open(path))["results"]
        for key, res in runs.items():
            recs = [(r, *recorded_paths(r)[1:]) for r in res["records"]]
            if keep is not None:
                short = next((len(a) for _, a, _ in recs if a and max(keep) >= len(a)), None)
                if short is not None:
                    raise SystemExit(f"revote_grag: --paths {args.paths} names path {max(keep)}, but {path} "
                                     f"has records with {short} paths")
                recs = [(r, [a[i] for i in keep], [s[i] for i in keep]) for r, a, s in recs]
            recs = [x for x in recs if x[1]]
            em = f1 = em0 = f10 = changed = unanimous = oracle = 0.0
            for r, answers, scores in recs:
                pred = answers[self_consistency_vote(answers, scores)]
                em += exact_match(pred, r["gold"]); f1 += f1_score(pred, r["gold"])
                em0 += r["em"]; f10 += r["f1"]; changed += pred != r["prediction"]
                unanimous += len({normalize_answer(a) for a in answers}) == 1
                oracle += max(f1_score(a, r["gold"]) for a in answers)
            n = max(len(recs), 1)
            print(f"| {key} | {len(recs)} | {em0 / n:.3f} | {f10 / n:.3f} | {em / n:.3f} | {f1 / n:.3f} | {int(changed)} "
                  f"| {int(unanimous)} | {oracle / n:.3f} |")


if __name__ == "__main__":
    main()
