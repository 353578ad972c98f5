"""Retrievers as ``torch.nn.Module`` s, for training loops.

Each module is built from an :class:`~hpengine.graph.Index` (``from_index``) or from tensors; the
index tensors are buffers (``.to(device)`` moves them; not in ``state_dict`` unless
``persistent=True``), and ``trainable=(...)`` turns chosen ones into parameters.
``forward(query_embeddings)`` returns ids and scores; the scores are differentiable with respect
to the query embeddings (and the trainable tensors), while every discrete step (top-k, the walk's
subgraph, BFS, entity linking) runs under ``torch.no_grad`` and passes no gradient.

- :class:`DenseRetriever`: top-k by cosine (passages, facts or entity names).
- :class:`HyperProveHop`: one HyperProve hop (the library op's selection, differentiable scores
  ``alpha * cos + (1 - alpha) * struct``).
- :class:`PPRRetriever`: personalised PageRank from softmax/ReLU query-entity similarities,
  differentiable through the PageRank solve.
"""
from hpengine.nn._base import IndexModule, Retrieved
from hpengine.nn._dense import DenseRetriever
from hpengine.nn._graph import GraphModule
from hpengine.nn._hop import HyperProveHop
from hpengine.nn._ppr import PPRRetriever

__all__ = ["DenseRetriever", "GraphModule", "HyperProveHop", "IndexModule", "PPRRetriever", "Retrieved"]
