"""Evaluation reports: ``hpengine eval`` outputs in, one self-contained HTML page out.

The page (:func:`build_report`) holds a summary table (one row per run, with the Recall@k ceiling
that gold passages missing from the index impose), Recall@k curves (k = 1..10), a breakdown by
question type, the per-hop funnel of runs with diagnostics (or how to record it) and a
per-question browser. Plots are matplotlib figures inlined as SVG; the browser is a small
inline script over the runs' records embedded as JSON. Nothing is fetched when the page opens.

This module assembles and writes the page. The parts, one concern each: ``_report_check`` reads
and checks run files, ``_report_summary`` computes the per-run numbers, ``_report_browser`` the
per-question data, ``_report_plots`` draws, ``_report_page`` lays out the HTML and ``_report_assets``
holds its style sheet and script. Library code: no Hydra, explicit arguments.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

from hpengine.eval._report_browser import browser_records, run_measure
from hpengine.eval._report_check import check_run, check_same_questions, load_run
from hpengine.eval._report_data import ReportData
from hpengine.eval._report_summary import (differing_settings, facet_breakdown, make_runs, question_type,
                                           recall_curves, run_warnings, summary_rows)


def default_report_path(run_path: str | os.PathLike) -> str:
    """Where ``hpengine report RUN.json`` writes its page: ``RUN.html`` beside the run file.

    Example:
        >>> default_report_path("runs/dense.json")
        'runs/dense.html'
    """
    path = Path(run_path)
    return str(path.with_suffix(".html") if path.suffix == ".json" else path.with_name(path.name + ".html"))


# --- assembling --------------------------------------------------------------------------------


def _questions_path(result: dict, run_path: str) -> str | None:
    config = result.get("config") or {}
    if "questions" not in config:
        return None
    given = config["questions"]
    if not given:  # evaluate()'s default: the built-in demo questions
        from hpengine.graph import builtin_questions_path

        return str(builtin_questions_path())
    candidates = [given] if os.path.isabs(given) else [given, os.path.join(os.path.dirname(run_path), given)]
    return next((c for c in candidates if os.path.isfile(c)), None)


def _read_questions(runs: list, questions_path: str | None) -> tuple:
    """``(questions, notes)``: the question records of ``questions_path``, else of the first run's
    ``config.questions``; none (and a note saying what is not shown) when there is no such file."""
    from hpengine.eval._questions import load_questions

    path = questions_path or _questions_path(runs[0].result, runs[0].path)
    if path:
        return load_questions(path), []
    given = (runs[0].result.get("config") or {}).get("questions")
    return [], [f"question file {given!r} not found: gold passages and question types are not shown "
                f"(pass questions=PATH)" if given else
                "the run has no question file in its config: gold passages are not shown"]


def collect(runs: list, questions: list | None = None, questions_path: str | None = None) -> ReportData:
    """Compute everything the page shows (:class:`ReportData`) from checked, same-question runs.

    Args:
        runs: :class:`Run` objects (see :func:`make_runs`); at least one.
        questions: the question records (``hpengine.eval.Question``); default: read from
            ``questions_path``, else from the first run's ``config.questions``.
        questions_path: a question file to read when ``questions`` is not given.
    """
    notes = []
    if questions is None:
        questions, notes = _read_questions(runs, questions_path)
    notes += run_warnings(runs)
    by_id = {q.id: q for q in questions}
    facets_by_id = {str(r["id"]): question_type(str(r["id"]), by_id[str(r["id"])].meta
                                                if str(r["id"]) in by_id else None) for r in runs[0].records}
    curves = recall_curves(runs)
    return ReportData(runs=runs, rows=summary_rows(runs, curves), differing=differing_settings(runs),
                      curves=curves, facets=facet_breakdown(runs, facets_by_id),
                      funnels=[run.result.get("hop_diagnostics") for run in runs],
                      questions=browser_records(runs, by_id, facets_by_id),
                      measures=[run_measure(run.result) for run in runs], notes=notes)


def build_report(results: list, *, paths: list | None = None, names: list | None = None,
                 questions: list | None = None, questions_path: str | None = None,
                 title: str = "hpengine evaluation report") -> str:
    """One self-contained HTML page comparing ``hpengine eval`` results.

    Args:
        results: eval outputs (dicts as written by ``run_eval``); all over the same questions.
        paths: the files they came from (shown on the page, and used to find a relative
            ``config.questions``); default none.
        names: labels per run; default: retriever (+ LLM), with the file stem when repeated.
        questions: the question records; default: read from ``questions_path`` or the first
            run's ``config.questions`` (the built-in demo questions when that is empty).
        questions_path: question file to read when ``questions`` is not given.
        title: the page title.

    Returns:
        The HTML text.

    Raises:
        hpengine.errors.UserError: no results, a result that is not an eval output (naming the field),
            or runs over different question sets (naming them).
    """
    from hpengine.errors import UserError

    if not results:
        raise UserError("a report needs at least one run (got none)")
    paths = list(paths) if paths is not None else [""] * len(results)
    for i, (result, path) in enumerate(zip(results, paths)):
        check_run(result, path or f"run {i + 1}")
    runs = make_runs(results, paths, names)
    check_same_questions(runs)
    from hpengine.eval._report_page import render_page

    return render_page(collect(runs, questions, questions_path), title=title)


def check_report_out(out: str | os.PathLike, inputs: list = (), key: str = "out") -> str:
    """Refuse a page path that cannot take the page: empty, a folder, in a folder that does not
    exist or is not writable, or one of the ``inputs`` (run or question files). Returns ``out``.

    Raises:
        hpengine.errors.UserError: naming ``key=`` and the path (``OutputExistsError`` for a
            folder or an input in the way).
    """
    from hpengine.errors import OutputExistsError, UserError

    out = os.fspath(out)
    if not out:
        raise UserError(f"{key}= must name the HTML file to write (got '')")
    if os.path.isdir(out):
        raise OutputExistsError(f"{key}={out!r} is a folder; name a file such as "
                                f"{os.path.join(out, 'report.html')!r}")
    if os.path.lexists(out) and not os.path.isfile(out):
        raise OutputExistsError(f"{key}={out!r} exists and is not a regular file; refusing to replace it")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise UserError(f"{key}={out!r}: folder {parent} does not exist (create it, or name a file in an "
                        f"existing folder)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{key}={out!r}: folder {parent} is not writable")
    for given in inputs:
        given = os.fspath(given) if given else ""
        if given and os.path.exists(given) and os.path.exists(out) and os.path.samefile(given, out):
            raise OutputExistsError(f"{key}={out!r} is the input file {given}; refusing to overwrite an input "
                                    f"(name another file, such as {default_report_path(given)!r})")
    return out


def _write_atomic(out: str, text: str, key: str = "out") -> None:
    """``text`` to ``out`` through a uniquely named temporary file in the same folder and
    ``os.replace``: readers see the old page or the whole new one; the temporary file is
    removed on any failure."""
    from hpengine.errors import UserError

    folder, name = os.path.split(os.path.abspath(out))
    tmp = os.path.join(folder, f".{name}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, OSError):
            raise UserError(f"{key}={out!r}: cannot write the page ({err.strerror or err})") from err
        raise


def write_report(runs: list, out: str | os.PathLike | None = None, **kwargs) -> str:
    """Write :func:`build_report` of ``runs`` (run-file paths or result dicts) to ``out``
    (default: :func:`default_report_path` of the first run file), atomically; returns the path.

    Everything is checked before the page is computed: ``out`` (:func:`check_report_out`), then
    every run file in full (:func:`load_run`).

    Raises:
        hpengine.errors.UserError: a bad ``out``, run file or question file (one line naming it).
    """
    from hpengine.errors import UserError

    paths = [os.fspath(r) if isinstance(r, (str, os.PathLike)) else "" for r in runs]
    if out is None:
        if not paths or not paths[0]:
            raise UserError("out= is required when the first run is not a file (got an in-memory result)")
        out = default_report_path(paths[0])
    out = check_report_out(out, [*paths, kwargs.get("questions_path")])
    results = [load_run(p) if p else r for r, p in zip(runs, paths)]
    html = build_report(results, paths=paths, **kwargs)
    _write_atomic(out, html)
    return out


__all__ = ["build_report", "check_report_out", "collect", "default_report_path", "write_report"]
