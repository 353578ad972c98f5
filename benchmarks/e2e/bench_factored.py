"""The synonym-expanded incidence kept as factors (what ``Index.graph`` builds where they are
small against the expansion; forced here) against the materialised expansion, on the real dev
sets: each graph method's R@2 / R@5, how many questions rank their gold passages exactly as the
other graph does, q/s, and the structure step's seconds, side by side in one process.

    python -m benchmarks e2e bench_factored --index-root /work/idx --index-suffix _e5 \
        --datasets 2wikimultihopqa musique hotpotqa --threads 2 --label factored_dev_e5

An index per dataset at ``INDEX_ROOT/NAME<suffix>``; its dev questions at ``DATA/NAME/dev.json``
(``--data-dir``, default ../shared/data). ``--op-indexes`` instead times the batched PPR op and a
3-step walk on random seeds, both graphs, on the given indexes (any size; the 100k scaling index
shows where the factors pay):

    python -m benchmarks e2e bench_factored --index-root - --op-indexes /work/idx/2wikimultihopqa \
        /work/scale/index_100000 --threads 1 --label factored_ops_t1

The two graphs differ only in floating-point summation order (``B X`` against
``R ((I + N) X) - K X``), so the rankings may differ only where two passages' scores tie to
rounding.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time


from benchmarks._harness import add_dev_set_args, load_dev_set, result_path, run_dev_sets, write_json  # noqa: E402

#: questions each engine answers untimed first (encoder and retriever warm-up)
WARMUP = 8


def graphs(index) -> dict:
    """``{"materialised": graph, "factored": graph}`` over the index's incidence, with the seconds
    each took to build (the graph and its float32 transition operator)."""
    from hpengine.graph import HyperGraph, expand_with_synonyms

    out = {}
    start = time.perf_counter()
    expanded = expand_with_synonyms(index.fact_entity_raw, index.synonyms, index.num_facts, index.num_entities)
    g = HyperGraph.from_incidence(expanded, index.fact_passage, index.num_entities, index.num_passages, coalesced=True)
    g.transition()
    out["materialised"] = (g, time.perf_counter() - start)
    start = time.perf_counter()
    g = HyperGraph.from_incidence(index.fact_entity_raw, index.fact_passage, index.num_entities, index.num_passages,
                                  synonyms=index.synonyms, factored=True)
    g.transition()
    out["factored"] = (g, time.perf_counter() - start)
    return out


def run_dataset(name: str, args) -> dict:
    from hpengine.config import EvalConfig, RetrievalConfig
    from hpengine.jobs import evaluate
    from hpengine.pipeline import Engine, get_retriever

    index, encoder, questions = load_dev_set(name, args)
    built = graphs(index)
    op = built["factored"][0].transition()
    report = {"questions": len(questions), "nnz": op.nnz - index.num_facts,
              "factor_entries": op.b.outer._nnz() + op.b.inner._nnz() + op.b.minus._nnz(),
              "structure_seconds": {k: round(v[1], 3) for k, v in built.items()}, "methods": {}}
    print(f"{name}: {len(questions)} questions, {report}", flush=True)
    for method in args.methods:
        row, lists = {}, {}
        for setting, (graph, _) in built.items():
            on = dataclasses.replace(index, _graph=graph, _lookups=None)
            engine = Engine(on, encoder, RetrievalConfig(), get_retriever(method).config_class())
            evaluate(engine, questions[:WARMUP], EvalConfig(batch_size=args.batch_size), progress=False)
            res = evaluate(engine, questions, EvalConfig(batch_size=args.batch_size), progress=False)
            row[setting] = {k: res[k] for k in ("recall@2", "recall@5", "wall_seconds", "questions_per_second")}
            lists[setting] = [tuple(r["gold_ranks"]) for r in res["records"]]
        row["same_gold_ranks"] = sum(a == b for a, b in zip(lists["materialised"], lists["factored"]))
        report["methods"][method] = row
        m, f = row["materialised"], row["factored"]
        print(f"  {method:10} R@2/R@5 materialised {m['recall@2']:.4f}/{m['recall@5']:.4f} factored "
              f"{f['recall@2']:.4f}/{f['recall@5']:.4f}; same gold ranks {row['same_gold_ranks']}/{len(questions)}; "
              f"q/s {m['questions_per_second']:.1f} / {f['questions_per_second']:.1f}", flush=True)
    return report


def table(reports: dict) -> str:
    lines = ["| dataset | method | R@2 / R@5 materialised | R@2 / R@5 factored | same gold ranks | "
             "q/s materialised / factored |", "|---|---|---:|---:|---:|---:|"]
    for name, rep in reports.items():
        for method, row in rep["methods"].items():
            m, f = row["materialised"], row["factored"]
            lines.append(f"| {name} | {method} | {m['recall@2']:.4f} / {m['recall@5']:.4f} | {f['recall@2']:.4f} / "
                         f"{f['recall@5']:.4f} | {row['same_gold_ranks']} / {rep['questions']} | "
                         f"{m['questions_per_second']:.1f} / {f['questions_per_second']:.1f} |")
    lines += ["", "| dataset | nnz (expanded) | factor entries | structure s materialised / factored |",
              "|---|---:|---:|---:|"]
    for name, rep in reports.items():
        s = rep["structure_seconds"]
        lines.append(f"| {name} | {rep['nnz']:,} | {rep['factor_entries']:,} | {s['materialised']:.3f} / "
                     f"{s['factored']:.3f} |")
    return "\n".join(lines)


def op_row(path: str, questions: int, repeat: int) -> dict:
    """Seconds of the batched PPR op and of a 3-step walk on the index at ``path``, materialised
    and factored, on the same random seeds (best of ``repeat``), and both graphs' entries."""
    import torch

    from hpengine.graph import Index
    from hpengine.retrieval import personalized_pagerank, walk_visits

    index = Index.load(path)
    v, h, p = index.num_entities, index.num_facts, index.num_passages
    gen = torch.Generator().manual_seed(0)
    seeds = torch.randint(0, v, (questions, 5), generator=gen), torch.rand(questions, 5, generator=gen)
    walk = torch.randint(0, h, (questions, 8), generator=gen), torch.rand(questions, 8, generator=gen)
    row = {"index": path, "questions": questions}
    for name, (graph, seconds) in graphs(index).items():
        op = graph.transition()
        b = op.b
        entries = sum(m._nnz() for m in (b.outer, b.inner, b.minus) if m is not None)
        ppr = lambda: personalized_pagerank(graph, seeds, nodes=slice(v + h, v + h + p))  # noqa: E731
        steps = lambda: walk_visits(op, *walk, walk_steps=3, restart=0.3)  # noqa: E731
        ppr(), steps()  # warm-up
        row[name] = {"entries": entries, "structure_s": round(seconds, 3),
                     "ppr_s": round(min(_timed(ppr) for _ in range(repeat)), 3),
                     "walk_s": round(min(_timed(steps) for _ in range(repeat)), 3)}
        print(f"{path}: {name} {row[name]}", flush=True)
    return row


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dev_set_args(ap, methods=["hyperprove", "ppr"])
    ap.add_argument("--op-indexes", nargs="+", default=[],
                    help="instead of the dev sets: time the PPR op and the walk on these indexes, both graphs")
    ap.add_argument("--op-questions", type=int, default=256)
    args = ap.parse_args(argv)
    if args.op_indexes:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        rows = [op_row(path, args.op_questions, 3) for path in args.op_indexes]
        if args.label:
            print(f"saved {write_json({'args': vars(args), 'ops': rows}, result_path(args.label))}")
        return 0
    return run_dev_sets(args, run_dataset, table)


if __name__ == "__main__":
    sys.exit(main())
