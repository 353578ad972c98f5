"""Shared problem builders and tie-aware comparisons for the retrieval tests."""
from __future__ import annotations

import torch

from hpengine.graph import HyperGraph
from hpengine.testing._graphs import power_law_hypergraph, random_hypergraph
from hpengine.testing.reference import dense_transition, reference_hop

ATOL = 1e-5


class Problem:
    """A small random hypergraph with fact and query embeddings and a carried frontier."""

    def __init__(self, seed: int, device="cpu", *, kind="random", num_q=6, dim=16, frontier_width=3,
                 num_facts=40):
        if kind == "random":  # dense: a hub entity in every other fact
            fe, fp, v, p = random_hypergraph(seed, num_facts=num_facts)
        elif kind == "sparse":  # long shortest paths, many components
            fe, fp, v, p = power_law_hypergraph(num_facts, seed=seed, entities_per_fact=0.8, entity_ratio=1.0,
                                                title_prob=0.3, facts_per_passage=2.0)
        else:
            fe, fp, v, p = power_law_hypergraph(num_facts, seed=seed, facts_per_passage=3.0)
        self.graph = HyperGraph.from_incidence(fe.to(device), fp.to(device), v, p)
        self.dense = dense_transition(fe, fp, v, p)  # float64 [H, H] reference
        h = fp.numel()
        gen = torch.Generator().manual_seed(1000 + seed)
        self.facts = torch.randn(h, dim, generator=gen)
        # queries near a few facts, so seeds are meaningful
        anchor = torch.randint(0, h, (num_q,), generator=gen)
        self.queries = self.facts[anchor] + 0.7 * torch.randn(num_q, dim, generator=gen)
        frontier = torch.randint(0, h, (num_q, frontier_width), generator=gen)
        if frontier_width:
            frontier[0] = -1  # question 0: empty frontier
            if num_q > 1 and frontier_width > 1:
                frontier[1, -1] = -1  # padding
            if num_q > 2 and frontier_width > 1:
                frontier[2, 1] = frontier[2, 0]  # repeated id
        self.frontier = frontier
        self.facts, self.queries, self.frontier = (x.to(device) for x in (self.facts, self.queries, frontier))
        self.device = device

    def reference(self, q: int, params: dict, *, frontier=None, seeds=None, subgraph=None) -> dict:
        fr = self.frontier[q] if frontier is None else frontier
        return reference_hop(self.dense, self.facts.cpu(), self.queries[q].cpu(), fr.cpu().tolist(),
                             seeds=seeds, subgraph=subgraph, **params)


def assert_topk_equivalent(ids, scores, candidates: dict, k: int, atol: float = ATOL, where: str = "") -> None:
    """Tie-aware top-k check against a reference ``{fact: score}`` of all candidates.

    Scores must match the reference's k best scores; each id must be a candidate with (about) its
    score; nothing clearly better than the worst selected score may be missing. So ids may differ
    from the reference only inside groups of tied scores (STYLE §5).
    """
    ids = [int(x) for x in ids]
    scores = [float(x) for x in scores]
    chosen = [(i, s) for i, s in zip(ids, scores) if i >= 0]
    expected = sorted(candidates.values(), reverse=True)[:k]
    assert len(chosen) == len(expected), \
        f"{where}: {len(chosen)} selected, reference {len(expected)}: {ids} {candidates}"
    assert all(s == float("-inf") for i, s in zip(ids, scores) if i < 0), f"{where}: padding scores {scores}"
    assert len({i for i, _ in chosen}) == len(chosen), f"{where}: repeated ids {ids}"
    for (i, s), e in zip(chosen, expected):
        assert s == e or abs(s - e) <= atol, f"{where}: scores {scores} vs reference {expected}"
        assert i in candidates, f"{where}: {i} is not a candidate"
        assert candidates[i] == s or abs(candidates[i] - s) <= atol, f"{where}: score of {i}: {s} vs {candidates[i]}"
    if chosen:
        worst = chosen[-1][1]
        missing = [h for h, s in candidates.items() if s > worst + atol and h not in {i for i, _ in chosen}]
        assert not missing, f"{where}: better candidates {missing} not selected"


def assert_subgraph_equivalent(sub: set, ref: dict, forced: set, where: str = "") -> None:
    """The batched top-M set may differ from the reference only among facts of (nearly) equal visits."""
    ref_sub = ref["subgraph"]
    assert len(sub) == len(ref_sub), f"{where}: subgraph sizes {len(sub)} vs {len(ref_sub)}"
    assert forced <= sub, f"{where}: forced facts {forced - sub} missing"
    visits = ref["visits"]
    assert all(visits[h] > 0 for h in sub - forced), f"{where}: unvisited fact in the subgraph"
    extra, missing = sub - ref_sub, ref_sub - sub
    if extra or missing:
        low = min(visits[h] for h in extra)
        high = max(visits[h] for h in missing)
        assert high <= low * (1 + 1e-4) + 1e-12, f"{where}: subgraph differs beyond ties ({extra} vs {missing})"


def check_against_reference(problem: Problem, out, params: dict, *, seeds=None, active=None) -> None:
    """Every question of a batched :class:`HopResult` against :func:`reference_hop`."""
    num_q = problem.queries.shape[0]
    k = params["top_k"]
    for q in range(num_q):
        where = f"question {q}"
        frontier = problem.frontier[q]
        if active is not None and not bool(active[q]):
            assert (out.fact_ids[q] == -1).all() and torch.isneginf(out.scores[q]).all()
            assert torch.equal(out.frontier[q, : frontier.numel()], frontier)
            continue
        seed_q = None if seeds is None else seeds[q].cpu().tolist()
        ref = problem.reference(q, params, seeds=seed_q)
        got_seeds = {int(s) for s in out.seeds[q] if s >= 0}
        assert got_seeds == set(ref["seeds"]), f"{where}: seeds {got_seeds} vs {ref['seeds']}"
        sub = {int(h) for h in out.subgraph[q] if h >= 0}
        forced = got_seeds | {int(f) for f in frontier if f >= 0}
        assert_subgraph_equivalent(sub, ref, forced, where)
        if sub != ref["subgraph"]:  # ties in the walk's top-M: compare the later stages on our set
            ref = problem.reference(q, params, seeds=seed_q, subgraph=sub)
        assert_topk_equivalent(out.fact_ids[q].cpu(), out.scores[q].cpu(), ref["candidates"], k, where=where)
        for h, d in zip(out.fact_ids[q].tolist(), out.distance[q].tolist()):
            if h >= 0:
                want = ref["distance_to_frontier"].get(h, -1)
                assert d == (want if want >= 1 else -1), f"{where}: distance of {h}: {d} vs {want}"
            else:
                assert d == -1
        width = frontier.numel()
        assert torch.equal(out.frontier[q, :width], frontier)
        assert torch.equal(out.frontier[q, width:], out.fact_ids[q])
