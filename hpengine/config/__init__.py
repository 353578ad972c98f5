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

__all__ = [
    "EncoderConfig",
    "EvalConfig",
    "ExtractorConfig",
    "GraphConfig",
    "IndexConfig",
    "ModelConfig",
    "RetrievalConfig",
]
