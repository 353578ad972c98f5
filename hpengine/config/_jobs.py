"""Typed configuration of the ``eval``, ``ask`` and ``demo`` jobs (composed by the CLI from ``conf/``)."""
from __future__ import annotations

from dataclasses import dataclass, field

from hpengine.config._checks import _check_finite
from hpengine.config._engine import EngineConfig
from hpengine.config._schemas import (
    EncoderConfig,
    EvalConfig,
    ExtractorConfig,
    GraphConfig,
    ModelConfig,
    RetrievalConfig,
)


@dataclass
class EvalJobConfig:
    """``hpengine eval index=DIR questions=PATH retriever=NAME output=FILE.json``."""

    index: str = ""
    questions: str = ""  # required by eval, which refuses "" (ask has its question; demo the built-in ones)
    output: str = ""
    device: str = "cpu"
    # the index's encoder by default (empty name_or_path: its recorded config, this one's run-time
    # fields); a named encoder must be the index's
    encoder: EncoderConfig = field(default_factory=lambda: EncoderConfig(name_or_path=""))
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)  # the method: its config class picks it
    model: ModelConfig = field(default_factory=ModelConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self):
        _check_finite(self, "")  # the nested configs check their own fields


@dataclass
class DemoJobConfig:
    """``hpengine demo``: index the built-in corpus, answer the built-in questions, print everything."""

    out: str = ""  # empty: a temporary folder
    device: str = "cpu"
    extractor: ExtractorConfig = field(default_factory=ExtractorConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self):
        _check_finite(self, "")
