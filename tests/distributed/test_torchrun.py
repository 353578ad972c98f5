"""Distributed eval and index build: 2-process gloo runs under torchrun (subprocesses, demo corpus,
real spaCy and MiniLM) equal the 1-process run; a failing rank fails the run and writes nothing;
the Python API over a process group (spawned gloo workers, fake engine). ``-m slow`` adds PPR,
LLM mode (tiny random Qwen2) and the refusal of other commands under torchrun (~40 s more)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hpengine.config import EncoderConfig, EvalConfig, EvalJobConfig, IndexConfig
from hpengine.distributed import shard_batches, strip_timing
from hpengine.distributed._index import _share
from hpengine.graph import Index, builtin_corpus_path, builtin_questions_path
from hpengine.jobs import run_eval, run_index
from hpengine.pipeline import get_retriever

HPENGINE = shutil.which("hpengine") or str(Path(sys.executable).with_name("hpengine"))


# Questions are encoded in float32 in both runs: the ranks run one thread each, and a bfloat16
# matrix product (encoder.dtype=auto on CPUs with native bfloat16) sums in an order that depends on
# the thread count, which would move scores in their last digits.
QUERY_ENCODER = EncoderConfig(name_or_path="", dtype="float32")


def torchrun(*args, logs, env=None, nproc=2):
    """``hpengine ARGS`` under torchrun; its per-run log folders go under ``logs`` (a tmp_path)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           f"--log-dir={logs}", "--no-python", HPENGINE, *args]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=600)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    root = tmp_path_factory.mktemp("dist")
    index, _ = run_index(IndexConfig(corpus=str(builtin_corpus_path()), out=str(root / "idx1")), progress=False)
    return root, index


def test_shards_are_whole_batches_in_turn():
    assert shard_batches(12, 5, 0, 2) == [range(0, 5), range(10, 12)]
    assert shard_batches(12, 5, 1, 2) == [range(5, 10)]
    assert shard_batches(3, 5, 1, 2) == []
    covered = sorted(i for r in range(3) for b in shard_batches(17, 4, r, 3) for i in b)
    assert covered == list(range(17))
    assert [_share(10, r, 3) for r in range(3)] == [(0, 4), (4, 7), (7, 10)]


@pytest.mark.slow  # the default suite checks the same on the resumed run below (one torchrun fewer)
@pytest.mark.parametrize("retriever", ["hyperprove", "ppr"])
def test_two_ranks_write_what_one_process_writes(one_process, retriever):
    root, _ = one_process
    single, double = root / f"{retriever}_1.json", root / f"{retriever}_2.json"
    args = [f"index={root / 'idx1'}", f"questions={builtin_questions_path()}", "eval.batch_size=5",
            f"retriever={retriever}", "encoder.dtype=float32"]
    run_eval(EvalJobConfig(index=str(root / "idx1"), questions=str(builtin_questions_path()), output=str(single),
                           engine=get_retriever(retriever).config_class(), eval=EvalConfig(batch_size=5),
                           encoder=QUERY_ENCODER),
             progress=False)
    run = torchrun("eval", *args, f"output={double}", logs=root / "logs")
    assert run.returncode == 0, run.stderr[-3000:]
    a, b = json.loads(single.read_text()), json.loads(double.read_text())
    assert json.dumps(a["records"]) == json.dumps(b["records"])  # byte for byte, in order
    assert strip_timing(a) == strip_timing(b)
    assert b["distributed"]["world_size"] == 2 and b["distributed"]["backend"] == "gloo"
    assert [r["questions"] for r in b["distributed"]["per_rank"]] == [7, 5]  # batches 0, 2 | 1
    assert "recall@5" in run.stdout  # rank 0 printed the table once
    assert run.stdout.count("recall@5") == 1


def test_killed_torchrun_eval_resumes_from_its_checkpoint(one_process):
    """A failing rank fails the run and writes nothing. eval.checkpoint under torchrun: a run whose
    rank 1 dies after one batch leaves rank 0's batches in FILE and rank 1's in FILE.rank1; the
    rerun answers only the rest (in the batches one process would run) and writes what one process
    writes, byte for byte, rank 0 printing the table once; one process then finds every question done."""
    root, _ = one_process
    ckpt, out = root / "ckpt" / "run.jsonl", root / "resumed.json"
    single = run_eval(EvalJobConfig(index=str(root / "idx1"), questions=str(builtin_questions_path()),
                                    eval=EvalConfig(batch_size=2), encoder=QUERY_ENCODER), progress=False)
    args = [f"index={root / 'idx1'}", f"questions={builtin_questions_path()}", "eval.batch_size=2",
            f"eval.checkpoint={ckpt}", f"output={out}", "encoder.dtype=float32"]
    killed = torchrun("eval", *args, logs=root / "logs", env={"HPENGINE_TEST_FAIL_RANK": "1:1"})
    # a failing rank fails the run, every rank reports it, and no output (or temporary) is written
    assert killed.returncode != 0
    assert "rank 1 failed: RuntimeError: HPENGINE_TEST_FAIL_RANK=1:1" in killed.stderr
    assert not out.exists() and not list(root.glob(".resumed.json.tmp*"))

    def positions(path):
        return [json.loads(ln)["positions"] for ln in path.read_text().splitlines()[1:]]

    assert positions(ckpt) == [[0, 1], [4, 5], [8, 9]]  # rank 0 ran all of its batches
    assert positions(ckpt.with_name("run.jsonl.rank1")) == [[2, 3]]  # rank 1 died before [6, 7]
    run = torchrun("eval", *args, logs=root / "logs")
    assert run.returncode == 0, run.stderr[-3000:]
    resumed = json.loads(out.read_text())
    assert resumed["resumed_questions"] == 8
    assert json.dumps(resumed["records"]) == json.dumps(single["records"])
    assert strip_timing({**resumed, "resumed_questions": 0}) == strip_timing(single)
    assert [r["questions"] for r in resumed["distributed"]["per_rank"]] == [2, 2]  # [6, 7] | [10, 11]
    assert resumed["distributed"]["world_size"] == 2 and resumed["distributed"]["backend"] == "gloo"
    assert run.stdout.count("recall@5") == 1  # rank 0 printed the table, once
    assert positions(ckpt.with_name("run.jsonl.rank1")) == [[2, 3], [10, 11]]
    again = run_eval(EvalJobConfig(index=str(root / "idx1"), questions=str(builtin_questions_path()),
                                   eval=EvalConfig(batch_size=2, checkpoint=str(ckpt))), progress=False)
    assert again["resumed_questions"] == 12
    assert json.dumps(again["records"]) == json.dumps(single["records"])


@pytest.mark.parametrize("shard_size", [10, pytest.param(0, marks=pytest.mark.slow)])
def test_two_rank_index_build_equals_one_process(one_process, shard_size):
    """shard_size=10: the ranks extract and embed shards 0, 2 | 1, 3 into the build folder and rank
    0 merges; 0: the ranks share every encoder call and gather (the build in one piece)."""
    root, _ = one_process
    # float32 in both builds: bfloat16 products sum in an order that depends on the thread count
    single, _ = run_index(IndexConfig(corpus=str(builtin_corpus_path()), out=str(root / f"idx1_{shard_size}"),
                                      shard_size=shard_size, encoder=EncoderConfig(dtype="float32")), progress=False)
    out = root / f"idx2_{shard_size}"
    run = torchrun("index", f"corpus={builtin_corpus_path()}", f"out={out}", f"shard_size={shard_size}",
                   "encoder.dtype=float32", logs=root / "logs")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("index written to") == 1
    double = Index.load(out)
    assert double.facts == single.facts and double.entities == single.entities
    assert [(p.title, p.text) for p in double.passages] == [(p.title, p.text) for p in single.passages]
    for name in ("fact_passage", "fact_entity_raw", "synonyms"):
        assert torch.equal(getattr(double, name), getattr(single, name)), name
    assert torch.equal(double.graph.fact_entity, single.graph.fact_entity)
    for name in ("fact_emb", "entity_emb", "passage_emb"):
        # the ranks run the encoder's own batches of each shard (same texts, same padding): bit-identical
        assert torch.equal(getattr(double, name), getattr(single, name)), name
    if shard_size:
        report = double.meta["build_report"]
        assert (report["shards"], report["resumed_shards"]) == (4, 0)
        assert sorted(r["shards_run"] for r in report["distributed"]["per_rank"]) == [2, 2]
        assert not (out / ".build").exists()


# ----------------------------------------------- the Python API, spawned gloo
class EchoEngine:
    """Answers each question with its text and the batch it came in (so batch identity is checked)."""

    def __init__(self):
        from types import SimpleNamespace

        self.index = SimpleNamespace(device=torch.device("cpu"))
        self.decomposer = self.reader = None
        self.timer = SimpleNamespace(seconds={})
        self.method = "echo"

    def llm_components(self):
        return []

    def answer(self, questions):
        from hpengine.pipeline import Prediction

        if any(q == "bad question" for q in questions):
            from hpengine.errors import UserError

            raise UserError("this question is refused (got 'bad question')")
        return [Prediction(q, f"{q}|{questions[0]}", [], []) for q in questions]


def _worker(rank, world, init, cases, out):
    import torch.distributed as dist

    from hpengine.distributed import answer_distributed, shard_questions

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        for name, questions in cases.items():  # one process group serves every case in turn
            mine = [i for i, _ in shard_questions(questions, 3)]
            try:
                preds = [p.answer for p in answer_distributed(EchoEngine(), questions, 3)]
            except Exception as exc:  # noqa: BLE001 (reported to the test)
                preds = f"{type(exc).__name__}: {exc}"
            Path(out, f"{name}_{rank}.json").write_text(json.dumps({"mine": mine, "preds": preds}))
    finally:
        dist.destroy_process_group()


def test_answer_distributed_over_a_process_group(tmp_path):
    import torch.multiprocessing as mp

    good = [f"q{i}" for i in range(8)]
    bad = [*good[:4], "bad question", *good[5:]]  # in batch 1: rank 1's
    init = f"file://{tmp_path / 'rendezvous'}"
    mp.spawn(_worker, args=(2, init, {"good": good, "bad": bad}, str(tmp_path)), nprocs=2)
    for name in ("good", "bad"):
        got = [json.loads((tmp_path / f"{name}_{r}.json").read_text()) for r in range(2)]
        assert got[0]["mine"] == [0, 1, 2, 6, 7] and got[1]["mine"] == [3, 4, 5]
        if name == "bad":  # every rank raises the failing rank's error, the next case still runs
            assert got[0]["preds"] == got[1]["preds"] == \
                "UserError: rank 1: this question is refused (got 'bad question')"
        else:
            expected = [f"q{i}|q{i - i % 3}" for i in range(8)]
            assert got[0]["preds"] == got[1]["preds"] == expected


@pytest.mark.slow
def test_other_commands_refuse_torchrun(tmp_path):
    run = torchrun("add", f"corpus={builtin_corpus_path()}", f"out={tmp_path / 'x'}", logs=tmp_path / "logs")
    assert run.returncode != 0
    assert "hpengine: error: under torchrun only `hpengine eval` and `hpengine index` shard" in run.stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_llm_mode_two_ranks_equal_one_process(one_process):
    """LLM mode (a tiny random Qwen2 saved to disk as the decomposer and reader): same records,
    same token counts summed over the ranks."""
    from hpengine.config import ModelConfig
    from hpengine.eval import load_questions
    from hpengine.testing._tiny_lm import build_tiny_pair

    root, index = one_process
    questions = [q.question for q in load_questions(str(builtin_questions_path()))]
    model, tok = build_tiny_pair(questions + index.facts[:50], initializer_range=0.5)
    folder = root / "tiny_lm"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    llm = ["model.dtype=float32", "model.max_new_tokens_decompose=12", "model.max_new_tokens_read=6",
           "encoder.dtype=float32"]
    single, double = root / "llm_1.json", root / "llm_2.json"
    run_eval(EvalJobConfig(index=str(root / "idx1"), questions=str(builtin_questions_path()), output=str(single),
                           model=ModelConfig(llm=str(folder), dtype="float32", max_new_tokens_decompose=12,
                                             max_new_tokens_read=6), eval=EvalConfig(batch_size=5),
                           encoder=QUERY_ENCODER), progress=False)
    run = torchrun("eval", f"index={root / 'idx1'}", f"questions={builtin_questions_path()}", "eval.batch_size=5",
                   f"model.llm={folder}", *llm, f"output={double}", logs=root / "logs")
    assert run.returncode == 0, run.stderr[-3000:]
    a, b = json.loads(single.read_text()), json.loads(double.read_text())
    assert a["llm"] and a["llm_tokens_in"] > 0
    assert json.dumps(a["records"]) == json.dumps(b["records"])
    assert strip_timing(a) == strip_timing(b)
