"""Differentiable retrieval modules (``torch.nn.Module`` s over tensors), for training loops.

Each module is built from an :class:`~hpengine.graph.Index` (``from_index``) or from tensors; the
index tensors are buffers (``.to(device)`` moves them; not in ``state_dict`` unless
``persistent=True``), and ``trainable=(...)`` turns chosen ones into parameters.
``forward(query_embeddings)`` returns ids and scores; the scores are differentiable with respect
to the query embeddings (and the trainable tensors), while every discrete step (top-k, the walk's
subgraph, BFS, entity linking) runs under ``torch.no_grad`` and passes no gradient.

- :class:`DifferentiableDense`: top-k by cosine (passages, facts or entity names).
- :class:`DifferentiableHyperProveHop`: one HyperProve hop (the library op's selection,
  differentiable scores ``alpha * cos + (1 - alpha) * struct``).
- :class:`DifferentiablePPR`: personalised PageRank from softmax/ReLU query-entity similarities,
  differentiable through the PageRank solve.
- :class:`CandidateRanker`: scores candidate passages from the engine's features (the learned
  method, ``retriever=learned``), with :func:`fit_ranker`, :func:`listwise_loss`, :func:`save_ranker`
  and :func:`load_ranker`; its optional :class:`QueryAdapter` (:func:`fit_query_adapter`) moves the
  question embeddings the members start from.

They are not the engine's retrieval methods (``hpengine.pipeline.retrievers``: question text in,
passages and answers out, PPR seeded from NER links, fact seeds and a passage reset).
"""
from hpengine.nn._adapter import QueryAdapter, dense_listwise_loss, fit_query_adapter
from hpengine.nn._base import IndexModule, Retrieved
from hpengine.nn._differentiable_dense import DifferentiableDense
from hpengine.nn._differentiable_hop import DifferentiableHyperProveHop
from hpengine.nn._differentiable_ppr import DifferentiablePPR
from hpengine.nn._graph import GraphModule
from hpengine.nn._ranker import CandidateRanker, fit_ranker, is_ranker_file, listwise_loss, load_ranker, save_ranker

__all__ = ["CandidateRanker", "DifferentiableDense", "DifferentiableHyperProveHop", "DifferentiablePPR", "GraphModule",
           "IndexModule", "QueryAdapter", "Retrieved", "dense_listwise_loss", "fit_query_adapter", "fit_ranker",
           "is_ranker_file", "listwise_loss", "load_ranker", "save_ranker"]
