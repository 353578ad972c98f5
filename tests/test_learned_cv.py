"""Recall per question and the paired difference of two methods (``hpengine.pipeline``), and the
learned ranker's cross-validation script (``benchmarks/analysis/learned_cv.py``): repeated runs
average what single runs give, and the difference to the fusion with its paired-bootstrap interval
equals a per-question reference on random candidate sets."""
import pytest
import torch

from benchmarks.analysis import learned_cv
from hpengine.pipeline import RankerExamples, fusion_order, paired_difference, recall_at, recall_per_question
from hpengine.pipeline.retrievers import FEATURES


def _examples(n: int, seed: int) -> RankerExamples:
    g = torch.Generator().manual_seed(seed)
    c = 9
    valid = torch.rand(n, c, generator=g) < 0.85
    valid[:, 0] = True
    gold = (torch.rand(n, c, generator=g) < 0.25) & valid
    features = torch.rand(n, c, len(FEATURES), generator=g).masked_fill(~valid[..., None], 0.0)
    num_gold = gold.sum(1) + torch.randint(0, 2, (n,), generator=g)  # some gold outside the candidates
    none = torch.rand(n, generator=g) < 0.15  # questions whose gold passages the index lacks: not scored
    gold &= ~none[:, None]
    num_gold = num_gold.masked_fill(none, 0)
    candidates = torch.where(valid, torch.arange(c).expand(n, c), -1)
    return RankerExamples(candidates, features, valid, gold, num_gold)


def _linear(train, seed: int):
    """A fast 'fit' that depends on its training rows and its seed: the gold candidates' mean
    features less all valid candidates', plus seeded noise, as a linear scorer."""
    gold, valid = train.gold & train.valid, train.valid
    w = train.features[gold].mean(0) - train.features[valid].mean(0)
    w = w + 0.3 * torch.randn(len(FEATURES), generator=torch.Generator().manual_seed(seed))
    return lambda features, valid: (features @ w).masked_fill(~valid, float("-inf"))


def _recall_reference(order, ex: RankerExamples, k: int) -> list:
    out = []
    for i in range(len(ex)):
        if int(ex.num_gold[i]) == 0:
            continue
        hits = sum(bool(ex.gold[i, j]) for j in order[i, :k].tolist())
        out.append(hits / int(ex.num_gold[i]))
    return out


def test_per_question_recall_is_what_recall_at_averages():
    ex = _examples(30, 0)
    assert bool((ex.num_gold == 0).any())  # the questions without gold are left out
    order = torch.argsort(torch.rand(30, 9, generator=torch.Generator().manual_seed(1)), dim=1)
    for k in (2, 5):
        per = recall_per_question(order, ex, k)
        assert torch.allclose(per, torch.tensor(_recall_reference(order, ex, k)))
        assert abs(float(per.mean()) - recall_at(order, ex, k)) < 1e-6


def test_paired_difference_resamples_questions_in_pairs():
    g = torch.Generator().manual_seed(9)
    base = torch.rand(50, generator=g)
    assert paired_difference(base + 0.1, base) == paired_difference(base + 0.1, base)  # runs repeat
    mean, low, high = paired_difference(base + 0.1, base)  # the same shift on every question: no spread
    assert abs(mean - 0.1) < 1e-6 and abs(low - 0.1) < 1e-6 and abs(high - 0.1) < 1e-6
    mine = base + torch.randn(50, generator=g) * 0.2
    mean, low, high = paired_difference(mine, base)
    diff = (mine - base).tolist()
    assert abs(mean - sum(diff) / 50) < 1e-6 and min(diff) < low < mean < high < max(diff)
    wider = paired_difference(base + (mine - base) * 3, base)  # the same resamples: three times as wide
    assert abs((wider[2] - wider[1]) / (high - low) - 3) < 1e-3
    assert all(v != v for v in paired_difference(torch.zeros(0), torch.zeros(0)))  # no questions: NaN
    with pytest.raises(ValueError, match="same N"):
        paired_difference(torch.ones(5), torch.zeros(1))


def test_paired_difference_is_a_95_percent_interval():
    g = torch.Generator().manual_seed(11)
    diff = torch.randn(400, generator=g) * 0.2
    mean, low, high = paired_difference(diff, torch.zeros(400))
    normal = 2 * 1.96 * float(diff.std()) / 400 ** 0.5  # the normal approximation's width
    assert abs((high - low) / normal - 1) < 0.08  # a 90% interval would be 0.84 of it, a 99% one 1.31


def test_versus_fusion_is_the_mean_difference_with_an_interval_around_it():
    ex = _examples(40, 2)
    assert learned_cv.versus_fusion([fusion_order(ex)], ex) == {"recall@2": [0.0, 0.0, 0.0],
                                                                 "recall@5": [0.0, 0.0, 0.0]}
    orders = [torch.argsort(torch.rand(40, 9, generator=torch.Generator().manual_seed(s)), dim=1) for s in (3, 4)]
    got = learned_cv.versus_fusion(orders, ex)
    assert got == learned_cv.versus_fusion(orders, ex)  # a fixed generator: runs repeat
    for k in (2, 5):
        fused = _recall_reference(fusion_order(ex), ex, k)
        runs = [_recall_reference(o, ex, k) for o in orders]
        diff = [(a + b) / 2 - f for a, b, f in zip(*runs, fused)]
        mean, low, high = got[f"recall@{k}"]
        assert abs(mean - sum(diff) / len(diff)) < 1e-4
        assert min(diff) <= low <= mean <= high <= max(diff) and low < high


def test_repeats_average_the_single_runs():
    sets = {"a": _examples(25, 5), "b": _examples(35, 6)}
    both = learned_cv.cross_validate(sets, _linear, folds=5, seed=7, repeats=2)
    single = [learned_cv.cross_validate(sets, _linear, folds=5, seed=s) for s in (7, 8)]
    for n in sets:
        for part in ("cv", "lodo"):
            assert both[n][f"{part}_runs"] == [s[n][part]["recall@5"] for s in single]
            mean = sum(s[n][part]["recall@5"] for s in single) / 2
            assert abs(both[n][part]["recall@5"] - mean) < 1e-4
            assert "cv_runs" not in single[0][n] and "cv_vs_fusion" not in single[0][n]
            fused = recall_at(fusion_order(sets[n]), sets[n], 5)
            assert abs(both[n][f"{part}_vs_fusion"]["recall@5"][0] - (mean - fused)) < 1e-3


def test_each_fit_sees_the_sets_it_trains_on_as_sets():
    """k-fold fits train on every set, each left-out fit on the others, each set numbered apart
    (``RankerExamples.of_sets``), so that ``balance_sets`` weighs them the same."""
    sets = {"a": _examples(10, 1), "b": _examples(15, 2), "c": _examples(5, 3)}
    seen = []

    def recording(train, seed):
        seen.append(sorted(torch.bincount(train.question_set).tolist()))
        return _linear(train, seed)

    learned_cv.cross_validate(sets, recording, folds=5, seed=0)
    assert seen[:5] == [[4, 8, 12]] * 5  # 4/5 of each set in each fold
    assert seen[5:] == [[5, 15], [5, 10], [10, 15]]  # without a, without b, without c


def test_nested_fit_chooses_inside_its_training_set_and_trains_on_all_of_it():
    """``--nested``: the settings are chosen by cross-validating inside the training questions
    alone (never the held ones), the better setting wins, and the model returned is trained on
    every training question with it."""
    sets = {"a": _examples(20, 1), "b": _examples(25, 2)}
    for n, ex in sets.items():
        ex.candidates[:, 0] = torch.arange(len(ex)) + (1000 if n == "b" else 0)  # names the question: rows seen
        ex.features[..., 0] += ex.gold.float()  # a feature that tells gold apart: the sign of a fit matters
    train = RankerExamples.of_sets([sets["a"].subset(range(15)), sets["b"].subset(range(20))])
    seen = []

    def trainer(train, seed, sign=1.0):
        seen.append(set(train.candidates[:, 0].tolist()))
        fit = _linear(train, seed)
        return lambda features, valid: torch.where(valid, sign * fit(features, valid), float("-inf"))

    nested = learned_cv.NestedFit({"worse": {"sign": -1.0}, "better": {}}, folds=3, trainer=trainer)
    nested(train, seed=0)
    rows = set(train.candidates[:, 0].tolist())
    assert nested.chosen[0]["chosen"] == "better"
    assert nested.chosen[0]["inner_r5"]["better"] > nested.chosen[0]["inner_r5"]["worse"]
    assert all(s < rows for s in seen[:-1])  # every inner fit holds some training rows out ...
    assert seen[-1] == rows  # ... and the model returned saw them all
    assert len(seen) == 2 * 3 + 1  # each setting: 3 inner folds


def test_nested_over_one_setting_is_that_setting_cross_validated():
    sets = {"a": _examples(25, 5), "b": _examples(35, 6)}
    nested = learned_cv.NestedFit({"only": {}}, folds=3, trainer=lambda train, seed: _linear(train, seed))
    assert learned_cv.cross_validate(sets, nested, folds=5, seed=7) == learned_cv.cross_validate(
        sets, _linear, folds=5, seed=7)
    assert [c["chosen"] for c in nested.chosen] == ["only"] * 7  # five folds, two sets left out


def test_a_question_asked_twice_is_refused():
    from hpengine.eval import Question

    def q(text):
        return Question(id=text, question=text, answers=["x"], gold_passages=[("t", "x")], gold_titles=["t"])

    learned_cv.check_distinct({"a": [q("Who?"), q("Where?")], "b": [q("When?")]})
    with pytest.raises(SystemExit, match="b asks 'who\\?' again \\(a asks it too\\)"):
        learned_cv.check_distinct({"a": [q("Who?")], "b": [q(" who? ")]})


def test_reuse_reads_only_candidates_of_the_same_settings(tmp_path):
    from safetensors.torch import save_file

    ex = _examples(6, 0)
    cache = tmp_path / "run_a.safetensors"
    settings = learned_cv._cache_settings("idx", "q.json", 0, 20)
    save_file({f: getattr(ex, f).contiguous() for f in learned_cv.FIELDS}, str(cache), metadata=settings)
    got, _ = learned_cv.examples_of("a", "idx", "q.json", cache, True, 0, 20)
    assert torch.equal(got.features, ex.features)
    with pytest.raises(SystemExit, match="other settings \\(mention_width\\)"):
        learned_cv.examples_of("a", "idx", "q.json", cache, True, 0, 0)
    with pytest.raises(SystemExit, match="other settings \\(index\\)"):
        learned_cv.examples_of("a", "other_idx", "q.json", cache, True, 0, 20)
