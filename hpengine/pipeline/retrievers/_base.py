"""The retriever interface and its registry: every method (dense, HyperProve, PPR, GRAG-MH, a
user's own) is one class implementing :meth:`Retriever.retrieve` over the shared steps, found by
name; the engine owns the flow around it."""
from __future__ import annotations

import abc
from typing import ClassVar

from torch import Tensor

from hpengine.config import EngineConfig
from hpengine.pipeline._types import Retrieved

_REGISTRY: dict = {}


class Retriever(abc.ABC):
    """One retrieval method of the engine.

    A method supplies only its own work on a batch (:meth:`retrieve`: the ranked passages and,
    where it has them, its evidence facts, chain, answers), composing the shared steps
    (:class:`~hpengine.pipeline.QASteps`) with its own retrieval, all questions at once; the
    engine encodes the questions before and finishes the predictions after
    (:func:`~hpengine.pipeline.finish`). Subclasses set ``name`` and ``config_class`` (a subclass
    of :class:`~hpengine.config.EngineConfig` whose ``method`` is ``name``) and are made
    available with :func:`register_retriever`.

    Example (a whole method)::

        @register_retriever
        class Dense(Retriever):
            name, config_class = "mydense", MyDenseConfig

            def retrieve(self, questions, question_emb):
                return Retrieved(self.steps.dense_passages(question_emb, self.config.passage_width))

    Args:
        steps: the shared steps over the engine's index, encoder, config and models.
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type] = EngineConfig

    def __init__(self, steps):
        if not isinstance(steps.config, self.config_class):
            raise TypeError(f"retriever {self.name!r} needs a {self.config_class.__name__} "
                            f"(got {type(steps.config).__name__})")
        self.steps = steps
        self.config = steps.config

    def llm_components(self) -> list:
        """Models this method calls besides the engine's decomposer and reader (each with a
        ``stats`` dict of ``tokens_in`` / ``tokens_out``), so reports count their tokens."""
        return []

    @abc.abstractmethod
    def retrieve(self, questions: list, question_emb: Tensor) -> Retrieved:
        """This method's work on a batch.

        Args:
            questions: Q question texts.
            question_emb: float ``[Q, D]`` their query embeddings (encoded once by the engine).

        Returns:
            a :class:`~hpengine.pipeline.Retrieved` with ``ranked`` ``[Q, W]`` and what else the
            method has of its own.
        """


def register_retriever(cls: type) -> type:
    """Make a :class:`Retriever` subclass available by its ``name`` (usable as a decorator).

    Raises:
        TypeError: ``cls`` is not a Retriever, or its config class is not an EngineConfig.
        ValueError: the name is empty, taken by another class, or differs from ``config_class.method``.
    """
    if not (isinstance(cls, type) and issubclass(cls, Retriever)):
        raise TypeError(f"register_retriever needs a Retriever subclass (got {cls!r})")
    if not cls.name:
        raise ValueError(f"{cls.__name__}.name must be a non-empty string (got {cls.name!r})")
    if not (isinstance(cls.config_class, type) and issubclass(cls.config_class, EngineConfig)):
        raise TypeError(f"{cls.__name__}.config_class must subclass EngineConfig (got {cls.config_class!r})")
    if cls.config_class.method != cls.name:
        raise ValueError(f"{cls.config_class.__name__}.method must be {cls.name!r} (got {cls.config_class.method!r})")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"a retriever named {cls.name!r} is already registered ({_REGISTRY[cls.name].__name__})")
    _REGISTRY[cls.name] = cls
    return cls


def get_retriever(name: str) -> type:
    """The registered retriever class called ``name``.

    Raises:
        ValueError: no retriever has that name (the message lists those that exist).
    """
    if name not in _REGISTRY:
        raise ValueError(f"retriever must be one of {sorted(_REGISTRY)} (got {name!r})")
    return _REGISTRY[name]


def available_retrievers() -> dict:
    """``{name: retriever class}`` of every registered method."""
    return dict(_REGISTRY)
