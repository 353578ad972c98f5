"""hpengine: a PyTorch-native tensor retrieval engine for multi-hop question answering.

Public entry points: :class:`HyperGraph` (atomic-fact hypergraph and its factored transition
operator), :class:`Engine` (batched answer-guided multi-hop QA), and the typed configuration
dataclasses. Everything else lives in the subpackages (``hpengine.graph``, ``hpengine.sparse``,
``hpengine.retrieval``, ``hpengine.models``, ``hpengine.pipeline``, ``hpengine.eval``).
"""
from hpengine._version import __version__
from hpengine.config import (
    EncoderConfig,
    EvalConfig,
    ExtractorConfig,
    GraphConfig,
    IndexConfig,
    ModelConfig,
    RetrievalConfig,
)
from hpengine.graph import HyperGraph
from hpengine.pipeline._engine import Engine, EngineConfig

__all__ = [
    "Engine",
    "EngineConfig",
    "EncoderConfig",
    "EvalConfig",
    "ExtractorConfig",
    "GraphConfig",
    "HyperGraph",
    "IndexConfig",
    "ModelConfig",
    "RetrievalConfig",
    "__version__",
]
