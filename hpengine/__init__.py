"""hpengine: a PyTorch-native tensor retrieval engine for multi-hop question answering.

The user's face: the index (:func:`build_index`, :func:`open_index`, :func:`add`, :func:`delete`,
:func:`update`, :func:`add_grag`), :class:`Engine` (``engine.ask`` answers with passages and the
evidence chain), :func:`evaluate` and :func:`write_report`, the built-in demo set
(:func:`demo_corpus`, :func:`demo_questions`), the typed configuration dataclasses (the one source
of defaults) and :class:`HyperGraph`. Each function does what the command of the same task does
(:mod:`hpengine._api`). Everything else lives in the subpackages (``hpengine.graph``,
``hpengine.sparse``, ``hpengine.retrieval``, ``hpengine.models``, ``hpengine.pipeline``,
``hpengine.eval``, ``hpengine.nn``).

The exports load on first use (PEP 562), so ``import hpengine.config`` or the command line's
``--help`` does not pay for torch and transformers.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from hpengine._version import __version__

#: public name -> the module that defines it
_EXPORTS = {
    "DenseConfig": "hpengine.config",
    "EncoderConfig": "hpengine.config",
    "EngineConfig": "hpengine.config",
    "EvalConfig": "hpengine.config",
    "ExtractorConfig": "hpengine.config",
    "FusionConfig": "hpengine.config",
    "LearnedConfig": "hpengine.config",
    "GragConfig": "hpengine.config",
    "GraphConfig": "hpengine.config",
    "HyperProveConfig": "hpengine.config",
    "IndexConfig": "hpengine.config",
    "ModelConfig": "hpengine.config",
    "PPRConfig": "hpengine.config",
    "RetrievalConfig": "hpengine.config",
    "HyperGraph": "hpengine.graph",
    "Engine": "hpengine.pipeline",
    "Answer": "hpengine.pipeline",
    "ScoredPassage": "hpengine.pipeline",
    "add": "hpengine._api",
    "add_grag": "hpengine._api",
    "build_index": "hpengine._api",
    "delete": "hpengine._api",
    "demo_corpus": "hpengine._api",
    "demo_questions": "hpengine._api",
    "evaluate": "hpengine._api",
    "open_index": "hpengine._api",
    "update": "hpengine._api",
    "write_report": "hpengine._api",
    "train": "hpengine._api",
}

if TYPE_CHECKING:  # what static tools and IDEs see
    from hpengine.config import (DenseConfig, EncoderConfig, EngineConfig, EvalConfig, ExtractorConfig, FusionConfig,
                                 GragConfig, GraphConfig, HyperProveConfig, IndexConfig, LearnedConfig, ModelConfig,
                                 PPRConfig, RetrievalConfig)
    from hpengine._api import (add, add_grag, build_index, delete, demo_corpus, demo_questions, evaluate, open_index,
                               train, update, write_report)
    from hpengine.graph import HyperGraph
    from hpengine.pipeline import Answer, Engine, ScoredPassage

__all__ = [
    "Answer",
    "DenseConfig",
    "Engine",
    "EngineConfig",
    "EncoderConfig",
    "EvalConfig",
    "ExtractorConfig",
    "FusionConfig",
    "GragConfig",
    "GraphConfig",
    "HyperGraph",
    "HyperProveConfig",
    "IndexConfig",
    "LearnedConfig",
    "ModelConfig",
    "PPRConfig",
    "RetrievalConfig",
    "ScoredPassage",
    "__version__",
    "add",
    "add_grag",
    "build_index",
    "delete",
    "demo_corpus",
    "demo_questions",
    "evaluate",
    "open_index",
    "train",
    "update",
    "write_report",
]


#: subpackages that ``import hpengine`` made attributes before the exports were lazy
_SUBPACKAGES = frozenset({"config", "errors", "eval", "graph", "models", "nn", "pipeline", "retrieval", "sparse",
                          "typing"})


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
