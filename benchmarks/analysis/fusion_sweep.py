"""The fusion rule sweep on a dev set: every member runs once, then each candidate rule and weight
set fuses the same member rankings through ``FusionRetriever._fuse`` (the method's own code), so a
grid of rules costs one run of the members. The chosen configuration is then run end to end with
``retriever=fusion`` through ``hpengine.jobs.evaluate`` and must give the sweep's numbers.

    python -m benchmarks analysis fusion_sweep --index IDX --questions ../shared/data/musique/dev.json \
        --threads 2 --label fusion_sweep_musique_e5

Members: HyperProve, PPR and dense at their defaults, 10 passages each, no LLM. Candidates: the
rules ``lead_then_fill`` / ``rrf`` / ``score`` with ``rrf_k`` in {0, 1, 60} and the weight sets of
``GRID``. Prints R@2 / R@5 per candidate beside the members alone; ``--label`` saves the JSON in
``benchmarks/results/``. ``--restart-share X`` runs PPR restarted partly at HyperProve's passages
(``engine.restart_share``), so "ppr" is then that walk. ``--link-grid`` sweeps the links followed
after the default rule instead (``engine.link_anchors`` / ``engine.link_moves``, ``LINK_GRID``;
row 0: none); ``--named-grid`` sweeps the anchors the question names as well
(``engine.named_anchors``, ``NAMED_GRID``; row 0: the links without them). Every row and member
also records the recalls of the even- and odd-numbered questions (``halves``; ``link_folds.py``
chooses on one half and checks on the other).

    python -m benchmarks analysis fusion_sweep --index IDX --questions ../shared/data/musique/dev.json \
        --restart-share 0.1 --link-grid --threads 2 --label fusion_links_musique_e5
    python -m benchmarks analysis fusion_sweep --index IDX --questions ../shared/data/musique/dev.json \
        --restart-share 0.1 --named-grid --threads 2 --label fusion_named_musique_e5
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import torch

from benchmarks._harness import result_path, write_json  # noqa: E402

MEMBERS = ("hyperprove", "ppr", "dense")
#: (rule, rrf_k, weights for MEMBERS, lead_passages[, lead member (default dense)])
GRID = [
    ("lead_then_fill", 1.0, (1, 1, 1), 1),  # the default
    ("lead_then_fill", 1.0, (1, 2, 1), 1),
    ("lead_then_fill", 1.0, (2, 1, 1), 1),
    ("lead_then_fill", 0.0, (1, 1, 1), 1),
    ("lead_then_fill", 60.0, (1, 1, 1), 1),
    ("rrf", 1.0, (1, 1, 1), 1),
    ("rrf", 1.0, (1, 1, 0), 1),
    ("rrf", 1.0, (1, 2, 0), 1),
    ("rrf", 1.0, (2, 1, 0), 1),
    ("rrf", 1.0, (1, 2, 1), 1),
    ("rrf", 1.0, (2, 1, 1), 1),
    ("rrf", 1.0, (2, 2, 1), 1),
    ("rrf", 0.0, (1, 1, 0), 1),
    ("rrf", 60.0, (1, 1, 1), 1),
    ("score", 1.0, (1, 1, 1), 1),
    ("score", 1.0, (1, 1, 0), 1),
    ("score", 1.0, (1, 2, 1), 1),
    ("score", 1.0, (2, 1, 1), 1),
    ("lead_then_fill", 1.0, (1, 1, 0), 1, "ppr"),
    ("lead_then_fill", 1.0, (1, 1, 0), 2, "ppr"),
    ("lead_then_fill", 1.0, (1, 1, 0), 1, "hyperprove"),
    ("lead_then_fill", 1.0, (1, 1, 0), 2, "hyperprove"),
    ("lead_then_fill", 1.0, (1, 1, 1), 1, "ppr"),
    ("lead_then_fill", 1.0, (1, 1, 1), 2, "ppr"),
    ("lead_then_fill", 1.0, (1, 1, 1), 2, "hyperprove"),
]


def recalls(index, questions, ranked: torch.Tensor, ks=(2, 5)) -> dict:
    """Mean recall@k of ``[Q, W]`` passage ids (``-1`` padded) as ``hpengine.jobs.evaluate``
    scores it (gold by stripped title and text; questions without gold left out)."""
    from hpengine.eval import recall_at_k

    totals, n = {k: 0.0 for k in ks}, 0
    for q, row in zip(questions, ranked.tolist()):
        gold = [(t.strip(), x.strip()) for t, x in q.gold_passages]
        if not gold:
            continue
        n += 1
        retrieved = [(index.passages[i].title, index.passages[i].text) for i in row if i >= 0]
        for k in ks:
            totals[k] += recall_at_k(retrieved, gold, k)
    return {f"recall@{k}": round(v / n, 4) for k, v in totals.items()}


def halves(index, questions, ranked: torch.Tensor) -> list:
    """:func:`recalls` of the even- and of the odd-numbered questions (for choosing on one half and
    checking on the other: ``link_folds.py``)."""
    return [recalls(index, questions[h::2], ranked[h::2]) for h in (0, 1)]


def member_outputs(engine, questions, batch_size: int) -> list:
    """Per batch: the members' ``Retrieved`` (through the fusion's own shared steps), the
    fusion retriever's cache (the dense cosines the ``score`` rule reads) and the question texts."""
    fusion = engine.retriever
    batches = []
    for b in range(0, len(questions), batch_size):
        texts = [q.question for q in questions[b: b + batch_size]]
        emb = engine.steps.encode(texts)
        fusion._cache.clear()
        fusion._cache.update(emb=emb, dense={})
        outs = fusion._run_members(texts, emb)  # the method's own: PPR restarted when restart_share > 0
        batches.append((outs, dict(fusion._cache, dense=dict(fusion._cache["dense"])), texts))
    return batches


def fuse_all(engine, batches, rule: str, rrf_k: float, weights: tuple, lead_passages: int,
             lead: str = "dense", link_anchors: int = 0, link_moves: int = 1, named_anchors: int = 0) -> torch.Tensor:
    """``[Q, passage_width]`` fused ids of every batch with this candidate (the method's ``_fuse``)."""
    fusion = engine.retriever
    members = dict(fusion.members)
    fusion.config = dataclasses.replace(fusion.config, rule=rule, rrf_k=rrf_k, weights=list(weights),
                                        lead_passages=lead_passages, lead=lead, restart_share=0.0,  # members ran
                                        link_anchors=link_anchors, link_moves=link_moves,
                                        named_anchors=named_anchors)
    fusion.members = {n: (members[n][0], w) for n, w in zip(MEMBERS, weights) if w > 0}
    try:
        out = []
        for outs, cache, texts in batches:
            fusion._cache.clear()
            fusion._cache.update(cache)
            out.append(fusion._fuse({n: outs[n] for n in fusion.members}, texts))
        width = max(t.shape[1] for t in out)
        return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1]), value=-1) for t in out])
    finally:
        fusion.members = members
#: (link_anchors, link_moves) after the default rule (lead_then_fill, k 1, weights 1, 2, 1, dense x 1)
LINK_GRID = [(0, 1), (1, 1), (1, 2), (1, 3), (1, 10), (2, 1), (2, 2), (2, 3), (2, 10), (3, 1), (3, 2), (3, 10)]
#: (link_anchors, link_moves, named_anchors) after the default rule: the passages the question names as anchors
NAMED_GRID = [(1, 3, 0), (1, 3, 1), (1, 3, 2), (1, 3, 3), (1, 3, 10), (1, 2, 3), (1, 4, 3), (0, 3, 3), (2, 3, 3),
              (1, 1, 3), (1, 10, 3)]
DEFAULT_RULE = ("lead_then_fill", 1.0, (1, 2, 1), 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--max-questions", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--encoder-dtype", default="auto")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--verify", type=int, default=-1,
                    help="GRID row run end to end as retriever=fusion (default: the best R@5)")
    ap.add_argument("--restart-share", type=float, default=0.0,
                    help="engine.restart_share: PPR restarted partly at HyperProve's passages (0: off)")
    ap.add_argument("--link-grid", action="store_true", help="sweep LINK_GRID after the default rule instead of GRID")
    ap.add_argument("--named-grid", action="store_true", help="sweep NAMED_GRID after the default rule instead of GRID")
    ap.add_argument("--label", default="")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from hpengine.config import EncoderConfig, EvalConfig, FusionConfig, RetrievalConfig
    from hpengine.eval import load_questions
    from hpengine.graph import Index
    from hpengine.jobs import evaluate
    from hpengine.models import encoder_for_index
    from hpengine.pipeline import Engine

    index = Index.load(args.index)
    encoder = encoder_for_index(index.meta, EncoderConfig(name_or_path="", dtype=args.encoder_dtype))
    questions = load_questions(args.questions)
    if args.max_questions:
        questions = questions[: args.max_questions]
    engine = Engine(index, encoder, RetrievalConfig(), FusionConfig(members=list(MEMBERS),
                                                                    restart_share=args.restart_share))
    start = time.perf_counter()
    batches = member_outputs(engine, questions, args.batch_size)
    members_s = time.perf_counter() - start
    report = {"index": args.index, "questions": len(questions), "members_seconds": round(members_s, 2),
              "members": {}, "grid": []}
    for name in MEMBERS:
        ranked = torch.cat([torch.nn.functional.pad(o[name].ranked, (0, 10 - o[name].ranked.shape[1]), value=-1)
                            for o, _, _ in batches])
        report["members"][name] = recalls(index, questions, ranked)
        report.setdefault("members_halves", {})[name] = halves(index, questions, ranked)
    if args.named_grid:
        grid = [(*DEFAULT_RULE, "dense", a, m, n) for a, m, n in NAMED_GRID]
    elif args.link_grid:
        grid = [(*DEFAULT_RULE, "dense", a, m, 0) for a, m in LINK_GRID]
    else:
        grid = [(rule, k, w, n, *(lead or ["dense"]), 0, 1, 0) for rule, k, w, n, *lead in GRID]
    for rule, k, weights, lead_passages, lead, anchors, moves, named in grid:
        start = time.perf_counter()
        fused = fuse_all(engine, batches, rule, k, weights, lead_passages, lead, anchors, moves, named)
        row = {"rule": rule, "rrf_k": k, "weights": list(weights), "lead_passages": lead_passages, "lead": lead,
               "link_anchors": anchors, "link_moves": moves, "named_anchors": named,
               **recalls(index, questions, fused), "halves": halves(index, questions, fused),
               "fuse_seconds": round(time.perf_counter() - start, 3)}
        report["grid"].append(row)
    best = args.verify if args.verify >= 0 else max(range(len(grid)), key=lambda i: report["grid"][i]["recall@5"])
    rule, k, weights, lead_passages, lead, anchors, moves, named = grid[best]
    cfg = FusionConfig(members=list(MEMBERS), rule=rule, rrf_k=k, weights=list(weights), lead_passages=lead_passages,
                       lead=lead, restart_share=args.restart_share if weights[1] > 0 else 0.0,
                       link_anchors=anchors, link_moves=moves, named_anchors=named)
    res = evaluate(Engine(index, encoder, RetrievalConfig(), cfg), questions, EvalConfig(batch_size=args.batch_size),
                   progress=False)
    report["verified"] = {"row": best, "recall@2": res["recall@2"], "recall@5": res["recall@5"],
                          "questions_per_second": res["questions_per_second"],
                          "equal_to_sweep": (res["recall@2"], res["recall@5"]) ==
                          (report["grid"][best]["recall@2"], report["grid"][best]["recall@5"])}
    lines = [f"{args.index}: {len(questions)} questions; members run once in {members_s:.1f} s",
             "| run | rule | k | weights (hp, ppr, dense) | lead | links (anchors, moves, named) | R@2 | R@5 |",
             "|---|---|---:|---|---|---|---:|---:|"]
    for name, r in report["members"].items():
        lines.append(f"| {name} alone | | | | | | {r['recall@2']:.4f} | {r['recall@5']:.4f} |")
    for row in report["grid"]:
        lead = f"{row['lead']} × {row['lead_passages']}" if row["rule"] == "lead_then_fill" else ""
        links = f"{row['link_anchors']}, {row['link_moves']}, {row['named_anchors']}" \
            if row["link_anchors"] + row["named_anchors"] else "none"
        lines.append(f"| fusion | {row['rule']} | {row['rrf_k']:g} | {', '.join(map(str, row['weights']))} | "
                     f"{lead} | {links} | {row['recall@2']:.4f} | {row['recall@5']:.4f} |")
    v = report["verified"]
    lines.append(f"end to end (row {best}): R@2 {v['recall@2']:.4f} R@5 {v['recall@5']:.4f}, "
                 f"{v['questions_per_second']:.1f} q/s; equal to the sweep: {v['equal_to_sweep']}")
    print("\n".join(lines))
    if args.label:
        print(f"saved {write_json(report, result_path(args.label))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
