"""``hpengine`` command line: ``hpengine <command> [hydra overrides]``.

Commands map to primary configs in ``conf/``:

    hpengine index corpus=PATH out=DIR [extractor=fast|llm] [device=cpu|cuda]
    hpengine add   corpus=PATH out=DIR          (incremental add to a saved index)
    hpengine demo                               (built-in corpus and questions)
    hpengine ask INDEX "question"
    hpengine eval index=DIR questions=PATH retriever=hyperprove|dense output=FILE.json

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
  demo    built-in default: index the built-in corpus, answer its questions, print chains and scores
  ask     one question:     hpengine ask INDEX "question" [model.llm=PATH]
  eval    a question file:  hpengine eval index=DIR questions=PATH retriever=hyperprove|dense output=FILE.json
  report  one HTML page:    hpengine report RUN.json [RUN2.json ...] [out=report.html]  (compares eval runs)
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


def _eval_task(cfg) -> None:
    from hpengine.pipeline._eval_job import run_eval, summary_table

    ecfg = _to_dataclass(cfg)
    result = run_eval(ecfg)
    print(summary_table(result))
    if ecfg.output:
        print(f"per-question records written to {ecfg.output}")
        from hpengine.eval import default_report_path

        print(f"report page: hpengine report {ecfg.output}  (writes {default_report_path(ecfg.output)})")


def _demo_task(cfg) -> None:
    from hpengine.pipeline._eval_job import run_demo, summary_table
    from hpengine.pipeline._index_job import format_report

    dcfg = _to_dataclass(cfg)
    build_report, result, engine = run_demo(dcfg)
    print(format_report(build_report, engine.index.meta.get("build_report", {}).get("corpus", "built-in corpus")))
    print()
    for rec in result["records"]:
        print(f"Q: {rec['question']}\nA: {rec['prediction']}   (gold: {rec['gold'][0]}; em={rec['em']:.0f} "
              f"f1={rec['f1']:.2f} recall@2={rec['recall@2']:.2f} recall@5={rec['recall@5']:.2f})")
        for t, hop in enumerate(rec["chain"], 1):
            print(f"  hop {t}: {hop['subquery']!r} -> {hop['answer']!r}")
            for f in hop["facts"][:3]:
                print(f"     {f['score']:+.3f} [{f['title']}] {f['text']}")
    print()
    print(summary_table(result))
    if result.get("report"):
        print(f"report page written to {result['report']}")


def _ask_task_for(index_dir: str, question: str):
    def task(cfg) -> None:
        from hpengine.pipeline._eval_job import format_prediction, make_engine

        ecfg = _to_dataclass(cfg)
        ecfg.index = index_dir
        engine = make_engine(ecfg)
        print(format_prediction(engine.answer([question])[0]))

    return task


_COMMANDS = {"index": ("index", _index_task), "add": ("index", _add_task), "eval": ("eval", _eval_task),
             "demo": ("demo", _demo_task)}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_USAGE)
        return
    command, rest = argv[0], argv[1:]
    if command == "report":  # a plain command: nothing to compose
        from hpengine.pipeline._report_job import report_main

        return report_main(rest)
    if command not in _COMMANDS and command != "ask":
        print(f"hpengine: unknown command {command!r}; choose one of {sorted(_COMMANDS)}\n\n{_USAGE}", file=sys.stderr)
        raise SystemExit(2)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import hydra

    from hpengine.config._store import register_configs

    register_configs()
    if command == "ask":
        positional = [a for a in rest if "=" not in a and not a.startswith("-")]
        if len(positional) != 2:
            print('usage: hpengine ask INDEX "question" [key=value ...]', file=sys.stderr)
            raise SystemExit(2)
        rest = [a for a in rest if a not in positional]
        config_name, task = "eval", _ask_task_for(*positional)
    else:
        config_name, task = _COMMANDS[command]
    if config_name in ("eval", "demo"):  # documented shortcut: retriever=dense|hyperprove
        rest = [("engine=" + a.split("=", 1)[1]) if a.startswith("retriever=") else a for a in rest]
    sys.argv = [f"hpengine {command}", *rest]
    hydra.main(version_base=None, config_path=_conf_dir(), config_name=config_name)(task)()


if __name__ == "__main__":
    main()
