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

They are not the engine's retrieval methods (``hpengine.pipeline.retrievers``: question text in,
passages and answers out, PPR seeded from NER links, fact seeds and a passage reset). The names
``DenseRetriever``, ``PPRRetriever`` and ``HyperProveHop`` of hpengine 0.1 still import from here
for one release, with a ``DeprecationWarning``.
"""
import warnings

from hpengine.nn._base import IndexModule, Retrieved
from hpengine.nn._differentiable_dense import DifferentiableDense
from hpengine.nn._differentiable_hop import DifferentiableHyperProveHop
from hpengine.nn._differentiable_ppr import DifferentiablePPR
from hpengine.nn._graph import GraphModule

__all__ = ["DifferentiableDense", "DifferentiableHyperProveHop", "DifferentiablePPR", "GraphModule", "IndexModule",
           "Retrieved"]

# old name -> its class, kept for one release
_DEPRECATED = {"DenseRetriever": DifferentiableDense, "PPRRetriever": DifferentiablePPR,
               "HyperProveHop": DifferentiableHyperProveHop}


def __getattr__(name: str):
    # PEP 562: runs only for names not defined above, i.e. on every use of an old name
    if name in _DEPRECATED:
        cls = _DEPRECATED[name]
        warnings.warn(f"hpengine.nn.{name} is deprecated and will be removed in the next release; use "
                      f"hpengine.nn.{cls.__name__} (the same class: it shares a name with the engine's "
                      f"retrieval methods but is a differentiable module over tensors)",
                      DeprecationWarning, stacklevel=2)
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
