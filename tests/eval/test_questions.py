import json
from pathlib import Path

import pytest

from hpengine.eval import Question, load_questions, recall_at_k

DATA = Path("/work/shared/data")

RECORD = {
    "id": "q1",
    "question": "Who was the first president of the association which published JPI?",
    "answer": ["G. Stanley Hall", "Stanley Hall"],
    "gold_titles": ["Adolescence", "JPI"],
    "gold_passages": [{"title": "JPI", "text": "Published by the APA."},
                      {"title": "Adolescence", "text": "By G. Stanley Hall."}],
    "question_decomposition": [{"question": "Who published JPI?", "answer": "APA"},
                               {"question": "Who was the first president of #1 ?", "answer": "G. Stanley Hall"}],
    "type": "compositional",
}


def _write(tmp_path, records, jsonl=False, name=None) -> Path:
    path = tmp_path / (name or ("q.jsonl" if jsonl else "q.json"))
    if jsonl:
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        path.write_text(json.dumps(records, indent=1))
    return path


@pytest.mark.parametrize("jsonl", [False, True])
def test_load_full_record(tmp_path, jsonl):
    (q,) = load_questions(_write(tmp_path, [RECORD], jsonl))
    assert q == Question(
        id="q1", question=RECORD["question"], answers=["G. Stanley Hall", "Stanley Hall"],
        gold_passages=[("JPI", "Published by the APA."), ("Adolescence", "By G. Stanley Hall.")],
        gold_titles=["Adolescence", "JPI"], decomposition=RECORD["question_decomposition"],
        meta={"type": "compositional"},
    )


def test_minimal_record_defaults(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('\n{"question": "Who?", "answer": ["Ann"], "id": 7}\n\n{"question": "Where?", "answer": ["Oz"]}\n')
    first, second = load_questions(path)
    assert (first.id, second.id) == ("7", "1")  # int id as str; missing id -> record index
    assert second.gold_passages == [] and second.gold_titles == [] and second.decomposition is None
    titles = load_questions(_write(tmp_path, [{k: v for k, v in RECORD.items() if k != "gold_titles"}]))
    assert titles[0].gold_titles == ["JPI", "Adolescence"]  # derived from gold_passages


def test_empty_list(tmp_path):
    assert load_questions(_write(tmp_path, [])) == []


def _bad(**changes):
    record = {k: v for k, v in RECORD.items() if changes.get(k, 0) is not None}
    record.update({k: v for k, v in changes.items() if v is not None})
    return record


@pytest.mark.parametrize("record, pattern", [
    (_bad(question=None), r"record 1 \(id 'q1'\): missing field 'question'"),
    (_bad(question=""), r"record 1 \(id 'q1'\): field 'question' must be a non-empty str \(got ''\)"),
    (_bad(answer=None), r"record 1 \(id 'q1'\): missing field 'answer'"),
    (_bad(answer="Ann"), r"field 'answer' must be a non-empty list of str \(got 'Ann'\)"),
    (_bad(answer=["Ann", 3]), r"field 'answer' must be a non-empty list of str \(got \['Ann', 3\]\)"),
    (_bad(answer=[]), r"field 'answer' must be a non-empty list of str \(got \[\]\)"),
    (_bad(gold_passages=[{"title": "A"}]), r"field 'gold_passages'\[0\] must be an object with str 'title' and 'text'"),
    (_bad(gold_passages=[["A", "text"]]), r"field 'gold_passages'\[0\]"),
    (_bad(gold_passages="A"), r"field 'gold_passages' must be a list"),
    (_bad(gold_titles="A"), r"field 'gold_titles' must be a list of str"),
    (_bad(question_decomposition=[{"answer": "x"}]), r"field 'question_decomposition' must be a list"),
    (_bad(id=[1]), r"record 1 \(id \[1\]\): field 'id' must be a str or int \(got list\)"),
])
@pytest.mark.parametrize("jsonl", [False, True])
def test_bad_records_name_file_record_and_field(tmp_path, record, pattern, jsonl):
    path = _write(tmp_path, [RECORD, record], jsonl)
    with pytest.raises(ValueError, match=pattern) as err:
        load_questions(path)
    assert str(err.value).startswith(str(path))


def test_bad_record_without_id(tmp_path):
    path = _write(tmp_path, [{"answer": ["x"]}])
    with pytest.raises(ValueError, match=r"q.json: record 0: missing field 'question'"):
        load_questions(path)
    path.write_text('{"data": [{"question": "Who?", "answer": ["x"]}]}')  # the records wrapped in an object
    with pytest.raises(ValueError, match=r"one JSON object \(keys 'data'\) and no 'question' in it; a question "
                                         r"file is a JSON list"):
        load_questions(path)
    path = _write(tmp_path, [RECORD, "just a string"])
    with pytest.raises(ValueError, match=r"record 1: expected a JSON object \(got str\)"):
        load_questions(path)


def test_invalid_json_names_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[\n {"question": "a", "answer": ["b"]},\n {"question": "c" "answer": ["d"]}\n]\n')
    with pytest.raises(ValueError, match=r"broken.json: invalid JSON at line 3"):
        load_questions(path)
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(RECORD) + "\n\n" + '{"question": "c", "answer": [}\n')
    with pytest.raises(ValueError, match=r"broken.jsonl: invalid JSON Lines record at line 3"):
        load_questions(path)


@pytest.mark.parametrize("dataset, count", [("2wikimultihopqa", 478), ("hotpotqa", 591), ("musique", 100)])
def test_real_dev_files(dataset, count):
    path = DATA / dataset / "dev.json"
    if not path.exists():
        pytest.skip(f"{path} not present")
    questions = load_questions(path)
    assert len(questions) == count
    assert all(q.answers and q.gold_passages and q.question for q in questions)
    assert len({q.id for q in questions}) == count
    # gold passages are corpus passages, compared as (title, text)
    corpus = {(p["title"], p["text"]) for p in json.loads((DATA / dataset / "corpus.json").read_text())}
    assert all(set(q.gold_passages) <= corpus for q in questions)
    assert recall_at_k(questions[0].gold_passages, questions[0].gold_passages, 5) == 1.0
    if dataset == "musique":
        assert all(q.decomposition for q in questions)
        assert "#1" in questions[0].decomposition[1]["question"]
    if dataset == "2wikimultihopqa":
        assert {"type", "evidences"} <= set(questions[0].meta)


@pytest.mark.parametrize("jsonl", [False, True])
def test_duplicate_ids_are_refused_naming_both_records(tmp_path, jsonl):
    other = dict(RECORD, question="Who else?")
    path = _write(tmp_path, [{"question": "First?", "answer": ["a"], "id": "q0"}, RECORD, other], jsonl)
    with pytest.raises(ValueError, match=r"records 1 and 2 have the same id 'q1'") as err:
        load_questions(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_duplicate_ids_compare_as_text(tmp_path):
    """An int id, its string and the record index a record without an id gets are one id."""
    path = _write(tmp_path, [{"question": "A?", "answer": ["a"], "id": 7},
                             {"question": "B?", "answer": ["b"], "id": "7"}])
    with pytest.raises(ValueError, match=r"records 0 and 1 have the same id '7'"):
        load_questions(path)
    path = _write(tmp_path, [{"question": "A?", "answer": ["a"], "id": "1"}, {"question": "B?", "answer": ["b"]}])
    with pytest.raises(ValueError, match=r"records 0 and 1 have the same id '1'"):
        load_questions(path)


@pytest.mark.parametrize("jsonl", [False, True])
def test_the_same_record_twice_is_refused(tmp_path, jsonl):
    """Without ids each record gets its index as id, so a repeated record is found by its content."""
    record = {"question": "Who?", "answer": ["Ann"]}
    path = _write(tmp_path, [record, {"question": "Where?", "answer": ["Oz"]}, dict(reversed(record.items()))], jsonl)
    with pytest.raises(ValueError, match=r"records 0 and 2 are the same record \(ids '0' and '2'\)") as err:
        load_questions(path)
    assert str(err.value).startswith(str(path))
    path = _write(tmp_path, [RECORD, RECORD], jsonl)  # with ids: the id names it
    with pytest.raises(ValueError, match=r"records 0 and 1 have the same id 'q1'"):
        load_questions(path)
