"""Evaluation reports: ``hpengine eval`` outputs in, one self-contained HTML page out.

The page (:func:`build_report`) holds a summary table (one row per run, with the Recall@k ceiling
that gold passages missing from the index impose), Recall@k curves (k = 1..10), a breakdown by
question type, the per-hop funnel of runs with diagnostics (or how to record it) and a
per-question browser. Plots are matplotlib figures inlined as SVG; the browser is a small
inline script over the runs' records embedded as JSON. Nothing is fetched when the page opens.

This module computes the numbers; ``_report_plots`` draws them and ``_report_page`` lays out
the HTML. Library code: no Hydra, explicit arguments.

Run files are read in one format only: ``"format": "hpengine-eval"`` at ``"format_version"``
:data:`EVAL_FORMAT_VERSION`, as ``evaluate()`` writes it; any other is refused (rerun the eval).
"""
from __future__ import annotations

import json
import math
import os
import re
import uuid
from pathlib import Path
from typing import Any

from hpengine.eval._report_data import (CURVE_KS, EVAL_FORMAT_NAME, EVAL_FORMAT_VERSION, TABLE_KS, ReportData,
                                        Run)

#: Run-file keys a report needs; anything else is optional.
_REQUIRED_KEYS = ("num_questions", "records")
_MUSIQUE_HOPS = re.compile(r"^(\d+)hop")


def default_report_path(run_path: str | os.PathLike) -> str:
    """Where ``hpengine report RUN.json`` writes its page: ``RUN.html`` beside the run file.

    Example:
        >>> default_report_path("runs/dense.json")
        'runs/dense.html'
    """
    path = Path(run_path)
    return str(path.with_suffix(".html") if path.suffix == ".json" else path.with_name(path.name + ".html"))


def load_run(path: str | os.PathLike) -> dict:
    """Read one ``hpengine eval`` output file and check it fully (:func:`check_run`, non-finite
    metrics refused: a NaN recall in a file is corruption).

    Raises:
        hpengine.errors.InputNotFoundError: the file does not exist.
        hpengine.errors.UserError: a folder, unreadable, not UTF-8, not JSON, not an eval output of
            this format version (:func:`check_format`), or a field of the wrong type (names the file,
            the record index and the field).
    """
    from hpengine.errors import InputNotFoundError, UserError, utf8_error

    path = os.fspath(path)
    if os.path.isdir(path):
        raise UserError(f"run file {path} is a folder; name an `hpengine eval output=...` file")
    if not os.path.isfile(path):
        raise InputNotFoundError(f"run file {path} does not exist")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise UserError(f"run file {path} cannot be read ({err.strerror or err})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise utf8_error(path, data, err) from None
    try:
        result = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None
    check_run(result, path, finite=True)
    return result


# --- checking a run: every field the report reads, with its type -------------------------------


def _kind(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return "null" if value is None else type(value).__name__


class _Checker:
    """Type checks of one run; each failure is one :class:`~hpengine.errors.UserError` naming
    ``where`` and the field (``records[3].retrieved``)."""

    def __init__(self, where: str, finite: bool):
        self.where, self.finite = where, finite

    def fail(self, field_name: str, expected: str, value: Any):
        from hpengine.errors import UserError

        raise UserError(f"{self.where}: {field_name} must be {expected} (got {_kind(value)})")

    def number(self, field_name: str, value: Any, *, integer: bool = False, optional: bool = True) -> None:
        if value is None and optional:
            return
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            self.fail(field_name, ("an integer" if integer else "a number") + (" or null" if optional else ""), value)
        if self.finite and isinstance(value, float) and not math.isfinite(value):
            self.fail(field_name, "a finite number" + (" or null" if optional else ""), value)

    def text(self, field_name: str, value: Any, optional: bool = True) -> None:
        if not (isinstance(value, str) or (optional and value is None)):
            self.fail(field_name, "a string" + (" or null" if optional else ""), value)

    def texts(self, field_name: str, value: Any, what: str = "strings") -> None:
        if not isinstance(value, list):
            self.fail(field_name, f"a list of {what}", value)
        for i, item in enumerate(value):
            self.text(f"{field_name}[{i}]", item, optional=False)

    def mapping(self, field_name: str, value: Any, optional: bool = True) -> bool:
        """Whether ``value`` is a dict (``False`` for an allowed null)."""
        if value is None and optional:
            return False
        if not isinstance(value, dict):
            self.fail(field_name, "an object" + (" or null" if optional else ""), value)
        return True

    def listing(self, field_name: str, value: Any, what: str) -> None:
        if not isinstance(value, list):
            self.fail(field_name, f"a list of {what}", value)


_TOP_NUMBERS = ("em", "f1", "questions_per_second", "wall_seconds", "peak_rss_mb")
_RECORD_NUMBERS = ("em", "f1")
_PATH_STATS = ("questions", "paths_per_question", "distinct_paths_per_question", "steps_per_path",
               "unanimous_votes")


def check_run(result: Any, where: str = "run", *, finite: bool = False) -> None:
    """Check that ``result`` is an ``evaluate()`` output of this format version (:data:`EVAL_FORMAT_VERSION`)
    with the right type in every field the report reads (top-level metrics, ``config``, each record's
    answer, ranking, gold ranks, gold passages in the index, chain).

    Args:
        result: the parsed run.
        where: how errors name the run (its file).
        finite: also refuse NaN and infinite metrics (a run file; an in-memory result may hold a
            metric that is undefined, which the page shows as "n/a").

    Raises:
        hpengine.errors.UserError: naming ``where``, the record index and the field.
    """
    from hpengine.errors import UserError

    if not isinstance(result, dict):
        raise UserError(f"{where}: expected the JSON object written by `hpengine eval output=...` "
                        f"(got {type(result).__name__})")
    check_format(result, where)
    missing = [k for k in _REQUIRED_KEYS if k not in result]
    if missing:
        raise UserError(f"{where}: not an `hpengine eval` output: missing key(s) {', '.join(missing)} "
                        f"(got keys {', '.join(sorted(map(str, result))[:8]) or 'none'})")
    c = _Checker(where, finite)
    c.number("num_questions", result["num_questions"], integer=True, optional=False)
    records = result["records"]
    if not isinstance(records, list):
        c.fail("records", "a list of objects with an 'id'", records)
    c.text("retriever", result.get("retriever"))
    if not isinstance(result.get("llm", False), (bool, type(None))):
        c.fail("llm", "true or false", result["llm"])
    for key, value in result.items():
        if key in _TOP_NUMBERS or str(key).startswith("recall@"):
            c.number(key, value)
    for key in ("llm_tokens_in", "llm_tokens_out"):
        c.number(key, result.get(key), integer=True)
    if c.mapping("seconds", result.get("seconds")):
        for stage, value in result["seconds"].items():
            c.number(f"seconds.{stage}", value, optional=False)
    if c.mapping("config", result.get("config")):
        config = result["config"]
        c.text("config.questions", config.get("questions"))
        if c.mapping("config.model", config.get("model")):
            c.text("config.model.llm", config["model"].get("llm"))
    if result.get("warnings") is not None:
        c.listing("warnings", result["warnings"], "messages")
    if result.get("hop_diagnostics") is not None:
        c.listing("hop_diagnostics", result["hop_diagnostics"], "objects")
        for t, hop in enumerate(result["hop_diagnostics"]):
            c.mapping(f"hop_diagnostics[{t}]", hop, optional=False)
            for stage, value in hop.items():
                c.number(f"hop_diagnostics[{t}].{stage}", value)
    if c.mapping("reasoning_paths", result.get("reasoning_paths")):
        for key in _PATH_STATS:
            c.number(f"reasoning_paths.{key}", result["reasoning_paths"].get(key), optional=False,
                     integer=key in ("questions", "unanimous_votes"))
    first = {}
    for i, rec in enumerate(records):
        _check_record(c, i, rec)
        j = first.setdefault(str(rec["id"]), i)
        if j != i:
            raise UserError(f"{where}: records[{i}].id {rec['id']!r} repeats records[{j}].id (got the same "
                            f"question twice; each record is one question)")


def check_format(result: dict, where: str = "run") -> None:
    """Refuse a result without the marker ``"format": "hpengine-eval"`` at ``"format_version"``
    :data:`EVAL_FORMAT_VERSION` (an older hpengine's output, or not an eval output): one line naming
    ``where`` that says to rerun the eval.

    Raises:
        hpengine.errors.UserError: no marker, another format or another version.
    """
    from hpengine import __version__
    from hpengine.errors import UserError

    name, version = result.get("format"), result.get("format_version")
    if name == EVAL_FORMAT_NAME and version == EVAL_FORMAT_VERSION and type(version) is int:
        return
    if name is None and version is None:
        got = "no format marker: written by an older hpengine, or not an eval output"
    else:
        got = f"format {name!r}, version {version!r}"
    raise UserError(f"{where}: not an `hpengine eval` output of format {EVAL_FORMAT_NAME!r} version "
                    f"{EVAL_FORMAT_VERSION}, the one this hpengine reads; rerun `hpengine eval ... output=FILE` "
                    f"with hpengine {__version__} (got {got})")


def _check_record(c: _Checker, i: int, rec: Any) -> None:
    at = f"records[{i}]"
    if not isinstance(rec, dict):
        c.fail(at, "an object with an 'id'", rec)
    if "id" not in rec:
        from hpengine.errors import UserError

        raise UserError(f"{c.where}: {at} must be an object with an 'id' (got keys "
                        f"{', '.join(sorted(map(str, rec))[:8]) or 'none'})")
    if isinstance(rec["id"], bool) or not isinstance(rec["id"], (str, int)):
        c.fail(f"{at}.id", "a string or an integer", rec["id"])
    c.text(f"{at}.question", rec.get("question"))
    c.text(f"{at}.prediction", rec.get("prediction"))
    if rec.get("gold") is not None:
        c.texts(f"{at}.gold", rec["gold"], "answer strings")
    c.texts(f"{at}.retrieved", rec.get("retrieved", []), "passage titles")
    c.listing(f"{at}.gold_ranks", rec.get("gold_ranks"), "ranks (integers or null)")
    for j, rank in enumerate(rec["gold_ranks"]):
        c.number(f"{at}.gold_ranks[{j}]", rank, integer=True)
        if rank is not None and rank < 0:
            c.fail(f"{at}.gold_ranks[{j}]", "a rank >= 0 or null", rank)
    num_gold = len(rec["gold_ranks"])
    c.number(f"{at}.gold_in_index", rec.get("gold_in_index"), integer=True, optional=False)
    if not 0 <= rec["gold_in_index"] <= num_gold:
        c.fail(f"{at}.gold_in_index", f"the number of its {num_gold} gold passages that are in the index, "
                                      f"0..{num_gold}", rec["gold_in_index"])
    for key, value in rec.items():
        if key in _RECORD_NUMBERS or str(key).startswith("recall@"):
            c.number(f"{at}.{key}", value)
    c.listing(f"{at}.notes", rec.get("notes", []), "messages")
    c.listing(f"{at}.chain", rec.get("chain", []), "hop objects")
    for t, hop in enumerate(rec.get("chain", [])):
        h = f"{at}.chain[{t}]"
        c.mapping(h, hop, optional=False)
        c.text(f"{h}.subquery", hop.get("subquery"))
        c.text(f"{h}.answer", hop.get("answer"))
        c.texts(f"{h}.linked", hop.get("linked", []), "passage titles")
        c.listing(f"{h}.facts", hop.get("facts", []), "fact objects")
        for j, fact in enumerate(hop.get("facts", [])):
            c.mapping(f"{h}.facts[{j}]", fact, optional=False)
            c.text(f"{h}.facts[{j}].title", fact.get("title"))
            c.text(f"{h}.facts[{j}].text", fact.get("text"))
            c.number(f"{h}.facts[{j}].score", fact.get("score"))
            c.number(f"{h}.facts[{j}].distance", fact.get("distance"))


def check_same_questions(runs: list) -> None:
    """Refuse runs over different question sets, naming the runs and an id that differs.

    Raises:
        hpengine.errors.UserError: when two runs' record ids are not the same set.
    """
    from hpengine.errors import UserError

    first = runs[0]
    ids = {str(r["id"]) for r in first.records}
    for run in runs[1:]:
        other = {str(r["id"]) for r in run.records}
        if other != ids:
            extra = sorted(other - ids)[:1] or sorted(ids - other)[:1]
            raise UserError(
                f"runs on different question sets: {first.path or first.name} ({len(ids)} questions) and "
                f"{run.path or run.name} ({len(other)} questions) (got question id {extra[0]!r} in only one "
                f"of them; compare runs of the same question file)")


def run_label(result: dict) -> str:
    """``dense``, ``hyperprove + LLM (qwen...)``: the method of one run."""
    retriever = str(result.get("retriever", "?"))
    if not result.get("llm"):
        return retriever
    llm = (result.get("config", {}).get("model") or {}).get("llm") or ""
    return f"{retriever} + LLM" + (f" ({Path(str(llm)).name})" if llm else "")


def make_runs(results: list, paths: list | None = None, names: list | None = None) -> list:
    """Wrap results as :class:`Run` with unique names (the file stem is added to repeated labels)."""
    from hpengine.errors import UserError

    paths = list(paths) if paths is not None else [""] * len(results)
    if names is not None and len(names) != len(results):
        raise UserError(f"names must give one name per run ({len(results)} runs) (got {len(names)} names)")
    labels = list(names) if names is not None else [run_label(r) for r in results]
    if names is None:
        for i, label in enumerate(labels):
            if labels.count(label) > 1:
                labels[i] = f"{label} [{Path(paths[i]).stem or i + 1}]"
    if len(set(labels)) != len(labels):  # still repeated (same stems, or given names): number them
        labels = [f"{label} #{i + 1}" for i, label in enumerate(labels)]
    return [Run(name=n, result=r, path=str(p)) for n, r, p in zip(labels, results, paths)]


def _flatten(obj: Any, prefix: str = "") -> dict:
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: obj}


def differing_settings(runs: list) -> dict:
    """Settings that differ between the runs: ``{key: [value per run]}`` over the flattened
    ``config`` (``retrieval.*``, ``engine.*``, ``model.*``, ``index``).
    The question file is left out (the runs answer the same questions by construction), and so are
    the retriever and the LLM flag, which the method column shows, and the keys that not every run
    has (one method's own parameters, e.g. PPR's damping next to a HyperProve run)."""
    flat = []
    for run in runs:
        config = dict(run.result.get("config") or {})
        config.pop("questions", None)
        flat.append({k: v for k, v in _flatten(config).items() if k != "engine.retriever"})
    out = {}
    for key in (k for k in flat[0] if all(k in f for f in flat[1:])):
        values = [f[key] for f in flat]
        if len(runs) > 1 and any(v != values[0] for v in values[1:]):
            out[key] = values
    return out


# --- per-question gold and Recall@k ---------------------------------------------------------


def question_type(qid: str, meta: dict | None) -> dict:
    """The facets of one question: ``type`` (2Wiki, HotpotQA when present), ``level`` (HotpotQA
    when present) and ``hops`` (MuSiQue, from ids such as ``2hop__150763_14904``).

    Example:
        >>> question_type("3hop1__9_8_7", None)
        {'hops': '3-hop'}
    """
    facets = {}
    meta = meta or {}
    for key in ("type", "level"):
        if isinstance(meta.get(key), (str, int)) and str(meta[key]):
            facets[key] = str(meta[key])
    match = _MUSIQUE_HOPS.match(str(qid))
    if match:
        facets["hops"] = f"{match.group(1)}-hop"
    return facets


def _gold_keys(question) -> list:
    # the corpus loader strips whitespace; evaluate() compares gold passages the same way
    return list(dict.fromkeys((t.strip(), x.strip()) for t, x in question.gold_passages))


def recall_from_ranks(ranks: list, k: int) -> float:
    """``|gold in top-k| / |gold|`` from the 0-based ranks of the gold passages (``None``: not
    retrieved); ``nan`` without gold, like :func:`hpengine.eval.recall_at_k`.

    Example:
        >>> recall_from_ranks([0, 3, None], 2)
        0.3333333333333333
    """
    if not ranks:
        return float("nan")
    return sum(r is not None and r < k for r in ranks) / len(ranks)


def _mean(values: list) -> float | None:
    """The mean of the finite values; ``None`` when there are none (undefined: shown as "–")."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    return sum(values) / len(values) if values else None


def recall_curves(runs: list) -> list:
    """Recall@k for ``CURVE_KS`` per run from the records' ``gold_ranks``, averaged over the
    questions with gold (``None`` entries when no question has gold)."""
    return [[_mean([recall_from_ranks(r["gold_ranks"], k) for r in run.records]) for k in CURVE_KS]
            for run in runs]


def gold_missing(record: dict) -> int:
    """How many of the record's gold passages are not in the index (never retrieved by any method)."""
    return len(record["gold_ranks"]) - record["gold_in_index"]


def recall_ceiling(records: list) -> tuple:
    """``(ceiling, questions)``: the highest Recall@k any method could reach on the index of these
    records (the mean over questions with gold of the share of their gold passages that are in the
    index; ``None`` when no question has gold), and how many questions have gold passages that are
    not in the index.

    Example:
        >>> recall_ceiling([{"gold_ranks": [0, None], "gold_in_index": 1},
        ...                 {"gold_ranks": [None], "gold_in_index": 1}, {"gold_ranks": [], "gold_in_index": 0}])
        (0.75, 1)
    """
    shares = [r["gold_in_index"] / len(r["gold_ranks"]) for r in records if r["gold_ranks"]]
    return _mean(shares), sum(gold_missing(r) > 0 for r in records)


def summary_rows(runs: list, curves: list) -> list:
    """One row per run. Recall@k, EM and F1 are the run file's own top-level values where it has them
    (``recall@2``, ``recall@5`` by default); other cut-offs come from the curve, with
    ``recall_source[k] = "curve"``. ``recall_ceiling`` and ``gold_not_in_index``: see
    :func:`recall_ceiling`."""
    rows = []
    for run, curve in zip(runs, curves):
        r = run.result
        recall, source = {}, {}
        for k in TABLE_KS:
            if f"recall@{k}" in r:
                recall[k], source[k] = r[f"recall@{k}"], "run"
            else:
                recall[k], source[k] = (curve[CURVE_KS.index(k)] if k in CURVE_KS else None), "curve"
        ceiling, lacking = recall_ceiling(run.records)
        rows.append({
            "name": run.name, "path": run.path, "method": run_label(r),
            "questions": r.get("num_questions", len(run.records)),
            "recall": recall, "recall_source": source,
            "recall_ceiling": ceiling, "gold_not_in_index": lacking,
            "em": r.get("em"), "f1": r.get("f1"),
            "questions_per_second": r.get("questions_per_second"), "wall_seconds": r.get("wall_seconds"),
            "seconds": dict(r.get("seconds") or {}),
            "llm_tokens_in": r.get("llm_tokens_in"), "llm_tokens_out": r.get("llm_tokens_out"),
            "peak_rss_mb": r.get("peak_rss_mb"), "reasoning_paths": r.get("reasoning_paths"),
        })
    return rows


def facet_breakdown(runs: list, facets_by_id: dict) -> dict:
    """``{facet: {value: [{"n", "recall@5", "em"} per run]}}`` over the facets the questions have;
    Recall@5 per question is the record's own ``recall@5`` when present, else from its ranks."""
    names = list(dict.fromkeys(f for facets in facets_by_id.values() for f in facets))
    out = {}
    for facet in names:
        values = sorted({facets[facet] for facets in facets_by_id.values() if facet in facets})
        table = {}
        for value in values:
            per_run = []
            for run in runs:
                recs = [r for r in run.records if facets_by_id.get(str(r["id"]), {}).get(facet) == value]
                per_run.append({"n": len(recs), "recall@5": _mean([_record_recall5(r) for r in recs]),
                                "em": _mean([r.get("em") for r in recs])})
            table[value] = per_run
        out[facet] = table
    return out


def _record_recall5(rec: dict) -> float | None:
    """The record's ``recall@5``; from its ranks when the run's ``eval.recall_ks`` left it out."""
    if "recall@5" in rec:
        return rec["recall@5"]
    if rec["gold_ranks"]:  # [] (no gold): undefined, like evaluate()'s null recall
        return recall_from_ranks(rec["gold_ranks"], 5)
    return None


# --- the per-question browser ----------------------------------------------------------------


def browser_records(runs: list, questions: dict, facets_by_id: dict) -> list:
    """Per question (first run's order): id, text, gold answers and passages, facets, whether some run's
    index lacks a gold passage (``gold_not_in_index``), and per run the answer, EM/F1, Recall@5,
    gold passages not in its index (``gold_missing``), ranked passages with gold marks and the
    evidence chain."""
    by_run = [{str(r["id"]): r for r in run.records} for run in runs]
    out = []
    for rec0 in runs[0].records:
        qid = str(rec0["id"])
        q = questions.get(qid)
        entry = {"id": qid, "question": rec0.get("question") or (q.question if q else ""),
                 "gold": list(rec0.get("gold") or (q.answers if q else [])),
                 "facets": facets_by_id.get(qid, {}),
                 "passages": [[t, x] for t, x in _gold_keys(q)] if q else [], "runs": []}
        for lookup in by_run:
            rec = lookup[qid]  # same question sets: check_same_questions
            marks = dict.fromkeys(r for r in rec["gold_ranks"] if r is not None)
            entry["runs"].append({
                "answer": rec.get("prediction", ""), "em": rec.get("em"), "f1": rec.get("f1"),
                "notes": [str(n) for n in rec.get("notes", [])],
                "recall5": _record_recall5(rec), "gold_missing": gold_missing(rec),
                "ranked": [[t, i in marks] for i, t in enumerate(rec.get("retrieved", []))],
                "chain": [{"subquery": h.get("subquery", ""), "answer": h.get("answer", ""),
                           "facts": [{k: f.get(k) for k in ("title", "text", "score", "distance")}
                                     for f in h.get("facts", [])],
                           "linked": list(h.get("linked", []))} for h in rec.get("chain", [])],
            })
        entry["gold_not_in_index"] = any(r["gold_missing"] for r in entry["runs"])
        out.append(entry)
    return out


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


def run_warnings(runs: list) -> list:
    """What ``evaluate()`` warned about (e.g. gold passages missing from the index), each warning once
    with the runs it applies to: ``"dense, ppr: ..."``, or ``"all runs: ..."`` when every one of
    several runs has it."""
    by_text: dict = {}
    for run in runs:
        for warning in run.result.get("warnings") or []:
            by_text.setdefault(str(warning), {})[run.name] = None
    return [f"{'all runs' if len(names) == len(runs) > 1 else ', '.join(names)}: {text}"
            for text, names in by_text.items()]


def collect(runs: list, questions: list | None = None, questions_path: str | None = None) -> ReportData:
    """Compute everything the page shows (:class:`ReportData`) from checked, same-question runs.

    Args:
        runs: :class:`Run` objects (see :func:`make_runs`); at least one.
        questions: the question records (``hpengine.eval.Question``); default: read from
            ``questions_path``, else from the first run's ``config.questions``.
        questions_path: a question file to read when ``questions`` is not given.
    """
    from hpengine.eval._questions import load_questions

    notes = []
    if questions is None:
        path = questions_path or _questions_path(runs[0].result, runs[0].path)
        if path:
            questions = load_questions(path)
        else:
            given = (runs[0].result.get("config") or {}).get("questions")
            notes.append(f"question file {given!r} not found: gold passages and question types are not shown "
                         f"(pass questions=PATH)" if given else
                         "the run has no question file in its config: gold passages are not shown")
            questions = []
    notes += run_warnings(runs)
    by_id = {q.id: q for q in questions}
    facets_by_id = {str(r["id"]): question_type(str(r["id"]), by_id[str(r["id"])].meta
                                                if str(r["id"]) in by_id else None) for r in runs[0].records}
    curves = recall_curves(runs)
    return ReportData(runs=runs, rows=summary_rows(runs, curves), differing=differing_settings(runs),
                      curves=curves, facets=facet_breakdown(runs, facets_by_id),
                      funnels=[run.result.get("hop_diagnostics") for run in runs],
                      questions=browser_records(runs, by_id, facets_by_id), notes=notes)


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


__all__ = ["EVAL_FORMAT_NAME", "EVAL_FORMAT_VERSION", "ReportData", "Run", "build_report", "check_format",
           "check_report_out", "check_run", "collect", "default_report_path", "load_run", "recall_ceiling",
           "write_report"]
