"""Fuzz the corpus and question readers: any byte string or JSON value either loads or raises the
project's own error type (:class:`hpengine.errors.UserError`), never another exception."""
import json
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpengine.errors import UserError
from hpengine.eval import load_questions
from hpengine.graph import load_corpus

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# records near the schemas, so that the field checks (not only the top-level shape) are reached
fields = st.sampled_from(["title", "text", "question", "answer", "id", "gold_passages", "gold_titles",
                          "question_decomposition"])
near_records = st.dictionaries(fields, json_values | st.text(max_size=10) | st.lists(st.text(max_size=6), max_size=3),
                               max_size=6)
documents = json_values | st.lists(near_records | json_values, max_size=5)
# invalid UTF-8, lone-surrogate escapes, BOMs, deep nesting, huge ints, blank lines
edge_bytes = st.sampled_from([b"", b"\xef\xbb\xbf[]", b"[\xff]", b'[{"title": "\\ud800", "text": "x"}]',
                              b'{"question": "\\udfff?", "answer": ["a"]}', b"[" * 5000 + b"]" * 5000,
                              b"[" + b"9" * 5000 + b"]", b"\n\n{}\n", b"[NaN, Infinity]"])


def _load(reader, data: bytes, suffix: str):
    fd, path = tempfile.mkstemp(suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            return reader(path)
        except UserError as exc:
            assert str(exc), "a UserError has a message"
            return exc
    finally:
        os.unlink(path)


def _check_corpus(result):
    if not isinstance(result, UserError):
        assert all(isinstance(p.title, str) and isinstance(p.text, str) and p.text for p in result.passages)
        json.dumps([p.text for p in result.passages]).encode("utf-8")  # writable back as UTF-8


def _check_questions(result):
    if not isinstance(result, UserError):
        for q in result:
            assert q.question.strip() and q.answers
            json.dumps([q.id, q.question, q.answers], ensure_ascii=False).encode("utf-8")


@SETTINGS
@given(data=st.binary(max_size=200) | edge_bytes, suffix=st.sampled_from([".json", ".jsonl"]))
def test_corpus_reader_bytes(data, suffix):
    _check_corpus(_load(load_corpus, data, suffix))


@SETTINGS
@given(value=documents, suffix=st.sampled_from([".json", ".jsonl"]), lines=st.booleans())
def test_corpus_reader_json_values(value, suffix, lines):
    text = "\n".join(json.dumps(v) for v in value) if lines and isinstance(value, list) else json.dumps(value)
    _check_corpus(_load(load_corpus, text.encode("utf-8"), suffix))


@SETTINGS
@given(data=st.binary(max_size=200) | edge_bytes)
def test_question_reader_bytes(data):
    _check_questions(_load(load_questions, data, ".json"))


@SETTINGS
@given(value=documents, lines=st.booleans())
def test_question_reader_json_values(value, lines):
    text = "\n".join(json.dumps(v) for v in value) if lines and isinstance(value, list) else json.dumps(value)
    _check_questions(_load(load_questions, text.encode("utf-8"), ".jsonl" if lines else ".json"))
