"""retriever=learned: the rank lookup against a per-question reference, features batched equal one
by one, training lowers the listwise loss on the built-in corpus, the batched ranking equals a
per-question sort of the ranker's scores, and ranker files are checked (another encoder, another
feature schema, a damaged file: one line each)."""
import json
import math
import random

import pytest
import torch
from safetensors import safe_open

from hpengine.config import LearnedConfig
from hpengine.errors import UserError
from hpengine.nn import CandidateRanker, listwise_loss, load_ranker, save_ranker
from hpengine.pipeline import Engine
from hpengine.pipeline._learn import ranker_examples, ranker_meta, recall_at, rank_candidates, train_ranker
from hpengine.pipeline.retrievers._learned import FEATURES, list_ranks


@pytest.fixture(scope="module")
def examples(builtin_index):
    index, encoder, questions = builtin_index
    engine = Engine(index, encoder, retriever="learned")
    return engine, questions, ranker_examples(engine, questions, batch_size=5)


def _list_ranks_reference(candidates: list, lists: list) -> list:
    return [[ls.index(c) if c >= 0 and c in ls else -1 for ls in lists] for c in candidates]


@pytest.mark.parametrize("seed", range(5))
def test_list_ranks_equal_the_reference(seed):
    rng = random.Random(seed)
    q, n_lists, w, c = 3, rng.randint(1, 4), rng.randint(1, 7), rng.randint(1, 9)
    lists = [[[rng.randrange(12) if rng.random() > 0.2 else -1 for _ in range(w)] for _ in range(n_lists)]
             for _ in range(q)]
    lists = [[list(dict.fromkeys(x for x in ls if x >= 0)) + [-1] * (w - len(set(x for x in ls if x >= 0)))
              for ls in row] for row in lists]  # a passage once per list, padding last
    candidates = [[rng.randrange(-1, 12) for _ in range(c)] for _ in range(q)]
    got = list_ranks(torch.tensor(candidates), torch.tensor(lists)).tolist()
    assert got == [_list_ranks_reference(cs, ls) for cs, ls in zip(candidates, lists)]


def test_features_batched_equal_one_by_one(builtin_index):
    index, encoder, questions = builtin_index
    engine = Engine(index, encoder, retriever="learned")
    texts = [q.question for q in questions]
    emb = engine.steps.encode(texts)
    cand, feats, valid = engine.retriever.candidate_features(texts, emb)
    assert feats.shape == (*cand.shape, len(FEATURES)) and bool(valid.any(1).all())
    for i, text in enumerate(texts):
        c1, f1, v1 = engine.retriever.candidate_features([text], emb[i:i + 1])
        n = int(v1.sum())
        assert torch.equal(c1[0, :n], cand[i, :n]) and int(valid[i].sum()) == n
        torch.testing.assert_close(f1[0, :n], feats[i, :n])


def _links(index, lookups, anchor: int) -> set:
    """Reference: the home passages of the entities that the facts of passage ``anchor`` name."""
    fact_crow, fact_col = lookups.extracted_incidence()
    out = set()
    for f in lookups.passage_facts[lookups.passage_crow[anchor]:lookups.passage_crow[anchor + 1]].tolist():
        for e in fact_col[fact_crow[f]:fact_crow[f + 1]].tolist():
            out.update(lookups.home_col[lookups.home_crow[e]:lookups.home_crow[e + 1]].tolist())
    return out - {anchor}


# The fusion without anchors orders the built-in corpus so that a next passage is tied only by
# linking to the first: each of the three ties is then exercised.
@pytest.mark.parametrize("config, back_only", [(LearnedConfig(), False),
                                               (LearnedConfig(named_anchors=0, link_anchors=0), True)])
def test_structure_features_equal_a_per_candidate_reference(builtin_index, config, back_only):
    """fact_cosine, cosine_to_first, links_to_first, linked_from_named_next,
    linked_from_chained_next: loops over one candidate at a time against the batched tensors."""
    index, encoder, questions = builtin_index
    engine = Engine(index, encoder, config=config)
    texts = [q.question for q in questions]
    emb = engine.steps.encode(texts)
    retriever, lk = engine.retriever, engine.steps.lookups
    cand, feats, valid = retriever.candidate_features(texts, emb)
    col = {name: FEATURES.index(name) for name in FEATURES}
    fact_passage = index.fact_passage.tolist()
    first = feats[..., col["rr_fusion"]] == 1.0  # the fused first passage has rank 0
    checked = named_seen = chain_seen = back_seen = apart = 0
    for i in range(len(texts)):
        top = cand[i][first[i]].tolist()
        assert len(top) == 1
        ordered = sorted(((float(r), int(c)) for r, c, v in zip(feats[i, :, col["rr_fusion"]], cand[i], valid[i])
                          if v and r > 0), reverse=True)
        named = {int(c) for c, v, n in zip(cand[i], valid[i], feats[i, :, col["named"]]) if v and n > 0}
        ties = {a: (a in named, a in _links(index, lk, top[0]), top[0] in _links(index, lk, a))
                for _, a in ordered[1:3]}  # tied to the question: named, or linked with the first either way
        by_name = [a for a, tie in ties.items() if tie[0]]
        by_chain = [a for a, tie in ties.items() if tie[1] or tie[2]]
        named_seen += bool(by_name)
        chain_seen += bool(by_chain)
        back_seen += any(tie == (False, False, True) for tie in ties.values())
        for j in range(int(valid[i].sum())):
            p = int(cand[i, j])
            sims = [float(index.fact_emb[f] @ emb[i]) for f, owner in enumerate(fact_passage) if owner == p]
            assert feats[i, j, col["fact_cosine"]].item() == pytest.approx(max(sims) if sims else 0.0, abs=1e-5)
            cos_first = float(index.passage_emb[p] @ index.passage_emb[top[0]])
            assert feats[i, j, col["cosine_to_first"]].item() == pytest.approx(cos_first, abs=1e-5)
            assert bool(feats[i, j, col["links_to_first"]]) == (top[0] in _links(index, lk, p))
            expected = [p not in nxt and any(p in _links(index, lk, a) for a in nxt)  # not its own link
                        for nxt in (by_name, by_chain)]
            names = ("linked_from_named_next", "linked_from_chained_next")
            assert [bool(feats[i, j, col[n]]) for n in names] == expected
            apart += expected[0] != expected[1]
            checked += 1
    assert checked > len(texts) and named_seen > 0 and chain_seen > 0 and (back_seen > 0) >= back_only
    assert apart > 0, "some candidate is linked from a next passage by one tie and not by the other"


def test_training_lowers_the_loss_and_the_ranking_equals_a_per_question_sort(examples):
    engine, questions, ex = examples
    assert bool(ex.gold.any(1).all()), "every built-in question has a gold candidate"
    seen = []
    model = train_ranker(ex, hidden=8, epochs=60, log=lambda epoch, loss: seen.append(loss))
    assert seen[-1] < seen[0]
    order = rank_candidates(model, ex)
    for i in range(len(ex)):  # per question: sort its valid candidates by the model's score alone
        n = int(ex.valid[i].sum())
        with torch.no_grad():
            s = model(ex.features[i:i + 1, :n], ex.valid[i:i + 1, :n])[0].tolist()
        assert order[i, :n].tolist() == sorted(range(n), key=lambda j: -s[j])
    assert 0.0 <= recall_at(order, ex, 5) <= 1.0


def test_the_engine_ranks_with_a_trained_ranker(examples, tmp_path, builtin_index):
    engine, questions, ex = examples
    index, encoder, _ = builtin_index
    model = train_ranker(ex, hidden=0, epochs=30)
    path = tmp_path / "r.safetensors"
    save_ranker(model, path, ranker_meta(engine, ex))
    learned = Engine(index, encoder, config=LearnedConfig(ranker=str(path)))
    texts = [q.question for q in questions]
    preds = learned.answer(texts)
    order = rank_candidates(model, ex)
    for i, p in enumerate(preds):  # the engine's ranking is the examples' candidates in the model's order
        n = int(ex.valid[i].sum())
        want = ex.candidates[i].gather(0, order[i, :n])[: learned.config.passage_width].tolist()
        assert list(p.passages) == want
    loaded, meta = load_ranker(path)
    assert meta["features"] == list(FEATURES) and meta["encoder"] == index.meta["encoder"]


def test_a_ranker_with_a_query_adapter_ranks_the_adapted_candidates(examples, tmp_path, builtin_index):
    """The adapter trained on the built-in questions lowers its loss, travels in the ranker file,
    and the engine runs its members from the adapted embeddings: its ranking equals the
    candidates computed from them (ranker_examples with the adapter) in the model's order."""
    from hpengine.pipeline import adapter_part, ranker_examples, train_adapter

    engine, questions, _ = examples
    index, encoder, _ = builtin_index
    losses = []
    adapter = train_adapter([adapter_part(engine, questions)], steps=40, log=lambda step, loss: losses.append(loss))
    assert losses[-1] < losses[0]
    emb = engine.steps.encode([q.question for q in questions])
    assert not torch.allclose(adapter(emb), emb, atol=1e-4), "the adapter moved the embeddings"
    ex = ranker_examples(engine, questions, adapter=adapter)
    model = train_ranker(ex, hidden=0, epochs=30, adapter=adapter)
    path = tmp_path / "adapted.safetensors"
    save_ranker(model, path, ranker_meta(engine, ex))
    loaded, meta = load_ranker(path)
    assert meta["adapter_dim"] == emb.shape[1] and torch.equal(loaded.query_adapter.weight, adapter.weight)
    learned = Engine(index, encoder, config=LearnedConfig(ranker=str(path)))
    order = rank_candidates(model, ex)
    for i, p in enumerate(learned.answer([q.question for q in questions])):
        n = int(ex.valid[i].sum())
        assert list(p.passages) == ex.candidates[i].gather(0, order[i, :n])[: learned.config.passage_width].tolist()


def test_ranker_files_are_checked(examples, tmp_path, builtin_index):
    engine, questions, ex = examples
    index, encoder, _ = builtin_index
    model = CandidateRanker(len(FEATURES), hidden=0)
    other = tmp_path / "other.safetensors"
    save_ranker(model, other, {**ranker_meta(engine, ex), "encoder": "another-encoder"})
    schema = tmp_path / "schema.safetensors"
    save_ranker(CandidateRanker(2, hidden=0), schema, {**ranker_meta(engine, ex), "features": ["a", "b"]})
    renamed = tmp_path / "renamed.safetensors"  # one feature renamed: the message names it, not every feature
    names = [*FEATURES[:-1], "bm25"]
    save_ranker(model, renamed, {**ranker_meta(engine, ex), "features": names})
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(b"\x10" * 20)
    cases = {other: "trained for encoder 'another-encoder'", schema: "other features.*it lacks rr_dense, ",
             renamed: f"it lacks {FEATURES[-1]}; it reads bm25, which this hpengine does not compute",
             damaged: "not a ranker file", tmp_path / "missing.safetensors": "no such file",
             tmp_path: "is a folder; name a ranker file"}
    cases[""] = "no ranker ships for encoder"  # the default: none ships for the test's hashing encoder
    for path, message in cases.items():
        learned = Engine(index, encoder, config=LearnedConfig(ranker=str(path)))
        with pytest.raises(UserError, match=message) as exc:
            learned.answer([questions[0].question])
        assert "\n" not in str(exc.value)


def _ranker_with_weights_changed(examples, path, hidden: int, change) -> None:
    """A ranker file at ``path`` whose header is intact and whose weights ``change(tensors)`` edits."""
    from safetensors.torch import load_file, save_file

    engine, _, ex = examples
    save_ranker(CandidateRanker(len(FEATURES), hidden=hidden), path, ranker_meta(engine, ex))
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path), metadata=metadata)


@pytest.mark.parametrize("damage,message", [("nan", "weights that are not finite \\(linear.weight\\)"),
                                            ("scale", "a spread that is not positive")])
def test_a_ranker_with_damaged_weights_is_refused(examples, tmp_path, damage, message):
    """A file whose header is intact but whose numbers are not (NaN weights, a zero spread) would
    order the candidates arbitrarily: refused in one line, and not taken for a ranker to keep."""
    from hpengine.nn import is_ranker_file

    path = tmp_path / "r.safetensors"
    where = ("linear.weight", (0, 0), float("nan")) if damage == "nan" else ("scale", (3,), 0.0)
    _ranker_with_weights_changed(examples, path, 0, lambda t: t[where[0]].__setitem__(where[1], where[2]))
    with pytest.raises(ValueError, match=message) as exc:
        load_ranker(path)
    assert "\n" not in str(exc.value)
    assert is_ranker_file(path)  # still a ranker file by its header: train may replace it
    assert not is_ranker_file(tmp_path / "missing.safetensors") and not is_ranker_file(tmp_path)


def test_a_ranker_whose_weights_misfit_its_header_names_them(examples, tmp_path):
    path = tmp_path / "r.safetensors"  # two hidden units where the header says four
    _ranker_with_weights_changed(examples, path, 4, lambda t: t.update({"mlp.0.weight": t["mlp.0.weight"][:2]}))
    with pytest.raises(ValueError, match=r"mlp.0.weight is \[2, .*\], not \[4, ") as exc:
        load_ranker(path)
    assert "\n" not in str(exc.value)


def test_a_ranker_file_is_written_with_the_users_file_mode(examples, tmp_path):
    import os
    import stat

    engine, _, ex = examples
    path = tmp_path / "r.safetensors"
    old = os.umask(0o022)
    try:
        save_ranker(CandidateRanker(len(FEATURES), hidden=0), path, ranker_meta(engine, ex))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # readable by others sharing the folder, as index files are
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.safetensors"]  # no temporary file left


def test_listwise_loss_ignores_questions_without_gold():
    scores = torch.tensor([[1.0, 0.0], [5.0, -1.0]])
    gold = torch.tensor([[False, True], [False, False]])
    valid = torch.ones(2, 2, dtype=torch.bool)
    want = torch.logsumexp(scores[0], 0) - scores[0, 1]
    torch.testing.assert_close(listwise_loss(scores, gold, valid), want)


def test_listwise_loss_pulls_up_every_gold_candidate():
    """Two gold candidates: the loss is the mean of their -log softmax, so a ranking with one gold
    on top and the other last costs more than one with both near the top."""
    valid = torch.ones(1, 4, dtype=torch.bool)
    gold = torch.tensor([[True, True, False, False]])
    one_up = torch.tensor([[9.0, -9.0, 0.0, 0.0]])
    both_up = torch.tensor([[3.0, 3.0, 0.0, 0.0]])
    assert float(listwise_loss(one_up, gold, valid)) > float(listwise_loss(both_up, gold, valid))
    log_p = torch.log_softmax(both_up, 1)[0]
    torch.testing.assert_close(listwise_loss(both_up, gold, valid), -(log_p[0] + log_p[1]) / 2)


def _random_lists(seed: int, q: int = 4, c: int = 9, f: int = 5):
    """Features ``[q, c, f]`` whose column 2 is a reciprocal rank (0 for unlisted candidates), and a
    valid mask with some padding."""
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(q, c, f, generator=g)
    ranks = torch.argsort(torch.rand(q, c, generator=g), dim=1).float()
    features[..., 2] = torch.where(ranks < 5, 1.0 / (1.0 + ranks), torch.zeros_like(ranks))
    valid = torch.ones(q, c, dtype=torch.bool)
    valid[0, -2:] = False
    return features, valid


@pytest.mark.parametrize("seed", range(3))
def test_a_prior_adds_the_log_of_its_reciprocal_rank_per_candidate(seed):
    features, valid = _random_lists(seed)
    torch.manual_seed(seed)
    plain = CandidateRanker(features.shape[-1], hidden=4)
    with_prior = CandidateRanker(features.shape[-1], hidden=4, prior=2, prior_floor=0.05)
    with_prior.load_state_dict(plain.state_dict())
    with torch.no_grad():
        base, scored = plain(features, valid), with_prior(features, valid)
    for i in range(features.shape[0]):  # one candidate at a time: the base score plus log(max(rr, floor))
        for j in range(features.shape[1]):
            if not valid[i, j]:
                assert scored[i, j] == float("-inf")
                continue
            rr = float(features[i, j, 2])
            want = float(base[i, j]) + math.log(max(rr, 0.05))
            assert abs(float(scored[i, j]) - want) < 1e-5


def test_an_untrained_ranker_with_a_prior_orders_as_the_prior():
    features, valid = _random_lists(7)
    ranker = CandidateRanker(features.shape[-1], hidden=4, prior=2)
    ranker.fit_scaling(features, valid)
    ranker.start_at_prior()
    with torch.no_grad():
        scores = ranker(features, valid)
    want = torch.log(features[..., 2].clamp_min(ranker.prior_floor))
    assert torch.equal(scores[valid], want[valid])  # the prior's score exactly: the model adds nothing yet
    listed = valid & (features[..., 2] > 0)
    for i in range(features.shape[0]):  # the listed candidates in their list's order, above the others
        rr = features[i, :, 2][listed[i]]
        assert torch.equal(torch.argsort(scores[i][listed[i]], descending=True), torch.argsort(rr, descending=True))
        assert bool((scores[i][listed[i]].min() > scores[i][valid[i] & ~listed[i]]).all())


def test_train_ranker_starts_from_the_fusions_order_unless_told_not_to(examples, tmp_path):
    engine, _, ex = examples
    seen = []
    model = train_ranker(ex, hidden=4, epochs=40, log=lambda epoch, loss: seen.append(loss))
    assert model.prior == FEATURES.index("rr_fusion") and seen[-1] < seen[0]
    assert train_ranker(ex, hidden=4, epochs=5, fusion_prior=False).prior == -1
    untrained = train_ranker(ex, hidden=4, epochs=0)  # no step taken: the fusion's own order
    fused = ex.features[..., FEATURES.index("rr_fusion")] > 0
    order = rank_candidates(untrained, ex)
    for i in range(len(ex)):
        listed = int(fused[i].sum())
        ranks = ex.features[i, order[i, :listed], FEATURES.index("rr_fusion")]
        assert bool((ranks[:-1] > ranks[1:]).all())
    path = tmp_path / "prior.safetensors"  # the prior travels in the file and scores the same after loading
    model.prior_floor = 0.05  # not the default: the file must carry it
    save_ranker(model, path, ranker_meta(engine, ex))
    loaded, meta = load_ranker(path)
    assert (loaded.prior, loaded.prior_floor) == (model.prior, model.prior_floor) and meta["prior"] == model.prior
    with torch.no_grad():
        assert torch.equal(loaded(ex.features, ex.valid), model(ex.features, ex.valid))


def test_a_ranker_file_without_a_prior_scores_from_its_weights_alone(examples, tmp_path):
    from safetensors.torch import load_file, save_file

    engine, _, ex = examples
    model = train_ranker(ex, hidden=4, epochs=5, fusion_prior=False)
    path = tmp_path / "r.safetensors"
    save_ranker(model, path, ranker_meta(engine, ex))
    with safe_open(str(path), framework="pt") as f:
        header = json.loads(f.metadata()["hpengine"])
    for key in ("prior", "prior_floor"):  # a header that never had them
        del header[key]
    save_file(load_file(str(path)), str(path), metadata={"hpengine": json.dumps(header)})
    loaded, _ = load_ranker(path)
    assert loaded.prior == -1
    with torch.no_grad():
        assert torch.equal(loaded(ex.features, ex.valid), model(ex.features, ex.valid))
    with pytest.raises(ValueError, match="prior"):
        CandidateRanker(3, prior=3)
    header["prior"] = True  # json's true is not column 1
    save_file(load_file(str(path)), str(path), metadata={"hpengine": json.dumps(header)})
    with pytest.raises(ValueError, match="prior is not a feature column"):
        load_ranker(path)


@pytest.mark.parametrize("seed", range(3))
def test_set_weights_in_the_loss_equal_repeating_the_smaller_sets(seed):
    """Weighing every question set the same equals the plain loss over the sets' questions each
    repeated up to a common count (the reference): sets of 3, 4 and 1 questions, the first set's
    first question without a gold candidate, so it counts 2 (a question the loss skips does not
    shrink its set's share)."""
    from hpengine.pipeline import set_weights

    g = torch.Generator().manual_seed(seed)
    sizes, c = (3, 4, 1), 6
    source = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
    valid = torch.rand(len(source), c, generator=g) > 0.2
    valid[:, 0] = True
    scores = torch.randn(len(source), c, generator=g).masked_fill(~valid, float("-inf"))
    gold = (torch.rand(len(source), c, generator=g) > 0.6) & valid
    gold[:, 0] = True  # every question has a gold candidate ...
    gold[0] = False  # ... but the first
    counted = gold.any(1)
    weight = set_weights(source, counted)
    assert weight[0] == 0 and torch.allclose(torch.stack([weight[source == s].sum() for s in range(3)]),
                                             torch.full((3,), 7 / 3))
    repeat = torch.tensor([2, 1, 4])[source]  # 2 counted x 2, 4 x 1, 1 x 4: every set 4 counted questions
    rows = torch.repeat_interleave(torch.arange(len(source)), repeat)
    want = listwise_loss(scores[rows], gold[rows], valid[rows])
    torch.testing.assert_close(listwise_loss(scores, gold, valid, weight), want)
    torch.testing.assert_close(listwise_loss(scores, gold, valid, torch.ones(len(source))),
                               listwise_loss(scores, gold, valid))
    with pytest.raises(ValueError, match=r"one weight per question, \[8\] \(got \[3\]\)"):
        listwise_loss(scores, gold, valid, torch.ones(3))


def test_question_sets_travel_with_the_examples_and_one_set_trains_the_same_balanced_or_not(examples):
    from hpengine.pipeline import RankerExamples

    _, _, ex = examples
    assert torch.equal(ex.question_set, torch.zeros(len(ex), dtype=torch.int64))
    both = RankerExamples.of_sets([ex.subset([0, 1, 2]), ex.subset([3, 4])])
    assert both.question_set.tolist() == [0, 0, 0, 1, 1]
    assert both.subset([4, 0]).question_set.tolist() == [1, 0]
    assert RankerExamples.concat([both, ex.subset([5])]).question_set.tolist() == [0, 0, 0, 1, 1, 0]
    one = [train_ranker(ex, hidden=4, epochs=20, balance_sets=flag) for flag in (True, False)]
    with torch.no_grad():
        assert torch.equal(one[0](ex.features, ex.valid), one[1](ex.features, ex.valid))
    two = [train_ranker(both, hidden=4, epochs=20, balance_sets=flag) for flag in (True, False)]
    with torch.no_grad():
        assert not torch.equal(two[0](both.features, both.valid), two[1](both.features, both.valid))


def test_the_fit_runs_on_one_thread_and_restores_the_count():
    """fit_ranker's steps run on one CPU thread (the weights do not depend on torch's count), and
    the count the caller set is back afterwards, also when the fit fails."""
    from hpengine.nn import fit_ranker

    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 5, 3, generator=g)
    gold, valid = x[..., 0] == x[..., 0].amax(1, keepdim=True), torch.ones(8, 5, dtype=torch.bool)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        seen = []
        fit_ranker(x, gold, valid, hidden=0, epochs=3, log=lambda epoch, loss: seen.append(torch.get_num_threads()))
        assert seen == [1, 1] and torch.get_num_threads() == 2  # epochs 0 and 2 logged
        with pytest.raises(ValueError):  # one weight per question, or refused inside the loop
            fit_ranker(x, gold, valid, hidden=0, epochs=3, weight=torch.ones(3))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
