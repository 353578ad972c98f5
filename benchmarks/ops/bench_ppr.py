"""Batched personalised PageRank (hpengine.retrieval.personalized_pagerank) against per-question PPR.

Graphs (``graph=``), star-expanded (entities, facts, passages):

* ``power_law``: ``power_law_hypergraph(H)`` (title entities plus Zipf pool mentions; N ~ 1.6 H);
* ``zipf``: ``zipf_fact_hypergraph(H)``: every fact 0-4 entities (uniform count) of Zipf 0.7
  popularity from a pool of 0.3 H, a passage per ~6 facts (N ~ 1.47 H);
* ``index``: a built index's own graph (``index=DIR``; ``sizes=`` is ignored, H is the index's).

Personalization (HippoRAG-like): each question seeds 5 random entities and 5 random passages that
have facts, with random weights, given to our op in the sparse ``(ids, mass)`` form. Damping 0.85.

Implementations, all on the same graph and personalization:

* ``power`` / ``chebyshev``: our op, float32, default ``tol=1e-6``, all Q questions at once,
  returning the passage columns (``nodes=slice(V + H, N)``, what the PPR retriever asks for).
* ``chebyshev_f64``: our op in float64 at ``tol=1e-10`` (igraph-level accuracy).
* ``power_torch`` / ``chebyshev_torch``: the same with ``HPENGINE_KERNELS=off`` (the PyTorch path of
  the sparse products; ``power`` / ``chebyshev`` take the compiled CPU kernel where it builds), so
  one run gives the kernel's ratio (``impls=chebyshev,chebyshev_torch``).
* ``igraph``: per question ``Graph.personalized_pagerank(implementation="prpack")``, what
  HippoRAG runs per query; timed on ``baseline_questions=`` questions (fewer at H >= 1M).
* ``networkx``: per question ``networkx.pagerank`` (scipy power iteration, ``tol=1e-10``); timed on
  ``networkx_questions=`` questions, skipped at H >= 1M.
* ``torch_ppr``: the torch-ppr package's ``power_iteration`` (COO SpMM on the explicit N x N
  normalised adjacency, ``[N, 64]`` column blocks, ``torch_ppr_eps=`` max-norm tolerance), at
  Q <= ``torch_ppr_max_q=``.

Accuracy: each implementation's L1 distance to a tight solution (our Chebyshev, float64,
``tol=1e-13``; tests check it against networkx) on the first ``accuracy_questions=`` questions,
all N columns, averaged. Per-question methods do not get faster with Q: timed once per H and shown
beside each Q. The default is the suite's quick size; the full grid takes ~10 minutes on 2 cores::

    python -m benchmarks ops bench_ppr threads=1 sizes=10000,100000,1000000 queries=1,64,1024
    python -m benchmarks ops bench_ppr sizes=100000 queries=1024 profile=true baselines=false
    python -m benchmarks ops bench_ppr graph=zipf sizes=100000 queries=1024 threads=1
    python -m benchmarks ops bench_ppr graph=index index=IDX queries=1024 threads=1
"""
from __future__ import annotations

import gc
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from benchmarks._harness import Common, Record, measure, opt, report, script_args, trace_dir
from hpengine.graph import HyperGraph
from hpengine.retrieval import personalized_pagerank, ppr_chunk_size
from hpengine.testing._graphs import power_law_hypergraph, zipf_fact_hypergraph
from hpengine.testing.reference import star_graph_edges

BENCH = "ppr"
DAMPING = 0.85
SEEDS = 5  # entities and passages per question


def load_graph(kind: str, num_facts: int, index: str | None, seed: int = 0):
    """``(fact_entity [2, nnz], fact_passage [H], V, P)`` on the CPU for ``graph=kind``."""
    if kind == "power_law":
        return power_law_hypergraph(num_facts, seed=seed)
    if kind == "zipf":
        return zipf_fact_hypergraph(num_facts, seed=seed)
    from hpengine.graph import Index

    idx = Index.load(index)
    fe = idx.graph.fact_entity.cpu()  # with the synonym expansion the PPR retriever walks
    return fe, idx.fact_passage.cpu(), idx.num_entities, idx.num_passages


class Problem:
    """Graph, star edges and personalization for one H."""

    def __init__(self, num_facts: int, max_q: int, device: str, seed: int = 0, kind: str = "power_law",
                 index: str | None = None):
        t0 = time.perf_counter()
        fe, fp, v, p = load_graph(kind, num_facts, index, seed)
        num_facts = int(fp.numel())
        self.raw = (fe, fp, v, p)
        self.graph = HyperGraph.from_incidence(fe.to(device), fp.to(device), v, p)
        self.v, self.h, self.p = v, num_facts, p
        self.n = v + num_facts + p
        gen = torch.Generator().manual_seed(seed + 1)
        ent = torch.nonzero(self.graph.entity_degree().cpu() > 0).squeeze(1)
        pas = torch.nonzero(self.graph.passage_degree().cpu() > 0).squeeze(1)
        ids = torch.cat([ent[torch.randint(0, ent.numel(), (max_q, SEEDS), generator=gen)],
                         v + num_facts + pas[torch.randint(0, pas.numel(), (max_q, SEEDS), generator=gen)]], 1)
        self.ids = ids
        self.mass = torch.rand(max_q, 2 * SEEDS, generator=gen) + 0.1
        self.ids_dev, self.mass_dev = ids.to(device), self.mass.to(device)
        self.edges = star_graph_edges(fe, fp, v, p)  # [E, 2]
        # build and cache the CSR parts outside the timings
        personalized_pagerank(self.graph, (self.ids_dev[:1], self.mass_dev[:1]), max_iter=1)
        personalized_pagerank(self.graph, (self.ids_dev[:1], self.mass_dev[:1].double()), max_iter=1)
        self.build_seconds = time.perf_counter() - t0

    def dense(self, q: int) -> torch.Tensor:
        """``[q, N]`` float64 personalization (rows sum to 1) on the CPU."""
        x = torch.zeros(q, self.n, dtype=torch.float64)
        x.scatter_add_(1, self.ids[:q], self.mass[:q].double())
        return x / x.sum(1, keepdim=True)


OURS = {
    "power": dict(method="power", dtype=torch.float32, tol=1e-6),
    "chebyshev": dict(method="chebyshev", dtype=torch.float32, tol=1e-6),
    "chebyshev_f64": dict(method="chebyshev", dtype=torch.float64, tol=1e-10),
    "power_torch": dict(method="power", dtype=torch.float32, tol=1e-6, kernels="off"),
    "chebyshev_torch": dict(method="chebyshev", dtype=torch.float32, tol=1e-6, kernels="off"),
}


def ours(problem: Problem, impl: str, q: int, nodes=None) -> torch.Tensor:
    cfg = OURS[impl]
    if "kernels" in cfg:  # HPENGINE_KERNELS for this call only (hpengine.sparse._dispatch reads it per call)
        saved = os.environ.get("HPENGINE_KERNELS")
        os.environ["HPENGINE_KERNELS"] = cfg["kernels"]
        try:
            return ours(problem, impl.removesuffix("_torch"), q, nodes)
        finally:
            os.environ.pop("HPENGINE_KERNELS") if saved is None else os.environ.update(HPENGINE_KERNELS=saved)
    return personalized_pagerank(problem.graph, (problem.ids_dev[:q], problem.mass_dev[:q].to(cfg["dtype"])),
                                 damping=DAMPING, tol=cfg["tol"], method=cfg["method"], nodes=nodes)


def l1(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double().cpu() - ref).abs().sum(1).mean())


def bench_ours(problem: Problem, impl: str, q: int, h: int, device: str, ref: torch.Tensor, traces=None) -> Record:
    gc.collect()
    passages = slice(problem.v + problem.h, problem.n)
    long = q >= 256
    fn = lambda: ours(problem, impl, q, nodes=passages)  # noqa: E731
    err = l1(ours(problem, impl, ref.shape[0]), ref)
    chunk = ppr_chunk_size(q, num_nodes=problem.n, num_columns=problem.v + problem.p, num_out=problem.p,
                           memory_budget_mb=1024, value_bytes=torch.finfo(OURS[impl]["dtype"]).bits // 8,
                           device_type=torch.device(device).type)
    return measure(fn, bench=BENCH, impl=impl, case={"H": h, "Q": q}, items=q, device=device,
                   warmup=(lambda: ours(problem, impl, 32, nodes=passages)) if long else 1, once=long,
                   min_run_time=1.0, extra={"l1_error": err, "chunk_size": chunk}, trace_dir=traces)


def bench_igraph(problem: Problem, n: int, h: int, ref: torch.Tensor) -> Record:
    import igraph as ig

    graph = ig.Graph(n=problem.n, edges=problem.edges.numpy(), directed=False)
    resets = problem.dense(max(n, ref.shape[0])).numpy()

    def one(i: int):
        return graph.personalized_pagerank(damping=DAMPING, reset=resets[i], directed=False, implementation="prpack")

    err = l1(torch.tensor(np.array([one(i) for i in range(ref.shape[0])])), ref)

    def run():
        for i in range(n):
            one(i)

    return measure(run, bench=BENCH, impl="igraph", case={"H": h}, items=n, warmup=lambda: one(0), once=True,
                   extra={"questions_timed": n, "l1_error": err, "edges": graph.ecount()})


def bench_networkx(problem: Problem, n: int, h: int, ref: torch.Tensor) -> Record:
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(range(problem.n))
    graph.add_edges_from(problem.edges.tolist())
    resets = problem.dense(max(n, ref.shape[0]))
    pers = [{int(k): float(resets[i, k]) for k in torch.nonzero(resets[i]).squeeze(1)} for i in range(len(resets))]

    def one(i: int):
        return nx.pagerank(graph, alpha=DAMPING, personalization=pers[i], tol=1e-10, max_iter=1000)

    first = [one(i) for i in range(ref.shape[0])]
    err = l1(torch.tensor([[r[k] for k in range(problem.n)] for r in first]), ref)

    def run():
        for i in range(n):
            one(i)

    return measure(run, bench=BENCH, impl="networkx", case={"H": h}, items=n, warmup=0, once=True,
                   extra={"questions_timed": n, "l1_error": err})


class TorchPPR:
    """torch-ppr's power iteration on its own normalised adjacency, in ``[N, 64]`` column blocks."""

    def __init__(self, problem: Problem, device: str, eps: float):
        from torch_ppr.utils import prepare_page_rank_adjacency

        self.problem, self.eps = problem, eps
        edge_index = problem.edges.t().contiguous().to(device)  # symmetrised inside
        self.adj = prepare_page_rank_adjacency(edge_index=edge_index, num_nodes=problem.n)
        self.device = device

    def __call__(self, q: int) -> torch.Tensor:
        from torch_ppr.utils import power_iteration

        x0 = self.problem.dense(q).float().t().contiguous().to(self.device)  # [N, q]
        return torch.cat([power_iteration(self.adj, x0[:, s:s + 64].contiguous(), alpha=1 - DAMPING, max_iter=1000,
                                          epsilon=self.eps, device=self.device) for s in range(0, q, 64)], 1).t()


def bench_torch_ppr(runner: TorchPPR, q: int, h: int, device: str, ref: torch.Tensor) -> Record:
    import logging

    logging.getLogger("torch_ppr").setLevel(logging.ERROR)
    err = l1(runner(ref.shape[0]), ref)
    return measure(lambda: runner(q), bench=BENCH, impl="torch_ppr", case={"H": h, "Q": q}, items=q, device=device,
                   warmup=(lambda: runner(1)) if q >= 64 else 1, once=q >= 64, min_run_time=1.0,
                   extra={"l1_error": err, "eps": runner.eps})


def table(records: list[Record]) -> str:
    by: dict = {}
    for r in records:
        by.setdefault(r.case["H"], {}).setdefault(r.impl, []).append(r)
    known = ("power", "power_torch", "chebyshev", "chebyshev_torch", "chebyshev_f64", "torch_ppr")
    impls = [i for i in known if any(i in b for b in by.values())]
    head = ["H", "Q"] + [f"{i} q/s" for i in impls] + ["igraph q/s", "networkx q/s"] + \
        [f"{i} × igraph" for i in impls]
    rows = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for h in sorted(by):
        ig = by[h].get("igraph", [None])[0]
        nx_ = by[h].get("networkx", [None])[0]
        qs = sorted({r.case["Q"] for i in impls for r in by[h].get(i, [])})
        for q in qs:
            cell = {i: next((r for r in by[h].get(i, []) if r.case["Q"] == q), None) for i in impls}
            row = [f"{h:,}", f"{q:,}"]
            row += [f"{cell[i].throughput:,.1f}" if cell[i] else "–" for i in impls]
            row += [f"{ig.throughput:.2f}" if ig else "–", f"{nx_.throughput:.3f}" if nx_ else "–"]
            row += [f"{cell[i].throughput / ig.throughput:,.1f}×" if cell[i] and ig else "–" for i in impls]
            rows.append("| " + " | ".join(row) + " |")
    rows += ["", "| H | impl | L1 to tight | peak MiB (largest Q) |", "|---:|---|---:|---:|"]
    for h in sorted(by):
        for impl, recs in by[h].items():
            big = max(recs, key=lambda r: r.case.get("Q", 0))
            rows.append(f"| {h:,} | {impl} | {big.extra.get('l1_error', float('nan')):.1e} | {big.peak_mib:,.0f} |")
    return "\n".join(rows)


@dataclass
class Config(Common):
    graph: str = opt("power_law", "power_law, zipf or index")
    index: str = opt("", "the index folder of graph=index")
    sizes: tuple[int, ...] = opt((10_000,), "facts H")
    queries: tuple[int, ...] = opt((1, 64), "questions per call Q")
    impls: tuple[str, ...] = opt(tuple(i for i in OURS if "kernels" not in OURS[i]),
                                 f"our implementations among {','.join(OURS)}")
    max_q_at_1m: int = opt(64, "largest Q of our op at H >= 1M (0: no limit)")
    baselines: bool = opt(True, "also time igraph, networkx and torch_ppr")
    baseline_questions: int = opt(8, "igraph questions timed")
    baseline_questions_1m: int = opt(3, "igraph questions timed at H >= 1M")
    networkx_questions: int = opt(2, "networkx questions timed")
    torch_ppr_max_q: int = opt(64, "largest Q of torch_ppr")
    torch_ppr_eps: float = opt(1e-7, "torch_ppr's tolerance")
    accuracy_questions: int = opt(4, "questions whose L1 to a tight solution is reported")


def main(argv=None) -> int:
    args = script_args(Config, __doc__, __file__, argv)
    bad = [i for i in args.impls if i not in OURS]
    if bad or args.graph not in ("power_law", "zipf", "index"):
        print(f"hpengine: error: impls= takes {','.join(OURS)} and graph= power_law, zipf or index", file=sys.stderr)
        return 2
    if args.graph == "index":
        if not args.index:
            print("hpengine: error: graph=index needs index=DIR", file=sys.stderr)
            return 2
        from hpengine.jobs import peek_index_meta

        args.sizes = (int(peek_index_meta(args.index)["num_facts"]),)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device {args.device}", flush=True)
    records: list[Record] = []
    for h in args.sizes:
        big = h >= 1_000_000
        qs = [q for q in args.queries if not (big and args.max_q_at_1m and q > args.max_q_at_1m)]
        problem = Problem(h, max([*args.queries, args.baseline_questions, args.accuracy_questions]), args.device,
                          kind=args.graph, index=args.index)
        ref = personalized_pagerank(problem.graph, (problem.ids_dev[:args.accuracy_questions],
                                                    problem.mass_dev[:args.accuracy_questions].double()),
                                    damping=DAMPING, tol=1e-13, method="chebyshev", max_iter=1000).cpu()
        print(f"H={h:,}: N={problem.n:,} nodes, {problem.edges.shape[0]:,} edges, build {problem.build_seconds:.1f} s",
              flush=True)
        for impl in args.impls:
            for q in qs:
                rec = bench_ours(problem, impl, q, h, args.device, ref, trace_dir(args, __file__))
                records.append(rec)
                print(f"  {impl} Q={q}: {rec.throughput:,.1f} q/s, peak {rec.peak_mib:,.0f} MiB, "
                      f"L1 {rec.extra['l1_error']:.1e}", flush=True)
        if args.baselines:
            n = args.baseline_questions_1m if big else args.baseline_questions
            rec = bench_igraph(problem, n, h, ref)
            records.append(rec)
            print(f"  igraph: {rec.throughput:.2f} q/s, L1 {rec.extra['l1_error']:.1e}", flush=True)
            if not big:
                rec = bench_networkx(problem, args.networkx_questions, h, ref)
                records.append(rec)
                print(f"  networkx: {rec.throughput:.3f} q/s, L1 {rec.extra['l1_error']:.1e}", flush=True)
            try:
                runner = TorchPPR(problem, args.device, args.torch_ppr_eps)
            except ImportError:
                print("  torch_ppr skipped: pip install torch-ppr (the bench extra)", flush=True)
            else:
                for q in [q for q in qs if q <= args.torch_ppr_max_q]:
                    rec = bench_torch_ppr(runner, q, h, args.device, ref)
                    records.append(rec)
                    print(f"  torch_ppr Q={q}: {rec.throughput:,.1f} q/s, L1 {rec.extra['l1_error']:.1e}", flush=True)
                del runner
        del problem
        gc.collect()
    print(table(records))
    report(__file__, args, records, {"damping": DAMPING})
    return 0


if __name__ == "__main__":
    sys.exit(main())
