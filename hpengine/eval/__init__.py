"""Evaluation (docs/methods/index.md#evaluation-protocol): EM/F1, passage Recall@k, question files,
HTML reports of eval runs."""
from hpengine.eval._metrics import (
    exact_match,
    f1_score,
    normalize_answer,
    passage_ids,
    recall_at_k,
    recall_at_k_batch,
)
from hpengine.eval._questions import Question, load_questions
from hpengine.eval._report import build_report, default_report_path, write_report
from hpengine.eval._report_data import EVAL_FORMAT_NAME, EVAL_FORMAT_VERSION

__all__ = [
    "EVAL_FORMAT_NAME",
    "EVAL_FORMAT_VERSION",
    "Question",
    "build_report",
    "default_report_path",
    "exact_match",
    "f1_score",
    "load_questions",
    "normalize_answer",
    "passage_ids",
    "recall_at_k",
    "recall_at_k_batch",
    "write_report",
]
