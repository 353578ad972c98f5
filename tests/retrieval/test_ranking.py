import itertools

import pytest
import torch

from hpengine.retrieval._ranking import (
    bridge_entities,
    compact,
    first_occurrence,
    lead_passages,
    linked_bridges,
    rank_passages,
)


def reference_first_occurrence(row):
    seen, out = set(), []
    for x in row:
        out.append(x >= 0 and x not in seen)
        if x >= 0:
            seen.add(x)
    return out


def test_first_occurrence_matches_python():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(-1, 6, (7, 13), generator=g)
    mask = first_occurrence(ids)
    for row, m in zip(ids.tolist(), mask.tolist()):
        assert m == reference_first_occurrence(row)


def test_compact_and_rank_passages():
    ids = torch.tensor([[4, -1, 2, 9]])
    assert compact(ids, ids >= 0, 5).tolist() == [[4, 2, 9, -1, -1]]
    # facts 0..5 in passages; chain order: facts 3, 1, 0 (passages 2, 1, 1); dense: 7, 2, 5
    fact_passage = torch.tensor([1, 1, 0, 2, 3, 3])
    chain = torch.tensor([[3, 1, 0, -1], [-1, -1, -1, -1]])
    dense = torch.tensor([[7, 2, 5], [5, 5, 0]])
    ranked = rank_passages(chain, fact_passage, dense, 4)
    assert ranked.tolist() == [[2, 1, 7, 5], [5, 0, -1, -1]]


def reference_lead_passages(lead_facts, fact_passage, ranked, count):
    lead = []
    for f in lead_facts:
        if f >= 0 and fact_passage[f] not in lead and len(lead) < count:
            lead.append(fact_passage[f])
    out = []
    for x in lead + ranked:
        if x >= 0 and x not in out:
            out.append(x)
    return (out + [-1] * len(ranked))[: len(ranked)]


@pytest.mark.parametrize("count", [0, 1, 2, 5])
def test_lead_passages_matches_python(count):
    g = torch.Generator().manual_seed(count)
    fact_passage = torch.randint(0, 6, (20,), generator=g)
    lead_facts = torch.randint(-1, 20, (9, 4), generator=g)
    ranked = torch.randint(-1, 6, (9, 5), generator=g)
    ranked = compact(ranked, first_occurrence(ranked), 5)  # a ranking has no repeats
    out = lead_passages(lead_facts, fact_passage, ranked, count)
    for i in range(9):
        assert out[i].tolist() == reference_lead_passages(lead_facts[i].tolist(), fact_passage.tolist(),
                                                          ranked[i].tolist(), count)
    assert torch.equal(lead_passages(lead_facts[:3], fact_passage, ranked[:3], count), out[:3])  # batched = subset


def test_bridge_entities_by_support_with_exclusions():
    # CSR of facts -> entities: f0 {0,1}, f1 {1}, f2 {0,2}
    crow, col = torch.tensor([0, 2, 3, 5]), torch.tensor([0, 1, 1, 0, 2])
    fact_ids = torch.tensor([[0, 2], [1, -1], [-1, -1]])
    scores = torch.tensor([[0.5, 0.4], [0.3, 0.0], [0.0, 0.0]])
    excluded = torch.tensor([[0], [0]])  # question 0 names entity 0
    ent, support = bridge_entities(fact_ids, scores, crow, col, excluded, 3)
    assert ent.tolist() == [1, 1, -1]
    torch.testing.assert_close(support, torch.tensor([0.5 + 1e-6, 0.3 + 1e-6, 0.0]))
    # without exclusion, entity 0 has support 0.9 in question 0
    ent, _ = bridge_entities(fact_ids, scores, crow, col, torch.zeros(2, 0, dtype=torch.long), 3)
    assert ent.tolist() == [0, 1, -1]


def test_bridge_entities_max_reduce_and_weights():
    crow, col = torch.tensor([0, 2, 3, 5]), torch.tensor([0, 1, 1, 0, 2])
    fact_ids = torch.tensor([[0, 1, 2]])
    scores = torch.tensor([[0.5, 0.45, 0.4]])
    none = torch.zeros(2, 0, dtype=torch.long)
    # sum: entity 0 (0.9) and 1 (0.95); max: entity 0 (0.5) and 1 (0.5) tie -> lowest id
    assert bridge_entities(fact_ids, scores, crow, col, none, 3)[0].tolist() == [1]
    assert bridge_entities(fact_ids, scores, crow, col, none, 3, reduce="max")[0].tolist() == [0]
    # a zero weight bars an entity
    weight = torch.tensor([0.0, 1.0, 1.0])
    assert bridge_entities(fact_ids, scores, crow, col, none, 3, weight, reduce="max")[0].tolist() == [1]


def reference_linked_bridges(fact_ids, scores, incidence, excluded, homes, query_emb, passage_emb, weight, b):
    """Per question, obviously: support sums, best home by cosine, sort by (value desc, entity id)."""
    out = []
    for qi, (row, srow) in enumerate(zip(fact_ids.tolist(), scores.tolist())):
        support = {}
        for f, s in zip(row, srow):
            if f < 0:
                continue
            for e in incidence[f]:
                support[e] = support.get(e, 0.0) + (max(s, 0.0) + 1e-6) * float(weight[e])
        cands = []
        for e, sup in support.items():
            if sup <= 0 or (qi, e) in excluded:
                continue
            if homes[e]:
                cos = [float(query_emb[qi].double() @ passage_emb[p].double()) for p in homes[e]]
                best = max(cos)
                home = min(p for p, c in zip(homes[e], cos) if c == best)
                cands.append((-(2.0 + best), e, home))
            else:
                cands.append((-(sup / (1.0 + sup)), e, -1))
        cands.sort()
        out.append([(e, h, -v) for v, e, h in cands[:b]])
    return out


@pytest.mark.parametrize("seed", range(6))
def test_linked_bridges_matches_reference(seed):
    g = torch.Generator().manual_seed(seed)
    h, v, p, q, k, d, b = 30, 12, 9, 5, 4, 8, 3
    incidence = [sorted(set(torch.randint(0, v, (int(torch.randint(0, 4, (1,), generator=g)),), generator=g).tolist()))
                 for _ in range(h)]
    crow = torch.tensor([0] + list(itertools.accumulate(len(r) for r in incidence)))
    col = torch.tensor([e for r in incidence for e in r], dtype=torch.long)
    title = torch.randint(-1, v, (p,), generator=g)  # passage -> entity it is titled with (-1: none)
    homes = [[i for i in range(p) if title[i] == e] for e in range(v)]
    hcrow = torch.tensor([0] + list(itertools.accumulate(len(r) for r in homes)))
    hcol = torch.tensor([i for r in homes for i in r], dtype=torch.long)
    fact_ids = torch.randint(-1, h, (q, k), generator=g)
    scores = torch.rand(q, k, generator=g) - 0.2
    query_emb = torch.nn.functional.normalize(torch.randn(q, d, generator=g), dim=1)
    passage_emb = torch.nn.functional.normalize(torch.randn(p, d, generator=g), dim=1)
    weight = (torch.rand(v, generator=g) > 0.2).float()
    excluded = {(int(a), int(c)) for a, c in zip(torch.randint(0, q, (6,), generator=g), torch.randint(0, v, (6,), generator=g))}
    exc = torch.tensor(sorted(excluded), dtype=torch.long).t()
    ent, home, value = linked_bridges(fact_ids, scores, crow, col, exc, v, b, home_crow=hcrow, home_col=hcol,
                                      query_emb=query_emb, passage_emb=passage_emb, entity_weight=weight)
    ref = reference_linked_bridges(fact_ids, scores, incidence, excluded, homes, query_emb, passage_emb, weight, b)
    for qi, expect in enumerate(ref):
        n = len(expect)
        assert ent[qi, :n].tolist() == [e for e, _, _ in expect]
        assert home[qi, :n].tolist() == [hh for _, hh, _ in expect]
        torch.testing.assert_close(value[qi, :n].double(), torch.tensor([x for _, _, x in expect], dtype=torch.float64),
                                   atol=1e-5, rtol=0)
        assert (ent[qi, n:] == -1).all() and (home[qi, n:] == -1).all()


def test_linked_bridges_batched_equals_one_by_one():
    crow, col = torch.tensor([0, 2, 3, 5]), torch.tensor([0, 1, 1, 0, 2])
    hcrow, hcol = torch.tensor([0, 1, 1, 3]), torch.tensor([0, 1, 2])  # entity 0 -> passage 0, entity 2 -> 1, 2
    fact_ids = torch.tensor([[0, 2], [1, -1], [2, 0]])
    scores = torch.tensor([[0.5, 0.4], [0.3, 0.0], [0.2, 0.1]])
    query_emb = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), dim=1)
    passage_emb = torch.nn.functional.normalize(torch.tensor([[1.0, 0.2], [0.1, 1.0], [1.0, 0.9]]), dim=1)
    none = torch.zeros(2, 0, dtype=torch.long)
    kw = dict(home_crow=hcrow, home_col=hcol, passage_emb=passage_emb)
    together = linked_bridges(fact_ids, scores, crow, col, none, 3, 2, query_emb=query_emb, **kw)
    for i in range(3):
        alone = linked_bridges(fact_ids[i:i + 1], scores[i:i + 1], crow, col, none, 3, 2, query_emb=query_emb[i:i + 1], **kw)
        for a, t in zip(alone, together):
            assert torch.equal(a[0], t[i])
    # question 0: entity 0 (home 0, cos 0.98) beats entity 2 (best home 2, cos 0.74); entity 1 has no home
    assert together[0][0].tolist() == [0, 2] and together[1][0].tolist() == [0, 2]


def test_rank_passages_links_each_hop():
    fact_passage = torch.tensor([1, 1, 0, 2, 3, 3])
    chain = torch.tensor([[3, 1, 0, 4]])  # two hops of K = 2: passages 2, 1 | 1, 3
    linked = torch.tensor([[5, -1, 1, 6]])  # B = 2: hop 1 links 5, hop 2 links 1 (seen) and 6
    dense = torch.tensor([[7, 2, 8]])
    assert rank_passages(chain, fact_passage, dense, 8, facts_per_hop=2, linked=linked).tolist() == [[2, 1, 5, 3, 6, 7, 8, -1]]
    with pytest.raises(ValueError, match="facts_per_hop"):
        rank_passages(chain, fact_passage, dense, 8, linked=linked)


def test_best_home_without_embeddings_and_without_homes():
    from hpengine.retrieval._ranking import best_home

    hcrow, hcol = torch.tensor([0, 2, 2]), torch.tensor([4, 1])  # entity 0 titles passages 4 and 1; entity 1 none
    q_emb = torch.ones(1, 2)
    home, cos = best_home(torch.tensor([0, 0, 0]), torch.tensor([0, 1, -1]), hcrow, hcol, q_emb, None)
    assert home.tolist() == [1, -1, -1]  # equal scores: lowest passage id
    assert cos[0].item() == 0.0 and torch.isinf(cos[1:]).all()
