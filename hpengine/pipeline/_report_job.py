"""The ``report`` job: ``hpengine report RUN.json [RUN2.json ...] [out=report.html] [key=value ...]``.

A plain command (no Hydra: there is nothing to compose), parsed here and handed to
:func:`hpengine.eval._report.write_report`. User errors are one line on stderr and exit 2.
"""
from __future__ import annotations

import os
import sys

REPORT_USAGE = ("usage: hpengine report RUN.json [RUN2.json ...] [out=report.html] [names=a,b,...] "
                "[questions=dev.json] [title=TEXT]\n"
                "  RUN.json: outputs of `hpengine eval ... output=RUN.json` over the same questions; "
                "out= defaults to the first RUN with .html")
_KEYS = ("out", "names", "questions", "title")


def parse_report_args(argv: list) -> tuple:
    """``(run_paths, options)`` from the command line; ``ValueError`` with a one-line message."""
    runs, options = [], {}
    for arg in argv:
        key, _, value = arg.partition("=")
        if "=" in arg and (key in _KEYS or not os.path.exists(arg)):
            if key not in _KEYS:
                raise ValueError(f"unknown option {key}= (choose from {', '.join(k + '=' for k in _KEYS)}) "
                                 f"(got {arg!r})")
            options[key] = value
        else:
            runs.append(arg)
    if not runs:
        raise ValueError("no run files given (got none; pass one or more `hpengine eval` outputs)")
    if "names" in options:
        options["names"] = [n.strip() for n in options["names"].split(",")]
    return runs, options


def run_report(argv: list) -> str:
    """Write the page for ``argv`` (see :data:`REPORT_USAGE`); returns its path."""
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
    """Entry point of ``hpengine report``: one line per user error, exit status 2."""
    if not argv or argv[0] in ("-h", "--help"):
        print(REPORT_USAGE)
        return
    try:
        path = run_report(argv)
    except (ValueError, FileNotFoundError, IsADirectoryError, PermissionError) as err:
        print(f"hpengine report: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"report written to {path}")


__all__ = ["REPORT_USAGE", "parse_report_args", "report_main", "run_report"]
