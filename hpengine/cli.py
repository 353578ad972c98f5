"""``hpengine`` command line, the one front door: ``hpengine <command> [argument ...]``.

The commands are :data:`COMMANDS` (``hpengine --help`` lists them with the registered retrieval
methods): ``index``, ``add``, ``delete``, ``update``, ``ask``, ``eval`` and ``demo`` compose a primary
config in ``conf/`` (``index.yaml``, ``edit.yaml``, ``eval.yaml``, ``demo.yaml``) with ``key=value``
overrides; ``report`` and ``grag-build`` read their own arguments. A retrieval method is the config-group option
``engine=NAME`` (``retriever=NAME`` for short) of every method config class
(:func:`hpengine.config.method_configs`), registered by :func:`~hpengine.config.register_configs`.

This is the only module (with benchmarks/) that touches Hydra: it composes YAML on top of the
typed schemas, converts to dataclasses and calls plain library functions. It imports neither torch
nor Hydra until a command runs, so ``--help`` and an unknown command answer at once.

Errors: every key and value is checked before any work starts (unknown keys however written,
``__post_init__`` checks of every config, devices); a :class:`~hpengine.errors.UserError` is
printed as one line ``hpengine: error: ...`` with exit status 2 and no traceback, which
``HPENGINE_DEBUG=1`` or ``debug=true`` shows. Other exceptions are internal errors and keep
their traceback.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys
from pathlib import Path

from hpengine._console import FALSE as _FALSE
from hpengine._console import TRUE as _TRUE
from hpengine._console import debug_from_env as _debug_from_env
from hpengine._console import fail as _fail
from hpengine._console import one_line as _one_line

#: ``name -> (what it does, how it is called, notes)``: the usage text lists them in this order
COMMANDS = {
    "index": ("build an index",
              "hpengine index corpus=PATH out=DIR [overwrite=true] [extractor=fast|llm] [device=cpu|cuda] "
              "[grag.build=true]",
              "an existing index at out= is replaced only with overwrite=true, and only once the new one is "
              "complete"),
    "add": ("add passages", "hpengine add corpus=PATH out=DIR", ""),
    "delete": ("remove passages", "hpengine delete out=DIR corpus=PATH|titles=[T,...]|ids=[I,...]",
               "corpus records match by title and text, else by a title one passage has; titles= takes every "
               "passage with the title; ids are positions in the index. The result equals a fresh index of the "
               "remaining passages; the others are not extracted or embedded again"),
    "update": ("new passage texts", "hpengine update corpus=PATH out=DIR [ids=[I,...]]",
               "each record replaces the passage with its title (or ids=, one per record); only those are "
               "extracted and embedded again, and the result equals a fresh index of the edited corpus"),
    "ask": ("questions", 'hpengine ask INDEX "question"|-|questions=FILE [key=value ...] [-- "question"]',
            "the first two arguments that are not overrides are INDEX and the question; an override is "
            "KEY=VALUE whose KEY starts with a config key (model.llm=..., retriever=METHOD, +eval.x=...); "
            'everything after -- is positional: hpengine ask IDX -- "model=what?". - reads one question per '
            'line from stdin, questions=FILE a question file as eval takes; all are answered in one start-up. '
            "Prints the ranked passages and the evidence chain; without model= the engine retrieves and names "
            "the best bridge entity, not an answer"),
    "eval": ("a question file", "hpengine eval index=DIR questions=PATH [retriever=METHOD] [output=FILE.json]", ""),
    "demo": ("built-in default", "hpengine demo [retriever=METHOD]",
             "index the built-in corpus (into a new temporary folder unless out=DIR), answer its questions, "
             "print passages, chains and scores"),
    "report": ("one HTML page", "hpengine report RUN.json [RUN2.json ...] [out=report.html]", "compares eval runs"),
    "grag-build": ("GRAG-MH parts", "hpengine grag-build INDEX [key=value ...]",
                   "adds the triples, communities and summary nodes that retriever=grag needs to a saved index, "
                   "atomically; keys: hpengine grag-build --help"),
}
#: commands that compose a primary config (``conf/<name>.yaml``); the others read their own arguments
_CONFIG_OF = {"index": "index", "add": "index", "delete": "edit", "update": "edit", "ask": "eval", "eval": "eval",
              "demo": "demo"}
_HELP = ("-h", "--help")

#: ``[+|++|~]key.path[@pkg]=value``: what Hydra reads as an override
_OVERRIDE = re.compile(r"^(?:\+\+|\+|~)?(?P<key>[A-Za-z_][\w\-]*)(?:[./][\w\-]+)*(?:@[\w.\-]+)?(?P<eq>=|$)")
#: the options this module reads itself (not config keys), and the commands taking each
_CLI_OPTIONS = {"debug": ("index", "add", "delete", "update", "eval", "demo", "ask", "grag-build"),
                "overwrite": ("index", "demo")}


def _wrap(text: str, indent: int, width: int = 100) -> list:
    import textwrap

    return textwrap.wrap(text, width, initial_indent=" " * indent, subsequent_indent=" " * indent,
                         break_on_hyphens=False)


def _summary(config_class: type) -> str:
    """``"What it is; config module.ConfigClass"``: the first clause of the class's docstring, its path."""
    where = f"{config_class.__module__.split('._')[0]}.{config_class.__name__}"
    doc = (config_class.__doc__ or "").strip()
    if not doc or doc.startswith(config_class.__name__ + "("):  # none: dataclass writes the signature
        return f"config {where}"
    return f"{doc.splitlines()[0].split(': ')[0].rstrip('.,;:')}; config {where}"


def usage() -> str:
    """The ``hpengine --help`` text: every command and every registered retrieval method (read from
    the method config classes: no torch, no Hydra)."""
    from hpengine.config import method_configs

    lines = ["usage: hpengine <command> [argument ...]", "", "commands:"]
    for name, (what, how, notes) in COMMANDS.items():
        lines.append(f"  {name:<11} {what + ':':<18} {how}")
        if notes:
            lines += _wrap(notes, 14)
    lines += ["", "methods (retriever=METHOD or engine=METHOD for eval, ask and demo; engine.KEY=VALUE sets the "
              "method's settings):"]
    lines += [f"  {name:<11} {_summary(cls)}" for name, cls in method_configs().items()]
    lines += ["", "Every command takes debug=true (or HPENGINE_DEBUG=1) to show the traceback of an error.",
              "Add --cfg job to print the composed configuration, -m for Hydra multirun sweeps (index, add, delete, "
              "update, eval, demo)."]
    return "\n".join(lines)



def _conf_dir() -> str:
    here = Path(__file__).resolve()
    repo_conf = here.parents[1] / "conf"  # editable install / source checkout
    if (repo_conf / "index.yaml").exists():
        return str(repo_conf)
    import hpengine.conf

    return str(Path(hpengine.conf.__file__).parent)


# ------------------------------------------------------------------ errors
def _user_error(message: str):
    from hpengine.errors import UserError

    return UserError(message)


# ------------------------------------------------------------- arguments
def _split_cli_options(command: str, args: list) -> tuple[list, dict]:
    """Take ``debug=`` and ``overwrite=`` (this module's own options) out of ``args``."""
    options, rest = {}, []
    for a in args:
        key, eq, value = a.partition("=")
        if eq and key in _CLI_OPTIONS:
            if command not in _CLI_OPTIONS[key]:
                raise _user_error(f"{key}= applies to {' and '.join(_CLI_OPTIONS[key])} only (got {a!r} for {command})")
            v = value.strip().lower()
            if v not in _TRUE | _FALSE:
                raise _user_error(f"{key}= must be true or false (got {value!r})")
            options[key] = v in _TRUE
        else:
            rest.append(a)
    return rest, options


def is_override(arg: str, top_keys) -> bool:
    """Whether an ``ask`` argument is a config override: ``[+|++|~]KEY...=VALUE`` (or ``~KEY``)
    whose first key component is one of ``top_keys`` (the ask config's keys, ``retriever`` and
    this module's options). Anything else (a question with ``=`` in it, one starting with ``-``)
    is positional."""
    match = _OVERRIDE.match(arg)
    if match is None or match.group("key") not in top_keys:
        return False
    return bool(match.group("eq")) or arg.startswith("~")


def split_ask_args(args: list, top_keys) -> tuple[str, str, list]:
    """``(index, question, overrides)`` of ``hpengine ask`` arguments (rule: see the usage text).

    Raises:
        UserError: not exactly two positional arguments.
    """
    positional, overrides = [], []
    for i, a in enumerate(args):
        if a == "--":
            positional.extend(args[i + 1:])
            break
        (overrides if is_override(a, top_keys) else positional).append(a)
    has_file = any(re.match(r"(?:\+\+|\+)?questions=", a) for a in overrides)
    if len(positional) == 1 and has_file:  # hpengine ask INDEX questions=FILE: no positional question
        return positional[0], "", overrides
    if len(positional) != 2:
        got = "no arguments" if not positional else " ".join(repr(p) for p in positional)
        raise _user_error('ask takes INDEX and one question: hpengine ask INDEX "question" [key=value ...], '
                          '- for one question per line of stdin, or questions=FILE; quote the question, and put '
                          f'it after -- if it looks like key=value (got {got})')
    return positional[0], positional[1], overrides


def _ask_keys() -> set:
    from hydra.core.config_store import ConfigStore

    node = ConfigStore.instance().load("base_eval_job.yaml").node
    return set(node.keys()) | {"hydra", "retriever", *_CLI_OPTIONS}


# ------------------------------------------------------------ validation
def _check_keys(cfg, path: str = "") -> None:
    """Every key of the composed config is a field of its schema (``+key=value`` adds keys that
    Hydra accepts into a structured config's parent without complaint)."""
    from omegaconf import DictConfig, OmegaConf

    schema = OmegaConf.get_type(cfg)
    allowed = {f.name for f in dataclasses.fields(schema)} if dataclasses.is_dataclass(schema) else None
    for key in cfg.keys():
        if path == "" and key == "hydra":
            continue
        full = f"{path}{key}"
        if allowed is not None and key not in allowed:
            raise _user_error(f"unknown config key {full!r}: {schema.__name__} has no field {key!r} "
                              f"(valid: {', '.join(sorted(allowed))})")
        child = cfg._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            _check_keys(child, full + ".")


def _check_devices(obj, path: str = "") -> None:
    """Every ``device`` field names a device this machine has."""
    if not dataclasses.is_dataclass(obj):
        return
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == "device" and isinstance(value, str):
            _check_device(path + f.name, value)
        elif dataclasses.is_dataclass(value):
            _check_devices(value, f"{path}{f.name}.")


def _available_devices() -> list:
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    return found


def _check_device(key: str, value: str) -> None:
    import torch

    try:
        device = torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        raise _user_error(f"{key}= must be a device such as cpu or cuda:0 "
                          f"(got {value!r}; available here: {', '.join(_available_devices())})") from None
    ok = device.type == "cpu"
    if device.type == "cuda":
        ok = torch.cuda.is_available() and (device.index is None or device.index < torch.cuda.device_count())
    elif device.type == "mps":
        ok = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if not ok:
        raise _user_error(f"{key}={value!r} is not available on this machine "
                          f"(available: {', '.join(_available_devices())})")


def job_config(cfg):
    """The job's dataclass from a composed config, every key and value checked.

    Raises:
        UserError: an unknown key, a value a schema's ``__post_init__`` refuses, a missing
            mandatory value, or a device this machine does not have.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from hpengine.errors import UserError

    _check_keys(cfg)
    try:
        obj = OmegaConf.to_object(cfg)
    except UserError:
        raise
    except (ValueError, TypeError, OmegaConfBaseException) as exc:  # __post_init__ checks, missing values
        raise UserError(_one_line(exc)) from exc
    _check_devices(obj)
    return obj


def _compose(config_name: str, overrides: list):
    """Compose ``conf/<config_name>.yaml`` with ``overrides``; every failure is a UserError."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from hpengine.errors import UserError

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=_conf_dir(), version_base=None, job_name="hpengine"):
            return compose(config_name, overrides=overrides)
    except Exception as exc:  # Hydra/OmegaConf raise many types for a bad override
        raise UserError(_one_line(exc)) from exc
    finally:
        GlobalHydra.instance().clear()


# ----------------------------------------------------------------- tasks
def _print_warnings(result: dict) -> None:
    for text in result.get("warnings", ()):
        print(f"hpengine: warning: {text}", file=sys.stderr)


def _index_task(cfg, options) -> None:
    from hpengine.distributed import run_index_distributed
    from hpengine.jobs import format_report

    icfg = job_config(cfg)
    built = run_index_distributed(icfg, overwrite=options.get("overwrite", False))  # run_index outside torchrun
    if built is None:  # a torchrun rank other than 0: rank 0 saves and prints
        return
    print(format_report(built[1], icfg.out))


def _add_task(cfg, options) -> None:
    from hpengine.jobs import format_report, run_add

    icfg = job_config(cfg)
    _, report = run_add(icfg)
    print(format_report(report, icfg.out))


def _edit_task_for(command: str):
    def task(cfg, options) -> None:
        from hpengine.jobs import format_edit_report, run_delete, run_update

        ecfg = job_config(cfg)
        _, report = (run_delete if command == "delete" else run_update)(ecfg)
        print(format_edit_report(report, ecfg.out))

    return task


def _eval_task(cfg, options) -> None:
    from hpengine.distributed import run_eval_distributed
    from hpengine.jobs import summary_table

    ecfg = job_config(cfg)
    result = run_eval_distributed(ecfg)  # run_eval outside torchrun
    if result is None:  # a torchrun rank other than 0: rank 0 writes and prints
        return
    print(summary_table(result))
    _print_warnings(result)
    if ecfg.output:
        print(f"per-question records written to {ecfg.output}")
        from hpengine.eval import default_report_path

        print(f"report page: hpengine report {ecfg.output}  (writes {default_report_path(ecfg.output)})")


def _demo_task(cfg, options) -> None:
    from hpengine.jobs import format_prediction, format_report, run_demo, summary_table

    dcfg = job_config(cfg)
    build_report, result, engine = run_demo(dcfg, overwrite=options.get("overwrite", False))
    print(format_report(build_report, result["index"]))  # the folder run_demo wrote, not the corpus file
    print()
    llm = engine.reader is not None
    for rec in result["records"]:
        recalls = " ".join(f"{k}={'n/a' if v is None else format(v, '.2f')}" for k, v in rec.items()
                           if k.startswith("recall@"))
        note = f"   (gold: {rec['gold'][0]}; em={rec['em']:.0f} f1={rec['f1']:.2f} {recalls})"
        print(format_prediction(rec, engine.index, llm=llm, num_passages=3, num_facts=3, note=note))
        print()
    print(summary_table(result))
    ks = "/".join(k.split("@")[1] for k in result if k.startswith("recall@"))
    print(f"R@k ({ks}): the share of each question's gold passages found in its top k ranked passages.")
    print("EM/F1: the answer against the gold answers" + ("." if llm else
          "; without an LLM they score the best bridge entity, not an answer, so they are low by design: "
          "answers need model=qwen1.5b (or model.llm=PATH)."))
    _print_warnings(result)
    if result.get("report"):
        print(f"report page written to {result['report']}")


def _ask_questions(question: str, questions_file: str) -> list:
    """The questions of one ``ask``: the positional one, one per line of stdin (``-``), or the
    ``question`` fields of ``questions=FILE`` (read before any model loads)."""
    if questions_file:
        from hpengine.eval import load_questions

        if question:
            raise _user_error(f"ask takes one question or questions=FILE, not both (got {question!r} and "
                              f"questions={questions_file!r})")
        questions = [q.question for q in load_questions(questions_file)]
        if not questions:
            raise _user_error(f"questions={questions_file!r} has no questions (got 0 records)")
        return questions
    if question == "-":  # one question per line; blank lines are skipped
        questions = [line.strip() for line in sys.stdin if line.strip()]
        if not questions:
            raise _user_error("ask - reads one question per line from stdin (got no questions)")
        return questions
    if not question.strip():
        raise _user_error(f"the question is empty (got {question!r})")
    return [question]


def _ask_task_for(index_dir: str, question: str):
    def task(cfg, options) -> None:
        from hpengine.jobs import check_index_dir, format_prediction, make_engine

        if cfg.get("index"):
            raise _user_error(f"ask takes the index as its first argument, not index= (got index={cfg.index!r})")
        questions = _ask_questions(question, cfg.get("questions") or "")
        ecfg = job_config(cfg)
        ecfg.index = index_dir
        check_index_dir(index_dir, "INDEX")
        engine = make_engine(ecfg)  # start-up (models, index) is paid once for all the questions
        llm = engine.reader is not None
        size = ecfg.eval.batch_size
        for b in range(0, len(questions), size):
            for i, pred in enumerate(engine.answer(questions[b: b + size]), b):
                print(("\n" if i else "") + format_prediction(pred, engine.index, llm=llm))

    return task


def _report_command(args: list, debug: bool) -> None:
    from hpengine.jobs import report_main

    report_main(args)


def _grag_build_command(args: list, debug: bool) -> None:
    """``hpengine grag-build INDEX [key=value ...]``: :func:`hpengine.pipeline.grag_build.main` (its
    own checks, one-line errors and exit statuses); ``debug=true`` asks it for tracebacks."""
    from hpengine.jobs import grag_build

    saved = os.environ.get("HPENGINE_DEBUG")
    if debug:
        os.environ["HPENGINE_DEBUG"] = "1"
    try:
        status = grag_build.main(args)
    finally:
        if debug:
            if saved is None:
                os.environ.pop("HPENGINE_DEBUG", None)
            else:
                os.environ["HPENGINE_DEBUG"] = saved
    if status:
        raise SystemExit(status)


def _grag_build_usage() -> str:
    from hpengine.config import GragBuildConfig

    _, how, notes = COMMANDS["grag-build"]
    keys = [f"{f.name}={f.default}" for f in dataclasses.fields(GragBuildConfig) if f.name != "build"]
    return "\n".join([f"usage: {how}", *_wrap(notes.split("; keys:")[0], 2), "keys (GragBuildConfig, defaults):",
                      *_wrap(" ".join([*keys, "lock_timeout=SECONDS"]), 2),
                      "debug=true shows the traceback of an error."])


#: the commands that compose a config: their tasks
_TASKS = {"index": _index_task, "add": _add_task, "delete": _edit_task_for("delete"),
          "update": _edit_task_for("update"), "eval": _eval_task, "demo": _demo_task}
#: the commands that read their own arguments
_PLAIN = {"report": _report_command, "grag-build": _grag_build_command}


#: what an interrupted command leaves behind (every write of the jobs is atomic: a temporary file
#: or generation, then one os.replace)
_KEPT = {
    "index": "index saves are atomic, so out= holds what it held before or the complete new index",
    "add": "index saves are atomic, so out= holds the index as it was or with all the new passages",
    "delete": "index saves are atomic, so out= holds the index as it was or without all the passages named",
    "update": "index saves are atomic, so out= holds the index as it was or with all the new texts",
    "demo": "index saves are atomic, so the demo's index folder holds what it held before or the complete index",
    "ask": "ask writes nothing; the index is unchanged",
    "eval": "output= is written whole at the end, so it holds its old content or all the results; "
            "eval.checkpoint=FILE keeps finished batches, and a rerun resumes from them",
}


def _interrupted(command: str, args: list, debug: bool) -> None:
    """Ctrl-C: one line saying what was kept, exit status 130 (``debug``: the traceback)."""
    if debug:
        raise
    checkpoint = [a.split("=", 1)[1] for a in args if re.match(r"(?:\+\+|\+)?eval\.checkpoint=", a)]
    kept = _KEPT.get(command, "nothing was written")
    if command == "eval" and checkpoint and checkpoint[-1]:
        kept = f"the eval checkpoint {checkpoint[-1]} keeps the finished batches; rerun the same command to resume"
    for bar in list(getattr(getattr(sys.modules.get("tqdm.std"), "tqdm", None), "_instances", ())):
        bar.close()  # ends the progress-bar line the interrupt left open
    print(f"hpengine: interrupted; {kept}", file=sys.stderr)
    raise SystemExit(130)


def main(argv: list[str] | None = None) -> None:
    """``hpengine <command> [argument ...]`` (see :func:`usage`): one parser for every command, one
    error form (``hpengine: error: ...``, exit status 2)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in (*_HELP, "help"):
        print(usage())
        return
    command, rest = argv[0], argv[1:]
    before_dashes = rest[: rest.index("--")] if "--" in rest else rest
    debug = _debug_from_env() or any(a.lower() in {f"debug={v}" for v in _TRUE} for a in before_dashes)
    if command not in COMMANDS:
        _fail(_user_error(f"unknown command: choose one of {', '.join(sorted(COMMANDS))}; hpengine --help shows "
                          f"their usage (got {command!r})"), debug)
    if command in ("ask", "grag-build") and len(rest) == 1 and rest[0] in _HELP:
        print(_grag_build_usage() if command == "grag-build" else
              "\n".join([f"usage: {COMMANDS['ask'][1]}", *_wrap(COMMANDS["ask"][2], 2)]))
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        if command == "grag-build":
            rest, options = _split_cli_options(command, rest)
            debug = debug or options.get("debug", False)
        if command in _PLAIN:  # nothing to compose
            return _PLAIN[command](rest, debug)
        from hpengine.config import register_configs

        register_configs()  # the schemas, and engine/<name> for every method config class
        if command == "ask":
            index_dir, question, rest = split_ask_args(rest, _ask_keys())
            task = _ask_task_for(index_dir, question)
        else:
            task = _TASKS[command]
        config_name = _CONFIG_OF[command]
        rest, options = _split_cli_options(command, rest)
        from hpengine.distributed import check_torchrun_command

        check_torchrun_command(command)  # under torchrun only eval and index shard their work
        debug = debug or options.get("debug", False)
        if config_name in ("eval", "demo"):  # documented shortcut: retriever=NAME for engine=NAME
            rest = [("engine=" + a.split("=", 1)[1]) if a.startswith("retriever=") else a for a in rest]
        hydra_flags = command != "ask" and any(a.startswith("-") for a in rest)
        if not hydra_flags:  # compose and run here: every error is ours to report
            cfg = _compose(config_name, rest)
            return task(cfg, options)
    except KeyboardInterrupt:
        _interrupted(command, rest, debug)
    except Exception as exc:
        from hpengine.errors import UserError

        if isinstance(exc, UserError):
            _fail(exc, debug)
        raise
    # Hydra flags (--cfg job, -m sweeps, --info ...): Hydra parses the command line; each job
    # still checks its keys and values before it starts
    import hydra

    def hydra_task(cfg) -> None:
        from hpengine.errors import UserError

        try:
            task(cfg, options)
        except KeyboardInterrupt:
            _interrupted(command, rest, debug)
        except UserError as exc:
            _fail(exc, debug)

    sys.argv = [f"hpengine {command}", *rest]
    hydra.main(version_base=None, config_path=_conf_dir(), config_name=config_name)(hydra_task)()


if __name__ == "__main__":
    main()
