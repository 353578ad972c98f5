"""Shared benchmark harness: timing, peak memory, JSON results, comparisons.

* Timing uses ``torch.utils.benchmark.Timer`` (it synchronises CUDA before reading clocks) after
  explicit warm-up calls; the reported time is the median over the runs of ``blocked_autorange``.
* Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` (reset before the warm-up); on CPU a
  sampling thread reads the process RSS every ``interval`` seconds while the warm-up and the runs
  execute (the harness reports the peak above the RSS before the warm-up, i.e. the call's own
  working set, including buffers it keeps between calls) — torch
  CPU tensors are invisible to ``tracemalloc``, so RSS is the honest measure. The process-wide
  ``ru_maxrss`` is recorded too.
* ``--label NAME`` saves ``benchmarks/results/NAME.json``; ``--compare NAME`` prints the ratios of
  this run to a saved one; ``--fail-if-regression PCT`` exits with status 1 when a throughput
  dropped by more than PCT percent against the compared run.
* Every script's JSON goes through :func:`write_json` (:func:`emit` prints it too); default
  locations are in ``benchmarks/results/`` (:func:`result_path`).

The scripts live in ``ops/``, ``e2e/`` and ``analysis/`` and are run by path from the repository
root (``python benchmarks/ops/bench_ppr.py``); each puts this folder on ``sys.path`` first::

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _harness, _presets
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch.utils import benchmark

RESULTS = Path(__file__).resolve().parent / "results"
#: the benchmark data sets (../shared/data from the repository), read in place, never copied
DEV_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def rss_bytes() -> int:
    """Resident set size of this process (``/proc/self/statm``; psutil elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import psutil

        return psutil.Process().memory_info().rss


class PeakMemory:
    """Context manager: peak memory above the starting point while the block runs.

    ``device="cuda"``: ``torch.cuda.max_memory_allocated`` minus the allocation at entry.
    ``device="cpu"``: peak sampled RSS minus the RSS at entry (a thread samples every ``interval``
    seconds; calls shorter than that may be under-reported).
    """

    def __init__(self, device: str | torch.device = "cpu", interval: float = 0.002):
        self.device = torch.device(device)
        self.interval = interval
        self.peak = 0
        self.start = 0

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start = torch.cuda.memory_allocated(self.device)
            return self
        self.start = rss_bytes()
        self._high = self.start
        self._stop = threading.Event()

        def sample():
            while not self._stop.is_set():
                self._high = max(self._high, rss_bytes())
                time.sleep(self.interval)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self.start
            return
        self._stop.set()
        self._thread.join()
        self._high = max(self._high, rss_bytes())
        self.peak = self._high - self.start


@dataclass
class Record:
    """One measured cell: an implementation on one case."""

    bench: str
    impl: str
    case: dict
    seconds: float  # median seconds per call
    items: int  # items (questions) per call
    runs: int
    peak_mib: float  # peak working set of a call, MiB
    extra: dict = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else float("inf")

    def key(self) -> tuple:
        return (self.bench, self.impl, tuple(sorted(self.case.items())))

    def to_json(self) -> dict:
        out = asdict(self)
        out["throughput"] = self.throughput
        return out


def measure(fn: Callable[[], object], *, bench: str, impl: str, case: dict, items: int, device="cpu",
            warmup: int | Callable[[], object] = 1, min_run_time: float = 1.0, once: bool = False,
            extra: dict | None = None) -> Record:
    """Time ``fn`` and record its peak memory.

    Args:
        warmup: number of warm-up calls of ``fn``, or a cheaper callable run once instead (for
            cells that take minutes: same code paths, smaller input).
        min_run_time: ``blocked_autorange``'s budget; the median over its runs is reported.
        once: time exactly one call (``Timer.timeit(1)``) instead of ``blocked_autorange``, which
            always adds a calibration call.
    """
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    # the peak covers the warm-up too: buffers that fn keeps between calls count
    with PeakMemory(device) as mem:
        if callable(warmup):
            warmup()
        else:
            for _ in range(warmup):
                fn()
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)
        result = timer.timeit(1) if once else timer.blocked_autorange(min_run_time=min_run_time)
    runs = len(result.raw_times) * result.number_per_run
    return Record(bench, impl, dict(case), result.median, items, runs, mem.peak / 2**20, dict(extra or {}))


def environment() -> dict:
    """What the numbers depend on."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "loadavg": list(load),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "argv": sys.argv, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def result_path(name: str) -> Path:
    """``benchmarks/results/NAME.json``, where every script's results go by default."""
    return RESULTS / f"{name}.json"


def write_json(data, path: str | Path, **dump_kwargs) -> Path:
    """Write ``data`` as indented JSON to ``path`` (parent folders made); the path written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, **dump_kwargs))
    return path


def save(label: str, records: list[Record], meta: dict | None = None) -> Path:
    """The records, the environment and ``meta`` as ``benchmarks/results/LABEL.json``."""
    return write_json({"env": environment(), "meta": meta or {}, "records": [r.to_json() for r in records]},
                      result_path(label))


def load(label: str) -> list[Record]:
    path = Path(label) if label.endswith(".json") else result_path(label)
    data = json.loads(path.read_text())
    out = []
    for r in data["records"]:
        r = dict(r)
        r.pop("throughput", None)
        out.append(Record(**r))
    return out


def compare(current: list[Record], baseline: list[Record], fail_pct: float | None = None) -> tuple[str, bool]:
    """Markdown table of throughput ratios current / baseline; whether any fell by > ``fail_pct``%."""
    base = {r.key(): r for r in baseline}
    rows = ["| bench | impl | case | baseline /s | now /s | ratio |", "|---|---|---|---:|---:|---:|"]
    failed = False
    for r in current:
        b = base.get(r.key())
        if b is None:
            continue
        ratio = r.throughput / b.throughput
        flag = ""
        if fail_pct is not None and ratio < 1 - fail_pct / 100:
            failed, flag = True, " REGRESSION"
        case = ", ".join(f"{k}={v}" for k, v in sorted(r.case.items()))
        rows.append(f"| {r.bench} | {r.impl} | {case} | {b.throughput:.1f} | {r.throughput:.1f} | {ratio:.2f}{flag} |")
    return "\n".join(rows), failed


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--label", help="save results as benchmarks/results/LABEL.json")
    parser.add_argument("--compare", help="a saved label (or .json path) to compare against")
    parser.add_argument("--fail-if-regression", type=float, metavar="PCT",
                        help="exit 1 if a throughput fell by more than PCT percent against --compare")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--device", default="cpu")


def add_dev_set_args(parser: argparse.ArgumentParser, *, methods: list, encoder_dtype: str = "auto") -> None:
    """The options of the scripts that run methods on the real dev sets: an index per data set at
    ``INDEX_ROOT/NAME<suffix>``, its questions at ``DATA/NAME/dev.json``."""
    parser.add_argument("--index-root", required=True)
    parser.add_argument("--datasets", nargs="+", default=["2wikimultihopqa", "musique", "hotpotqa"])
    parser.add_argument("--data-dir", default=str(DEV_DATA))
    parser.add_argument("--index-suffix", default="", help="the index of NAME is INDEX_ROOT/NAME<suffix> (e.g. _e5)")
    parser.add_argument("--methods", nargs="+", default=list(methods))
    parser.add_argument("--max-questions", type=int, default=0, help="0: every dev question")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--encoder-dtype", default=encoder_dtype)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--label", default="")


def load_dev_set(name: str, args) -> tuple:
    """``(index, encoder, questions)`` of data set ``name`` as :func:`add_dev_set_args`' options
    say: the index at ``INDEX_ROOT/NAME<suffix>``, the encoder it was built with, its dev
    questions (the first ``--max-questions`` when set)."""
    from hpengine.config import EncoderConfig
    from hpengine.eval import load_questions
    from hpengine.graph import Index
    from hpengine.models import encoder_for_index

    index = Index.load(str(Path(args.index_root) / f"{name}{args.index_suffix}"))
    encoder = encoder_for_index(index.meta, EncoderConfig(name_or_path="", dtype=args.encoder_dtype))
    questions = load_questions(str(Path(args.data_dir) / name / "dev.json"))
    return index, encoder, questions[: args.max_questions] if args.max_questions else questions


def run_dev_sets(args, run_dataset: Callable, table: Callable) -> int:
    """``run_dataset(name, args)`` for every ``--datasets`` name; prints ``table(reports)`` and
    saves ``{"args", "datasets"}`` as ``--label``'s JSON."""
    if args.threads:
        torch.set_num_threads(args.threads)
    reports = {name: run_dataset(name, args) for name in args.datasets}
    print(table(reports))
    if args.label:
        print(f"saved {write_json({'args': vars(args), 'datasets': reports}, result_path(args.label))}")
    return 0


def finish(args, records: list[Record], meta: dict | None = None) -> int:
    """Save / compare as the common arguments ask; the exit status."""
    if args.label:
        print(f"saved {save(args.label, records, meta)}")
    if args.compare:
        text, failed = compare(records, load(args.compare), args.fail_if_regression)
        print(text)
        if failed:
            print(f"throughput regression beyond {args.fail_if_regression}%", file=sys.stderr)
            return 1
    return 0


def emit(result: dict, out: str = "") -> None:
    """Print one benchmark's result as JSON and, when ``out`` is given, write it there too."""
    print(json.dumps(result, indent=1))
    if out:
        write_json(result, out)
