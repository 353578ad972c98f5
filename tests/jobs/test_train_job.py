"""``hpengine train``'s job: trains on one or several indexes with their question files, validates on a
held-out share, writes a ranker the learned method reads; refuses bad input in one line before any
model loads."""
import dataclasses

import pytest

from hpengine.config import TrainJobConfig
from hpengine.errors import UserError
from hpengine.graph import builtin_questions_path
from hpengine.jobs import format_train_report, run_train
from hpengine.nn import load_ranker
from hpengine.pipeline.retrievers import FEATURES


@pytest.fixture
def saved(builtin_index, tmp_path, monkeypatch):
    """Two saved copies of the built-in index; the jobs get the test's hashing encoder."""
    index, encoder, _ = builtin_index
    paths = [str(index.save(tmp_path / name)) for name in ("a", "b")]
    monkeypatch.setattr("hpengine.models.encoder_for_index", lambda meta, cfg, where: encoder)
    return paths


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
    line = f"R@5 less the fusion's: {100 * mean:+.1f} points, 95% interval {100 * low:+.1f} to {100 * high:+.1f}"
    assert line in text


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
    def no_model(*args):
        raise AssertionError("a model loaded")

    monkeypatch.setattr("hpengine.models.encoder_for_index", no_model)
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
    for args, message in ((["questions=q.json", "A"], "pairs with the index before it"),
                          (["A", "questions=q", "epoch=3"], "unknown key 'epoch'.*did you mean epochs"),
                          (["A", "questions=q", "hidden=wide"], "hidden= must be an int"),
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
