"""Corpus loading: passages ``{title, text}`` from JSON, JSONL, CSV, Parquet or a hub dataset.

Rules (also in docs/extraction.md):

- title and text are stripped of surrounding whitespace;
- a passage whose text is empty after stripping is skipped (``report["empty_skipped"]``);
- an exact duplicate ``(title, text)`` of an earlier passage is dropped
  (``report["duplicates_dropped"]``);
- a passage whose title was already used by an earlier kept passage with a different text is kept
  (MuSiQue splits one Wikipedia page into several paragraphs) and counted in
  ``report["duplicate_titles"]`` (one count per extra passage, not per title);
- an empty title is allowed (the passage then has no title entity).

A passage's id is its position in ``CorpusLoad.passages``.
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

from hpengine.errors import InputNotFoundError, UserError, utf8_error

__all__ = ["Passage", "CorpusLoad", "load_corpus", "load_records", "builtin_corpus_path", "builtin_questions_path"]

_FORMATS = ("json", "jsonl", "csv", "parquet", "hub")
_SUFFIX_FORMATS = {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv",
                   ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet"}
_FIELDS = ("title", "text")
_DATA_DIR = Path(__file__).resolve().parent.parent / "data"


@dataclass(frozen=True)
class Passage:
    """One corpus passage. Hashable; two passages are equal when title and text are equal."""

    title: str
    text: str


@dataclass
class CorpusLoad:
    """Result of :func:`load_corpus`.

    Attributes:
        passages: kept passages, in file order.
        report: counts ``num_records`` (records read), ``num_passages`` (kept),
            ``empty_skipped``, ``duplicates_dropped``, ``duplicate_titles``, and ``format``.
    """

    passages: list[Passage]
    report: dict


def builtin_corpus_path() -> Path:
    """Path of the built-in demo corpus (``hpengine/data/builtin_corpus.json``, fictional)."""
    return _DATA_DIR / "builtin_corpus.json"


def builtin_questions_path() -> Path:
    """Path of the built-in demo questions (``hpengine/data/builtin_questions.json``, dev.json schema)."""
    return _DATA_DIR / "builtin_questions.json"


def _infer_format(path: Path) -> str:
    """Format from the suffix; a ``.json`` file whose first character is not ``[`` is JSONL."""
    fmt = _SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UserError(
            f"cannot infer the corpus format of {str(path)!r}: pass fmt as one of {list(_FORMATS)} "
            f"or use a suffix among {sorted(_SUFFIX_FORMATS)} (got suffix {path.suffix!r})"
        )
    if fmt == "json":
        with path.open("rb") as f:  # binary: the decoding (and its errors) happen in the reader
            head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
        if head.startswith(b"{"):
            return "jsonl"
    return fmt


def _record_error(source: str, index: int, message: str, line: Optional[int] = None) -> UserError:
    where = f"{source}:{line}" if line is not None else source
    return UserError(f"{where}: record {index}: {message}")


def _check_record(record, source: str, index: int, line: Optional[int] = None) -> Passage:
    """Validate one record and return it as a stripped :class:`Passage`."""
    if not isinstance(record, dict):
        raise _record_error(source, index, f"expected an object with fields {list(_FIELDS)} "
                            f"(got {type(record).__name__})", line)
    values = []
    for name in _FIELDS:
        if name not in record:
            raise _record_error(source, index, f"missing field {name!r} "
                                f"(got fields {sorted(map(str, record))})", line)
        value = record[name]
        if not isinstance(value, str):
            raise _record_error(source, index, f"field {name!r} must be a string "
                                f"(got {type(value).__name__} {value!r:.60})", line)
        if not _is_encodable(value):  # e.g. a lone surrogate from a JSON "\\ud800" escape
            raise _record_error(source, index, f"field {name!r} is not valid Unicode text "
                                f"(got {value.encode('utf-8', 'backslashreplace')[:60]!r})", line)
        values.append(value.strip())
    return Passage(title=values[0], text=values[1])


def _is_encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _decode(source: str, raw: bytes, line_offset: int = 0) -> str:
    """UTF-8 text (a leading BOM dropped); a :class:`UserError` naming the line otherwise."""
    try:
        return raw.decode("utf-8-sig" if line_offset == 0 else "utf-8")
    except UnicodeDecodeError as exc:
        raise utf8_error(source, raw, exc, line_offset) from None


def _iter_json(path: Path) -> Iterator[Passage]:
    source = str(path)
    text = _decode(source, path.read_bytes())
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{source}:{exc.lineno}: invalid JSON at line {exc.lineno} column "
                        f"{exc.colno}: {exc.msg} (got a file that is not valid JSON)") from None
    except (ValueError, RecursionError) as exc:  # int too long to convert, nesting too deep
        raise UserError(f"{source}: cannot read the JSON ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not isinstance(data, list):
        raise UserError(f"{source}: expected a JSON list of {{title, text}} objects "
                        f"(got {type(data).__name__})")
    for index, record in enumerate(data):
        yield _check_record(record, source, index)


def _iter_jsonl(path: Path) -> Iterator[Passage]:
    source = str(path)
    index = 0
    with path.open("rb") as f:  # binary lines: a decoding error names its line
        for line_no, raw in enumerate(f, start=1):
            line = _decode(source, raw, line_no - 1)
            if line_no == 1:
                line = line.lstrip("\ufeff")
            if not line.strip():
                continue  # blank lines are allowed (e.g. a trailing newline)
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{source}:{line_no}: record {index}: invalid JSON at column "
                                f"{exc.colno}: {exc.msg} (got {line.strip()[:80]!r})") from None
            except (ValueError, RecursionError) as exc:  # int too long to convert, nesting too deep
                raise UserError(f"{source}:{line_no}: record {index}: cannot read the JSON "
                                f"({type(exc).__name__}: {str(exc)[:120]})") from None
            yield _check_record(record, source, index, line_no)
            index += 1


def _iter_datasets(path: str, fmt: str) -> Iterator[Passage]:
    """Rows of a local CSV/Parquet file or of a hub dataset (``name`` or ``name:split``)."""
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a hard dependency
        raise ImportError("loading CSV/Parquet/hub corpora needs the 'datasets' package") from exc
    with tempfile.TemporaryDirectory(prefix="hpengine_corpus_") as cache_dir:
        if fmt == "hub":
            name, _, split = path.partition(":")
            try:
                table = datasets.load_dataset(name, split=split or "train", cache_dir=cache_dir)
            except Exception as exc:  # network, offline mode, unknown name: one clear message
                raise InputNotFoundError(
                    f"corpus {path!r} is not a local file and could not be loaded as a Hugging Face "
                    f"hub dataset 'name[:split]' (offline, unknown name or no access: "
                    f"{type(exc).__name__}: {str(exc)[:200]}) (got {path!r})"
                ) from exc
        else:
            kwargs = {"delimiter": "\t"} if path.lower().endswith(".tsv") else {}
            try:
                table = datasets.load_dataset(fmt, data_files=path, split="train", cache_dir=cache_dir,
                                              keep_in_memory=True, **kwargs)
            except Exception as exc:  # the datasets/arrow readers raise many types for a bad file
                raise UserError(f"{path}: cannot read the file as {fmt} "
                                f"({type(exc).__name__}: {str(exc)[:200]})") from exc
        missing = [name for name in _FIELDS if name not in table.column_names]
        if missing:
            raise UserError(f"{path}: record 0: missing field {missing[0]!r} "
                             f"(got columns {table.column_names})")
        for index, record in enumerate(table.select_columns(list(_FIELDS))):
            yield _check_record(record, path, index)


def _dedupe(passages: Iterable[Passage], fmt: str) -> CorpusLoad:
    """Apply the module rules (skip empty text, drop exact duplicates, count repeated titles)."""
    kept: list[Passage] = []
    seen: set[Passage] = set()
    titles: set[str] = set()
    report = {"num_records": 0, "num_passages": 0, "empty_skipped": 0, "duplicates_dropped": 0,
              "duplicate_titles": 0, "format": fmt}
    for passage in passages:
        report["num_records"] += 1
        if not passage.text:
            report["empty_skipped"] += 1
        elif passage in seen:
            report["duplicates_dropped"] += 1
        else:
            report["duplicate_titles"] += passage.title in titles
            seen.add(passage)
            titles.add(passage.title)
            kept.append(passage)
    report["num_passages"] = len(kept)
    return CorpusLoad(passages=kept, report=report)


def load_corpus(path, fmt: Optional[str] = None) -> CorpusLoad:
    """Load a passage corpus.

    Formats: ``json`` (a list of ``{title, text}`` objects, as ``../shared/data/*/corpus.json``),
    ``jsonl`` (one object per line; blank lines allowed), ``csv`` / ``parquet`` (local files read
    with ``datasets``; columns ``title`` and ``text``; ``.tsv`` is tab-separated CSV) and ``hub``
    (a Hugging Face hub dataset ``name`` or ``name:split``, default split ``train``; needs network).
    Extra fields are ignored. See the module docstring for the cleaning rules.

    Args:
        path: a local file, or a hub dataset name when no such file exists.
        fmt: one of ``json, jsonl, csv, parquet, hub``; ``None`` (default) infers it from the
            suffix (a ``.json`` file that starts with ``{`` is read as JSONL), or ``hub`` when
            the path does not exist.

    Returns:
        :class:`CorpusLoad` with the kept passages and the report counts.

    Raises:
        hpengine.errors.UserError: a malformed file or record (not UTF-8, invalid JSON, wrong
            shape or type), naming the file, the record index (and the line for JSON/JSONL) and
            the field. It is a ``ValueError``.
        hpengine.errors.InputNotFoundError: the path does not exist and is not a loadable hub
            dataset (a ``UserError`` and a ``FileNotFoundError``).

    Example:
        >>> load = load_corpus(builtin_corpus_path())
        >>> load.report["num_passages"] == len(load.passages) > 0
        True
    """
    path_str = str(path)
    local = Path(path_str).expanduser()
    if fmt is not None and fmt not in _FORMATS:
        raise UserError(f"corpus format must be one of {list(_FORMATS)} (got {fmt!r})")
    if local.is_dir():
        raise UserError(f"corpus must be a file, not a folder (got {path_str!r})")
    if fmt is None and not local.is_file() and local.suffix.lower() in _SUFFIX_FORMATS:
        raise InputNotFoundError(f"corpus file not found (got {path_str!r})")
    if fmt is None:
        fmt = _infer_format(local) if local.is_file() else "hub"
    if fmt != "hub" and not local.is_file():
        raise InputNotFoundError(f"corpus file not found (got {path_str!r})")
    if fmt == "json":
        records = _iter_json(local)
    elif fmt == "jsonl":
        records = _iter_jsonl(local)
    else:
        records = _iter_datasets(path_str if fmt == "hub" else str(local), fmt)
    try:
        return _dedupe(records, fmt)
    except UserError:
        raise
    except OSError as exc:  # unreadable file (permissions, I/O error)
        raise UserError(f"{path_str}: cannot read the corpus ({exc.strerror or exc})") from exc


def load_records(records: Iterable, source: str = "records") -> CorpusLoad:
    """Passages from in-memory records, by the rules of :func:`load_corpus` (format ``records``).

    Args:
        records: ``{title, text}`` dicts (extra keys ignored) or :class:`Passage` objects.
        source: how error messages name the records. Default ``"records"``.

    Raises:
        hpengine.errors.UserError: a record that is not ``{title, text}`` strings (naming its index).

    Example:
        >>> load_records([{"title": "A", "text": " a "}, {"title": "A", "text": "a"}]).passages
        [Passage(title='A', text='a')]
    """
    if isinstance(records, (str, bytes, dict)):
        raise TypeError(f"records must be a list of {{title, text}} dicts (got {type(records).__name__})")
    return _dedupe((_check_record(vars(r) if isinstance(r, Passage) else r, source, i)
                    for i, r in enumerate(records)), "records")
