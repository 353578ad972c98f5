"""The batched HyperProve hop (hpengine.retrieval.hyperprove_hop) against per-question baselines.

Graphs: ``power_law_hypergraph(H)`` (power-law entity degrees, passages of ~6 facts, ~3.6
incidences per fact). Embeddings: random unit vectors (``dim=``, default 384 like MiniLM);
each query is a noisy copy of a random fact; every question carries a frontier of 5 random facts
(a second hop, so the struct term and the frontier restart mass are exercised).

Implementations (same parameters, ``RetrievalConfig()`` defaults: S=8, M=600, 3 steps, c=0.3, L=2):

* ``batched``: ``hyperprove_hop`` on all Q questions (exact dense seeds); its local blocks, BFS and
  walk take the compiled CPU kernels where they build (``kernels/README.md``).
* ``batched_torch`` (``torch_path=true``): the same with ``HPENGINE_KERNELS=off`` (the PyTorch path),
  so one run gives the kernels' ratio.
* ``reference``: ``hpengine.testing.reference.reference_hop`` per question (numpy walk on an
  explicit scipy ``T_s``, Python sets and networkx on the local block), timed on
  ``baseline_questions=`` questions; skipped where the explicit ``T_s`` (``sum_c d_c^2``
  entries) would exceed ``reference_max_nnz=``.
* ``igraph_ppr``: what HippoRAG runs per query: igraph ``personalized_pagerank`` (PRPACK,
  damping ``1 - restart``) on the fact-entity-passage graph with the same restart vector, then the
  top-M facts; timed on ``baseline_questions=`` questions (fewer at H >= 1M: ``igraph_questions_1m=``).

Per-question methods do not get faster with Q, so they are timed once per H and shown beside each
Q. The default is the suite's quick size; the full grid takes about 13 minutes on 2 cores
(``max_q_at_1m=0`` adds H=1M, Q=4096)::

    python -m benchmarks ops bench_hop threads=1 sizes=10000,100000,1000000 queries=1,64,1024,4096
    python -m benchmarks ops bench_hop sizes=100000 queries=1024 profile=true   # traces + stage table
    python -m benchmarks ops bench_hop memory_check=true                        # H=100k, Q=10,000 peak RSS
"""
from __future__ import annotations

import gc
import os
import resource
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch

from benchmarks._harness import Common, PeakMemory, Record, measure, opt, report, script_args, time_once, trace_dir
from hpengine.config import RetrievalConfig
from hpengine.graph import HyperGraph
from hpengine.retrieval import DenseIndex, hyperprove_hop, plan_hop
from hpengine.retrieval import HOP_BUDGET_MB, resolve_memory_budget_mb
from hpengine.testing._graphs import power_law_hypergraph

BENCH = "hop"
FRONTIER = 5


class Problem:
    """Graph, embeddings, queries and frontier for one H."""

    def __init__(self, num_facts: int, max_q: int, dim: int, device: str, seed: int = 0):
        t0 = time.perf_counter()
        fe, fp, v, p = power_law_hypergraph(num_facts, seed=seed)
        self.raw = (fe, fp, v, p)
        self.graph = HyperGraph.from_incidence(fe.to(device), fp.to(device), v, p)
        gen = torch.Generator().manual_seed(seed + 1)
        facts = torch.randn(num_facts, dim, generator=gen)
        self.facts = torch.nn.functional.normalize(facts, dim=1).to(device)
        anchors = torch.randint(0, num_facts, (max_q,), generator=gen)
        noise = 0.05 * torch.randn(max_q, dim, generator=gen)
        queries = facts[anchors] / facts[anchors].norm(dim=1, keepdim=True) + noise
        self.queries = queries.to(device)
        self.frontier = torch.randint(0, num_facts, (max_q, FRONTIER), generator=gen).to(device)
        self.graph.transition()  # build (and cache) the operator outside the timings
        self.index = DenseIndex(self.facts)
        self.workspace: dict = {}  # kept across calls, as a pipeline keeps it across hops
        self.build_seconds = time.perf_counter() - t0

    def hop(self, q: int, cfg: RetrievalConfig):
        return hyperprove_hop(self.graph, self.facts, self.queries[:q], self.frontier[:q], index=self.index, cfg=cfg,
                              workspace=self.workspace)


def sum_squared_degrees(problem: Problem) -> int:
    g = problem.graph
    return int((g.entity_degree(torch.float64) ** 2).sum() + (g.passage_degree(torch.float64) ** 2).sum())


def bench_reference(problem: Problem, cfg: RetrievalConfig, n: int, h: int) -> Record:
    from hpengine.testing.reference import reference_hop, scipy_transition

    t = scipy_transition(*problem.raw)
    facts = problem.facts.cpu().numpy()
    queries = problem.queries[:n].cpu().numpy()
    frontier = problem.frontier[:n].cpu().tolist()
    params = dict(num_seeds=cfg.num_seeds, subgraph_size=cfg.subgraph_size, walk_steps=cfg.walk_steps,
                  restart=cfg.restart, frontier_weight=cfg.frontier_weight, seed_weighting=cfg.seed_weighting,
                  theta=cfg.theta, bfs_depth=cfg.bfs_depth, struct_depth=cfg.struct_depth, alpha=cfg.alpha,
                  top_k=cfg.top_k)

    def run():
        for i in range(n):
            reference_hop(t, facts, queries[i], frontier[i], **params)

    rec = measure(run, bench=BENCH, impl="reference", case={"H": h}, items=n, warmup=lambda: reference_hop(
        t, facts, queries[0], frontier[0], **params), once=True, extra={"questions_timed": n, "t_nnz": int(t.nnz)})
    del t
    return rec


def bench_igraph(problem: Problem, cfg: RetrievalConfig, n: int, h: int) -> Record:
    """HippoRAG's per-query step: igraph PPR over facts + entities + passages, then top-M facts."""
    import igraph as ig

    from hpengine.testing.reference import reference_cosine

    fe, fp, v, p = problem.raw
    fe = torch.unique(fe[0] * v + fe[1])
    edges = torch.cat([torch.stack([fe // v, h + fe % v], 1),
                       torch.stack([torch.arange(h), h + v + fp], 1)]).numpy()
    graph = ig.Graph(n=h + v + p, edges=edges, directed=False)
    facts = problem.facts.cpu().numpy()
    queries = problem.queries[:n].cpu().numpy()
    frontier = problem.frontier[:n].cpu().numpy()
    m = cfg.subgraph_size

    def one(i: int):
        cos = reference_cosine(queries[i], facts)
        seeds = np.argpartition(-cos, cfg.num_seeds)[: cfg.num_seeds]
        reset = np.zeros(graph.vcount())
        w = np.maximum(cos[seeds], 0)
        reset[seeds] += w / w.sum() if w.sum() > 0 else 1.0 / len(seeds)
        reset[frontier[i]] += cfg.frontier_weight / len(frontier[i])
        ppr = graph.personalized_pagerank(damping=1 - cfg.restart, reset=reset, directed=False,
                                          implementation="prpack")
        mass = np.asarray(ppr[:h])
        return np.argpartition(-mass, m)[:m]

    def run():
        for i in range(n):
            one(i)

    return measure(run, bench=BENCH, impl="igraph_ppr", case={"H": h}, items=n, warmup=lambda: one(0), once=True,
                   extra={"questions_timed": n, "nodes": graph.vcount(), "edges": graph.ecount()})


def bench_batched(problem: Problem, cfg: RetrievalConfig, q: int, h: int, device: str, traces=None,
                  impl: str = "batched") -> Record:
    problem.workspace.clear()  # each cell's peak memory includes its own buffers
    gc.collect()
    op = problem.graph.transition()
    plan = plan_hop(q, num_facts=h, num_columns=op.num_columns, subgraph_size=cfg.subgraph_size,
                    dim=problem.facts.shape[1], mean_row_nnz=op.nnz / h,
                    memory_budget_mb=resolve_memory_budget_mb(cfg.memory_budget_mb, device, HOP_BUDGET_MB),
                    query_chunk_size=cfg.query_chunk_size, device_type=torch.device(device).type)
    long = q >= 512
    return measure(lambda: problem.hop(q, cfg), bench=BENCH, impl=impl, case={"H": h, "Q": q}, items=q,
                   device=device, warmup=(lambda: problem.hop(min(q, 64), cfg)) if long else 1, once=long,
                   min_run_time=1.0, extra={"chunk_size": plan.chunk_size}, trace_dir=traces)


def profile(problem: Problem, cfg: RetrievalConfig, q: int) -> str:
    from torch.profiler import ProfilerActivity, profile as torch_profile

    problem.hop(min(q, 64), cfg)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if problem.facts.is_cuda else [])
    with torch_profile(activities=activities) as prof:
        problem.hop(q, cfg)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    stages = sorted((e for e in events if e.key.startswith("hop.")), key=lambda e: -e.cpu_time_total)
    lines = ["stage | CPU ms | share", "---|---:|---:"]
    lines += [f"{e.key} | {e.cpu_time_total / 1e3:.0f} | {e.cpu_time_total / total:.0%}" for e in stages]
    lines += ["", "op (self time) | calls | CPU ms | share", "---|---:|---:|---:"]
    ops = sorted((e for e in events if not e.key.startswith("hop.")), key=lambda e: -e.self_cpu_time_total)[:15]
    lines += [f"{e.key} | {e.count} | {e.self_cpu_time_total / 1e3:.0f} | {e.self_cpu_time_total / total:.0%}"
              for e in ops]
    return "\n".join(lines)


def table(records: list[Record]) -> str:
    by = {}
    for r in records:
        by.setdefault(r.case["H"], {}).setdefault(r.impl, []).append(r)
    rows = ["| H | Q | chunk Qc | batched q-hops/s | ms / q | peak MiB | reference q/s | igraph PPR q/s "
            "| × reference | × igraph |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for h in sorted(by):
        ref = by[h].get("reference", [None])[0]
        ppr = by[h].get("igraph_ppr", [None])[0]
        for r in sorted(by[h].get("batched", []), key=lambda r: r.case["Q"]):
            cells = [f"{h:,}", f"{r.case['Q']:,}", str(r.extra.get("chunk_size", "")), f"{r.throughput:,.1f}",
                     f"{1e3 / r.throughput:.2f}", f"{r.peak_mib:,.0f}",
                     f"{ref.throughput:.2f}" if ref else "skipped", f"{ppr.throughput:.2f}" if ppr else "skipped",
                     f"{r.throughput / ref.throughput:,.0f}×" if ref else "–",
                     f"{r.throughput / ppr.throughput:,.0f}×" if ppr else "–"]
            rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


@dataclass
class Config(Common):
    sizes: tuple[int, ...] = opt((10_000,), "facts H")
    queries: tuple[int, ...] = opt((1, 64), "questions per call Q")
    dim: int = opt(384, "embedding width D")
    baseline_questions: int = opt(16, "questions the per-question baselines are timed on")
    igraph_questions_1m: int = opt(4, "igraph questions timed at H >= 1M")
    reference_max_nnz: int = opt(60_000_000, "skip the reference where its explicit T_s exceeds this")
    max_q_at_1m: int = opt(1024, "largest Q timed at H >= 1M (Q=4096 adds ~3 minutes on 2 cores; 0: no limit)")
    memory_budget_mb: int = opt(0, "retrieval.memory_budget_mb of the batched hop (0: the default, by device)")
    baselines: bool = opt(True, "also time the reference and igraph PPR")
    memory_check: bool = opt(False, "only: H=100k, Q=10,000, report peak RSS")
    torch_path: bool = opt(False, "also time batched_torch: the hop with HPENGINE_KERNELS=off (the kernels' ratio)")


def main(argv=None) -> int:
    args = script_args(Config, __doc__, __file__, argv)
    cfg = RetrievalConfig(memory_budget_mb=args.memory_budget_mb)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, device {args.device}", flush=True)

    if args.memory_check:
        problem = Problem(100_000, 10_000, args.dim, args.device)
        problem.hop(64, cfg)
        gc.collect()
        found = {}
        with PeakMemory(args.device) as mem:
            seconds = time_once(lambda: found.setdefault("out", problem.hop(10_000, cfg)), args.device)
        out = found["out"]
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        selected = (out.fact_ids >= 0).float().mean()
        print(f"H=100,000 Q=10,000: {seconds:.1f} s ({10_000 / seconds:.0f} q-hops/s), peak working set "
              f"{mem.peak / 2**20:,.0f} MiB, process peak RSS {rss:,.0f} MiB, selected {selected:.2%}")
        rec = Record(BENCH, "batched", {"H": 100_000, "Q": 10_000}, seconds, 10_000, 1, mem.peak / 2**20,
                     {"process_peak_rss_mib": rss})
        report(__file__, args, [rec])
        return 0

    records: list[Record] = []
    for h in args.sizes:
        qs = [q for q in args.queries if not (h >= 1_000_000 and args.max_q_at_1m and q > args.max_q_at_1m)]
        problem = Problem(h, max([*args.queries, args.baseline_questions]), args.dim, args.device)
        print(f"H={h:,}: graph + embeddings {problem.build_seconds:.1f} s, nnz={problem.graph.nnz:,}", flush=True)
        for q in qs:
            rec = bench_batched(problem, cfg, q, h, args.device, trace_dir(args, __file__))
            records.append(rec)
            print(f"  batched Q={q}: {rec.throughput:,.1f} q-hops/s, peak {rec.peak_mib:,.0f} MiB", flush=True)
            if args.torch_path:  # hpengine.sparse._dispatch reads HPENGINE_KERNELS per call
                saved = os.environ.get("HPENGINE_KERNELS")
                os.environ["HPENGINE_KERNELS"] = "off"
                try:
                    base = bench_batched(problem, cfg, q, h, args.device, impl="batched_torch")
                finally:
                    os.environ.pop("HPENGINE_KERNELS") if saved is None else os.environ.update(HPENGINE_KERNELS=saved)
                records.append(base)
                print(f"  batched_torch Q={q}: {base.throughput:,.1f} q-hops/s "
                      f"(kernels {rec.throughput / base.throughput:.2f}x)", flush=True)
        if args.profile:
            print(profile(problem, cfg, max(qs)), flush=True)
        if args.baselines:
            n_ref = args.baseline_questions
            if sum_squared_degrees(problem) <= args.reference_max_nnz:
                rec = bench_reference(problem, cfg, n_ref, h)
                records.append(rec)
                print(f"  reference: {rec.throughput:.2f} q/s", flush=True)
            else:
                print(f"  reference skipped: explicit T_s would hold {sum_squared_degrees(problem):,} entries",
                      flush=True)
            n_ppr = args.igraph_questions_1m if h >= 1_000_000 else args.baseline_questions
            rec = bench_igraph(problem, cfg, n_ppr, h)
            records.append(rec)
            print(f"  igraph PPR: {rec.throughput:.2f} q/s", flush=True)
        del problem
        gc.collect()
    print(table(records))
    report(__file__, args, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
