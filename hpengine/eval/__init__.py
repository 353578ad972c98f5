"""Evaluation (SPEC §4): EM/F1, passage Recall@k, question files."""
from hpengine.eval._metrics import (
    exact_match,
    f1_score,
    normalize_answer,
    passage_ids,
    recall_at_k,
    recall_at_k_batch,
)
from hpengine.eval._questions import Question, load_questions

__all__ = [
    "Question",
    "exact_match",
    "f1_score",
    "load_questions",
    "normalize_answer",
    "passage_ids",
    "recall_at_k",
    "recall_at_k_batch",
]
