"""``hpengine ask`` and ``hpengine demo`` output, in process: passages for every method, the
no-LLM label, several questions in one start-up (stdin, questions=FILE), the demo's index folder
(real spaCy NER and MiniLM, offline)."""
import io
import json
import sys

import pytest

from hpengine.graph import builtin_corpus_path
from hpengine.jobs._eval import NO_LLM_LABEL, format_prediction
from hpengine.cli import main, split_ask_args

FAST = ["encoder.dtype=float32"]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    """The built-in corpus indexed once for this module with ``hpengine index``."""
    out = tmp_path_factory.mktemp("ask") / "idx"
    main(["index", f"corpus={builtin_corpus_path()}", f"out={out}", *FAST])
    return out


def run(capsys, *args) -> tuple:
    """``(exit status, stdout, stderr)`` of ``hpengine ARGS`` in this process."""
    try:
        main([str(a) for a in args])
        status = 0
    except SystemExit as exc:
        status = exc.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def blocks(out: str) -> list:
    return [b for b in out.strip().split("\n\n") if b.startswith("Q: ")]


def test_dense_prints_its_passages_and_the_no_llm_label(index_dir, capsys):
    status, out, err = run(capsys, "ask", index_dir, "Who directed Glass Orchard?", "retriever=dense", *FAST)
    assert status == 0, err
    (block,) = blocks(out)
    lines = block.splitlines()
    assert lines[0] == "Q: Who directed Glass Orchard?"
    assert lines[1].startswith("  passages (top 5 of ")
    assert lines[2].startswith("    1. [") and "] " in lines[2]  # title, then a snippet of its text
    assert lines[-1].startswith(f"{NO_LLM_LABEL}: ")
    assert not any(line.startswith("A: ") for line in lines)  # no LLM: no answer claimed


def test_chain_method_shows_passages_then_chain_then_label(index_dir, capsys):
    status, out, err = run(capsys, "ask", index_dir, "Where was the director of Glass Orchard born?", *FAST)
    assert status == 0, err
    lines = out.strip().splitlines()
    first_passage = next(i for i, line in enumerate(lines) if line.startswith("  passages"))
    first_hop = next(i for i, line in enumerate(lines) if line.startswith("  hop 1:"))
    assert first_passage < first_hop < len(lines) - 1
    assert lines[-1].startswith(f"{NO_LLM_LABEL}: ")


def test_stdin_gives_one_block_per_question(index_dir, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("Who directed Glass Orchard?\n\n  \nWhere was Tomas Venn born?\n"))
    status, out, err = run(capsys, "ask", index_dir, "-", "retriever=dense", *FAST)
    assert status == 0, err
    assert [b.splitlines()[0] for b in blocks(out)] == ["Q: Who directed Glass Orchard?",
                                                        "Q: Where was Tomas Venn born?"]


def test_empty_stdin_is_a_user_error(index_dir, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n \n"))
    status, _, err = run(capsys, "ask", index_dir, "-", *FAST)
    assert status == 2 and err.startswith("hpengine: error: ask - reads") and err.count("\n") == 1


def test_questions_file_gives_one_block_per_question(index_dir, tmp_path, capsys):
    questions = ["Who directed Glass Orchard?", "Where was Tomas Venn born?", "Which film has E=mc2 in it?"]
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"question": q, "answer": ["x"]}) + "\n" for q in questions))
    status, out, err = run(capsys, "ask", index_dir, f"questions={path}", "retriever=dense", *FAST)
    assert status == 0, err
    assert [b.splitlines()[0] for b in blocks(out)] == [f"Q: {q}" for q in questions]
    assert out.count(NO_LLM_LABEL) == 3


def test_question_and_questions_file_together_is_a_user_error(index_dir, tmp_path, capsys):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question": "Who?", "answer": ["x"]}) + "\n")
    status, _, err = run(capsys, "ask", index_dir, "Who?", f"questions={path}", *FAST)
    assert status == 2 and "not both" in err and err.count("\n") == 1


@pytest.mark.parametrize("args, expected", [
    (["IDX", "questions=q.json"], ("IDX", "", ["questions=q.json"])),
    (["IDX", "-", "retriever=dense"], ("IDX", "-", ["retriever=dense"])),
    (["IDX", "Who?"], ("IDX", "Who?", [])),  # the positional rule is unchanged
])
def test_ask_argument_forms(args, expected):
    assert split_ask_args(args, {"model", "engine", "eval", "retriever", "index", "questions"}) == expected


def test_format_prediction_with_an_llm_labels_the_answer():
    from hpengine.pipeline._types import Prediction

    text = format_prediction(Prediction("Who?", "Ann", [], [0]), llm=True)
    assert text.splitlines()[:2] == ["Q: Who?", "A: Ann"] and NO_LLM_LABEL not in text
    assert format_prediction(Prediction("Who?", "Ann", [], [0])).splitlines()[-1] == f"{NO_LLM_LABEL}: Ann"


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_a_demo_that_stops_leaves_no_folder_of_its_own(monkeypatch, tmp_path, stop):
    import tempfile

    import hpengine.jobs._index as index_job
    from hpengine.config import DemoJobConfig
    from hpengine.jobs import run_demo

    def build(cfg, **kwargs):
        assert cfg.out.startswith(str(tmp_path / "hpengine_demo_"))  # the folder was made
        raise stop

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(index_job, "run_index", build)
    with pytest.raises(stop):
        run_demo(DemoJobConfig())
    assert list(tmp_path.iterdir()) == []


def test_demo_names_its_real_index_folder_and_explains_its_numbers(capsys, monkeypatch, tmp_path):
    import tempfile

    from hpengine.graph import Index

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the demo's default folder, made where pytest cleans
    status, out, err = run(capsys, "demo", *FAST)
    assert status == 0, err
    first = out.splitlines()[0]
    assert first.startswith(f"index written to {tmp_path / 'hpengine_demo_'}")
    folder = first.removeprefix("index written to ")
    assert folder != str(builtin_corpus_path()) and Index.load(folder).num_passages == 40
    assert out.count(NO_LLM_LABEL) == 12 and out.count("  passages (top 3 of ") == 12
    assert "R@k (" in out and "gold passages found in its top k" in out and "low by design" in out
