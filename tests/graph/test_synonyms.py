import pytest
import torch

from hpengine.graph import expand_with_synonyms, symmetrize_pairs, synonym_pairs
from hpengine.testing import with_devices, with_package

THRESHOLD = 0.8


def _planted(num: int, dim: int = 64, num_dups: int = 40, cluster: int = 6, seed: int = 0) -> torch.Tensor:
    """Random unit vectors (pairwise cos ~ N(0, 1/dim)) plus planted near-duplicates.

    ``num_dups`` noisy copies (cos ~ 0.99) and one tight cluster of ``cluster`` vectors (so that a
    small top-k cap binds). Every similarity is kept at least 0.02 away from THRESHOLD so that
    float32 (even bf16 inputs) and float64 agree on which side of it each pair falls.
    """
    gen = torch.Generator().manual_seed(seed)
    emb = torch.nn.functional.normalize(torch.randn(num, dim, generator=gen, dtype=torch.float64), dim=1)
    perm = torch.randperm(num, generator=gen)
    src, dst = perm[:num_dups], perm[num_dups:2 * num_dups]
    emb[dst] = emb[src] + 0.1 / dim**0.5 * torch.randn(num_dups, dim, generator=gen, dtype=torch.float64)
    members = perm[2 * num_dups:2 * num_dups + cluster]
    emb[members] = emb[members[0]] + 0.2 / dim**0.5 * torch.randn(cluster, dim, generator=gen, dtype=torch.float64)
    emb = torch.nn.functional.normalize(emb, dim=1)
    sim = emb @ emb.T
    assert ((sim - THRESHOLD).abs() > 0.02).all(), "test data too close to the threshold; change the seed"
    return emb


def _reference(queries, keys, threshold, k, query_offset=0, exclude_self=True) -> set:
    """Full float64 similarity matrix; per query the top-k keys with cos >= threshold."""
    sim = (queries.double() @ keys.double().T).tolist()
    out = set()
    for i, row in enumerate(sim):
        cand = [(s, j) for j, s in enumerate(row) if not (exclude_self and j == query_offset + i) and s >= threshold]
        cand.sort(reverse=True)
        out |= {(query_offset + i, j) for _, j in (cand[:k] if k else cand)}
    return out


def _as_set(pairs: torch.Tensor) -> set:
    return set(map(tuple, pairs.t().cpu().tolist()))


def _as_list(pairs: torch.Tensor) -> list:
    return list(map(tuple, pairs.t().tolist()))


BACKENDS = ["torch", pytest.param("faiss", marks=with_package("faiss"))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [1, 3, 16, 0])
def test_matches_bruteforce(backend, k):
    emb = _planted(300).float()
    got = synonym_pairs(emb, emb, threshold=THRESHOLD, max_per_entity=k, block_size=64, backend=backend)
    assert got.dtype == torch.long and got.shape[0] == 2
    expected = _reference(emb, emb, THRESHOLD, k)
    assert _as_set(got) == expected
    if k in (1, 3):  # the planted 6-cluster makes a small cap bind
        assert len(expected) < len(_reference(emb, emb, THRESHOLD, 0))
    assert len(_as_set(got)) == got.shape[1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [2, 0])
def test_block_size_invariant_and_ordered(backend, k):
    emb = _planted(120, seed=1).float()
    full = synonym_pairs(emb, emb, max_per_entity=k, block_size=4096, backend=backend)
    assert full.shape[1] > 30
    for block_size in (5, 17):
        got = synonym_pairs(emb, emb, max_per_entity=k, block_size=block_size, backend=backend)
        assert _as_set(got) == _as_set(full)
    # sorted by query, then by decreasing similarity
    sim = (emb[full[0]] * emb[full[1]]).sum(1)
    assert (full[0].diff() >= 0).all()
    same = full[0].diff() == 0
    assert (sim.diff()[same] <= 1e-6).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("exclude_self", [True, False])
def test_query_offset_new_entities(backend, exclude_self):
    keys = _planted(200, seed=2).float()
    offset = 170
    got = synonym_pairs(keys[offset:], keys, query_offset=offset, max_per_entity=4, block_size=7,
                        exclude_self=exclude_self, backend=backend)
    assert _as_set(got) == _reference(keys[offset:], keys, THRESHOLD, 4, offset, exclude_self)
    assert (got[0] >= offset).all()
    if not exclude_self:  # a vector is its own best match
        assert set(range(offset, 200)) <= {i for i, j in _as_set(got) if i == j}


def test_backends_agree_with_offset():
    pytest.importorskip("faiss")
    keys = _planted(150, seed=3).float()
    a = synonym_pairs(keys[100:], keys, query_offset=100, block_size=9)
    b = synonym_pairs(keys[100:], keys, query_offset=100, block_size=9, backend="faiss")
    assert _as_set(a) == _as_set(b)


@with_devices
def test_device_and_dtype(device):
    emb = _planted(50, num_dups=10, seed=4).to(device)
    got = synonym_pairs(emb.to(torch.bfloat16), emb.to(torch.bfloat16), block_size=16)
    assert got.device == torch.device(device)
    ref = synonym_pairs(emb.float(), emb.float())
    assert _as_set(got) == _as_set(ref)  # bf16 inputs, float32 scores; margins are 0.02


def test_empty_inputs():
    emb = torch.nn.functional.normalize(torch.randn(4, 8), dim=1)
    assert synonym_pairs(emb[:0], emb).shape == (2, 0)
    assert synonym_pairs(emb, emb[:0]).shape == (2, 0)
    assert synonym_pairs(emb[:1], emb[:1]).shape == (2, 0)  # only itself


def test_bad_arguments():
    emb = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"same dim D \(got 8 and 7\)"):
        synonym_pairs(emb, torch.randn(4, 7))
    with pytest.raises(ValueError, match=r"2-D \[N, D\] \(got shape \(8,\)\)"):
        synonym_pairs(emb[0], emb)
    with pytest.raises(TypeError, match=r"floating tensor \(got torch.int64\)"):
        synonym_pairs(emb.long(), emb)
    with pytest.raises(ValueError, match=r"backend must be one of \['faiss', 'torch'\] \(got 'annoy'\)"):
        synonym_pairs(emb, emb, backend="annoy")
    with pytest.raises(ValueError, match=r"threshold must be in \[-1, 1\] \(got 1.5\)"):
        synonym_pairs(emb, emb, threshold=1.5)
    with pytest.raises(ValueError, match=r"block_size must be an int >= 1 \(got 0\)"):
        synonym_pairs(emb, emb, block_size=0)
    with pytest.raises(ValueError, match=r"max_per_entity must be an int >= 0"):
        synonym_pairs(emb, emb, max_per_entity=-1)


def test_faiss_missing_names_extra(monkeypatch):
    import hpengine.graph._synonyms as mod

    monkeypatch.setattr(mod, "WITH_FAISS", False)
    with pytest.raises(ImportError, match="faiss"):
        synonym_pairs(torch.eye(3), torch.eye(3), backend="faiss")


def test_symmetrize_pairs():
    pairs = torch.tensor([[0, 2, 1, 0], [1, 0, 0, 1]])
    expected = torch.tensor([[0, 0, 1, 2], [1, 2, 0, 0]])
    assert torch.equal(symmetrize_pairs(pairs), expected)
    assert symmetrize_pairs(torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0)
    with pytest.raises(ValueError, match=r"shape \[2, n\] \(got \(3, 1\)\)"):
        symmetrize_pairs(torch.zeros(3, 1, dtype=torch.long))


def _expand_reference(fact_entity, syn, num_facts):
    syn_of = {}
    for a, b in syn.t().tolist():
        syn_of.setdefault(a, set()).add(b)
    facts = [set() for _ in range(num_facts)]
    for f, a in fact_entity.t().tolist():
        facts[f] |= {a} | syn_of.get(a, set())
    return [(f, a) for f in range(num_facts) for a in sorted(facts[f])]


def test_expand_hand_written():
    # fact 0: {0, 1}; fact 1: {2}; fact 2: no entity; fact 3: {1} duplicated; 0~3, 1~2 (directed 1->2)
    fact_entity = torch.tensor([[0, 0, 1, 3, 3], [0, 1, 2, 1, 1]])
    syn = torch.tensor([[0, 3, 1], [3, 0, 2]])
    out = expand_with_synonyms(fact_entity, syn, num_facts=4, num_entities=4)
    assert _as_list(out) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 2), (3, 1), (3, 2)]


@pytest.mark.parametrize("seed", range(5))
def test_expand_matches_set_reference(seed):
    gen = torch.Generator().manual_seed(seed)
    num_facts, num_entities = 30, 25
    fact_entity = torch.stack([torch.randint(0, num_facts, (60,), generator=gen),
                               torch.randint(0, num_entities, (60,), generator=gen)])
    syn = torch.stack([torch.randint(0, num_entities, (20,), generator=gen),
                       torch.randint(0, num_entities, (20,), generator=gen)])
    out = expand_with_synonyms(fact_entity, syn, num_facts, num_entities)
    assert _as_list(out) == _expand_reference(fact_entity, syn, num_facts)
    empty = expand_with_synonyms(fact_entity, syn[:, :0], num_facts, num_entities)
    assert _as_list(empty) == sorted(_as_set(fact_entity))
