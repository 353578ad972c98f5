"""``hpengine`` command line, the one front door: ``hpengine <command> [argument ...]``.

The commands, their shapes and their keys are data in :mod:`hpengine._commands` (``hpengine --help``
lists the commands and the registered retrieval methods; ``hpengine COMMAND --help`` a command's
keys, each with its one-line doc and default, read from the config dataclasses). ``index``,
``add``, ``delete``, ``update``, ``ask``, ``eval`` and ``demo`` compose a primary config in
``conf/`` with ``key=value`` overrides; ``report`` and ``grag-build`` read their own keys. The index
folder is the first argument of every command that takes one (``hpengine eval IDX questions=...``);
``index=`` / ``out=`` say the same. A retrieval method is the config-group option ``engine=NAME``
(``retriever=NAME`` for short) of every method config class (:func:`hpengine.config.method_configs`).

This module sits above every layer (nothing in the package imports it) and is the only one (with
benchmarks/) that touches Hydra: it composes YAML on top of the typed schemas, converts to
dataclasses and calls plain library functions. It imports neither torch nor Hydra until a
command runs, so ``--help`` and an error in the arguments answer at once.

Errors: every key is checked before anything is composed (an unknown key names the closest valid
one; a key a command would ignore is refused), then every value (``__post_init__`` checks,
devices), then every path, all before any model loads; a value given on the command line is taken
as it is, never interpolated (``${...}`` stays text). A :class:`~hpengine.errors.UserError` is
printed as one line ``hpengine: error: ...`` with exit status 2 and no traceback, which
``HPENGINE_DEBUG=1`` or ``debug=true`` shows. Other exceptions are internal errors and keep
their traceback.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys

from hpengine._commands import COMMANDS, OVERRIDE, check_overrides, closest, command_help, conf_dir
from hpengine._commands import escape_interpolation, method_of, split_positional, usage
from hpengine._console import TRUE as _TRUE
from hpengine._console import debug_from_env as _debug_from_env
from hpengine._console import fail as _fail
from hpengine._console import one_line as _one_line
from hpengine._console import read_switch as _read_switch
from hpengine._console import warn

__all__ = ["COMMANDS", "job_config", "main", "split_ask_args", "usage"]

#: commands that compose a primary config (``conf/<name>.yaml``); the others read their own arguments
_CONFIG_OF = {name: spec.conf for name, spec in COMMANDS.items() if spec.conf}
_HELP = ("-h", "--help")


def _conf_dir() -> str:
    return str(conf_dir())


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
        if eq and key in ("debug", "overwrite"):
            takes = [name for name, spec in COMMANDS.items() if key in spec.options]
            if key not in COMMANDS[command].options:
                raise _user_error(f"{key}= applies to {' and '.join(takes)} only (got {a!r} for {command})")
            options[key] = _read_switch(key, value)
        else:
            rest.append(a)
    return rest, options


def is_override(arg: str, top_keys) -> bool:
    """Whether an ``ask`` argument is a config override: ``[+|++|~]KEY...=VALUE`` (or ``~KEY``)
    whose first key component is one of ``top_keys`` (the ask config's keys, ``retriever`` and
    this module's options). Anything else (a question with ``=`` in it, one starting with ``-``)
    is positional."""
    match = OVERRIDE.match(arg)
    if match is None or re.split(r"[./]", match.group("key"))[0] not in top_keys:
        return False
    return bool(match.group("eq")) or arg.startswith("~")


def split_ask_args(args: list, top_keys) -> tuple[str, str, list]:
    """``(index, question, overrides)`` of ``hpengine ask`` arguments: the first argument that is
    not an override is the index, the second the question (``""``: none, read from the terminal
    or from ``questions=FILE``); everything after ``--`` is positional.

    Raises:
        UserError: no index, or more than two positional arguments.
    """
    positional, overrides = [], []
    for i, a in enumerate(args):
        if a == "--":
            positional.extend(args[i + 1:])
            break
        (overrides if is_override(a, top_keys) else positional).append(a)
    if len(positional) == 1:  # hpengine ask IDX [questions=FILE]: the questions come from elsewhere
        return positional[0], "", overrides
    if len(positional) != 2:
        got = "no arguments" if not positional else " ".join(repr(p) for p in positional)
        hint = next((f"; {p.split('=', 1)[0]!r} is no key{closest(p.split('=', 1)[0], top_keys)}"
                     for p in positional[2:] if re.match(r"^[A-Za-z_][\w.\-]*=", p)
                     and closest(p.split("=", 1)[0].split(".")[0], top_keys)), "")
        raise _user_error('ask takes IDX and at most one question: hpengine ask IDX ["question" | - | '
                          'questions=FILE] [key=value ...]; quote the question, and put it after -- if it looks '
                          f'like key=value (got {got}){hint}')
    return positional[0], positional[1], overrides


def _ask_keys() -> set:
    """The first components of the keys ``ask`` reads (its refused keys too: they are refused by
    name, not taken for a question)."""
    from hpengine.config import EvalJobConfig

    fields = {f.name for f in dataclasses.fields(EvalJobConfig)}
    return fields | {"hydra", "retriever", "debug", "overwrite"}


def _with_positional_index(command: str, args: list) -> list:
    """``args`` with the command's positional index folder as its key (``eval IDX`` ->
    ``index=IDX``, ``add IDX`` -> ``out=IDX``).

    Raises:
        UserError: more than one positional argument, or an index given both ways, differently.
    """
    key = COMMANDS[command].positional
    positional, rest = split_positional(command, args)
    if not positional:
        return rest
    shape = COMMANDS[command].usage
    if key is None or len(positional) > 1:
        extra = positional if key is None else positional[1:]
        raise _user_error(f"{command} takes {'no positional argument' if key is None else 'one index folder'} "
                          f"(usage: {shape}); every other argument is KEY=VALUE "
                          f"(got {' '.join(repr(p) for p in extra)})")
    given = [a.split("=", 1)[1] for a in rest if re.match(rf"(?:\+\+|\+)?{key}=", a)]
    other = next((g for g in given if g != positional[0]), None)  # every one, not only the last
    if other is not None:
        raise _user_error(f"{command} takes one index folder, as its first argument or as {key}= "
                          f"(got {positional[0]!r} and {key}={other!r})")
    return [f"{key}={positional[0]}", *[a for a in rest if not re.match(rf"(?:\+\+|\+)?{key}=", a)]]


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
            raise _user_error(f"unknown config key {full!r}: {schema.__name__} has no field {key!r}"
                              f"{closest(key, allowed)} (valid: {', '.join(sorted(allowed))})")
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
    if value == "cpu":  # every machine has it; no need to load torch to say so
        return
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
    extractor = getattr(obj, "extractor", None)
    if extractor is not None and extractor.kind == "llm" and not extractor.llm_model:
        raise UserError("extractor=llm needs extractor.llm_model=PATH, a local HF checkpoint folder (or the "
                        "HPENGINE_LLM environment variable) (got '')")
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
        warn(text)


def _index_task(cfg, options) -> None:
    from hpengine.distributed import run_index_distributed
    from hpengine.jobs import format_report

    icfg = job_config(cfg)
    built = run_index_distributed(icfg, overwrite=options.get("overwrite", False))  # run_index outside torchrun
    if built is None:  # a torchrun rank other than 0: rank 0 saves and prints
        return
    print(format_report(built[1], icfg.out))


def _add_task(cfg, options) -> None:
    from hpengine.jobs import format_add_report, run_add

    icfg = job_config(cfg)
    _, report = run_add(icfg)
    print(format_add_report(report, icfg.out))


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


def _text_question(text: str, where: str) -> str:
    """``text`` stripped, refused when it is not valid text (undecodable bytes read from stdin)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogateescape") if "\udc80" <= max(text) else text.encode("utf-8", "replace")
        raise _user_error(f"{where} is not UTF-8 text (got {raw.strip()[:60]!r})") from None
    return text.strip()


def _stdin_questions() -> list:
    """One question per line of stdin; blank lines are skipped."""
    try:
        lines = sys.stdin.readlines()
    except UnicodeDecodeError as exc:
        raise _user_error(f"stdin is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    questions = [_text_question(line, f"line {i} of stdin") for i, line in enumerate(lines, 1)]
    return [q for q in questions if q]


def _ask_questions(question: str, questions_file: str, max_questions: int) -> list | None:
    """The questions of one ``ask``, read before any model loads: the positional one, one per line
    of stdin (``-``), or the ``question`` fields of ``questions=FILE``; the first ``max_questions``
    of them when that is not 0. ``None``: no question given, so they come from the terminal."""
    if questions_file:
        from hpengine.eval import load_questions

        if question:
            raise _user_error(f"ask takes one question or questions=FILE, not both (got {question!r} and "
                              f"questions={questions_file!r})")
        questions = [q.question for q in load_questions(questions_file)]
        if not questions:
            raise _user_error(f"questions={questions_file!r} has no questions (got 0 records)")
    elif question == "-":
        questions = _stdin_questions()
        if not questions:
            raise _user_error("ask - reads one question per line from stdin (got no questions)")
    elif question == "":
        return None
    else:
        if not question.strip():
            raise _user_error(f"the question is empty (got {question!r})")
        questions = [question]
    return questions[:max_questions] if max_questions else questions


def _read_question(interactive: bool) -> str | None:
    """The next question from the terminal (``None`` at an empty line or end of input)."""
    prompt = "question> "
    if interactive:  # a terminal on both ends: line editing, the prompt beside the answers
        try:
            line = input(prompt)
        except EOFError:
            print()
            return None
    else:  # piped: the prompt goes to stderr, so stdout holds the answers alone
        print(prompt, end="", file=sys.stderr, flush=True)
        try:
            line = sys.stdin.readline()
        except UnicodeDecodeError as exc:
            raise _user_error(f"stdin is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return line.strip() or None


def _ask_loop(engine, llm: bool) -> None:
    """Answer questions from the terminal one at a time with the loaded ``engine`` until an empty
    line or end of input; a question that is not text is refused and the loop goes on."""
    interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if interactive:
        try:
            import readline  # noqa: F401  (input() gains line editing and history)
        except ImportError:
            pass
    print(f"hpengine: index loaded ({engine.index.num_passages} passages); ask a question, an empty line or "
          "Ctrl-D quits", file=sys.stderr)
    while True:
        question = _read_question(interactive)
        if question is None:
            if not interactive:
                print(file=sys.stderr)  # ends the last prompt's line
            return
        try:
            question = _text_question(question, "the question")
        except Exception as exc:  # the user's line: say so, keep the engine
            print(f"hpengine: error: {_one_line(exc)}", file=sys.stderr)
            continue
        print(_format(engine, engine.answer([question])[0], llm), flush=True)
        print(flush=True)


def _format(engine, pred, llm: bool) -> str:
    """One answered question as ``ask`` prints it."""
    from hpengine.jobs import format_prediction

    return format_prediction(pred, engine.index, llm=llm)


def _ask_task_for(index_dir: str, question: str):
    def task(cfg, options) -> None:
        from hpengine.jobs import check_index_dir, make_engine

        if cfg.get("index"):
            raise _user_error(f"ask takes the index as its first argument, not index= (got index={cfg.index!r})")
        ecfg = job_config(cfg)
        questions = _ask_questions(question, ecfg.questions, ecfg.eval.max_questions)
        ecfg.index = index_dir
        check_index_dir(index_dir, "IDX")
        engine = make_engine(ecfg)  # start-up (models, index) is paid once for all the questions
        llm = engine.reader is not None
        if questions is None:
            return _ask_loop(engine, llm)
        size = ecfg.eval.batch_size
        for b in range(0, len(questions), size):
            for i, pred in enumerate(engine.answer(questions[b: b + size]), b):
                print(("\n" if i else "") + _format(engine, pred, llm))

    return task


def _check_report_keys(args: list) -> None:
    """The ``key=value`` arguments of ``report`` name its keys (an argument that is an existing file
    is a run file, ``=`` or not)."""
    from hpengine.config import ReportConfig

    keys = {f.name for f in dataclasses.fields(ReportConfig)} | {"debug"}
    for arg in args:
        key, eq, _ = arg.partition("=")
        if eq and key not in keys and OVERRIDE.match(arg) and not os.path.exists(arg):
            raise _user_error(f"unknown key {key!r} for hpengine report{closest(key, keys)}; hpengine report "
                              f"--help lists its keys (got {arg!r})")


def _report_command(args: list, debug: bool) -> None:
    from hpengine.jobs import report_main

    _check_report_keys(args)
    report_main(args)


def _grag_build_command(args: list, debug: bool) -> None:
    """``hpengine grag-build IDX [key=value ...]``: :func:`hpengine.jobs.grag_build.main` (its own
    checks, one-line errors and exit statuses) once every key is known; ``debug=true`` asks it for
    tracebacks."""
    from hpengine.jobs import grag_build

    args = _with_positional_index("grag-build", args)
    check_overrides("grag-build", args)
    index = [a.split("=", 1)[1] for a in args if a.startswith("index=")]
    args = index + [a for a in args if not a.startswith("index=")]  # grag_build.main takes IDX first
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


def _train_command(args: list) -> None:
    """``hpengine train IDX questions=FILE [IDX2 questions=FILE2 ...] out=FILE [key=value ...]``: its
    own grammar (each questions= pairs with the index before it), every key checked first."""
    from hpengine.jobs import format_train_report, parse_train_args, run_train

    cfg = parse_train_args(args)
    _check_device("device", cfg.device)
    report = run_train(cfg)  # its warnings on stderr as they arise, before the work
    print(format_train_report(report, cfg.out))


#: the commands that compose a config: their tasks
_TASKS = {"index": _index_task, "add": _add_task, "delete": _edit_task_for("delete"),
          "update": _edit_task_for("update"), "eval": _eval_task, "demo": _demo_task}
#: the commands that read their own arguments
_PLAIN = {"report": _report_command, "grag-build": _grag_build_command, "train": _train_command}

_ATOMIC = "index saves are atomic, so the index folder holds"
#: what an interrupted command leaves behind (every write of the jobs is atomic: a temporary file
#: or generation, then one os.replace), and whether the same command may simply run again
_KEPT = {
    "index": f"{_ATOMIC} what it held before or the complete new index; rerun the same command to resume from "
             "the finished shards",
    "add": f"{_ATOMIC} the index as it was or with all the new passages; the same command is safe to rerun (it "
           "skips passages already present)",
    "delete": f"{_ATOMIC} the index as it was or without all the passages named; the same command is safe to rerun "
              "(a title or record that is gone is not taken again)",
    "update": f"{_ATOMIC} the index as it was or with all the new texts; the same command is safe to rerun",
    "demo": f"{_ATOMIC} what it held before or the complete index; the same command is safe to rerun",
    "ask": "ask writes nothing; the index is unchanged",
    "eval": "output= is written whole at the end, so it holds its old content or all the results; the same command "
            "is safe to rerun (with eval.checkpoint=FILE a rerun resumes from the finished batches)",
    "train": "the ranker file is written whole at the end, so it holds its old content or the new ranker; the same "
             "command is safe to rerun",
}


def _given(args: list, key: str) -> str | None:
    """The last value of ``key=`` in ``args`` (``+key=`` too), else None."""
    found = [a.split("=", 1)[1] for a in args if re.match(rf"(?:\+\+|\+)?{re.escape(key)}=", a)]
    return found[-1] if found else None


def _kept(command: str, args: list) -> str:
    """What an interrupted ``command`` with ``args`` kept, and whether it is safe to rerun as it is."""
    checkpoint = _given(args, "eval.checkpoint")
    if command == "eval" and checkpoint:
        return f"the eval checkpoint {checkpoint} keeps the finished batches; rerun the same command to resume"
    if command == "delete" and _given(args, "ids") not in (None, "", "null"):
        kept = f"{_ATOMIC} the index as it was or without all the passages named"
        if _given(args, "expect_generation") not in (None, "", "null"):
            return f"{kept}; the same command is safe to rerun (expect_generation= refuses it once the delete is done)"
        return (f"{kept}; the same command is safe to rerun: if the delete finished, the rerun sees it is the "
                "index's last edit and changes nothing (ids= are positions of one generation; expect_generation=N "
                "refuses any other)")
    return _KEPT.get(command, "nothing was written")


def _interrupted(command: str, args: list, debug: bool) -> None:
    """Ctrl-C: one line saying what was kept and whether the same command may run again, exit
    status 130 (``debug``: the traceback)."""
    if debug:
        raise
    for bar in list(getattr(getattr(sys.modules.get("tqdm.std"), "tqdm", None), "_instances", ())):
        bar.close()  # ends the progress-bar line the interrupt left open
    print(f"hpengine: interrupted; {_kept(command, args)}", file=sys.stderr)
    raise SystemExit(130)


def _emit(text: str) -> None:
    """Print a help text; a reader that closed the pipe early (``hpengine --help | head``) is no error."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush then writes nowhere


def _help(command: str, args: list) -> str:
    """``hpengine COMMAND --help [retriever=METHOD]``."""
    from hpengine.config import method_configs

    method = method_of(command, args) if COMMANDS[command].conf in ("eval", "demo") else None
    return command_help(command, method if method in method_configs() else None)


def _composed_args(command: str, rest: list) -> tuple:
    """``(task, overrides, options)`` of a command that composes a config, every key checked."""
    if command == "ask":
        index_dir, question, rest = split_ask_args(rest, _ask_keys())
        task = _ask_task_for(index_dir, question)
        rest, options = _split_cli_options(command, rest)
    else:
        task = _TASKS[command]
        rest, options = _split_cli_options(command, rest)
        rest = _with_positional_index(command, rest)
    check_overrides(command, rest)
    if os.environ.get("WORLD_SIZE", "1") not in ("", "1"):  # torchrun: importing hpengine.distributed loads torch
        from hpengine.distributed import check_torchrun_command

        check_torchrun_command(command)  # under torchrun only eval and index shard their work
    rest = [escape_interpolation(a) for a in rest]  # a value given here is text, never an interpolation
    if _CONFIG_OF[command] in ("eval", "demo"):  # documented shortcut: retriever=NAME for engine=NAME
        rest = [re.sub(r"^(\+\+|\+)?retriever=", r"\1engine=", a) for a in rest]
    return task, rest, options


def main(argv: list[str] | None = None) -> None:
    """``hpengine <command> [argument ...]`` (see :func:`usage`): one parser for every command, one
    error form (``hpengine: error: ...``, exit status 2)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in (*_HELP, "help"):
        return _emit(usage())
    command, rest = argv[0], argv[1:]
    before_dashes = rest[: rest.index("--")] if "--" in rest else rest
    debug = _debug_from_env() or any(a.lower() in {f"debug={v}" for v in _TRUE} for a in before_dashes)
    if command not in COMMANDS:
        _fail(_user_error(f"unknown command{closest(command, COMMANDS)}: choose one of {', '.join(sorted(COMMANDS))}; "
                          f"hpengine --help shows their usage (got {command!r})"), debug)
    if any(a in _HELP for a in before_dashes):
        return _emit(_help(command, before_dashes))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        if command == "report":  # its run files and keys; report_main reads debug= itself
            return _report_command(rest, debug)
        if command == "grag-build":
            rest, options = _split_cli_options(command, rest)
            return _grag_build_command(rest, debug or options.get("debug", False))
        if command == "train":
            rest, _ = _split_cli_options(command, rest)
            return _train_command(rest)
        task, rest, options = _composed_args(command, rest)
        debug = debug or options.get("debug", False)
        from hpengine.config import register_configs

        register_configs()  # the schemas, and engine/<name> for every method config class
        config_name = _CONFIG_OF[command]
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
