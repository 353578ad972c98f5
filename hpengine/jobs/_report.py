"""The ``report`` job: ``hpengine report RUN.json [RUN2.json ...] [out=report.html] [key=value ...]``.

A plain command (no Hydra: there is nothing to compose), parsed here and handed to
:func:`hpengine.eval._report.write_report`. User errors are one line ``hpengine: error: ...`` on
stderr and exit 2, as for every command.
"""
from __future__ import annotations

import os

from hpengine._console import TRUE as _TRUE
from hpengine._console import read_switch

REPORT_USAGE = ("usage: hpengine report RUN.json [RUN2.json ...] [out=report.html] [names=a,b,...] "
                "[questions=dev.json] [title=TEXT] [debug=true]\n"
                "  RUN.json: outputs of `hpengine eval ... output=RUN.json` over the same questions; "
                "out= defaults to the first RUN with .html")
_KEYS = ("out", "names", "questions", "title", "debug")


def parse_report_args(argv: list) -> tuple:
    """``(run_paths, options)`` from the command line.

    Raises:
        hpengine.errors.UserError: an unknown option, a bad ``debug=`` value, or no run file.
    """
    from hpengine.errors import UserError

    runs, options = [], {}
    for arg in argv:
        key, _, value = arg.partition("=")
        if "=" in arg and (key in _KEYS or not os.path.exists(arg)):
            if key not in _KEYS:
                raise UserError(f"unknown option {key}= (choose from {', '.join(k + '=' for k in _KEYS)}) "
                                f"(got {arg!r})")
            options[key] = value
        else:
            runs.append(arg)
    if "debug" in options:
        options["debug"] = read_switch("debug", options["debug"])
    if not runs:
        raise UserError("no run files given (got none; pass one or more `hpengine eval` outputs)")
    if "names" in options:
        options["names"] = [n.strip() for n in options["names"].split(",")]
    return runs, options


def run_report(argv: list) -> str:
    """Write the page for ``argv`` (see :data:`REPORT_USAGE`); returns its path. Every argument, the
    page path and every run file are checked before the page is computed (:func:`write_report`)."""
    from hpengine.eval import write_report

    runs, options = parse_report_args(argv)
    kwargs = {}
    if "names" in options:
        kwargs["names"] = options["names"]
    if "questions" in options:
        kwargs["questions_path"] = options["questions"]
    if "title" in options:
        kwargs["title"] = options["title"]
    return write_report(runs, options.get("out"), **kwargs)


def report_main(argv: list) -> None:
    """Entry point of ``hpengine report``: a user error is one line ``hpengine: error: ...`` on stderr
    and exit status 2, like every command (``debug=true`` or ``HPENGINE_DEBUG=1``: the traceback)."""
    from hpengine.errors import UserError
    from hpengine._console import debug_from_env as _debug_from_env
    from hpengine._console import fail as _fail

    if not argv or argv[0] in ("-h", "--help"):
        print(REPORT_USAGE)
        return
    debug = _debug_from_env() or any(a.partition("=")[0] == "debug" and a.partition("=")[2].strip().lower() in _TRUE
                                     for a in argv)
    try:
        path = run_report(argv)
    except UserError as err:
        _fail(err, debug)
    print(f"report written to {path}")


__all__ = ["REPORT_USAGE", "parse_report_args", "report_main", "run_report"]
