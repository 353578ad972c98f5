"""benchmarks/e2e/amplify_index.py copies an index at the structure level: copy 0 is the index,
copy j renames names and titles alike, its incidences point into copy j, its embeddings are unit
noisy copies; the copies' names are near their originals, so the build's synonym search links
them. A small index of the graph tests' random table; no models."""
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
    big = amp.amplify(index, 3, noise=0.01, seed=1)
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
    cos = (big.entity_emb[v:2 * v] * index.entity_emb).sum(1)
    assert float(cos.min()) > 0.95  # a copy's name stays near its original
    big.check()


def test_the_copies_names_are_synonyms_of_the_originals(amp, index):
    big = amp.amplify(index, 2, noise=0.01, seed=1)
    cfg = amp.graph_config(index)
    pairs = entity_synonyms(big.entity_emb, big.entities, cfg)
    v = index.num_entities
    linked = {(a, b) for a, b in pairs.t().tolist()}
    no_digit = [e for e, name in enumerate(index.entities) if not any(c.isdigit() for c in name)]
    assert no_digit and all((e, e + v) in linked for e in no_digit)


def test_half_precision_copies(amp, index):
    big = amp.amplify(index, 2, dtype=torch.float16)
    assert big.fact_emb.dtype == big.entity_emb.dtype == big.passage_emb.dtype == torch.float16
    assert [amp._tag(j) for j in (1, 25, 26, 27)] == ["b", "z", "ba", "bb"]
