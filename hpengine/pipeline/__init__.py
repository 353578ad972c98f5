"""Orchestration: the QA engine and its retrieval methods, the text rules of the reading steps,
index and eval jobs, command line."""
from hpengine.pipeline._engine import Engine, finish
from hpengine.pipeline._distributed import (
    answer_distributed,
    evaluate_distributed,
    run_eval_distributed,
    run_index_distributed,
    shard_questions,
)
from hpengine.pipeline._eval_job import evaluate, load_llm, make_engine, run_eval
from hpengine.pipeline._factory import (
    encoder_for_index,
    index_encoder_config,
    make_encoder,
    make_extractor,
    peek_index_meta,
)
from hpengine.pipeline._index_job import format_report, run_add, run_index
from hpengine.pipeline._steps import QASteps
from hpengine.pipeline._text import choice_options, is_comparison, is_unknown, names_shared, resolve_choice, rewrite
from hpengine.pipeline._types import ChainFact, HopRecord, Prediction, Retrieved
from hpengine.pipeline.retrievers import Retriever, available_retrievers, get_retriever, register_retriever

__all__ = [
    "ChainFact",
    "Engine",
    "HopRecord",
    "Prediction",
    "QASteps",
    "Retrieved",
    "Retriever",
    "answer_distributed",
    "available_retrievers",
    "choice_options",
    "encoder_for_index",
    "evaluate",
    "evaluate_distributed",
    "finish",
    "format_report",
    "get_retriever",
    "index_encoder_config",
    "is_comparison",
    "is_unknown",
    "load_llm",
    "make_encoder",
    "make_engine",
    "make_extractor",
    "names_shared",
    "peek_index_meta",
    "register_retriever",
    "resolve_choice",
    "rewrite",
    "run_add",
    "run_eval",
    "run_eval_distributed",
    "run_index",
    "run_index_distributed",
    "shard_questions",
]
