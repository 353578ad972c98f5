"""hpengine: a PyTorch-native tensor retrieval engine for multi-hop question answering.

Public entry points: :class:`HyperGraph` (atomic-fact hypergraph and its factored transition
operator), :class:`Engine` (batched answer-guided multi-hop QA), and the typed configuration
dataclasses. Everything else lives in the subpackages (``hpengine.graph``, ``hpengine.sparse``,
``hpengine.retrieval``, ``hpengine.models``, ``hpengine.pipeline``, ``hpengine.eval``).

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
    "GragConfig": "hpengine.config",
    "GraphConfig": "hpengine.config",
    "HyperProveConfig": "hpengine.config",
    "IndexConfig": "hpengine.config",
    "ModelConfig": "hpengine.config",
    "PPRConfig": "hpengine.config",
    "RetrievalConfig": "hpengine.config",
    "HyperGraph": "hpengine.graph",
    "Engine": "hpengine.pipeline",
}

if TYPE_CHECKING:  # what static tools and IDEs see
    from hpengine.config import (DenseConfig, EncoderConfig, EngineConfig, EvalConfig, ExtractorConfig, GragConfig,
                                 GraphConfig, HyperProveConfig, IndexConfig, ModelConfig, PPRConfig, RetrievalConfig)
    from hpengine.graph import HyperGraph
    from hpengine.pipeline import Engine

__all__ = [
    "DenseConfig",
    "Engine",
    "EngineConfig",
    "EncoderConfig",
    "EvalConfig",
    "ExtractorConfig",
    "GragConfig",
    "GraphConfig",
    "HyperGraph",
    "HyperProveConfig",
    "IndexConfig",
    "ModelConfig",
    "PPRConfig",
    "RetrievalConfig",
    "__version__",
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
