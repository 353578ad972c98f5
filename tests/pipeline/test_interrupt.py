"""Ctrl-C during a job: one line ``hpengine: interrupted; ...`` saying what was kept, exit status
130, no traceback (``HPENGINE_DEBUG=1`` shows it). In-process: each job function raises
KeyboardInterrupt; one real SIGINT to a running ``hpengine index``."""
import os
import signal
import subprocess
import sys
import time

import pytest

import hpengine.distributed as distributed
import hpengine.jobs as jobs
import hpengine.jobs._index as index_job
from hpengine.graph import builtin_corpus_path, builtin_questions_path
from hpengine.cli import main


def _ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.fixture
def interrupted_jobs(monkeypatch):
    """Every job function raises KeyboardInterrupt as if Ctrl-C came while it ran."""
    monkeypatch.delenv("HPENGINE_DEBUG", raising=False)
    for module, name in ((distributed, "run_index_distributed"), (distributed, "run_eval_distributed"),
                         (jobs, "run_add"), (jobs, "run_delete"), (jobs, "run_update"), (jobs, "run_demo"),
                         (jobs, "make_engine")):
        monkeypatch.setattr(module, name, _ctrl_c)
    for module in (jobs, index_job):  # ask checks its INDEX before the engine loads
        monkeypatch.setattr(module, "check_index_dir", lambda *args, **kwargs: None, raising=False)


def _args(tmp_path):
    corpus, questions = str(builtin_corpus_path()), str(builtin_questions_path())
    return {
        "index": ["index", f"corpus={corpus}", f"out={tmp_path / 'idx'}"],
        "add": ["add", f"corpus={corpus}", f"out={tmp_path / 'idx'}"],
        "delete": ["delete", "ids=1", f"out={tmp_path / 'idx'}"],
        "update": ["update", f"corpus={corpus}", f"out={tmp_path / 'idx'}"],
        "eval": ["eval", f"index={tmp_path / 'idx'}", f"questions={questions}", "retriever=dense"],
        "demo": ["demo"],
        "ask": ["ask", str(tmp_path / "idx"), "Where was Ann Berg born?"],
    }


@pytest.mark.parametrize("command, kept", [
    ("index", "index saves are atomic, so the index folder holds what it held before or the complete new index; "
              "rerun the same command to resume from the finished shards"),
    ("add", "index saves are atomic, so the index folder holds the index as it was or with all the new passages; "
            "the same command is safe to rerun"),
    ("delete", "index saves are atomic, so the index folder holds the index as it was or without all the passages "
               "named; the same command is safe to rerun: if the delete finished"),  # delete ids=1
    ("update", "index saves are atomic, so the index folder holds the index as it was or with all the new texts; "
               "the same command is safe to rerun"),
    ("eval", "output= is written whole at the end"),
    ("demo", "index saves are atomic"),
    ("ask", "ask writes nothing; the index is unchanged"),
])
def test_ctrl_c_prints_one_line_and_exits_130(interrupted_jobs, tmp_path, capsys, command, kept):
    with pytest.raises(SystemExit) as exit_:
        main(_args(tmp_path)[command])
    captured = capsys.readouterr()
    assert exit_.value.code == 130
    assert captured.err.startswith(f"hpengine: interrupted; {kept}") and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err and not captured.out
    assert not (tmp_path / "idx").exists()


def test_interrupted_eval_names_its_checkpoint(interrupted_jobs, tmp_path, capsys):
    checkpoint = tmp_path / "run.ckpt.jsonl"
    with pytest.raises(SystemExit) as exit_:
        main(_args(tmp_path)["eval"] + [f"eval.checkpoint={checkpoint}"])
    assert exit_.value.code == 130
    assert capsys.readouterr().err == (f"hpengine: interrupted; the eval checkpoint {checkpoint} keeps the "
                                       f"finished batches; rerun the same command to resume\n")


def test_debug_shows_the_interrupt(interrupted_jobs, tmp_path, monkeypatch, capsys):
    with pytest.raises(KeyboardInterrupt):
        main(_args(tmp_path)["index"] + ["debug=true"])
    monkeypatch.setenv("HPENGINE_DEBUG", "1")
    with pytest.raises(KeyboardInterrupt):
        main(_args(tmp_path)["add"])
    assert "interrupted" not in capsys.readouterr().err


@pytest.mark.slow  # about 20 s on 2 busy cores, most of it imports and model loads
def test_sigint_to_a_running_index_build(tmp_path):
    """A real Ctrl-C (SIGINT) once the build shows progress: one line, exit 130, no index."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("HPENGINE_DEBUG", None)
    out = tmp_path / "idx"
    proc = subprocess.Popen([sys.executable, "-m", "hpengine.cli", "index",
                             f"corpus={builtin_corpus_path()}", f"out={out}", "encoder.dtype=float32"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    seen = b""
    try:
        while b"fast extract" not in seen:  # the job is running (models loaded, extraction started)
            chunk = os.read(proc.stderr.fileno(), 65536)
            assert chunk, seen.decode(errors="replace")
            seen += chunk
        time.sleep(0.5)  # not while tqdm draws its first bar (a bar interrupted in __init__ cannot close)
        for _ in range(3):  # a SIGINT that lands in a __del__ is dropped by Python ("Exception ignored")
            proc.send_signal(signal.SIGINT)
            try:
                stdout, stderr = proc.communicate(timeout=5)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    err = (seen + stderr).decode(errors="replace")
    assert proc.returncode == 130, err
    assert err.count("Traceback") == err.count("Exception ignored in")  # only those of a dropped SIGINT
    assert err.rstrip().splitlines()[-1] == ("hpengine: interrupted; index saves are atomic, so the index folder holds "
                                             "what it held before or the complete new index; rerun the same command "
                                             "to resume from the finished shards")
    assert not out.exists()
