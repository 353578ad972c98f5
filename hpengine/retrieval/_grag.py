"""GRAG-MH retrieval ops (docs/methods/grag.md#retrieval), batched over questions: seed nodes, decayed k-hop
expansion from them, candidate passages of the kept nodes, the bi-encoder passage score, the graph bonus and
rerank score mixing, the greedy diversity penalty, and the ranked passages with their dense fill."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from hpengine.retrieval._ranking import lead_then_fill
from hpengine.sparse import gather_csr_rows

__all__ = ["add_dense_candidates", "best_fact_scores", "blended_passage_scores", "candidate_passages",
           "candidate_support", "decayed_expansion", "diverse_ranking", "diverse_rerank", "graph_bonus",
           "grag_seeds", "mix_cross_encoder_scores", "rerank_candidates"]


def grag_seeds(query_emb: Tensor, node_emb: Tensor, is_graph_node: Tensor, *, num_seeds: int) -> tuple[Tensor, Tensor]:
    """Seed nodes: each question's top ``num_seeds`` graph nodes by cosine, and every node's cosine
    clamped at 0 (the node scores :func:`decayed_expansion` decays).

    Args:
        query_emb: float ``[Q, D]``; node_emb: float ``[N, D]`` (both L2-normalised);
        is_graph_node: bool ``[N]`` (nodes that may seed); num_seeds: n.

    Returns:
        ``(seeds, node_scores)``: int64 ``[Q, S]`` (``S = min(n, N)``, ``-1`` where fewer graph
        nodes) and float32 ``[Q, N]``.

    Shapes:
        query_emb ``[Q, D]``, node_emb ``[N, D]``, is_graph_node ``[N]`` -> ``[Q, S]``, ``[Q, N]``.

    Example:
        >>> e = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
        >>> s, sc = grag_seeds(torch.tensor([[1.0, 0.0]]), e, torch.tensor([True, False, True]), num_seeds=3)
        >>> s.tolist()
        [[0, 2, -1]]
    """
    sim = query_emb.float() @ node_emb.float().t()
    masked = torch.where(is_graph_node, sim, torch.full_like(sim, -torch.inf))
    k = min(num_seeds, node_emb.shape[0])
    top, ids = torch.topk(masked, k, dim=1)
    ids = torch.where(torch.isfinite(top), ids, torch.full_like(ids, -1))
    return ids, sim.clamp_min(0)


def decayed_expansion(adjacency: Tensor, seeds: Tensor, node_scores: Tensor, *, hops: int, decay: float,
                      threshold: float, query_chunk_size: int = 32,
                      max_over_seed: bool = False) -> tuple[Tensor, Tensor]:
    """Nodes kept around each question's seeds: ``score' = score * exp(-decay * d)`` with ``d`` the
    hop distance from the seed (``d <= hops``). Every seed is kept; a neighbour ``v`` (``1 <= d <=
    hops``) is kept for a seed when ``score'(v) >= threshold * max score'`` over that seed's
    neighbours (``max_over_seed=True``: over its neighbours and the seed itself, whose undecayed
    score then usually keeps nothing else). A question keeps the union over its seeds, each node
    with its best ``score'``.

    The expansion is a sparse frontier expansion: all (question, seed) rows of a chunk advance
    together, one SpMM of the CSR adjacency with the ``[N, R]`` frontier per hop (loops over hops
    and query chunks only).

    Args:
        adjacency: float ``[N, N]`` ``torch.sparse_csr`` symmetric adjacency (any positive values).
        seeds: int64 ``[Q, S]`` seed nodes, ``-1`` padded.
        node_scores: float ``[Q, N]`` non-negative node scores (cosine with the question, clamped).
        hops: k; decay: lambda; threshold: tau in [0, 1].
        query_chunk_size: questions per SpMM block (bounds the ``[N, chunk * S]`` blocks).
        max_over_seed: include the seed in the neighbourhood maximum (see above).

    Returns:
        ``(is_kept, scores)``: bool ``[Q, N]`` and float32 ``[Q, N]`` (best ``score'`` over the
        seeds that keep the node; 0 where not kept).

    Shapes:
        adjacency ``[N, N]``, seeds ``[Q, S]``, node_scores ``[Q, N]`` -> ``[Q, N]``, ``[Q, N]``.

    Example:
        >>> a = torch.tensor([[0., 1, 0], [1, 0, 1], [0, 1, 0]]).to_sparse_csr()
        >>> kept, s = decayed_expansion(a, torch.tensor([[0]]), torch.tensor([[1.0, 0.9, 0.9]]), hops=2,
        ...                             decay=0.5, threshold=0.7)
        >>> kept.tolist()
        [[True, True, False]]
    """
    if seeds.dim() != 2 or node_scores.dim() != 2 or seeds.shape[0] != node_scores.shape[0]:
        raise ValueError(f"seeds must be [Q, S] and node_scores [Q, N] (got {tuple(seeds.shape)} and "
                         f"{tuple(node_scores.shape)})")
    q, s = seeds.shape
    n = node_scores.shape[1]
    is_kept = torch.zeros(q, n, dtype=torch.bool, device=node_scores.device)
    out = torch.zeros(q, n, dtype=torch.float32, device=node_scores.device)
    decay_of = torch.exp(-decay * torch.arange(hops + 1, dtype=torch.float32, device=node_scores.device))
    for start in range(0, q, max(query_chunk_size, 1)):
        sd = seeds[start:start + query_chunk_size]
        qc = sd.shape[0]
        flat = sd.reshape(-1)  # row r = (question r // S, seed r % S)
        r = flat.numel()
        valid = flat >= 0
        dist = torch.full((n, r), hops + 1, dtype=torch.int64, device=seeds.device)  # hops + 1: unreached
        cols = torch.arange(r, device=seeds.device)
        dist[flat.clamp_min(0)[valid], cols[valid]] = 0
        front = dist == 0
        for step in range(1, hops + 1):
            nxt = torch.sparse.mm(adjacency, front.float()) > 0  # [N, R]
            nxt &= dist > step  # not reached before
            dist[nxt] = step
            front = nxt
        reached = dist <= hops  # [N, R]
        scores = node_scores[start:start + qc].float().repeat_interleave(s, dim=0).t()  # [N, R]
        decayed = scores * decay_of[dist.clamp(max=hops)]
        is_seed = dist == 0
        pool = reached if max_over_seed else reached & ~is_seed
        best = torch.where(pool, decayed, torch.full_like(decayed, -1.0)).max(dim=0, keepdim=True).values  # [1, R]
        keep = is_seed | (reached & (decayed >= threshold * best))
        kept_score = torch.where(keep, decayed, torch.full_like(decayed, -1.0))
        per_q = kept_score.t().reshape(qc, s, n).max(dim=1).values  # best over the question's seeds
        is_kept[start:start + qc] = per_q >= 0
        out[start:start + qc] = per_q.clamp_min(0)
    return is_kept, out


def candidate_passages(is_kept: Tensor, node_passage_crow: Tensor, node_passage_col: Tensor,
                       num_passages: int) -> Tensor:
    """bool ``[Q, P]``: the passages of each question's kept nodes (CSR node -> passages).

    One host sync (the number of kept (question, node) pairs sizes the gather).

    Example:
        >>> candidate_passages(torch.tensor([[True, False]]), torch.tensor([0, 2, 3]),
        ...                    torch.tensor([0, 2, 1]), 3).tolist()
        [[True, False, True]]
    """
    zeros = torch.zeros(is_kept.shape, dtype=torch.float32, device=is_kept.device)
    return torch.isfinite(candidate_support(is_kept, zeros, node_passage_crow, node_passage_col, num_passages))


def candidate_support(is_kept: Tensor, node_scores: Tensor, node_passage_crow: Tensor, node_passage_col: Tensor,
                      num_passages: int) -> Tensor:
    """float ``[Q, P]``: each candidate passage's graph support, the best ``score'`` of the kept
    nodes it belongs to; ``-inf`` for a passage of no kept node.

    One host sync (the number of kept (question, node) pairs sizes the gather).

    Args:
        is_kept: bool ``[Q, N]``; node_scores: float ``[Q, N]`` (``score'`` of
            :func:`decayed_expansion`); node_passage_crow / col: CSR ``[N + 1]`` / ``[nnz]``.

    Example:
        >>> candidate_support(torch.tensor([[True, True]]), torch.tensor([[0.5, 0.75]]),
        ...                   torch.tensor([0, 2, 3]), torch.tensor([0, 2, 2]), 3).tolist()
        [[0.5, -inf, 0.75]]
    """
    q = is_kept.shape[0]
    out = torch.full((q * num_passages,), -math.inf, dtype=torch.float32, device=is_kept.device)
    row, node = is_kept.nonzero(as_tuple=True)  # host sync: the kept pairs, once per batch
    pos, passage = gather_csr_rows(node_passage_crow, node_passage_col, node)
    value = node_scores[row, node].float()[pos]
    out.scatter_reduce_(0, row[pos] * num_passages + passage, value, reduce="amax")
    return out.view(q, num_passages)


def best_fact_scores(query_emb: Tensor, fact_emb: Tensor, fact_passage: Tensor, num_passages: int, *,
                     query_chunk_size: int = 32) -> Tensor:
    """float32 ``[Q, P]``: each passage's best fact cosine with each query, ``max_{f in p} q . f``;
    ``-inf`` for a passage with no fact. A finer-grained bi-encoder score than the passage's own
    embedding: a passage about several things scores by the fact that matches.

    Loops over query chunks only (bounds the ``[chunk, H]`` block).

    Args:
        query_emb: float ``[Q, D]``; fact_emb: float ``[H, D]`` (both L2-normalised);
        fact_passage: int64 ``[H]`` passage of each fact; num_passages: P.

    Example:
        >>> f = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
        >>> best_fact_scores(torch.tensor([[1.0, 0.0]]), f, torch.tensor([0, 0, 2]), 3).tolist()
        [[1.0, -inf, 0.6000000238418579]]
    """
    if query_emb.dim() != 2 or fact_emb.dim() != 2 or fact_passage.shape != fact_emb.shape[:1]:
        raise ValueError(f"query_emb must be [Q, D], fact_emb [H, D] and fact_passage [H] (got "
                         f"{tuple(query_emb.shape)}, {tuple(fact_emb.shape)}, {tuple(fact_passage.shape)})")
    q = query_emb.shape[0]
    out = torch.full((q, num_passages), -math.inf, dtype=torch.float32, device=query_emb.device)
    facts = fact_emb.float().t()
    step = max(query_chunk_size, 1)
    for start in range(0, q, step):
        block = query_emb[start:start + step].float() @ facts  # [chunk, H]
        index = fact_passage.long().unsqueeze(0).expand(block.shape[0], -1)
        out[start:start + step].scatter_reduce_(1, index, block, reduce="amax")
    return out


def diverse_rerank(scores: Tensor, embeddings: Tensor, *, diversity: float, k: int) -> tuple[Tensor, Tensor]:
    """Greedy diversity penalty ``s'(d_i) = s(d_i) - mu * sum_{j < i} sim(d_i, d_j)``: position ``i``
    takes the candidate with the best penalised score given the ``i`` already taken (ties: the
    lower candidate index). Loops over positions only.

    Args:
        scores: float ``[Q, C]`` rerank scores, ``-inf`` for no candidate.
        embeddings: float ``[Q, C, D]`` L2-normalised candidate embeddings (sim = cosine).
        diversity: mu.
        k: positions to fill.

    Returns:
        ``(order, penalised)``: int64 ``[Q, k]`` candidate positions (``-1`` when none left) and
        float32 ``[Q, k]`` their ``s'`` (``-inf`` for none).

    Example:
        >>> e = torch.tensor([[[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])
        >>> diverse_rerank(torch.tensor([[0.9, 0.8, 0.5]]), e, diversity=0.5, k=3)[0].tolist()
        [[0, 2, 1]]
    """
    q, c = scores.shape
    k = min(k, c)
    sim = torch.bmm(embeddings.float(), embeddings.float().transpose(1, 2))  # [Q, C, C]
    penalty = torch.zeros(q, c, dtype=torch.float32, device=scores.device)
    available = torch.isfinite(scores)
    order = torch.full((q, k), -1, dtype=torch.int64, device=scores.device)
    values = torch.full((q, k), -math.inf, dtype=torch.float32, device=scores.device)
    rows = torch.arange(q, device=scores.device)
    for i in range(k):
        adjusted = torch.where(available, scores.float() - diversity * penalty, torch.full_like(penalty, -math.inf))
        best = adjusted.argmax(dim=1)  # first maximum on ties
        val = adjusted[rows, best]
        ok = torch.isfinite(val)
        order[:, i] = torch.where(ok, best, torch.full_like(best, -1))
        values[:, i] = val
        available[rows[ok], best[ok]] = False
        penalty += torch.where(ok.unsqueeze(1), sim[rows, :, best], torch.zeros_like(penalty))
    return order, values


def blended_passage_scores(query_emb: Tensor, passage_emb: Tensor, fact_emb: Tensor, fact_passage: Tensor, *,
                           fact_weight: float, query_chunk_size: int = 32) -> Tensor:
    """The bi-encoder score of every passage, ``(1 - w) cos(q, passage) + w max_f cos(q, f)`` over
    its facts ``f`` (``w = fact_weight``; the passage cosine alone for a passage with no fact).

    Args:
        query_emb: float ``[Q, D]``; passage_emb: float ``[P, D]``; fact_emb: float ``[H, D]``;
        fact_passage: int64 ``[H]``; fact_weight: w; query_chunk_size: see :func:`best_fact_scores`.

    Shapes:
        query_emb ``[Q, D]``, passage_emb ``[P, D]``, fact_emb ``[H, D]``, fact_passage ``[H]`` -> ``[Q, P]``.

    Example:
        >>> f = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
        >>> blended_passage_scores(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0], [0.0, 1.0]]), f,
        ...                        torch.tensor([0, 0]), fact_weight=0.5).tolist()
        [[0.5, 0.0]]
    """
    cos = query_emb.float() @ passage_emb.float().t()
    if fact_weight == 0:
        return cos
    best = best_fact_scores(query_emb, fact_emb, fact_passage, passage_emb.shape[0], query_chunk_size=query_chunk_size)
    return torch.where(torch.isfinite(best), (1 - fact_weight) * cos + fact_weight * best, cos)


def add_dense_candidates(support: Tensor, cos: Tensor, *, dense_candidates: int, width: int) -> tuple[Tensor, Tensor]:
    """The dense ranking, and the candidates with dense's top ``dense_candidates`` passages added
    (support 0 where they had no graph support, their support otherwise).

    Returns:
        ``(support, dense)``: float ``[Q, P]`` (a new tensor) and int64 ``[Q, W]``, the passages by
        descending ``cos`` (``W = min(max(width, dense_candidates), P)``).

    Shapes:
        support, cos ``[Q, P]`` -> ``[Q, P]``, ``[Q, W]``.

    Example:
        >>> sup, dense = add_dense_candidates(torch.tensor([[-math.inf, 0.5, -math.inf]]),
        ...                                   torch.tensor([[0.9, 0.1, 0.2]]), dense_candidates=1, width=2)
        >>> sup.tolist(), dense.tolist()
        ([[0.0, 0.5, -inf]], [[0, 2]])
    """
    dense = torch.topk(cos, min(max(width, dense_candidates), cos.shape[1]), dim=1).indices
    support = support.clone()
    if dense_candidates:
        top = dense[:, :dense_candidates]
        support.scatter_(1, top, support.gather(1, top).clamp_min(0))
    return support, dense


def graph_bonus(base: Tensor, support: Tensor, *, graph_weight: float) -> Tensor:
    """``graph_weight * range(base) * support / max support`` per question, over the candidates
    (finite ``support``): the graph's share in units of the question's own spread of rerank
    scores, so one weight fits encoders whose cosines sit at different scales.

    Shapes:
        base, support ``[Q, C]`` (``-inf`` support: no candidate) -> ``[Q, C]`` (0 off candidates).

    Example:
        >>> b = graph_bonus(torch.tensor([[0.25, 0.75, 0.9]]), torch.tensor([[1.0, 0.5, -math.inf]]), graph_weight=0.5)
        >>> b.tolist()
        [[0.25, 0.125, 0.0]]
    """
    cand = torch.isfinite(support)
    inf = torch.full_like(base, torch.inf)
    spread = (torch.where(cand, base, -inf).amax(1, keepdim=True) - torch.where(cand, base, inf).amin(1, keepdim=True))
    sup = torch.where(cand, support, torch.zeros_like(support)).clamp_min(0)
    top = sup.amax(1, keepdim=True)
    share = torch.where(top > 0, sup / top.clamp_min(1e-12), torch.zeros_like(sup))
    return torch.where(cand, graph_weight * spread.nan_to_num(0.0, 0.0, 0.0) * share, torch.zeros_like(sup))


def rerank_candidates(cos: Tensor, support: Tensor, *, graph_weight: float,
                      num_candidates: int) -> tuple[Tensor, Tensor]:
    """Each question's best ``num_candidates`` candidates (finite ``support``) by ``cos +``
    :func:`graph_bonus`, in descending order of that sum (the bi-encoder rerank score).

    Returns:
        ``(ids, scores)``: int64 ``[Q, C]`` passages (``-1`` padded) and float ``[Q, C]``
        (``-inf`` padded), ``C = min(num_candidates, P)``.

    Shapes:
        cos, support ``[Q, P]`` -> ``[Q, C]``, ``[Q, C]``.

    Example:
        >>> ids, s = rerank_candidates(torch.tensor([[0.2, 0.6, 0.9]]), torch.tensor([[1.0, 0.5, -math.inf]]),
        ...                            graph_weight=0.5, num_candidates=3)
        >>> ids.tolist()
        [[1, 0, -1]]
    """
    pre = torch.where(torch.isfinite(support), cos + graph_bonus(cos, support, graph_weight=graph_weight),
                      torch.full_like(cos, -torch.inf))
    score, ids = torch.topk(pre, min(num_candidates, cos.shape[1]), dim=1)
    ids = torch.where(torch.isfinite(score), ids, torch.full_like(ids, -1))
    return ids, score


def mix_cross_encoder_scores(ids: Tensor, logits: Tensor, support: Tensor, *,
                             graph_weight: float) -> tuple[Tensor, Tensor]:
    """The cross-encoder's rerank: each candidate's ``sigmoid(logit)`` plus its :func:`graph_bonus`
    (over those sigmoids), candidates re-sorted by it (stable: ties keep their order).

    Args:
        ids: int64 ``[Q, C]`` candidates of :func:`rerank_candidates` (``-1`` padded).
        logits: float ``[n]`` the cross-encoder's score of each candidate (``ids >= 0``), row-major.
        support: float ``[Q, P]`` graph support (:func:`candidate_support`).

    Returns:
        ``(ids, scores)``: int64 ``[Q, C]`` and float ``[Q, C]`` (``-inf`` padded), by descending score.

    Shapes:
        ids ``[Q, C]``, logits ``[n]``, support ``[Q, P]`` -> ``[Q, C]``, ``[Q, C]``.

    Example:
        >>> ids, s = mix_cross_encoder_scores(torch.tensor([[0, 1, -1]]), torch.tensor([-1.0, 1.0]),
        ...                                   torch.tensor([[1.0, 1.0, -math.inf]]), graph_weight=0.0)
        >>> ids.tolist()
        [[1, 0, -1]]
    """
    valid = ids >= 0
    base = torch.full(ids.shape, -torch.inf, dtype=torch.float32, device=ids.device)
    base[valid] = torch.sigmoid(logits.float()).to(ids.device)
    sup = torch.where(valid, support.gather(1, ids.clamp_min(0)), torch.full_like(base, -torch.inf))
    score = torch.where(valid, base + graph_bonus(base, sup, graph_weight=graph_weight), base)
    score, order = torch.sort(score, dim=1, descending=True, stable=True)
    return ids.gather(1, order), score


def diverse_ranking(ids: Tensor, scores: Tensor, passage_emb: Tensor, dense: Tensor, *, diversity: float,
                    width: int) -> tuple[Tensor, Tensor]:
    """Ranked passages: the :func:`diverse_rerank` order of the reranked candidates, then the dense
    ranking to fill ``width`` (no repeats).

    Args:
        ids: int64 ``[Q, C]`` candidates (``-1`` padded); scores: float ``[Q, C]`` their rerank
        scores (``-inf`` padded); passage_emb: float ``[P, D]``; dense: int64 ``[Q, W]`` the dense
        ranking (``W >= width``); diversity: mu; width: passages per question.

    Returns:
        ``(ranked, scores)``: int64 ``[Q, width]`` (``-1`` padded) and float32 ``[Q, width]``, each
        candidate's penalised score ``s'`` (0 for the dense fill).

    Shapes:
        ids, scores ``[Q, C]``, passage_emb ``[P, D]``, dense ``[Q, W]`` -> ``[Q, width]``, ``[Q, width]``.

    Example:
        >>> e = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
        >>> r, s = diverse_ranking(torch.tensor([[0, 1, -1]]), torch.tensor([[0.9, 0.8, -math.inf]]), e,
        ...                        torch.tensor([[2, 1, 0]]), diversity=0.0, width=3)
        >>> r.tolist()
        [[0, 1, 2]]
    """
    emb = passage_emb[ids.clamp_min(0)]  # [Q, C, D]
    order, penalised = diverse_rerank(scores, emb, diversity=diversity, k=width)
    chosen = torch.where(order >= 0, ids.gather(1, order.clamp_min(0)), torch.full_like(order, -1))
    ranked = lead_then_fill(chosen, dense[:, :width], width)
    out = torch.zeros(ranked.shape, dtype=torch.float32, device=ranked.device)
    k = chosen.shape[1]
    out[:, :k] = torch.where(order >= 0, penalised, torch.zeros_like(penalised))
    return ranked, out
