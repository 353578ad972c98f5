"""benchmarks/e2e/amplify_index.py copies an index at the structure level: copy 0 is the index,
copy j renames names and titles alike, its incidences point into copy j, its embeddings are the
originals turned by one rotation near the identity: every similarity inside a copy is kept, a
name's variants are near it but below η, so the synonym search finds each copy's own pairs and no
pair across copies. A small index of the graph tests' random table; no models."""
import random
import sys
from pathlib import Path

import pytest
import torch

from hpengine.graph import build_index, entity_synonyms
from hpengine.testing._fakes import HashingEncoder

sys.path.insert(0, str(Path(__file__).resolve().parent / "graph"))
from test_edit import CFG, TextExtractor, _random_table  # noqa: E402

@pytest.fixture(scope="module")
def amp(load_benchmark):
    return load_benchmark("e2e/amplify_index")


@pytest.fixture(scope="module")
def index():
    passages, table = _random_table(random.Random(5), 20, 10)
    return build_index(passages, extractor=TextExtractor(table), encoder=HashingEncoder(), graph_cfg=CFG)[0]


def test_copies_keep_the_structure(amp, index):
    big = amp.amplify(index, 3, variant_cosine=0.65, seed=1)
    p, h, v = index.num_passages, index.num_facts, index.num_entities
    assert (big.num_passages, big.num_facts, big.num_entities) == (3 * p, 3 * h, 3 * v)
    assert big.passages[:p] == index.passages and big.entities[:v] == index.entities
    assert torch.equal(big.fact_emb[:h], index.fact_emb)
    for j, tag in ((1, "b"), (2, "c")):
        assert big.entities[j * v] == f"{index.entities[0]} ~{tag}"
        assert big.passages[j * p].title == f"{index.passages[0].title} ~{tag}"
        assert big.passages[j * p].text == index.passages[0].text
    n = index.fact_entity_raw.shape[1]
    assert torch.equal(big.fact_entity_raw[:, 2 * n:], index.fact_entity_raw + torch.tensor([[2 * h], [2 * v]]))
    assert torch.equal(big.fact_passage[h:2 * h], index.fact_passage + p)
    norms = torch.linalg.vector_norm(big.entity_emb.float(), dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-5)
    for name, n in (("entity_emb", v), ("fact_emb", h), ("passage_emb", p)):
        orig, copy = getattr(index, name).double(), getattr(big, name)[n:2 * n].double()
        assert torch.allclose(copy @ copy.T, orig @ orig.T, atol=1e-5)  # a rotation: similarities kept
        cos = (copy * orig).sum(1)
        assert 0.5 < float(cos.min()) and float(cos.max()) < 0.8  # near, below a usual threshold
    big.check()


def test_near_rotation_is_orthogonal_with_the_asked_trace(amp):
    for cosine in (0.3, 0.65, 0.9):
        q = amp.near_rotation(64, cosine, torch.Generator().manual_seed(2))
        assert torch.allclose(q @ q.T, torch.eye(64, dtype=torch.float64), atol=1e-10)
        assert abs(float(q.trace()) / 64 - cosine) < 1e-9


def test_each_copy_has_the_originals_synonyms_and_none_across(amp, index):
    cfg = amp.graph_config(index)
    base = entity_synonyms(index.entity_emb, index.entities, cfg)
    assert cfg.synonym_threshold == 0.55  # the test graph's η: variants well below it
    big = amp.amplify(index, 3, variant_cosine=0.3, seed=1)
    pairs = entity_synonyms(big.entity_emb, big.entities, cfg)
    v = index.num_entities
    assert base.shape[1] > 0
    want = torch.cat([base + j * v for j in range(3)], dim=1)
    assert _as_set(pairs) == _as_set(want)
    checked = amp.synonym_check(big, pairs, cfg, 3, sample=50)
    assert checked["cross_copy_pairs"] == 0 and checked["recall"] == 1.0 and checked["recall_exact_pairs"] > 0


def _as_set(pairs):
    return set(map(tuple, pairs.t().tolist()))


def test_half_precision_copies(amp, index):
    big = amp.amplify(index, 2, dtype=torch.float16)
    assert big.fact_emb.dtype == big.entity_emb.dtype == big.passage_emb.dtype == torch.float16
    assert [amp._tag(j) for j in (1, 25, 26, 27)] == ["b", "z", "ba", "bb"]


def test_rows_in_mapped_files_equal_rows_in_memory(amp, index, tmp_path):
    """``rows_dir``: the fact and passage rows are file mappings (the build's merged rows), the
    same values; the files are gone from the folder, the mappings stay."""
    big = amp.amplify(index, 2, dtype=torch.float16, seed=1)
    mapped = amp.amplify(index, 2, dtype=torch.float16, seed=1, rows_dir=tmp_path)
    for name in ("fact_emb", "entity_emb", "passage_emb"):
        assert torch.equal(getattr(mapped, name), getattr(big, name))
    assert not list(tmp_path.iterdir())
