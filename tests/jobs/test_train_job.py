"""``hpengine train``'s job: trains on one or several indexes with their question files, validates on a
held-out share, writes a ranker the learned method reads; refuses bad input in one line before any
model loads."""
import dataclasses
import re

import pytest

from hpengine.config import TrainJobConfig
from hpengine.errors import UserError
from hpengine.graph import builtin_questions_path
from hpengine.jobs import format_train_report, run_train
from hpengine.jobs._train import MIN_HELD_FOR_INTERVAL
from hpengine.nn import load_ranker
from hpengine.pipeline.retrievers import FEATURES


@pytest.fixture
def saved(builtin_index, tmp_path, monkeypatch):
    """Two saved copies of the built-in index; the jobs get the test's hashing encoder."""
    index, encoder, _ = builtin_index
    paths = [str(index.save(tmp_path / name)) for name in ("a", "b")]
    monkeypatch.setattr("hpengine.models.encoder_for_index", lambda meta, cfg, where: encoder)
    return paths


def _refuse_models(monkeypatch) -> None:
    """Any model load fails the test: what is checked here must be refused before one."""
    def no_model(*args):
        raise AssertionError("a model loaded")

    monkeypatch.setattr("hpengine.models.encoder_for_index", no_model)


def _first_questions(folder, n: int) -> str:
    """A question file of the built-in questions' first ``n``, in ``folder``."""
    import json

    path = folder / f"first{n}.json"
    path.write_text(json.dumps(json.loads(builtin_questions_path().read_text())[:n]))
    return str(path)


def test_train_writes_a_ranker_with_its_held_out_numbers(saved, tmp_path):
    out = tmp_path / "ranker.safetensors"
    q = str(builtin_questions_path())
    report = run_train(TrainJobConfig(index=saved, questions=[q, q], out=str(out), epochs=40, hidden=4,
                                      holdout=0.25, adapter_steps=20), progress=False)
    assert report["loss"] < report["first_loss"]
    assert report["train_questions"] == 18 and report["held_questions"] == 6
    model, meta = load_ranker(out)
    assert meta["features"] == list(FEATURES) and meta["hidden"] == 4 and meta["report"]["loss"] == report["loss"]
    assert meta["adapter_dim"] == model.query_adapter.dim > 0 and report["adapter_steps"] == 20
    assert "with a query adapter (20 steps)" in format_train_report(report, str(out))
    text = format_train_report(report, str(out))
    assert text.startswith(f"ranker written to {out}") and "held out 6 questions" in text
    mean, low, high = report["held_gain@5"]  # learned less fusion R@5 on the held questions, 95% interval
    assert abs(mean - (report["held_recall@5"] - report["held_fusion_recall@5"])) < 1e-3 and low <= mean <= high
    # six held questions: the difference, and no interval that would look surer than they allow
    assert f"R@5 less the fusion's: {100 * mean:+.1f} points; 6 held questions are too few for an interval" in text
    files = report["held_per_file"]  # two files: each one's numbers too, which pool to the whole
    assert [f["file"] for f in files] == [f"{saved[0]} questions={q}", f"{saved[1]} questions={q}"]
    assert [f["questions"] for f in files] == [3, 3]
    for key in ("recall@5", "fusion_recall@5"):
        pooled = sum(f[key] * f["scored"] for f in files) / sum(f["scored"] for f in files)
        assert abs(pooled - report[f"held_{key}"]) < 1e-3
    assert all(f"    {f['file']}: 3 questions, R@2 {f['recall@2']:.3f}" in text for f in files)
    assert "95% interval" not in text
    many = {**report, "held_questions": MIN_HELD_FOR_INTERVAL, "held_scored": MIN_HELD_FOR_INTERVAL}
    line = f"R@5 less the fusion's: {100 * mean:+.1f} points, 95% interval {100 * low:+.1f} to {100 * high:+.1f}"
    assert line in format_train_report(many, str(out))


def test_the_report_says_when_no_question_was_held_out(saved, tmp_path):
    out = tmp_path / "all.safetensors"
    q = str(builtin_questions_path())
    report = run_train(TrainJobConfig(index=saved[:1], questions=[q], out=str(out), epochs=5, hidden=0, holdout=0.0),
                       progress=False)
    assert "held_questions" not in report
    text = format_train_report(report, str(out))
    assert "no question held out" in text and "held out 0" not in text


def test_a_question_file_whose_gold_passages_the_index_lacks_is_refused(saved, tmp_path):
    import json

    other = tmp_path / "other.json"
    other.write_text(json.dumps([{"question": f"Who wrote book {i}?", "answer": ["x"],
                                  "gold_passages": [{"title": "Not here", "text": f"No such passage {i}."}]}
                                 for i in range(3)]))
    from hpengine.nn import CandidateRanker, save_ranker
    from hpengine.pipeline.retrievers import FEATURES

    out = tmp_path / "r.safetensors"
    save_ranker(CandidateRanker(len(FEATURES), hidden=0), out, {})  # an earlier ranker
    earlier = out.read_bytes()
    with pytest.raises(UserError, match="none of its 3 questions' gold passages is in index") as exc:
        run_train(TrainJobConfig(index=saved[:1], questions=[str(other)], out=str(out)), progress=False)
    assert "\n" not in str(exc.value) and out.read_bytes() == earlier  # nothing written


def test_questions_without_their_gold_passages_in_the_index_are_named(saved, tmp_path):
    import json

    rows = json.loads(builtin_questions_path().read_text())
    rows[0]["gold_passages"] = [*rows[0]["gold_passages"], {"title": "Not here", "text": "No such passage."}]
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps(rows))
    report = run_train(TrainJobConfig(index=saved[:1], questions=[str(mixed)], out=str(tmp_path / "r.safetensors"),
                                      epochs=5, hidden=0), progress=False)
    assert report["warnings"] == [f"1 of {len(rows)} questions of {str(mixed)!r} have gold passages that are not in "
                                  f"index {saved[0]!r}: training neither learns from nor counts those passages"]
    text = format_train_report({**report, "held_questions": 4, "held_scored": 3}, "r.safetensors")
    assert "held out 4 questions (3 with a gold passage in the index, which the recalls are over)" in text


def test_the_command_line_warns_before_the_work_and_once(saved, tmp_path, capsys):
    import json

    from hpengine.cli import main

    rows = json.loads(builtin_questions_path().read_text())
    rows[0]["gold_passages"] = [*rows[0]["gold_passages"], {"title": "Not here", "text": "No such passage."}]
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps(rows))
    main(["train", saved[0], f"questions={mixed}", f"out={tmp_path / 'r.safetensors'}", "epochs=5", "hidden=0"])
    err = capsys.readouterr().err
    assert err.count("hpengine: warning: 1 of") == 1
    assert err.index("hpengine: warning: 1 of") < err.index("candidates of") < err.index("epoch 0")


OUT_CASES = {  # where out= points: the message that refuses it
    "the first of two question files": "is the questions[0] file",
    "the second of two question files": "is the questions[1] file",
    "inside the index": "is inside the index folder",
    "inside another index": "is inside the index folder",
    "through a link into another index": "is inside the index folder",
    "an index folder": "is an index folder; name a file outside it",
}


@pytest.mark.parametrize("where", sorted(OUT_CASES))
def test_out_never_lands_on_an_input(saved, tmp_path, monkeypatch, where):
    import shutil

    _refuse_models(monkeypatch)
    q1, q2 = tmp_path / "q1.json", tmp_path / "q2.json"
    for q in (q1, q2):
        shutil.copy(builtin_questions_path(), q)
    generation = next(p for p in (tmp_path / "b").iterdir() if p.is_dir())
    (tmp_path / "link").symlink_to(generation)
    out = {"the first of two question files": q1, "the second of two question files": q2,
           "inside the index": f"{saved[0]}/index.json", "inside another index": f"{saved[1]}/index.json",
           "through a link into another index": tmp_path / "link" / "r.safetensors", "an index folder": saved[1]}[where]
    before = {p: p.read_bytes() for p in [q1, q2, *sorted(tmp_path.glob("[ab]/**/*"))] if p.is_file()}
    with pytest.raises(UserError, match=re.escape(OUT_CASES[where])) as exc:
        run_train(TrainJobConfig(index=[saved[0], saved[0]], questions=[str(q1), str(q2)], out=str(out)),
                  progress=False)
    assert "\n" not in str(exc.value)
    assert {p: p.read_bytes() for p in before} == before  # nothing read was touched


def test_out_replaces_a_ranker_file_only(saved, tmp_path, monkeypatch):
    """A corpus or a question file not read by this run, or any other file, is not overwritten by
    the ranker: refused before any model loads, the file untouched."""
    _refuse_models(monkeypatch)
    corpus = tmp_path / "corpus.json"
    corpus.write_text('[{"title": "A", "text": "B"}]')
    with pytest.raises(UserError, match="out='.*corpus.json' exists and is not a ranker file") as exc:
        run_train(TrainJobConfig(index=saved[:1], questions=[str(builtin_questions_path())], out=str(corpus)),
                  progress=False)
    assert "\n" not in str(exc.value) and corpus.read_text() == '[{"title": "A", "text": "B"}]'


@pytest.mark.parametrize("count,settings,message", [
    (2, dict(holdout=0.9), "holdout=0.9 holds out every question \\(2 in all\\)"),  # nothing left to train on
    (3, dict(folds=5), "folds=5 needs at least 5 distinct questions \\(got 3\\)"),
])
def test_a_split_with_too_few_questions_is_refused_before_any_model_loads(saved, tmp_path, monkeypatch, count,
                                                                          settings, message):
    _refuse_models(monkeypatch)
    few = _first_questions(tmp_path, count)
    with pytest.raises(UserError, match=message):
        run_train(TrainJobConfig(index=saved[:1], questions=[few], out=str(tmp_path / "r.safetensors"), **settings),
                  progress=False)
    assert not (tmp_path / "r.safetensors").exists()


def test_the_same_index_and_question_file_twice_is_refused_before_any_model_loads(saved, tmp_path, monkeypatch):
    from hpengine.cli import main

    _refuse_models(monkeypatch)
    q = str(builtin_questions_path())
    with pytest.raises(UserError, match=f"index {re.escape(repr(saved[0] + '/'))} with questions=.* is given twice; "
                                        f"give each pair once"):  # the same folder, however it is spelled
        run_train(TrainJobConfig(index=[saved[0], saved[1], saved[0] + "/"], questions=[q, q, q],
                                 out=str(tmp_path / "r.safetensors")), progress=False)
    assert not (tmp_path / "r.safetensors").exists()
    with pytest.raises(SystemExit) as exc:  # the command line says it in one line too
        main(["train", saved[0], f"questions={q}", saved[0], f"questions={q}", f"out={tmp_path / 'r.safetensors'}"])
    assert exc.value.code == 2


def test_a_ranker_that_cannot_be_written_is_one_line(saved, tmp_path, monkeypatch):
    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("hpengine.pipeline.write_ranker", full)
    q = str(builtin_questions_path())
    with pytest.raises(UserError, match="the ranker could not be written \\(No space left on device\\)") as exc:
        run_train(TrainJobConfig(index=saved[:1], questions=[q], out=str(tmp_path / "r.safetensors"), epochs=2,
                                 hidden=0), progress=False)
    assert "\n" not in str(exc.value)


def test_by_default_the_ranker_trains_alone(saved, tmp_path):
    out = tmp_path / "plain.safetensors"
    q = str(builtin_questions_path())
    run_train(TrainJobConfig(index=saved[:1], questions=[q], out=str(out), epochs=20, hidden=0), progress=False)
    model, meta = load_ranker(out)
    assert meta["adapter_dim"] == 0 and model.query_adapter is None


@pytest.mark.parametrize("change,message", [
    (dict(questions=[]), "one questions= file per index"),
    (dict(out=""), "needs out=FILE"),
    (dict(index=[]), "needs at least one index"),
    (dict(questions=["missing.json", "missing.json"]), "missing.json"),
])
def test_bad_input_is_one_line_before_any_model_loads(saved, tmp_path, monkeypatch, change, message):
    _refuse_models(monkeypatch)
    q = str(builtin_questions_path())
    cfg = dataclasses.replace(TrainJobConfig(index=saved, questions=[q, q], out=str(tmp_path / "r.safetensors")),
                              **change)
    with pytest.raises(UserError, match=message) as exc:
        run_train(cfg, progress=False)
    assert "\n" not in str(exc.value)


def test_indexes_of_two_encoders_are_refused(saved, tmp_path):
    import json

    manifest = tmp_path / "b" / "index.json"
    meta = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**meta, "encoder": "another-encoder"}))
    q = str(builtin_questions_path())
    with pytest.raises(UserError, match="a ranker is trained for one encoder.*another-encoder"):
        run_train(TrainJobConfig(index=saved, questions=[q, q], out=str(tmp_path / "r.safetensors")), progress=False)


def test_the_command_line_pairs_each_question_file_with_its_index():
    from hpengine.jobs import parse_train_args

    cfg = parse_train_args(["A", "questions=qa.json", "B", "questions=qb.json", "out=r.safetensors", "hidden=0",
                            "lr=0.05", "index=C", "questions=${oc.env:HOME}"])
    assert (cfg.index, cfg.questions) == (["A", "B", "C"], ["qa.json", "qb.json", "${oc.env:HOME}"])
    assert (cfg.out, cfg.hidden, cfg.lr) == ("r.safetensors", 0, 0.05)
    for args, message in ((["questions=q.json", "A"], "pairs with the index before it.*got no index before it"),
                          (["A", "questions=q", "questions=q2"], "pairs with the index before it.*it follows "
                                                                 "questions='q'"),
                          (["A", "questions=q", "folds=2", "folds=5"], "folds= is given twice \\('folds=2' and "
                                                                       "'folds=5'\\)"),
                          (["A", "questions=q", "epoch=3"], "unknown key 'epoch'.*did you mean epochs"),
                          (["A", "questions=q", "hidden=wide"], "hidden= must be an int"),
                          (["A", "questions=q", "fusion_prior=maybe"], "fusion_prior= must be true or false"),
                          (["A", "questions=q", "holdout=2"], "holdout must be <= 0.9")):
        with pytest.raises(UserError, match=message):
            parse_train_args(args)


def test_hpengine_train_on_the_command_line(saved, tmp_path, capsys):
    from hpengine.cli import main

    out = tmp_path / "cli.safetensors"
    q = str(builtin_questions_path())
    main(["train", saved[0], f"questions={q}", saved[1], f"questions={q}", f"out={out}", "epochs=20", "hidden=0"])
    printed = capsys.readouterr().out
    assert printed.startswith(f"ranker written to {out}") and "held out 4 questions" in printed
    assert load_ranker(out)[1]["hidden"] == 0
    with pytest.raises(SystemExit) as exc:
        main(["train", saved[0], f"questions={q}", f"out={out}", "epoch=3"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err.startswith("hpengine: error: unknown key 'epoch'") and "\n" not in err


@pytest.mark.parametrize("word,prior", [("false", False), ("False", False), ("0", False), ("off", False),
                                        ("true", True), ("yes", True)])
def test_fusion_prior_reads_its_words(word, prior):
    from hpengine.jobs import parse_train_args

    assert parse_train_args(["A", "questions=q", f"fusion_prior={word}"]).fusion_prior is prior


def test_hpengine_train_without_the_fusion_prior_writes_a_ranker_without_one(saved, tmp_path):
    from hpengine.cli import main

    q = str(builtin_questions_path())
    for word, want in (("false", -1), ("true", FEATURES.index("rr_fusion"))):
        out = tmp_path / f"{word}.safetensors"
        main(["train", saved[0], f"questions={q}", f"out={out}", "epochs=5", "hidden=0", f"fusion_prior={word}"])
        model, meta = load_ranker(out)
        assert model.prior == meta["prior"] == want and meta["fusion_prior"] is (word == "true")


def test_a_file_whose_questions_are_all_held_trains_an_adapter_on_the_others(saved, tmp_path):
    """The second file's one question is in the held share: the adapter trains on the first file's
    training questions alone, and the file's question is still scored."""
    import json

    from hpengine.eval import load_questions
    from hpengine.jobs._train import _question_ranks, _split

    q = str(builtin_questions_path())
    places, distinct = _question_ranks([load_questions(q)], 0)
    train_rows, held_rows = _split(places[0], distinct, 0.25)
    held = held_rows[0]
    one = tmp_path / "one.json"
    one.write_text(json.dumps([json.loads(builtin_questions_path().read_text())[held]]))
    report = run_train(TrainJobConfig(index=saved, questions=[q, str(one)], out=str(tmp_path / "r.safetensors"),
                                      epochs=5, hidden=0, holdout=0.25, adapter_steps=5), progress=False)
    assert report["adapter_steps"] == 5 and report["train_questions"] == len(train_rows)
    assert report["held_questions"] == len(held_rows) + 1


def test_every_question_file_weighs_the_same_unless_told_not_to(saved, tmp_path, capsys):
    """Two files of 4 and of every built-in question: balanced, the small file's questions weigh
    more, so the ranker differs from one trained with every question the same; the file records it."""
    import torch

    from hpengine.cli import main

    files = [_first_questions(tmp_path, 4), str(builtin_questions_path())]
    scores = {}
    for word in ("true", "false"):
        out = tmp_path / f"{word}.safetensors"
        main(["train", saved[0], f"questions={files[0]}", saved[1], f"questions={files[1]}", f"out={out}",
              "epochs=20", "hidden=0", "holdout=0", f"balance_sets={word}"])
        model, meta = load_ranker(out)
        assert meta["balance_sets"] is (word == "true")
        said = "each of the 2 question files weighing the same" in capsys.readouterr().out
        assert said is (word == "true")  # the report says so
        scores[word] = model.linear.weight.detach().clone()
    assert not torch.equal(scores["true"], scores["false"])


def test_hpengine_train_refuses_a_device_this_machine_lacks(saved, tmp_path, capsys, monkeypatch):
    import torch

    from hpengine.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    q = str(builtin_questions_path())
    with pytest.raises(SystemExit) as exc:
        main(["train", saved[0], f"questions={q}", f"out={tmp_path / 'r.safetensors'}", "device=cuda"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and err.startswith("hpengine: error: device='cuda' is not available") and "\n" not in err
    assert not (tmp_path / "r.safetensors").exists()


def test_eval_refuses_a_missing_ranker_before_any_model_loads(saved, tmp_path, capsys, monkeypatch):
    from hpengine.cli import main

    _refuse_models(monkeypatch)
    q = str(builtin_questions_path())
    for ranker, message in ((tmp_path / "nope.safetensors", "no such file"), (tmp_path, "is a folder")):
        with pytest.raises(SystemExit) as exc:
            main(["eval", saved[0], f"questions={q}", "retriever=learned", f"engine.ranker={ranker}"])
        err = capsys.readouterr().err.strip()
        assert exc.value.code == 2 and err.startswith("hpengine: error: ") and message in err and "\n" not in err


def test_eval_records_the_ranker_that_ranked(saved, tmp_path, monkeypatch):
    from hpengine.config import EvalConfig, EvalJobConfig, LearnedConfig
    from hpengine.jobs import run_eval

    out = tmp_path / "r.safetensors"
    q = str(builtin_questions_path())
    run_train(TrainJobConfig(index=saved[:1], questions=[q], out=str(out), epochs=5, hidden=0), progress=False)
    result = run_eval(EvalJobConfig(index=saved[0], questions=q, engine=LearnedConfig(ranker=str(out)),
                                    eval=EvalConfig(max_questions=2)), progress=False)
    assert result["ranker"] == str(out) and result["config"]["engine"]["ranker"] == str(out)
    assert not any("trained on candidates" in w for w in result["warnings"])
    narrow = tmp_path / "narrow.safetensors"
    run_train(TrainJobConfig(index=saved[:1], questions=[q], out=str(narrow), epochs=5, hidden=0, candidate_width=10,
                             mention_width=0), progress=False)
    wide = run_eval(EvalJobConfig(index=saved[0], questions=q, engine=LearnedConfig(ranker=str(narrow)),
                                  eval=EvalConfig(max_questions=2)), progress=False)
    assert (f"ranker {str(narrow)!r} was trained on candidates of candidate_width=10 (this run: 30), mention_width=0 "
            f"(this run: 20)") in wide["warnings"][0]
    monkeypatch.setattr("hpengine.pipeline.retrievers._learned.default_ranker_path", lambda encoder: out)
    monkeypatch.setattr("hpengine.pipeline.retrievers.default_ranker_path", lambda encoder: out)
    shipped = run_eval(EvalJobConfig(index=saved[0], questions=q, engine=LearnedConfig(),
                                     eval=EvalConfig(max_questions=2)), progress=False)
    assert shipped["ranker"] == str(out) and shipped["config"]["engine"]["ranker"] == ""  # the one shipped
    plain = run_eval(EvalJobConfig(index=saved[0], questions=q, eval=EvalConfig(max_questions=2)), progress=False)
    assert "ranker" not in plain  # only the learned method reads one


@pytest.mark.parametrize("second", ["the same file", "its first ten questions"])
def test_folds_rank_every_question_by_a_ranker_that_never_saw_it(saved, tmp_path, monkeypatch, second):
    import torch

    import hpengine.pipeline
    from hpengine.pipeline import RankerExamples

    fits, real = [], hpengine.pipeline.train_ranker

    sets = []

    def recording(examples: RankerExamples, **kwargs):
        fits.append({tuple(row) for row in examples.candidates.tolist()})  # the questions it trains on
        sets.append(set(examples.question_set.tolist()))
        return real(examples, **kwargs)

    ranked, real_rank = [], hpengine.pipeline.rank_candidates

    def rank_recording(model, examples):
        ranked.append((len(fits) - 1, {tuple(row) for row in examples.candidates.tolist()}))
        return real_rank(model, examples)

    monkeypatch.setattr("hpengine.pipeline.train_ranker", recording)
    monkeypatch.setattr("hpengine.pipeline.rank_candidates", rank_recording)
    q = str(builtin_questions_path())
    q2 = q
    if second == "its first ten questions":  # the same questions again, in a file of another length
        q2 = _first_questions(tmp_path, 10)
    out = tmp_path / "cv.safetensors"
    report = run_train(TrainJobConfig(index=saved, questions=[q, q2], out=str(out), folds=3, epochs=10, hidden=0),
                       progress=False)
    n = 24 if second == "the same file" else 22
    assert report["folds"] == 3 and report["cv_questions"] == n and report["train_questions"] == n
    assert "held_questions" not in report  # the folds replace the held share; the final ranker sees every question
    assert len(fits) == 4 and len(ranked) == 3  # three folds, then the final ranker
    assert sets == [{0, 1}] * 4  # every fit weighs the two files (balance_sets)
    for fit, rows in ranked:
        assert not rows & fits[fit]  # no question (nor its copy in the other file) ranked by a ranker trained on it
    assert set().union(*(rows for _, rows in ranked)) == fits[-1]  # and every question is ranked
    mean, low, high = report["cv_gain@5"]
    assert abs(mean - (report["cv_recall@5"] - report["cv_fusion_recall@5"])) < 1e-3 and low <= mean <= high
    text = format_train_report(report, str(out))
    assert f"3-fold cross-validated over {n} questions" in text and "95% interval" in text
    meta = load_ranker(out)[1]
    assert meta["folds"] == 3 and meta["holdout"] == 0.0 and torch.isfinite(torch.tensor(report["loss"]))
    files = report["cv_per_file"]
    assert [f["questions"] for f in files] == [12, n - 12] and f"{saved[1]} questions={q2}: {n - 12} questions" in text
    for key in ("recall@2", "recall@5"):
        pooled = sum(f[key] * f["scored"] for f in files) / sum(f["scored"] for f in files)
        assert abs(pooled - report[f"cv_{key}"]) < 1e-3


def test_holdout_and_folds_together_are_refused(saved, tmp_path):
    import hpengine
    from hpengine.jobs import parse_train_args

    with pytest.raises(UserError, match="holdout=0.3 and folds=5 are two ways to validate"):
        parse_train_args(["A", "questions=q", "holdout=0.3", "folds=5"])
    with pytest.raises(UserError, match="two ways to validate"):
        hpengine.train(saved[0], str(builtin_questions_path()), tmp_path / "r.safetensors", holdout=0.3, folds=5)
    assert parse_train_args(["A", "questions=q", "folds=5"]).folds == 5  # either alone is fine


@pytest.mark.parametrize("settings,message", [
    (dict(folds=1), "folds must be 0 .* or at least 2"),
    (dict(folds=2, adapter_steps=5), "folds= with adapter_steps= is not supported"),
])
def test_bad_folds_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        TrainJobConfig(index=["a"], questions=["q"], out="r.safetensors", **settings)


def test_hpengine_train_with_folds_says_each_fold(saved, tmp_path, capsys):
    from hpengine.cli import main

    q = str(builtin_questions_path())
    main(["train", saved[0], f"questions={q}", f"out={tmp_path / 'r.safetensors'}", "epochs=5", "hidden=0", "folds=3"])
    captured = capsys.readouterr()
    for f in (1, 2, 3):
        assert f"fold {f}/3: trained on 8 questions" in captured.err  # 12 questions, a third held each time
    assert "3-fold cross-validated over 12 questions" in captured.out
    assert f"{saved[0]} questions=" not in captured.out  # one file: no per-file lines
