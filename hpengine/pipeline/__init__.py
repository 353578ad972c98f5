"""The engine and its methods: a question batch in, ranked passages and answers out; the text rules
of the reading steps. The models it reads with, and their factories, are :mod:`hpengine.models`'; the
jobs that run the engine are :mod:`hpengine.jobs`' and their torchrun sharding
:mod:`hpengine.distributed`'s.

The exports load on first use (PEP 562), so importing the package (or the command line's
``--help``) does not pay for torch and transformers.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

#: public name -> the module that defines it
_EXPORTS = {
    "Engine": "hpengine.pipeline._engine",
    "finish": "hpengine.pipeline._engine",
    "QASteps": "hpengine.pipeline._steps",
    "choice_options": "hpengine.pipeline._text",
    "is_comparison": "hpengine.pipeline._text",
    "is_unknown": "hpengine.pipeline._text",
    "names_shared": "hpengine.pipeline._text",
    "resolve_choice": "hpengine.pipeline._text",
    "rewrite": "hpengine.pipeline._text",
    "Answer": "hpengine.pipeline._answer",
    "ScoredPassage": "hpengine.pipeline._answer",
    "ChainFact": "hpengine.pipeline._types",
    "HopRecord": "hpengine.pipeline._types",
    "Prediction": "hpengine.pipeline._types",
    "Retrieved": "hpengine.pipeline._types",
    "Retriever": "hpengine.pipeline.retrievers",
    "available_retrievers": "hpengine.pipeline.retrievers",
    "get_retriever": "hpengine.pipeline.retrievers",
    "register_retriever": "hpengine.pipeline.retrievers",
    "RankerExamples": "hpengine.pipeline._learn",
    "fusion_order": "hpengine.pipeline._learn",
    "list_order": "hpengine.pipeline._learn",
    "rank_candidates": "hpengine.pipeline._learn",
    "ranker_examples": "hpengine.pipeline._learn",
    "ranker_meta": "hpengine.pipeline._learn",
    "recall_at": "hpengine.pipeline._learn",
    "recall_per_question": "hpengine.pipeline._learn",
    "paired_difference": "hpengine.pipeline._learn",
    "set_weights": "hpengine.pipeline._learn",
    "train_ranker": "hpengine.pipeline._learn",
    "write_ranker": "hpengine.pipeline._learn",
    "is_ranker_file": "hpengine.pipeline._learn",
    "gold_passage_ids": "hpengine.pipeline._learn",
    "adapter_part": "hpengine.pipeline._learn",
    "train_adapter": "hpengine.pipeline._learn",
}

if TYPE_CHECKING:  # what static tools and IDEs see
    from hpengine.pipeline._answer import Answer, ScoredPassage
    from hpengine.pipeline._engine import Engine, finish
    from hpengine.pipeline._learn import (RankerExamples, adapter_part, fusion_order, gold_passage_ids, is_ranker_file,
                                          list_order, paired_difference, rank_candidates, ranker_examples, ranker_meta, recall_at,
                                          recall_per_question, set_weights, train_adapter, train_ranker,
                                          write_ranker)
    from hpengine.pipeline._steps import QASteps
    from hpengine.pipeline._text import (choice_options, is_comparison, is_unknown, names_shared, resolve_choice,
                                         rewrite)
    from hpengine.pipeline._types import ChainFact, HopRecord, Prediction, Retrieved
    from hpengine.pipeline.retrievers import Retriever, available_retrievers, get_retriever, register_retriever

__all__ = [
    "Answer",
    "ChainFact",
    "Engine",
    "HopRecord",
    "Prediction",
    "QASteps",
    "RankerExamples",
    "Retrieved",
    "Retriever",
    "ScoredPassage",
    "adapter_part",
    "available_retrievers",
    "choice_options",
    "finish",
    "fusion_order",
    "get_retriever",
    "gold_passage_ids",
    "is_comparison",
    "is_ranker_file",
    "is_unknown",
    "list_order",
    "names_shared",
    "paired_difference",
    "rank_candidates",
    "ranker_examples",
    "ranker_meta",
    "recall_at",
    "recall_per_question",
    "register_retriever",
    "resolve_choice",
    "rewrite",
    "set_weights",
    "train_adapter",
    "train_ranker",
    "write_ranker",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))
