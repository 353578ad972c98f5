"""Scaling benchmark (issue 31 §4): index build and query time against corpus size, on amplified
real corpora (``amplify_corpus.py``: the 19,342 distinct passages of the three dev corpora, then
renamed copies).

    python -m benchmarks e2e bench_scale --label scale_cpu             # 10k, 30k, 100k: the whole table
    nice -n 10 python -m benchmarks e2e bench_scale --sizes 3000 10000 30000 --threads 1 \
        --encoder-dtype float32 --work-dir /tmp/hpengine_scale --keep-indexes --label scale_cpu_t1
    python -m benchmarks e2e bench_scale --sizes 3000 10000 --keep-indexes     # then, adding a size:
    python -m benchmarks e2e bench_scale --sizes 3000 10000 30000 --keep-indexes --reuse

For each size N:

1. ``amplify_corpus.amplify`` writes ``WORK/corpus_N.json`` (seed ``--seed``).
2. One process builds the index with ``bench_index.py``'s own ``main`` (fast extractor, MiniLM in
   ``--encoder-dtype``, default auto as bench_index's; ``--device``): the report's seconds per
   stage (extract, embed, synonyms, structure) plus ``save`` (``Index.save`` timed around
   bench_index's call), the process's peak RSS, wall and CPU seconds.
3. Another process loads it (encoder and index, timed apart) and answers a deterministic mix of
   ``--questions`` dev questions (default 1,024: the 1,169 questions of the three dev sets shuffled
   with the seed) with each of ``--methods`` (default dense, hyperprove, ppr) without an LLM, after
   a warm-up of 16 questions: seconds and questions/s each (``hpengine.jobs.evaluate``'s answering
   wall time, batches of 256), the same less the question-encoding stage (a cost that does not
   depend on N), CPU seconds, and Recall@5 over the questions whose gold passages are all in the
   index (below N = 19,342 only part of the originals are). The query encoder runs in
   ``--encoder-dtype`` too (the dtype is a run-time field of the index's encoder, not recorded
   with the index).

It prints a markdown table with each row's growth exponent between successive sizes,
log(t2 / t1) / log(n2 / n1) (1 = linear; q/s rows: read the seconds' exponent), and the 1-minute
load average at the start and end of each child: other jobs on the CPU change wall times, and CPU
seconds less so. With ``--label NAME`` it saves ``benchmarks/results/NAME.json`` through the
harness (one record per stage / method and size; ``--compare`` works on them). Every child's report
is kept as ``WORK/build_N.json`` and ``WORK/query_N.json`` (logs ``*.log``). Sizes run one after
another. On a CPU that other jobs share, run it under ``nice`` with ``--threads 1`` (two processes
spinning 2 OpenMP threads each on 2 cores slow each other several-fold). ``--encoder-dtype auto``
takes float32 on CPUs without native bfloat16: on the 2-core AVX2 dev box bfloat16 MiniLM encoded
5.8x slower than float32.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

from benchmarks._harness import Record, add_common_args, finish, write_json  # noqa: E402

DATASETS = ("2wikimultihopqa", "hotpotqa", "musique")
STAGES = ("extract", "embed", "merge", "synonyms", "structure", "save")
WARMUP_QUESTIONS = 16


def _load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- child processes


def child_build(args) -> None:
    """One index build through bench_index.py's main; writes its report plus save seconds."""
    import hpengine.jobs
    from hpengine.graph import Index

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    captured, saved = {}, {}
    run_index, save = hpengine.jobs.run_index, Index.save

    def timed_save(self, *a, **kw):
        start = time.perf_counter()
        try:
            return save(self, *a, **kw)
        finally:
            saved["seconds"] = saved.get("seconds", 0.0) + time.perf_counter() - start

    def capture(*a, **kw):
        index, report = run_index(*a, **kw)
        captured.update(report)
        return index, report

    bench_index = _load_module("bench_index", HERE / "bench_index.py")
    hpengine.jobs.run_index, Index.save = capture, timed_save  # bench_index imports run_index when main runs
    sys.argv = ["bench_index.py", "--corpus", args.corpus, "--out", args.index, "--device", args.device,
                "--encoder-dtype", args.encoder_dtype]
    load_start = list(os.getloadavg())
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        bench_index.main()
    finally:
        hpengine.jobs.run_index, Index.save = run_index, save
    wall = time.perf_counter() - start
    report = {k: v for k, v in captured.items() if k != "corpus_report"}
    report["seconds"]["save"] = round(saved.get("seconds", 0.0), 3)
    report["wall_seconds"] = round(wall, 3)
    report["max_rss_mib"] = round(_max_rss_mib(), 1)  # the whole process, the save included
    report["cpu_seconds"] = round(time.process_time() - cpu_start, 3)  # less sensitive to other jobs than wall
    report["loadavg_start_end"] = [load_start, list(os.getloadavg())]  # other jobs on the CPU skew the times
    write_json(report, args.child_out, default=str)


def question_mix(data_dir: str | Path, count: int, seed: int) -> list:
    """``count`` dev questions of the three datasets: all of them shuffled with ``seed``, cycled when
    ``count`` is larger (deterministic)."""
    import numpy as np

    from hpengine.eval import load_questions

    pool = [q for d in DATASETS for q in load_questions(str(Path(data_dir) / d / "dev.json"))]
    order = np.random.default_rng(seed).permutation(len(pool))
    return [pool[int(order[i % len(pool)])] for i in range(count)]


def child_query(args) -> None:
    """Load the index and answer the question mix with each method; writes the report."""
    import torch

    from hpengine.config import EncoderConfig, EvalConfig, RetrievalConfig
    from hpengine.graph import Index
    from hpengine.jobs import evaluate
    from hpengine.jobs import peek_index_meta
    from hpengine.models import encoder_for_index
    from hpengine.pipeline import Engine, get_retriever

    if args.threads:
        torch.set_num_threads(args.threads)
    questions = question_mix(args.data_dir, args.questions, args.seed)
    load_start = list(os.getloadavg())
    start = time.perf_counter()
    meta = peek_index_meta(args.index)
    # dtype is a run-time field of the index's encoder, not recorded with the index: this run's setting
    encoder = encoder_for_index(meta, EncoderConfig(name_or_path="", device=args.device, dtype=args.encoder_dtype))
    encoder_s = time.perf_counter() - start
    start = time.perf_counter()
    index = Index.load(args.index, device=args.device, expected_encoder=encoder.name)
    index_s = time.perf_counter() - start
    report = {"load_encoder_seconds": round(encoder_s, 3), "load_index_seconds": round(index_s, 3),
              "questions": len(questions), "encoder_dtype": args.encoder_dtype, "methods": {}}
    for method in args.methods:
        config = get_retriever(method).config_class()
        engine = Engine(index, encoder, RetrievalConfig(), config)
        start = time.perf_counter()
        evaluate(engine, questions[:WARMUP_QUESTIONS], EvalConfig(batch_size=args.batch_size), progress=False)
        warm = time.perf_counter() - start
        engine.timer.seconds.clear()  # the timed run's stage seconds only
        cpu_start = time.process_time()
        res = evaluate(engine, questions, EvalConfig(batch_size=args.batch_size), progress=False)
        cpu = time.process_time() - cpu_start  # includes evaluate's scoring after the answering wall time
        full = [r for r in res["records"] if r["gold_ranks"] and r["gold_in_index"] == len(r["gold_ranks"])]
        report["methods"][method] = {
            "seconds": res["wall_seconds"], "questions_per_second": res["questions_per_second"],
            "cpu_seconds": round(cpu, 3),
            "warmup_seconds": round(warm, 3), "stage_seconds": res["seconds"],
            "recall@5": res["recall@5"], "questions_gold_in_index": len(full),
            "recall@5_gold_in_index": round(sum(r["recall@5"] for r in full) / len(full), 4) if full else None,
        }
        print(f"  {method:10} {res['wall_seconds']:8.2f} s  {res['questions_per_second']:8.1f} q/s", flush=True)
    report["max_rss_mib"] = round(_max_rss_mib(), 1)
    report["loadavg_start_end"] = [load_start, list(os.getloadavg())]
    write_json(report, args.child_out)


# ---------------------------------------------------------------- driver


def exponent(n1: int, t1: float | None, n2: int, t2: float | None) -> float | None:
    """Growth exponent log(t2 / t1) / log(n2 / n1); None when a time is missing or not positive."""
    if not t1 or not t2 or t1 <= 0 or t2 <= 0 or n1 == n2:
        return None
    return math.log(t2 / t1) / math.log(n2 / n1)


def _without_encode(result: dict | None) -> float | None:
    """A method's answering seconds less its question-encoding stage (the same work at every N)."""
    if not result:
        return None
    return max(result["seconds"] - result["stage_seconds"].get("encode", 0.0), 0.0)


def rows_of(builds: dict, queries: dict, methods: list) -> list[tuple[str, dict]]:
    """``(row name, {size: value})`` for the table; value None where not measured."""
    sizes = sorted(builds)

    def method(n, m):
        return queries.get(n, {}).get("methods", {}).get(m)

    rows = [(f"{s} s", {n: builds[n]["seconds"].get(s) for n in sizes}) for s in STAGES]
    rows.append(("build wall s", {n: builds[n]["wall_seconds"] for n in sizes}))
    rows.append(("build CPU s", {n: builds[n].get("cpu_seconds") for n in sizes}))
    rows.append(("build peak RSS MiB", {n: builds[n]["max_rss_mib"] for n in sizes}))
    for key in ("facts", "entities", "synonym_pairs", "nnz"):
        rows.append((key, {n: builds[n].get(key) for n in sizes}))
    rows.append(("load index s", {n: queries.get(n, {}).get("load_index_seconds") for n in sizes}))
    rows.append(("load encoder s", {n: queries.get(n, {}).get("load_encoder_seconds") for n in sizes}))
    for m in methods:
        rows.append((f"{m} s / Q", {n: (method(n, m) or {}).get("seconds") for n in sizes}))
        rows.append((f"{m} s / Q without query encoding", {n: _without_encode(method(n, m)) for n in sizes}))
        rows.append((f"{m} CPU s / Q", {n: (method(n, m) or {}).get("cpu_seconds") for n in sizes}))
        rows.append((f"{m} q/s", {n: (method(n, m) or {}).get("questions_per_second") for n in sizes}))
        rows.append((f"{m} R@5 (gold in index)", {n: (method(n, m) or {}).get("recall@5_gold_in_index")
                                                  for n in sizes}))
    rows.append(("query peak RSS MiB", {n: queries.get(n, {}).get("max_rss_mib") for n in sizes}))
    for name, reports in (("build", builds), ("query", queries)):  # the 1-minute load average, start → end
        rows.append((f"load avg, {name}", {n: _load(reports.get(n)) for n in sizes}))
    return rows


def _load(report: dict | None) -> str | None:
    if not report or "loadavg_start_end" not in report:
        return None
    start, end = report["loadavg_start_end"]
    return f"{start[0]:.1f} → {end[0]:.1f}"


def format_table(builds: dict, queries: dict, methods: list, questions: int) -> str:
    sizes = sorted(builds)
    head = "| row | " + " | ".join(f"N = {n:,}" for n in sizes)
    head += "".join(f" | exp {a / 1000:g}k→{b / 1000:g}k" for a, b in zip(sizes, sizes[1:])) + " |"
    lines = [head, "|---" * (1 + len(sizes) + max(0, len(sizes) - 1)) + "|"]
    for name, values in rows_of(builds, queries, methods):
        cells = []
        for n in sizes:
            v = values.get(n)
            cells.append("–" if v is None else v if isinstance(v, str) else f"{v:,}" if isinstance(v, int)
                         else f"{v:,.2f}")
        exps = []
        for a, b in zip(sizes, sizes[1:]):
            if name.endswith("q/s") or "R@5" in name or name.startswith("load avg"):  # q/s: see the seconds
                exps.append("")
                continue
            e = exponent(a, values.get(a), b, values.get(b))
            exps.append("–" if e is None else f"{e:.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + "".join(f" | {e}" for e in exps) + " |")
    lines.append(f"\n(Q = {questions} questions per method; exponents log(t2/t1)/log(n2/n1), 1 = linear)")
    return "\n".join(lines)


def records_of(builds: dict, queries: dict, methods: list) -> list[Record]:
    out = []
    for n, b in sorted(builds.items()):
        counts = {k: b.get(k) for k in ("facts", "entities", "synonym_pairs", "nnz")}
        for s in STAGES:
            if b["seconds"].get(s) is not None:
                out.append(Record("scale", f"build:{s}", {"passages": n}, b["seconds"][s], n, 1, b["max_rss_mib"],
                                  counts))
        q = queries.get(n)
        if q:
            out.append(Record("scale", "load:index", {"passages": n}, q["load_index_seconds"], n, 1, q["max_rss_mib"]))
            for m in methods:
                r = q["methods"].get(m)
                if r:
                    out.append(Record("scale", f"query:{m}", {"passages": n}, r["seconds"], q["questions"], 1,
                                      q["max_rss_mib"], {k: v for k, v in r.items() if k != "seconds"}))
    return out


def _child(argv: list[str], log: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    with open(log, "w") as f:
        rc = subprocess.run([sys.executable, __file__, *argv], stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    if rc:
        sys.exit(f"bench_scale: child {argv[:2]} failed with status {rc}; see {log}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 30000, 100000])
    ap.add_argument("--seed", type=int, default=0, help="amplifier and question-mix seed")
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[3] / "shared" / "data"),
                    help="folder with <dataset>/corpus.json and dev.json (default: ../shared/data of the repository)")
    ap.add_argument("--work-dir", default="/tmp/hpengine_scale", help="corpora, indexes and child reports")
    ap.add_argument("--questions", type=int, default=1024)
    ap.add_argument("--methods", nargs="+", default=["dense", "hyperprove", "ppr"])
    ap.add_argument("--batch-size", type=int, default=256, help="questions per engine call")
    ap.add_argument("--encoder-dtype", default="auto",
                    help="MiniLM's dtype (default auto: bfloat16 where the device has it natively, else float32)")
    ap.add_argument("--reuse", action="store_true",
                    help="keep an index already built in WORK (skip its build) and its newer query report")
    ap.add_argument("--keep-indexes", action="store_true", help="leave WORK/index_N after querying")
    add_common_args(ap)
    # internal: the child processes
    ap.add_argument("--child", choices=["build", "query"], help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    ap.add_argument("--index", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.child == "build":
        child_build(args)
        return 0
    if args.child == "query":
        child_query(args)
        return 0
    if any(n < 1 for n in args.sizes) or args.questions < 1:
        print(f"bench_scale: --sizes and --questions must be >= 1 (got {args.sizes}, {args.questions})",
              file=sys.stderr)
        return 2
    missing = [f"{d}/{f}" for d in DATASETS for f in ("corpus.json", "dev.json")
               if not (Path(args.data_dir) / d / f).is_file()]
    if missing:
        print(f"bench_scale: {', '.join(missing)} missing under --data-dir (got {args.data_dir})", file=sys.stderr)
        return 2
    from benchmarks.e2e import amplify_corpus

    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    common = ["--device", args.device, "--threads", str(args.threads), "--seed", str(args.seed),
              "--encoder-dtype", args.encoder_dtype]
    pool = amplify_corpus.load_pool(args.data_dir)
    builds, queries, amplified = {}, {}, {}
    for n in sorted(set(args.sizes)):
        corpus, index = work / f"corpus_{n}.json", work / f"index_{n}"
        build_out, query_out = work / f"build_{n}.json", work / f"query_{n}.json"
        if not (args.reuse and index.is_dir() and build_out.is_file()):
            passages, stats = amplify_corpus.amplify(pool, n, args.seed)
            corpus.write_text(json.dumps(passages, ensure_ascii=False))
            amplified[n] = stats
            print(f"N = {n:,}: amplified ({stats})", flush=True)
            shutil.rmtree(index, ignore_errors=True)
            start = time.perf_counter()
            _child(["--child", "build", "--corpus", str(corpus), "--index", str(index), "--child-out", str(build_out),
                    *common], work / f"build_{n}.log")
            print(f"N = {n:,}: built in {time.perf_counter() - start:.0f} s", flush=True)
        builds[n] = json.loads(build_out.read_text())
        print(f"N = {n:,}: build seconds {builds[n]['seconds']}, peak RSS {builds[n]['max_rss_mib']:.0f} MiB",
              flush=True)
        # --reuse: a query report newer than the build's, of the same questions and methods, is kept too
        kept = (json.loads(query_out.read_text()) if args.reuse and query_out.is_file()
                and query_out.stat().st_mtime >= build_out.stat().st_mtime else None)
        if not (kept and kept["questions"] == args.questions and set(args.methods) <= set(kept["methods"])):
            _child(["--child", "query", "--index", str(index), "--child-out", str(query_out), "--data-dir",
                    args.data_dir, "--questions", str(args.questions), "--batch-size", str(args.batch_size),
                    "--methods", *args.methods, *common], work / f"query_{n}.log")
        queries[n] = json.loads(query_out.read_text())
        print(f"N = {n:,}: " + ", ".join(f"{m} {r['questions_per_second']} q/s"
                                         for m, r in queries[n]["methods"].items()), flush=True)
        if not args.keep_indexes:
            shutil.rmtree(index, ignore_errors=True)
    print()
    print(format_table(builds, queries, args.methods, args.questions))
    meta = {"sizes": sorted(builds), "seed": args.seed, "questions": args.questions, "methods": args.methods,
            "amplified": amplified, "builds": builds,
            "queries": {n: {k: v for k, v in q.items()} for n, q in queries.items()}}
    return finish(args, records_of(builds, queries, args.methods), meta)


if __name__ == "__main__":
    sys.exit(main())
