import json

import pytest

from hpengine.graph import CorpusLoad, Passage, builtin_corpus_path, builtin_questions_path, load_corpus

RECORDS = [
    {"title": " Alpha ", "text": " Alpha is a town.  "},
    {"title": "Beta", "text": "Beta is a river.", "extra": 1},
    {"title": "Alpha", "text": "Alpha is a town."},  # exact duplicate after stripping
    {"title": "Gamma", "text": "   \n "},  # whitespace-only text
    {"title": "Alpha", "text": "Alpha has a mill."},  # same title, other text
    {"title": "", "text": "No title here."},
]
EXPECTED = [Passage("Alpha", "Alpha is a town."), Passage("Beta", "Beta is a river."),
            Passage("Alpha", "Alpha has a mill."), Passage("", "No title here.")]
EXPECTED_REPORT = {"num_records": 6, "num_passages": 4, "empty_skipped": 1, "duplicates_dropped": 1,
                   "duplicate_titles": 1}


def _check(load: CorpusLoad, fmt: str):
    assert load.passages == EXPECTED
    assert load.report == {**EXPECTED_REPORT, "format": fmt}


def test_json_list(tmp_path):
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(RECORDS, indent=1))
    _check(load_corpus(path), "json")
    _check(load_corpus(str(path), fmt="json"), "json")


def test_jsonl_and_json_suffix_sniffing(tmp_path):
    lines = "\n".join(json.dumps(r) for r in RECORDS) + "\n\n"
    for name in ("corpus.jsonl", "corpus.json"):  # a .json file of objects per line is JSONL
        path = tmp_path / name
        path.write_text(lines)
        _check(load_corpus(path), "jsonl")


def test_csv_and_parquet_via_datasets(tmp_path):
    import csv

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "corpus.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["title", "text"])
        writer.writeheader()
        writer.writerows({"title": r["title"], "text": r["text"]} for r in RECORDS if r["title"])
    load = load_corpus(path)
    assert load.passages == EXPECTED[:3] and load.report["format"] == "csv"
    table = pa.table({"title": [r["title"] for r in RECORDS], "text": [r["text"] for r in RECORDS]})
    pq.write_table(table, tmp_path / "corpus.parquet")
    _check(load_corpus(tmp_path / "corpus.parquet"), "parquet")


def test_parquet_missing_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"title": ["a"], "body": ["b"]}), tmp_path / "c.parquet")
    with pytest.raises(ValueError, match=r"c\.parquet: record 0: missing field 'text'"):
        load_corpus(tmp_path / "c.parquet")


@pytest.mark.parametrize("records, pattern", [
    ([{"title": "a", "text": "b"}, {"title": "c"}], r"corpus\.json: record 1: missing field 'text'"),
    ([{"title": 5, "text": "b"}], r"record 0: field 'title' must be a string \(got int 5\)"),
    ([{"title": "a", "text": None}], r"record 0: field 'text' must be a string \(got NoneType"),
    ([["a", "b"]], r"record 0: expected an object .*\(got list\)"),
])
def test_bad_json_records(tmp_path, records, pattern):
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(records))
    with pytest.raises(ValueError, match=pattern):
        load_corpus(path)


def test_invalid_json_names_line(tmp_path):
    path = tmp_path / "corpus.json"
    path.write_text('[\n {"title": "a", "text": "b"},\n {"title": "c" "text": "d"}\n]')
    with pytest.raises(ValueError, match=r"corpus\.json:3: invalid JSON at line 3"):
        load_corpus(path)
    path.write_text('{"items": []}\n')  # an object, read as JSONL: fails on the record, not silently
    with pytest.raises(ValueError, match=r"corpus\.json:1: record 0: missing field 'title'"):
        load_corpus(path, fmt="jsonl")
    path.write_text('{"a": 1}')
    with pytest.raises(ValueError, match=r"expected a JSON list .*\(got dict\)"):
        load_corpus(path, fmt="json")


def test_jsonl_errors_name_line_and_record(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"title": "a", "text": "b"}\n\n{"title": "a", "text": 3}\n')
    with pytest.raises(ValueError, match=r"c\.jsonl:3: record 1: field 'text' must be a string"):
        load_corpus(path)
    path.write_text('{"title": "a", "text": "b"}\n{"title": "a", "text": "b"\n')
    with pytest.raises(ValueError, match=r"c\.jsonl:2: record 1: invalid JSON"):
        load_corpus(path)


def test_bad_paths_and_formats(tmp_path):
    with pytest.raises(FileNotFoundError, match="corpus file not found"):
        load_corpus(tmp_path / "missing.json")
    with pytest.raises(ValueError, match=r"format must be one of .*\(got 'xml'\)"):
        load_corpus(tmp_path / "missing.json", fmt="xml")
    (tmp_path / "c.txt").write_text("x")
    with pytest.raises(ValueError, match=r"cannot infer the corpus format .*\(got suffix '.txt'\)"):
        load_corpus(tmp_path / "c.txt")


def test_hub_name_offline_fails_clearly(monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError, match=r"not a local file and could not be loaded as a "
                                                r"Hugging Face hub dataset"):
        load_corpus("hpengine-no-such-owner/no-such-corpus")


def test_builtin_data_consistent():
    load = load_corpus(builtin_corpus_path())
    assert 30 <= len(load.passages) <= 60
    assert load.report["duplicates_dropped"] == load.report["empty_skipped"] == 0
    corpus = set(load.passages)
    questions = json.loads(builtin_questions_path().read_text())
    assert len(questions) == 12 and len({q["id"] for q in questions}) == 12
    for q in questions:
        assert q["question"].endswith("?") and q["answer"] and all(isinstance(a, str) for a in q["answer"])
        gold = [Passage(g["title"], g["text"]) for g in q["gold_passages"]]
        assert all(g in corpus for g in gold), q["id"]
        assert [g.title for g in gold] == q["gold_titles"]
        assert 2 <= len(gold) <= 4
