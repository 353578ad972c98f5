import json
import os

import pytest
import torch

from hpengine.config import GraphConfig
from hpengine.graph._builder import add_passages, build_index
from hpengine.graph._corpus import Passage
from hpengine.graph import FORMAT_VERSION, Index, IndexFormatError
from hpengine.graph._store import READABLE_VERSIONS
from hpengine.testing._fakes import HashingEncoder, ListExtractor

TABLE = {
    "Alpha": [("Alpha was directed by Bea Stone.", ["Alpha", "Bea Stone"]),
              ("Alpha premiered in 1999.", ["Alpha", "1999"])],
    "Bea Stone": [("Bea Stone was born in Kell.", ["Bea Stone", "Kell"])],
    "Kell": [("Kell lies on the river Oro.", ["Kell", "Oro"]), ("Kell is a town.", ["Kell"])],
    "Oro": [("The Oro river flows into the sea.", ["Oro River", "sea"])],
    "Empty": [],
}
CFG = GraphConfig(synonym_threshold=0.55)


def passages(*titles):
    return [Passage(t, f"text of {t}") for t in titles]


def build(titles, **kw):
    return build_index(passages(*titles), extractor=ListExtractor(TABLE), encoder=HashingEncoder(), graph_cfg=CFG, **kw)


def test_build_counts_and_graph():
    index, report = build(["Alpha", "Bea Stone", "Kell", "Oro", "Empty"])
    assert index.num_passages == 5 and index.num_facts == 6
    assert index.entities[:3] == ["Alpha", "Bea Stone", "1999"]
    assert report["facts"] == 6 and report["passages"] == 5
    assert set(report["seconds"]) == {"extract", "embed", "synonyms", "structure"}
    assert index.fact_emb.shape == (6, 64) and index.passage_emb.shape == (5, 64)
    g = index.graph
    assert g.num_facts == 6 and g.num_entities == index.num_entities
    rows = g.transition().to_dense().sum(1)
    assert torch.all(((rows - 1).abs() < 1e-5) | (rows == 0))
    # synonym pairs are symmetric and never self pairs
    syn = index.synonyms
    assert not torch.any(syn[0] == syn[1])
    assert {tuple(p) for p in syn.t().tolist()} == {tuple(p) for p in syn.flip(0).t().tolist()}


def test_save_load_roundtrip(tmp_path):
    index, _ = build(["Alpha", "Bea Stone", "Kell", "Oro"])
    index.save(tmp_path / "idx")
    loaded = Index.load(tmp_path / "idx", expected_encoder=index.meta["encoder"])
    assert loaded.facts == index.facts and loaded.entities == index.entities and loaded.passages == index.passages
    for name in ("fact_passage", "fact_entity_raw", "synonyms", "fact_emb", "entity_emb", "passage_emb"):
        assert torch.equal(getattr(loaded, name), getattr(index, name)), name
    assert torch.equal(loaded.graph.fact_entity, index.graph.fact_entity)
    # no pickle anywhere: the manifest, one generation of json and safetensors, the store's own files
    assert sorted(os.listdir(tmp_path / "idx")) == [".hpengine-store", ".hpengine.holder", ".hpengine.lock", "gen-000001",
                                                      "index.json"]
    assert sorted(os.listdir(tmp_path / "idx" / "gen-000001")) == [".hpengine-owner", "tensors.safetensors",
                                                                   "texts.json"]


def test_load_refuses_bad_indexes(tmp_path):
    index, _ = build(["Alpha", "Kell"])
    path = index.save(tmp_path / "idx")
    with pytest.raises(IndexFormatError, match="encoder"):
        Index.load(path, expected_encoder="another-encoder")
    meta = json.loads((path / "index.json").read_text())
    meta["format_version"] = max(READABLE_VERSIONS) + 1
    (path / "index.json").write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match="format version"):
        Index.load(path)
    meta["format_version"] = FORMAT_VERSION
    meta_ok = json.dumps(meta)
    (path / "index.json").write_text(meta_ok)
    texts = json.loads((path / "gen-000001" / "texts.json").read_text())
    texts["facts"].append("an extra fact")
    (path / "gen-000001" / "texts.json").write_text(json.dumps(texts))
    with pytest.raises(IndexFormatError, match="fact_passage"):
        Index.load(path)
    with pytest.raises(IndexFormatError, match="no such index folder"):
        Index.load(tmp_path / "nothing")
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "index.json").write_text("{}")
    with pytest.raises(IndexFormatError, match="format version None is not supported"):
        Index.load(tmp_path / "user")


def test_interrupted_save_keeps_previous(tmp_path, monkeypatch):
    first, _ = build(["Alpha", "Kell"])
    path = first.save(tmp_path / "idx")
    second, _ = build(["Alpha", "Kell", "Oro"])

    def boom(*args, **kwargs):
        raise KeyboardInterrupt("simulated crash while writing tensors")

    monkeypatch.setattr("hpengine.graph._index.write_safetensors", boom)
    with pytest.raises(KeyboardInterrupt):
        second.save(path)
    monkeypatch.undo()
    again = Index.load(path)
    assert again.facts == first.facts
    assert [p for p in os.listdir(tmp_path) if p != "idx"] == []  # nothing beside the index
    assert not [p for p in os.listdir(path) if p.startswith(".tmp-")]  # the unfinished generation went


def test_format_1_loads_and_the_next_save_replaces_its_files(tmp_path):
    index, _ = build(["Alpha", "Kell"])
    path = index.save(tmp_path / "idx")
    legacy = tmp_path / "legacy"  # the flat layout of format 1: data files beside index.json
    legacy.mkdir()
    for name in ("texts.json", "tensors.safetensors"):
        os.replace(path / "gen-000001" / name, legacy / name)
    meta = json.loads((path / "index.json").read_text())
    for key in ("format", "generation", "store_token"):
        del meta[key]
    (legacy / "index.json").write_text(json.dumps({**meta, "format_version": 1}))
    (legacy / "notes.txt").write_text("the user's")
    assert Index.load(legacy).facts == index.facts
    grown, _ = build(["Alpha", "Kell", "Oro"])
    grown.save(legacy)
    assert Index.load(legacy).facts == grown.facts
    assert sorted(os.listdir(legacy)) == [".hpengine-store", ".hpengine.holder", ".hpengine.lock", "gen-000001", "index.json",
                                          "notes.txt"]


def test_refuses_to_replace_foreign_folder(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "precious.txt").write_text("keep me")
    index, _ = build(["Alpha"])
    with pytest.raises(FileExistsError, match="not an hpengine index"):
        index.save(tmp_path / "data")
    assert (tmp_path / "data" / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize("split", [1, 2, 3])
def test_incremental_add_equals_scratch(split):
    titles = ["Alpha", "Bea Stone", "Kell", "Oro", "Empty"]
    scratch, _ = build(titles)
    extractor, encoder = ListExtractor(TABLE), HashingEncoder()
    first, _ = build_index(passages(*titles[:split]), extractor=extractor, encoder=encoder, graph_cfg=CFG)
    encoder.texts_encoded = 0
    extractor.seen_titles.clear()
    grown, report = add_passages(first, passages(*titles), extractor=extractor, encoder=encoder, graph_cfg=CFG)
    # old passages were neither re-extracted nor re-embedded
    assert extractor.seen_titles == titles[split:]
    assert report["skipped_known_passages"] == split
    assert grown.facts == scratch.facts and grown.entities == scratch.entities
    for name in ("fact_passage", "fact_entity_raw", "synonyms"):
        assert torch.equal(getattr(grown, name), getattr(scratch, name)), name
    for name in ("fact_emb", "entity_emb", "passage_emb"):
        torch.testing.assert_close(getattr(grown, name), getattr(scratch, name))
    assert torch.equal(grown.graph.fact_entity, scratch.graph.fact_entity)
    torch.testing.assert_close(grown.graph.transition().to_dense(), scratch.graph.transition().to_dense())
    torch.testing.assert_close(grown.graph.entity_degree(), scratch.graph.entity_degree())


def test_add_after_reload(tmp_path):
    titles = ["Alpha", "Bea Stone", "Kell", "Oro"]
    scratch, _ = build(titles)
    first, _ = build(titles[:2])
    first.save(tmp_path / "idx")
    loaded = Index.load(tmp_path / "idx")
    grown, _ = add_passages(loaded, passages(*titles[2:]), extractor=ListExtractor(TABLE), encoder=HashingEncoder(),
                            graph_cfg=CFG)
    grown.save(tmp_path / "idx")
    again = Index.load(tmp_path / "idx")
    assert torch.equal(again.graph.fact_entity, scratch.graph.fact_entity)


def test_add_rejects_other_encoder():
    index, _ = build(["Alpha"])
    with pytest.raises(ValueError, match="encoder"):
        add_passages(index, passages("Kell"), extractor=ListExtractor(TABLE), encoder=HashingEncoder(dim=32))


def test_names_with_digits_match_only_exactly():
    table = {"A": [("A happened on 8 May 1958.", ["8 May 1958", "Grammy Award"])],
             "B": [("B happened on 9 May 1958.", ["9 May 1958", "Grammy Awards"])]}
    cfg = GraphConfig(synonym_threshold=0.3)
    index, _ = build_index(passages("A", "B"), extractor=ListExtractor(table), encoder=HashingEncoder(), graph_cfg=cfg)
    names = {(index.entities[a], index.entities[b]) for a, b in index.synonyms.t().tolist()}
    assert ("Grammy Award", "Grammy Awards") in names
    assert not any(any(c.isdigit() for c in a + b) for a, b in names)
    loose, _ = build_index(passages("A", "B"), extractor=ListExtractor(table), encoder=HashingEncoder(),
                           graph_cfg=GraphConfig(synonym_threshold=0.3, synonym_skip_digits=False))
    loose_names = {(loose.entities[a], loose.entities[b]) for a, b in loose.synonyms.t().tolist()}
    assert ("8 May 1958", "9 May 1958") in loose_names
