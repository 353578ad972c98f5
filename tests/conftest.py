import getpass
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: This test process's temporary folder: tempfile's, pytest's tmp_path and, through TMPDIR, those of
#: the processes the tests start (the CLI, torchrun's logs). A passing run removes it, so the run
#: leaves nothing in the system's temporary directory; a failing one keeps it to look at.
SESSION_TMP = Path(tempfile.mkdtemp(prefix="hpengine-tests-"))
os.environ["TMPDIR"] = tempfile.tempdir = str(SESSION_TMP)


def _left_outside_tmp_path() -> list:
    """What the run wrote to the temporary directory outside pytest's tmp_path folders."""
    return sorted(p.name for p in SESSION_TMP.iterdir() if p.name != f"pytest-of-{getpass.getuser()}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    left = _left_outside_tmp_path()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if left and reporter is not None:  # a test that writes a temporary file outside tmp_path
        reporter.ensure_newline()
        reporter.write_line(f"tests left temporary files outside tmp_path (use tmp_path): {', '.join(left)}",
                            yellow=True)
    if exitstatus == 0:
        shutil.rmtree(SESSION_TMP, ignore_errors=True)
    elif reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(f"temporary files of this run (tmp_path folders included): {SESSION_TMP}")


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield


@pytest.fixture(scope="session")
def builtin_index():
    """``(index, encoder, questions)``: the built-in corpus (40 passages) indexed with the real fast
    extractor and a hashing encoder, and its 12 questions (tests/pipeline and tests/jobs use it)."""
    from hpengine.config import ExtractorConfig, GraphConfig
    from hpengine.eval import load_questions
    from hpengine.graph import build_index, builtin_corpus_path, builtin_questions_path, load_corpus
    from hpengine.models import FastExtractor
    from hpengine.testing._fakes import HashingEncoder

    passages = load_corpus(str(builtin_corpus_path())).passages
    encoder = HashingEncoder(dim=256)
    index, _ = build_index(passages, extractor=FastExtractor(ExtractorConfig()), encoder=encoder,
                           graph_cfg=GraphConfig(synonym_threshold=0.9))
    return index, encoder, load_questions(str(builtin_questions_path()))


@pytest.fixture(scope="session")
def load_benchmark():
    """``name -> module``: a script of benchmarks/ (``"e2e/amplify_corpus"``) imported from its file."""
    root = Path(__file__).resolve().parents[1] / "benchmarks"

    def load(name: str):
        spec = importlib.util.spec_from_file_location(Path(name).name, root / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
