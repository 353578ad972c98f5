"""PPR that restarts partly at HyperProve's passages: does it find what neither finds alone?

Issue 32's fusion needs near-oracle picks between the members' lists; this tries the other way, a
member that changes what it finds. For each dev question, PPR's own personalization (linked
entities, fact seeds, dense passages) gets ``beta`` more mass on HyperProve's top ``--top``
passages (weight ``1 / (1 + rank)``, normalised per question), and the walk ranks passages as
PPR does (dense fill), through the fusion's own code for ``engine.restart_share``;
``--dense-lead N`` puts dense's first N passages ahead. Prints R@2 / R@5 per ``beta`` beside both
members'.

    python -m benchmarks analysis ppr_from_hyperprove --index-root /work/idx --index-suffix _e5 \
        --threads 2 --label ppr_from_hyperprove_e5
"""
from __future__ import annotations

import argparse
import sys

import torch

from benchmarks._harness import add_dev_set_args, load_dev_set, run_dev_sets  # noqa: E402

BETAS = [0.0, 0.25, 0.5, 1.0, 2.0, 4.0]


def recall(ranked: torch.Tensor, gold: list, k: int) -> float:
    """Mean over questions of |top-k ∩ gold| / |gold| (questions without gold in the index skipped)."""
    total, n = 0.0, 0
    for row, g in zip(ranked.tolist(), gold):
        if g:
            total += len(set(row[:k]) & g) / len(g)
            n += 1
    return round(total / max(n, 1), 4)


def run_dataset(name: str, args) -> dict:
    """The fusion's own restart (``FusionRetriever._restart_seeds``, ``PPRRetriever.retrieve_seeded``)
    at each ``beta``, the members run once."""
    import dataclasses

    from hpengine.config import FusionConfig, RetrievalConfig
    from hpengine.pipeline import Engine
    from hpengine.retrieval import lead_then_fill

    index, encoder, questions = load_dev_set(name, args)
    ids_of = {(p.title, p.text): i for i, p in enumerate(index.passages)}
    gold = [{ids_of[g] for g in q.gold_passages if g in ids_of} for q in questions]
    texts = [q.question for q in questions]
    engine = Engine(index, encoder, RetrievalConfig(),
                    FusionConfig(members=["hyperprove", "ppr"], rule="rrf", restart_share=0.0,
                                 restart_passages=args.top))
    fusion = engine.retriever
    hp, ppr = fusion.members["hyperprove"][0], fusion.members["ppr"][0]
    emb = engine.steps.encode(texts, kind="query")
    hp_ranked = hp.retrieve(texts, emb).ranked
    ids, mass = ppr.seeds(texts, emb)
    width = ppr.config.passage_width
    dense = engine.steps.dense_passages(emb, width)
    report = {"questions": len(questions), "hyperprove": {}, "ppr": {}, "betas": {}}
    ppr_ranked = ppr.retrieve_seeded(texts, emb, ids, mass).ranked
    for k in (2, 5):
        report["hyperprove"][f"R@{k}"] = recall(hp_ranked, gold, k)
        report["ppr"][f"R@{k}"] = recall(ppr_ranked, gold, k)
    for beta in args.betas:
        fusion.config = dataclasses.replace(fusion.config, restart_share=beta)
        ranked = ppr.retrieve_seeded(texts, emb, *fusion._restart_seeds(ids, mass, hp_ranked)).ranked
        if args.dense_lead:  # dense's first passages ahead of the walk's
            ranked = lead_then_fill(dense[:, : args.dense_lead], ranked, width)
        report["betas"][beta] = {f"R@{k}": recall(ranked, gold, k) for k in (2, 5)}
        print(f"{name} beta {beta}: {report['betas'][beta]}", flush=True)
    print(f"{name}: HyperProve {report['hyperprove']}, PPR {report['ppr']}", flush=True)
    return report


def table(reports: dict) -> str:
    betas = list(next(iter(reports.values()))["betas"])
    lines = ["| dataset | HyperProve R@2 / R@5 | PPR R@2 / R@5 | " + " | ".join(f"beta {b}" for b in betas) + " |",
             "|---|---:|---:|" + "---:|" * len(betas)]
    for name, rep in reports.items():
        h, p = rep["hyperprove"], rep["ppr"]
        cells = [f"{rep['betas'][b]['R@2']:.3f} / {rep['betas'][b]['R@5']:.3f}" for b in betas]
        lines.append(f"| {name} | {h['R@2']:.3f} / {h['R@5']:.3f} | {p['R@2']:.3f} / {p['R@5']:.3f} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dev_set_args(ap, methods=["ppr"])
    ap.add_argument("--top", type=int, default=5, help="HyperProve passages that receive restart mass")
    ap.add_argument("--betas", type=float, nargs="+", default=BETAS, help="extra restart mass on them (0: PPR)")
    ap.add_argument("--dense-lead", type=int, default=0, help="dense's first N passages ahead of the walk's")
    return run_dev_sets(ap.parse_args(argv), run_dataset, table)


if __name__ == "__main__":
    sys.exit(main())
