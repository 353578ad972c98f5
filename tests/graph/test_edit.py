"""delete_passages / update_passages equal a from-scratch build on the edited corpus: every text and
tensor of the Index, the expanded incidence, degrees and the transition matrix."""
import random

import pytest
import torch

from hpengine.config import GraphConfig
from hpengine.errors import UserError
from hpengine.graph import Passage, add_passages, build_index, delete_passages, find_passages, update_passages
from hpengine.graph._edit import _MIN_ROWS
from hpengine.models import ExtractedFact
from hpengine.testing import with_devices
from hpengine.testing._fakes import HashingEncoder

TABLE = {
    "Alpha": [("Alpha was directed by Bea Stone.", ["Alpha", "Bea Stone"]),
              ("Alpha premiered in 1999.", ["Alpha", "1999"])],
    "Bea Stone": [("Bea Stone was born in Kell.", ["Bea Stone", "Kell"])],
    "Kell": [("Kell lies on the river Oro.", ["kell", "Oro"]), ("Kell is a town.", ["KELL"])],
    "Oro": [("The Oro river flows into the sea.", ["Oro River", "sea"])],
    "Empty": [],
}
TITLES = list(TABLE)
CFG = GraphConfig(synonym_threshold=0.55, synonym_max_per_entity=1)


class TextExtractor:
    """Facts by passage text (``table[text]``, else ``table[title]``); records what it read."""

    def __init__(self, table: dict):
        self.table = table
        self.seen: list = []

    def extract(self, passages: list, progress: bool = False) -> list:
        self.seen.extend(p.title for p in passages)
        return [[ExtractedFact(t, list(e)) for t, e in self.table.get(p.text, self.table.get(p.title, []))]
                for p in passages]


def passages(*titles):
    return [Passage(t, f"text of {t}") for t in titles]


def build(corpus, table=TABLE, cfg=CFG):
    index, _ = build_index(corpus, extractor=TextExtractor(table), encoder=HashingEncoder(), graph_cfg=cfg)
    return index


def models(table=TABLE):
    return dict(extractor=TextExtractor(table), encoder=HashingEncoder())


def assert_same_index(got, want):
    """Every text and tensor of two indexes, and what is derived from them, equal."""
    assert got.passages == want.passages
    assert got.facts == want.facts
    assert got.entities == want.entities
    for name in ("fact_passage", "fact_entity_raw", "synonyms", "fact_emb", "entity_emb", "passage_emb"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.dtype == b.dtype and torch.equal(a, b), name
    assert torch.equal(got.graph.fact_entity, want.graph.fact_entity)
    assert torch.equal(got.graph.entity_degree(), want.graph.entity_degree())
    assert torch.equal(got.graph.transition().to_dense(), want.graph.transition().to_dense())


# ----------------------------------------------------------------------------- delete
@pytest.mark.parametrize("gone", [["Alpha"], ["Bea Stone"], ["Kell"], ["Oro", "Empty"], ["Alpha", "Kell"]])
def test_delete_equals_scratch(gone):
    index = build(passages(*TITLES))
    kw = models()
    smaller, report = delete_passages(index, titles=gone, graph_cfg=CFG, **kw)
    assert_same_index(smaller, build(passages(*[t for t in TITLES if t not in gone])))
    assert report["deleted_passages"] == len(gone) and report["passages"] == len(TITLES) - len(gone)
    # only passages holding a kept entity's new first mention were read again; nothing of the rest embedded
    assert set(kw["extractor"].seen) <= set(TITLES) - set(gone)
    assert kw["encoder"].texts_encoded == report["renamed_entities"]


def test_a_deleted_first_mention_is_read_again_and_the_name_follows_it():
    index = build(passages(*TITLES))
    assert "Kell" in index.entities  # first written "Kell" (passage Bea Stone), later "kell", "KELL"
    kw = models()
    smaller, report = delete_passages(index, titles=["Bea Stone"], graph_cfg=CFG, **kw)
    assert "kell" in smaller.entities and "Kell" not in smaller.entities
    assert kw["extractor"].seen == ["Kell"] and report["reread_passages"] == 1 and report["renamed_entities"] == 1
    assert_same_index(smaller, build(passages("Alpha", "Kell", "Oro", "Empty")))


def test_delete_by_id_and_by_record():
    index = build(passages(*TITLES))
    by_id, _ = delete_passages(index, ids=[1, 3], graph_cfg=CFG, **models())
    by_record, _ = delete_passages(index, passages=[Passage("Bea Stone", "text of Bea Stone"),
                                                    Passage("Oro", "another text, one passage has the title")],
                                   graph_cfg=CFG, **models())
    want = build(passages("Alpha", "Kell", "Empty"))
    assert_same_index(by_id, want)
    assert_same_index(by_record, want)


def test_delete_needs_no_models_when_no_name_moves():
    index = build(passages(*TITLES))
    smaller, report = delete_passages(index, titles=["Oro"], graph_cfg=CFG)
    assert report["reread_passages"] == 0
    assert_same_index(smaller, build(passages("Alpha", "Bea Stone", "Kell", "Empty")))
    with pytest.raises(ValueError, match="extractor="):
        delete_passages(index, titles=["Bea Stone"], graph_cfg=CFG)


def test_delete_then_add_round_trip():
    cfg = GraphConfig(synonym_threshold=0.55, synonym_max_per_entity=0)  # add revisits no cap: none binds
    index = build(passages(*TITLES), cfg=cfg)
    smaller, _ = delete_passages(index, titles=["Alpha", "Kell"], graph_cfg=cfg, **models())
    grown, _ = add_passages(smaller, passages("Alpha", "Kell"), graph_cfg=cfg, **models())
    assert_same_index(grown, build(passages("Bea Stone", "Oro", "Empty", "Alpha", "Kell"), cfg=cfg))
    back, _ = delete_passages(grown, titles=["Alpha", "Kell"], graph_cfg=cfg, **models())
    assert_same_index(back, smaller)


@with_devices
def test_edits_stay_on_the_index_device(device):
    table = {**TABLE, "new Kell": [("KELL is a city on the Oro.", ["KELL", "Oro", "Alpha River"])]}
    index, _ = build_index(passages(*TITLES), extractor=TextExtractor(table), encoder=HashingEncoder(), graph_cfg=CFG,
                           device=device)
    smaller, _ = delete_passages(index, titles=["Bea Stone"], graph_cfg=CFG, **models(table))
    updated, _ = update_passages(smaller, [Passage("Kell", "new Kell")], graph_cfg=CFG, **models(table))
    want, _ = build_index([*passages("Alpha"), Passage("Kell", "new Kell"), *passages("Oro", "Empty")],
                          extractor=TextExtractor(table), encoder=HashingEncoder(), graph_cfg=CFG, device=device)
    assert updated.device == torch.device(device) and updated.synonyms.device == torch.device(device)
    assert_same_index(updated, want)


# ----------------------------------------------------------------------------- update
def test_update_equals_scratch():
    table = {**TABLE, "new Kell": [("KELL is a city on the Oro.", ["KELL", "Oro", "Alpha River"])],
             "new Alpha": [("Alpha is lost.", ["alpha", "Sea"])]}
    index = build(passages(*TITLES), table)
    new = [Passage("Kell", "new Kell"), Passage("Alpha", "new Alpha")]
    kw = models(table)
    updated, report = update_passages(index, new, graph_cfg=CFG, **kw)
    corpus = [Passage("Alpha", "new Alpha"), *passages("Bea Stone"), Passage("Kell", "new Kell"),
              *passages("Oro", "Empty")]
    assert_same_index(updated, build(corpus, table))
    assert report["updated_passages"] == 2 and report["unchanged_passages"] == 0
    # the replaced passages extracted (first, in index order), then the one re-read for a moved first mention
    assert kw["extractor"].seen[:2] == ["Alpha", "Kell"]


def test_update_by_id_may_retitle_and_unchanged_records_change_nothing():
    table = {**TABLE, "Delta text": [("Delta joins Oro.", ["Delta", "Oro"])]}
    index = build(passages(*TITLES), table)
    updated, report = update_passages(index, [Passage("Delta", "Delta text"), *passages("Oro")], ids=[2, 3],
                                      graph_cfg=CFG, **models(table))
    assert report["unchanged_passages"] == 1
    assert_same_index(updated, build([*passages("Alpha", "Bea Stone"), Passage("Delta", "Delta text"),
                                      *passages("Oro", "Empty")], table))


# ----------------------------------------------------------------------------- the synonym cap
def test_a_deleted_neighbour_admits_the_next_one_under_the_cap():
    """Cap 1: "Kell" keeps only its nearest name. Deleting it lets a farther name in, which a scratch
    build finds; keeping the old pairs would lose that pair."""
    table = {"A": [("A is in Kell Town.", ["Kell Town"])], "B": [("B is in Kell.", ["Kell"])],
             "C": [("C is in Kell Towns.", ["Kell Towns"])], "D": [("D is far.", ["Zed"])]}
    cfg = GraphConfig(synonym_threshold=0.3, synonym_max_per_entity=1)
    index = build(passages("A", "B", "C", "D"), table, cfg)
    names = lambda idx: {(idx.entities[a], idx.entities[b]) for a, b in idx.synonyms.t().tolist()}  # noqa: E731
    smaller, report = delete_passages(index, titles=["A"], graph_cfg=cfg, **models(table))
    scratch = build(passages("B", "C", "D"), table, cfg)
    assert ("Kell", "Kell Towns") in names(scratch) and ("Kell", "Kell Towns") not in names(index)
    assert report["requeried_entities"] >= 1
    assert_same_index(smaller, scratch)


def test_an_added_name_pushes_one_out_under_the_cap():
    table = {"A": [("A is in Kell.", ["Kell"])], "B": [("B is in Kell Towns.", ["Kell Towns"])],
             "new": [("A is in Kell Town.", ["Kell Town", "Kell"])]}
    cfg = GraphConfig(synonym_threshold=0.3, synonym_max_per_entity=1)
    index = build(passages("A", "B"), table, cfg)
    updated, _ = update_passages(index, [Passage("B", "new")], graph_cfg=cfg, **models(table))
    assert_same_index(updated, build([Passage("A", "text of A"), Passage("B", "new")], table, cfg))


# ----------------------------------------------------------------------------- random corpora
WORDS = ["kell", "oro", "bea", "stone", "alpha", "delta", "sea", "port", "town", "river", "grey", "north"]


def _random_table(rng: random.Random, num_passages: int, num_names: int) -> tuple[list, dict]:
    names = sorted({" ".join(rng.sample(WORDS, rng.randint(1, 2))) + rng.choice(["", "s", " 2", "er"])
                    for _ in range(num_names)})
    table, corpus = {}, []
    for i in range(num_passages):
        text = f"passage {i} {rng.random():.6f}"
        facts = []
        for j in range(rng.randint(0, 3)):
            mentions = [rng.choice([str.title, str.upper, str.lower])(rng.choice(names))
                        for _ in range(rng.randint(1, 4))]
            facts.append((f"fact {j} of {text}", mentions))
        table[text] = facts
        corpus.append(Passage(f"P{i}", text))
    return corpus, table


@pytest.mark.parametrize("seed", range(8))
def test_random_edits_equal_scratch(seed):
    rng = random.Random(seed)
    corpus, table = _random_table(rng, rng.randint(3, 9), rng.choice([8, 20, 90]))
    cfg = GraphConfig(synonym_threshold=rng.choice([0.4, 0.55]), synonym_max_per_entity=rng.choice([0, 1, 2, 4]),
                      synonym_block_size=rng.choice([5, 2048]))
    index = build(corpus, table, cfg)
    gone = sorted(rng.sample(range(len(corpus)), rng.randint(1, len(corpus) - 1)))
    smaller, _ = delete_passages(index, ids=gone, graph_cfg=cfg, **models(table))
    rest = [p for i, p in enumerate(corpus) if i not in gone]
    assert_same_index(smaller, build(rest, table, cfg))
    extra, extra_table = _random_table(rng, len(rest), 20)
    targets = sorted(rng.sample(range(len(rest)), rng.randint(1, len(rest))))
    table = {**table, **extra_table}
    new = [Passage(rest[i].title, extra[k].text) for k, i in enumerate(targets)]
    updated, _ = update_passages(smaller, new, graph_cfg=cfg, **models(table))
    edited = [Passage(p.title, extra[targets.index(i)].text) if i in targets else p for i, p in enumerate(rest)]
    assert_same_index(updated, build(edited, table, cfg))


def test_many_names_search_again_in_padded_blocks():
    """Over _MIN_ROWS names: the names searched again go in padded blocks, still equal to scratch."""
    rng = random.Random(7)
    corpus, table = _random_table(rng, 40, 200)
    cfg = GraphConfig(synonym_threshold=0.45, synonym_max_per_entity=2)
    index = build(corpus, table, cfg)
    assert index.num_entities > _MIN_ROWS
    smaller, report = delete_passages(index, ids=[0, 5, 17], graph_cfg=cfg, **models(table))
    assert 0 < report["requeried_entities"] < smaller.num_entities
    assert_same_index(smaller, build([p for i, p in enumerate(corpus) if i not in (0, 5, 17)], table, cfg))


# ----------------------------------------------------------------------------- errors
def test_bad_selections_are_refused_before_any_work():
    index = build(passages(*TITLES))
    kw = models()
    cases = [
        (dict(titles=["Nowhere"]), "name no passage"),
        (dict(ids=[5]), r"positions 0\.\.4"),
        (dict(ids=[-1]), r"positions 0\.\.4"),
        (dict(passages=[Passage("Nowhere", "x")]), "no passage of the index has title 'Nowhere'"),
        ({}, "nothing to select"),
        (dict(titles=TITLES), "would leave the index empty"),
    ]
    for kwargs, message in cases:
        with pytest.raises(UserError, match=message):
            delete_passages(index, graph_cfg=CFG, **kwargs, **kw)
    assert kw["extractor"].seen == [] and kw["encoder"].calls == 0
    twice = build([Passage("Kell", "one"), Passage("Kell", "two")])
    with pytest.raises(UserError, match="names 2 passages"):
        find_passages(twice, passages=[Passage("Kell", "three")])
    assert find_passages(twice, titles=["Kell"]) == [0, 1]


def test_bad_updates_are_refused_before_any_work():
    index = build(passages(*TITLES))
    kw = models()
    cases = [
        (([],), {}, "at least one passage"),
        (([Passage("Nowhere", "x")],), {}, "names no passage"),
        (([Passage("Kell", "x"), Passage("Kell", "y")],), {}, "updated twice"),
        (([Passage("Kell", "x")],), dict(ids=[1, 2]), "one per record"),
        (([Passage("Oro", "text of Oro")],), dict(ids=[2]), "passages 2 and 3 equal"),
    ]
    for args, kwargs, message in cases:
        with pytest.raises(UserError, match=message):
            update_passages(index, *args, graph_cfg=CFG, **kwargs, **kw)
    assert kw["extractor"].seen == [] and kw["encoder"].calls == 0
    with pytest.raises(ValueError, match="encoder"):
        update_passages(index, [Passage("Kell", "x")], extractor=TextExtractor(TABLE), encoder=HashingEncoder(dim=32))


def test_another_extractor_cannot_re_read_names():
    index = build(passages(*TITLES))
    other = {**TABLE, "Kell": [("Kell is elsewhere.", ["Kell"])]}
    with pytest.raises(UserError, match="extracts to other facts"):
        delete_passages(index, titles=["Bea Stone"], graph_cfg=CFG, **models(other))


def test_grag_parts_are_dropped_and_marked_stale():
    index = build(passages(*TITLES))
    index.grag = object()  # stands for GRAG parts: the edit must not carry them over
    smaller, _ = delete_passages(index, titles=["Oro"], graph_cfg=CFG)
    assert smaller.grag is None and "hpengine grag-build" in smaller.meta["grag_stale"]


def test_names_searched_again_round_as_the_full_search():
    """A BLAS rounds a product row differently when the matmul has few rows (MKL: under 12); a
    name searched again alone must still see the cosines the full search saw. With eta set to a
    cosine that a one-row product rounds down, only a row computed as in the full search keeps it."""
    from hpengine.graph._builder import _synonyms_of
    from hpengine.graph._edit import _search_rows

    emb = torch.nn.functional.normalize(torch.randn(200, 48, generator=torch.Generator().manual_seed(0)), dim=1)
    full = emb @ emb.T
    lower = [(i, j) for i in range(40) for j in range(200)
             if i != j and float((emb[i:i + 1] @ emb.T)[0, j]) < float(full[i, j])]
    if not lower:
        pytest.skip("this BLAS rounds a one-row product as the full one")
    i, j = max(lower, key=lambda ij: float(full[ij]))
    cfg = GraphConfig(synonym_threshold=float(full[i, j]), synonym_max_per_entity=0)
    want = _synonyms_of(emb, torch.ones(200, dtype=torch.bool), 0, cfg)
    got = _search_rows(emb, torch.arange(200), torch.tensor([i]), cfg)
    assert (i, j) in set(map(tuple, got.t().tolist()))
    assert torch.equal(got, torch.unique(want[:, want[0] == i], dim=1))


def test_an_approximate_search_runs_whole(monkeypatch):
    """Above synonym_exact_max_keys (or with an approximate backend) the pairs are a function of every
    name, so an edit runs the build's full search."""
    from hpengine.graph import _edit

    assert _edit._is_exact(GraphConfig(synonym_backend="auto", synonym_exact_max_keys=10), 10)
    assert not _edit._is_exact(GraphConfig(synonym_backend="auto", synonym_exact_max_keys=10), 11)
    assert not _edit._is_exact(GraphConfig(synonym_backend="nndescent"), 10)
    assert _edit._is_exact(GraphConfig(synonym_backend="faiss"), 10**6)
    index = build(passages(*TITLES))
    monkeypatch.setattr(_edit, "_is_exact", lambda cfg, num_keys: False)  # the torch search stands for it
    smaller, report = delete_passages(index, titles=["Oro"], graph_cfg=CFG)
    assert report["requeried_entities"] == sum(not any(c.isdigit() for c in e) for e in smaller.entities)
    assert_same_index(smaller, build(passages("Alpha", "Bea Stone", "Kell", "Empty")))
