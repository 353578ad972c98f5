import pytest

from hpengine.config import ExtractorConfig
from hpengine.graph import Passage, builtin_corpus_path, load_corpus
from hpengine.models import ExtractedFact, FastExtractor, entity_key, merge_entities, normalize_entity
from hpengine.models._extract_fast import make_standalone


@pytest.fixture(scope="module")
def extractor():
    # one spaCy load for the module (about 1 s)
    return FastExtractor(ExtractorConfig())


@pytest.mark.parametrize("raw, expected", [
    ('  "The  Beatles\'s" ', "Beatles"),
    ("Foo (film)", "Foo (film)"),
    ("[Bar (band)]", "Bar (band)"),
    ("(Foo)", "Foo"),
    ("Foo)", "Foo"),
    ("U.S.", "U.S."),
    ("John Smith Jr.", "John Smith Jr."),
    ("Paris.", "Paris"),
    ("“Changed It”", "Changed It"),
    ("the Hague", "Hague"),
    ("Jones'", "Jones"),
    ("King of Italy's", "King of Italy"),
    ("St. Maurice's Abbey", "St. Maurice's Abbey"),
    ("   ", ""),
    ("...", ""),
    ("The", "The"),
])
def test_normalize_entity(raw, expected):
    assert normalize_entity(raw) == expected


def test_entity_key_merges_case_and_surface_forms():
    assert entity_key("the BEATLES") == entity_key("Beatles's") == "beatles"
    assert merge_entities(["the Beatles", "BEATLES", "", "x"], first="Foo (film)") == ["Foo (film)", "Beatles", "x"]
    with pytest.raises(TypeError, match=r"entity name must be a str \(got int 3\)"):
        normalize_entity(3)


@pytest.mark.parametrize("sentence, title, expected", [
    ("He was born in Oslo.", "Ann Berg (painter)", "Ann Berg (painter) was born in Oslo."),
    ("Her father was a pilot.", "Ann Berg", "Ann Berg's father was a pilot."),
    ("Its score was written by Oren Daly.", "Glass Orchard", "Glass Orchard's score was written by Oren Daly."),
    ("It's a river.", "Wend", "Wend is a river."),
    ("This is a bridge.", "Vell Bridge", "Vell Bridge is a bridge."),
    ("This film won prizes.", "Foo (film)", "Foo (film): This film won prizes."),  # determiner
    ("Foo won two prizes.", "Foo (film)", "Foo won two prizes."),  # base title mentioned
    ("Lambert married Ada.", "Lambert, Count of Ost", "Lambert married Ada."),
    ("The film won two prizes.", "Foo (film)", "Foo (film): The film won two prizes."),
    ("Hence the name.", "Foo", "Foo: Hence the name."),  # "He" must match a whole word
    ("He was born in Oslo.", "", "He was born in Oslo."),
])
def test_make_standalone(sentence, title, expected):
    assert make_standalone(sentence, title) == expected


def test_extract_schema_order_and_rules(extractor):
    passages = [
        Passage("Ilse Marrow", "Ilse Marrow was a film director from Caldoria. She was born in Port Calder "
                               "in 1921. Ok. Her films include The Salt Lanterns."),
        Passage("Empty", "Tiny."),
        Passage("Glass Orchard (film)", "The film was directed by Tomas Venn. It has three acts."),
    ]
    out = extractor.extract(passages)
    assert len(out) == 3 and out[1] == []  # sentences shorter than min_fact_chars are skipped
    assert all(isinstance(f, ExtractedFact) for facts in out for f in facts)
    texts = [f.text for f in out[0]]
    assert texts == ["Ilse Marrow was a film director from Caldoria.", "Ilse Marrow was born in Port Calder in 1921.",
                     "Ilse Marrow's films include The Salt Lanterns."]
    for fact in out[0]:
        assert fact.entities[0] == "Ilse Marrow"  # the title is always an entity, first
        assert len({entity_key(e) for e in fact.entities}) == len(fact.entities)
    assert "Port Calder" in out[0][1].entities
    assert "1921" in out[0][1].entities  # DATE is kept by default
    assert out[2][0].text == "Glass Orchard (film): The film was directed by Tomas Venn."
    assert out[2][0].entities[0] == "Glass Orchard (film)"
    assert out[2][1].text == "Glass Orchard (film) has three acts."
    assert "three" not in out[2][1].entities  # CARDINAL is excluded by default
    assert extractor.extract([]) == []


def test_excluded_labels_and_min_chars_are_configurable():
    cfg = ExtractorConfig(ner_labels_excluded=["DATE", "GPE", "PERSON"], min_fact_chars=20)
    out = FastExtractor(cfg).extract([Passage("Ann Berg", "Ann Berg was born in Oslo in 1921. Short one here.")])
    assert [f.text for f in out[0]] == ["Ann Berg was born in Oslo in 1921."]
    assert out[0][0].entities == ["Ann Berg"]


def test_extract_is_batch_invariant_on_builtin_corpus(extractor):
    passages = load_corpus(builtin_corpus_path()).passages
    whole = extractor.extract(passages)
    split = extractor.extract(passages[:7]) + extractor.extract(passages[7:])
    assert whole == split
    assert all(facts for facts in whole)
    assert sum(len(f) for f in whole) >= 2 * len(passages)


def test_bad_input(extractor):
    with pytest.raises(TypeError, match=r"passages\[1\] must have str fields 'title' and 'text' \(got dict\)"):
        extractor.extract([Passage("a", "b"), {"title": "a", "text": "b"}])
    with pytest.raises(TypeError, match=r"cfg must be an ExtractorConfig \(got dict\)"):
        FastExtractor({})
    with pytest.raises(ImportError, match=r"spaCy model 'no_such_model_xyz' is not installed"):
        FastExtractor(ExtractorConfig(spacy_model="no_such_model_xyz")).nlp


def test_sentence_entities_match_spacy_sent_ents(extractor):
    # the one-pass grouping is the linear twin of spaCy's per-sentence sent.ents (quadratic)
    from hpengine.models._extract_fast import sentence_entities

    text = " ".join(p.text for p in load_corpus(builtin_corpus_path()).passages[:20])
    doc = extractor.nlp(text)
    got = [(s.start, s.end, names) for s, names in sentence_entities(doc, frozenset({"CARDINAL"}))]
    want = [(s.start, s.end, [e.text for e in s.ents if e.label_ != "CARDINAL"]) for s in doc.sents]
    assert got == want and any(names for *_, names in got)


@pytest.mark.parametrize("limit", [1, 5, 17, 64])
def test_split_text_pieces_rejoin_within_limit(limit):
    from hpengine.models._extract_fast import split_text

    text = "Alpha was born in Oslo. He moved.\nBeta! Gamma? Delta ends here. " * 7 + "tail-without-spaces" * 3
    pieces = split_text(text, limit)
    assert "".join(pieces) == text and all(0 < len(p) <= limit for p in pieces)


def test_text_over_the_model_limit_is_split_not_refused(monkeypatch):
    import hpengine.models._extract_fast as fast

    ex = FastExtractor(ExtractorConfig())
    text = "Ann Berg was born in Oslo. She directed Solo in Bergen. " * 40  # 2240 characters
    whole = ex.extract([Passage("Ann Berg", text)])[0]
    monkeypatch.setattr(fast, "PIECE_CHARS", 300)  # pieces cut at sentence ends: same sentences
    pieces = ex.extract([Passage("Ann Berg", text), Passage("Solo", "Solo is a film.")])
    assert [f.text for f in pieces[0]] == [f.text for f in whole] and len(whole) == 80
    assert [f.entities for f in pieces[0]] == [f.entities for f in whole]
    assert pieces[1][0].text == "Solo is a film."
