"""Hydra ConfigStore registration. Only entry points call :func:`register_configs`."""
from __future__ import annotations

from hpengine.config._engine import method_configs as _method_configs
from hpengine.config._jobs import DemoJobConfig, EditJobConfig, EvalJobConfig
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
    """Register the schemas so ``conf/*.yaml`` can extend them through their defaults lists, and the
    options that are a schema's defaults as they are, so they need no YAML file.

    Group options stored here: ``engine/<name>`` for each retrieval method (its config class; the
    command line's ``engine=NAME`` / ``retriever=NAME``), and ``<group>/default`` for the groups
    whose default option is the schema's defaults (``retrieval``, ``graph``, ``eval``). A YAML
    file in ``conf/<group>/`` is for a preset that sets values of its own (``encoder/e5-small``);
    it extends ``base_<group>``.

    Args:
        method_configs: ``{method name: config class}`` of the retrieval methods; default
            :func:`~hpengine.config.method_configs` (every defined method config class).
    """
    from hydra.core.config_store import ConfigStore  # entry points only: the library never imports Hydra

    cs = ConfigStore.instance()
    cs.store(name="base_index", node=IndexConfig)
    cs.store(name="base_eval_job", node=EvalJobConfig)
    cs.store(name="base_demo_job", node=DemoJobConfig)
    cs.store(name="base_edit_job", node=EditJobConfig)
    for group, schema in (("extractor", ExtractorConfig), ("encoder", EncoderConfig), ("graph", GraphConfig),
                          ("retrieval", RetrievalConfig), ("model", ModelConfig), ("eval", EvalConfig)):
        cs.store(group=group, name=f"base_{group}", node=schema)
    for group, schema in (("graph", GraphConfig), ("retrieval", RetrievalConfig), ("eval", EvalConfig)):
        cs.store(group=group, name="default", node=schema)
    for name, config_class in (_method_configs() if method_configs is None else method_configs).items():
        cs.store(group="engine", name=name, node=config_class)
