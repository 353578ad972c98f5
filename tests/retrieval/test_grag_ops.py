"""GRAG-MH retrieval ops (hpengine/retrieval/_grag.py) against their per-question references in
hpengine.testing.reference (networkx shortest paths, explicit decay / threshold / greedy diversity loops)."""
import math
import random

import pytest
import torch

from hpengine.retrieval import (add_dense_candidates, best_fact_scores, blended_passage_scores, candidate_passages,
                                candidate_support, decayed_expansion, diverse_ranking, diverse_rerank, graph_bonus,
                                grag_seeds, mix_cross_encoder_scores, rerank_candidates)
from hpengine.testing import with_devices
from hpengine.testing.reference import (reference_best_fact_scores, reference_candidate_support,
                                        reference_diverse_rerank, reference_grag_expansion, reference_grag_seeds,
                                        reference_passage_scores, reference_rerank_scores)


def _unit(g, *shape):
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g), dim=-1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decayed_expansion_matches_networkx_on_random_graphs(seed):
    rng = random.Random(seed)
    n, q, s = 40, 5, 3
    edges = {(min(a, b), max(a, b)) for a, b in ((rng.randrange(n), rng.randrange(n)) for _ in range(70)) if a != b}
    rows = [a for a, b in edges] + [b for a, b in edges]
    cols = [b for a, b in edges] + [a for a, b in edges]
    adj = torch.sparse_coo_tensor(torch.tensor([rows, cols]), torch.ones(len(rows)), (n, n), check_invariants=True).coalesce().to_sparse_csr()
    scores = torch.rand(q, n, generator=torch.Generator().manual_seed(seed))
    seeds = torch.tensor([[rng.randrange(n) for _ in range(s)] for _ in range(q)])
    seeds[0, 2] = -1
    for hops, decay, tau, over_seed in ((3, 0.5, 0.6, False), (3, 0.5, 0.6, True), (1, 0.2, 0.3, False),
                                        (2, 1.0, 0.0, True)):
        kept, best = decayed_expansion(adj, seeds, scores, hops=hops, decay=decay, threshold=tau, query_chunk_size=2,
                                       max_over_seed=over_seed)
        for i in range(q):
            ref = reference_grag_expansion(edges, n, seeds[i].tolist(), scores[i].tolist(), hops, decay, tau, over_seed)
            assert set(torch.nonzero(kept[i]).flatten().tolist()) == set(ref)
            for v, x in ref.items():
                assert best[i, v].item() == pytest.approx(x, abs=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_candidate_support_matches_loops(seed):
    g = torch.Generator().manual_seed(seed)
    q, n, p = 4, 12, 9
    node_passages = [sorted(set(torch.randint(0, p, (int(torch.randint(0, 4, (1,), generator=g)),),
                                              generator=g).tolist())) for _ in range(n)]
    crow = torch.tensor([0] + [len(x) for x in node_passages]).cumsum(0)
    col = torch.tensor([c for x in node_passages for c in x], dtype=torch.int64)
    kept = torch.rand(q, n, generator=g) < 0.4
    scores = torch.where(kept, torch.rand(q, n, generator=g), torch.zeros(q, n))
    got = candidate_support(kept, scores, crow, col, p)
    assert torch.equal(torch.isfinite(got), candidate_passages(kept, crow, col, p))
    for i in range(q):
        ref = reference_candidate_support({v: scores[i, v].item() for v in range(n) if kept[i, v]}, node_passages, p)
        assert got[i].tolist() == pytest.approx(ref, abs=1e-7)


@pytest.mark.parametrize("seed", [0, 1])
def test_best_fact_scores_match_loops_at_every_chunk_size(seed):
    g = torch.Generator().manual_seed(seed)
    q, h, p, d = 5, 30, 12, 8
    query, facts = _unit(g, q, d), _unit(g, h, d)
    owner = torch.randint(0, p - 2, (h,), generator=g)  # the last two passages have no fact
    ref = [reference_best_fact_scores(query[i].tolist(), facts.tolist(), owner.tolist(), p) for i in range(q)]
    for chunk in (1, 2, 32):
        got = best_fact_scores(query, facts, owner, p, query_chunk_size=chunk)
        assert got.shape == (q, p) and got.dtype == torch.float32
        for i in range(q):
            assert got[i].tolist() == pytest.approx(ref[i], abs=1e-6)
    with pytest.raises(ValueError, match="fact_passage"):
        best_fact_scores(query, facts, owner[:-1], p)


def test_diverse_rerank_matches_greedy_loops():
    g = torch.Generator().manual_seed(3)
    q, c, d = 4, 9, 6
    emb = _unit(g, q, c, d)
    scores = torch.rand(q, c, generator=g)
    scores[1, 5:] = -math.inf
    order, vals = diverse_rerank(scores, emb, diversity=0.5, k=7)
    for i in range(q):
        ids, ref = reference_diverse_rerank(scores[i].tolist(), emb[i].tolist(), 0.5, 7)
        assert order[i, : len(ids)].tolist() == ids and bool((order[i, len(ids):] == -1).all())
        assert vals[i, : len(ids)].tolist() == pytest.approx(ref, abs=1e-5)


def test_grag_seeds_match_sorted_cosines():
    g = torch.Generator().manual_seed(4)
    q, n, d = 3, 10, 6
    query, nodes = _unit(g, q, d), _unit(g, n, d)
    is_graph = torch.rand(n, generator=g) < 0.5
    is_graph[:2] = True
    for k in (2, 4, 20):
        seeds, scores = grag_seeds(query, nodes, is_graph, num_seeds=k)
        assert seeds.shape == (q, min(k, n))
        for i in range(q):
            ref, ref_scores = reference_grag_seeds(query[i], nodes, is_graph.tolist(), k)
            assert [s for s in seeds[i].tolist() if s >= 0] == ref
            assert scores[i].tolist() == pytest.approx(ref_scores, abs=1e-6)


@pytest.mark.parametrize("w", [0.0, 0.3, 1.0])
def test_blended_passage_scores_match_loops(w):
    g = torch.Generator().manual_seed(5)
    q, h, p, d = 4, 20, 8, 6
    query, passages, facts = _unit(g, q, d), _unit(g, p, d), _unit(g, h, d)
    owner = torch.randint(0, p - 1, (h,), generator=g)  # the last passage has no fact
    got = blended_passage_scores(query, passages, facts, owner, fact_weight=w, query_chunk_size=3)
    for i in range(q):
        assert got[i].tolist() == pytest.approx(reference_passage_scores(query[i], passages, facts, owner, w), abs=1e-6)


def test_rerank_candidates_and_cross_encoder_mix_match_loops():
    g = torch.Generator().manual_seed(6)
    q, p = 4, 12
    cos = torch.rand(q, p, generator=g)
    support = torch.where(torch.rand(q, p, generator=g) < 0.5, torch.rand(q, p, generator=g), torch.full((q, p), -math.inf))
    support[2] = -math.inf  # a question with no candidate
    support[3, :3] = 0.0  # dense candidates without graph support
    support, dense = add_dense_candidates(support, cos, dense_candidates=2, width=5)
    assert dense.shape == (q, 5) and bool((support.gather(1, dense[:, :2]) >= 0).all())
    bonus = graph_bonus(cos, support, graph_weight=0.4)
    assert bool((bonus[~torch.isfinite(support)] == 0).all())
    ids, score = rerank_candidates(cos, support, graph_weight=0.4, num_candidates=6)
    logits = torch.randn(int((ids >= 0).sum()), generator=g)
    ce_ids, ce_score = mix_cross_encoder_scores(ids, logits, support, graph_weight=0.4)
    sig = iter(torch.sigmoid(logits).tolist())
    for i in range(q):
        sup = {c: support[i, c].item() for c in range(p) if math.isfinite(support[i, c].item())}
        ref = reference_rerank_scores(dict(enumerate(cos[i].tolist())), sup, 0.4)
        top = sorted(ref, key=lambda c: -ref[c])[:6]
        got = [c for c in ids[i].tolist() if c >= 0]
        assert len(got) == len(top) and score[i, : len(got)].tolist() == pytest.approx([ref[c] for c in top], abs=1e-6)
        assert all(ref[c] == pytest.approx(ref[t], abs=1e-6) for c, t in zip(got, top))
        base = {c: next(sig) for c in got}
        mixed = reference_rerank_scores(base, {c: sup[c] for c in got}, 0.4)
        order = sorted(got, key=lambda c: -mixed[c])
        assert [c for c in ce_ids[i].tolist() if c >= 0] == order
        assert ce_score[i, : len(order)].tolist() == pytest.approx([mixed[c] for c in order], abs=1e-6)


def test_diverse_ranking_leads_with_the_diverse_order_then_fills_from_dense():
    g = torch.Generator().manual_seed(7)
    q, c, p, d, width = 3, 5, 10, 4, 7
    emb = _unit(g, p, d)
    ids = torch.stack([torch.randperm(p, generator=g)[:c] for _ in range(q)])
    scores = torch.rand(q, c, generator=g)
    ids[1, 3:], scores[1, 3:] = -1, -math.inf
    dense = torch.stack([torch.randperm(p, generator=g) for _ in range(q)])
    ranked, out = diverse_ranking(ids, scores, emb, dense, diversity=0.3, width=width)
    assert ranked.shape == out.shape == (q, width)
    for i in range(q):
        row = [x for x in ids[i].tolist() if x >= 0]
        picks, vals = reference_diverse_rerank(scores[i, : len(row)].tolist(), emb[row].tolist(), 0.3, width)
        chosen = [row[j] for j in picks]
        assert ranked[i].tolist() == (chosen + [x for x in dense[i].tolist() if x not in chosen])[:width]
        assert out[i].tolist() == pytest.approx(vals + [0.0] * (width - len(vals)), abs=1e-5)


@with_devices
def test_decayed_expansion_and_support_on_device_equal_cpu(device):
    g = torch.Generator().manual_seed(5)
    n, q, s, p = 60, 6, 4, 30
    a = (torch.rand(n, n, generator=g) < 0.06).float()
    a = ((a + a.t()) > 0).float().fill_diagonal_(0)
    scores = torch.rand(q, n, generator=g)
    seeds = torch.randint(0, n, (q, s), generator=g)
    crow = torch.arange(0, 2 * n + 1, 2)
    col = torch.randint(0, p, (2 * n,), generator=g)
    col = torch.stack([col.view(n, 2).min(1).values, col.view(n, 2).max(1).values], 1).view(-1)
    facts, owner = torch.rand(2 * n, n, generator=g), torch.randint(0, p, (2 * n,), generator=g)
    out = {}
    for dev in ("cpu", device):
        adj = a.to(dev).to_sparse_csr()
        kept, sc = decayed_expansion(adj, seeds.to(dev), scores.to(dev), hops=3, decay=0.5, threshold=0.6,
                                     query_chunk_size=4)
        sup = candidate_support(kept, sc, crow.to(dev), col.to(dev), p)
        best = best_fact_scores(scores.to(dev), facts.to(dev), owner.to(dev), p, query_chunk_size=4)
        out[dev] = (kept.cpu(), sc.cpu(), sup.cpu(), best.cpu())
    assert torch.equal(out["cpu"][0], out[device][0])
    assert torch.allclose(out["cpu"][1], out[device][1], atol=1e-6)
    assert torch.allclose(out["cpu"][2], out[device][2], atol=1e-6)
    assert torch.allclose(out["cpu"][3], out[device][3], atol=1e-5)
