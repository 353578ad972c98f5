"""The Python face (hpengine/_api.py) and Engine.ask: what they return, checked against the index
and against a brute-force cosine; refusals before any work."""
import json

import pytest
import torch

import hpengine
from hpengine.errors import UserError

QUESTION = "Where was the director of the film The Salt Lanterns born?"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api") / "index"
    hpengine.build_index(hpengine.demo_corpus()[:8], folder)
    return folder


@pytest.fixture(scope="module")
def index(index_dir):
    return hpengine.open_index(index_dir)


def test_ask_resolves_the_engines_ranking_with_cosine_scores(index):
    engine = hpengine.Engine(index, retriever="hyperprove")
    answer = engine.ask(QUESTION)
    (pred,) = engine.answer([QUESTION])
    assert isinstance(answer, hpengine.Answer) and answer.question == QUESTION
    assert [p.id for p in answer.passages] == pred.passages  # the method's order, every passage
    assert answer.answer == pred.answer and answer.chain == pred.chain and answer.is_llm_answer is False
    q = engine.encoder.encode([QUESTION], kind="query").float()[0]
    for p in answer.passages:
        assert isinstance(p, hpengine.ScoredPassage)
        assert (p.title, p.text) == (index.passages[p.id].title, index.passages[p.id].text)
        reference = torch.nn.functional.cosine_similarity(q, index.passage_emb[p.id].float(), dim=0)
        assert p.score == pytest.approx(reference.item(), abs=1e-4)
    assert str(answer).startswith(f"Q: {QUESTION}")


def test_ask_takes_one_question_or_a_batch(index):
    engine = hpengine.Engine(index, retriever="dense")
    batch = engine.ask([QUESTION, "Who directed The Salt Lanterns?"])
    assert [a.question for a in batch] == [QUESTION, "Who directed The Salt Lanterns?"]
    assert engine.ask([]) == []
    scores = [p.score for p in batch[1].passages]
    assert scores == sorted(scores, reverse=True)  # dense ranks by this cosine


def test_evaluate_writes_what_the_report_reads(index, tmp_path):
    engine = hpengine.Engine(index, retriever="dense")
    questions = hpengine.demo_questions()[:3]
    result = hpengine.evaluate(engine, questions, recall_ks=[1, 2], output=tmp_path / "run.json")
    written = json.loads((tmp_path / "run.json").read_text())
    assert written["num_questions"] == result["num_questions"] == 3
    assert [r["id"] for r in written["records"]] == [q.id for q in questions]
    page = hpengine.write_report([tmp_path / "run.json"], tmp_path / "page.html", questions=questions)
    assert (tmp_path / "page.html").read_text().count(questions[0].question) >= 1 and page.endswith("page.html")


def test_evaluate_refuses_recall_beyond_the_ranked_passages(index):
    engine = hpengine.Engine(index, retriever="dense")
    with pytest.raises(UserError, match="passage_width=10"):
        hpengine.evaluate(engine, hpengine.demo_questions()[:1], recall_ks=[20])


def test_build_index_refuses_an_index_without_overwrite(index_dir):
    with pytest.raises(UserError):
        hpengine.build_index(hpengine.demo_corpus()[:2], index_dir)
    assert hpengine.open_index(index_dir).num_passages == 8  # untouched


def test_records_follow_the_corpus_file_rules(tmp_path):
    records = [{"title": " A ", "text": "Alpha is a river in Sarn."},
               {"title": "A", "text": "Alpha is a river in Sarn."}, {"title": "B", "text": "   "}]
    index = hpengine.build_index(records, tmp_path / "index")
    assert [(p.title, p.text) for p in index.passages] == [("A", "Alpha is a river in Sarn.")]
    report = index.meta["build_report"]["corpus_report"]
    assert (report["duplicates_dropped"], report["empty_skipped"]) == (1, 1)


def test_train_names_what_it_takes_when_given_an_index_object(index, tmp_path):
    with pytest.raises(TypeError, match=r"train reads index folders.*\(got Index\)"):
        hpengine.train(index, hpengine.demo_questions()[:4], tmp_path / "r.safetensors")
    assert not (tmp_path / "r.safetensors").exists()
