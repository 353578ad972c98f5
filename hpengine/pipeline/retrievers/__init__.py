"""Retrieval methods behind one interface, one module each, found by name in a registry."""
from hpengine.pipeline.retrievers._base import Retriever, available_retrievers, get_retriever, register_retriever
from hpengine.pipeline.retrievers._dense import DenseRetriever
from hpengine.pipeline.retrievers._grag import (GragRetriever, GragSearch, final_read_passages, final_read_steps,
                                               path_read_passages, path_stops, self_consistency_vote)
from hpengine.pipeline.retrievers._hyperprove import ChainState, HyperProveRetriever
from hpengine.pipeline.retrievers._ppr import PPRRetriever
from hpengine.pipeline.retrievers._fusion import FusionRetriever  # after the methods it composes
from hpengine.pipeline.retrievers._learned import FEATURES, LearnedRetriever, default_ranker_path, resolve_ranker

__all__ = [
    "ChainState",
    "DenseRetriever",
    "FEATURES",
    "FusionRetriever",
    "GragRetriever",
    "GragSearch",
    "HyperProveRetriever",
    "LearnedRetriever",
    "PPRRetriever",
    "Retriever",
    "available_retrievers",
    "default_ranker_path",
    "final_read_passages",
    "final_read_steps",
    "get_retriever",
    "path_read_passages",
    "path_stops",
    "register_retriever",
    "resolve_ranker",
    "self_consistency_vote",
]
