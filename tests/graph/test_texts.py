"""Compact text columns of a loaded index, and the entity lookup by name key, against plain lists
and a dict."""
import random

import pytest
import torch

import hpengine.graph._lookups as lookups_mod
import hpengine.graph._texts as texts_mod
from hpengine.graph import Index, IndexLookups, Passage, PassageColumn, TextColumn
from hpengine.models import entity_key

STRINGS = ["Paris", "", "Zürich 北京 🙂", "a\nb \"quoted\" \\", "x" * 1000, "é"]


def test_text_column_reads_like_the_list():
    col = TextColumn.from_strings(STRINGS)
    assert len(col) == len(STRINGS)
    assert [col[i] for i in range(len(STRINGS))] == STRINGS
    assert [col[-i] for i in range(1, len(STRINGS) + 1)] == [STRINGS[-i] for i in range(1, len(STRINGS) + 1)]
    for sl in (slice(None), slice(1, 4), slice(None, None, -2), slice(10, 20), slice(-3, None)):
        assert col[sl] == STRINGS[sl]
    assert list(col) == STRINGS and col == STRINGS and col != STRINGS[:-1] and col != "Paris"
    assert col + ["new"] == STRINGS + ["new"] and ["new"] + col == ["new"] + STRINGS
    assert "Paris" in col and "Lyon" not in col and col.index("é") == 5
    assert col.nbytes == len("".join(STRINGS).encode()) + 8 * (len(STRINGS) + 1)
    with pytest.raises(IndexError, match="out of range"):
        col[len(STRINGS)]
    with pytest.raises(TypeError):
        hash(col)


def test_iteration_across_blocks_and_concat(monkeypatch):
    monkeypatch.setattr(texts_mod, "_ITER_BLOCK", 4)
    rng = random.Random(0)
    strings = ["".join(rng.choice("aé北 ") for _ in range(rng.randrange(6))) for _ in range(23)]
    col = TextColumn.from_strings(strings)
    assert list(col) == strings
    parts = [TextColumn.from_strings(strings[a:b]) for a, b in ((0, 5), (5, 5), (5, 23))]
    joined = TextColumn.concat(parts)
    assert joined == col and list(joined) == strings and TextColumn.concat([col]) is col
    assert TextColumn.from_strings([]) == [] and len(TextColumn.from_strings([])) == 0


def test_passage_column():
    passages = [Passage(f"T{i}", s) for i, s in enumerate(STRINGS)]
    col = PassageColumn.from_passages(passages)
    assert list(col) == passages and col == passages and col[2] == passages[2] and col[-1] == passages[-1]
    assert col[1:3] == passages[1:3] and list(col.titles) == [p.title for p in passages]
    both = PassageColumn.concat([PassageColumn.from_passages(passages[:2]), PassageColumn.from_passages(passages[2:])])
    assert both == col
    assert set(col) == set(passages)  # items are hashable Passages
    with pytest.raises(ValueError, match="titles"):
        PassageColumn(TextColumn.from_strings(["a"]), TextColumn.from_strings([]))


def test_loaded_index_holds_columns_equal_to_what_was_saved(builtin_index, tmp_path):
    index = builtin_index[0]
    index.save(tmp_path / "idx")
    loaded = Index.load(tmp_path / "idx")
    assert isinstance(loaded.facts, TextColumn) and isinstance(loaded.passages, PassageColumn)
    assert loaded.facts == list(index.facts) and loaded.entities == list(index.entities)
    assert list(loaded.passages) == list(index.passages)
    loaded.save(tmp_path / "again")  # a loaded index saves like a built one
    assert Index.load(tmp_path / "again").facts == loaded.facts


class _Names:
    """What IndexLookups reads of an index, with chosen entity names."""

    def __init__(self, entities, titles):
        self.entities, self.passages = entities, [Passage(t, "") for t in titles]
        self.num_entities, self.num_passages, self.num_facts = len(entities), len(titles), 0
        self.device = torch.device("cpu")
        self.fact_passage = torch.zeros(0, dtype=torch.int64)


def _reference(entities):
    ref = {}
    for i, name in enumerate(entities):  # the last id wins for equal keys
        ref[entity_key(name)] = i
    return ref


@pytest.mark.parametrize("collide", [False, True])
def test_entity_lookup_equals_a_dict_of_keys(monkeypatch, collide):
    rng = random.Random(1)
    stems = ["Paris", "paris", "The Beatles", "BEATLES", "Zürich", "Lyon", "a", "A"]
    entities = [rng.choice(stems) + str(rng.randrange(4)) for _ in range(60)]
    titles = entities[::3] + ["nowhere", "PARIS1", ""]
    if collide:  # keys hash alike by length: the check against the entity's own key decides
        monkeypatch.setattr(lookups_mod, "_hash", lambda key: len(key) % 3)
    look = IndexLookups(_Names(entities, titles))
    ref = _reference(entities)
    queries = titles + [e.upper() for e in entities] + ["", "unknown"]
    want = [ref.get(entity_key(q), -1) if q else -1 for q in queries]
    assert look.entity_ids(queries).tolist() == want
    assert look.title_entity.tolist() == [ref.get(entity_key(t), -1) if t else -1 for t in titles]
    assert [look.entity_id(entity_key(q)) for q in queries if q] == [w for q, w in zip(queries, want) if q]
