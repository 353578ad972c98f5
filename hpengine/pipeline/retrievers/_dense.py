"""Dense passage retrieval, the baseline of every table: top passages by cosine with the question."""
from __future__ import annotations

from hpengine.config import DenseConfig
from hpengine.pipeline._types import Prediction
from hpengine.pipeline.retrievers._base import Retriever, register_retriever


@register_retriever
class DenseRetriever(Retriever):
    """Top ``passage_width`` passages by cosine; the reader reads the first ``reader_passages``.
    No-LLM answer: the best bridge entity of those passages' facts, weighted by passage rank."""

    name = "dense"
    config_class = DenseConfig

    def answer(self, questions: list) -> list:
        s, cfg = self.steps, self.config
        query_emb = s.encode(questions)
        ranked = s.dense_passages(query_emb, cfg.passage_width)
        top = ranked[:, : cfg.reader_passages]
        if s.use_llm:
            final = s.read_passages(questions, top)
        else:
            fact_ids, scores = s.passage_facts(top)
            final = s.answer_from_facts(questions, query_emb, fact_ids, scores)
        return [Prediction(qu, a, [], [p for p in row if p >= 0])
                for qu, a, row in zip(questions, final, ranked.tolist())]
