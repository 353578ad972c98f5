"""Eager vs torch.compile for the hpengine.nn modules (1 thread, H = 10k power-law graph, Q = 64).

    python benchmarks/bench_nn_compile.py
"""
import time, torch
torch.set_num_threads(1)
torch.manual_seed(0)
from hpengine.graph import HyperGraph
from hpengine.nn import HyperProveHop, PPRRetriever, DenseRetriever
from hpengine.testing._graphs import power_law_hypergraph
fe, fp, v, p = power_law_hypergraph(10000)
g = HyperGraph.from_incidence(fe, fp, v, p)
d = 64
fact = torch.nn.functional.normalize(torch.randn(g.num_facts, d), dim=1)
ent = torch.nn.functional.normalize(torch.randn(v, d), dim=1)
q = torch.nn.functional.normalize(torch.randn(64, d), dim=1)
def t(f, n=5):
    f(); start = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - start) / n * 1000
for name, m, call in [("dense", DenseRetriever(fact, k=10), lambda m: m(q)),
                      ("hop", HyperProveHop(g, fact), lambda m: m(q, None)),
                      ("ppr", PPRRetriever(g, ent, k=10, links=5), lambda m: m(q))]:
    c = torch.compile(m)
    s = time.perf_counter(); call(c); first = time.perf_counter() - s
    print(f"{name}: eager {t(lambda: call(m)):.1f} ms, compiled {t(lambda: call(c)):.1f} ms, first compiled call {first:.1f} s")
