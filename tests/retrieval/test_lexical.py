"""Word evidence (hpengine.graph.build_passage_words, hpengine.retrieval.pair_coverage,
title_shares and mentioned_passages) against a per-candidate reference on sets of words, batched
equal one question at a time and on every device equal the CPU (bit for bit), and the learned
method's word features on the built-in corpus."""
import math
import random

import pytest
import torch

from hpengine.graph import build_passage_words, words_of
from hpengine.retrieval import mentioned_passages, pair_coverage, title_shares
from hpengine.testing import with_devices

WORDS = ["oslo", "bergen", "city", "river", "film", "director", "born", "year", "king", "sea", "the", "of"]


def _corpus(rng: random.Random, n: int) -> tuple[list, list]:
    titles = [" ".join(rng.choices(WORDS, k=rng.randint(0, 2))) for _ in range(n)]
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(0, 12))) for _ in range(n)]
    return titles, texts


def _sets(titles, texts) -> tuple[list, dict]:
    """Each passage's set of words (title and text) and each word's idf, ln(1 + (N - df + .5) / (df + .5))."""
    docs = [set(words_of(f"{t} {x}")) for t, x in zip(titles, texts)]
    n = len(docs)
    return docs, {w: math.log1p((n - df + 0.5) / (df + 0.5))
                  for w in set().union(*docs) for df in [sum(w in d for d in docs)]}


def _reference(titles, texts, question: str, passage: int, first: int) -> list:
    """The share of the question's idf the passage holds and ``first`` does not, and the share both
    hold together: one candidate, from sets of words."""
    docs, idf = _sets(titles, texts)
    asked = {w for w in words_of(question) if w in idf}
    total = sum(idf[w] for w in asked)
    if not total:
        return [0.0, 0.0]
    held, before = docs[passage] & asked, (docs[first] & asked) if first >= 0 else set()
    return [sum(idf[w] for w in held - before) / total, sum(idf[w] for w in held | before) / total]


def _title_reference(titles, texts, titled: int, holder: int) -> float:
    """The share of ``titled``'s title idf that ``holder``'s words hold: one pair, from sets of words."""
    docs, idf = _sets(titles, texts)
    if titled < 0 or holder < 0:
        return 0.0
    title = set(words_of(titles[titled]))
    total = sum(idf[w] for w in title)
    return sum(idf[w] for w in title & docs[holder]) / total if total else 0.0


def _ids(rng: random.Random, rows: int, cols: int, n: int):
    """int64 ``[rows, cols]`` random passage ids below ``n``, ``-1`` (padding) among them."""
    return torch.tensor([[rng.randrange(-1, n) for _ in range(cols)] for _ in range(rows)],
                        dtype=torch.int64).view(rows, cols)


def _questions(rng: random.Random, n: int) -> list:
    return [" ".join(rng.choices(WORDS + ["unknown"], k=rng.randint(0, 6))) for _ in range(n)]


@pytest.mark.parametrize("seed", range(6))
def test_pair_coverage_equals_the_sets_per_candidate(seed):
    rng = random.Random(seed)
    titles, texts = _corpus(rng, rng.randint(3, 30))
    words = build_passage_words(titles, texts)
    questions = _questions(rng, 7)
    cand, first = _ids(rng, len(questions), 5, len(titles)), _ids(rng, len(questions), 1, len(titles))
    got = pair_coverage(words, *words.question_words(questions), cand, first)
    for i, q in enumerate(questions):
        for j, p in enumerate(cand[i].tolist()):
            want = [0.0, 0.0] if p < 0 else _reference(titles, texts, q, p, int(first[i, 0]))
            assert got[i, j].tolist() == pytest.approx(want, abs=1e-6), (q, p)


def test_batched_equals_one_question_at_a_time_bit_for_bit():
    rng = random.Random(7)
    titles, texts = _corpus(rng, 40)
    words = build_passage_words(titles, texts)
    questions = _questions(rng, 9)
    cand = torch.randint(-1, 40, (9, 11), generator=torch.Generator().manual_seed(0))
    first = cand[:, 3:4]
    whole = pair_coverage(words, *words.question_words(questions), cand, first)
    for i, q in enumerate(questions):
        one = pair_coverage(words, *words.question_words([q]), cand[i:i + 1], first[i:i + 1])
        assert torch.equal(one[0], whole[i])


def test_an_empty_corpus_and_wordless_questions_score_zero():
    words = build_passage_words(["", ""], ["", "of the"])
    crow, col = words.question_words(["what is it?", ""])
    cand = torch.tensor([[0, 1], [1, -1]])
    assert torch.equal(pair_coverage(words, crow, col, cand, torch.tensor([[1], [-1]])), torch.zeros(2, 2, 2))


def _learned_candidates(builtin_index, top: int) -> tuple:
    """``(words, engine, texts, cand, feats, valid, fused)`` of the learned method on the built-in
    questions; ``fused`` int64 ``[Q, top]``: the fused first ``top`` passages, read from their ranks."""
    from hpengine.pipeline import Engine
    from hpengine.pipeline.retrievers import FEATURES

    index, encoder, questions = builtin_index
    engine = Engine(index, encoder, retriever="learned")
    texts = [q.question for q in questions]
    cand, feats, valid = engine.retriever.candidate_features(texts, engine.steps.encode(texts))
    rr_fusion = feats[..., FEATURES.index("rr_fusion")]
    fused = torch.stack([torch.where((rr_fusion == 1.0 / r).any(1),
                                     cand.gather(1, (rr_fusion == 1.0 / r).int().argmax(1, keepdim=True))[:, 0], -1)
                         for r in range(1, top + 1)], dim=1)
    return index.lookups.words(), engine, texts, cand, feats, valid, fused


def test_the_learned_methods_word_features_are_the_pair_coverage_of_the_fused_first(builtin_index):
    from hpengine.pipeline.retrievers import FEATURES

    words, _, texts, cand, feats, valid, first = _learned_candidates(builtin_index, 1)
    pairs = pair_coverage(words, *words.question_words(texts), cand, first)
    at = FEATURES.index("idf_gain_over_first")
    assert torch.equal(feats[..., at:at + 2], pairs) and bool((pairs[..., 1] > 0).any())
    best = pairs.masked_fill(~valid[..., None], float("-inf")).amax(1, keepdim=True)
    assert torch.equal(feats[..., at + 2:at + 4], torch.where(valid[..., None], pairs - best, 0.0))


@pytest.mark.parametrize("seed", range(6))
def test_title_shares_equal_the_sets_per_pair(seed):
    rng = random.Random(seed)
    titles, texts = _corpus(rng, rng.randint(3, 30))
    words = build_passage_words(titles, texts)
    q, c, k = rng.randint(1, 6), rng.randint(0, 7), rng.randint(1, 3)
    titled, holders = _ids(rng, q, c, len(titles)), _ids(rng, q, k, len(titles))
    got = title_shares(words, titled, holders)
    assert got.shape == (q, c, k) and got.dtype == torch.float32
    for i in range(q):
        for j in range(c):
            for h in range(k):
                want = _title_reference(titles, texts, int(titled[i, j]), int(holders[i, h]))
                assert float(got[i, j, h]) == pytest.approx(want, abs=1e-6)


def test_title_shares_batched_equal_one_question_at_a_time_bit_for_bit():
    rng = random.Random(3)
    titles, texts = _corpus(rng, 40)
    words = build_passage_words(titles, texts)
    gen = torch.Generator().manual_seed(1)
    titled, holders = torch.randint(-1, 40, (9, 11), generator=gen), torch.randint(-1, 40, (9, 3), generator=gen)
    whole = title_shares(words, titled, holders)
    for i in range(9):
        assert torch.equal(title_shares(words, titled[i:i + 1], holders[i:i + 1])[0], whole[i])


def test_the_learned_methods_mention_features_are_the_title_shares_of_the_fused_top(builtin_index):
    from hpengine.pipeline.retrievers import FEATURES

    words, _, _, cand, feats, _, top = _learned_candidates(builtin_index, 3)
    at = FEATURES.index("mentioned_by_first")
    by_top = title_shares(words, cand, top)
    assert torch.equal(feats[..., at], by_top[..., 0]) and bool((by_top[..., 0] > 0).any())
    assert torch.equal(feats[..., at + 1], title_shares(words, top[:, :1], cand)[:, 0])
    assert torch.equal(feats[..., at + 2], by_top[..., 1:].amax(-1))


def _mentioned_reference(titles, texts, holders: list, width: int) -> list:
    """The passages whose whole (non-empty) title one of ``holders`` holds, by summed title idf
    descending then id, ``width`` at most: one question, from sets of words (idf as the engine
    stores it, so ties are the engine's)."""
    words = build_passage_words(titles, texts)
    docs, _ = _sets(titles, texts)
    named = {p for h in holders if h >= 0 for p, t in enumerate(titles)
             if set(words_of(t)) and set(words_of(t)) <= docs[h]}
    mass = {p: sum(int(words.idf[words.vocabulary[w]]) for w in set(words_of(titles[p]))) for p in named}
    return sorted(named, key=lambda p: (-mass[p], p))[:width]


@pytest.mark.parametrize("seed", range(6))
def test_mentioned_passages_equal_the_sets_per_question(seed):
    rng = random.Random(seed)
    titles, texts = _corpus(rng, rng.randint(3, 30))
    words = build_passage_words(titles, texts)
    q, k, width = rng.randint(1, 6), rng.randint(1, 5), rng.randint(1, 8)
    holders = _ids(rng, q, k, len(titles))
    got = mentioned_passages(words, holders, width)
    assert got.shape == (q, width) and got.dtype == torch.int64
    for i in range(q):
        want = _mentioned_reference(titles, texts, holders[i].tolist(), width)
        assert got[i].tolist() == want + [-1] * (width - len(want))
        assert bool((got[i] >= 0).any()) or not want


def test_each_titled_passage_is_keyed_once_by_its_rarest_title_word():
    rng = random.Random(5)
    titles, texts = _corpus(rng, 40)
    words = build_passage_words(titles, texts)
    keyed = {}
    for word in range(words.idf.numel()):
        for p in words.key_col[words.key_crow[word]:words.key_crow[word + 1]].tolist():
            assert p not in keyed
            keyed[p] = word
    for p, title in enumerate(titles):
        own = words.title_col[words.title_crow[p]:words.title_crow[p + 1]]
        assert (p in keyed) == bool(own.numel())
        if own.numel():
            assert int(words.idf[keyed[p]]) == int(words.idf[own].max()) and keyed[p] in own.tolist()
            assert int(words.title_idf[p]) == int(words.idf[own].sum())


def test_mentioned_passages_of_no_holders_are_padding():
    words = build_passage_words(*_corpus(random.Random(6), 12))
    assert mentioned_passages(words, torch.full((3, 4), -1), 5).tolist() == [[-1] * 5] * 3
    assert mentioned_passages(words, torch.zeros(0, 2, dtype=torch.int64), 5).shape == (0, 5)
    assert mentioned_passages(words, torch.tensor([[0, 1]]), 0).shape == (1, 0)


def test_mentioned_passages_batched_equal_one_question_at_a_time():
    rng = random.Random(4)
    titles, texts = _corpus(rng, 40)
    words = build_passage_words(titles, texts)
    holders = torch.randint(-1, 40, (9, 5), generator=torch.Generator().manual_seed(2))
    whole = mentioned_passages(words, holders, 6)
    assert bool((whole >= 0).any())
    for i in range(9):
        assert torch.equal(mentioned_passages(words, holders[i:i + 1], 6)[0], whole[i])


def test_the_learned_methods_candidates_hold_what_the_fused_top_five_name(builtin_index):
    from hpengine.pipeline.retrievers import FEATURES

    words, engine, texts, cand, feats, valid, top = _learned_candidates(builtin_index, 5)
    named = mentioned_passages(words, top, engine.config.mention_width)
    listed = feats[..., [i for i, f in enumerate(FEATURES) if f.startswith("in_")]].sum(-1) > 0  # [Q, C] in a list
    assert bool((named >= 0).any())
    for i in range(len(texts)):
        mine = set(cand[i][valid[i]].tolist())
        assert {int(p) for p in named[i] if p >= 0} <= mine  # every named passage is a candidate
        extra = {int(c) for c, v, l in zip(cand[i].tolist(), valid[i].tolist(), listed[i].tolist()) if v and not l}
        assert extra <= {int(p) for p in named[i]}  # and only they are candidates outside every list
        rank_features = [j for j, f in enumerate(FEATURES) if f.startswith(("rr_", "in_")) or f == "rrf_union"]
        for j in range(cand.shape[1]):
            if int(cand[i, j]) in extra:  # in no list: no rank signal
                assert not bool(feats[i, j, rank_features].any())
        assert len(mine) == int(valid[i].sum())  # once each


@with_devices
@pytest.mark.parametrize("seed", range(3))
def test_the_word_functions_on_a_device_equal_the_cpus_bit_for_bit(device, seed):
    """Integer idf sums: the same bits wherever they run (docs/methods/learned.md)."""
    rng = random.Random(20 + seed)
    titles, texts = _corpus(rng, 40)
    words = build_passage_words(titles, texts)
    there = words.to(device)
    gen = torch.Generator().manual_seed(seed)
    questions = _questions(rng, 7)
    cand, first = torch.randint(-1, 40, (7, 9), generator=gen), torch.randint(-1, 40, (7, 1), generator=gen)
    top = torch.randint(-1, 40, (7, 3), generator=gen)
    here_pairs = pair_coverage(words, *words.question_words(questions), cand, first)
    there_pairs = pair_coverage(there, *there.question_words(questions), cand.to(device), first.to(device))
    assert there_pairs.device.type == torch.device(device).type and torch.equal(there_pairs.cpu(), here_pairs)
    assert torch.equal(title_shares(there, cand.to(device), top.to(device)).cpu(), title_shares(words, cand, top))
    named = mentioned_passages(words, top, 6)
    assert bool((named >= 0).any())
    assert torch.equal(mentioned_passages(there, top.to(device), 6).cpu(), named)
