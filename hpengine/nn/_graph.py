"""The hypergraph part shared by the graph modules: incidence buffers and the cached graph."""
from __future__ import annotations

from torch import Tensor

from hpengine.graph import HyperGraph
from hpengine.nn._base import IndexModule


class GraphModule(IndexModule):
    """An :class:`IndexModule` over a hypergraph: ``fact_entity`` (int64 ``[2, nnz]``: the graph's
    pairs as given, synonym-expanded or extracted), ``synonyms`` (int64 ``[2, n]`` for a factored
    graph, else None) and ``fact_passage`` (int64 ``[H]``) are buffers; :attr:`graph` is the
    :class:`~hpengine.HyperGraph` over them, built on first use on the buffers' device and
    rebuilt after ``.to()``."""

    def _add_graph(self, graph: HyperGraph) -> None:
        if not isinstance(graph, HyperGraph):
            raise TypeError(f"graph must be a hpengine.HyperGraph (got {type(graph).__name__})")
        self._add_tensor("fact_entity", graph.raw_fact_entity)  # a factored graph stays factored
        self._add_tensor("synonyms", graph.synonyms)
        self.keep_factored = graph.keep_factored
        self._add_tensor("fact_passage", graph.fact_passage)
        self.num_facts, self.num_entities, self.num_passages = graph.num_facts, graph.num_entities, graph.num_passages
        self._cache["graph"] = graph  # already built (its CSR caches too): reuse it on its device

    @property
    def graph(self) -> HyperGraph:
        return self._cached("graph", lambda: HyperGraph(self.fact_entity, self.fact_passage, self.num_entities,
                                                         self.num_passages, synonyms=self.synonyms,
                                                         factored=self.keep_factored))

    def _cached_for(self, key: str, tensor: Tensor, build):
        """``build()`` cached while ``tensor`` is the same unmodified storage (an optimizer step
        bumps its version and forces a rebuild)."""
        stamp = (tensor.data_ptr(), tensor._version, tensor.dtype, tensor.device)
        hit = self._cache.get(key)
        if hit is None or hit[0] != stamp:
            hit = self._cache[key] = (stamp, build())
        return hit[1]

