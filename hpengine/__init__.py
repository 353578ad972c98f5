"""hpengine: a PyTorch-native tensor retrieval engine for multi-hop question answering.

Public entry points: :class:`HyperGraph` (atomic-fact hypergraph and its factored transition
operator), :class:`Engine` (batched answer-guided multi-hop QA), and the typed configuration
dataclasses. Everything else lives in the subpackages (``hpengine.graph``, ``hpengine.sparse``,
``hpengine.retrieval``, ``hpengine.models``, ``hpengine.pipeline``, ``hpengine.eval``).
"""
from hpengine._version import __version__
from hpengine.config import (
    DenseConfig,
    EncoderConfig,
    EngineConfig,
    EvalConfig,
    ExtractorConfig,
    GraphConfig,
    HyperProveConfig,
    IndexConfig,
    ModelConfig,
    PPRConfig,
    RetrievalConfig,
)
from hpengine.graph import HyperGraph
from hpengine.pipeline import Engine

__all__ = [
    "DenseConfig",
    "Engine",
    "EngineConfig",
    "EncoderConfig",
    "EvalConfig",
    "ExtractorConfig",
    "GraphConfig",
    "HyperGraph",
    "HyperProveConfig",
    "IndexConfig",
    "ModelConfig",
    "PPRConfig",
    "RetrievalConfig",
    "__version__",
]
