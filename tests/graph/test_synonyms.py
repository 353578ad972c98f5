import sys

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
    with pytest.raises(ValueError, match=r"backend must be one of \['auto', 'faiss', 'nndescent', 'torch'\] \(got 'annoy'\)"):
        synonym_pairs(emb, emb, backend="annoy")
    with pytest.raises(ValueError, match=r"threshold must be in \[-1, 1\] \(got 1.5\)"):
        synonym_pairs(emb, emb, threshold=1.5)
    with pytest.raises(ValueError, match=r"block_size must be an int >= 1 \(got 0\)"):
        synonym_pairs(emb, emb, block_size=0)
    with pytest.raises(ValueError, match=r"max_per_entity must be an int >= 0"):
        synonym_pairs(emb, emb, max_per_entity=-1)
    with pytest.raises(ValueError, match=r"ann_neighbors must be an int >= 2 \(got 1\)"):
        synonym_pairs(emb, emb, ann_neighbors=1)
    with pytest.raises(ValueError, match=r"seed must be an int >= 0 \(got 2.0\)"):
        synonym_pairs(emb, emb, seed=2.0)
    with pytest.raises(ValueError, match=r"exact_max_keys must be an int >= 0 \(got -1\)"):
        synonym_pairs(emb, emb, exact_max_keys=-1)


def test_faiss_missing_names_extra(monkeypatch):
    import hpengine.graph._synonyms as mod

    monkeypatch.setattr(mod, "WITH_FAISS", False)
    with pytest.raises(ImportError, match="faiss"):
        synonym_pairs(torch.eye(3), torch.eye(3), backend="faiss")


def test_nndescent_missing_names_the_package(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynndescent", None)  # import fails
    emb = _planted(40, num_dups=5, seed=5).float()
    with pytest.raises(ImportError, match="pip install pynndescent"):
        synonym_pairs(emb, emb, backend="nndescent", ann_neighbors=4)
    with pytest.raises(ImportError, match="pip install pynndescent"):  # auto above the switch: never silent
        synonym_pairs(emb, emb, exact_max_keys=10, ann_neighbors=4)


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


@pytest.mark.parametrize("chunk", [1, 2, 5, 16, 1 << 22])
def test_expand_block_size_does_not_change_the_result(chunk, monkeypatch):
    """The expansion runs in blocks of whole facts of about ``EXPAND_CHUNK`` keys; a fact whose
    keys alone pass a block (fact 0 here: 6 entities with synonyms) is still one block."""
    import hpengine.graph._synonyms as synonyms

    monkeypatch.setattr(synonyms, "EXPAND_CHUNK", chunk)
    gen = torch.Generator().manual_seed(chunk)
    num_facts, num_entities = 40, 30
    fact_entity = torch.cat([torch.stack([torch.zeros(6, dtype=torch.long), torch.arange(6)]),
                             torch.stack([torch.randint(0, num_facts, (90,), generator=gen),
                                          torch.randint(0, num_entities, (90,), generator=gen)])], dim=1)
    syn = symmetrize_pairs(torch.stack([torch.randint(0, num_entities, (40,), generator=gen),
                                        torch.randint(0, num_entities, (40,), generator=gen)]))
    out = expand_with_synonyms(fact_entity, syn, num_facts, num_entities)
    assert _as_list(out) == _expand_reference(fact_entity, syn, num_facts)
    unsorted = syn[:, torch.randperm(syn.shape[1], generator=gen)]  # pairs in any order
    assert torch.equal(expand_with_synonyms(fact_entity, unsorted, num_facts, num_entities), out)


# --- approximate (nndescent) search and the auto switch ---------------------------------------

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


def _exact_candidates(queries, keys, query_offset, num_candidates, seed, ann_dims=0):
    """A stand-in for the k-NN graph: each query's true top ``num_candidates`` keys (float64)."""
    return (queries.double() @ keys.double().T).topk(num_candidates, dim=1).indices


@pytest.mark.parametrize("k", [2, 16, 0])
@pytest.mark.parametrize("exclude_self", [True, False])
def test_rescoring_every_key_is_the_exact_search(k, exclude_self):
    """The re-scoring half of the approximate search, given all keys (shuffled, some repeated,
    some -1) as candidates, equals the exact search: pairs, order and cosines."""
    from hpengine.graph._synonyms import _rescore_candidates

    keys = _planted(300).float()
    offset = 100
    gen = torch.Generator().manual_seed(0)
    cand = torch.stack([torch.randperm(300, generator=gen) for _ in range(200)])
    cand = torch.cat([cand, cand[:, :7], torch.full((200, 3), -1)], dim=1)  # repeats and padding
    got, got_sim = _rescore_candidates(keys[offset:], keys, cand, threshold=THRESHOLD, max_per_entity=k, block_size=37,
                                       query_offset=offset, exclude_self=exclude_self)
    want, want_sim = synonym_pairs(keys[offset:], keys, threshold=THRESHOLD, max_per_entity=k, query_offset=offset,
                                   exclude_self=exclude_self, backend="torch", return_similarity=True)
    assert _as_list(got) == _as_list(want)
    torch.testing.assert_close(got_sim, want_sim, rtol=0, atol=1e-6)


def test_rescoring_a_candidate_subset_gives_a_subset():
    from hpengine.graph._synonyms import _rescore_candidates

    emb = _clustered(1000)
    cand = _exact_candidates(emb, emb, 0, 30, 0)[:, ::2]  # every other true neighbour
    got, got_sim = _rescore_candidates(emb, emb, cand, threshold=THRESHOLD, max_per_entity=0)
    exact, exact_sim = synonym_pairs(emb, emb, max_per_entity=0, backend="torch", return_similarity=True)
    got_d, exact_d = _pair_sims(got, got_sim), _pair_sims(exact, exact_sim)
    assert 0 < len(got_d) < len(exact_d) and set(got_d) <= set(exact_d)
    assert all(abs(got_d[p] - exact_d[p]) < 1e-6 for p in got_d)


@pytest.mark.parametrize("query_offset", [0, 700])
def test_nndescent_backend_with_a_perfect_graph_is_exact(monkeypatch, query_offset):
    """backend="nndescent" and auto above the switch, with the graph replaced by the true
    neighbours: the exact search's pairs (the library's own graph: the slow tests below)."""
    import hpengine.graph._synonyms as mod

    seen = []
    monkeypatch.setattr(mod, "_nndescent_candidates", lambda *a: seen.append(a[3]) or _exact_candidates(*a))
    keys = _clustered(900, seed=1)
    queries = keys[query_offset:]
    exact, exact_sim = synonym_pairs(queries, keys, query_offset=query_offset, backend="torch", return_similarity=True)
    got, got_sim = synonym_pairs(queries, keys, query_offset=query_offset, backend="nndescent", return_similarity=True)
    auto = synonym_pairs(queries, keys, query_offset=query_offset, exact_max_keys=899)
    assert torch.equal(got, exact) and torch.equal(auto, exact) and seen == [24, 24]
    torch.testing.assert_close(got_sim, exact_sim, rtol=0, atol=1e-6)
    synonym_pairs(queries, keys, backend="nndescent", max_per_entity=40, ann_neighbors=8)
    assert seen[-1] == 41  # never fewer candidates than the cap (+1 for the query itself)


def test_nndescent_with_every_key_a_candidate_needs_no_graph():
    emb = _planted(20, num_dups=4, seed=3).float()  # 20 keys <= 24 candidates: exact, library unused
    got = synonym_pairs(emb, emb, backend="nndescent")
    assert torch.equal(got, synonym_pairs(emb, emb, backend="torch"))


def test_auto_picks_by_size(monkeypatch):
    import hpengine.graph._synonyms as mod

    calls = []
    monkeypatch.setattr(mod, "_nndescent_candidates", lambda *a: calls.append(a[1].shape[0]) or _exact_candidates(*a))
    emb = _clustered(1500, seed=2)
    torch_pairs, torch_sim = synonym_pairs(emb, emb, backend="torch", return_similarity=True)
    auto_pairs, auto_sim = synonym_pairs(emb, emb, exact_max_keys=1500, return_similarity=True)  # default: auto
    assert torch.equal(auto_pairs, torch_pairs) and torch.equal(auto_sim, torch_sim) and calls == []
    assert torch.equal(synonym_pairs(emb, emb), torch_pairs) and calls == []  # the default switch: far above
    synonym_pairs(emb, emb, exact_max_keys=1499)
    assert calls == [1500]


# the library's own graph: its numba code compiles for about a minute in a fresh environment
@pytest.mark.slow
@with_package("pynndescent")
def test_nndescent_is_a_subset_with_exact_similarities_and_high_recall():
    emb = _clustered(3000)
    exact, exact_sim = synonym_pairs(emb, emb, backend="torch", return_similarity=True)
    approx, approx_sim = synonym_pairs(emb, emb, backend="nndescent", ann_neighbors=17, return_similarity=True)
    exact_d, approx_d = _pair_sims(exact, exact_sim), _pair_sims(approx, approx_sim)
    assert len(exact_d) > 2000 and set(approx_d) <= set(exact_d)  # the cap of 16 never binds here
    assert all(abs(approx_d[p] - exact_d[p]) < 1e-6 for p in approx_d)
    assert len(approx_d) / len(exact_d) >= 0.98


@pytest.mark.slow
@with_package("pynndescent")
def test_nndescent_new_entities_against_all_and_deterministic():
    keys = _clustered(1200, seed=5)
    offset = 1000
    exact = _as_set(synonym_pairs(keys[offset:], keys, query_offset=offset, backend="torch"))
    rows = synonym_pairs(keys[offset:], keys, query_offset=offset, backend="nndescent", seed=3)  # graph rows
    searched = synonym_pairs(keys[offset:].clone() + 0, keys, query_offset=offset, backend="nndescent", seed=3)
    for got in (rows, searched):  # a view of the keys, and separate queries (the graph searched)
        assert _as_set(got) <= exact and len(_as_set(got)) >= 0.98 * len(exact)
    assert torch.equal(rows, synonym_pairs(keys[offset:], keys, query_offset=offset, backend="nndescent", seed=3))


@pytest.mark.slow
@with_package("pynndescent")
def test_nndescent_leaves_the_thread_count_alone():
    """numba sets the OpenMP thread count torch shares; the caller's setting survives the search."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        emb = _clustered(500, seed=7)
        synonym_pairs(emb, emb, backend="nndescent")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
@with_package("pynndescent")
@with_devices
def test_nndescent_device(device):
    emb = _clustered(600, seed=4).to(device)
    got = synonym_pairs(emb.to(torch.bfloat16), emb.to(torch.bfloat16), backend="nndescent")
    assert got.device == torch.device(device)
    assert _as_set(got) <= _as_set(synonym_pairs(emb.float(), emb.float(), backend="torch", max_per_entity=0))


def test_graph_config_synonym_search_settings():
    from hpengine.config import GraphConfig

    cfg = GraphConfig()
    # the dev corpora (at most 73,813 entity names) keep the exact search
    assert cfg.synonym_backend == "auto" and cfg.synonym_exact_max_keys >= 73_813
    with pytest.raises(ValueError, match=r"graph.synonym_backend must be one of \['auto', 'faiss', 'nndescent', 'torch'\]"):
        GraphConfig(synonym_backend="hnsw")
    with pytest.raises(ValueError, match=r"graph.synonym_ann_neighbors must be >= 2 \(got 1\)"):
        GraphConfig(synonym_ann_neighbors=1)
    with pytest.raises(ValueError, match=r"graph.synonym_exact_max_keys must be >= 0 \(got -5\)"):
        GraphConfig(synonym_exact_max_keys=-5)


def test_builder_passes_the_approximate_settings(monkeypatch):
    import hpengine.graph._synonyms as mod
    from hpengine.config import GraphConfig
    from hpengine.graph._builder import _synonyms_of

    seen = []
    monkeypatch.setattr(mod, "_nndescent_candidates", lambda *a: seen.append(a[3:]) or _exact_candidates(*a))
    emb = _clustered(900, seed=6)
    eligible = torch.ones(900, dtype=torch.bool)
    exact = _synonyms_of(emb, eligible, 0, GraphConfig(synonym_threshold=THRESHOLD))
    forced = GraphConfig(synonym_threshold=THRESHOLD, synonym_exact_max_keys=100, synonym_ann_neighbors=30,
                         synonym_ann_dims=16)
    assert torch.equal(_synonyms_of(emb, eligible, 0, forced), exact) and seen == [(30, 0, 16)]


def test_builder_searches_new_names_as_a_suffix_of_the_keys():
    """An add's search (new names against all, some names not eligible) equals the exact search
    of the eligible names, new ones as queries, in entity ids."""
    from hpengine.config import GraphConfig
    from hpengine.graph._builder import _synonyms_of

    emb = _clustered(600, seed=8)
    eligible = torch.rand(600, generator=torch.Generator().manual_seed(0)) > 0.2
    cfg = GraphConfig(synonym_threshold=THRESHOLD)
    got = _synonyms_of(emb, eligible, 450, cfg)
    ids = torch.nonzero(eligible).squeeze(1)
    sim = emb.double() @ emb.double().T
    want = {(int(a), int(b)) for a in ids[ids >= 450] for b in ids if a != b and sim[a, b] >= THRESHOLD}
    assert want and _as_set(got) == want  # the cap of 16 never binds here


def test_principal_projection_is_the_top_eigenvectors_for_any_block_size():
    from hpengine.graph._synonyms import principal_projection

    emb = _clustered(700, dim=24, seed=2)
    values, vectors = torch.linalg.eigh(emb.double().T @ emb.double())
    want = vectors[:, -6:].flip(1)
    for block in (1, 64, 1 << 16):
        got = principal_projection(emb, 6, block_size=block).double()
        assert got.shape == (24, 6)
        assert torch.allclose(got.T @ got, torch.eye(6, dtype=torch.float64), atol=1e-5)
        assert torch.allclose((got * want).sum(0).abs(), torch.ones(6, dtype=torch.float64), atol=1e-4)


def test_searched_dims_by_size():
    from hpengine.graph._synonyms import ANN_FULL_MAX_BYTES, searched_dims

    full = ANN_FULL_MAX_BYTES // (384 * 4)
    assert searched_dims(full, 384) == 384 and searched_dims(full + 1, 384) == 128
    assert searched_dims(10, 384, 64) == 64 and searched_dims(10, 32, 64) == 32
    with pytest.raises(ValueError, match=r"ann_dims must be an int >= 0 \(got -1\)"):
        synonym_pairs(torch.eye(3), torch.eye(3), ann_dims=-1)


class _ExactGraph:
    """Stand-in for pynndescent.NNDescent: the exact k-NN graph of what it is given (recorded)."""

    given = []

    def __init__(self, data, n_neighbors, **kwargs):
        _ExactGraph.given.append(data.shape)
        x = torch.from_numpy(data).double()
        self.neighbor_graph = ((x @ x.T).topk(n_neighbors, dim=1).indices.numpy(), None)


def test_nndescent_searches_the_projection_and_rescores_on_the_full_embeddings(monkeypatch):
    import types

    monkeypatch.setitem(sys.modules, "pynndescent", types.SimpleNamespace(NNDescent=_ExactGraph))
    _ExactGraph.given.clear()
    emb = _clustered(800, dim=32, seed=4)
    exact, exact_sim = synonym_pairs(emb, emb, backend="torch", return_similarity=True)
    full, full_sim = synonym_pairs(emb, emb, backend="nndescent", return_similarity=True)
    low, low_sim = synonym_pairs(emb.half(), emb.half(), backend="nndescent", ann_dims=8, ann_neighbors=40,
                                 return_similarity=True)
    assert _ExactGraph.given == [(800, 32), (800, 8)]
    assert torch.equal(full, exact)
    exact_d, low_d = _pair_sims(exact, exact_sim), _pair_sims(low, low_sim)
    # every pair found has the cosine of the full (half-precision) embeddings; a few are missed
    assert set(low_d) <= set(exact_d) and len(low_d) >= 0.9 * len(exact_d)
    assert all(abs(low_d[p] - exact_d[p]) < 2e-3 for p in low_d)


def test_blocked_graph_finds_pairs_within_shared_cells(monkeypatch):
    """Above ANN_BLOCK_KEYS names a self-join runs NN-descent per name block (k-means cells, every
    name in its two nearest): with exact graphs per cell, every pair found is exact and the pairs
    missed are only those whose names share no cell."""
    import types

    import hpengine.graph._synonyms as mod

    monkeypatch.setitem(sys.modules, "pynndescent", types.SimpleNamespace(NNDescent=_ExactGraph))
    monkeypatch.setattr(mod, "ANN_BLOCK_KEYS", 400)
    _ExactGraph.given.clear()
    emb = _clustered(1500, dim=16, seed=11)
    exact, exact_sim = synonym_pairs(emb, emb, backend="torch", return_similarity=True)
    got, got_sim = synonym_pairs(emb, emb, backend="nndescent", ann_neighbors=20, return_similarity=True)
    assert len(_ExactGraph.given) == 8  # ceil(2 * 1500 / 400) cells, one graph each
    assert sum(shape[0] for shape in _ExactGraph.given) == 2 * 1500
    exact_d, got_d = _pair_sims(exact, exact_sim), _pair_sims(got, got_sim)
    assert set(got_d) <= set(exact_d) and all(abs(got_d[p] - exact_d[p]) < 1e-6 for p in got_d)
    cells = mod._cells_of(emb, None, 8, 0)
    share = {p for p in exact_d if set(cells[p[0]].tolist()) & set(cells[p[1]].tolist())}
    assert set(got_d) == share and len(share) >= 0.95 * len(exact_d)


def test_builder_approximate_search_drops_ineligible_names(monkeypatch):
    """The approximate path searches every name (no gathered copy) and drops pairs with an
    ineligible one: with a perfect graph and a cap that does not bind, the exact pairs of the
    eligible names, for a build and for an add."""
    import hpengine.graph._synonyms as mod
    from hpengine.config import GraphConfig
    from hpengine.graph._builder import _synonyms_of

    monkeypatch.setattr(mod, "_nndescent_candidates", lambda *a: _exact_candidates(*a))
    emb = _clustered(700, seed=10)
    eligible = torch.rand(700, generator=torch.Generator().manual_seed(1)) > 0.3
    exact_cfg = GraphConfig(synonym_threshold=THRESHOLD)
    approx_cfg = GraphConfig(synonym_threshold=THRESHOLD, synonym_backend="nndescent", synonym_ann_neighbors=40)
    for first_new in (0, 500):
        want = _synonyms_of(emb, eligible, first_new, exact_cfg)
        got = _synonyms_of(emb, eligible, first_new, approx_cfg)
        assert want.shape[1] > 0 and _as_set(got) == _as_set(want)
