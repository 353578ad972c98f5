import torch

from hpengine.graph import HyperGraph
from hpengine.testing._graphs import power_law_hypergraph, random_hypergraph, zipf_fact_hypergraph


def test_power_law_hypergraph_shape_and_tail():
    fe, fp, v, p = power_law_hypergraph(20_000, seed=1)
    g = HyperGraph.from_incidence(fe, fp, v, p).validate()
    assert g.num_facts == 20_000 and fp.min() == 0 and fp.max() == p - 1
    assert torch.all(fp[1:] >= fp[:-1])  # passages are runs of consecutive facts
    sizes = torch.bincount(fp, minlength=p).float()
    assert 4.5 < sizes.mean() < 7.5
    deg = g.entity_degree()
    pool = deg[p:]  # titles first, then the Zipf pool
    assert pool.max() > 50 * pool[pool > 0].median()  # heavy tail: hubs
    assert (deg[:p] <= sizes).all()  # a title is only mentioned inside its own passage
    again = power_law_hypergraph(20_000, seed=1)
    assert torch.equal(again[0], fe) and torch.equal(again[1], fp)


def test_random_hypergraph_has_an_isolated_fact():
    fe, fp, v, p = random_hypergraph(0)
    t = HyperGraph.from_incidence(fe, fp, v, p).transition().to_dense()
    assert (t[-1] == 0).all()


def test_zipf_fact_hypergraph_has_0_to_4_entities_per_fact_and_hubs():
    fe, fp, v, p = zipf_fact_hypergraph(20_000, seed=3)
    g = HyperGraph.from_incidence(fe, fp, v, p).validate()
    assert torch.equal(g.fact_entity, fe)  # already unique and sorted
    per_fact = torch.bincount(fe[0], minlength=20_000)
    counts = torch.bincount(per_fact, minlength=5)
    assert per_fact.max() <= 4 and counts.numel() == 5 and (counts > 3_000).all()  # every count 0..4 is common
    assert v == 6_000 and torch.all(fp[1:] >= fp[:-1]) and fp.max() == p - 1
    assert 4.5 < torch.bincount(fp, minlength=p).float().mean() < 7.5
    deg = g.entity_degree()
    assert deg.max() > 50 * deg[deg > 0].float().median()  # Zipf 0.7: hubs
    again = zipf_fact_hypergraph(20_000, seed=3)
    assert torch.equal(again[0], fe) and torch.equal(again[1], fp)
