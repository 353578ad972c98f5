"""Atomic facts -> hypergraph: construction, corpus I/O, index save/load/add."""
from hpengine.graph._hypergraph import HyperGraph

__all__ = ["HyperGraph"]
