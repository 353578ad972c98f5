"""Eager vs torch.compile for the hpengine.nn modules (H = 10k power-law graph, D = 64, Q = 64).

Implementations per module (``dense``: DifferentiableDense, ``hop``: DifferentiableHyperProveHop,
``ppr``: DifferentiablePPR): ``eager`` and ``compiled`` (``torch.compile``, inductor); the first
compiled call (compilation included) is recorded in the compiled cell's ``extra``.

    python -m benchmarks ops bench_nn_compile threads=1
    python -m benchmarks ops bench_nn_compile threads=1 modules=dense
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from benchmarks._harness import Common, measure, opt, report, script_args, time_once, trace_dir
from hpengine.graph import HyperGraph
from hpengine.nn import DifferentiableDense, DifferentiableHyperProveHop, DifferentiablePPR
from hpengine.testing._graphs import power_law_hypergraph

MODULES = ("dense", "hop", "ppr")


@dataclass
class Config(Common):
    facts: int = opt(10_000, "H of the power-law graph")
    dim: int = opt(64, "embedding width D")
    queries: int = opt(64, "questions per call Q")
    modules: tuple[str, ...] = opt(("dense",), f"modules among {','.join(MODULES)} (compiling hop and ppr takes minutes)")
    min_run_time: float = opt(1.0, "seconds per cell")


def main(argv=None) -> int:
    args = script_args(Config, __doc__, __file__, argv)
    bad = [m for m in args.modules if m not in MODULES]
    if bad:
        print(f"hpengine: error: modules= takes {','.join(MODULES)} (got {','.join(bad)})", file=sys.stderr)
        return 2
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
        first = time_once(lambda: call(compiled), args.device)
        for impl, m, extra in (("eager", module, {}), ("compiled", compiled, {"first_call_s": round(first, 2)})):
            rec = measure(lambda: call(m), bench=f"nn_{name}", impl=impl, case=case, items=args.queries,
                          device=args.device, min_run_time=args.min_run_time, extra=extra,
                          trace_dir=trace_dir(args, __file__))
            records.append(rec)
        eager, comp = records[-2], records[-1]
        print(f"{name}: eager {eager.seconds * 1e3:.1f} ms, compiled {comp.seconds * 1e3:.1f} ms, "
              f"first compiled call {first:.1f} s", flush=True)
    report(__file__, args, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
