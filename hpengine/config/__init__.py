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
from hpengine.config._engine import (DenseConfig, EngineConfig, FusionConfig, GragConfig, HyperProveConfig, LearnedConfig,
                                     PPRConfig, method_configs)
from hpengine.config._grag import GragBuildConfig
from hpengine.config._help import Key, config_keys, doc_summary, field_doc, format_value
from hpengine.config._jobs import DemoJobConfig, EditJobConfig, EvalJobConfig, ReportConfig, TrainJobConfig
from hpengine.config._store import register_configs

__all__ = [
    "DemoJobConfig",
    "DenseConfig",
    "EditJobConfig",
    "EncoderConfig",
    "EngineConfig",
    "EvalConfig",
    "EvalJobConfig",
    "ExtractorConfig",
    "FusionConfig",
    "LearnedConfig",
    "GragBuildConfig",
    "GragConfig",
    "GraphConfig",
    "HyperProveConfig",
    "IndexConfig",
    "Key",
    "ModelConfig",
    "PPRConfig",
    "ReportConfig",
    "RetrievalConfig",
    "TrainJobConfig",
    "config_keys",
    "doc_summary",
    "field_doc",
    "format_value",
    "method_configs",
    "register_configs",
]
