"""Dense passage retrieval, the baseline of every table: top passages by cosine with the question."""
from __future__ import annotations

from torch import Tensor

from hpengine.config import DenseConfig
from hpengine.pipeline._types import Retrieved
from hpengine.pipeline.retrievers._base import Retriever, register_retriever


@register_retriever
class DenseRetriever(Retriever):
    """Top ``passage_width`` passages by cosine; the engine's reader reads the first
    ``reader_passages`` (no-LLM answer: the best bridge entity of those passages' facts)."""

    name = "dense"
    config_class = DenseConfig

    def retrieve(self, questions: list, question_emb: Tensor) -> Retrieved:
        return Retrieved(self.steps.dense_passages(question_emb, self.config.passage_width))
