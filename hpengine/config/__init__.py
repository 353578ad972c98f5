"""Typed configuration dataclasses (Hydra-free); see :func:`register_configs` for entry points."""
from hpengine.config._schemas import (
    EncoderConfig,
    EvalConfig,
    ExtractorConfig,
    GraphConfig,
    IndexConfig,
    ModelConfig,
    RetrievalConfig,
)
from hpengine.config._engine import DenseConfig, EngineConfig, HyperProveConfig, PPRConfig
from hpengine.config._jobs import DemoJobConfig, EvalJobConfig

__all__ = [
    "DemoJobConfig",
    "DenseConfig",
    "EncoderConfig",
    "EngineConfig",
    "EvalConfig",
    "EvalJobConfig",
    "ExtractorConfig",
    "GraphConfig",
    "HyperProveConfig",
    "IndexConfig",
    "ModelConfig",
    "PPRConfig",
    "RetrievalConfig",
]
