"""One front door: ``hpengine --help`` lists every command and every registered method without
importing torch, transformers or Hydra; the methods are the registry's, each one the config-group
option ``engine=NAME`` without a YAML file of its own; the top-level exports load on first use."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpengine.config import EngineConfig, method_configs

HEAVY = ("torch", "transformers", "hydra", "omegaconf")
CONF = Path(__file__).resolve().parents[1] / "conf"


def _python(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)


def _imported(importtime_stderr: str) -> set:
    """Top-level packages named in ``python -X importtime`` output."""
    return {m.group(1).split(".")[0] for m in re.finditer(r"^import time:[^|]*\|[^|]*\|\s*([\w.]+)\s*$",
                                                          importtime_stderr, re.M)}


def _listed_methods(help_text: str) -> list:
    section = help_text.split("\nmethods", 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in section.splitlines()[1:] if line.strip()]


@pytest.fixture(scope="module")
def help_run():
    return _python("-X", "importtime", "-m", "hpengine.cli", "--help")


def test_help_imports_neither_torch_nor_transformers(help_run):
    assert help_run.returncode == 0, help_run.stderr
    imported = _imported(help_run.stderr)
    assert "hpengine" in imported  # the parse found the modules it timed
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_help_lists_every_command_and_the_registered_methods(help_run):
    from hpengine.cli import COMMANDS

    text = help_run.stdout
    assert set(COMMANDS) == {"index", "add", "delete", "update", "ask", "eval", "demo", "report", "grag-build", "train"}
    for command in COMMANDS:
        assert re.search(rf"^  {re.escape(command)}\s", text, re.M), command
    # the registry of a fresh process (this one may hold test methods)
    code = ("import json; from hpengine.pipeline import available_retrievers; "
            "print(json.dumps(sorted(available_retrievers())))")
    registered = json.loads(_python("-c", code).stdout)
    assert _listed_methods(text) == registered
    assert set(registered) >= {"dense", "grag", "hyperprove", "ppr"}


def test_method_configs_are_the_retrievers_config_classes():
    from hpengine.pipeline import available_retrievers

    configs = method_configs()
    for name, retriever in available_retrievers().items():
        assert configs[name] is retriever.config_class, name
    assert all(issubclass(cls, EngineConfig) and cls.method == name for name, cls in configs.items())


def test_package_imports_stay_light_and_exports_load_on_first_use():
    code = ("import sys, hpengine, hpengine.config, hpengine.pipeline, hpengine.cli; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))")
    assert _python("-c", code).stdout.strip() == "[]"
    import hpengine

    for name in hpengine.__all__:
        assert getattr(hpengine, name) is not None, name
    from hpengine import Engine, GragConfig, HyperGraph  # noqa: F401
    from hpengine.config import GragConfig as FromConfig

    assert GragConfig is FromConfig and "GragConfig" in dir(hpengine)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        hpengine.Nope  # noqa: B018


def test_unknown_command_is_one_line_with_exit_2_before_any_heavy_import():
    proc = _python("-X", "importtime", "-m", "hpengine.cli", "frobnicate")
    err = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 2 and len(err) == 1, proc.stderr[-2000:]
    assert err[0].startswith("hpengine: error: unknown command") and "grag-build" in err[0] and "'frobnicate'" in err[0]
    assert not _imported(proc.stderr) & set(HEAVY)


@pytest.mark.parametrize("name", sorted(method_configs()))
def test_every_method_is_an_engine_option_without_a_yaml(name):
    """``retriever=NAME`` composes the method's config class, registered from the registry."""
    from omegaconf import OmegaConf

    from hpengine.config import register_configs
    from hpengine.cli import _compose

    assert not (CONF / "engine" / f"{name}.yaml").exists()
    register_configs()
    for command in ("eval", "demo"):
        cfg = _compose(command, [f"engine={name}"])
        assert OmegaConf.get_type(cfg.engine) is method_configs()[name]


def test_grag_build_is_a_command(tmp_path, capsys):
    from hpengine.cli import main

    main(["grag-build", "--help"])
    out = capsys.readouterr().out
    assert out.startswith("usage: hpengine grag-build IDX") and "louvain_seed=" in out
    with pytest.raises(SystemExit) as exc:
        main(["grag-build", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err.startswith("hpengine: error: ") and "\n" not in err, err
    with pytest.raises(SystemExit) as exc:
        main(["grag-build", "IDX", "debug=maybe"])
    assert exc.value.code == 2 and "debug= must be true or false" in capsys.readouterr().err
