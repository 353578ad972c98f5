"""One runner for the benchmarks (run from the repository root).

    python -m benchmarks ops                          # the op suite at its small default sizes
    python -m benchmarks ops bench_ppr sizes=100000 queries=1024 threads=1
    python -m benchmarks ops bench_ppr --help         # the keys of one benchmark
    python -m benchmarks ops --list
    python -m benchmarks ops bench_ppr profile=true   # + a Chrome trace per measured cell
    python -m benchmarks ops bench_hop --against HEAD~3   # the same run on another commit, then ratios
    python -m benchmarks compare A.json B.json        # ratios B / A per case (files or folders)
    python -m benchmarks readme                       # rewrite README.md's tables from the latest results
    python -m benchmarks e2e bench_qa --help          # e2e and analysis scripts: their own arguments

Op benchmarks take ``key=value`` words (keys a named benchmark does not declare are refused, naming
the closest); in a suite run each benchmark gets the keys it declares, and one that needs a key
nobody gave (a local model, a data file) is skipped, saying so. Op results go to
``benchmarks/results/ops/<YYYY-MM-DD>/<name>.json``.
"""
from __future__ import annotations

import difflib
import importlib
import os
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITES = ("ops", "e2e", "analysis")
USAGE = ("usage: python -m benchmarks {ops,e2e,analysis} [NAME ...] [key=value ...] [--list] [--against COMMIT]\n"
         "       python -m benchmarks compare A.json B.json [--fail-if-regression PCT]\n"
         "       python -m benchmarks readme")


class UsageError(Exception):
    """A command line the runner refuses (one line, exit status 2)."""


def names(suite: str) -> list:
    """The runnable modules of ``suite``: ``bench_*.py`` in ops/, every public script elsewhere."""
    pattern = "bench_*.py" if suite == "ops" else "*.py"
    return sorted(p.stem for p in (HERE / suite).glob(pattern) if not p.stem.startswith("_"))


def resolve(suite: str, name: str) -> str:
    """``name`` or its short form (``ppr`` for ``bench_ppr``) as a module of ``suite``."""
    known = names(suite)
    for candidate in (name, f"bench_{name}"):
        if candidate in known:
            return candidate
    near = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {near[0]}?)" if near else ""
    raise UsageError(f"no benchmark {name!r} in {suite}/{hint}; --list shows them")


def module(suite: str, name: str):
    return importlib.import_module(f"benchmarks.{suite}.{name}")


def list_suite(suite: str) -> int:
    for name in names(suite):
        doc = (module(suite, name).__doc__ or "").strip().splitlines() if suite == "ops" else _first_doc_line(suite, name)
        print(f"{name:28} {doc[0] if doc else ''}")
    return 0


def _first_doc_line(suite: str, name: str) -> list:
    """The first docstring line of a script, read without importing it (its imports may be heavy)."""
    text = (HERE / suite / f"{name}.py").read_text(encoding="utf-8")
    found = re.search(r'^[rb]?"""(.*?)$', text, re.M)
    return [found.group(1).strip()] if found else []


def split_words(words: list) -> tuple:
    """``(names, key=value words)``."""
    keys = [w for w in words if "=" in w and not w.startswith("-")]
    return [w for w in words if w not in keys], keys


def run_ops(chosen: list, keys: list, explicit: bool) -> list:
    """Run each op benchmark in ``chosen`` with the ``keys`` it declares; the result files written."""
    mods = {name: module("ops", name) for name in chosen}
    declared = {name: set(m.Config.__dataclass_fields__) for name, m in mods.items()}
    every = set().union(*declared.values())
    for word in keys:
        key = word.split("=", 1)[0]
        if key not in every:
            near = difflib.get_close_matches(key, sorted(every), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise UsageError(f"unknown key {key!r}{hint}; `python -m benchmarks ops NAME --help` lists a benchmark's keys")
    written = []
    for name, m in mods.items():
        mine = [w for w in keys if w.split("=", 1)[0] in declared[name]]
        given = {w.split("=", 1)[0] for w in mine}
        missing = [k for k in m.Config.REQUIRED if k not in given]
        if missing and not explicit:
            print(f"skipped {name}: needs {', '.join(k + '=' for k in missing)}", flush=True)
            continue
        print(f"== {name} {' '.join(mine)}", flush=True)
        status = m.main(mine)
        if status:
            raise SystemExit(status)
        from benchmarks import _harness

        out = next((w.split("=", 1)[1] for w in mine if w.startswith("out=")), "")
        written.append(_harness.suite_path("ops", name, out))
    return written


def run_script(suite: str, name: str, argv: list) -> int:
    """An e2e or analysis script with its own arguments, as ``python -m benchmarks.SUITE.NAME``."""
    sys.argv = [f"benchmarks/{suite}/{name}.py", *argv]
    try:
        runpy.run_module(f"benchmarks.{suite}.{name}", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def against(commit: str, suite: str, chosen: list, keys: list, explicit: bool) -> int:
    """Run the op benchmarks on ``commit`` (a temporary git worktree, with this tree's benchmarks/
    copied in so both runs measure the same cases), then here, and print the ratios."""
    from benchmarks import _harness

    short = subprocess.run(["git", "rev-parse", "--short", commit], cwd=HERE, capture_output=True, text=True)
    if short.returncode:
        raise UsageError(f"--against: git does not know {commit!r}")
    short = short.stdout.strip()
    out = next((w.split("=", 1)[1] for w in keys if w.startswith("out=")), "")
    now_dir = Path(out) if out else _harness.RESULTS / suite / _harness.today()
    base_dir = now_dir / f"at-{short}"
    keys = [w for w in keys if not w.startswith("out=")]
    tmp = Path(tempfile.mkdtemp(prefix="hpengine-against-"))
    tree = tmp / "tree"
    try:
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=HERE, check=True,
                       capture_output=True)
        shutil.copytree(HERE, tree / "benchmarks", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("results", "__pycache__", "*.md"))
        env = {**os.environ, "PYTHONPATH": str(tree)}
        print(f"== {suite} at {short} (worktree {tree})", flush=True)
        subprocess.run([sys.executable, "-m", "benchmarks", suite, *chosen, *keys, f"out={base_dir}"], cwd=tree,
                       env=env, check=True)
    except subprocess.CalledProcessError as e:
        print(f"hpengine: error: the run at {short} failed ({e})", file=sys.stderr)
        return 1
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=HERE, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"== {suite} here", flush=True)
    run_ops(chosen, [*keys, f"out={now_dir}"], explicit)
    return compare_paths(base_dir, now_dir)


def compare_paths(a: Path, b: Path, fail_pct: float | None = None) -> int:
    """Print the ratios ``b / a`` of throughput per case: two result files, or two folders (each
    file of ``b`` against the same name in ``a``)."""
    from benchmarks import _harness

    a, b = Path(a), Path(b)
    pairs = [(a / p.name, p) for p in sorted(b.glob("*.json")) if (a / p.name).is_file()] if b.is_dir() else [(a, b)]
    if not pairs:
        raise UsageError(f"nothing to compare: no result file of {b} has a namesake in {a}")
    failed = False
    for base, now in pairs:
        for path in (base, now):
            if not path.is_file():
                raise UsageError(f"no result file {path}")
        try:
            text, bad = _harness.compare(_harness.records_of(now), _harness.records_of(base), fail_pct)
        except KeyError:
            raise UsageError(f"{base} or {now} has no records (not a benchmark result file)") from None
        print(f"{now} against {base}\n{text}\n")
        failed |= bad
    if failed:
        print(f"throughput regression beyond {fail_pct}%", file=sys.stderr)
    return 1 if failed else 0


def compare_command(argv: list) -> int:
    fail = None
    if "--fail-if-regression" in argv:
        i = argv.index("--fail-if-regression")
        try:
            fail = float(argv[i + 1])
        except (IndexError, ValueError):
            raise UsageError("--fail-if-regression takes a percentage") from None
        argv = argv[:i] + argv[i + 2:]
    if len(argv) != 2:
        raise UsageError("compare takes two result files (or folders): BASELINE NEW")
    return compare_paths(Path(argv[0]), Path(argv[1]), fail)


def suite_command(suite: str, argv: list) -> int:
    if "--list" in argv:
        return list_suite(suite)
    if suite != "ops":
        if not argv or argv[0].startswith("-"):
            raise UsageError(f"{suite} takes a script name first (--list shows them); its own arguments follow")
        return run_script(suite, resolve(suite, argv[0]), argv[1:])
    commit = None
    if "--against" in argv:
        i = argv.index("--against")
        if i + 1 >= len(argv):
            raise UsageError("--against takes a commit")
        commit, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    words, keys = split_words(argv)
    help_asked = [w for w in words if w in ("-h", "--help")]
    chosen = [resolve("ops", w) for w in words if w not in help_asked]
    if help_asked:
        if len(chosen) != 1:
            print(__doc__)
            return 0
        return module("ops", chosen[0]).main(["--help"])
    unknown = [w for w in chosen if w.startswith("-")]
    if unknown:
        raise UsageError(f"unknown option {unknown[0]}")
    explicit = bool(chosen)
    chosen = chosen or names("ops")
    if commit:
        return against(commit, "ops", chosen, keys, explicit)
    run_ops(chosen, keys, explicit)
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__ + "\n" + USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    try:
        if command in SUITES:
            return suite_command(command, rest)
        if command in ("compare", "--compare"):
            return compare_command(rest)
        if command == "readme":
            from benchmarks._readme import main as readme

            return readme(rest)
        near = difflib.get_close_matches(command, [*SUITES, "compare", "readme"], n=1)
        raise UsageError(f"unknown command {command!r}{f' (did you mean {near[0]}?)' if near else ''}\n{USAGE}")
    except UsageError as e:
        print(f"hpengine: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
