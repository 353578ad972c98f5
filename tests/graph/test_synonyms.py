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


BACKENDS = ["torch", pytest.param("faiss", marks=with_package("faiss")), pytest.param("ivf", marks=with_package("faiss"))]


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
    with pytest.raises(ValueError, match=r"backend must be one of \['auto', 'faiss', 'ivf', 'torch'\] \(got 'annoy'\)"):
        synonym_pairs(emb, emb, backend="annoy")
    with pytest.raises(ValueError, match=r"threshold must be in \[-1, 1\] \(got 1.5\)"):
        synonym_pairs(emb, emb, threshold=1.5)
    with pytest.raises(ValueError, match=r"block_size must be an int >= 1 \(got 0\)"):
        synonym_pairs(emb, emb, block_size=0)
    with pytest.raises(ValueError, match=r"max_per_entity must be an int >= 0"):
        synonym_pairs(emb, emb, max_per_entity=-1)
    with pytest.raises(ValueError, match=r"cell_size must be an int >= 1 \(got 0\)"):
        synonym_pairs(emb, emb, cell_size=0)
    with pytest.raises(ValueError, match=r"nprobe must be an int >= 1 \(got 2.0\)"):
        synonym_pairs(emb, emb, nprobe=2.0)
    with pytest.raises(ValueError, match=r"exact_max_keys must be an int >= 0 \(got -1\)"):
        synonym_pairs(emb, emb, exact_max_keys=-1)


def test_faiss_missing_names_extra(monkeypatch):
    import hpengine.graph._synonyms as mod

    monkeypatch.setattr(mod, "WITH_FAISS", False)
    with pytest.raises(ImportError, match="faiss"):
        synonym_pairs(torch.eye(3), torch.eye(3), backend="faiss")
    with pytest.raises(ImportError, match="faiss"):
        synonym_pairs(torch.eye(3), torch.eye(3), backend="ivf")
    # auto above the switch: the exact search, with a warning (never a silent change of method)
    emb = _planted(40, num_dups=5, seed=5).float()
    with pytest.warns(UserWarning, match="FAISS is missing"):
        got = synonym_pairs(emb, emb, exact_max_keys=10)
    assert torch.equal(got, synonym_pairs(emb, emb, backend="torch"))


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


# --- approximate (ivf) search and the auto switch ---------------------------------------------

def _clustered(num: int, dim: int = 32, seed: int = 0) -> torch.Tensor:
    """Random unit vectors in families of 1-4 near-duplicates (cos ~0.8-0.97 to the family root).

    float32 similarities of different products differ by ~1e-7, so no pair lies within 1e-4 of
    THRESHOLD: every backend puts each pair on the same side of it.
    """
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 5, (num,), generator=gen)
    owner = torch.repeat_interleave(torch.arange(num), sizes)[:num]
    root = torch.nn.functional.normalize(torch.randn(num, dim, generator=gen, dtype=torch.float64), dim=1)
    noise = torch.randn(num, dim, generator=gen, dtype=torch.float64) * (0.1 + 0.35 * torch.rand(num, 1, generator=gen))
    emb = torch.nn.functional.normalize(root[owner] + noise / dim**0.5, dim=1)
    emb = emb[torch.randperm(num, generator=gen)]
    sim = emb @ emb.T
    assert ((sim - THRESHOLD).abs() > 1e-4).all(), "test data too close to the threshold; change the seed"
    return emb.float()


def _pair_sims(pairs: torch.Tensor, sims: torch.Tensor) -> dict:
    return dict(zip(map(tuple, pairs.t().tolist()), sims.tolist()))


@with_package("faiss")
def test_ivf_is_a_subset_with_exact_similarities_and_high_recall():
    emb = _clustered(3000)
    # 3000 // 50 = 60 cells, 6 searched per query: most keys are never compared with a query
    exact, exact_sim = synonym_pairs(emb, emb, backend="torch", return_similarity=True)
    approx, approx_sim = synonym_pairs(emb, emb, backend="ivf", cell_size=50, nprobe=6, return_similarity=True)
    exact_d, approx_d = _pair_sims(exact, exact_sim), _pair_sims(approx, approx_sim)
    assert len(exact_d) > 2000 and set(approx_d) <= set(exact_d)  # the cap of 16 never binds here
    common = sorted(approx_d)
    torch.testing.assert_close(torch.tensor([approx_d[p] for p in common]), torch.tensor([exact_d[p] for p in common]),
                               rtol=0, atol=1e-6)  # float32 products of different tile shapes
    recall = len(approx_d) / len(exact_d)
    assert 0.95 <= recall < 1.0, recall  # approximate, and good


@with_package("faiss")
@pytest.mark.parametrize("k", [2, 16, 0])
def test_ivf_probing_every_cell_is_exact(k):
    emb = _planted(300).float()  # 300 // 20 = 15 cells, all probed
    exact, exact_sim = synonym_pairs(emb, emb, max_per_entity=k, backend="torch", return_similarity=True)
    got, got_sim = synonym_pairs(emb, emb, max_per_entity=k, backend="ivf", cell_size=20, nprobe=15,
                                 block_size=37, return_similarity=True)
    assert _as_set(got) == _as_set(exact) == _reference(emb, emb, THRESHOLD, k)
    torch.testing.assert_close(got_sim, exact_sim, rtol=0, atol=1e-6)


@with_package("faiss")
@pytest.mark.parametrize("backend", ["torch", "faiss", "ivf"])
@pytest.mark.parametrize("exclude_self", [True, False])
@pytest.mark.parametrize("k", [3, 0])
def test_output_format_is_the_same_for_every_backend(backend, exclude_self, k):
    keys = _clustered(800, seed=1)
    offset = 300
    pairs, sims = synonym_pairs(keys[offset:], keys, max_per_entity=k, query_offset=offset, exclude_self=exclude_self,
                                block_size=64, backend=backend, cell_size=40, nprobe=4, return_similarity=True)
    assert pairs.dtype == torch.long and pairs.shape[0] == 2 and sims.dtype == torch.float32
    assert sims.shape == (pairs.shape[1],) and (sims >= THRESHOLD).all()
    torch.testing.assert_close(sims, (keys[pairs[0]] * keys[pairs[1]]).sum(1), rtol=0, atol=1e-5)
    assert (pairs[0] >= offset).all() and (pairs[0] < 800).all()
    assert (pairs[0].diff() >= 0).all()  # sorted by query
    same_query = pairs[0].diff() == 0
    assert (sims.diff()[same_query] <= 0).all()  # then by decreasing similarity
    assert len(_as_set(pairs)) == pairs.shape[1]
    is_self = pairs[0] == pairs[1]
    assert not is_self.any() if exclude_self else is_self.sum() == 500  # a vector finds itself (its own cell)
    if k:
        assert torch.bincount(pairs[0]).max() <= k


@with_package("faiss")
def test_auto_picks_by_size():
    emb = _clustered(1500, seed=2)
    torch_pairs, torch_sim = synonym_pairs(emb, emb, backend="torch", return_similarity=True)
    auto_pairs, auto_sim = synonym_pairs(emb, emb, exact_max_keys=1500, return_similarity=True)  # default: auto
    assert torch.equal(auto_pairs, torch_pairs) and torch.equal(auto_sim, torch_sim)
    below = synonym_pairs(emb, emb)  # the default switch is far above 1500 keys
    assert torch.equal(below, torch_pairs)
    ivf = synonym_pairs(emb, emb, backend="ivf", cell_size=50, nprobe=2)
    auto_ivf = synonym_pairs(emb, emb, exact_max_keys=1499, cell_size=50, nprobe=2)
    assert torch.equal(auto_ivf, ivf) and not torch.equal(ivf, torch_pairs)


@with_package("faiss")
def test_ivf_is_deterministic():
    import faiss

    emb = _clustered(2000, seed=3)
    first = synonym_pairs(emb, emb, backend="ivf", cell_size=40, nprobe=2, seed=7)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(2)
    try:
        again = synonym_pairs(emb, emb, backend="ivf", cell_size=40, nprobe=2, seed=7)
    finally:
        faiss.omp_set_num_threads(threads)
    assert torch.equal(first, again)
    assert faiss.omp_get_max_threads() == threads  # the k-means' single thread is restored


@with_package("faiss")
@with_devices
def test_ivf_device(device):
    emb = _clustered(600, seed=4).to(device)
    got = synonym_pairs(emb.to(torch.bfloat16), emb.to(torch.bfloat16), backend="ivf", cell_size=30, nprobe=20)
    assert got.device == torch.device(device)
    assert _as_set(got) == _as_set(synonym_pairs(emb.float(), emb.float(), backend="torch"))


@with_package("faiss")
def test_ivf_new_entities_against_all():
    keys = _clustered(1200, seed=5)
    offset = 1000
    exact = _as_set(synonym_pairs(keys[offset:], keys, query_offset=offset, backend="torch"))
    # queries that are not a view of the keys take the separate probe path
    got = _as_set(synonym_pairs(keys[offset:].clone(), keys, query_offset=offset, backend="ivf", cell_size=40,
                                nprobe=30))
    assert got == exact  # 30 cells: every cell probed


def test_graph_config_synonym_search_settings():
    from hpengine.config import GraphConfig

    cfg = GraphConfig()
    # the dev corpora (at most 73,813 entity names) keep the exact search
    assert cfg.synonym_backend == "auto" and cfg.synonym_exact_max_keys >= 73_813
    with pytest.raises(ValueError, match=r"graph.synonym_backend must be one of \['auto', 'faiss', 'ivf', 'torch'\]"):
        GraphConfig(synonym_backend="hnsw")
    with pytest.raises(ValueError, match=r"graph.synonym_ivf_nprobe must be >= 1 \(got 0\)"):
        GraphConfig(synonym_ivf_nprobe=0)
    with pytest.raises(ValueError, match=r"graph.synonym_ivf_cell_size must be >= 1 \(got 0\)"):
        GraphConfig(synonym_ivf_cell_size=0)
    with pytest.raises(ValueError, match=r"graph.synonym_exact_max_keys must be >= 0 \(got -5\)"):
        GraphConfig(synonym_exact_max_keys=-5)


@with_package("faiss")
def test_builder_passes_the_ivf_settings():
    from hpengine.config import GraphConfig
    from hpengine.graph._builder import _synonyms_of

    emb = _clustered(900, seed=6)
    eligible = torch.ones(900, dtype=torch.bool)
    exact = _synonyms_of(emb, eligible, 0, GraphConfig(synonym_threshold=THRESHOLD))
    forced = GraphConfig(synonym_threshold=THRESHOLD, synonym_exact_max_keys=100, synonym_ivf_cell_size=30,
                         synonym_ivf_nprobe=1)
    approx = _synonyms_of(emb, eligible, 0, forced)
    assert _as_set(approx) < _as_set(exact)
