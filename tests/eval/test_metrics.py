import math

import pytest
import torch

from hpengine.eval import (
    exact_match,
    f1_score,
    normalize_answer,
    passage_ids,
    recall_at_k,
    recall_at_k_batch,
)
from hpengine.testing import with_devices


@pytest.mark.parametrize("text, expected", [
    ("The Beatles", "beatles"),
    ("a cat and an apple", "cat and apple"),
    ("theater anthem", "theater anthem"),  # articles only as whole words
    ("U.S.A.!", "usa"),
    ("Paris,   France\n", "paris france"),
    ("  THE   end. ", "end"),
    ("the", ""),
    ("rock-n-roll", "rocknroll"),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match():
    assert exact_match("The Louvre!", ["Louvre"]) == 1.0
    assert exact_match("Louvre Museum", ["Louvre"]) == 0.0
    assert exact_match("stanley hall", ["G. Stanley Hall", "Stanley Hall"]) == 1.0  # second alias
    assert exact_match("", ["the"]) == 1.0  # both normalise to the empty string


@pytest.mark.parametrize("pred, golds, expected", [
    ("Barack Obama", ["Obama"], 2 / 3),  # P = 1/2, R = 1
    ("the president Obama", ["Barack Obama"], 1 / 2),  # tokens [president, obama] vs [barack, obama]
    ("new york city", ["New York"], 0.8),  # P = 2/3, R = 1 -> 0.8
    ("1961", ["1946"], 0.0),
    ("Obama", ["Barack Obama", "Obama"], 1.0),  # max over aliases
    ("a a b", ["a b b"], 2 / 3),  # articles vanish: [b] vs [b, b] -> P = 1, R = 1/2
    ("x x y", ["x y y"], 2 / 3),  # multiset overlap {x, y}: P = R = 2/3
    ("the", ["an"], 1.0),  # both empty after normalisation
    ("the", ["Paris"], 0.0),  # empty prediction
])
def test_f1_score(pred, golds, expected):
    assert f1_score(pred, golds) == pytest.approx(expected)


def test_em_f1_bad_golds():
    with pytest.raises(ValueError, match=r"at least one answer \(got an empty list\)"):
        exact_match("x", [])
    with pytest.raises(TypeError, match=r"list of answer strings \(got str\)"):
        f1_score("x", "x")


GOLD = [("Adolescence", "G. Stanley Hall wrote it."), ("JPI", "Published by the APA.")]


def test_recall_at_k_hand_cases():
    retrieved = [("JPI", "Published by the APA."), ("Other", "x"), ("Adolescence", "G. Stanley Hall wrote it.")]
    assert recall_at_k(retrieved, GOLD, 1) == 0.5
    assert recall_at_k(retrieved, GOLD, 2) == 0.5
    assert recall_at_k(retrieved, GOLD, 3) == 1.0
    assert recall_at_k(retrieved, GOLD, 100) == 1.0  # k larger than the list


def test_recall_duplicate_titles_compare_text():
    gold = [("Adolescence", "second paragraph")]
    retrieved = [("Adolescence", "first paragraph"), ("Adolescence", "second paragraph")]
    assert recall_at_k(retrieved, gold, 1) == 0.0
    assert recall_at_k(retrieved, gold, 2) == 1.0


def test_recall_dedups_gold_and_retrieved():
    assert recall_at_k([GOLD[0], GOLD[0]], [GOLD[0], GOLD[0], GOLD[1]], 2) == 0.5
    assert recall_at_k([GOLD[0]] * 3, GOLD, 3) == 0.5


def test_recall_accepts_dicts_and_objects():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class P:
        title: str
        text: str

    gold = [{"title": t, "text": x} for t, x in GOLD]
    assert recall_at_k([P(*GOLD[1]), list(GOLD[0])], gold, 2) == 1.0


def test_recall_empty_gold_is_nan():
    assert math.isnan(recall_at_k([GOLD[0]], [], 2))
    assert recall_at_k([], GOLD, 2) == 0.0
    with pytest.raises(ValueError, match=r"k must be an int >= 1 \(got 0\)"):
        recall_at_k([], GOLD, 0)


@with_devices
def test_recall_batch_matches_scalar(device):
    gen = torch.Generator().manual_seed(0)
    retrieved = torch.randint(-1, 12, (40, 7), generator=gen)
    gold = torch.randint(-1, 12, (40, 3), generator=gen)
    gold[0] = -1  # no gold
    for k in (1, 2, 5, 50):
        got = recall_at_k_batch(retrieved.to(device), gold.to(device), k)
        assert got.device == torch.device(device) and got.dtype == torch.float32
        for q in range(40):
            # a -1 inside the ranking still takes its slot of the top-k
            top = [(str(i), "") for i in retrieved[q, :k].tolist() if i >= 0]
            ref = recall_at_k(top, [(str(i), "") for i in gold[q].tolist() if i >= 0], k)
            if math.isnan(ref):
                assert torch.isnan(got[q])
            else:
                assert got[q].item() == pytest.approx(ref)


def test_recall_batch_hand_case_and_errors():
    retrieved = torch.tensor([[3, 1, 2], [5, 5, -1]])
    gold = torch.tensor([[2, 1, 2], [5, -1, -1]])
    torch.testing.assert_close(recall_at_k_batch(retrieved, gold, 2), torch.tensor([0.5, 1.0]))
    with pytest.raises(TypeError, match=r"int64 \(got torch.float32\)"):
        recall_at_k_batch(retrieved.float(), gold, 2)
    with pytest.raises(ValueError, match="same Q"):
        recall_at_k_batch(retrieved[:1], gold, 2)


def test_passage_ids():
    index = {p: i for i, p in enumerate(GOLD)}
    assert passage_ids([GOLD[1], ("x", "y"), {"title": GOLD[0][0], "text": GOLD[0][1]}], index) == [1, -1, 0]
