import torch

from hpengine.pipeline._ranking import bridge_entities, compact, first_occurrence, rank_passages


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
