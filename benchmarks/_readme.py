"""``python -m benchmarks readme``: rewrite the generated sections of benchmarks/README.md from the
newest result files.

A generated section sits between two markers::

    <!-- results: ops/bench_ppr -->
    (replaced: the machine and command of the newest benchmarks/results/ops/<date>/bench_ppr.json,
    then its table)
    <!-- /results -->

The table is the benchmark module's ``table(records)`` where it has one, else one row per record.
"""
from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

from benchmarks import _harness

README = Path(__file__).resolve().parent / "README.md"
SECTION = re.compile(r"(<!-- results: (\w+)/(\w+) -->\n)(.*?)(<!-- /results -->)", re.S)


def machine_line(m: dict) -> str:
    commit = (m.get("commit") or "?")[:10] + (" (uncommitted changes)" if m.get("dirty") else "")
    device = f", {m['cuda']}" if m.get("cuda") else ""
    load = f"; load average {m['loadavg'][0]:.1f}" if m.get("loadavg") else ""
    return (f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('threads', '?')} torch threads{device}; "
            f"torch {m.get('torch', '?')}; commit {commit}; {m.get('date', '?')}{load}")


def table_of(suite: str, name: str, records: list) -> str:
    try:
        module = importlib.import_module(f"benchmarks.{suite}.{name}")
    except ImportError:
        module = None
    table = getattr(module, "table", None)
    return table(records) if callable(table) else _harness.records_table(records)


def section(suite: str, name: str, root: Path = _harness.RESULTS) -> str:
    """The text of one generated section (ending in a newline)."""
    path = _harness.latest(suite, name, root)
    if path is None:
        return f"No result yet: run `python -m benchmarks {suite} {name}`.\n"
    data = json.loads(path.read_text())
    records = _harness.records_of(path)
    rel = path.relative_to(README.parent.parent) if path.is_relative_to(README.parent.parent) else path
    return (f"`{data.get('command', '')}` ({rel})  \n{machine_line(data.get('machine', {}))}\n\n"
            f"{table_of(suite, name, records)}\n")


def render(text: str, root: Path = _harness.RESULTS) -> str:
    """``text`` with every generated section rewritten."""
    return SECTION.sub(lambda m: m.group(1) + section(m.group(2), m.group(3), root) + m.group(5), text)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    path = Path(argv[0]) if argv else README
    text = path.read_text(encoding="utf-8")
    new = render(text)
    if new != text:
        path.write_text(new, encoding="utf-8")
    print(f"{path}: {len(SECTION.findall(text))} generated sections, {'rewritten' if new != text else 'unchanged'}")
    return 0
