import copy
import json
from types import SimpleNamespace

import pytest
import torch

from hpengine.config import ExtractorConfig
from hpengine.graph import Passage
from hpengine.models import PROMPT_VERSION, ExtractedFact, FastExtractor, LLMExtractor, parse_extraction
from hpengine.models._extract_llm import CACHE_FILE, build_prompt, cache_key
from hpengine.testing._tiny_lm import build_tiny_pair

GOOD = ('{"entities": ["Ilse Marrow", "Port Calder", "1921"], "facts": ['
        '{"fact": "Ilse Marrow was born in Port Calder in 1921.", "entities": ["Ilse Marrow", "Port Calder"]}, '
        '{"fact": "Ilse Marrow directed The Salt Lanterns.", "entities": ["The Salt Lanterns"]}]}')


# ----------------------------------------------------------------------------------- parser
def test_parse_good_output():
    parsed = parse_extraction(GOOD, "Ilse Marrow")
    assert parsed.status == "ok" and parsed.reason == ""
    assert [f.text for f in parsed.facts] == ["Ilse Marrow was born in Port Calder in 1921.",
                                              "Ilse Marrow directed The Salt Lanterns."]
    # own entities + passage entities named in the text ("1921") + the title, deduplicated
    assert parsed.facts[0].entities == ["Ilse Marrow", "Port Calder", "1921"]
    assert parsed.facts[1].entities == ["Ilse Marrow", "Salt Lanterns"]
    assert parsed.entities == ["Ilse Marrow", "Port Calder", "1921", "Salt Lanterns"]  # fact entity added


@pytest.mark.parametrize("raw", [
    "Here is the JSON:\n```json\n" + GOOD + "\n```\nDone.",
    GOOD + "\n\n{\"entities\": []}",  # only the first object counts
    GOOD.replace('"fact"', '"fact"\n'),
])
def test_parse_fences_and_surrounding_text(raw):
    parsed = parse_extraction(raw, "Ilse Marrow")
    assert parsed.status == "ok" and len(parsed.facts) == 2


@pytest.mark.parametrize("raw, texts, reason", [
    ('{"entities": ["A",], "facts": [{"fact": "A is big.", "entities": ["A",],},],}', ["A is big."], "trailing"),
    ("{'entities': ['A'], 'facts': [{'fact': 'A is \"big\".', 'entities': ['A']}]}", ['A is "big".'], "quotes"),
    ('{"entities": ["A"], "facts": [{"fact": "A is big.", "entities": ["A"]}, {"fact": "A was bo',
     ["A is big."], "truncated"),
    ('{"entities": ["A"], "facts": [{"fact": "A is big.", "entities": ["A"]}, {"fact": "A sings.", "entities": ["A"]',
     ["A is big.", "A sings."], "truncated"),
    ('{"entities": ["A"], "facts": ["A is big.", {"fact": "A sings.", "entities": ["A", 7, null]}]}',
     ["A is big.", "A sings."], "string"),
])
def test_parse_repairs(raw, texts, reason):
    parsed = parse_extraction(raw, "T", standalone=False)
    assert parsed.status == "repaired" and reason in parsed.reason
    assert [f.text for f in parsed.facts] == texts
    assert all(f.entities[0] == "T" for f in parsed.facts)  # the title is always an entity


def test_parse_numbers_and_empty_facts():
    parsed = parse_extraction('{"entities": [1921], "facts": [{"fact": "  ", "entities": []}, '
                              '{"fact": "It was 1921.", "entities": [1921]}]}', "T", standalone=False)
    assert parsed.status == "repaired"  # the number entity was converted
    assert parsed.facts == [ExtractedFact("It was 1921.", ["T", "1921"])]


def test_parse_standalone_and_whole_word_mentions():
    raw = ('{"entities": ["Art", "Oslo"], "facts": [{"fact": "She was born in Oslo.", "entities": []}, '
           '{"fact": "The party was held in 1950.", "entities": []}, {"fact": "Ann Berg sang.", "entities": []}]}')
    parsed = parse_extraction(raw, "Ann Berg")
    assert parsed.status == "ok"
    assert [f.text for f in parsed.facts] == ["Ann Berg was born in Oslo.", "Ann Berg: The party was held in 1950.",
                                              "Ann Berg sang."]
    assert parsed.facts[0].entities == ["Ann Berg", "Oslo"]
    assert parsed.facts[1].entities == ["Ann Berg"]  # "Art" is not a word of "party"
    nested = parse_extraction('{"entities": ["Coney Island", "Coney Island Baby"], "facts": ['
                              '{"fact": "Coney Island Baby is set on Coney Island.", "entities": []}, '
                              '{"fact": "Coney Island Baby is a film.", "entities": []}]}', "Coney Island Baby (film)")
    assert nested.facts[0].entities == ["Coney Island Baby (film)", "Coney Island Baby", "Coney Island"]
    assert nested.facts[1].entities == ["Coney Island Baby (film)", "Coney Island Baby"]  # not the nested name
    assert parse_extraction(raw, "Ann Berg", standalone=False).facts[0].text == "She was born in Oslo."


@pytest.mark.parametrize("raw, reason", [
    ("", "no JSON object"),
    ("I cannot help with that.", "no JSON object"),
    ("{{{{ ]]]", "unparseable"),
    ('{"entities": ["A"]}', "no 'facts' list"),
    ('{"facts": "A is big."}', "no 'facts' list"),
    ('{"entities": ["A"], "facts": [{"fact": ""}, {"text": 3}]}', "no fact with text"),
    ('{"entities": ["A"], "facts": [{"fact": "A is b', "no 'facts' list"),  # cut back to {"entities": ["A"]}
])
def test_parse_rejects(raw, reason):
    parsed = parse_extraction(raw, "T")
    assert parsed.status == "rejected" and reason in parsed.reason and parsed.facts == []


# ----------------------------------------------------------------------------------- plumbing
PASSAGES = [Passage("Ilse Marrow", "Ilse Marrow was a director. She was born in Port Calder."),
            Passage("Port Calder", "Port Calder is a harbour city. It lies on the River Wend."),
            Passage("River Wend", "The River Wend is a river in Caldoria."),
            Passage("Sarn", "Sarn is the capital of Caldoria."),
            Passage("Halden", "Halden is a town on the River Wend.")]


def _tiny_lm():
    return build_tiny_pair([build_prompt(p.title, p.text) for p in PASSAGES], vocab_size=600, max_positions=4096)


@pytest.fixture(scope="module")
def _tiny():
    return _tiny_lm()


@pytest.fixture
def tiny(_tiny):
    return copy.deepcopy(_tiny[0]), copy.deepcopy(_tiny[1])


class CountingLM:
    """Wraps a model: counts generate() calls and can fail after ``fail_after`` calls."""

    def __init__(self, model, fail_after=None):
        self.model, self.fail_after, self.calls = model, fail_after, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def generate(self, **kwargs):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls += 1
        return self.model.generate(**kwargs)


class ScriptedLM:
    """Every prompt is answered with the same fixed text (token ids), then eos."""

    def __init__(self, tokenizer, text):
        self.device = torch.device("cpu")
        self.generation_config = SimpleNamespace(eos_token_id=None)
        self.config = SimpleNamespace(name_or_path="scripted")
        self.ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    def generate(self, input_ids, attention_mask, **kwargs):
        tail = torch.tensor(self.ids).expand(input_ids.shape[0], -1)
        return torch.cat([input_ids, tail], dim=1)


def _cfg(tmp_path, **kw):
    base = dict(kind="llm", llm_model="tiny-random", llm_batch_size=2, llm_max_new_tokens=4,
                llm_max_input_tokens=4096, cache_dir=str(tmp_path / "cache"))
    return ExtractorConfig(**{**base, **kw})


def _cache_lines(tmp_path):
    return (tmp_path / "cache" / CACHE_FILE).read_text().splitlines()


def test_garbage_rejected_with_fast_fallback_then_cache_hit(tmp_path, tiny):
    model, tokenizer = tiny
    extractor = LLMExtractor(_cfg(tmp_path), model=CountingLM(model), tokenizer=tokenizer)
    out = extractor.extract(PASSAGES + PASSAGES[:1])  # a repeated passage is generated once
    assert extractor.model.calls == 3  # 5 unique passages, batch size 2
    assert extractor.stats["generated"] == 5 and extractor.stats["cached"] == 0
    assert extractor.stats["rejected"] == 6 and extractor.stats["repaired"] == 0
    assert extractor.stats["tokens_in"] > 0 and 0 < extractor.stats["tokens_out"] <= 5 * 4
    fast = FastExtractor(ExtractorConfig()).extract(PASSAGES)
    assert out == fast + fast[:1]  # on_reject="fast"
    lines = [json.loads(line) for line in _cache_lines(tmp_path)]
    assert len(lines) == 5 and lines[0]["key"] == cache_key(lines[0]["title"], next(
        p.text for p in PASSAGES if p.title == lines[0]["title"]), "tiny-random")

    again = LLMExtractor(_cfg(tmp_path, on_reject="skip"), model=CountingLM(model), tokenizer=tokenizer)
    assert again.extract(PASSAGES) == [[] for _ in PASSAGES]  # on_reject="skip"
    assert again.model.calls == 0 and again.stats["cached"] == 5 and again.stats["generated"] == 0

    other = LLMExtractor(_cfg(tmp_path, llm_model="other-model"), model=CountingLM(model), tokenizer=tokenizer)
    other.extract(PASSAGES[:1])
    assert other.model.calls == 1  # the model name is part of the cache key


def test_resume_after_interruption_and_truncated_line(tmp_path, tiny):
    _, tokenizer = tiny
    model = ScriptedLM(tokenizer, "no json")
    broken = LLMExtractor(_cfg(tmp_path, on_reject="skip"), model=CountingLM(model, fail_after=1),
                          tokenizer=tokenizer)
    with pytest.raises(KeyboardInterrupt):
        broken.extract(PASSAGES)
    assert len(_cache_lines(tmp_path)) == 2  # the first batch was flushed
    with (tmp_path / "cache" / CACHE_FILE).open("a") as f:
        f.write('{"key": "abc", "raw": "half a li')  # killed mid-write
    resumed = LLMExtractor(_cfg(tmp_path, on_reject="skip"), model=CountingLM(model), tokenizer=tokenizer)
    resumed.extract(PASSAGES)
    assert resumed.model.calls == 2 and resumed.stats["cached"] == 2 and resumed.stats["generated"] == 3
    lines = _cache_lines(tmp_path)
    assert len(lines) == 5 and all(json.loads(line)["key"] for line in lines)


def test_corrupt_middle_line_warns_and_regenerates(tmp_path, tiny):
    _, tokenizer = tiny
    model = ScriptedLM(tokenizer, "no json")
    LLMExtractor(_cfg(tmp_path, on_reject="skip"), model=model, tokenizer=tokenizer).extract(PASSAGES[:2])
    path = tmp_path / "cache" / CACHE_FILE
    lines = path.read_text().splitlines()
    path.write_text("not json\n" + lines[1] + "\n")
    extractor = LLMExtractor(_cfg(tmp_path, on_reject="skip"), model=CountingLM(model), tokenizer=tokenizer)
    with pytest.warns(UserWarning, match=r"llm_extract\.jsonl:1: corrupt extraction cache line"):
        extractor.extract(PASSAGES[:2])
    assert extractor.model.calls == 1 and extractor.stats["cached"] == 1


def test_scripted_good_output_is_parsed(tmp_path, tiny):
    _, tokenizer = tiny
    raw = ('{"entities": ["Caldoria"], "facts": [{"fact": "The place is in Caldoria.", "entities": ["Caldoria"]},'
           ' {"fact": "It is old.", "entities": [],}]}')
    extractor = LLMExtractor(_cfg(tmp_path, llm_max_new_tokens=200), model=ScriptedLM(tokenizer, raw),
                             tokenizer=tokenizer)
    out = extractor.extract(PASSAGES[2:4])
    assert extractor.stats["repaired"] == 2 and extractor.stats["rejected"] == 0
    assert out[0] == [ExtractedFact("River Wend: The place is in Caldoria.", ["River Wend", "Caldoria"]),
                      ExtractedFact("River Wend is old.", ["River Wend"])]  # llm_make_standalone
    assert out[1][0].entities == ["Sarn", "Caldoria"]
    assert extractor.model_name == "tiny-random"
    assert PROMPT_VERSION and "Title: Sarn\nPassage: Sarn is the capital of Caldoria.\nJSON:" in build_prompt(
        "Sarn", "Sarn is the capital of Caldoria.")


def test_long_passage_is_cut_to_the_input_budget(tmp_path, tiny):
    _, tokenizer = tiny
    model = ScriptedLM(tokenizer, "{}")
    overhead = len(tokenizer(build_prompt("", ""))["input_ids"])
    extractor = LLMExtractor(_cfg(tmp_path, llm_max_input_tokens=overhead + 100, on_reject="skip"),
                             model=model, tokenizer=tokenizer)
    assert extractor.extract([Passage("Long", "word " * 2000)]) == [[]]
    assert extractor.stats["tokens_in"] <= overhead + 100
    small = LLMExtractor(_cfg(tmp_path, llm_max_input_tokens=overhead), model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match=r"llm_max_input_tokens is too small .*\(got \d+\)"):
        small.extract([Passage("a", "b")])


def test_constructor_errors(tmp_path, tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match=r"extractor.cache_dir must be set .*\(got ''\)"):
        LLMExtractor(_cfg(tmp_path, cache_dir=""), model=model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match=r"pass both model and tokenizer"):
        LLMExtractor(_cfg(tmp_path), model=model)
    with pytest.raises(ValueError, match=r"extractor.llm_model must name .*\(got ''\)"):
        LLMExtractor(_cfg(tmp_path, llm_model=""))
    with pytest.raises(TypeError, match=r"passages\[0\] must have str fields"):
        LLMExtractor(_cfg(tmp_path), model=model, tokenizer=tokenizer).extract(["text"])
