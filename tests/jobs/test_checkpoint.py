"""Resumable evaluation (eval.checkpoint): a killed run resumes with the questions it had not
finished, and ends with the same records as a run that was never stopped."""
import json
from types import SimpleNamespace

import pytest

from hpengine.config import DenseConfig, EvalConfig, HyperProveConfig
from hpengine.errors import UserError
from hpengine.jobs import evaluate
from hpengine.pipeline import Engine


class Killed(Exception):
    pass


def _records(result):
    return [{k: v for k, v in r.items()} for r in result["records"]]


def _engine(built, **kw):
    index, encoder, _ = built
    return Engine(index, encoder, config=HyperProveConfig(**kw))


def _count_calls(engine, fail_after=None):
    """Wrap ``engine.answer``: record each batch's questions; raise Killed after ``fail_after`` batches."""
    calls, real = [], engine.answer

    def answer(qs):
        if fail_after is not None and len(calls) >= fail_after:
            raise Killed()
        calls.append(list(qs))
        return real(qs)

    engine.answer = answer
    return calls


def test_checkpoint_changes_nothing_and_holds_every_batch(builtin_index, tmp_path):
    _, _, questions = builtin_index
    plain = evaluate(_engine(builtin_index), questions, EvalConfig(batch_size=5), progress=False)
    path = tmp_path / "run.jsonl"
    ckpt = evaluate(_engine(builtin_index), questions, EvalConfig(batch_size=5, checkpoint=str(path)), progress=False)
    assert _records(ckpt) == _records(plain)
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["run"]["method"] == "hyperprove"
    batches = [json.loads(ln) for ln in lines[1:]]
    assert [len(b["positions"]) for b in batches] == [5, 5, 2]  # 12 questions in batches of 5
    assert ckpt["resumed_questions"] == 0


def test_killed_run_resumes_with_the_rest(builtin_index, tmp_path):
    _, _, questions = builtin_index
    plain = evaluate(_engine(builtin_index), questions, EvalConfig(batch_size=4), progress=False)
    path = tmp_path / "run.jsonl"
    cfg = EvalConfig(batch_size=4, checkpoint=str(path))
    first = _engine(builtin_index)
    calls = _count_calls(first, fail_after=2)
    with pytest.raises(Killed):
        evaluate(first, questions, cfg, progress=False)
    assert sum(map(len, calls)) == 8
    second = _engine(builtin_index)
    calls = _count_calls(second)
    resumed = evaluate(second, questions, cfg, progress=False)
    assert calls == [[q.question for q in questions[8:]]]  # only the unfinished batch ran again
    assert resumed["resumed_questions"] == 8
    assert _records(resumed) == _records(plain)
    recorded = [json.loads(ln) for ln in path.read_text().splitlines()[1:]]
    # the reported wall time covers all three batches, the killed process's too (and this process's
    # time around its one batch: milliseconds, more on a loaded CPU)
    batches = sum(b["wall"] for b in recorded)
    assert batches - 0.001 <= resumed["wall_seconds"] <= batches + 1.0
    # a third run finds everything done and answers nothing
    third = _engine(builtin_index)
    calls = _count_calls(third)
    again = evaluate(third, questions, cfg, progress=False)
    assert calls == [] and _records(again) == _records(plain)


def test_torn_last_line_is_dropped_and_its_batch_reruns(builtin_index, tmp_path):
    _, _, questions = builtin_index
    path = tmp_path / "run.jsonl"
    cfg = EvalConfig(batch_size=6, checkpoint=str(path))
    plain = evaluate(_engine(builtin_index), questions, cfg, progress=False)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2]) + "\n" + lines[2][: len(lines[2]) // 2])  # killed mid-write
    engine = _engine(builtin_index)
    calls = _count_calls(engine)
    resumed = evaluate(engine, questions, cfg, progress=False)
    assert calls == [[q.question for q in questions[6:]]]
    assert _records(resumed) == _records(plain)
    assert all(json.loads(ln) for ln in path.read_text().splitlines())  # the file is whole again


def test_a_different_run_is_refused_and_the_file_kept(builtin_index, tmp_path):
    index, encoder, questions = builtin_index
    path = tmp_path / "run.jsonl"
    evaluate(_engine(builtin_index), questions[:4], EvalConfig(batch_size=4, checkpoint=str(path)), progress=False)
    before = path.read_bytes()
    with pytest.raises(UserError, match=r"different run \(engine.passage_width: 10 in the file, 7 now\)"):
        evaluate(_engine(builtin_index, passage_width=7), questions[:4],
                 EvalConfig(batch_size=4, checkpoint=str(path)), progress=False)
    with pytest.raises(UserError, match="different run .*method"):
        evaluate(Engine(index, encoder, config=DenseConfig()), questions[:4],
                 EvalConfig(batch_size=4, checkpoint=str(path)), progress=False)
    with pytest.raises(UserError, match="position 0"):  # other questions at the recorded positions
        evaluate(_engine(builtin_index), questions[4:8], EvalConfig(batch_size=4, checkpoint=str(path)),
                 progress=False)
    assert path.read_bytes() == before
    other = tmp_path / "other.jsonl"
    other.write_text('{"not": "a checkpoint"}\n')
    with pytest.raises(UserError, match="not an hpengine eval checkpoint"):
        evaluate(_engine(builtin_index), questions[:4], EvalConfig(checkpoint=str(other)), progress=False)
    with pytest.raises(UserError, match="is a folder"):
        evaluate(_engine(builtin_index), questions[:4], EvalConfig(checkpoint=str(tmp_path)), progress=False)


def test_llm_counts_and_stage_seconds_sum_over_the_runs(builtin_index, tmp_path):
    """A resumed run reports the token counts of the killed process's batches too."""
    _, _, questions = builtin_index

    class Counter:  # stands for an LLM: 10 tokens in and 1 out per question answered
        def __init__(self):
            self.stats = {"tokens_in": 0, "tokens_out": 0, "repeats": 0}

    def counted(engine, fail_after=None):
        model, real, done = Counter(), engine.answer, []

        def answer(qs):
            if fail_after is not None and len(done) >= fail_after:
                raise Killed()
            done.append(qs)
            model.stats["tokens_in"] += 10 * len(qs)
            model.stats["tokens_out"] += len(qs)
            return real(qs)

        engine.answer, engine.llm_components = answer, lambda: [model]
        return engine

    cfg = EvalConfig(batch_size=5, checkpoint=str(tmp_path / "run.jsonl"))
    with pytest.raises(Killed):
        evaluate(counted(_engine(builtin_index), fail_after=1), questions, cfg, progress=False)
    resumed = evaluate(counted(_engine(builtin_index)), questions, cfg, progress=False)
    assert (resumed["llm_tokens_in"], resumed["llm_tokens_out"]) == (10 * len(questions), len(questions))
    assert resumed["resumed_questions"] == 5
    assert resumed["seconds"]["retrieve"] > 0


def test_checkpoint_files_are_the_file_and_its_rank_files(tmp_path):
    from hpengine.jobs import checkpoint_files, rank_path

    path = tmp_path / "run.jsonl"
    assert rank_path(path, 0) == path and rank_path(path, 3) == tmp_path / "run.jsonl.rank3"
    assert checkpoint_files(path) == []
    for name in ("run.jsonl.rank10", "run.jsonl.rank2", "run.jsonl.rank0", "run.jsonl.rankx", "run.jsonl.rank2.tmp",
                 "other.jsonl.rank1"):
        (tmp_path / name).write_text("")
    assert checkpoint_files(path) == [tmp_path / "run.jsonl.rank2", tmp_path / "run.jsonl.rank10"]
    path.write_text("")
    assert checkpoint_files(path)[0] == path and len(checkpoint_files(path)) == 3


def test_one_process_resumes_from_the_rank_files_of_a_torchrun_run(builtin_index, tmp_path):
    """A rank file (``FILE.rank<r>``, written by a torchrun rank) counts as finished work; it is read,
    never written, and a torn last line in it is skipped there, not repaired."""
    _, _, questions = builtin_index
    plain = evaluate(_engine(builtin_index), questions, EvalConfig(batch_size=3), progress=False)
    path = tmp_path / "run.jsonl"
    evaluate(_engine(builtin_index), questions[:6], EvalConfig(batch_size=3, checkpoint=str(path)), progress=False)
    lines = path.read_text().splitlines()
    rank1 = tmp_path / "run.jsonl.rank1"
    # rank 1 finished positions 3-5 and was killed while writing positions 6-8 (a torn line)
    rank1.write_text("\n".join([lines[0], lines[2], lines[1][: len(lines[1]) // 2]]))
    path.write_text("\n".join(lines[:2]) + "\n")  # rank 0 finished positions 0-2
    before = rank1.read_bytes()
    engine = _engine(builtin_index)
    calls = _count_calls(engine)
    resumed = evaluate(engine, questions, EvalConfig(batch_size=3, checkpoint=str(path)), progress=False)
    assert calls == [[q.question for q in questions[6:9]], [q.question for q in questions[9:12]]]
    assert resumed["resumed_questions"] == 6
    assert _records(resumed) == _records(plain)
    assert rank1.read_bytes() == before
    assert [json.loads(ln)["positions"] for ln in path.read_text().splitlines()[1:]] == [[0, 1, 2], [6, 7, 8],
                                                                                          [9, 10, 11]]


def test_a_rank_file_of_a_different_run_is_refused(builtin_index, tmp_path):
    _, _, questions = builtin_index
    other = tmp_path / "other.jsonl"
    evaluate(_engine(builtin_index, passage_width=7), questions[:4], EvalConfig(batch_size=4, checkpoint=str(other)),
             progress=False)
    other.rename(tmp_path / "run.jsonl.rank1")
    path = tmp_path / "run.jsonl"
    with pytest.raises(UserError, match=r"run.jsonl.rank1' was written by a different run \(engine.passage_width"):
        evaluate(_engine(builtin_index), questions[:4], EvalConfig(batch_size=4, checkpoint=str(path)), progress=False)
    assert not path.exists()  # refused before anything is written


class NamedReader:
    """A reader stand-in whose model names its folder, as a Hugging Face model does."""

    def __init__(self, folder):
        self.model = SimpleNamespace(name_or_path=folder)
        self.stats = {"tokens_in": 0, "tokens_out": 0}

    def read(self, questions, facts, final=False, steps=None):
        return ["unknown"] * len(questions)


def _llm_engine(built, folder):
    index, encoder, _ = built
    return Engine(index, encoder, config=DenseConfig(), reader=NamedReader(folder))


def test_another_prompt_version_is_a_different_run(builtin_index, tmp_path, monkeypatch):
    import hpengine.models

    _, _, questions = builtin_index
    cfg = EvalConfig(batch_size=4, checkpoint=str(tmp_path / "run.jsonl"))
    evaluate(_llm_engine(builtin_index, "some-llm"), questions[:4], cfg, progress=False)
    monkeypatch.setitem(hpengine.models.QA_PROMPT_VERSIONS, "read", "read-v999")
    with pytest.raises(UserError, match=r"prompts.read: 'read-v1' in the file, 'read-v999' now"):
        evaluate(_llm_engine(builtin_index, "some-llm"), questions[:4], cfg, progress=False)


def test_another_llm_is_a_different_run(builtin_index, tmp_path):
    """The LLM is read off the engine's own models, so no caller can forget to name it."""
    _, _, questions = builtin_index
    cfg = EvalConfig(batch_size=4, checkpoint=str(tmp_path / "run.jsonl"))
    evaluate(_llm_engine(builtin_index, "/models/a"), questions[:4], cfg, progress=False)
    with pytest.raises(UserError, match=r"llm.reader: '/models/a' in the file, '/models/b' now"):
        evaluate(_llm_engine(builtin_index, "/models/b"), questions[:4], cfg, progress=False)


def test_rank_files_count_as_ranks_side_by_side(builtin_index, tmp_path):
    """Wall time and stage seconds of several files are the longest file's (the ranks ran side by
    side); token counts sum over the files."""
    from hpengine.jobs import EvalCheckpoint, run_fingerprint

    _, _, questions = builtin_index
    engine = _engine(builtin_index)
    run, path = run_fingerprint(engine), tmp_path / "run.jsonl"
    preds = engine.answer([q.question for q in questions[:4]])
    for rank, (wall, read, tokens) in enumerate([(2.0, 1.5, 10), (3.0, 1.0, 20)]):
        writer = EvalCheckpoint(str(path), run, questions, rank=rank, read_others=False)
        pos = [2 * rank, 2 * rank + 1]  # rank 0: positions 0, 1; rank 1: 2, 3
        writer.add(pos, [questions[i] for i in pos], preds[2 * rank: 2 * rank + 2], wall, {"read": read},
                   {"tokens_in": tokens, "tokens_out": 1, "repeats": 0})
    both = EvalCheckpoint(str(path), run, questions)
    assert sorted(both.done) == [0, 1, 2, 3]
    assert both.wall == 3.0 and both.seconds == {"read": 1.5}
    assert both.llm == {"tokens_in": 30, "tokens_out": 2, "repeats": 0}


# ------------------------------------------------------------------ the shape of every line
def _valid_file(built, tmp_path, name="run.jsonl"):
    """A finished checkpoint of 4 questions in batches of 2: header, then lines 2 and 3."""
    _, _, questions = built
    path = tmp_path / name
    evaluate(_engine(built), questions[:4], EvalConfig(batch_size=2, checkpoint=str(path)), progress=False)
    return path


def _set(obj, dotted: str, value):
    """``obj`` with the field at ``dotted`` (``a.b[0].c``; ``value`` DELETE removes it) changed."""
    import re as _re

    parts = [int(p) if p.isdigit() else p for p in _re.findall(r"[^.\[\]]+", dotted)]
    target = obj
    for p in parts[:-1]:
        target = target[p]
    if value is DELETE:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value
    return obj


DELETE = object()
SHAPES = [  # (field changed, new value, field named in the error)
    ("predictions", DELETE, "predictions"),
    ("wall", DELETE, "wall"),
    ("predictions", [], "predictions"),  # fewer predictions than positions
    ("ids", ["x"], "ids"),
    ("positions", "0,1", "positions"),
    ("positions[1]", "1", "positions[1]"),
    ("positions[0]", -1, "positions[0]"),
    ("positions[0]", True, "positions[0]"),
    ("ids[0]", 7, "ids[0]"),
    ("predictions[1]", "a prediction", "predictions[1]"),
    ("predictions[0].answer", ["x"], "predictions[0].answer"),
    ("predictions[0].chain", DELETE, "predictions[0].chain"),
    ("predictions[0].chain", "hop", "predictions[0].chain"),
    ("predictions[0].chain[0]", "hop", "predictions[0].chain[0]"),
    ("predictions[0].chain[0].facts[0].score", "high", "predictions[0].chain[0].facts[0].score"),
    ("predictions[0].chain[0].facts[0].extra", 1, "predictions[0].chain[0].facts[0]"),
    ("predictions[0].chain[0].linked", None, "predictions[0].chain[0].linked"),
    ("predictions[0].passages", [0, "1"], "predictions[0].passages[1]"),
    ("predictions[0].passages[0]", -3, "predictions[0].passages[0]"),
    ("predictions[0].notes", [1], "predictions[0].notes[0]"),
    ("predictions[0].diagnostics", [{"seeds": [0]}], "predictions[0].diagnostics[0]"),
    ("predictions[0].diagnostics", [{"selected": [-1]}], "predictions[0].diagnostics[0].selected[0]"),
    ("predictions[0].paths", [{"steps": 1, "answer": "x"}], "predictions[0].paths[0].score"),
    ("predictions[0].paths", [{"steps": 99, "answer": "x", "score": 0.5}], "predictions[0].paths"),
    ("predictions[0].question", "Another question?", "predictions[0].question"),
    ("wall", "1.5", "wall"),
    ("seconds", [1.0], "seconds"),
    ("seconds.retrieve", "fast", "seconds.retrieve"),
    ("llm", None, "llm"),
    ("llm.tokens_in", 1.5, "llm.tokens_in"),
]


@pytest.fixture(scope="module")
def recorded(builtin_index, tmp_path_factory):
    """``(run, lines)``: the fingerprint and the lines of :func:`_valid_file`, made once."""
    from hpengine.jobs import run_fingerprint

    path = _valid_file(builtin_index, tmp_path_factory.mktemp("recorded"))
    return run_fingerprint(_engine(builtin_index)), path.read_text().splitlines()


@pytest.mark.parametrize("line", [2, 3])  # the last line too: only invalid JSON is taken for a torn write
@pytest.mark.parametrize("dotted, value, field", SHAPES,
                         ids=[f"{s[0]}={'del' if s[1] is DELETE else repr(s[1])[:12]}" for s in SHAPES])
def test_a_line_of_the_wrong_shape_is_refused_naming_file_line_and_field(builtin_index, recorded, tmp_path, dotted,
                                                                         value, field, line):
    from hpengine.jobs import EvalCheckpoint

    _, _, questions = builtin_index
    run, lines = recorded
    lines = list(lines)
    lines[line - 1] = json.dumps(_set(json.loads(lines[line - 1]), dotted, value))
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    before = path.read_bytes()
    with pytest.raises(UserError, match=rf"run\.jsonl': line {line}: field {field!r} must be ".replace("[", r"\[")
                       .replace("]", r"\]")) as err:
        EvalCheckpoint(str(path), run, questions[:4])
    assert "\n" not in str(err.value) and path.read_bytes() == before


def test_fewer_predictions_than_positions_are_refused_before_any_work(builtin_index, recorded, tmp_path):
    _, _, questions = builtin_index
    _, lines = recorded
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(_set(json.loads(lines[1]), "predictions[1]", DELETE)), lines[2]]))
    engine = _engine(builtin_index)
    calls = _count_calls(engine)
    with pytest.raises(UserError, match=r"line 2: field 'predictions' must be a list of 2 predictions, one per "
                                        r"position \(got a list of 1\)"):
        evaluate(engine, questions[:4], EvalConfig(batch_size=2, checkpoint=str(path)), progress=False)
    assert calls == []


@pytest.mark.parametrize("line", ['[1, 2]', '"a batch"', '{}', 'null'])
def test_a_line_that_is_not_a_batch_object_is_refused(builtin_index, recorded, tmp_path, line):
    from hpengine.jobs import EvalCheckpoint

    _, _, questions = builtin_index
    run, lines = recorded
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join([lines[0], "", line, *lines[1:]]) + "\n")  # a blank line counts as a line
    with pytest.raises(UserError, match=r"run\.jsonl': line 3(: field 'positions')? must be "):
        EvalCheckpoint(str(path), run, questions[:4])


def test_line_numbers_count_blank_lines_and_a_torn_line_before_the_last_is_refused(builtin_index, recorded,
                                                                                   tmp_path):
    from hpengine.jobs import EvalCheckpoint

    _, _, questions = builtin_index
    run, lines = recorded
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join([lines[0], "", lines[1][:40], lines[2]]) + "\n")
    with pytest.raises(UserError, match=r"run\.jsonl': line 3 is not JSON"):
        EvalCheckpoint(str(path), run, questions[:4])


def test_a_line_torn_inside_a_multibyte_character_is_dropped(builtin_index, tmp_path):
    """Lines are written with ensure_ascii=False: a kill can cut a UTF-8 character in two."""
    _, _, questions = builtin_index
    path = _valid_file(builtin_index, tmp_path)
    lines = path.read_bytes().split(b"\n")
    torn = json.dumps({"positions": [2, 3], "ids": ["é"]}, ensure_ascii=False).encode()[:-4]
    assert torn.endswith(b"\xc3")
    path.write_bytes(b"\n".join(lines[:2]) + b"\n" + torn)
    engine = _engine(builtin_index)
    calls = _count_calls(engine)
    evaluate(engine, questions[:4], EvalConfig(batch_size=2, checkpoint=str(path)), progress=False)
    assert calls == [[q.question for q in questions[2:4]]]


def test_a_rank_file_of_the_wrong_shape_is_refused(builtin_index, tmp_path):
    _, _, questions = builtin_index
    path = _valid_file(builtin_index, tmp_path)
    lines = path.read_text().splitlines()
    (tmp_path / "run.jsonl.rank1").write_text("\n".join([lines[0], json.dumps(_set(json.loads(lines[2]), "llm", 3))]))
    path.write_text(lines[0] + "\n" + lines[1] + "\n")
    with pytest.raises(UserError, match=r"run\.jsonl\.rank1': line 2: field 'llm' "):
        evaluate(_engine(builtin_index), questions[:4], EvalConfig(batch_size=2, checkpoint=str(path)), progress=False)


def test_passage_ids_beyond_the_index_are_refused(builtin_index, recorded, tmp_path):
    from hpengine.jobs import EvalCheckpoint

    index, _, questions = builtin_index
    run, lines = recorded
    lines = list(lines)
    lines[1] = json.dumps(_set(json.loads(lines[1]), "predictions[1].chain[0].linked", [index.num_passages]))
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=rf"line 2: field 'predictions\[1\].chain\[0\].linked\[0\]' must be a "
                                        rf"passage id in \[0, {index.num_passages}\)"):
        EvalCheckpoint(str(path), run, questions[:4], num_passages=index.num_passages)
    EvalCheckpoint(str(path), run, questions[:4])  # without the count (an index built in memory): >= 0 only


# ------------------------------------------------------------------ a path that cannot be appended to
def test_a_path_under_a_file_is_refused_before_any_work(builtin_index, tmp_path):
    _, _, questions = builtin_index
    (tmp_path / "afile").write_text("x")
    engine = _engine(builtin_index)
    calls = _count_calls(engine)
    with pytest.raises(UserError, match=r"eval.checkpoint=.*afile/sub/run.jsonl': cannot create its folder") as err:
        evaluate(engine, questions[:4], EvalConfig(checkpoint=str(tmp_path / "afile" / "sub" / "run.jsonl")),
                 progress=False)
    assert "\n" not in str(err.value) and calls == []


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="needs Linux /proc")
def test_a_file_or_folder_that_refuses_writes_is_refused_before_any_work(builtin_index):
    """/proc refuses writes even to root (a read-only file by mode alone does not, for root)."""
    from hpengine.jobs import check_checkpoint_path

    with pytest.raises(UserError, match=r"eval.checkpoint='/proc/version' cannot be appended to"):
        check_checkpoint_path("/proc/version")
    with pytest.raises(UserError, match=r"cannot create its folder '/proc/hpengine-no-such-dir'"):
        check_checkpoint_path("/proc/hpengine-no-such-dir/run.jsonl")
    _, _, questions = builtin_index
    engine = _engine(builtin_index)
    calls = _count_calls(engine)
    with pytest.raises(UserError, match="cannot be appended to"):
        evaluate(engine, questions[:4], EvalConfig(checkpoint="/proc/version"), progress=False)
    assert calls == []


@pytest.mark.skipif(__import__("os").geteuid() == 0, reason="root writes to read-only files")
def test_a_read_only_file_is_refused(tmp_path):
    from hpengine.jobs import check_checkpoint_path

    path = tmp_path / "run.jsonl"
    path.write_text("")
    path.chmod(0o444)
    with pytest.raises(UserError, match=r"cannot be appended to \(Permission denied\)"):
        check_checkpoint_path(str(path))


def test_evaluate_pages_out_after_each_batch_unless_told_not_to(builtin_index, monkeypatch):
    """``eval.page_out``: the index's mapped pages go back to the kernel after every batch."""
    calls = []
    engine = _engine(builtin_index)
    monkeypatch.setattr(type(engine.index), "page_out", lambda self: calls.append(self) or 0)
    questions = builtin_index[2][:6]
    evaluate(engine, questions, EvalConfig(batch_size=4), progress=False)
    assert len(calls) == 2 and all(c is engine.index for c in calls)  # two batches
    evaluate(engine, questions, EvalConfig(batch_size=4, page_out=False), progress=False)
    assert len(calls) == 2
