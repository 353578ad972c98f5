"""The two smallest build stages against corpus size: structure and the shard merge (issue 31 §4).

    python -m benchmarks e2e bench_structure --indexes /work/scale/index_10000 /work/scale/index_30000 \
        /work/scale/index_100000 --threads 1 --label structure_cpu

Structure: for each index (``bench_scale.py --keep-indexes`` writes them), the build's structure
step on the loaded index (``expand_with_synonyms``, ``HyperGraph.from_incidence(coalesced=True)``
and ``transition()``), best of ``--repeat`` runs in one process, beside the growth of its input
(the incidences after synonym expansion, nnz); and the structure ``Index.graph`` builds, the
expansion kept as factors (``HyperGraph.from_incidence(..., synonyms=...)`` and ``transition()``),
beside its input (the factors' entries: extracted incidences, synonym relation with its diagonal,
excess), forced with ``factored=True``; and what ``Index.graph`` builds by size (factors when
they are at most ``FACTORED_MAX_RATIO`` of the expansion, else the expansion materialised from
them; ``index_graph`` says which). Side by side, on the same keys: the key sort it runs
on, ``hpengine.sparse.sort_keys`` (NumPy's sort on CPU) against ``torch.sort`` (the sort before).

Warm and cold: the best of ``--repeat`` in one process is the cost of a repeated structure (a
process that rebuilds ``Index.graph`` after changes): its temporaries reuse the heap the first run
left, and below about 100k passages they all fit in what glibc keeps (its trim threshold grows
with the largest block freed, to 64 MiB), above it they are returned and faulted in again. A build
or a reader runs the stage once, in a process whose heap has not held it: ``by_size_cold_s`` is
the median over ``--cold`` fresh processes of ``Index.graph.transition()`` timed once after the
load (its tensors read first), with the process's CPU seconds and minor page faults of that call.

Merge: the streaming build's last step copies every shard's fact and passage embedding rows into
the index (``ShardFolder.read_tensors`` + ``gather_rows``). For N passages it writes N / 20,000
shards (the build's default shard size) of random bfloat16 rows in the 100k corpus's proportions
(3.86 facts per passage, 384 dims; the copy does not depend on the values) and times the merge with
the shards mapped (what the build does) and read into memory first (the read before), best of
``--repeat``, warm page cache. Prints a table with each row's exponent between the first and the
last size, log(t2 / t1) / log(n2 / n1).
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


from benchmarks._harness import Record, add_common_args, finish  # noqa: E402

SHARD_SIZE = 20_000
FACTS_PER_PASSAGE = 3.86
DIM = 384


def _best(fn, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def structure_row(path: str, repeat: int) -> dict:
    """Seconds of the structure step on the index at ``path`` and of its key sorts."""
    from hpengine.graph import HyperGraph, Index, expand_with_synonyms
    from hpengine.sparse import sort_keys

    index = Index.load(path)

    def step():
        expanded = expand_with_synonyms(index.fact_entity_raw, index.synonyms, index.num_facts, index.num_entities)
        graph = HyperGraph.from_incidence(expanded, index.fact_passage, index.num_entities, index.num_passages,
                                          coalesced=True)
        graph.transition()
        return graph

    def factored(keep=True):
        graph = HyperGraph.from_incidence(index.fact_entity_raw, index.fact_passage, index.num_entities,
                                          index.num_passages, synonyms=index.synonyms, factored=keep)
        graph.transition()
        return graph

    graph = step()
    keys = graph.fact_entity[1] * index.num_facts + graph.fact_entity[0]  # the transpose's keys
    keys = keys[torch.randperm(keys.numel(), generator=torch.Generator().manual_seed(0))]
    b = factored().transition().b
    by_size = factored(None).transition().factored
    return {"passages": index.num_passages, "nnz": graph.nnz, "index_graph": "factored" if by_size else "materialised",
            "factor_entries": b.outer._nnz() + b.inner._nnz() + b.minus._nnz(),
            "structure_s": _best(step, repeat), "factored_s": _best(factored, repeat),
            "by_size_s": _best(lambda: factored(None), repeat),
            "sort_keys_s": _best(lambda: sort_keys(keys), repeat),
            "torch_sort_s": _best(lambda: torch.sort(keys), repeat)}


def cold_call(path: str) -> dict:
    """One ``Index.graph.transition()`` in this process, right after the load: seconds, CPU seconds
    and minor page faults of the call."""
    from hpengine.graph import Index

    index = Index.load(path)
    for t in (index.fact_entity_raw, index.fact_passage, index.synonyms):
        t.sum()  # read once: the call times the structure, not the first read of the files
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    index.graph.transition()
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    return {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "sys_s": after.ru_stime - before.ru_stime, "minor_faults": after.ru_minflt - before.ru_minflt}


def cold_row(path: str, runs: int, threads: int | None) -> dict:
    """Medians of :func:`cold_call` over ``runs`` fresh processes."""
    calls = []
    for _ in range(runs):
        cmd = [sys.executable, __file__, "--cold-call", path] + (["--threads", str(threads)] if threads else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        calls.append(json.loads(out.strip().splitlines()[-1]))
    median = lambda key: statistics.median(c[key] for c in calls)  # noqa: E731
    return {"by_size_cold_s": median("wall_s"), "by_size_cold_cpu_s": median("cpu_s"),
            "by_size_cold_sys_s": median("sys_s"), "by_size_cold_faults": int(median("minor_faults"))}


def merge_row(passages: int, repeat: int, folder: Path) -> dict:
    """Seconds of the shard merge of ``passages`` passages, shards mapped and shards read."""
    from hpengine.graph import gather_rows, map_safetensors, read_safetensors, write_safetensors

    gen = torch.Generator().manual_seed(passages)
    paths, facts = [], 0
    for k, lo in enumerate(range(0, passages, SHARD_SIZE)):
        rows = min(passages, lo + SHARD_SIZE) - lo
        fact_rows = round(rows * FACTS_PER_PASSAGE)
        path = folder / f"shard_{passages}_{k}.safetensors"
        write_safetensors({"fact_emb": torch.randn(fact_rows, DIM, generator=gen).bfloat16(),
                           "passage_emb": torch.randn(rows, DIM, generator=gen).bfloat16()}, path)
        paths.append(path)
        facts += fact_rows
    totals = {"fact_emb": facts, "passage_emb": passages}
    out = {"passages": passages, "shards": len(paths)}
    for name, reader in (("mapped", map_safetensors), ("read", read_safetensors)):
        out[f"merge_{name}_s"] = _best(lambda: gather_rows((reader(p) for p in paths), totals, "cpu"), repeat)
    return out


def _exponent(rows: list, key: str, by: str = "passages") -> float:
    a, b = rows[0], rows[-1]
    return math.log(b[key] / a[key]) / math.log(b[by] / a[by])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--indexes", nargs="+", help="built indexes, smallest first")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cold", type=int, default=5, help="fresh processes per index for the cold structure")
    parser.add_argument("--cold-call", help=argparse.SUPPRESS)  # a child: time one structure and print it
    add_common_args(parser)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cold_call:
        print(json.dumps(cold_call(args.cold_call)))
        return 0
    if not args.indexes:
        parser.error("--indexes is required")
    rows = []
    with tempfile.TemporaryDirectory(prefix="hpengine_merge_") as tmp:
        for path in args.indexes:
            row = structure_row(path, args.repeat)
            row.update(cold_row(path, args.cold, args.threads))
            row.update(merge_row(row["passages"], args.repeat, Path(tmp)))
            rows.append(row)
            print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    cols = ["structure_s", "factored_s", "by_size_s", "by_size_cold_s", "by_size_cold_cpu_s", "sort_keys_s", "torch_sort_s", "merge_mapped_s", "merge_read_s"]
    print("\n| N | nnz | factor entries | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 3) + "|")
    for r in rows:
        print(f"| {r['passages']:,} | {r['nnz']:,} | {r['factor_entries']:,} | "
              + " | ".join(f"{r[c]:.3f}" for c in cols) + " |")
    if len(rows) > 1:
        print("| exponent in N | " + f"{_exponent(rows, 'nnz'):.2f} | {_exponent(rows, 'factor_entries'):.2f} | "
              + " | ".join(f"{_exponent(rows, c):.2f}" for c in cols) + " |")
        print("| exponent in its input | | | " + f"{_exponent(rows, 'structure_s', 'nnz'):.2f} | "
              + f"{_exponent(rows, 'factored_s', 'factor_entries'):.2f} | "
              + " | | | " + " | ".join(f"{_exponent(rows, c, 'nnz'):.2f}" for c in cols[5:7]) + " | | |")
    impls = ("structure", "factored", "by_size", "by_size_cold", "sort_keys", "torch_sort", "merge_mapped", "merge_read")
    records = [Record(bench="structure", impl=impl, case={"passages": r["passages"], "nnz": r["nnz"]},
                      seconds=r[f"{impl}_s"], items=r["passages"] if impl.startswith("merge") else r["nnz"],
                      runs=args.repeat, peak_mib=float("nan"))
               for r in rows for impl in impls]
    return finish(args, records, {"rows": rows, "threads": args.threads})


if __name__ == "__main__":
    sys.exit(main())
