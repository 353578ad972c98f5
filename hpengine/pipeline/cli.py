"""``hpengine`` command line: ``hpengine <command> [hydra overrides]``.

Commands map to primary configs in ``conf/``:

    hpengine index corpus=PATH out=DIR [extractor=fast|llm] [device=cpu|cuda]
    hpengine add   corpus=PATH out=DIR          (incremental add to a saved index)

This is the only module (with benchmarks/) that touches Hydra: it composes YAML on top of the
typed schemas, converts to dataclasses and calls plain library functions.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

_USAGE = """usage: hpengine <command> [key=value ...]

commands:
  index   build an index:   hpengine index corpus=PATH out=DIR [extractor=fast|llm] [device=cpu|cuda]
          (no corpus=: the built-in demo corpus)
  add     add passages:     hpengine add corpus=PATH out=DIR
Add --cfg job to print the composed configuration, -m for Hydra multirun sweeps."""


def _conf_dir() -> str:
    here = Path(__file__).resolve()
    repo_conf = here.parents[2] / "conf"  # editable install / source checkout
    if (repo_conf / "index.yaml").exists():
        return str(repo_conf)
    import hpengine.conf

    return str(Path(hpengine.conf.__file__).parent)


def _to_dataclass(cfg):
    from omegaconf import OmegaConf

    return OmegaConf.to_object(cfg)


def _index_task(cfg) -> None:
    from hpengine.pipeline._index_job import format_report, run_index

    icfg = _to_dataclass(cfg)
    _, report = run_index(icfg)
    print(format_report(report, icfg.out))


def _add_task(cfg) -> None:
    from hpengine.pipeline._index_job import format_report, run_add

    icfg = _to_dataclass(cfg)
    _, report = run_add(icfg)
    print(format_report(report, icfg.out))


_COMMANDS = {"index": ("index", _index_task), "add": ("index", _add_task)}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_USAGE)
        return
    command, rest = argv[0], argv[1:]
    if command not in _COMMANDS:
        print(f"hpengine: unknown command {command!r}; choose one of {sorted(_COMMANDS)}\n\n{_USAGE}", file=sys.stderr)
        raise SystemExit(2)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import hydra

    from hpengine.config._store import register_configs

    register_configs()
    config_name, task = _COMMANDS[command]
    sys.argv = [f"hpengine {command}", *rest]
    hydra.main(version_base=None, config_path=_conf_dir(), config_name=config_name)(task)()


if __name__ == "__main__":
    main()
