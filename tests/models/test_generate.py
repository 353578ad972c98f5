import copy
from types import SimpleNamespace

import pytest
import torch

from hpengine.models import GenerateResult, batched_generate
from hpengine.models._generate import format_prompt
from hpengine.testing._tiny_lm import build_tiny_lm
from hpengine.testing._tiny_lm import build_tiny_tokenizer as _build_tokenizer

PROMPTS = ["hello there", "The quick brown fox jumps over the lazy dog", "a", "lazy dogs sleep all day long",
           "x y z", "over the hills and far away"]


def build_tiny_tokenizer(pad: bool = True):
    return _build_tokenizer(PROMPTS * 3, 320, pad=pad)


@pytest.fixture(scope="module")
def _tiny():
    tokenizer = build_tiny_tokenizer()
    return build_tiny_lm(len(tokenizer), initializer_range=0.5), tokenizer


@pytest.fixture
def tiny(_tiny):
    model, tokenizer = _tiny
    return copy.deepcopy(model), copy.deepcopy(tokenizer)


def test_batch_size_invariance_and_order(tiny):
    model, tokenizer = tiny
    # reference: each prompt generated alone (batch size 1), independent of the order bookkeeping
    singles = [batched_generate(model, tokenizer, [p], max_new_tokens=6, batch_size=1).texts[0] for p in PROMPTS]
    for batch_size in (3, 4):
        result = batched_generate(model, tokenizer, PROMPTS, max_new_tokens=6, batch_size=batch_size)
        assert isinstance(result, GenerateResult)
        assert result.texts == singles, batch_size
    assert len(set(singles)) > 1  # outputs depend on the prompt, so order is really checked


def test_token_counts_with_real_model(tiny):
    model, tokenizer = tiny
    result = batched_generate(model, tokenizer, PROMPTS, max_new_tokens=5, batch_size=6)
    assert result.tokens_in == sum(len(tokenizer(p)["input_ids"]) for p in PROMPTS)
    assert 0 <= result.tokens_out <= 5 * len(PROMPTS)


class FakeLM:
    """Records the generate() inputs; appends a fixed continuation with an eos in the middle."""

    def __init__(self, continuation, eos_ids=None):
        self.device = torch.device("cpu")
        self.generation_config = SimpleNamespace(eos_token_id=eos_ids)
        self.continuation = continuation
        self.calls = []

    def generate(self, input_ids, attention_mask, **kwargs):
        self.calls.append((input_ids.clone(), attention_mask.clone(), kwargs))
        tail = torch.tensor(self.continuation).expand(input_ids.shape[0], -1)
        return torch.cat([input_ids, tail], dim=1)


def test_left_padding_eos_cut_and_counts():
    tokenizer = build_tiny_tokenizer()
    a, b = tokenizer.convert_tokens_to_ids(["a", "b"])
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    model = FakeLM([a, b, eos, a, a], eos_ids=[77])  # 77: an extra stop id from generation_config
    result = batched_generate(model, tokenizer, ["a", "hello there", "x"], max_new_tokens=5, batch_size=2)
    assert result.texts == ["ab", "ab", "ab"]
    assert result.tokens_out == 6  # two tokens per prompt, eos and what follows excluded
    assert result.tokens_in == sum(len(tokenizer(p)["input_ids"]) for p in ["a", "hello there", "x"])
    (ids0, mask0, kw0), (ids1, _, _) = model.calls
    assert ids0.shape[0] == 2 and ids1.shape[0] == 1  # longest prompts first
    assert mask0[:, -1].all() and not mask0[:, 0].all()  # left padding
    assert (ids0[mask0 == 0] == pad).all()
    assert kw0["do_sample"] is False and kw0["pad_token_id"] == pad
    assert set(kw0["eos_token_id"]) == {eos, 77}
    model = FakeLM([a, pad, b])
    assert batched_generate(model, tokenizer, ["x"], max_new_tokens=3, batch_size=1).tokens_out == 1


def test_pad_falls_back_to_eos_and_tokenizer_untouched():
    tokenizer = build_tiny_tokenizer(pad=False)
    assert tokenizer.pad_token_id is None
    model = FakeLM([5, tokenizer.eos_token_id])
    result = batched_generate(model, tokenizer, ["a", "hello there"], max_new_tokens=2, batch_size=2)
    ids, mask, kwargs = model.calls[0]
    assert kwargs["pad_token_id"] == tokenizer.eos_token_id
    assert (ids[mask == 0] == tokenizer.eos_token_id).all()
    assert result.tokens_out == 2 and tokenizer.pad_token_id is None and tokenizer.padding_side == "right"


def test_chat_template_and_system():
    tokenizer = build_tiny_tokenizer()
    plain, add = format_prompt(tokenizer, "hi", system="sys")
    assert (plain, add) == ("sys\n\nhi", True)  # no template: system prepended
    tokenizer.chat_template = ("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
                               "{% if add_generation_prompt %}[assistant]{% endif %}")
    text, add = format_prompt(tokenizer, "hi", system="sys")
    assert (text, add) == ("[system]sys[user]hi[assistant]", False)
    assert format_prompt(tokenizer, "hi", use_chat_template=False) == ("hi", True)
    model = FakeLM([tokenizer.eos_token_id])
    batched_generate(model, tokenizer, ["hi"], max_new_tokens=1, batch_size=1, system="sys")
    assert tokenizer.decode(model.calls[0][0][0]) == "[system]sys[user]hi[assistant]"


def test_truncation_empty_and_errors():
    tokenizer = build_tiny_tokenizer()
    model = FakeLM([tokenizer.eos_token_id])
    result = batched_generate(model, tokenizer, [PROMPTS[1]], max_new_tokens=1, batch_size=1, max_input_tokens=3)
    assert model.calls[0][0].shape[1] == 3 and result.tokens_in == 3
    assert batched_generate(model, tokenizer, [], max_new_tokens=1, batch_size=1) == GenerateResult([], 0, 0)
    with pytest.raises(TypeError, match=r"prompts must be a list of str \(got str\)"):
        batched_generate(model, tokenizer, "abc", max_new_tokens=1, batch_size=1)
    with pytest.raises(ValueError, match=r"batch_size must be >= 1 \(got 0\)"):
        batched_generate(model, tokenizer, ["a"], max_new_tokens=1, batch_size=0)
    with pytest.raises(ValueError, match=r"max_new_tokens must be >= 1 \(got 0\)"):
        batched_generate(model, tokenizer, ["a"], max_new_tokens=0, batch_size=1)


def test_identical_prompts_generated_once(tiny):
    model, tokenizer = tiny
    prompts = [PROMPTS[1], PROMPTS[0], PROMPTS[1], PROMPTS[3], PROMPTS[0], PROMPTS[1]]
    singles = {p: batched_generate(model, tokenizer, [p], max_new_tokens=6, batch_size=1).texts[0]
               for p in set(prompts)}
    calls = []
    real = model.generate

    def counting(**kw):
        calls.append(kw["input_ids"].shape[0])
        return real(**kw)

    model.generate = counting
    result = batched_generate(model, tokenizer, prompts, max_new_tokens=6, batch_size=2)
    assert result.texts == [singles[p] for p in prompts]  # input order, every copy answered
    assert sum(calls) == 3 and result.repeats == 3  # the 3 distinct prompts, each generated once
    assert result.tokens_in == sum(len(tokenizer(p)["input_ids"]) for p in set(prompts))
    distinct = batched_generate(model, tokenizer, list(dict.fromkeys(prompts)), max_new_tokens=6, batch_size=2)
    assert result.tokens_out == distinct.tokens_out and distinct.repeats == 0


def test_token_capped_batches(tiny):
    from hpengine.models._generate import _cut_batches

    assert [list(b) for b in _cut_batches([5, 5, 4, 1], batch_size=8)] == [[0, 1, 2, 3]]
    assert [list(b) for b in _cut_batches([5, 5, 4, 1], batch_size=8, max_batch_tokens=10)] == [[0, 1], [2, 3]]
    assert [list(b) for b in _cut_batches([50, 3], batch_size=8, max_batch_tokens=10)] == [[0], [1]]  # one at least
    model, tokenizer = tiny
    calls = []
    real = model.generate

    def counting(**kw):
        calls.append(tuple(kw["input_ids"].shape))
        return real(**kw)

    model.generate = counting
    plain = batched_generate(model, tokenizer, PROMPTS, max_new_tokens=6, batch_size=1)
    capped = batched_generate(model, tokenizer, PROMPTS, max_new_tokens=6, batch_size=6, max_batch_tokens=12)
    assert capped.texts == plain.texts
    assert all(n * width <= 12 or n == 1 for n, width in calls[len(PROMPTS):])
    assert len(calls) - len(PROMPTS) > 1  # the cap split the batch of 6
    with pytest.raises(ValueError, match="max_batch_tokens"):
        batched_generate(model, tokenizer, PROMPTS, max_new_tokens=6, batch_size=6, max_batch_tokens=-1)


def test_shared_prefix_read_once_gives_the_same_completions(tiny):
    model, tokenizer = tiny
    head = "The quick brown fox jumps over the lazy dog and " * 4
    prompts = [head + p for p in PROMPTS]
    calls = []
    real = model.generate

    def spying(**kw):
        calls.append(("cache" in kw or "past_key_values" in kw, tuple(kw["input_ids"].shape)))
        return real(**kw)

    model.generate = spying
    plain = batched_generate(model, tokenizer, prompts, max_new_tokens=6, batch_size=4)
    cached = batched_generate(model, tokenizer, prompts, max_new_tokens=6, batch_size=4, prefix_cache=True,
                              min_prefix_tokens=8)
    assert cached.texts == plain.texts and len(set(plain.texts)) > 1
    assert (cached.tokens_in, cached.tokens_out) == (plain.tokens_in, plain.tokens_out)
    own = [tokenizer(p)["input_ids"] for p in prompts]
    assert plain.prefix_tokens == 0 and 8 <= cached.prefix_tokens < min(map(len, own))
    assert all(own[0][:cached.prefix_tokens] == ids[:cached.prefix_tokens] for ids in own)
    assert [c for c, _ in calls] == [False, False, True, True]
    # one prompt: all but its last token is the prefix; a prefix below the minimum is not cached
    one = batched_generate(model, tokenizer, prompts[:1], max_new_tokens=6, batch_size=1, prefix_cache=True)
    assert one.texts == plain.texts[:1] and one.prefix_tokens == len(own[0]) - 1
    short = batched_generate(model, tokenizer, PROMPTS, max_new_tokens=6, batch_size=4, prefix_cache=True)
    assert short.prefix_tokens == 0 and calls[-1][0] is False


def test_a_cache_that_cannot_be_repeated_per_batch_generates_uncached(tiny, monkeypatch):
    from transformers import DynamicCache

    model, tokenizer = tiny
    prompts = ["The quick brown fox jumps over the lazy dog and " * 4 + p for p in PROMPTS]
    plain = batched_generate(model, tokenizer, prompts, max_new_tokens=6, batch_size=4)
    monkeypatch.setattr(DynamicCache, "batch_repeat_interleave", None)
    fallback = batched_generate(model, tokenizer, prompts, max_new_tokens=6, batch_size=4, prefix_cache=True,
                                min_prefix_tokens=8)
    assert fallback.texts == plain.texts and fallback.prefix_tokens == 0
