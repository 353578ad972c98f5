"""Batched retrieval: dense top-k, random-walk subgraphs, bounded BFS, the HyperProve hop, PPR and
GRAG-MH's decayed expansion."""
from hpengine.retrieval._bfs import batched_bfs
from hpengine.retrieval._chunking import HOP_BUDGET_MB, PPR_BUDGET_MB, HopPlan, plan_hop, resolve_memory_budget_mb
from hpengine.retrieval._dense import APPROXIMATE_MIN_KEYS, DenseIndex, dense_topk, resolve_backend
from hpengine.retrieval._grag import (add_dense_candidates, best_fact_scores, blended_passage_scores,
                                      candidate_passages, candidate_support, decayed_expansion, diverse_ranking,
                                      diverse_rerank, graph_bonus, grag_seeds, mix_cross_encoder_scores,
                                      rerank_candidates)
from hpengine.retrieval._hop import HopResult, hyperprove_hop
from hpengine.retrieval._lexical import PAIR_SCORES, mentioned_passages, pair_coverage, title_shares
from hpengine.retrieval._ppr import personalized_pagerank, ppr_bytes_per_question, ppr_chunk_size
from hpengine.retrieval._ranking import (anchor_positions, best_home, bridge_entities, compact, first_occurrence,
                                         follow_links, lead_passages, lead_then_fill, linked_bridges, linked_passages,
                                         named_passages, pad_rows, rank_passages)
from hpengine.retrieval._walk import restart_distribution, top_visited, walk_visits

__all__ = [
    "PAIR_SCORES",
    "pair_coverage",
    "title_shares",
    "mentioned_passages",
    "APPROXIMATE_MIN_KEYS",
    "HOP_BUDGET_MB",
    "PPR_BUDGET_MB",
    "DenseIndex",
    "add_dense_candidates",
    "blended_passage_scores",
    "diverse_ranking",
    "graph_bonus",
    "grag_seeds",
    "mix_cross_encoder_scores",
    "rerank_candidates",
    "HopPlan",
    "HopResult",
    "batched_bfs",
    "best_home",
    "bridge_entities",
    "compact",
    "first_occurrence",
    "lead_passages",
    "follow_links",
    "anchor_positions",
    "named_passages",
    "lead_then_fill",
    "linked_passages",
    "linked_bridges",
    "pad_rows",
    "rank_passages",
    "resolve_backend",
    "best_fact_scores",
    "candidate_passages",
    "candidate_support",
    "decayed_expansion",
    "dense_topk",
    "diverse_rerank",
    "hyperprove_hop",
    "personalized_pagerank",
    "plan_hop",
    "resolve_memory_budget_mb",
    "ppr_bytes_per_question",
    "ppr_chunk_size",
    "restart_distribution",
    "top_visited",
    "walk_visits",
]
