"""Typed configuration of the ``eval``, ``ask``, ``demo``, ``delete`` and ``update`` jobs (composed by the CLI
from ``conf/``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hpengine.config._checks import _check_finite, _check_range
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

    #: The index folder (the first argument).
    index: str = ""
    #: Question file, JSON list or JSONL (required by eval).
    questions: str = ""  #: required by eval, which refuses "" (ask has its question; demo the built-in ones)
    #: JSON file of per-question records (empty: not written).
    output: str = ""
    #: Device for every model and the index.
    device: str = "cpu"
    #: the index's encoder by default (empty name_or_path: its recorded config, this one's run-time
    #: fields); a named encoder must be the index's
    encoder: EncoderConfig = field(default_factory=lambda: EncoderConfig(name_or_path=""))
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)  #: the method: its config class picks it
    model: ModelConfig = field(default_factory=ModelConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self):
        _check_finite(self, "")  # the nested configs check their own fields


@dataclass
class DemoJobConfig:
    """``hpengine demo``: index the built-in corpus, answer the built-in questions, print everything."""

    #: Index folder of the demo (empty: a new temporary folder).
    out: str = ""
    #: Device for every model and the index.
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


@dataclass
class EditJobConfig:
    """``hpengine delete|update out=DIR corpus=PATH titles=[...] ids=[...]``: remove passages from a saved
    index, or replace their texts (docs/methods/index.md#delete-and-update).

    ``titles`` and ``ids`` take one value or a list (``titles=[Kell,"Oro River"]``, ``ids=[3,7]``);
    a passage's id is its position in the index.
    """

    #: The index folder (the first argument).
    out: str = ""
    #: {title, text} records: delete: the passages to remove; update: the new texts (required).
    corpus: str = ""
    #: delete: every passage with one of these titles.
    titles: Any = None
    #: delete: passages by id; update: the passage each record replaces, in order.
    ids: Any = None
    #: Device for every model and the index.
    device: str = "cpu"
    extractor: ExtractorConfig = field(default_factory=ExtractorConfig)  #: the one the index was built with
    #: the index's encoder by default (empty name_or_path: its recorded config, this one's run-time fields)
    encoder: EncoderConfig = field(default_factory=lambda: EncoderConfig(name_or_path=""))
    graph: GraphConfig = field(default_factory=GraphConfig)  #: synonym_threshold unset: the index's eta
    #: Seconds to wait while another process writes the same index.
    lock_timeout: float = 60.0
    #: Refuse unless the index is at this generation (the one whose ids you read; the edit reports print
    #: it). Unset: a rerun of a delete by ids= that already committed is a no-op.
    expect_generation: Optional[int] = None

    def __post_init__(self):
        _check_finite(self, "")
        _check_range("lock_timeout", self.lock_timeout, 0.0, 7 * 24 * 3600.0)
        self.titles = _listed("titles", self.titles, str)
        self.ids = _listed("ids", self.ids, int)
        g = self.expect_generation
        if g is not None and (isinstance(g, bool) or not isinstance(g, int) or g < 1):
            raise ValueError(f"expect_generation must be a generation number >= 1 (got {g!r})")


def _listed(key: str, value, kind: type) -> list | None:
    """``value`` (None, one value or a list of them) as a list of ``kind``; a whole-number title is
    taken as text (``titles=1999``)."""
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if kind is str:
        values = [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in values]
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, kind)]
    if bad:
        what = ("a title or a list of titles such as [Kell,'Oro River']" if kind is str
                else "an id or a list of ids such as [3,7]")
        raise ValueError(f"{key}= must be {what} (got {bad[0]!r}; quote a title Hydra reads as another type)")
    return values


@dataclass
class ReportConfig:
    """``hpengine report RUN.json [RUN2.json ...] [key=value ...]``: one HTML page comparing the
    per-question records of eval runs over the same questions."""

    #: The page written (empty: the first run file's path with .html).
    out: str = ""
    #: Labels of the runs, comma-separated (empty: each run's method, and LLM when it has one).
    names: str = ""
    #: The runs' question file (empty: the first run's own questions= file).
    questions: str = ""
    #: Title of the page.
    title: str = "hpengine evaluation report"


@dataclass
class TrainJobConfig:
    """``hpengine train IDX questions=FILE [IDX2 questions=FILE2 ...] out=ranker.safetensors``: train the
    learned method's ranker (docs/methods/learned.md) on the candidates of one or several indexes."""

    #: Index folders, one per question file (the positional arguments).
    index: Any = None
    #: Question files with gold passages, one per index.
    questions: Any = None
    #: Ranker file written (safetensors: weights, feature schema, encoder, settings); an existing file
    #: there must be a ranker, which is replaced whole once the new one is trained.
    out: str = ""
    #: Device for the encoder, the index and the training.
    device: str = "cpu"
    #: Width of the ranker's hidden layer (0: a linear ranker).
    hidden: int = 16
    #: Training steps (Adam), each over every training question at once.
    epochs: int = 300
    #: Adam learning rate.
    lr: float = 0.01
    #: Adam weight decay (with ``fusion_prior``, it pulls the ranker toward the fusion's order).
    weight_decay: float = 3e-2
    #: Start each candidate's score from the log of its reciprocal rank in the fusion's ranking, the
    #: ranker learning what to change (docs/methods/learned.md); false: from the features alone.
    fusion_prior: bool = True
    #: Every question file weighs the same in the loss, whatever its number of questions (false:
    #: every question the same); one file, or files of one size, train the same either way.
    balance_sets: bool = True
    #: Share of the questions held out for validation (0: train on all).
    holdout: float = 0.2
    #: Seed of the held-out split and of the initial weights.
    seed: int = 0
    #: Passages of each member's list that are candidates.
    candidate_width: int = 30
    #: Passages the fused top five name by their whole title that are candidates too (0: none).
    mention_width: int = 20
    #: Questions encoded and retrieved together.
    batch_size: int = 64
    #: Questions read from each file at most (0: all).
    max_questions: int = 0
    #: Full-batch steps of a query adapter the ranker carries (docs/methods/learned.md; 0: none; 150
    #: where it pays).
    adapter_steps: int = 0
    #: Cross-validate over this many folds of every question file, then train on every question
    #: (0: validate on the holdout share instead; at least 2 otherwise).
    folds: int = 0

    def __post_init__(self):
        _check_finite(self, "")
        self.index = _listed("index", self.index, str) or []
        self.questions = _listed("questions", self.questions, str) or []
        _check_range("hidden", self.hidden, 0, 4096)
        _check_range("epochs", self.epochs, 1, 1_000_000)
        _check_range("lr", self.lr, 0.0, 10.0)
        _check_range("weight_decay", self.weight_decay, 0.0, 10.0)
        _check_range("holdout", self.holdout, 0.0, 0.9)
        _check_range("candidate_width", self.candidate_width, 1, 1000)
        _check_range("mention_width", self.mention_width, 0, 1000)
        _check_range("batch_size", self.batch_size, 1, 100_000)
        _check_range("max_questions", self.max_questions, 0, 10_000_000)
        _check_range("adapter_steps", self.adapter_steps, 0, 1_000_000)
        _check_range("folds", self.folds, 0, 100)
        if self.folds == 1:
            raise ValueError("folds must be 0 (validate on the holdout share) or at least 2 (got 1)")
        if self.folds and self.adapter_steps:
            raise ValueError("folds= with adapter_steps= is not supported: each fold's adapter would need the "
                             "candidates computed again; cross-validate the ranker alone, or use holdout=")
