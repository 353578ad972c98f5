import atexit
import importlib.util
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# MKL picks the summation order of torch.addmm's sparse x dense product by CPU (on some AVX-512 Xeons
# not the CSR order); COMPATIBLE fixes it to the CSR order, the order the CPU kernels and the tests
# that compare them with the PyTorch path bit for bit define (kernels/README.md). Read by MKL at its
# first call, and inherited by the processes the tests start.
os.environ.setdefault("MKL_CBWR", "COMPATIBLE")

#: This test process's temporary files: tempfile's, and through TMPDIR those of the processes the
#: tests start (the CLI, torchrun's logs), from the first test on (:func:`_private_temp_dir`), and
#: torch's compile cache, which importing torch._dynamo makes, from now on. Removed at the end, so a
#: run leaves nothing in the system's temporary directory; pytest's tmp_path folders stay where
#: pytest keeps them (a passing run removes them, pytest.ini).
PRIVATE_TMP = Path(tempfile.mkdtemp(prefix="hpengine-tests-"))
atexit.register(shutil.rmtree, PRIVATE_TMP, ignore_errors=True)  # also when pytest stops before configuring
LIBRARY_CACHES = {"torchinductor": "TORCHINDUCTOR_CACHE_DIR"}
for _name, _variable in LIBRARY_CACHES.items():
    os.environ.setdefault(_variable, str(PRIVATE_TMP / _name))

import torch  # noqa: E402 - after the cache folders are set

# One thread for torch's ops in every test process: the suite runs a worker per core (pytest.ini), so
# more would oversubscribe the cores, and on a shared machine an OpenMP region whose second thread is
# descheduled costs milliseconds per op on the small tensors tested here (tests/models' sampling and
# generation files: 34-72 s on 2 threads, 12-14 s on 1, 2 busy cores). A file run alone computes
# with the same thread count as in the suite. The processes the tests start keep torch's default.
torch.set_num_threads(1)


def pytest_xdist_auto_num_workers(config):
    """The workers of ``-n auto`` (pytest.ini). The suite is mostly single-threaded start-ups and
    small tensors, so the whole of it runs on two workers (up to 4 where there are more cores); a
    run that names its files or folders stays in one process, where starting workers (each imports
    torch and the models) costs more than it saves. ``-n N`` or PYTEST_XDIST_AUTO_NUM_WORKERS decide
    instead."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist reads it
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    whole_suite = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    return min(cores, 4) if whole_suite and cores >= 2 else 0


@pytest.fixture(scope="session", autouse=True)
def _private_temp_dir(tmp_path_factory):
    """Temporary files go to :data:`PRIVATE_TMP`; what a test left there instead of in tmp_path is
    named in a warning."""
    tmp_path_factory.getbasetemp()  # made first, in the system's temporary directory
    saved = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = str(PRIVATE_TMP)
    yield PRIVATE_TMP
    if saved[0] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved[0]
    tempfile.tempdir = saved[1]
    left = sorted(p.name for p in PRIVATE_TMP.iterdir() if p.name not in LIBRARY_CACHES)
    if left:
        warnings.warn(f"tests left temporary files outside tmp_path (removed; use tmp_path): {', '.join(left)}")


def pytest_unconfigure(config):
    shutil.rmtree(PRIVATE_TMP, ignore_errors=True)


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
    """``name -> module``: a script of benchmarks/ (``"e2e/amplify_corpus"``) imported as a module of
    the ``benchmarks`` package (the repository root is on ``sys.path``: pytest.ini's ``pythonpath``)."""

    def load(name: str):
        return importlib.import_module("benchmarks." + name.replace("/", "."))

    return load
