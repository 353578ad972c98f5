"""Key sorts (``hpengine.sparse.sort_keys``, ``unique_keys``) against ``torch.sort``/``torch.unique``,
``sorted_contains`` against ``torch.isin``,
and the sort-free augmented incidence against a per-fact reference."""
import pytest
import torch

from hpengine.sparse import augmented_incidence, sort_keys, sorted_contains, unique_keys
from hpengine.testing import with_devices


@with_devices
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("n", [0, 1, 2, 1000])
def test_sort_and_unique_equal_torch(n, dtype, device):
    gen = torch.Generator().manual_seed(n)
    keys = torch.randint(0, max(n // 3, 1), (n,), generator=gen).to(dtype).to(device)
    before = keys.clone()
    assert torch.equal(sort_keys(keys), torch.sort(keys).values)
    assert torch.equal(keys, before)  # not in place unless asked
    assert torch.equal(unique_keys(keys), torch.unique(keys, sorted=True))
    out = sort_keys(keys, inplace=True)
    assert out.data_ptr() == keys.data_ptr() and torch.equal(out, torch.sort(before).values)


@with_devices
@pytest.mark.parametrize("n", [0, 1, 50])
def test_sorted_contains_equals_isin(n, device):
    gen = torch.Generator().manual_seed(n)
    keys = unique_keys(torch.randint(-20, 20, (n,), generator=gen)).to(device)
    probe = torch.randint(-25, 25, (6, 7), generator=gen).to(device)  # below, between and above the keys
    got = sorted_contains(keys, probe)
    assert got.shape == probe.shape and torch.equal(got, torch.isin(probe, keys))


def test_strided_input_and_errors():
    keys = torch.tensor([5, 0, 3, 0, 1, 0, 3, 0])[::2]  # [5, 3, 1, 3], a view with stride 2
    assert sort_keys(keys).tolist() == [1, 3, 3, 5]
    assert unique_keys(keys).tolist() == [1, 3, 5]
    assert sort_keys(keys, inplace=True).tolist() == [1, 3, 3, 5] and keys.tolist() == [1, 3, 3, 5]
    with pytest.raises(TypeError, match="1-D integer"):
        sort_keys(torch.rand(3))
    with pytest.raises(TypeError, match="1-D integer"):
        sort_keys(torch.zeros(2, 2, dtype=torch.long))


def _augmented_reference(fact_entity, fact_passage, num_entities):
    rows = [[] for _ in range(fact_passage.numel())]
    for f, e in fact_entity.t().tolist():  # a fact's entities in the given order
        rows[f].append(e)
    return [[f, c] for f in range(len(rows)) for c in rows[f] + [int(fact_passage[f]) + num_entities]]


@pytest.mark.parametrize("seed", range(4))
def test_augmented_incidence_equals_per_fact_reference(seed):
    gen = torch.Generator().manual_seed(seed)
    num_facts, num_entities = 12, 9
    fe = torch.unique(torch.randint(0, num_facts * num_entities, (30,), generator=gen))
    fe = torch.stack([fe // num_entities, fe % num_entities])  # coalesced: sorted by fact then entity
    fp = torch.randint(0, 5, (num_facts,), generator=gen)
    got = augmented_incidence(fe, fp, num_entities)
    assert got.t().tolist() == _augmented_reference(fe, fp, num_entities)
    shuffled = fe[:, torch.randperm(fe.shape[1], generator=gen)]  # not in fact order: put in order first
    got = augmented_incidence(shuffled, fp, num_entities)
    assert got.t().tolist() == _augmented_reference(shuffled[:, torch.argsort(shuffled[0], stable=True)], fp,
                                                   num_entities)
