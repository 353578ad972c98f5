"""Seeded sampling (hpengine.models._sampling) and batched_generate's temperature: the Gumbel-max
draw against softmax(logits / T) in float64, and a sample that does not depend on its batch."""
import copy
import random

import pytest
import torch

from hpengine.models import batched_generate
from hpengine.models._sampling import SeededGumbelSampler, gumbel_noise, hash32
from hpengine.testing._tiny_lm import build_tiny_pair

PROMPTS = ["hello there", "The quick brown fox jumps over the lazy dog", "a", "lazy dogs sleep all day long",
           "x y z", "over the hills and far away"]


@pytest.fixture(scope="module")
def _tiny():
    return build_tiny_pair(PROMPTS * 3, 320, initializer_range=0.5)


@pytest.fixture
def tiny(_tiny):
    return tuple(copy.deepcopy(x) for x in _tiny)


def _hash_reference(x: int) -> int:
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_hash_equals_python_integer_reference():
    xs = [0, 1, 2**31, 2**32 - 1] + [random.Random(0).randrange(2**32) for _ in range(2000)]
    assert hash32(torch.tensor(xs)).tolist() == [_hash_reference(x) for x in xs]


def test_gumbel_max_draws_follow_softmax_over_temperature():
    """20,000 rows with their own seeds, one fixed logit vector: the argmax frequencies of
    logits / T + noise against softmax(logits / T) in float64 (chi-square, 7 degrees of freedom)."""
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, 0.2])
    n = 20_000
    for t in (0.7, 1.5):
        sampler = SeededGumbelSampler([t] * n, list(range(n)), start=3)
        picks = sampler(torch.zeros(n, 3, dtype=torch.long), logits.expand(n, -1).clone()).argmax(1)
        observed = torch.bincount(picks, minlength=8).double()
        expected = torch.softmax(logits.double() / t, 0) * n
        chi2 = float(((observed - expected) ** 2 / expected).sum())
        assert chi2 < 24.3, (t, chi2)  # the 0.999 quantile of chi-square(7)


def test_noise_depends_on_seed_and_step_only():
    seeds = torch.tensor([5, 9, 5])
    a = gumbel_noise(seeds, 0, 50)
    assert torch.equal(a[0], a[2]) and not torch.equal(a[0], a[1])
    assert torch.equal(gumbel_noise(seeds[1:2], 0, 50)[0], a[1])  # alone or in a batch
    assert not torch.equal(gumbel_noise(seeds, 1, 50), a)


def test_greedy_rows_untouched_and_temperature_zero_is_greedy(tiny):
    model, tokenizer = tiny
    greedy = batched_generate(model, tokenizer, PROMPTS, max_new_tokens=6, batch_size=6)
    mixed = batched_generate(model, tokenizer, PROMPTS, max_new_tokens=6, batch_size=6,
                             temperature=[0.0, 2.0] * 3, seed=list(range(6)))
    assert mixed.texts[0::2] == greedy.texts[0::2]
    assert batched_generate(model, tokenizer, PROMPTS, max_new_tokens=6, batch_size=6,
                            temperature=0.0, seed=7).texts == greedy.texts


def test_a_sample_does_not_depend_on_its_batch(tiny):
    """Each prompt sampled alone (batch size 1) against all of them in batches of 3 and 6, and with
    the prefix cache: the same completions; other seeds draw other completions."""
    model, tokenizer = tiny
    kw = dict(max_new_tokens=8, temperature=3.0, seed=11)
    singles = [batched_generate(model, tokenizer, [p], batch_size=1, **kw).texts[0] for p in PROMPTS]
    for batch_size in (3, 6):
        assert batched_generate(model, tokenizer, PROMPTS, batch_size=batch_size, **kw).texts == singles
    head = "The quick brown fox jumps over the lazy dog and " * 4
    long = [head + p for p in PROMPTS]
    alone = [batched_generate(model, tokenizer, [p], batch_size=1, **kw).texts[0] for p in long]
    cached = batched_generate(model, tokenizer, long, batch_size=4, prefix_cache=True, min_prefix_tokens=8, **kw)
    assert cached.prefix_tokens > 0 and cached.texts == alone
    greedy = batched_generate(model, tokenizer, PROMPTS, max_new_tokens=8, batch_size=6).texts
    other = batched_generate(model, tokenizer, PROMPTS, batch_size=6, **{**kw, "seed": 12}).texts
    assert singles != greedy and other != singles


def test_identical_prompts_share_a_sample_only_with_the_same_seed(tiny):
    model, tokenizer = tiny
    res = batched_generate(model, tokenizer, ["x y z"] * 4, max_new_tokens=8, batch_size=4,
                           temperature=[3.0, 3.0, 3.0, 0.0], seed=[1, 1, 2, 1])
    assert res.repeats == 1 and res.texts[0] == res.texts[1]
    with pytest.raises(ValueError, match="temperature must be one value or one per prompt"):
        batched_generate(model, tokenizer, PROMPTS, max_new_tokens=2, batch_size=2, temperature=[1.0])
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        batched_generate(model, tokenizer, PROMPTS, max_new_tokens=2, batch_size=2, temperature=-1.0)


@pytest.mark.parametrize("scale", [0.5, 4.0, 40.0, 4000.0])
def test_pruned_noise_draws_what_noise_on_every_token_draws(scale):
    """The CPU sampler hashes only tokens within GUMBEL_SPREAD of a row's best scaled logit: its
    argmax, and its values on the tokens it keeps, against noise on the whole vocabulary (the
    reference), over random logits of several spreads, masked tokens, temperatures and steps."""
    gen = torch.Generator().manual_seed(int(scale))
    rows, vocab = 24, 3000
    scores = torch.randn(rows, vocab, generator=gen) * scale
    scores[::5, ::3] = float("-inf")  # masked tokens, as a logits processor before this one leaves them
    temperatures = [0.0, 0.3, 0.7, 1.5, 4.0, 0.7] * 4
    full = SeededGumbelSampler(temperatures, range(100, 100 + rows), start=2, prune=False)
    pruned = SeededGumbelSampler(temperatures, range(100, 100 + rows), start=2, prune=True)
    for step in range(6):
        ids = torch.zeros(rows, 2 + step, dtype=torch.long)
        want, got = full(ids, scores), pruned(ids, scores)
        assert torch.equal(got.argmax(1), want.argmax(1))
        kept = torch.isfinite(got)
        assert torch.equal(got[kept], want[kept])
        assert torch.equal(got[0::6], scores[0::6])  # greedy rows untouched
        if scale >= 40.0:  # a wide spread leaves few candidates
            assert int(kept[1::6].sum()) < vocab // 4
    auto = SeededGumbelSampler(temperatures, range(100, 100 + rows), start=2)  # prunes on CPU
    assert torch.equal(auto(ids, scores), got)


def test_sampler_benchmark_runs_and_its_draws_agree(tmp_path):
    """benchmarks/ops/bench_sampler.py on small synthetic logits: both variants draw the same tokens."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-m", "benchmarks", "ops", "bench_sampler", "rows=4", "vocab=2000", "steps=2",
                    f"out={tmp_path}"], check=True, capture_output=True, text=True, cwd=root)
    (path,) = tmp_path.rglob("bench_sampler.json")
    result = json.loads(path.read_text())["meta"]
    assert result["draws_agree"] == "8/8" and result["tokens_hashed_per_row"] <= 2000
