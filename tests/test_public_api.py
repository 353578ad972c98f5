"""Pins the public import paths: moving a file must not break users."""
import hpengine


def test_top_level_exports():
    assert set(hpengine.__all__) == {
        "Engine", "EngineConfig", "DenseConfig", "GragConfig", "HyperProveConfig", "PPRConfig", "EncoderConfig",
        "EvalConfig", "ExtractorConfig", "GraphConfig", "HyperGraph", "IndexConfig", "ModelConfig", "RetrievalConfig",
        "FusionConfig", "LearnedConfig", "__version__",
        # the face (hpengine/_api.py): the index, asking, evaluating, the report, the demo set
        "Answer", "ScoredPassage", "add", "add_grag", "build_index", "delete", "demo_corpus", "demo_questions",
        "evaluate", "open_index", "train", "update", "write_report"}
    assert isinstance(hpengine.__version__, str)
    for name in hpengine.__all__:  # every name resolves (the exports load on first use)
        assert getattr(hpengine, name) is not None
    assert hpengine.Engine is __import__("hpengine.pipeline", fromlist=["Engine"]).Engine
    assert hpengine.Answer is __import__("hpengine.pipeline", fromlist=["Answer"]).Answer


def test_face_functions_document_an_example():
    """Each function of the face carries a Google-style docstring with an example (run as a doctest)."""
    for name in ("add", "add_grag", "build_index", "delete", "demo_corpus", "demo_questions", "evaluate", "open_index",
                 "update", "write_report"):
        doc = getattr(hpengine, name).__doc__
        assert "Example:" in doc and ">>> " in doc, name
    assert ">>> " in hpengine.Engine.ask.__doc__


def test_face_device_reaches_the_models_as_on_the_command_line():
    from hpengine._api import _settings  # the face's settings step (a GPU is not needed to check it)
    from hpengine.config import EncoderConfig, IndexConfig

    cfg = _settings(IndexConfig, None, {"device": "cuda:1", "encoder": EncoderConfig(name_or_path="e5-small")},
                    {"corpus": "", "out": "x"})
    assert (cfg.device, cfg.extractor.device, cfg.encoder.device, cfg.grag.device) == ("cuda:1",) * 4
    assert cfg.encoder.name_or_path == "e5-small"
    pinned = _settings(IndexConfig, None, {"device": "cuda:1", "encoder": EncoderConfig(device="cuda:0")},
                       {"corpus": "", "out": "x"})
    assert pinned.encoder.device == "cuda:0"  # a part given its own device keeps it
    assert _settings(IndexConfig, None, {}, {"corpus": "", "out": "x"}).encoder.device == "cpu"


def test_face_refuses_an_unknown_setting_by_name():
    import pytest

    with pytest.raises(TypeError, match="unknown setting 'shard_sise' \\(did you mean shard_size\\?\\)"):
        hpengine.build_index(hpengine.demo_corpus(), "never_written", shard_sise=0)
    with pytest.raises(TypeError, match="unknown setting 'recall_k'"):
        hpengine.evaluate(None, [], recall_k=[1])


def test_subpackage_paths():
    from hpengine.eval import exact_match, f1_score, load_questions, recall_at_k  # noqa: F401
    from hpengine.graph import (HyperGraph, Index, IndexFormatError, Passage, add_passages,  # noqa: F401
                                build_index, load_corpus, synonym_pairs)
    from hpengine.models import Encoder, FastExtractor, LLMExtractor, batched_generate  # noqa: F401
    from hpengine.pipeline import (ChainFact, Engine, HopRecord, Prediction, QASteps, Retriever,  # noqa: F401
                                   available_retrievers, get_retriever, register_retriever)
    from hpengine.cli import main  # noqa: F401
    from hpengine.config import DemoJobConfig, EvalJobConfig  # noqa: F401
    from hpengine.graph import IndexLookups  # noqa: F401
    from hpengine.retrieval import DenseIndex, HopResult, dense_topk, hyperprove_hop  # noqa: F401
    from hpengine.sparse import TransitionOperator, node_degree  # noqa: F401
    from hpengine.testing import with_devices  # noqa: F401
    from hpengine.testing.reference import dense_transition, reference_hop  # noqa: F401
    from hpengine.typing import WITH_FAISS, WITH_FAISS_GPU  # noqa: F401


def test_jobs_and_distributed_paths():
    from hpengine.distributed import (answer_distributed, check_torchrun_command, evaluate_distributed,  # noqa: F401
                                      run_eval_distributed, run_index_distributed, shard_questions)
    from hpengine.jobs import (EvalCheckpoint, build_grag, evaluate, format_report, make_engine,  # noqa: F401
                               report_main, run_add, run_demo, run_eval, run_grag_build, run_index)
    from hpengine.jobs.grag_build import main  # noqa: F401
    from hpengine.jobs import peek_index_meta  # noqa: F401
    from hpengine.models import (check_llm, encoder_for_index, index_encoder_config, load_llm,  # noqa: F401
                                 make_encoder, make_extractor)


def test_the_engine_face_names_no_job():
    """The engine's face hands on the engine's names only: the jobs that run it are
    :mod:`hpengine.jobs`' and :mod:`hpengine.distributed`'s (no shim re-exports them)."""
    import hpengine.distributed as distributed
    import hpengine.jobs as jobs
    import hpengine.pipeline as pipeline

    assert not set(pipeline.__all__) & (set(jobs.__all__) | set(distributed.__all__))


def test_library_does_not_import_hydra():
    import subprocess
    import sys

    code = ("import sys, hpengine, hpengine.graph, hpengine.retrieval, hpengine.models, hpengine.pipeline, "
            "hpengine.eval; print('hydra' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
