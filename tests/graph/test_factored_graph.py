"""A graph kept factored (extracted pairs and synonym pairs) equals the graph over the
materialised expansion: operator, degrees, local blocks, walk, PPR and its gradient, the hop,
entity-passage counts, and the nn modules built on it."""
import pytest
import torch

from hpengine.graph import HyperGraph, expand_with_synonyms, symmetrize_pairs
from hpengine.retrieval import hyperprove_hop, personalized_pagerank, walk_visits
from hpengine.testing import with_devices
from hpengine.testing._graphs import random_hypergraph


def pair_of_graphs(seed: int, device="cpu", *, num_facts=40, num_entities=15, synonyms=12, one_sided=False):
    """(materialised, factored) graphs over one random hypergraph and random synonym pairs."""
    fe, fp, v, p = random_hypergraph(seed, num_facts=num_facts, num_entities=num_entities)
    g = torch.Generator().manual_seed(500 + seed)
    syn = torch.randint(0, v, (2, synonyms), generator=g)
    syn = syn[:, syn[0] != syn[1]]
    if not one_sided:
        syn = symmetrize_pairs(syn)
    fe, fp, syn = fe.to(device), fp.to(device), syn.to(device)
    raw = HyperGraph.from_incidence(fe, fp, v, p).raw_fact_entity
    expanded = expand_with_synonyms(raw, syn, fp.numel(), v)
    return (HyperGraph.from_incidence(expanded, fp, v, p, coalesced=True),
            HyperGraph.from_incidence(fe, fp, v, p, synonyms=syn, factored=True))


@pytest.mark.parametrize("one_sided", [False, True])
@pytest.mark.parametrize("seed", range(5))
@with_devices
def test_factored_operator_equals_the_materialised_one(seed, one_sided, device):
    mat, fac = pair_of_graphs(seed, device, one_sided=one_sided)
    assert fac.factored and not mat.factored
    assert fac.nnz == mat.nnz and torch.equal(fac.fact_entity, mat.fact_entity)
    assert torch.equal(fac.entity_degree(torch.float64), mat.entity_degree(torch.float64))
    a, b = mat.transition(torch.float64), fac.transition(torch.float64)
    assert b.factored and b.nnz == a.nnz
    for name in ("column_degree", "inv_degree", "fact_degree"):
        assert torch.equal(getattr(b, name), getattr(a, name)), name
    torch.testing.assert_close(b.diag, a.diag)
    torch.testing.assert_close(b.row_sum, a.row_sum)
    torch.testing.assert_close(b.to_dense(), a.to_dense())
    torch.testing.assert_close(b.t().to_dense(), a.t().to_dense())
    rows = torch.sum(b.to_dense(), 1)
    assert torch.all(((rows - 1).abs() < 1e-12) | (rows == 0))


@pytest.mark.parametrize("seed", range(4))
@with_devices
def test_local_blocks_and_walk_of_a_factored_graph(seed, device):
    mat, fac = pair_of_graphs(seed, device)
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(-1, mat.num_facts, (5, 9), generator=g).to(device)
    idx[0, 1] = idx[0, 0]  # a repeated fact
    for transposed in (False, True):
        a, b = mat.transition(torch.float64), fac.transition(torch.float64)
        if transposed:
            a, b = a.t(), b.t()
        torch.testing.assert_close(b.local_blocks(idx), a.local_blocks(idx))
        torch.testing.assert_close(b.local_blocks(idx, max_pairs=7), a.local_blocks(idx))
    ids = torch.randint(0, mat.num_facts, (4, 3), generator=g).to(device)
    mass = torch.rand(4, 3, generator=g).to(device)
    for steps in (1, 3):
        torch.testing.assert_close(walk_visits(fac.transition(), ids, mass, walk_steps=steps, restart=0.3),
                                   walk_visits(mat.transition(), ids, mass, walk_steps=steps, restart=0.3))


@pytest.mark.parametrize("method", ["chebyshev", "power"])
@pytest.mark.parametrize("seed", range(3))
@with_devices
def test_ppr_and_its_gradient_on_a_factored_graph(seed, method, device):
    mat, fac = pair_of_graphs(seed, device)
    n = mat.num_entities + mat.num_facts + mat.num_passages
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, n, (6, 4), generator=g).to(device)
    outs, grads = [], []
    for graph in (mat, fac):
        mass = torch.rand(6, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(device)
        mass.requires_grad_(True)
        out = personalized_pagerank(graph, (ids, mass), tol=1e-13, method=method,
                                    nodes=slice(mat.num_entities, n))
        (out * torch.arange(out.shape[1], device=device)).sum().backward()
        outs.append(out.detach())
        grads.append(mass.grad)
    torch.testing.assert_close(outs[1], outs[0])
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("seed", range(3))
def test_hop_on_a_factored_graph(seed):
    mat, fac = pair_of_graphs(seed, num_facts=60)
    g = torch.Generator().manual_seed(seed)
    facts = torch.randn(mat.num_facts, 16, generator=g)
    queries = torch.randn(5, 16, generator=g)
    frontier = torch.randint(-1, mat.num_facts, (5, 3), generator=g)
    a = hyperprove_hop(mat, facts, queries, frontier, top_k=8, subgraph_size=24)
    b = hyperprove_hop(fac, facts, queries, frontier, top_k=8, subgraph_size=24)
    torch.testing.assert_close(b.scores, a.scores)
    same = torch.isclose(a.scores[:, 1:], a.scores[:, :-1])  # ids may swap only among tied scores
    assert torch.equal(b.fact_ids[:, :1], a.fact_ids[:, :1]) or bool(same[:, 0].any())
    assert torch.equal(torch.sort(b.subgraph, 1).values, torch.sort(a.subgraph, 1).values)


@pytest.mark.parametrize("seed", range(4))
def test_entity_passage_count_of_a_factored_graph(seed):
    mat, fac = pair_of_graphs(seed)
    want = mat.entity_passage_count()
    for chunk in (1, 3, 1 << 24):
        assert torch.equal(fac.entity_passage_count(chunk), want)


def test_factored_graph_moves_and_validates():
    mat, fac = pair_of_graphs(0)
    assert fac.to("cpu") is fac
    fac.validate()
    assert "factored=True" in repr(fac)
    with pytest.raises(ValueError, match="synonym entity ids"):
        HyperGraph.from_incidence(fac.raw_fact_entity, fac.fact_passage, fac.num_entities, fac.num_passages,
                                  synonyms=torch.tensor([[0], [fac.num_entities]]))


def test_nn_ppr_module_keeps_a_factored_graph():
    from hpengine.nn import DifferentiablePPR

    mat, fac = pair_of_graphs(1)
    emb = torch.randn(mat.num_entities, 8, generator=torch.Generator().manual_seed(0))
    q = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    a, b = DifferentiablePPR(mat, emb, 3), DifferentiablePPR(fac, emb, 3)
    assert b.synonyms is not None and b.graph.factored
    torch.testing.assert_close(b(q), a(q))


@pytest.mark.parametrize("seed", range(3))
def test_by_size_the_operator_keeps_factors_only_when_they_are_smaller(seed):
    """``factored=None``: the factors when their entries are at most FACTORED_MAX_RATIO of the
    expansion's, else the expansion materialised from them; the operator is the same either way."""
    from hpengine.graph._hypergraph import FACTORED_MAX_RATIO

    mat, fac = pair_of_graphs(seed, synonyms=4)
    auto = HyperGraph.from_incidence(fac.raw_fact_entity, fac.fact_passage, fac.num_entities, fac.num_passages,
                                     synonyms=fac.synonyms)
    forced = HyperGraph.from_incidence(fac.raw_fact_entity, fac.fact_passage, fac.num_entities, fac.num_passages,
                                       synonyms=fac.synonyms, factored=False)
    b = fac.transition().b
    entries = b.outer._nnz() + b.inner._nnz()  # the estimate leaves out the excess, and counts it in B
    ratio = entries / (fac.transition().nnz + int(b.minus.values().sum()))
    assert auto.transition().factored == (ratio <= FACTORED_MAX_RATIO) and not forced.transition().factored
    for g in (auto, forced):
        torch.testing.assert_close(g.transition(torch.float64).to_dense(), mat.transition(torch.float64).to_dense())
        assert g.nnz == mat.nnz and torch.equal(g.entity_passage_count(), mat.entity_passage_count())
        assert torch.equal(g.entity_degree(), mat.entity_degree())


def test_a_hub_with_many_synonyms_keeps_the_factors():
    """Facts on a name with many synonyms: the expansion is much larger than its factors."""
    h, v = 200, 60
    facts = torch.arange(h)
    fe = torch.stack([facts, facts % 3])  # every fact names one of three hubs
    syn = torch.stack([torch.zeros(v - 3, dtype=torch.int64), torch.arange(3, v)])  # hub 0 ~ 57 names
    from hpengine.graph import symmetrize_pairs

    g = HyperGraph.from_incidence(fe, facts // 4, v, h // 4, synonyms=symmetrize_pairs(syn))
    assert g.transition().factored
