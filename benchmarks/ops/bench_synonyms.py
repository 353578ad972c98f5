"""Synonym search (docs/methods/index.md#synonyms): tiled torch matmul + topk vs FAISS IndexFlatIP.

Data: V random unit vectors (dim D) with 1% planted near-duplicates (cos ~ 0.99), so the output
is realistic: few pairs above eta. Each (implementation, V) case runs in its own subprocess so
that peak RSS (``ru_maxrss``) belongs to that case alone; "extra MiB" is peak RSS minus the RSS
after the embeddings were created, i.e. the search's own working set. Each case is one timed call
after a small warm-up (a fresh process per case); the rows are harness ``Record`` s, so ``--label``,
``--compare`` and ``--fail-if-regression`` work as for the other op benchmarks.

    python benchmarks/ops/bench_synonyms.py                      # V = 30k, 100k; D = 384
    python benchmarks/ops/bench_synonyms.py --sizes 5000 --label synonyms_cpu   # benchmarks/results/synonyms_cpu.json
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared _harness, _presets

IMPLS = ("torch", "faiss")


def make_embeddings(num: int, dim: int, seed: int = 0):
    """``[num, dim]`` float32 unit vectors, 1% of them noisy copies of others."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    emb = torch.randn(num, dim, generator=gen)
    num_dups = max(1, num // 100)
    perm = torch.randperm(num, generator=gen)
    src, dst = perm[:num_dups], perm[num_dups:2 * num_dups]
    emb[dst] = emb[src] + 0.1 * torch.randn(num_dups, dim, generator=gen)
    return torch.nn.functional.normalize(emb, dim=1)


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run_case(impl: str, num: int, dim: int, block_size: int, threshold: float, k: int, threads: int = 0,
             device: str = "cpu") -> dict:
    """One measurement (called in a fresh subprocess)."""
    import torch

    from hpengine.graph import synonym_pairs

    if threads:
        torch.set_num_threads(threads)
    emb = make_embeddings(num, dim).to(device)
    synonym_pairs(emb[:256], emb[:1024], threshold=threshold, max_per_entity=k, backend=impl)  # warm-up
    base = _rss_mib()
    start = time.perf_counter()
    pairs = synonym_pairs(emb, emb, threshold=threshold, max_per_entity=k, block_size=block_size, backend=impl)
    if emb.is_cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"impl": impl, "V": num, "D": dim, "seconds": seconds, "entities_per_s": num / seconds,
            "peak_rss_mib": peak, "extra_mib": peak - base, "pairs": int(pairs.shape[1]),
            "threads": torch.get_num_threads()}


def _spawn(impl: str, args) -> dict:
    cmd = [sys.executable, __file__, "--worker", impl, "--sizes", str(args.num), "--dim", str(args.dim),
           "--block-size", str(args.block_size), "--threshold", str(args.threshold), "--k", str(args.k),
           "--threads", str(args.threads), "--device", args.device]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def print_table(rows: list[dict]) -> None:
    print(f"{'V':>8} {'impl':>6} {'seconds':>9} {'ent/s':>9} {'peak MiB':>9} {'extra MiB':>10} {'pairs':>7} "
          f"{'time / faiss':>13}")
    faiss_s = {r["V"]: r["seconds"] for r in rows if r["impl"] == "faiss"}
    for r in rows:
        ratio = r["seconds"] / faiss_s[r["V"]] if r["V"] in faiss_s else float("nan")
        print(f"{r['V']:>8} {r['impl']:>6} {r['seconds']:>9.2f} {r['entities_per_s']:>9.0f} "
              f"{r['peak_rss_mib']:>9.0f} {r['extra_mib']:>10.0f} {r['pairs']:>7} {ratio:>13.2f}")


def to_record(row: dict):
    """A worker's row as a harness :class:`~_harness.Record` (items: entities; peak: the search's own MiB)."""
    from _harness import Record

    extra = {k: row[k] for k in ("peak_rss_mib", "pairs", "threads")}
    return Record("synonyms", row["impl"], {"V": row["V"], "D": row["D"]}, row["seconds"], row["V"], 1,
                  row["extra_mib"], extra)


def main(argv=None) -> int:
    from _harness import add_common_args, finish

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[30_000, 100_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--block-size", type=int, default=2048)
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    parser.add_argument("--worker", choices=IMPLS, help=argparse.SUPPRESS)
    add_common_args(parser)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(run_case(args.worker, args.sizes[0], args.dim, args.block_size, args.threshold, args.k,
                                  args.threads, args.device)))
        return 0
    rows = []
    for num in args.sizes:
        args.num = num
        for impl in args.impls:
            rows.append(_spawn(impl, args))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print_table(rows)
    return finish(args, [to_record(r) for r in rows])


if __name__ == "__main__":
    sys.exit(main())
