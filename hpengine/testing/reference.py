"""Slow, obviously correct reference implementations (dense float64, per-question Python).

Fast paths in hpengine are tested against these. Nothing here is used by the library.
"""
from __future__ import annotations

import torch
from torch import Tensor


def dense_incidence(fact_entity: Tensor, fact_passage: Tensor, num_entities: int, num_passages: int):
    """Dense float64 ``B_he [H, V]`` and ``B_hd [H, P]`` (duplicate pairs count once)."""
    num_facts = fact_passage.numel()
    b_he = torch.zeros(num_facts, num_entities, dtype=torch.float64)
    if fact_entity.numel():
        b_he[fact_entity[0].cpu(), fact_entity[1].cpu()] = 1.0
    b_hd = torch.zeros(num_facts, num_passages, dtype=torch.float64)
    b_hd[torch.arange(num_facts), fact_passage.cpu()] = 1.0
    return b_he, b_hd


def dense_structural_weights(fact_entity: Tensor, fact_passage: Tensor, num_entities: int,
                             num_passages: int) -> Tensor:
    """``W_s = B_he D_e^-1 B_he^T + B_hd D_d^-1 B_hd^T`` straight from the definition
    (docs/methods/index.md#structural-transition-matrix-t_s)."""
    b_he, b_hd = dense_incidence(fact_entity, fact_passage, num_entities, num_passages)
    d_e, d_d = b_he.sum(0), b_hd.sum(0)
    inv_e = torch.where(d_e > 0, 1.0 / d_e, torch.zeros_like(d_e))
    inv_d = torch.where(d_d > 0, 1.0 / d_d, torch.zeros_like(d_d))
    return b_he @ torch.diag(inv_e) @ b_he.T + b_hd @ torch.diag(inv_d) @ b_hd.T


def row_normalize(w: Tensor) -> Tensor:
    """Divide each row by its sum; all-zero rows stay zero."""
    s = w.sum(-1, keepdim=True)
    return torch.where(s > 0, w / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(w))


def dense_transition(fact_entity: Tensor, fact_passage: Tensor, num_entities: int, num_passages: int) -> Tensor:
    """``T_s = RowNormalize(W_s - diag(W_s))`` as a dense float64 ``[H, H]`` matrix."""
    w = dense_structural_weights(fact_entity, fact_passage, num_entities, num_passages)
    w = w - torch.diag(torch.diag(w))
    return row_normalize(w)


def dense_local_block(t_dense: Tensor, ids: list[int], size: int) -> Tensor:
    """``T*``: ``T_s`` restricted to ``ids`` (in order) and row-normalised again, zero-padded to ``size``.

    Repeated ids are distinct slots whose mutual entries are 0 (T_s has a zero diagonal).
    """
    out = torch.zeros(size, size, dtype=torch.float64)
    n = len(ids)
    for a in range(n):
        for b in range(n):
            if ids[a] != ids[b]:
                out[a, b] = t_dense[ids[a], ids[b]]
    return row_normalize(out)


# ---------------------------------------------------------------------------------------------
# HyperProve retrieval hop (docs/methods/hyperprove.md), one question at a time, written the obvious way.
# ---------------------------------------------------------------------------------------------


def scipy_transition(fact_entity: Tensor, fact_passage: Tensor, num_entities: int, num_passages: int):
    """``T_s`` as an explicit ``scipy.sparse`` CSR matrix (float64), straight from the definition.

    For benchmark-sized graphs where the dense ``[H, H]`` reference does not fit; it still holds
    ``sum_c d_c^2`` entries, so it is a reference, never a production path.
    """
    import numpy as np
    import scipy.sparse as sp

    num_facts = fact_passage.numel()
    fe = torch.unique(fact_entity[0].cpu() * max(num_entities, 1) + fact_entity[1].cpu())
    rows = np.concatenate([(fe // max(num_entities, 1)).numpy(), np.arange(num_facts)])
    cols = np.concatenate([(fe % max(num_entities, 1)).numpy(), num_entities + fact_passage.cpu().numpy()])
    b = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(num_facts, num_entities + num_passages))
    deg = np.asarray(b.sum(0)).ravel()
    inv = np.divide(1.0, deg, out=np.zeros_like(deg), where=deg > 0)
    w = (b @ sp.diags(inv) @ b.T).tocsr()
    w.setdiag(0.0)
    w.eliminate_zeros()
    rs = np.asarray(w.sum(1)).ravel()
    inv_rs = np.divide(1.0, rs, out=np.zeros_like(rs), where=rs > 0)
    return (sp.diags(inv_rs) @ w).tocsr()


def reference_cosine(query, fact_embeddings):
    """``cos(query, x_h)`` for every fact in float64; 0 where either vector has zero norm."""
    import numpy as np

    q = np.asarray(query, dtype=np.float64)
    f = np.asarray(fact_embeddings, dtype=np.float64)
    qn = np.linalg.norm(q)
    fn = np.linalg.norm(f, axis=1)
    denom = qn * fn
    return np.divide(f @ q, denom, out=np.zeros(f.shape[0]), where=denom > 0)


def reference_hop(transition, fact_embeddings, query, frontier=(), *, num_seeds: int = 8,
                  subgraph_size: int = 600, walk_steps: int = 3, restart: float = 0.3,
                  frontier_weight: float = 1.0, seed_weighting: str = "cosine", theta: float = 0.0,
                  bfs_depth: int = 2, struct_depth: int = 0, alpha: float = 0.7, top_k: int = 5,
                  seeds=None, subgraph=None) -> dict:
    """One HyperProve hop for ONE question (docs/methods/hyperprove.md), with Python sets, numpy and networkx.

    The same definitions as :func:`hpengine.retrieval.hyperprove_hop`:

    1. ``cos`` of the query with every fact; seeds = top-S facts by ``cos`` (or ``seeds``).
    2. Restart vector ``r0``: each distinct seed weighted by ``max(cos, 0)`` (uniform when that
       mass is 0 or ``seed_weighting="uniform"``), normalised to 1; plus each distinct frontier fact
       with ``frontier_weight / |F|``; the sum normalised to 1.
    3. Walk ``x_0 = r0``, ``x_{t+1} = (1 - c) T_s^T x_t + c r0``; visits ``= sum_{t=0..steps} x_t``.
    4. Subgraph: frontier and seeds, then the facts with the largest visits (> 0), at most M.
    5. ``T*`` = ``T_s`` restricted to the subgraph and row-normalised again; edges ``T*_ij > theta``.
    6. Reached = seeds plus everything at most L edges away from a seed; candidates = reached
       minus the frontier.
    7. ``d`` = shortest path length from a candidate to the nearest frontier fact (at most
       ``struct_depth`` edges, 0 meaning ``bfs_depth``); ``struct = 1 / d``, 0 when unreachable.
    8. ``score = alpha * cos + (1 - alpha) * struct``; the top-K candidates by score.

    Args:
        transition: ``T_s`` as a dense ``[H, H]`` array/tensor (:func:`dense_transition`) or a
            ``scipy.sparse`` matrix (:func:`scipy_transition`).
        fact_embeddings: ``[H, D]``; query: ``[D]``.
        frontier: fact ids of ``F_{t-1}`` (``-1`` and repeats ignored).
        seeds: use these seed ids instead of the dense top-S (``-1`` and repeats ignored).
        subgraph: use this fact set as the local subgraph instead of the walk's top-M (to compare
            the later stages when the walk's top-M has ties).

    Returns:
        dict with ``fact_ids``, ``scores``, ``distance`` (lists, best first, at most K),
        ``seeds`` (list), ``subgraph`` (set), ``visits`` (``[H]`` numpy), ``candidates``
        (``{fact: score}``), ``reached`` (set), ``distance_to_frontier`` (``{fact: d}``).
    """
    import networkx as nx
    import numpy as np
    import scipy.sparse as sp

    if isinstance(transition, Tensor):
        transition = transition.double().cpu().numpy()
    if isinstance(fact_embeddings, Tensor):
        fact_embeddings = fact_embeddings.float().cpu().numpy()
    if isinstance(query, Tensor):
        query = query.float().cpu().numpy()
    num_facts = transition.shape[0]
    cos = reference_cosine(query, fact_embeddings)

    # 1. seeds
    if seeds is None:
        seed_list = [int(h) for h in np.argsort(-cos, kind="stable")[:num_seeds]]
    else:
        seed_list = []
        for s in (int(x) for x in seeds):
            if s >= 0 and s not in seed_list:
                seed_list.append(s)
    front = []
    for f in (int(x) for x in frontier):
        if f >= 0 and f not in front:
            front.append(f)

    # 2. restart vector
    r0 = np.zeros(num_facts)
    if seed_list:
        w = np.array([max(cos[s], 0.0) for s in seed_list])
        if seed_weighting == "uniform" or w.sum() == 0:
            w = np.ones(len(seed_list))
        for s, ws in zip(seed_list, w / w.sum()):
            r0[s] += ws
    for f in front:
        r0[f] += frontier_weight / len(front)
    if r0.sum() > 0:
        r0 /= r0.sum()

    # 3. walk with restart, mass moving along rows of T_s
    x = r0.copy()
    visits = r0.copy()
    tt = transition.T
    for _ in range(walk_steps):
        x = (1.0 - restart) * np.asarray(tt @ x).ravel() + restart * r0
        visits += x

    # 4. local subgraph
    if subgraph is None:
        forced = list(dict.fromkeys(front + seed_list))
        sub = set(forced[:subgraph_size])
        for h in np.argsort(-visits, kind="stable"):
            if len(sub) >= subgraph_size or visits[h] <= 0:
                break
            sub.add(int(h))
    else:
        sub = {int(h) for h in subgraph if int(h) >= 0}
    ids = sorted(sub)

    # 5. local block T*, thresholded edges
    if sp.issparse(transition):
        block = transition[ids][:, ids].toarray() if ids else np.zeros((0, 0))
    else:
        block = np.asarray(transition)[np.ix_(ids, ids)] if ids else np.zeros((0, 0))
    sums = block.sum(1, keepdims=True)
    block = np.divide(block, sums, out=np.zeros_like(block), where=sums > 0)
    graph = nx.DiGraph()
    graph.add_nodes_from(ids)
    neighbours = {h: set() for h in ids}
    for a, b in zip(*np.nonzero(block > theta)):
        graph.add_edge(ids[a], ids[b])
        neighbours[ids[a]].add(ids[b])

    # 6. bounded BFS from the seeds
    reached = {s for s in seed_list if s in sub}
    layer = set(reached)
    for _ in range(bfs_depth):
        layer = {j for i in layer for j in neighbours[i]} - reached
        reached |= layer
    front_set = {f for f in front if f in sub}
    candidates = reached - set(front)

    # 7. distance to the nearest frontier fact (edges followed forwards, so search the reverse)
    depth = struct_depth if struct_depth > 0 else bfs_depth
    dist = dict(nx.multi_source_dijkstra_path_length(graph.reverse(copy=True), front_set, cutoff=depth)) \
        if front_set else {}

    # 8. scores and top-K
    scored = {}
    for h in candidates:
        d = dist.get(h, 0)
        scored[h] = alpha * cos[h] + (1.0 - alpha) * (1.0 / d if d >= 1 else 0.0)
    best = sorted(scored, key=lambda h: -scored[h])[:top_k]
    return {
        "fact_ids": best,
        "scores": [scored[h] for h in best],
        "distance": [dist.get(h, -1) if dist.get(h, 0) >= 1 else -1 for h in best],
        "seeds": seed_list,
        "subgraph": sub,
        "visits": visits,
        "candidates": scored,
        "reached": reached,
        "distance_to_frontier": dist,
    }


# ---------------------------------------------------------------------------------------------
# Personalised PageRank on the entity-fact-passage star graph (docs/methods/ppr.md), two ways.
def star_graph_edges(fact_entity: Tensor, fact_passage: Tensor, num_entities: int, num_passages: int) -> Tensor:
    """Undirected edges of the star expansion, int64 ``[E, 2]`` (duplicate incidences once).

    Nodes: entities ``[0, V)``, facts ``[V, V + H)``, passages ``[V + H, V + H + P)``.
    """
    num_facts = fact_passage.numel()
    fe = fact_entity.cpu()
    key = torch.unique(fe[0] * max(num_entities, 1) + fe[1])
    facts, ents = key // max(num_entities, 1), key % max(num_entities, 1)
    ent_edges = torch.stack([ents, num_entities + facts], 1)
    pas_edges = torch.stack([num_entities + torch.arange(num_facts), num_entities + num_facts + fact_passage.cpu()], 1)
    return torch.cat([ent_edges, pas_edges])


def networkx_ppr(fact_entity: Tensor, fact_passage: Tensor, num_entities: int, num_passages: int,
                 personalization: Tensor, *, damping: float = 0.85, tol: float = 1e-13) -> Tensor:
    """``networkx.pagerank`` per question on the star graph, float64 ``[Q, N]``.

    ``personalization`` is a dense ``[Q, N]`` tensor (any non-negative rows with mass).
    """
    import networkx as nx

    num_nodes = num_entities + fact_passage.numel() + num_passages
    g = nx.Graph()
    g.add_nodes_from(range(num_nodes))
    g.add_edges_from(star_graph_edges(fact_entity, fact_passage, num_entities, num_passages).tolist())
    out = torch.zeros(personalization.shape[0], num_nodes, dtype=torch.float64)
    for q, row in enumerate(personalization.detach().cpu().double()):
        pers = {n: float(w) for n, w in enumerate(row.tolist()) if w > 0}
        ppr = nx.pagerank(g, alpha=damping, personalization=pers, tol=tol, max_iter=10_000)
        out[q] = torch.tensor([ppr[n] for n in range(num_nodes)], dtype=torch.float64)
    return out


def dense_ppr(fact_entity: Tensor, fact_passage: Tensor, num_entities: int, num_passages: int,
              personalization: Tensor, *, damping: float = 0.85) -> Tensor:
    """PPR by a dense float64 linear solve: ``x = R p / sum(R p)``, ``R = (I - d A D^-1)^-1``.

    Differentiable in ``personalization`` (a ``[Q, N]`` tensor), so it is also the gradient reference.
    """
    num_nodes = num_entities + fact_passage.numel() + num_passages
    edges = star_graph_edges(fact_entity, fact_passage, num_entities, num_passages)
    adj = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)
    adj[edges[:, 0], edges[:, 1]] = 1.0
    adj[edges[:, 1], edges[:, 0]] = 1.0
    deg = adj.sum(0)
    inv = torch.where(deg > 0, 1.0 / torch.where(deg > 0, deg, torch.ones_like(deg)), torch.zeros_like(deg))
    system = torch.eye(num_nodes, dtype=torch.float64) - damping * adj * inv.unsqueeze(0)  # I - d M^T
    p = personalization.cpu().double()
    u = torch.linalg.solve(system, p.t()).t()  # [Q, N]
    return u / u.sum(1, keepdim=True)


# ---------------------------------------------------------------------------------------------
# GRAG-MH retrieval (docs/methods/grag.md#retrieval), one question at a time in plain Python.
def reference_grag_expansion(edges, num_nodes: int, seeds, scores, hops: int, decay: float, threshold: float,
                             max_over_seed: bool = False) -> dict:
    """One question's kept nodes ``{node: score'}``: networkx shortest paths per seed, explicit decay and
    threshold; every seed is kept, a neighbour when its score' reaches threshold * the best
    neighbour's (or the seed's, ``max_over_seed``). Twin of ``decayed_expansion``."""
    import math

    import networkx as nx

    g = nx.Graph()
    g.add_nodes_from(range(num_nodes))
    g.add_edges_from(edges)
    kept = {}
    for s in seeds:
        if s < 0:
            continue
        dist = nx.single_source_shortest_path_length(g, s, cutoff=hops)
        dec = {v: scores[v] * math.exp(-decay * d) for v, d in dist.items()}
        pool = [x for v, x in dec.items() if max_over_seed or v != s]
        best = max(pool) if pool else 0.0
        for v, x in dec.items():
            if v == s or x >= threshold * best:
                kept[v] = max(kept.get(v, -1.0), x)
    return kept


def reference_candidate_support(kept: dict, node_passages: list, num_passages: int) -> list:
    """One question's support per passage: the best score' of the kept nodes ``{node: score'}`` it
    belongs to, ``-inf`` for none. Twin of ``candidate_support``."""
    import math

    out = [-math.inf] * num_passages
    for v, x in kept.items():
        for p in node_passages[v]:
            out[p] = max(out[p], x)
    return out


def reference_best_fact_scores(query: list, facts: list, fact_passage: list, num_passages: int) -> list:
    """One question's best fact cosine per passage (``-inf``: no fact). Twin of ``best_fact_scores``."""
    import math

    out = [-math.inf] * num_passages
    for f, p in zip(facts, fact_passage):
        out[p] = max(out[p], sum(a * b for a, b in zip(query, f)))
    return out


def reference_grag_seeds(query: Tensor, node_emb: Tensor, is_graph_node: list, num_seeds: int) -> tuple[list, list]:
    """One question's seeds (graph nodes by descending float64 cosine) and node scores (cosine
    clamped at 0). Twin of ``grag_seeds``."""
    sims = (node_emb.double() @ query.double()).tolist()
    seeds = sorted((v for v in range(len(sims)) if is_graph_node[v]), key=lambda v: -sims[v])[:num_seeds]
    return seeds, [max(x, 0.0) for x in sims]


def reference_passage_scores(query: Tensor, passage_emb: Tensor, fact_emb: Tensor, fact_passage: Tensor,
                             fact_weight: float) -> list:
    """One question, per passage: ``(1 - w) cos(q, passage) + w *`` the best ``cos(q, fact)`` over its
    facts (loops; the passage cosine alone without facts). Twin of ``blended_passage_scores``."""
    cos = (passage_emb.double() @ query.double()).tolist()
    fcos = (fact_emb.double() @ query.double()).tolist()
    best = {}
    for f, p in enumerate(fact_passage.tolist()):
        best[p] = max(best.get(p, -float("inf")), fcos[f])
    return [(1 - fact_weight) * c + fact_weight * best[p] if p in best else c for p, c in enumerate(cos)]


def reference_rerank_scores(base: dict, support: dict, graph_weight: float) -> dict:
    """One question's rerank score per candidate ``{p: base + bonus}``, the bonus ``graph_weight *
    (max - min of base over the candidates) * max(support, 0) / max support``. Twin of ``graph_bonus``
    (``rerank_candidates`` with ``base`` the cosine, ``mix_cross_encoder_scores`` with the sigmoid)."""
    spread = max(base[p] for p in support) - min(base[p] for p in support) if support else 0.0
    top = max((max(x, 0.0) for x in support.values()), default=0.0)
    return {p: base[p] + (graph_weight * spread * max(x, 0.0) / top if top > 0 else 0.0) for p, x in support.items()}


def reference_diverse_rerank(scores: list, emb: list, diversity: float, k: int) -> tuple[list, list]:
    """One question's greedy diversity order and penalised scores ``s'`` (explicit loops; ties: the
    lower position). Twin of ``diverse_rerank``."""
    chosen, out = [], []
    avail = [j for j, x in enumerate(scores) if x > -float("inf")]
    for _ in range(min(k, len(scores))):
        if not avail:
            break
        adj = {j: scores[j] - diversity * sum(sum(a * b for a, b in zip(emb[j], emb[c])) for c in chosen)
               for j in avail}
        j = max(avail, key=lambda j: (adj[j], -j))
        chosen.append(j)
        out.append(adj[j])
        avail.remove(j)
    return chosen, out


def reference_grag_search(query: Tensor, node_emb: Tensor, is_graph_node: list, edges, node_passages: list,
                          passage_emb: Tensor, fact_emb: Tensor, fact_passage: Tensor, cfg, width: int):
    """GRAG-MH steps 5-7 for one question in plain Python (``cfg``: a ``GragConfig``):
    ``(ranked, penalised scores, rerank score per candidate)``. Twin of ``GragSearch.search`` with the
    bi-encoder reranker."""
    n, num_passages = node_emb.shape[0], passage_emb.shape[0]
    seeds, node_scores = reference_grag_seeds(query, node_emb, is_graph_node, cfg.seeds)
    kept = reference_grag_expansion(edges, n, seeds, node_scores, cfg.hops, cfg.decay, cfg.threshold,
                                    cfg.max_over_seed)
    support = {p: x for p, x in enumerate(reference_candidate_support(kept, node_passages, num_passages))
               if x > -float("inf")}
    pcos = reference_passage_scores(query, passage_emb, fact_emb, fact_passage, cfg.fact_weight)
    dense = sorted(range(num_passages), key=lambda p: -pcos[p])
    for p in dense[: cfg.dense_candidates]:
        support[p] = max(support.get(p, 0.0), 0.0)
    combined = reference_rerank_scores(dict(enumerate(pcos)), support, cfg.graph_weight)
    top = sorted(combined, key=lambda p: -combined[p])[: cfg.rerank_candidates]
    picks, vals = reference_diverse_rerank([combined[p] for p in top], passage_emb[top].tolist(), cfg.diversity, width)
    chosen = [top[j] for j in picks]
    return (chosen + [p for p in dense[:width] if p not in chosen])[:width], vals, combined
