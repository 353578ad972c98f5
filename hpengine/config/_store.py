"""Hydra ConfigStore registration. Only entry points call :func:`register_configs`."""
from __future__ import annotations

from hpengine.config._engine import EngineConfig
from hpengine.config._jobs import DemoJobConfig, EvalJobConfig
from hpengine.config._schemas import (
    EncoderConfig,
    EvalConfig,
    ExtractorConfig,
    GraphConfig,
    IndexConfig,
    ModelConfig,
    RetrievalConfig,
)


def register_configs(method_configs: dict | None = None) -> None:
    """Register the schemas so ``conf/*.yaml`` can extend them through their defaults lists.

    Args:
        method_configs: ``{method name: config class}`` of the retrieval methods; each is stored
            as ``engine/base_<name>``, the schema its ``conf/engine/<name>.yaml`` extends.
    """
    from hydra.core.config_store import ConfigStore  # entry points only: the library never imports Hydra

    cs = ConfigStore.instance()
    cs.store(name="base_index", node=IndexConfig)
    cs.store(group="extractor", name="base_extractor", node=ExtractorConfig)
    cs.store(group="encoder", name="base_encoder", node=EncoderConfig)
    cs.store(group="graph", name="base_graph", node=GraphConfig)
    cs.store(group="retrieval", name="base_retrieval", node=RetrievalConfig)
    cs.store(group="model", name="base_model", node=ModelConfig)
    cs.store(group="eval", name="base_eval", node=EvalConfig)
    cs.store(name="base_eval_job", node=EvalJobConfig)
    cs.store(name="base_demo_job", node=DemoJobConfig)
    cs.store(group="engine", name="base_engine", node=EngineConfig)
    for name, config_class in (method_configs or {}).items():
        cs.store(group="engine", name=f"base_{name}", node=config_class)
