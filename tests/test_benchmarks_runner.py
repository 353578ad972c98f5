"""The benchmark runner (``python -m benchmarks``): it lists the op suite, runs one op benchmark at a
tiny size into a result file that says which machine and build made it, compares two result files,
writes a Chrome trace per measured cell, regenerates the README's tables, and every op benchmark
declares its keys in one dataclass from which its ``--help`` is generated."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import _harness, _readme
from benchmarks.__main__ import main, names

ROOT = Path(__file__).resolve().parents[1]
TINY_SAMPLER = ["rows=2", "vocab=300", "steps=2"]


def test_list_names_every_op_benchmark():
    out = subprocess.run([sys.executable, "-m", "benchmarks", "ops", "--list"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    listed = {line.split()[0] for line in out.splitlines() if line.strip()}
    assert listed == {p.stem for p in (ROOT / "benchmarks" / "ops").glob("bench_*.py")}


@pytest.mark.parametrize("name", names("ops"))
def test_every_op_benchmark_declares_its_keys_and_generates_help(name, capsys):
    module = __import__(f"benchmarks.ops.{name}", fromlist=["Config"])
    assert dataclasses.is_dataclass(module.Config) and issubclass(module.Config, _harness.Common)
    fields = dataclasses.fields(module.Config)
    assert all(f.metadata.get("help") for f in fields), [f.name for f in fields if not f.metadata.get("help")]
    with pytest.raises(SystemExit) as stop:
        module.main(["--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    assert all(f"  {f.name}=" in text for f in fields)


def _run_sampler(out: Path) -> dict:
    assert main(["ops", "bench_sampler", *TINY_SAMPLER, f"out={out}"]) == 0
    return json.loads((out / "bench_sampler.json").read_text())


def test_one_op_benchmark_writes_its_records_with_the_machine_and_build(tmp_path):
    data = _run_sampler(tmp_path / "ops" / "d1")
    assert {"cpu", "cores", "threads", "torch", "cuda", "commit", "dirty", "date"} <= set(data["machine"])
    assert data["keys"]["rows"] == 2 and data["command"].endswith(" ".join(TINY_SAMPLER))
    assert {r["impl"] for r in data["records"]} == {"full", "pruned"}
    assert all(r["seconds"] > 0 and r["items"] == 2 for r in data["records"])


def test_compare_prints_a_ratio_per_case_and_the_readme_table_comes_from_the_latest_result(tmp_path, capsys):
    first, second = tmp_path / "ops" / "d1", tmp_path / "ops" / "d2"
    _run_sampler(first)
    data = _run_sampler(second)
    capsys.readouterr()
    assert main(["compare", str(first / "bench_sampler.json"), str(second / "bench_sampler.json")]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| sampler |")]
    assert len(rows) == len(data["records"])
    assert main(["compare", str(first), str(second)]) == 0  # two folders: file by file
    assert "| sampler | pruned |" in capsys.readouterr().out
    text = _readme.render("a\n<!-- results: ops/bench_sampler -->\nold\n<!-- /results -->\nb\n", root=tmp_path)
    assert "old" not in text and data["command"] in text and str(second / "bench_sampler.json") in text


def test_an_unknown_key_names_the_closest_and_exits_2(capsys):
    assert main(["ops", "bench_sampler", "row=2"]) == 2
    assert "did you mean rows?" in capsys.readouterr().err


def test_profile_writes_a_chrome_trace_per_measured_cell(tmp_path):
    x = torch.randn(64, 64)
    rec = _harness.measure(lambda: x @ x, bench="mm", impl="torch", case={"N": 64}, items=1, min_run_time=0.01,
                           trace_dir=tmp_path)
    trace = json.loads((tmp_path / f"{_harness.cell_name('mm', 'torch', {'N': 64})}.json").read_text())
    assert rec.seconds > 0 and any(e.get("name") == "aten::mm" for e in trace["traceEvents"])
