"""Eager vs torch.compile for the hpengine.nn modules (H = 10k power-law graph, D = 64, Q = 64).

Implementations per module (``dense``: DifferentiableDense, ``hop``: DifferentiableHyperProveHop,
``ppr``: DifferentiablePPR): ``eager`` and ``compiled`` (``torch.compile``, inductor); the first
compiled call (compilation included) is recorded in the compiled cell's ``extra``.

    python benchmarks/ops/bench_nn_compile.py --threads 1
    python benchmarks/ops/bench_nn_compile.py --threads 1 --modules dense --label nn_compile_cpu_t1
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _presets
from _harness import add_common_args, finish, measure  # noqa: E402

from hpengine.graph import HyperGraph  # noqa: E402
from hpengine.nn import DifferentiableDense, DifferentiableHyperProveHop, DifferentiablePPR  # noqa: E402
from hpengine.testing._graphs import power_law_hypergraph  # noqa: E402

MODULES = ("dense", "hop", "ppr")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", type=int, default=10_000, help="H of the power-law graph")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--queries", type=int, default=64)
    parser.add_argument("--modules", nargs="+", default=list(MODULES), choices=MODULES)
    parser.add_argument("--min-run-time", type=float, default=1.0, help="seconds per cell")
    add_common_args(parser)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    fe, fp, v, p = power_law_hypergraph(args.facts)
    g = HyperGraph.from_incidence(fe, fp, v, p).to(args.device)
    unit = torch.nn.functional.normalize
    fact = unit(torch.randn(g.num_facts, args.dim), dim=1).to(args.device)
    ent = unit(torch.randn(v, args.dim), dim=1).to(args.device)
    q = unit(torch.randn(args.queries, args.dim), dim=1).to(args.device)
    build = {"dense": lambda: (DifferentiableDense(fact, k=10), lambda m: m(q)),
             "hop": lambda: (DifferentiableHyperProveHop(g, fact), lambda m: m(q, None)),
             "ppr": lambda: (DifferentiablePPR(g, ent, k=10, links=5), lambda m: m(q))}
    case = {"H": g.num_facts, "D": args.dim, "Q": args.queries}
    records = []
    for name in args.modules:
        module, call = build[name]()
        compiled = torch.compile(module)
        start = time.perf_counter()
        call(compiled)
        first = time.perf_counter() - start
        for impl, m, extra in (("eager", module, {}), ("compiled", compiled, {"first_call_s": round(first, 2)})):
            rec = measure(lambda: call(m), bench=f"nn_{name}", impl=impl, case=case, items=args.queries,
                          device=args.device, min_run_time=args.min_run_time, extra=extra)
            records.append(rec)
        eager, comp = records[-2], records[-1]
        print(f"{name}: eager {eager.seconds * 1e3:.1f} ms, compiled {comp.seconds * 1e3:.1f} ms, "
              f"first compiled call {first:.1f} s", flush=True)
    return finish(args, records, meta=vars(args))


if __name__ == "__main__":
    sys.exit(main())
