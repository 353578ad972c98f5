"""Shared benchmark harness: one timer, one argument grammar, results with the machine they ran on.

* Timing: :func:`measure` and :func:`time_once` use ``torch.utils.benchmark.Timer`` (it
  synchronises CUDA before reading clocks) after warm-up calls; :func:`measure` reports the median
  over the runs of ``blocked_autorange``.
* Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` (reset before the warm-up); on CPU a
  sampling thread reads the process RSS every ``interval`` seconds while the warm-up and the runs
  execute (the harness reports the peak above the RSS before the warm-up, i.e. the call's own
  working set, including buffers it keeps between calls) — torch
  CPU tensors are invisible to ``tracemalloc``, so RSS is the honest measure. The process-wide
  ``ru_maxrss`` is recorded too.
* Arguments: an op benchmark declares its keys once, as a dataclass of :class:`Common` with
  :func:`opt` fields; :func:`parse` reads ``key=value`` words against it (an unknown key names the
  closest) and :func:`help_text` is its ``--help``.
* Results: :func:`report` writes ``benchmarks/results/<suite>/<YYYY-MM-DD>/<name>.json`` with
  :func:`machine` (CPU, cores, threads, torch, CUDA device, git commit and dirty flag, date);
  :func:`compare` puts two runs side by side. With ``profile=true`` :func:`measure` also writes a
  Chrome trace per measured cell (:func:`trace`).

The scripts live in ``ops/``, ``e2e/`` and ``analysis/`` and run as modules of the ``benchmarks``
package from the repository root: ``python -m benchmarks ops bench_ppr`` (see ``__main__.py``).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import difflib
import json
import os
import platform
import re
import resource
import subprocess
import sys
import threading
import time
import timeit
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch.utils import benchmark

from hpengine.errors import UserError

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
            extra: dict | None = None, trace_dir: str | Path | None = None) -> Record:
    """Time ``fn`` and record its peak memory.

    Args:
        warmup: number of warm-up calls of ``fn``, or a cheaper callable run once instead (for
            cells that take minutes: same code paths, smaller input).
        min_run_time: ``blocked_autorange``'s budget; the median over its runs is reported.
        once: time exactly one call (``Timer.timeit(1)``) instead of ``blocked_autorange``, which
            always adds a calibration call.
        trace_dir: when given, one more call of ``fn`` runs under ``torch.profiler`` after the
            timing and its Chrome trace is written there (:func:`trace`).
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
    if trace_dir is not None:
        trace(fn, Path(trace_dir) / f"{cell_name(bench, impl, case)}.json", device)
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
    """The records, the environment, :func:`machine` and ``meta`` as ``benchmarks/results/LABEL.json``
    (the ``--label`` of the e2e scripts on argparse)."""
    return write_json({"env": environment(), "machine": machine(), "meta": meta or {},
                       "records": [r.to_json() for r in records]}, result_path(label))


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
        data = {"machine": machine(), "args": vars(args), "datasets": reports}
        print(f"saved {write_json(data, result_path(args.label))}")
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


# ------------------------------------------------------------------ one timer, one trace per cell
def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def time_once(fn: Callable[[], object], device="cpu") -> float:
    """Seconds of exactly one call of ``fn``, for cells that cannot be repeated or warmed up (a cold
    load, a first compiled call, a step whose input changes): the clock ``Timer`` reads
    (``timeit.default_timer``), the device synchronised before each reading (``Timer.timeit``
    itself always adds warm-up calls first)."""
    _sync(device)
    start = timeit.default_timer()
    fn()
    _sync(device)
    return timeit.default_timer() - start


def cell_name(bench: str, impl: str, case: dict) -> str:
    """``bench_impl_K=V_...``: a file name for one measured cell."""
    text = "_".join([bench, impl, *(f"{k}={v}" for k, v in sorted(case.items()))])
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", text)


def trace(fn: Callable[[], object], path: str | Path, device="cpu", top: int = 12) -> str:
    """Run ``fn`` once under ``torch.profiler`` (CPU, plus CUDA on a GPU), write the Chrome trace to
    ``path`` (open it in chrome://tracing or ui.perfetto.dev), print and return the top-``top`` ops
    table by self time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.device(device).type == "cuda" else [])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with profile(activities=activities, record_shapes=True) as prof:
        fn()
        _sync(device)
    prof.export_chrome_trace(str(path))
    sort = "self_cuda_time_total" if torch.device(device).type == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=top)
    print(f"trace {path}\n{table}", flush=True)
    return table


# ------------------------------------------------------------------ one argument grammar
def opt(default, help: str = ""):
    """A benchmark key: its default and its one-line help (shown by ``--help``)."""
    return field(default=default, metadata={"help": help})


@dataclass
class Common:
    """The keys every op benchmark takes."""

    threads: int = opt(0, "torch threads (0: torch's default)")
    device: str = opt("cpu", "cpu or cuda")
    profile: bool = opt(False, "also write a Chrome trace per measured cell and print its top ops")
    out: str = opt("", "folder for the result file (default benchmarks/results/<suite>/<date>)")

    #: keys a run must set (a suite run skips the benchmark when one is unset)
    REQUIRED: typing.ClassVar[tuple] = ()


def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _convert(text: str, hint, key: str):
    """``text`` as the type ``hint`` of ``key`` (tuples: comma-separated)."""
    origin = typing.get_origin(hint)
    if origin is tuple:
        inner = typing.get_args(hint)[0]
        return tuple(_convert(t, inner, key) for t in text.split(",") if t != "")
    if hint is bool:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise UserError(f"{key}= takes true or false (got {text!r})")
        return text.lower() in ("true", "1", "yes")
    try:
        return hint(text) if hint in (int, float, str) else text
    except ValueError:
        raise UserError(f"{key}= takes {hint.__name__} (got {text!r})") from None


def _show(value) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def as_words(cfg, skip=()) -> list:
    """``cfg``'s keys as ``key=value`` words (what :func:`parse` reads back), less those in ``skip``."""
    return [f"{k}={_show(v)}" for k, v in asdict(cfg).items() if k not in skip]


def help_text(cls, doc: str = "", prog: str = "") -> str:
    """``--help`` of a benchmark: its docstring, then every key with its type, default and help."""
    hints = _hints(cls)
    lines = [f"usage: {prog or 'python -m benchmarks ops NAME'} [key=value ...]", "", (doc or "").strip(), "",
             "keys (lists: comma-separated values):"]
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        kind = "list" if typing.get_origin(hint) is tuple else getattr(hint, "__name__", str(hint))
        need = " (required)" if f.name in cls.REQUIRED else ""
        lines.append(f"  {f.name}={_show(f.default)}  [{kind}]{need}  {f.metadata.get('help', '')}".rstrip())
    return "\n".join(lines)


def keys_of(cls) -> list:
    return [f.name for f in dataclasses.fields(cls)]


def parse(cls, argv: list, doc: str = "", prog: str = ""):
    """``key=value`` words as an instance of the dataclass ``cls``; ``-h``/``--help`` prints
    :func:`help_text` and exits 0.

    Raises:
        UserError: a word that is not ``key=value``, an unknown key (naming the closest), a value of
            the wrong type.
    """
    if any(a in ("-h", "--help") for a in argv):
        print(help_text(cls, doc, prog))
        raise SystemExit(0)
    hints, names, values = _hints(cls), keys_of(cls), {}
    for word in argv:
        key, eq, value = word.partition("=")
        if not eq:
            raise UserError(f"{word!r} is not key=value; keys: {', '.join(names)}")
        if key not in names:
            near = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise UserError(f"unknown key {key!r}{hint}; keys: {', '.join(names)}")
        values[key] = _convert(value, hints[key], key)
    return cls(**values)


def script_args(cls, doc: str, file: str, argv=None):
    """:func:`parse` of ``argv`` (default ``sys.argv[1:]``) for the benchmark in ``file``, with
    torch's thread count set as ``threads=`` asks; a user error ends the process with status 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        cfg = parse(cls, argv, doc, prog=f"python -m benchmarks {suite_of(file)} {Path(file).stem}")
    except UserError as e:
        print(f"hpengine: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    return cfg


def require(cfg, file: str) -> None:
    """Raise a :class:`UserError` naming the unset keys of ``cfg.REQUIRED``."""
    unset = [k for k in cfg.REQUIRED if not getattr(cfg, k)]
    if unset:
        print(f"hpengine: error: {Path(file).stem} needs {', '.join(k + '=' for k in unset)}", file=sys.stderr)
        raise SystemExit(2)


# ------------------------------------------------------------------ machine, result files
def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _hpengine_path() -> str:
    """The folder of the hpengine package measured (``--against`` runs another commit's)."""
    import hpengine

    return str(Path(hpengine.__file__).resolve().parent)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    """What the numbers depend on: CPU model, cores, torch threads, torch, CUDA device, git commit
    and whether the tree had uncommitted changes, date (UTC), load average."""
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", "hpengine", "kernels", "benchmarks")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu_model(), "cores": cores, "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "commit": _git("rev-parse", "HEAD"), "dirty": bool(dirty), "hpengine": _hpengine_path(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


def suite_of(file: str) -> str:
    """``ops``, ``e2e`` or ``analysis``: the folder of a benchmark's file."""
    return Path(file).resolve().parent.name


def today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def suite_path(suite: str, name: str, out: str = "") -> Path:
    """``OUT/<name>.json``, OUT defaulting to ``benchmarks/results/<suite>/<YYYY-MM-DD>``."""
    return Path(out or RESULTS / suite / today()) / f"{name}.json"


def trace_dir(cfg, file: str) -> Path | None:
    """Where ``profile=true`` puts a benchmark's traces: ``<result folder>/<name>.traces``; None
    without ``profile=true``."""
    if not cfg.profile:
        return None
    return suite_path(suite_of(file), Path(file).stem, cfg.out).with_suffix(".traces")


def report(file: str, cfg, records: list, meta: dict | None = None) -> Path:
    """Save the run of the benchmark in ``file``: its records, :func:`machine`, its keys and
    ``meta``, at :func:`suite_path`; print the path."""
    name = Path(file).stem
    changed = [w for w, d in zip(as_words(cfg), as_words(type(cfg)())) if w != d and not w.startswith("out=")]
    data = {"suite": suite_of(file), "name": name, "machine": machine(), "keys": asdict(cfg),
            "command": " ".join(["python -m benchmarks", suite_of(file), name, *changed]),
            "meta": meta or {}, "records": [r.to_json() for r in records]}
    path = write_json(data, suite_path(data["suite"], name, cfg.out), default=str)
    print(f"saved {path}", flush=True)
    return path


def records_of(path: str | Path) -> list:
    """The :class:`Record` list of a result file (new or legacy layout)."""
    return load(str(path))


def latest(suite: str, name: str, root: Path = RESULTS) -> Path | None:
    """The newest ``root/<suite>/<date>/<name>.json``, or None."""
    found = sorted((root / suite).glob(f"*/{name}.json"))
    return found[-1] if found else None


def records_table(records: list) -> str:
    """A markdown table of records: bench, impl, case, ms per call, items/s, peak MiB."""
    rows = ["| bench | impl | case | ms / call | items / s | peak MiB |", "|---|---|---|---:|---:|---:|"]
    for r in records:
        case = ", ".join(f"{k}={v}" for k, v in sorted(r.case.items()))
        rows.append(f"| {r.bench} | {r.impl} | {case} | {r.seconds * 1e3:.3g} | {r.throughput:,.1f} | {r.peak_mib:.0f} |")
    return "\n".join(rows)
