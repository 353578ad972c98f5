import dataclasses

import pytest
import torch
from hop_checks import Problem, assert_topk_equivalent, check_against_reference

from hpengine.config import RetrievalConfig
from hpengine.graph import HyperGraph
from hpengine.retrieval import DenseIndex, HopResult, hyperprove_hop
from hpengine.testing import with_devices, with_package

BASE = dict(num_seeds=4, subgraph_size=600, walk_steps=3, restart=0.3, frontier_weight=1.0,
            seed_weighting="cosine", theta=0.0, bfs_depth=2, struct_depth=0, alpha=0.7, top_k=5)

CASES = {
    "defaults": {},
    "truncated_subgraph": dict(subgraph_size=12),
    "threshold": dict(theta=0.13, bfs_depth=3),
    "deep_struct": dict(struct_depth=4, alpha=0.4),
    "shallow_struct": dict(struct_depth=1, bfs_depth=3),
    "uniform_seeds": dict(seed_weighting="uniform", frontier_weight=2.5, restart=0.15),
    "no_frontier_mass": dict(frontier_weight=0.0, walk_steps=1),
    "struct_only": dict(alpha=0.0, top_k=7),
    "no_walk": dict(walk_steps=0, subgraph_size=9),
    "every_candidate": dict(top_k=150, alpha=0.9, struct_depth=5, bfs_depth=4),  # checks all distances
}


def params(**kw):
    out = dict(BASE)
    out.update(kw)
    return out


def run(problem: Problem, p: dict, **kw) -> HopResult:
    return hyperprove_hop(problem.graph, problem.facts, problem.queries, problem.frontier, **p, **kw)


@with_devices
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("kind, seed", [("random", 0), ("sparse", 1)])
def test_matches_reference(case, kind, seed, device):
    problem = Problem(seed, device, kind=kind, num_facts=40 if kind == "random" else 150)
    p = params(**CASES[case])
    out = run(problem, p)
    for t in out:
        assert t.device == torch.device(device)
    assert out.fact_ids.shape == (6, p["top_k"]) and out.scores.dtype == torch.float32
    assert out.frontier.shape == (6, 3 + p["top_k"]) and out.subgraph.shape == (6, p["subgraph_size"])
    check_against_reference(problem, out, p)


@with_devices
@pytest.mark.parametrize("seed", [2, 3])
def test_power_law_graph_matches_reference(seed, device):
    problem = Problem(seed, device, kind="power_law", num_facts=150, num_q=5, frontier_width=4)
    for p in (params(subgraph_size=30, bfs_depth=2), params(theta=0.05, bfs_depth=3, struct_depth=3)):
        check_against_reference(problem, run(problem, p), p)


@with_devices
def test_multi_hop_chain(device):
    problem = Problem(4, device)
    p = params(top_k=3)
    frontier = torch.full((6, 0), -1, dtype=torch.int64, device=device)
    for _ in range(3):
        out = hyperprove_hop(problem.graph, problem.facts, problem.queries, frontier, **p)
        problem.frontier = frontier
        check_against_reference(problem, out, p)
        frontier = out.frontier
    assert frontier.shape == (6, 9)
    for row in frontier.tolist():  # a fact is never selected twice
        ids = [h for h in row if h >= 0]
        assert len(ids) == len(set(ids))


@with_devices
@pytest.mark.parametrize("case", ["defaults", "threshold", "truncated_subgraph"])
def test_batched_equals_one_question_at_a_time(case, device):
    problem = Problem(5, device)
    p = params(**CASES[case])
    out = run(problem, p)
    for q in range(6):
        one = hyperprove_hop(problem.graph, problem.facts, problem.queries[q:q + 1], problem.frontier[q:q + 1], **p)
        torch.testing.assert_close(one.scores[0], out.scores[q], atol=1e-6, rtol=0)
        if torch.equal(one.subgraph[0].sort().values, out.subgraph[q].sort().values):
            assert_topk_equivalent(one.fact_ids[0], one.scores[0], dict(zip(out.fact_ids[q].tolist(),
                                                                            out.scores[q].tolist())), p["top_k"])


@with_devices
@pytest.mark.parametrize("chunk", [1, 2, 5, 17])
def test_chunk_size_invariance(chunk, device):
    problem = Problem(6, device, num_q=19, frontier_width=2)
    p = params()
    whole = run(problem, p)
    chunked = run(problem, p, query_chunk_size=chunk)
    for a, b in zip(whole, chunked):
        assert torch.equal(a, b) if a.dtype == torch.int64 else torch.allclose(a, b, atol=1e-6, rtol=0)


@with_devices
def test_memory_budget_sets_chunks(device):
    problem = Problem(6, device, num_q=9)
    whole = run(problem, params())
    tiny = run(problem, params(), memory_budget_mb=1)  # 1 MiB: a few questions per chunk
    torch.testing.assert_close(whole.scores, tiny.scores, atol=1e-6, rtol=0)


@with_devices
def test_empty_frontier_has_no_struct(device):
    problem = Problem(7, device)
    p = params(alpha=0.25)
    out = hyperprove_hop(problem.graph, problem.facts, problem.queries, None, **p)
    assert out.frontier.shape == (6, p["top_k"]) and (out.distance == -1).all()
    cos = DenseIndex(problem.facts).cosine(problem.queries, out.fact_ids)
    valid = out.fact_ids >= 0
    torch.testing.assert_close(out.scores[valid], 0.25 * cos[valid])
    problem.frontier = torch.full((6, 0), -1, dtype=torch.int64, device=device)
    check_against_reference(problem, out, p)


@with_devices
def test_isolated_seed_is_its_only_candidate(device):
    # fact 3 has no entity and its own passage: a seed without neighbours
    fe = torch.tensor([[0, 1, 2], [0, 0, 0]], device=device)
    g = HyperGraph.from_incidence(fe, torch.tensor([0, 0, 1, 2], device=device), 1, 3)
    facts = torch.eye(4, device=device)
    q = torch.tensor([[0.0, 0.0, 0.1, 1.0]], device=device)
    out = hyperprove_hop(g, facts, q, torch.tensor([[0]], device=device), num_seeds=1, top_k=3)
    assert out.fact_ids.tolist() == [[3, -1, -1]]
    assert out.distance.tolist() == [[-1, -1, -1]]  # frontier fact 0 is unreachable from fact 3
    torch.testing.assert_close(out.scores[0, 0], torch.tensor(0.7 * 1.0 / 1.0050, device=device), atol=1e-4, rtol=0)
    assert set(out.subgraph[0].tolist()) - {-1} == {0, 1, 2, 3}  # the walk from frontier fact 0 reaches 1, 2


@with_devices
def test_theta_above_every_transition_keeps_only_seeds(device):
    problem = Problem(8, device)
    p = params(theta=1.0)
    out = run(problem, p)
    for q in range(6):
        chosen = {h for h in out.fact_ids[q].tolist() if h >= 0}
        assert chosen <= {h for h in out.seeds[q].tolist() if h >= 0}
    check_against_reference(problem, out, p)


@with_devices
def test_depth_zero_candidates_are_seeds(device):
    problem = Problem(9, device)
    p = params(bfs_depth=0, top_k=6)
    out = run(problem, p)
    frontier = problem.frontier
    for q in range(6):
        seeds = {h for h in out.seeds[q].tolist() if h >= 0} - set(frontier[q].tolist())
        assert {h for h in out.fact_ids[q].tolist() if h >= 0} == seeds
    assert (out.distance == -1).all()  # struct_depth 0 = L = 0 rounds: nothing reaches the frontier
    check_against_reference(problem, out, p)


@with_devices
def test_reach_grows_with_depth(device):
    problem = Problem(10, device)
    sizes = []
    for depth in range(4):
        out = run(problem, params(bfs_depth=depth, top_k=40))
        sizes.append((out.fact_ids >= 0).sum(1))
    for a, b in zip(sizes, sizes[1:]):
        assert (a <= b).all()


@with_devices
def test_k_larger_than_candidates(device):
    problem = Problem(11, device)
    p = params(top_k=40, bfs_depth=1)
    out = run(problem, p)
    assert (out.fact_ids == -1).any()
    assert torch.isneginf(out.scores[out.fact_ids == -1]).all()
    check_against_reference(problem, out, p)
    # K larger than the subgraph: padded, not an error
    small = run(problem, params(top_k=12, subgraph_size=8))
    assert small.fact_ids.shape == (6, 12) and (small.fact_ids[:, 8:] == -1).all()


@with_devices
def test_single_question(device):
    problem = Problem(12, device, num_q=1)
    p = params()
    out = run(problem, p)
    assert out.fact_ids.shape == (1, 5)
    check_against_reference(problem, out, p)


@with_devices
def test_duplicate_seeds_count_once(device):
    problem = Problem(13, device)
    p = params()
    base = run(problem, p)
    seeds = base.seeds
    dup = torch.cat([seeds, seeds[:, :2], torch.full_like(seeds[:, :1], -1)], dim=1)
    again = run(problem, p, seeds=dup)
    torch.testing.assert_close(again.scores, base.scores, atol=1e-6, rtol=0)
    check_against_reference(problem, again, p, seeds=dup)
    # duplicate fact embeddings: tied cosines, tied seeds
    facts = problem.facts.clone()
    facts[1] = facts[0]
    problem.facts = facts
    out = run(problem, p)
    assert out.fact_ids.shape == (6, 5)
    check_against_reference(problem, out, p, seeds=out.seeds)


@with_devices
def test_masked_questions_pass_through(device):
    problem = Problem(14, device)
    p = params()
    active = torch.tensor([True, False, True, False, True, True], device=device)
    out = run(problem, p, active=active)
    full = run(problem, p)
    on = active.nonzero().squeeze(1)
    assert torch.equal(out.fact_ids[on], full.fact_ids[on])
    assert (out.fact_ids[~active] == -1).all() and torch.isneginf(out.scores[~active]).all()
    assert torch.equal(out.frontier[~active, :3], problem.frontier[~active])
    assert (out.frontier[~active, 3:] == -1).all() and (out.subgraph[~active] == -1).all()
    check_against_reference(problem, out, p, active=active)


@with_devices
def test_questions_without_seeds_or_frontier(device):
    problem = Problem(15, device, num_q=2)
    none = torch.full((2, 3), -1, dtype=torch.int64, device=device)
    out = hyperprove_hop(problem.graph, problem.facts, problem.queries, None, seeds=none, **params())
    assert (out.fact_ids == -1).all() and (out.subgraph == -1).all()


@with_devices
def test_zero_queries_and_low_precision(device):
    problem = Problem(16, device)
    out = hyperprove_hop(problem.graph, problem.facts, problem.queries[:0], problem.frontier[:0], **params())
    assert out.fact_ids.shape == (0, 5) and out.frontier.shape == (0, 8)
    half = hyperprove_hop(problem.graph, problem.facts.bfloat16(), problem.queries.bfloat16(), problem.frontier,
                          **params())
    assert half.scores.dtype == torch.float32
    problem.facts, problem.queries = problem.facts.bfloat16().float(), problem.queries.bfloat16().float()
    check_against_reference(problem, half, params())


@with_devices
def test_relabeling_facts_permutes_output(device):
    problem = Problem(17, device)
    p = params(theta=0.05)
    out = run(problem, p)
    fe, fp = problem.graph.fact_entity, problem.graph.fact_passage
    h = fp.numel()
    perm = torch.randperm(h, generator=torch.Generator().manual_seed(3)).to(device)  # new id i = old perm[i]
    inv = torch.argsort(perm)
    g2 = HyperGraph.from_incidence(torch.stack([inv[fe[0]], fe[1]]), fp[perm], problem.graph.num_entities,
                                   problem.graph.num_passages)
    fr = torch.where(problem.frontier >= 0, inv[problem.frontier.clamp(min=0)], -1)
    out2 = hyperprove_hop(g2, problem.facts[perm], problem.queries, fr, **p)
    torch.testing.assert_close(out2.scores, out.scores, atol=1e-6, rtol=0)
    mapped = torch.where(out2.fact_ids >= 0, perm[out2.fact_ids.clamp(min=0)], -1)
    for q in range(6):
        assert_topk_equivalent(mapped[q].cpu(), out2.scores[q].cpu(),
                               dict(zip(out.fact_ids[q].tolist(), out.scores[q].tolist())), p["top_k"])


@with_package("faiss")
def test_faiss_backends_match_exact():
    problem = Problem(18, "cpu", num_facts=120, kind="power_law")
    p = params()
    exact = run(problem, p)
    flat = run(problem, dict(p, seed_backend="faiss_flat"))
    torch.testing.assert_close(flat.scores, exact.scores, atol=1e-5, rtol=0)
    index = DenseIndex(problem.facts, backend="faiss_ivf", nlist=2, nprobe=2)  # every cell probed: exact
    ivf = run(problem, p, index=index)
    torch.testing.assert_close(ivf.scores, exact.scores, atol=1e-5, rtol=0)


def test_config_and_overrides():
    problem = Problem(19, "cpu")
    cfg = RetrievalConfig(**params())
    a = hyperprove_hop(problem.graph, problem.facts, problem.queries, problem.frontier, cfg=cfg)
    b = hyperprove_hop(problem.graph, problem.facts, problem.queries, problem.frontier,
                       cfg=dataclasses.replace(cfg, top_k=2))
    c = hyperprove_hop(problem.graph, problem.facts, problem.queries, problem.frontier, cfg=cfg, top_k=2)
    assert a.fact_ids.shape == (6, 5) and torch.equal(b.fact_ids, c.fact_ids)
    with pytest.raises(TypeError, match="topk"):
        hyperprove_hop(problem.graph, problem.facts, problem.queries, topk=3)
    with pytest.raises(ValueError, match="retrieval.alpha"):
        hyperprove_hop(problem.graph, problem.facts, problem.queries, alpha=1.5)
    with pytest.raises(ValueError, match="retrieval.theta"):
        hyperprove_hop(problem.graph, problem.facts, problem.queries, theta=-0.1)


def test_bad_inputs():
    problem = Problem(20, "cpu")
    g, f, q = problem.graph, problem.facts, problem.queries
    with pytest.raises(ValueError, match="H=40"):
        hyperprove_hop(g, f[:-1], q)
    with pytest.raises(ValueError, match="D=16"):
        hyperprove_hop(g, f, q[:, :-1])
    with pytest.raises(TypeError, match="int64"):
        hyperprove_hop(g, f, q, problem.frontier.int())
    with pytest.raises(ValueError, match=r"\[Q, n\]"):
        hyperprove_hop(g, f, q, problem.frontier[:2])
    with pytest.raises(ValueError, match="active"):
        hyperprove_hop(g, f, q, active=torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="fit in the subgraph"):
        hyperprove_hop(g, f, q, problem.frontier, subgraph_size=6, num_seeds=4)
    with pytest.raises(TypeError, match="floating point"):
        hyperprove_hop(g, f.long(), q)
    with pytest.raises(TypeError, match="HyperGraph"):
        hyperprove_hop(None, f, q)
    with pytest.raises(ValueError, match="index must hold"):
        hyperprove_hop(g, f, q, index=DenseIndex(f[:5]))
