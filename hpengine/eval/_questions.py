"""Question files (``dev.json`` schema of ``../shared/data``): JSON list or JSON Lines."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from hpengine.errors import InputNotFoundError, UserError, utf8_error

#: Record keys read into named fields; every other key lands in ``Question.meta``.
_KNOWN_KEYS = ("id", "question", "answer", "gold_passages", "gold_titles", "question_decomposition")


@dataclass
class Question:
    """One multi-hop question with its gold answers and supporting passages.

    Attributes:
        id: question id (the record index as a string when the file has none).
        question: the question text.
        answers: gold answer first, then aliases (EM/F1 take the max over them).
        gold_passages: supporting passages as ``(title, text)`` pairs, in file order.
        gold_titles: titles of the supporting passages.
        decomposition: gold sub-questions ``[{"question", "answer", ...}]`` (MuSiQue), else None.
        meta: the record's other keys (e.g. 2Wiki ``type`` and ``evidences``).
    """

    id: str
    question: str
    answers: list[str]
    gold_passages: list[tuple[str, str]]
    gold_titles: list[str]
    decomposition: list[dict] | None = None
    meta: dict = field(default_factory=dict)


class _RecordError(UserError):
    """A field problem inside one record; :func:`load_questions` adds the file and record."""


def load_questions(path: str | os.PathLike) -> list[Question]:
    """Read a question file: a JSON list of records, or one JSON record per line (JSONL).

    Record schema (``../shared/data/README.md``): ``question`` (str, required), ``answer``
    (non-empty list of str, required), ``id`` (str or int, optional: defaults to the record
    index; unique in the file, as is each record), ``gold_passages`` (list of
    ``{"title", "text"}``, optional, default empty), ``gold_titles`` (list of str, optional:
    defaults to the distinct titles of ``gold_passages``), ``question_decomposition`` (list of
    dicts with a ``question``, optional).

    Args:
        path: the file. JSON when its first non-blank character is ``[``, JSONL otherwise.

    Returns:
        The questions in file order.

    Raises:
        hpengine.errors.UserError: naming the file, the record index (and id) and the field, or
            the line of invalid JSON or of bytes that are not UTF-8, or both records of a
            repeated id or of a record given twice (a ``ValueError``).
        hpengine.errors.InputNotFoundError: no such file (also a ``FileNotFoundError``).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = Path(tmp, "questions.jsonl")
        ...     _ = path.write_text('{"id": "q1", "question": "Who?", "answer": ["Ann"]}\\n')
        ...     load_questions(path)[0].answers
        ['Ann']
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise UserError(f"questions must be a file, not a folder (got {path!r})")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise InputNotFoundError(f"questions file not found (got {path!r})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read the questions file ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise utf8_error(path, raw, exc) from None
    listed = text.lstrip().startswith("[")
    records = _parse_json(text, path) if listed else _parse_jsonl(text, path)
    if not listed and len(records) == 1 and isinstance(records[0], dict) and "question" not in records[0]:
        keys = ", ".join(repr(k) for k in list(records[0])[:3])
        raise UserError(f"{path}: one JSON object (keys {keys}) and no 'question' in it; a question file is a JSON "
                        f"list of question records, or one record per line (JSONL)")
    questions = []
    for index, record in enumerate(records):
        try:
            questions.append(_to_question(record, index))
        except _RecordError as err:
            rid = record.get("id") if isinstance(record, dict) else None
            where = f"record {index}" + (f" (id {rid!r:.60})" if rid is not None else "")
            raise UserError(f"{path}: {where}: {err}") from None
    _check_unique(records, questions, path)
    return questions


def _check_unique(records: list, questions: list, path: str) -> None:
    """Refuse a repeated id or a repeated record: either would be answered and scored twice.

    Ids compare as the text they are read into (``7``, ``"7"`` and the index of a record without
    an id are one id); records without ids compare by their content (key order aside).
    """
    first_id, first_record = {}, {}
    for index, (record, q) in enumerate(zip(records, questions)):
        earlier = first_id.setdefault(q.id, index)
        if earlier != index:
            raise UserError(f"{path}: records {earlier} and {index} have the same id {q.id!r:.60}; give each "
                            f"question its own id (results and reports tell questions apart by id)")
        # a record is a parsed JSON object; its sorted dump is its content (ASCII: lone surrogates escape)
        earlier = first_record.setdefault(json.dumps(record, sort_keys=True), index)
        if earlier != index:
            raise UserError(f"{path}: records {earlier} and {index} are the same record (ids "
                            f"{questions[earlier].id!r:.60} and {q.id!r:.60}); remove the repeat (it is counted twice)")


def _parse_json(text: str, path: str) -> list:
    try:
        records = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: invalid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None
    except (ValueError, RecursionError) as err:  # int too long to convert, nesting too deep
        raise UserError(f"{path}: cannot read the JSON ({type(err).__name__}: {str(err)[:120]})") from None
    if not isinstance(records, list):  # pragma: no cover - text starts with "[" so it is a list
        raise UserError(f"{path}: expected a JSON list of question records (got {type(records).__name__})")
    return records


def _parse_jsonl(text: str, path: str) -> list:
    records = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise UserError(
                f"{path}: invalid JSON Lines record at line {lineno}, column {err.colno}: {err.msg} "
                f"(a question file is a JSON list or one JSON object per line)"
            ) from None
        except (ValueError, RecursionError) as err:  # int too long to convert, nesting too deep
            raise UserError(f"{path}:{lineno}: cannot read the JSON at line {lineno} "
                            f"({type(err).__name__}: {str(err)[:120]})") from None
    return records


def _to_question(record: Any, index: int) -> Question:
    if not isinstance(record, dict):
        raise _RecordError(f"expected a JSON object (got {type(record).__name__})")
    rid = record.get("id", str(index))
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise _RecordError(f"field 'id' must be a str or int (got {type(rid).__name__})")
    if isinstance(rid, str):
        _check_text("id", rid)
    if "question" not in record:
        raise _RecordError("missing field 'question'")
    question = record["question"]
    if not isinstance(question, str) or not question.strip():
        raise _RecordError(f"field 'question' must be a non-empty str (got {question!r:.120})")
    _check_text("question", question)
    passages = _gold_passages(record.get("gold_passages", []))
    return Question(
        id=str(rid),
        question=question,
        answers=_answers(record),
        gold_passages=passages,
        gold_titles=_gold_titles(record, passages),
        decomposition=_decomposition(record.get("question_decomposition")),
        meta={k: v for k, v in record.items() if k not in _KNOWN_KEYS},
    )


def _check_text(name: str, value: str) -> None:
    """Text that can be written back as UTF-8 (a JSON ``"\\ud800"`` escape gives a lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _RecordError(f"field {name!r} is not valid Unicode text "
                           f"(got {value.encode('utf-8', 'backslashreplace')[:60]!r})") from None


def _answers(record: dict) -> list[str]:
    if "answer" not in record:
        raise _RecordError("missing field 'answer'")
    answers = record["answer"]
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
        raise _RecordError(f"field 'answer' must be a non-empty list of str (got {answers!r:.120})")
    for a in answers:
        _check_text("answer", a)
    return list(answers)


def _gold_passages(value: Any) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        raise _RecordError(f"field 'gold_passages' must be a list of {{'title', 'text'}} objects "
                           f"(got {type(value).__name__})")
    passages = []
    for j, p in enumerate(value):
        if not (isinstance(p, dict) and isinstance(p.get("title"), str) and isinstance(p.get("text"), str)):
            raise _RecordError(f"field 'gold_passages'[{j}] must be an object with str 'title' and 'text' "
                               f"(got {p!r:.120})")
        _check_text("gold_passages", p["title"] + p["text"])
        passages.append((p["title"], p["text"]))
    return passages


def _gold_titles(record: dict, passages: list[tuple[str, str]]) -> list[str]:
    if "gold_titles" not in record:
        return list(dict.fromkeys(title for title, _ in passages))
    titles = record["gold_titles"]
    if not isinstance(titles, list) or not all(isinstance(t, str) for t in titles):
        raise _RecordError(f"field 'gold_titles' must be a list of str (got {titles!r:.120})")
    return list(titles)


def _decomposition(value: Any) -> list[dict] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(s, dict) and isinstance(s.get("question"), str)
                                              for s in value):
        raise _RecordError(f"field 'question_decomposition' must be a list of objects with a str 'question' "
                           f"(got {value!r:.120})")
    return [dict(step) for step in value]


__all__ = ["Question", "load_questions"]
