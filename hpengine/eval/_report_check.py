"""Reading and checking ``hpengine eval`` run files: every field the report reads, with its type.

Run files are read in one format only: ``"format": "hpengine-eval"`` at ``"format_version"``
:data:`EVAL_FORMAT_VERSION`, as ``evaluate()`` writes it; any other is refused (rerun the eval).
Each failure is one :class:`~hpengine.errors.UserError` naming the file, the record index and the
field (``records[3].retrieved``).
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

from hpengine.eval._report_data import EVAL_FORMAT_NAME, EVAL_FORMAT_VERSION

#: Run-file keys a report needs; anything else is optional.
_REQUIRED_KEYS = ("num_questions", "records")


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
    _check_top(c, result)
    _check_parts(c, result)
    _check_records(c, result["records"])


def _check_top(c: _Checker, result: dict) -> None:
    """The top-level scalars: question count, records list, method, LLM flag, metrics, token counts."""
    c.number("num_questions", result["num_questions"], integer=True, optional=False)
    if not isinstance(result["records"], list):
        c.fail("records", "a list of objects with an 'id'", result["records"])
    c.text("retriever", result.get("retriever"))
    if not isinstance(result.get("llm", False), (bool, type(None))):
        c.fail("llm", "true or false", result["llm"])
    for key, value in result.items():
        if key in _TOP_NUMBERS or str(key).startswith("recall@"):
            c.number(key, value)
    for key in ("llm_tokens_in", "llm_tokens_out"):
        c.number(key, result.get(key), integer=True)


def _check_parts(c: _Checker, result: dict) -> None:
    """The optional nested parts: stage seconds, config, warnings, hop diagnostics, reasoning paths."""
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


def _check_records(c: _Checker, records: list) -> None:
    """Each record (:func:`_check_record`), and no question id twice."""
    from hpengine.errors import UserError

    first = {}
    for i, rec in enumerate(records):
        _check_record(c, i, rec)
        j = first.setdefault(str(rec["id"]), i)
        if j != i:
            raise UserError(f"{c.where}: records[{i}].id {rec['id']!r} repeats records[{j}].id (got the same "
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
    _check_chain(c, at, rec.get("chain", []))


def _check_chain(c: _Checker, at: str, chain: Any) -> None:
    """A record's evidence chain: per hop its sub-question, answer, linked titles and facts."""
    c.listing(f"{at}.chain", chain, "hop objects")
    for t, hop in enumerate(chain):
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


__all__ = ["check_format", "check_run", "check_same_questions", "load_run"]
