"""retriever=fusion: the fusion ops against slow per-question Python references, the method on the
built-in corpus (a single member is that member; batched equals one by one; weight 0 drops a
member; chains labelled by method; shared steps computed once), its config errors, and the
command line's eval and ask with retriever=fusion."""
import json
import random
import re

import pytest
import torch

from hpengine.config import DenseConfig, EngineConfig, FusionConfig, HyperProveConfig, PPRConfig
from hpengine.pipeline import Engine
from hpengine.pipeline.retrievers._fusion import fuse_rankings, minmax_scores, rrf_scores, stack_rankings
from hpengine.testing import with_devices

RULES = ("rrf", "score", "lead_then_fill")
ALONE = {"dense": DenseConfig, "ppr": PPRConfig, "hyperprove": HyperProveConfig}


@pytest.fixture(scope="module")
def built(builtin_index):
    index, encoder, questions = builtin_index
    return index, encoder, [q.question for q in questions]


# ------------------------------------------------------------------ slow references
def _fuse_reference(lists: list, weights: list, score_of, width: int) -> tuple[list, dict]:
    """One question in plain Python: each passage sums ``weights[m] * score_of(m, rank)`` over the
    lists that hold it; order by score, ties by first position in rank-major order."""
    score, first = {}, {}
    for r in range(max((len(ls) for ls in lists), default=0)):
        for m, ls in enumerate(lists):
            if r < len(ls) and ls[r] >= 0:
                p = ls[r]
                score[p] = score.get(p, 0.0) + weights[m] * score_of(m, r)
                first.setdefault(p, r * len(lists) + m)
    return sorted(score, key=lambda p: (-score[p], first[p]))[:width], score


def _rrf_reference(lists, weights, k, width):
    return _fuse_reference(lists, weights, lambda m, r: 1.0 / (k + r + 1), width)


def _minmax_reference(values: list) -> list:
    low, high = min(values), max(values)
    return [(v - low) / (high - low) if high > low else 1.0 for v in values]


def _assert_same_ranking(got: list, expected: list, score: dict, abs_tol: float = 1e-6):
    """Tie-aware: the same length, and at every rank a passage with the reference's score there."""
    assert len(got) == len(expected), (got, expected)
    for g, e in zip(got, expected):
        assert score[g] == pytest.approx(score[e], abs=abs_tol), (got, expected)


# ------------------------------------------------------------------ ops
def test_rrf_on_a_hand_computed_example():
    # member A: 5 7 9, member B: 7 3; k = 0, weights 1 and 2
    # 7: 1/2 + 2/1 = 2.5, 3: 2/2 = 1, 5: 1/1 = 1 (5 comes first: rank 1 of A before rank 2 of B), 9: 1/3
    ranked = torch.tensor([[[5, 7, 9], [7, 3, -1]]])
    ids, scores = fuse_rankings(ranked, rrf_scores(ranked, torch.tensor([1.0, 2.0]), 0.0), 5)
    assert ids.tolist() == [[7, 5, 3, 9, -1]]
    torch.testing.assert_close(scores[:, :4], torch.tensor([[2.5, 1.0, 1.0, 1.0 / 3.0]]))
    assert scores[0, 4] == float("-inf")
    expected, _ = _rrf_reference([[5, 7, 9], [7, 3]], [1.0, 2.0], 0.0, 5)
    assert ids[0, :4].tolist() == expected


@with_devices
@pytest.mark.parametrize("seed", range(6))
def test_rrf_batched_equals_the_per_question_reference(device, seed):
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    q, m, w, p = 5, 3, 7, 12
    lists = []
    for _ in range(q):
        rows = []
        for _ in range(m):
            ids = torch.randperm(p, generator=gen)[: rng.randint(0, w)].tolist()
            rows.append(ids + [-1] * (w - len(ids)))
        lists.append(rows)
    ranked = torch.tensor(lists, device=device)
    weights = [rng.choice([0.5, 1.0, 2.0]) for _ in range(m)]
    k = rng.choice([0.0, 1.0, 60.0])
    for width in (1, 5, 17):
        ids, scores = fuse_rankings(ranked, rrf_scores(ranked, torch.tensor(weights), k), width)
        assert ids.device == ranked.device and ids.dtype == torch.int64 and ids.shape == (q, width)
        for row, got_scores, members in zip(ids.tolist(), scores.tolist(), lists):
            expected, score = _rrf_reference(members, weights, k, width)
            got = [x for x in row if x >= 0]
            _assert_same_ranking(got, expected, score)
            assert got_scores[: len(got)] == pytest.approx([score[x] for x in got], rel=1e-5)


@with_devices
def test_fuse_rankings_edges(device):
    # no entries at all; every list empty in one row; a lone member keeps its order
    empty = torch.full((2, 3, 0), -1, dtype=torch.int64, device=device)
    assert fuse_rankings(empty, empty.float(), 4)[0].tolist() == [[-1] * 4] * 2
    ranked = torch.tensor([[[-1, -1]], [[4, 1]]], device=device)
    ids, _ = fuse_rankings(ranked, rrf_scores(ranked, torch.ones(1), 60.0), 3)
    assert ids.tolist() == [[-1, -1, -1], [4, 1, -1]]


@with_devices
def test_minmax_scores(device):
    scores = torch.tensor([[[0.9, 0.5, 0.1, 7.0], [3.0, 3.0, 0.0, 0.0]]], device=device)
    ranked = torch.tensor([[[3, 1, 2, -1], [8, 9, -1, -1]]], device=device)
    torch.testing.assert_close(minmax_scores(scores, ranked),
                               torch.tensor([[[1.0, 0.5, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]], device=device))


def test_stack_rankings_pads_to_the_widest():
    out = stack_rankings([torch.tensor([[1, 2, 3]]), torch.tensor([[4]])])
    assert out.tolist() == [[[1, 2, 3], [4, -1, -1]]]


# ------------------------------------------------------------------ the method
def _passages(preds):
    return [p.passages for p in preds]


# each member once and each rule once (a single member's ranking passes through every rule unchanged)
@pytest.mark.parametrize("member, rule", [("dense", "lead_then_fill"), ("hyperprove", "score"), ("ppr", "rrf")])
def test_a_single_member_is_that_member(built, member, rule):
    index, encoder, questions = built
    alone = Engine(index, encoder, config=ALONE[member]()).answer(questions)
    fused = Engine(index, encoder, config=FusionConfig(members=[member], rule=rule, lead=member)).answer(questions)
    assert _passages(fused) == _passages(alone), rule
    # the chain is the member's own (the single-step member's hop keeps its facts)
    for a, f in zip(alone, fused):
        assert [[x.text for x in h.facts] for h in f.chain] == [[x.text for x in h.facts] for h in a.chain]
        weight = "2" if member == "ppr" else "1"  # the default weights (DEFAULT_FUSION_WEIGHTS)
        assert f.notes[0] == f"fusion: {member} (weight {weight}): " + (f"chain[0:{len(a.chain)}]" if a.chain
                                                                           else "no chain records")
        if member == "hyperprove":
            assert [(h.subquery, h.answer) for h in f.chain] == [(h.subquery, h.answer) for h in a.chain]
        if member == "dense":  # the same passages read the same way: the same no-LLM answer
            assert f.answer == a.answer


@pytest.mark.parametrize("rule", RULES)
def test_batched_equals_one_by_one(built, rule):
    index, encoder, questions = built
    engine = Engine(index, encoder, config=FusionConfig(rule=rule))
    together = engine.answer(questions)
    alone = [engine.answer([q])[0] for q in questions[::2]]  # every other one: the batch is all 12
    for a, b in zip(together[::2], alone):
        assert a.passages == b.passages and a.answer == b.answer and a.notes == b.notes
        assert [(h.subquery, h.answer, [f.text for f in h.facts], h.linked) for h in a.chain] == \
            [(h.subquery, h.answer, [f.text for f in h.facts], h.linked) for h in b.chain]


@pytest.mark.parametrize("rule", RULES)
def test_weight_zero_drops_a_member(built, rule):
    index, encoder, questions = built
    dropped = Engine(index, encoder, config=FusionConfig(weights=[1, 0, 2], rule=rule))
    assert list(dropped.retriever.members) == ["hyperprove", "dense"]  # ppr is not even built
    without = Engine(index, encoder, config=FusionConfig(members=["hyperprove", "dense"], weights=[1, 2], rule=rule))
    for a, b in zip(dropped.answer(questions), without.answer(questions)):
        assert a.passages == b.passages and a.answer == b.answer and a.notes == b.notes
        assert not any(n.startswith(("fusion: ppr", "ppr:")) for n in a.notes)


def _member_rankings(index, encoder, questions, width):
    return {name: _passages(Engine(index, encoder, config=cls(passage_width=width)).answer(questions))
            for name, cls in ALONE.items()}


def test_rrf_and_lead_then_fill_equal_the_reference_over_the_members_own_rankings(built):
    index, encoder, questions = built
    members, width, member_width = ["hyperprove", "ppr", "dense"], 8, 12
    alone = _member_rankings(index, encoder, questions, member_width)
    weights, k = [1.0, 0.5, 2.0], 3.0
    rrf = Engine(index, encoder, config=FusionConfig(rule="rrf", weights=weights, rrf_k=k, passage_width=width,
                                                     member_width=member_width, restart_share=0,
                                                     link_anchors=0, named_anchors=0)).answer(questions)
    ltf = Engine(index, encoder, config=FusionConfig(rule="lead_then_fill", lead_passages=2, weights=weights, rrf_k=k,
                                                     passage_width=width, member_width=member_width, restart_share=0,
                                                     link_anchors=0, named_anchors=0)).answer(questions)
    for i, (r, t) in enumerate(zip(rrf, ltf)):
        lists = [alone[n][i] for n in members]
        expected, score = _rrf_reference(lists, weights, k, width)
        _assert_same_ranking(r.passages, expected, score)
        # lead then fill: dense's first 2, then the RRF of the graph methods, then dense's others
        fill, fill_score = _rrf_reference(lists[:2], weights[:2], k, 10 ** 6)
        lead = alone["dense"][i]
        expected = list(dict.fromkeys(lead[:2] + fill + lead[2:]))[:width]
        assert t.passages[:2] == expected[:2]
        score = {**{p: 0.0 for p in lead}, **fill_score, **{p: float("inf") for p in lead[:2]}}
        _assert_same_ranking(t.passages, expected, score)


def test_score_rule_equals_the_reference(built):
    """Dense by its min-max normalised cosines; HyperProve and PPR (no scores in Retrieved) by rank."""
    index, encoder, questions = built
    members, width = ["hyperprove", "ppr", "dense"], 10
    alone = _member_rankings(index, encoder, questions, width)
    weights = [1.0, 2.0, 1.5]
    fused = Engine(index, encoder, config=FusionConfig(rule="score", weights=weights, restart_share=0,
                                                       link_anchors=0, named_anchors=0)).answer(questions)
    emb = encoder.encode(questions, kind="query").double()
    cos = emb @ index.passage_emb.double().t()  # [Q, P]: the dense member's cosines
    for i, pred in enumerate(fused):
        lists = [alone[n][i] for n in members]
        normal = [_minmax_reference([-float(r) for r in range(len(ls))]) for ls in lists[:2]]
        normal.append(_minmax_reference([float(cos[i, p]) for p in lists[2]]))
        expected, score = _fuse_reference(lists, weights, lambda m, r: normal[m][r], width)
        _assert_same_ranking(pred.passages, expected, score, abs_tol=1e-5)


def test_chain_keeps_each_members_evidence_labelled(built):
    index, encoder, questions = built
    fused = Engine(index, encoder, config=FusionConfig(restart_share=0)).answer(questions)  # PPR as alone
    hp = Engine(index, encoder, config=HyperProveConfig()).answer(questions)
    ppr = Engine(index, encoder, config=PPRConfig()).answer(questions)
    for f, h, p in zip(fused, hp, ppr):
        n = len(h.chain)
        assert f.notes[:3] == [f"fusion: hyperprove (weight 1): chain[0:{n}]", f"fusion: ppr (weight 2): chain[{n}:{n + 1}]",
                               "fusion: dense (weight 1): no chain records"]
        assert [(r.subquery, r.answer, [x.text for x in r.facts]) for r in f.chain[:n]] == \
            [(r.subquery, r.answer, [x.text for x in r.facts]) for r in h.chain]
        assert [x.text for x in f.chain[n].facts] == [x.text for x in p.chain[0].facts]
        assert f.chain[n].answer == ""  # PPR leaves its answer to the engine: fusion's is the fused one
        assert all(note.startswith(("fusion:", "hyperprove:", "ppr:", "dense:")) for note in f.notes)


def test_members_share_the_encoding_and_the_dense_step(built, monkeypatch):
    index, encoder, questions = built
    engine = Engine(index, encoder, config=FusionConfig())
    steps = engine.steps
    calls, encoded = [], []
    real_dense, real_encode = steps.dense_passages_scored, encoder.encode
    monkeypatch.setattr(steps, "dense_passages_scored", lambda emb, k: calls.append(k) or real_dense(emb, k))
    monkeypatch.setattr(encoder, "encode", lambda texts, **kw: encoded.append(list(texts)) or real_encode(texts, **kw))
    engine.answer(questions)
    # HyperProve, PPR and dense each rank passage_width dense passages (PPR also 200 for its reset):
    # computed once per width
    assert sorted(calls) == sorted({engine.config.passage_width, min(200, index.num_passages)})
    assert encoded.count(questions) == 1  # the questions are encoded once, by the engine
    for retriever, _ in engine.retriever.members.values():
        assert retriever.steps.fact_index() is steps.fact_index()  # one fact index


def test_engine_config_and_names(built):
    index, encoder, _ = built
    engine = Engine(index, encoder, retriever="fusion")
    assert engine.method == "fusion" and isinstance(engine.config, FusionConfig)
    shared = Engine(index, encoder, config=EngineConfig(passage_width=4), retriever="fusion")
    assert shared.config.passage_width == 4
    members = {n: r.config for n, (r, _) in shared.retriever.members.items()}
    assert all(c.passage_width == 4 for c in members.values())  # member_width 0: the fusion's width
    cfg = FusionConfig(member_width=20, ppr=PPRConfig(damping=0.85), members=["ppr", "dense"])
    members = {n: r.config for n, (r, _) in Engine(index, encoder, config=cfg).retriever.members.items()}
    assert isinstance(members["ppr"], PPRConfig) and members["ppr"].damping == 0.85
    assert members["ppr"].passage_width == members["dense"].passage_width == 20


# ------------------------------------------------------------------ config errors
@pytest.mark.parametrize("kwargs, error, match", [
    (dict(members=[]), ValueError, r"engine.members must be a non-empty list"),
    (dict(members="ppr"), ValueError, r"engine.members must be a non-empty list .*\(got 'ppr'\)"),
    (dict(members=["ppr", "bm25"]), ValueError, r"each of engine.members must be one of \[.*'dense'.*\(got 'bm25'\)"),
    (dict(members=["fusion"]), ValueError, r"each of engine.members must be one of .*\(got 'fusion'\)"),
    (dict(members=["ppr", "ppr"]), ValueError, r"engine.members must name each method once"),
    (dict(weights=[1, 2]), ValueError, r"one weight per member .*\(got 2 weights"),
    (dict(weights=[1, -1, 1]), ValueError, r"engine.weights \('ppr'\) must be >= 0.0 \(got -1.0\)"),
    (dict(weights=[1, float("nan"), 1]), ValueError, r"engine.weights \('ppr'\) must be a finite number"),
    (dict(weights=[1, "a", 1]), TypeError, r"the weight of 'ppr' must be a number \(got 'a'\)"),
    (dict(weights={"ppr": 1}), TypeError, r"engine.weights must be a list of numbers"),
    (dict(weights=[0, 0, 0]), ValueError, r"must leave a member with a weight > 0"),
    (dict(rule="borda"), ValueError, r"engine.rule must be one of \['lead_then_fill', 'rrf', 'score'\] \(got 'borda'\)"),
    (dict(rrf_k=-1.0), ValueError, r"engine.rrf_k must be >= 0"),
    (dict(rrf_k=float("inf")), ValueError, r"engine.rrf_k must be a finite number"),
    (dict(member_width=1001), ValueError, r"engine.member_width must be <= 1000"),
    (dict(lead_passages=0), ValueError, r"engine.lead_passages must be >= 1"),
    (dict(link_anchors=-1), ValueError, r"engine.link_anchors must be >= 0"),
    (dict(link_moves=0), ValueError, r"engine.link_moves must be >= 1"),
    (dict(named_anchors=-1), ValueError, r"engine.named_anchors must be >= 0"),
    (dict(rule="lead_then_fill", lead="grag"), ValueError, r"engine.lead must be one of engine.members"),
    (dict(rule="lead_then_fill", weights=[1, 1, 0]), ValueError, r"gives the lead 'dense' weight 0"),
    (dict(ppr=PPRConfig(passage_width=3)), ValueError, r"engine.ppr.passage_width is a shared setting.*\(got 3\)"),
    (dict(ppr=HyperProveConfig()), TypeError, r"engine.ppr must be a PPRConfig \(got HyperProveConfig\)"),
])
def test_config_errors_are_one_line(kwargs, error, match):
    with pytest.raises(error, match=match) as err:
        FusionConfig(**kwargs)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("overrides, match", [
    (["engine.members=[ppr,bm25]"], r"each of engine.members must be one of .*\(got 'bm25'\)"),
    (["engine.weights=[1,2]"], r"one weight per member"),
    (["engine.rule=borda"], r"engine.rule must be one of"),
    (["engine.ppr.passage_width=3"], r"engine.ppr.passage_width is a shared setting"),
    (["engine.rrfk=3"], r"Key 'rrfk' not in 'FusionConfig'"),
])
def test_the_command_line_refuses_them_in_one_line(overrides, match):
    from hpengine.config import register_configs
    from hpengine.errors import UserError
    from hpengine.cli import _compose, job_config

    register_configs()
    with pytest.raises(UserError, match=match) as err:
        job_config(_compose("eval", ["index=idx", "questions=q.json", "engine=fusion", *overrides]))
    assert "\n" not in str(err.value)


def test_the_command_line_composes_fusion_with_its_settings():
    from hpengine.config import register_configs
    from hpengine.cli import _compose, job_config

    register_configs()
    cfg = job_config(_compose("eval", ["index=idx", "questions=q.json", "engine=fusion", "engine.rule=score",
                                       "engine.weights=[1,0.5,2]", "engine.ppr.damping=0.85"])).engine
    assert isinstance(cfg, FusionConfig) and cfg.rule == "score" and cfg.weights == [1, 0.5, 2]
    assert cfg.ppr.damping == 0.85 and [cfg.weight(m) for m in cfg.members] == [1.0, 0.5, 2.0]


# ------------------------------------------------------------------ the command line
CORPUS = [
    {"title": "Solo (film)", "text": "Solo is a 1999 film directed by Ann Berg. It was shot in Bergen."},
    {"title": "Ann Berg", "text": "Ann Berg is a Norwegian director. She was born in Oslo."},
    {"title": "Bergen", "text": "Bergen is a city on the west coast of Norway."},
]
QUESTIONS = [{"id": "q1", "question": "Where was the director of Solo born?", "answer": ["Oslo"],
              "gold_passages": [CORPUS[1]]}]


def test_eval_and_ask_accept_retriever_fusion(tmp_path, capsys):
    from hpengine.cli import main

    (tmp_path / "corpus.json").write_text(json.dumps(CORPUS))
    (tmp_path / "q.json").write_text(json.dumps(QUESTIONS))
    idx, run = tmp_path / "idx", tmp_path / "run.json"
    main(["index", f"corpus={tmp_path / 'corpus.json'}", f"out={idx}", "encoder.dtype=float32"])
    main(["eval", f"index={idx}", f"questions={tmp_path / 'q.json'}", "retriever=fusion", "engine.rule=lead_then_fill",
          f"output={run}", "encoder.dtype=float32"])
    result = json.loads(run.read_text())
    assert result["retriever"] == "fusion" and "fuse" in result["seconds"]
    rec = result["records"][0]
    assert rec["retrieved"] and rec["notes"][0].startswith("fusion: hyperprove (weight 1): chain[0:")
    capsys.readouterr()
    main(["ask", str(idx), "Where was the director of Solo born?", "retriever=fusion", "engine.weights=[1,0,1]",
          "encoder.dtype=float32"])
    out = capsys.readouterr().out
    assert "Q: Where was the director of Solo born?" in out and "Ann Berg" in out


def test_the_defaults_give_ppr_two_the_others_one_and_restart_ppr_when_both_run():
    from hpengine.config._engine import DEFAULT_FUSION_WEIGHTS, DEFAULT_RESTART_SHARE

    assert DEFAULT_FUSION_WEIGHTS == {"ppr": 2.0} and DEFAULT_RESTART_SHARE == 0.1
    assert [FusionConfig().weight(m) for m in ("hyperprove", "ppr", "dense")] == [1.0, 2.0, 1.0]
    assert FusionConfig(members=["hyperprove", "dense"]).weight("hyperprove") == 1.0
    assert FusionConfig(weights=[1, 1, 1]).weight("ppr") == 1.0  # given weights are the weights
    assert FusionConfig().restart() == 0.1 and FusionConfig(restart_share=0).restart() == 0.0
    assert FusionConfig(members=["ppr", "dense"]).restart() == 0.0  # no HyperProve: no restart, no error
    assert FusionConfig(weights=[0, 1, 1]).restart() == 0.0


# ------------------------------------------------- PPR restarted at HyperProve's passages
def _restart_reference(ids: list, mass: list, ranked: list, share: float, n: int, first_passage: int) -> dict:
    """One question's personalization as node -> mass, from the definition."""
    out = {}
    for node, m in zip(ids, mass):
        if node >= 0:
            out[node] = out.get(node, 0.0) + m
    top = [p for p in ranked[:n]]
    weights = [1.0 / (1 + r) if p >= 0 else 0.0 for r, p in enumerate(top)]
    total = sum(weights)
    for r, p in enumerate(top):
        if p >= 0 and total > 0:
            out[p + first_passage] = out.get(p + first_passage, 0.0) + share * weights[r] / total
    norm = sum(out.values())
    return {k: v / norm for k, v in out.items()} if norm > 0 else out


def test_restarted_ppr_walks_from_its_seeds_and_hyperproves_passages(built):
    index, encoder, questions = built
    cfg = FusionConfig(members=["hyperprove", "ppr"], restart_share=0.3, restart_passages=4, rule="rrf")
    engine = Engine(index, encoder, config=cfg)
    fusion = engine.retriever
    emb = engine.steps.encode(questions)
    outs = fusion._run_members(questions, emb)
    assert list(outs) == ["hyperprove", "ppr"]
    ppr = fusion.members["ppr"][0]
    ids, mass = ppr.seeds(questions, emb)
    got_ids, got_mass = fusion._restart_seeds(ids, mass, outs["hyperprove"].ranked)
    first = index.num_entities + index.num_facts
    for q in range(len(questions)):
        want = _restart_reference(ids[q].tolist(), mass[q].tolist(), outs["hyperprove"].ranked[q].tolist(), 0.3, 4,
                                  first)
        got = {}
        for node, m in zip(got_ids[q].tolist(), got_mass[q].tolist()):
            if node >= 0:
                got[node] = got.get(node, 0.0) + m
        assert got.keys() == want.keys() and all(abs(got[k] - want[k]) < 1e-6 for k in want), q
    walked = ppr.retrieve_seeded(questions, emb, got_ids, got_mass).ranked
    assert torch.equal(outs["ppr"].ranked, walked)
    plain = Engine(index, encoder, config=FusionConfig(members=["hyperprove", "ppr"], rule="rrf",
                                                       restart_share=0)).retriever
    assert torch.equal(plain._run_members(questions, emb)["ppr"].ranked, ppr.retrieve(questions, emb).ranked)
    assert not torch.equal(walked, ppr.retrieve(questions, emb).ranked)  # the restart moved some ranking


def test_restarted_ppr_batched_equals_one_by_one(built):
    index, encoder, questions = built
    engine = Engine(index, encoder, config=FusionConfig(restart_share=0.1))
    together = engine.answer(questions)
    for i in range(0, len(questions), 3):
        assert engine.answer([questions[i]])[0].passages == together[i].passages


@pytest.mark.parametrize("kw", [dict(members=["ppr", "dense"], lead="dense"),
                                dict(members=["hyperprove", "ppr", "dense"], weights=[1, 0, 1])])
def test_restart_needs_both_members(kw):
    with pytest.raises(ValueError, match="restart_share"):
        FusionConfig(restart_share=0.1, **kw)


class _CountingLLM:
    """Decomposer + reader stand-in that records every call: plans of one sub-query, answer "Halden"."""

    def __init__(self):
        self.stats = {"tokens_in": 0, "tokens_out": 0, "fallback": 0}
        self.decomposed, self.reads = [], []

    def decompose(self, questions):
        self.decomposed.append(list(questions))
        return [[q] for q in questions]

    def read(self, questions, facts, final=False, steps=None):
        self.reads.append((list(questions), final, [list(f) for f in facts]))
        return ["Halden" for _ in questions]


def test_with_an_llm_the_members_run_without_it_and_the_fused_passages_are_read_once(built):
    index, encoder, questions = built
    llm = _CountingLLM()
    engine = Engine(index, encoder, config=FusionConfig(), decomposer=llm, reader=llm)
    preds = engine.answer(questions)
    assert llm.decomposed == []  # HyperProve's no-LLM hops: no decomposition, no hop reads
    assert len(llm.reads) == 1 and llm.reads[0][0] == questions and llm.reads[0][1] is True
    width = engine.config.reader_passages
    expected = [engine.steps.passage_texts(torch.tensor([p.passages[:width]]))[0] for p in preds]
    assert llm.reads[0][2] == [list(e) for e in expected]  # the fused top passages
    assert [p.answer for p in preds] == ["Halden"] * len(questions)
    plain = Engine(index, encoder, config=FusionConfig()).answer(questions)
    assert [p.passages for p in preds] == [p.passages for p in plain]  # the no-LLM fusion's ranking


def test_member_llm_lets_the_members_run_their_llm_steps(built):
    index, encoder, questions = built
    llm = _CountingLLM()
    Engine(index, encoder, config=FusionConfig(member_llm=True), decomposer=llm, reader=llm).answer(questions)
    assert llm.decomposed == [questions]  # HyperProve decomposed the batch
    assert sum(final for _, final, _ in llm.reads) == 2  # HyperProve's final read and the fusion's


# ------------------------------------------------- following the first passages' links
def _links_reference(index) -> list:
    """Per passage, the set of passages it links to: homes of the entities its facts name (itself
    excluded), from Python lists."""
    lk = index.lookups
    home = {}
    for e, (lo, hi) in enumerate(zip(lk.home_crow.tolist()[:-1], lk.home_crow.tolist()[1:])):
        home[e] = lk.home_col.tolist()[lo:hi]
    names = [set() for _ in range(index.num_passages)]
    for f, e in index.fact_entity_raw.t().tolist():
        names[int(index.fact_passage[f])].add(e)
    return [{h for e in es for h in home[e]} - {p} for p, es in enumerate(names)]


def _follow_reference(row: list, links: list, anchors: int, moves: int, named: list | None = None,
                      named_max: int = 0) -> list:
    """One ranking in plain Python, by positions: its first ``anchors`` entries and its first
    ``named_max`` later entries marked in ``named`` (the anchors, in order), then the first
    ``moves`` other entries linked from an anchor, then the rest in order."""
    later = [k for k in range(anchors, len(row)) if named and named[k]][:named_max]
    anchor = sorted(set(range(min(anchors, len(row)))) | set(later))
    lead = [row[k] for k in anchor if row[k] >= 0]
    rest = [k for k in range(len(row)) if k not in anchor]
    linked = [k for k in rest if row[k] >= 0 and any(row[k] in links[a] for a in lead)][:moves]
    return [row[k] for k in anchor + linked + [k for k in rest if k not in linked]]


def _runs(text: str) -> set:
    """entity_key of every run of whole words of ``text``, no length bound."""
    from hpengine.models import entity_key

    words = text.split()
    return {entity_key(" ".join(words[i:j])) for i in range(len(words)) for j in range(i + 1, len(words) + 1)}


def _named_reference(question: str, titles: list, longest: bool = True) -> list:
    """Whether each title's name (without a trailing bracket) is a run of whole words of the
    question, up to entity_key, and (``longest``) not only a run inside another such title's name
    (every run tried, no length bound)."""
    from hpengine.models import entity_key

    names = [re.sub(r"\s*\([^()]*\)$", "", t.strip()) or t.strip() for t in titles]
    runs = _runs(question)
    hit = [bool(entity_key(n)) and entity_key(n) in runs for n in names]
    inner = {k for n, h in zip(names, hit) if h for k in _runs(n) - {entity_key(n)}}
    return [h and (not longest or entity_key(n) not in inner) for n, h in zip(names, hit)]


@pytest.mark.parametrize("anchors, moves", [(1, 1), (1, 3), (2, 2), (3, 10)])
def test_linked_passages_and_follow_links_equal_the_reference(built, anchors, moves):
    from hpengine.retrieval import follow_links, linked_passages

    index = built[0]
    links = _links_reference(index)
    lk = index.lookups
    gen = torch.Generator().manual_seed(anchors * 10 + moves)
    rows = torch.stack([torch.randperm(index.num_passages, generator=gen)[:8] for _ in range(30)])
    rows[::4, 5:] = -1  # padded rows
    rows[1::5, 0] = -1  # a padded anchor
    linked = linked_passages(rows[:, :anchors], rows, lk.passage_crow, lk.passage_facts,
                             *lk.extracted_incidence(), lk.home_crow, lk.home_col, index.num_passages)
    for row, got in zip(rows.tolist(), linked.tolist()):
        want = [p >= 0 and p not in row[:anchors] and any(p in links[a] for a in row[:anchors] if a >= 0)
                for p in row]
        assert got == want
    assert any(map(any, linked.tolist()))  # the built-in corpus has links to follow
    out = follow_links(rows, linked, anchors, moves)
    for row, got in zip(rows.tolist(), out.tolist()):
        assert got == _follow_reference(row, links, anchors, moves)


def test_fusion_puts_its_anchors_first_and_follows_their_links_after_the_rule(built):
    index, encoder, questions = built
    links = _links_reference(index)
    titles = [p.title for p in index.passages]
    rule_only = Engine(index, encoder, config=FusionConfig(link_anchors=0, named_anchors=0)).answer(questions)
    cfg = FusionConfig()
    assert (cfg.link_anchors, cfg.link_moves, cfg.named_anchors) == (1, 3, 3)  # fusion_sweep.py --named-grid
    longest = 0
    for config in (cfg, FusionConfig(named_anchors=0), FusionConfig(link_anchors=0, named_anchors=2)):
        got = Engine(index, encoder, config=config).answer(questions)
        moved = named_moved = 0
        for q, r, f in zip(questions, rule_only, got):
            named = _named_reference(q, [titles[p] for p in r.passages])
            longest += named != _named_reference(q, [titles[p] for p in r.passages], longest=False)
            want = _follow_reference(r.passages, links, config.link_anchors, config.link_moves, named,
                                     config.named_anchors)
            assert f.passages == want
            moved += want != r.passages
            later = min(sum(named[config.link_anchors:]), config.named_anchors)
            lead = want[: config.link_anchors + later]  # the anchors
            up_named = [p for p in lead[config.link_anchors:] if want.index(p) < r.passages.index(p)]
            up = [p for k, p in enumerate(want) if k < r.passages.index(p) and p not in lead]
            named_moved += bool(up_named)
            note = [n for n in f.notes if n.startswith("fusion: named by the question")]
            assert note == ([f"fusion: named by the question, moved up "
                             + ", ".join(repr(titles[p]) for p in up_named)] if up_named else [])
            note = [n for n in f.notes if n.startswith("fusion: links of ")]
            assert note == ([f"fusion: links of {', '.join(repr(titles[p]) for p in lead)} moved up "
                             + ", ".join(repr(titles[p]) for p in up)] if up else [])
        assert moved > 0  # the step changed some rankings on the built-in corpus
        if config.named_anchors:
            assert named_moved > 0  # and some of the built-in questions name a passage further down
    assert longest > 0  # a name inside a longer named title ("Halden" in "Halden University") is not named


def _random_csr(rows: int, cols: int, per_row: int, gen) -> tuple:
    counts = torch.randint(0, per_row + 1, (rows,), generator=gen)
    crow = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(counts, 0)])
    col = torch.randint(0, cols, (int(crow[-1]),), generator=gen)
    return crow, col


@with_devices
@pytest.mark.parametrize("seed", range(4))
def test_link_ops_on_random_graphs_equal_the_reference(device, seed):
    """Random passage->fact, fact->entity and entity->home CSRs; rows of random candidates; the
    anchors the first ones or, with named passages, those too."""
    from hpengine.retrieval import anchor_positions, follow_links, linked_passages

    gen = torch.Generator().manual_seed(seed)
    p, h, v, q, w = 40, 90, 30, 16, 9
    pf, fe, eh = _random_csr(p, h, 4, gen), _random_csr(h, v, 3, gen), _random_csr(v, p, 2, gen)
    rows = torch.stack([torch.randperm(p, generator=gen)[:w] for _ in range(q)])
    rows[::3, 6:] = -1
    anchors, moves, named_max = seed % 3, 1 + seed, 1 + seed % 2
    named = (torch.rand(q, w, generator=gen) < 0.3) & (rows >= 0)
    links = []
    for a in range(p):
        facts = pf[1][pf[0][a]:pf[0][a + 1]].tolist()
        ents = [e for f in facts for e in fe[1][fe[0][f]:fe[0][f + 1]].tolist()]
        links.append({x for e in ents for x in eh[1][eh[0][e]:eh[0][e + 1]].tolist()} - {a})
    on = lambda t: t.to(device)  # noqa: E731
    for marks, cap in ((None, 0), (named, named_max)):
        anchor = anchor_positions(on(rows), anchors, None if marks is None else on(marks), cap)
        linked = linked_passages(torch.where(anchor, on(rows), -1), on(rows), *map(on, pf), *map(on, fe),
                                 *map(on, eh), p)
        out = follow_links(on(rows), linked, anchor, moves)
        if marks is None:
            assert torch.equal(out, follow_links(on(rows), linked, anchors, moves))  # an int: the first ones
        for i, (row, got_linked, got) in enumerate(zip(rows.tolist(), linked.cpu().tolist(), out.cpu().tolist())):
            flags = None if marks is None else marks[i].tolist()
            later = [k for k in range(anchors, w) if flags and flags[k]][:cap]
            lead = [row[k] for k in sorted(set(range(anchors)) | set(later)) if row[k] >= 0]
            assert got_linked == [x >= 0 and x not in lead and any(x in links[a] for a in lead) for x in row]
            assert got == _follow_reference(row, links, anchors, moves, flags, cap)


@with_devices
@pytest.mark.parametrize("seed", range(4))
def test_named_passages_on_random_keys_equal_the_reference(device, seed):
    """Random title keys (some passages without a name, some sharing one) and random per-question
    key sets; padded candidates."""
    from hpengine.retrieval import named_passages

    gen = torch.Generator().manual_seed(seed)
    p, q, w = 30, 12, 7
    title = torch.randint(0, 20, (p,), generator=gen) * 7919 - 3  # shared keys, negative ones too
    title[torch.rand(p, generator=gen) < 0.2] = -1  # no title name
    cand = torch.stack([torch.randperm(p, generator=gen)[:w] for _ in range(q)])
    cand[::4, 5:] = -1
    held = [set(torch.randint(0, 20, (int(torch.randint(0, 6, (1,), generator=gen)),), generator=gen).mul(7919)
                .sub(3).tolist()) for _ in range(q)]
    owner = torch.tensor([i for i, ks in enumerate(held) for _ in ks], dtype=torch.int64)
    keys = torch.tensor([k for ks in held for k in ks], dtype=torch.int64)
    got = named_passages(cand.to(device), title.to(device), owner.to(device), keys.to(device)).cpu().tolist()
    want = [[c >= 0 and int(title[c]) != -1 and int(title[c]) in held[i] for c in row]
            for i, row in enumerate(cand.tolist())]
    assert got == want
    assert any(map(any, want))  # some candidates are named


def test_title_names_and_the_name_keys_of_a_text():
    from hpengine.models import entity_key, name_keys_in, title_name

    assert title_name("The Cheaters (1945 film)") == "The Cheaters"
    assert title_name("(I Can't Get No) Satisfaction") == "(I Can't Get No) Satisfaction"
    assert title_name("(film)") == "(film)"  # nothing would be left: the title stays
    text = "Who directed the film The Cheaters, and when did Joseph Kane die?"
    keys = name_keys_in(text, 3)
    assert entity_key(title_name("The Cheaters (1945 film)")) in keys  # "The Cheaters," -> "cheaters"
    assert "joseph kane" in keys and "kane die" in keys  # "die?": the edge punctuation goes
    assert "cheaters, and" in keys  # only a run's edges are stripped
    assert len(keys) == len(set(keys)) and "" not in keys
    assert all(len(k.split()) <= 3 for k in keys)
    assert not name_keys_in("", 3) and not name_keys_in("a b", 0)


def test_index_title_names(built):
    index = built[0]
    keys, max_words = index.lookups.title_names()
    names = [entity_key_of(p.title) for p in index.passages]
    assert keys.shape == (index.num_passages,) and keys.dtype == torch.int64
    assert max_words == max(len(n.split()) for n in names)
    hashed = index.lookups.name_hashes(names)
    assert torch.equal(keys, torch.where(torch.tensor([bool(n) for n in names]), hashed, -1))


def entity_key_of(title: str) -> str:
    from hpengine.models import entity_key, title_name

    return entity_key(title_name(title))
