"""Lexical evidence (hpengine.graph.build_lexical_index, hpengine.retrieval.lexical_scores) against
a per-candidate BM25 written from the formula, batched equal one question at a time (bit for bit),
and the learned method's lexical features on the built-in corpus."""
import math
import random

import pytest
import torch

from hpengine.graph import build_lexical_index, words_of
from hpengine.retrieval import lexical_scores, pair_coverage

WORDS = ["oslo", "bergen", "city", "river", "film", "director", "born", "year", "king", "sea", "the", "of"]


def _corpus(rng: random.Random, n: int) -> tuple[list, list]:
    titles = [" ".join(rng.choices(WORDS, k=rng.randint(0, 2))) for _ in range(n)]
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(0, 12))) for _ in range(n)]
    return titles, texts


def _reference(titles, texts, question: str, passage: int) -> list:
    """BM25 (k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + .5) / (df + .5))), title idf, idf coverage:
    one passage, from the formula."""
    docs = [words_of(f"{t} {x}") for t, x in zip(titles, texts)]
    n, avg = len(docs), sum(map(len, docs)) / len(docs)
    idf = {w: math.log1p((n - df + 0.5) / (df + 0.5))
           for w in {w for d in docs for w in d} for df in [sum(w in d for d in docs)]}
    asked = {w for w in words_of(question) if w in idf}
    doc, head = docs[passage], set(words_of(titles[passage]))
    bm25 = sum(idf[w] * doc.count(w) * 2.2 / (doc.count(w) + 1.2 * (0.25 + 0.75 * len(doc) / avg))
               for w in asked if w in doc)
    total = sum(idf[w] for w in asked)
    cover = sum(idf[w] for w in asked if w in doc) / total if total else 0.0
    return [bm25, sum(idf[w] for w in asked if w in head), cover]


@pytest.mark.parametrize("seed", range(4))
def test_scores_equal_the_formula_per_candidate(seed):
    rng = random.Random(seed)
    titles, texts = _corpus(rng, rng.randint(3, 30))
    lex = build_lexical_index(titles, texts)
    questions = [" ".join(rng.choices(WORDS + ["unknown"], k=rng.randint(0, 6))) for _ in range(7)]
    cand = torch.tensor([[rng.randrange(-1, len(titles)) for _ in range(5)] for _ in questions])
    crow, col = lex.question_words(questions)
    got = lexical_scores(lex, crow, col, cand)
    for i, q in enumerate(questions):
        for j, p in enumerate(cand[i].tolist()):
            want = [0.0, 0.0, 0.0] if p < 0 else _reference(titles, texts, q, p)
            assert got[i, j].tolist() == pytest.approx(want, abs=1e-5), (q, p)


def _pair_reference(titles, texts, question: str, passage: int, first: int) -> list:
    """The share of the question's idf the passage holds and ``first`` does not, and the share
    both hold together: one candidate, from sets of words."""
    docs = [set(words_of(f"{t} {x}")) for t, x in zip(titles, texts)]
    n = len(docs)
    idf = {w: math.log1p((n - df + 0.5) / (df + 0.5))
           for w in set().union(*docs) for df in [sum(w in d for d in docs)]}
    asked = {w for w in words_of(question) if w in idf}
    total = sum(idf[w] for w in asked)
    if not total:
        return [0.0, 0.0]
    held, before = docs[passage] & asked, (docs[first] & asked) if first >= 0 else set()
    return [sum(idf[w] for w in held - before) / total, sum(idf[w] for w in held | before) / total]


@pytest.mark.parametrize("seed", range(4))
def test_pair_coverage_equals_the_sets_per_candidate(seed):
    rng = random.Random(seed + 10)
    titles, texts = _corpus(rng, rng.randint(3, 30))
    lex = build_lexical_index(titles, texts)
    questions = [" ".join(rng.choices(WORDS + ["unknown"], k=rng.randint(0, 6))) for _ in range(7)]
    cand = torch.tensor([[rng.randrange(-1, len(titles)) for _ in range(5)] for _ in questions])
    first = torch.tensor([[rng.randrange(-1, len(titles))] for _ in questions])
    got = pair_coverage(lex, *lex.question_words(questions), cand, first)
    for i, q in enumerate(questions):
        for j, p in enumerate(cand[i].tolist()):
            want = [0.0, 0.0] if p < 0 else _pair_reference(titles, texts, q, p, int(first[i, 0]))
            assert got[i, j].tolist() == pytest.approx(want, abs=1e-6), (q, p)


def test_batched_equals_one_question_at_a_time_bit_for_bit():
    rng = random.Random(7)
    titles, texts = _corpus(rng, 40)
    lex = build_lexical_index(titles, texts)
    questions = [" ".join(rng.choices(WORDS, k=4)) for _ in range(9)]
    cand = torch.randint(-1, 40, (9, 11), generator=torch.Generator().manual_seed(0))
    crow, col = lex.question_words(questions)
    whole = lexical_scores(lex, crow, col, cand)
    first = cand[:, 3:4]
    pairs = pair_coverage(lex, crow, col, cand, first)
    for i, q in enumerate(questions):
        c1, k1 = lex.question_words([q])
        assert torch.equal(lexical_scores(lex, c1, k1, cand[i:i + 1])[0], whole[i])
        assert torch.equal(pair_coverage(lex, c1, k1, cand[i:i + 1], first[i:i + 1])[0], pairs[i])


def test_an_empty_corpus_and_wordless_questions_score_zero():
    lex = build_lexical_index(["", ""], ["", "of the"])
    crow, col = lex.question_words(["what is it?", ""])
    cand = torch.tensor([[0, 1], [1, -1]])
    assert torch.equal(lexical_scores(lex, crow, col, cand), torch.zeros(2, 2, 3))
    assert torch.equal(pair_coverage(lex, crow, col, cand, torch.tensor([[1], [-1]])), torch.zeros(2, 2, 2))


def test_the_learned_methods_word_features_are_the_scores(builtin_index):
    from hpengine.pipeline import Engine
    from hpengine.pipeline.retrievers import FEATURES, LEXICAL_FEATURES

    index, encoder, questions = builtin_index
    engine = Engine(index, encoder, retriever="learned")
    texts = [q.question for q in questions]
    emb = engine.steps.encode(texts)
    cand, base, valid = engine.retriever.candidate_features(texts, emb)
    cand2, feats, valid2 = engine.retriever.candidate_features(texts, emb, lexical=True)
    assert torch.equal(cand, cand2) and torch.equal(valid, valid2)
    assert feats.shape[-1] == len(FEATURES) + len(LEXICAL_FEATURES) and torch.equal(feats[..., :len(FEATURES)], base)
    lex = index.lookups.lexical()
    scores = lexical_scores(lex, *lex.question_words(texts), cand)
    assert torch.equal(feats[..., len(FEATURES):len(FEATURES) + 3], scores)
    best = scores.masked_fill(~valid[..., None], float("-inf")).amax(1, keepdim=True)
    assert torch.equal(feats[..., len(FEATURES) + 3:], torch.where(valid[..., None], scores - best, 0.0))
    assert bool((scores[..., 0] > 0).any())
    rr_fusion = base[..., FEATURES.index("rr_fusion")]
    first = torch.where(rr_fusion.amax(1) == 1.0, cand.gather(1, rr_fusion.argmax(1, keepdim=True))[:, 0], -1)[:, None]
    pairs = pair_coverage(lex, *lex.question_words(texts), cand, first)
    at = FEATURES.index("idf_gain_over_first")
    assert torch.equal(base[..., at:at + 2], pairs) and bool((pairs[..., 1] > 0).any())
