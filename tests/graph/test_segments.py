"""Appending generations: ``Index.save(append=True)`` links the files already written and writes
only the new rows as a segment; a load gives the index that was saved; past MAX_SEGMENTS, or when
the index did not only grow, the save writes the index whole."""
import json
import os
import random

import pytest

import hpengine.graph._index as index_module
from hpengine.graph import Index, IndexFormatError, IndexStore, add_passages, build_index, delete_passages
from hpengine.testing._fakes import HashingEncoder

from test_edit import CFG, TextExtractor, _random_table, assert_same_index


@pytest.fixture
def parts():
    passages, table = _random_table(random.Random(3), 30, 12)
    return passages, table


def build(passages, table):
    return build_index(passages, extractor=TextExtractor(table), encoder=HashingEncoder(), graph_cfg=CFG)[0]


def add(index, passages, table):
    return add_passages(index, passages, extractor=TextExtractor(table), encoder=HashingEncoder(), graph_cfg=CFG)[0]


def two_generations(tmp_path, passages, table, first=10):
    """An index of ``passages[:first]``, then the rest added and saved appending: its folder."""
    path = tmp_path / "idx"
    build(passages[:first], table).save(path)
    add(Index.load(path), passages[first:], table).save(path, append=True)
    return path


def manifest(path):
    return json.loads((path / "index.json").read_text())


def current(path):
    return IndexStore(path).generation().folder


@pytest.mark.parametrize("mmap", [True, False])
def test_an_add_writes_only_its_rows_and_loads_as_saved(tmp_path, parts, mmap):
    passages, table = parts
    path = tmp_path / "idx"
    build(passages[:12], table).save(path)
    base = current(path)
    grown = add(Index.load(path), passages[12:20], table)
    grown.save(path, append=True)
    m, folder = manifest(path), current(path)
    assert (m["format_version"], m["segments"]) == (3, 1)
    for name in ("texts.json", "tensors.safetensors"):  # the base is linked, not written again
        assert os.stat(folder / name).st_ino == os.stat(base / name).st_ino
    seg = json.loads((folder / "seg-001" / "texts.json").read_text())
    assert [p["title"] for p in seg["passages"]] == [p.title for p in passages[12:20]]
    assert_same_index(Index.load(path, mmap=mmap), grown)
    again = add(Index.load(path), passages[20:], table)
    again.save(path, append=True)
    assert manifest(path)["segments"] == 2
    assert os.stat(current(path) / "seg-001" / "tensors.safetensors").st_ino == \
        os.stat(folder / "seg-001" / "tensors.safetensors").st_ino
    loaded = Index.load(path, mmap=mmap)
    assert_same_index(loaded, again)
    assert_same_index(loaded, build(passages, table))  # and add equals a scratch build


def test_past_max_segments_the_index_is_written_whole(tmp_path, parts, monkeypatch):
    monkeypatch.setattr(index_module, "MAX_SEGMENTS", 2)
    passages, table = parts
    path = tmp_path / "idx"
    build(passages[:6], table).save(path)
    for lo in (6, 12, 18):
        add(Index.load(path), passages[lo:lo + 6], table).save(path, append=True)
    m = manifest(path)
    assert m["format_version"] == 2 and "segments" not in m  # the third add compacted
    assert not any(n.startswith("seg-") for n in os.listdir(current(path)))
    assert_same_index(Index.load(path), build(passages[:24], table))


def test_nothing_new_links_everything_and_an_edit_writes_whole(tmp_path, parts):
    passages, table = parts
    path = two_generations(tmp_path, passages, table)
    same = Index.load(path)
    same.save(path, append=True)  # what the GRAG build does: no new rows
    assert manifest(path)["segments"] == 1
    assert_same_index(Index.load(path), same)
    smaller, _ = delete_passages(Index.load(path), ids=[0, 11], extractor=TextExtractor(table),
                                 encoder=HashingEncoder(), graph_cfg=CFG)
    smaller.save(path, append=True)  # not a growth of the current generation: whole
    assert manifest(path)["format_version"] == 2
    assert_same_index(Index.load(path), smaller)


def test_a_generation_without_row_counts_is_written_whole(tmp_path, parts):
    passages, table = parts
    path = tmp_path / "idx"
    build(passages[:10], table).save(path)
    m = manifest(path)
    del m["nnz_raw"]  # a manifest written before generations recorded it
    (path / "index.json").write_text(json.dumps(m))
    grown = add(Index.load(path), passages[10:], table)
    grown.save(path, append=True)
    assert manifest(path)["format_version"] == 2
    assert_same_index(Index.load(path), grown)


def test_damaged_segmented_generations_are_refused(tmp_path, parts):
    passages, table = parts
    path = two_generations(tmp_path, passages, table)
    m = manifest(path)
    (path / "index.json").write_text(json.dumps({**m, "segments": "two"}))
    with pytest.raises(IndexFormatError, match=r"segments must be an int in \[0, 16\] \(got 'two'\)"):
        Index.load(path)
    (path / "index.json").write_text(json.dumps({**m, "segments": 2}))
    with pytest.raises(IndexFormatError, match="seg-002"):
        Index.load(path)
    (path / "index.json").write_text(json.dumps(m))
    (current(path) / "synonyms.safetensors").unlink()
    with pytest.raises((IndexFormatError, FileNotFoundError), match="synonyms"):
        Index.load(path)
