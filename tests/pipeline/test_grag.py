"""GRAG-MH: triples, Louvain communities and summary nodes (deterministic, saved with the index),
the batched search against its per-question reference (``reference_grag_search``; the ops' own
references are tested in tests/retrieval/test_grag_ops.py), batched == one by one, and the LLM-mode
tree decomposition with a scripted planner and reader."""
import pytest
import torch

from hpengine.config import ExtractorConfig, GragBuildConfig, GragConfig, GraphConfig
from hpengine.errors import UserError
from hpengine.eval import load_questions, normalize_answer
from hpengine.graph import Index, IndexFormatError, build_index, builtin_corpus_path, builtin_questions_path, load_corpus
from hpengine.models import DependencyTripleExtractor, LLMTripleExtractor, parse_triples
from hpengine.models import GenerateResult
from hpengine.jobs import build_grag, path_stats, prediction_from_json, prediction_to_json
from hpengine.pipeline import Engine
from hpengine.pipeline.retrievers import self_consistency_vote
from hpengine.testing.reference import reference_grag_search, reference_passage_scores
from hpengine.testing._fakes import HashingEncoder


@pytest.fixture(scope="module")
def built():
    passages = load_corpus(str(builtin_corpus_path())).passages
    encoder = HashingEncoder(dim=256)
    from hpengine.models import FastExtractor

    index, _ = build_index(passages, extractor=FastExtractor(ExtractorConfig()), encoder=encoder,
                           graph_cfg=GraphConfig(synonym_threshold=0.9))
    plain = Index(index.passages, index.facts, index.entities, index.fact_passage, index.fact_entity_raw,
                  index.synonyms, index.fact_emb, index.entity_emb, index.passage_emb, dict(index.meta))
    parts, report = build_grag(index, encoder, GragBuildConfig())
    index.grag = parts
    questions = [q.question for q in load_questions(str(builtin_questions_path()))]
    return index, plain, encoder, questions, report


# ------------------------------------------------------------------ index side
def test_dependency_triples_map_to_the_facts_entities():
    ex = DependencyTripleExtractor()
    out = ex.extract(["Ann Berg was born in Oslo and studied at Halden University.", "She painted Grey Bay.",
                      "Alone."], [["Ann Berg", "Oslo", "Halden University"], ["Ann Berg", "Grey Bay"], ["X"]])
    assert (0, "bear in", 1) in out[0] and any(h == 0 and t == 2 for h, _, t in out[0])
    assert out[1] == [(0, "paint", 1)]  # a pronoun subject is the title (names[0])
    assert out[2] == []


def test_parse_triples_validates_and_repairs():
    assert parse_triples('{"triples": [["A", "r", "B"]]}') == ([("A", "r", "B")], "ok")
    assert parse_triples("{'triples': [{'head': 'A', 'relation': 'r', 'tail': 'B'}, ['x'],]}")[1] == "repaired"
    assert parse_triples("no json") == ([], "rejected")


def test_llm_triples_are_cached_and_resumed(tmp_path, monkeypatch):
    import hpengine.models._triples as triples_mod

    calls = []

    def fake_generate(model, tokenizer, prompts, **kw):
        calls.append(len(prompts))
        return GenerateResult(['{"triples": [["Ann Berg", "born in", "Oslo"]]}' for _ in prompts], 10, 5)

    monkeypatch.setattr(triples_mod, "batched_generate", fake_generate)

    class P:
        def __init__(self, title, text):
            self.title, self.text = title, text

    ps = [P("Ann Berg", "Ann Berg was born in Oslo."), P("B", "b"), P("C", "c")]
    ex = LLMTripleExtractor(object(), None, str(tmp_path), model_name="fake", batch_size=2)
    out = ex.extract(ps)
    assert out[0] == [("Ann Berg", "born in", "Oslo")] and calls == [2, 1]
    again = LLMTripleExtractor(object(), None, str(tmp_path), model_name="fake", batch_size=2)
    assert again.extract(ps) == out and calls == [2, 1] and again.stats["cached"] == 3


def test_louvain_and_extractive_summaries_are_deterministic(built):
    index, _, encoder, _, report = built
    again, _ = build_grag(index, encoder, GragBuildConfig())
    parts = index.grag
    assert parts.num_triples > 50 and parts.num_summaries >= 2
    assert parts.summaries == again.summaries and torch.equal(parts.community, again.community)
    assert torch.equal(parts.summary_col, again.summary_col)
    assert all(n >= 2 for n in parts.summary_crow.diff().tolist())
    for key in ("triples", "communities", "summary_nodes", "seconds"):
        assert key in report
    assert set(report["seconds"]) >= {"triples", "communities", "summaries", "embed_summaries"}


def test_save_load_round_trip_and_old_index_refused(built, tmp_path):
    index, plain, encoder, questions, _ = built
    index.save(tmp_path / "idx")
    loaded = Index.load(tmp_path / "idx")
    for key in ("triple_head", "triple_tail", "triple_fact", "community", "summary_crow", "summary_col", "summary_emb"):
        assert torch.equal(getattr(loaded.grag, key), getattr(index.grag, key)), key
    assert loaded.grag.relations == index.grag.relations and loaded.grag.summaries == index.grag.summaries
    a = Engine(loaded, encoder, retriever="grag").answer(questions[:3])
    b = Engine(index, encoder, retriever="grag").answer(questions[:3])
    assert [p.passages for p in a] == [p.passages for p in b]
    plain.save(tmp_path / "old")  # an index without GRAG parts still loads ...
    old = Index.load(tmp_path / "old")
    assert old.grag is None
    with pytest.raises(UserError, match=r"hpengine grag-build"):  # ... and grag says how to build them
        Engine(old, encoder, retriever="grag")
    (tmp_path / "idx" / "gen-000001" / "grag.safetensors").write_bytes(b"broken")
    with pytest.raises(IndexFormatError, match="grag.safetensors"):
        Index.load(tmp_path / "idx")


# ------------------------------------------------------------------ query side
@pytest.mark.parametrize("cfg", [GragConfig(), GragConfig(max_over_seed=True),
                                 GragConfig(seeds=3, hops=2, decay=0.2, threshold=0.3, diversity=0.3, rerank_candidates=8),
                                 GragConfig(dense_candidates=7, graph_weight=0.4, diversity=0.1, rerank_candidates=12),
                                 GragConfig(fact_weight=0.0), GragConfig(fact_weight=1.0, query_chunk_size=2)])
def test_search_matches_per_question_reference(built, cfg):
    index, _, encoder, questions, _ = built
    engine = Engine(index, encoder, config=cfg)
    search = engine.retriever.search
    parts = index.grag
    v = index.num_entities
    crow, col = parts.adjacency(v)
    edges = [(r, c) for r in range(crow.numel() - 1) for c in col[crow[r]:crow[r + 1]].tolist()]
    np_crow, np_col = search.np_crow, search.np_col
    node_passages = [np_col[np_crow[i]:np_crow[i + 1]].tolist() for i in range(np_crow.numel() - 1)]
    # node passages from the triples directly (entity: its triples' passages; summary: members')
    fp = index.fact_passage.tolist()
    direct = [set() for _ in range(search.num_nodes)]
    for h, t, f in zip(parts.triple_head.tolist(), parts.triple_tail.tolist(), parts.triple_fact.tolist()):
        direct[h].add(fp[f])
        direct[t].add(fp[f])
    for c in range(parts.num_summaries):
        for e in parts.summary_col[parts.summary_crow[c]:parts.summary_crow[c + 1]].tolist():
            direct[v + c] |= direct[e]
    assert [sorted(x) for x in direct] == node_passages
    q_emb = engine.steps.encode(questions)
    found = search.search(questions, q_emb, cfg.passage_width)
    for i in range(len(questions)):
        ranked, vals, combined = reference_grag_search(q_emb[i], search.node_emb, search.is_graph_node.tolist(), edges,
                                                       node_passages, index.passage_emb, index.fact_emb,
                                                       index.fact_passage, cfg, cfg.passage_width)
        got = found["ranked"][i].tolist()
        assert found["scores"][i, : len(vals)].tolist() == pytest.approx(vals, abs=1e-5)
        # ids up to ties: equal scores may swap (the dense fill is compared by its cosine)
        pcos = reference_passage_scores(q_emb[i], index.passage_emb, index.fact_emb, index.fact_passage,
                                        cfg.fact_weight)
        for j, (a, b) in enumerate(zip(got, ranked)):
            if j < len(vals):
                assert a == b or combined[a] == pytest.approx(combined[b], abs=1e-6)
            else:
                assert a == b or pcos[a] == pytest.approx(pcos[b], abs=1e-6)


def test_grag_batched_equals_one_by_one(built):
    index, _, encoder, questions, _ = built
    engine = Engine(index, encoder, config=GragConfig(query_chunk_size=3))
    together = engine.answer(questions)
    alone = [engine.answer([q])[0] for q in questions]
    for a, b in zip(together, alone):
        assert a.passages == b.passages and a.answer == b.answer
        assert a.notes == b.notes == ["grag: reranker bi-encoder cosine"]


def test_cross_encoder_reranks_when_configured(built):
    index, _, encoder, questions, _ = built
    engine = Engine(index, encoder, config=GragConfig())

    class LengthScorer:  # a stand-in cross-encoder: longer passages score higher
        name = "length"

        def score(self, queries, passages):
            return torch.tensor([float(len(p)) / 100 for p in passages])

    engine.retriever.search.reranker = LengthScorer()
    pred = engine.answer(questions[:1])[0]
    assert pred.notes == ["grag: reranker cross-encoder length"]


# ------------------------------------------------------------------ LLM mode
class ScriptedTree:
    """Planner + reader stand-in: per (question, path) a fixed list of sub-questions; answers by substring."""

    def __init__(self, plans, answers, finals):
        self.plans, self.answers, self.finals = plans, answers, finals
        self.plan_calls, self.read_calls = [], []
        self.stats = {"tokens_in": 0, "tokens_out": 0, "fallback": 0}

    def next_steps(self, questions, histories, paths):
        self.plan_calls.append(len(questions))
        out = []
        for q, h, p in zip(questions, histories, paths):
            plan = self.plans.get((q, p), [])
            out.append(plan[len(h)] if len(h) < len(plan) else None)
        return out

    def read(self, questions, facts, final=False, steps=None):
        self.read_calls.append((len(questions), final))
        if final:
            self.final_facts = facts
            return [self.finals.get((q, tuple(a for _, a in (st or []))), "unknown") for q, st in zip(questions, steps)]
        return [next((a for k, a in self.answers.items() if k in q), "unknown") for q in questions]


def test_llm_tree_paths_and_self_consistency_vote(built):
    index, _, encoder, _, _ = built
    q1, q2 = "Where was the director of The Salt Lanterns born?", "What is Sarn?"
    plans = {(q1, 0): ["Who directed The Salt Lanterns?", "Where was Ilse Marrow born?"],
             (q1, 1): ["Who directed The Salt Lanterns?", "Where was Ilse Marrow born?"],
             (q1, 2): ["Which town is The Salt Lanterns about?"],
             (q2, 0): ["What is Sarn?"], (q2, 1): [], (q2, 2): ["Where is Sarn?"]}
    answers = {"directed": "Ilse Marrow", "Ilse Marrow born": "Halden", "town": "Brenholt", "What is Sarn": "a city",
               "Where is Sarn": "Caldoria"}
    finals = {(q1, ("Ilse Marrow", "Halden")): "Halden", (q1, ("Brenholt",)): "Brenholt",
              (q2, ("a city",)): "a city", (q2, ()): "The city", (q2, ("Caldoria",)): "Caldoria"}
    llm = ScriptedTree(plans, answers, finals)
    engine = Engine(index, encoder, config=GragConfig(paths=3, max_depth=3), decomposer=llm, reader=llm)
    p1, p2 = engine.answer([q1, q2])
    assert p1.answer == "Halden"  # 2 of 3 paths
    assert [h.subquery for h in p1.chain] == plans[(q1, 0)] + plans[(q1, 1)] + plans[(q1, 2)]
    assert [h.answer for h in p1.chain] == ["Ilse Marrow", "Halden", "Ilse Marrow", "Halden", "Brenholt"]
    assert p1.notes[-1] == "grag vote: 'Halden' from 2 of 3 paths" and len(p1.notes) == 5
    # q2: three distinct normalised answers... "a city" and "The city" differ; a 1-1-1 tie goes to
    # the path with the best retrieval score
    assert normalize_answer(p2.answer) in {"city", "caldoria"}
    assert len(p2.chain) == 2 and all(h.linked for h in p1.chain)
    # one planner call per step over all open paths of all questions; step 3 has none left asking
    assert llm.plan_calls[:3] == [6, 5, 2]
    assert llm.read_calls[-1] == (6, True)  # one final read over all paths
    assert engine.retriever.llm_components() == [llm]  # the planner's tokens reach the eval report
    assert len(set(p1.passages)) == len(p1.passages)
    assert [(x["steps"], x["answer"]) for x in p1.paths] == [(2, "Halden"), (2, "Halden"), (1, "Brenholt")]
    assert [x["steps"] for x in p2.paths] == [1, 0, 1]
    # paths 0 and 1 of q1 are the same path; no vote is unanimous
    assert path_stats([p1, p2]) == {"questions": 2, "paths_per_question": 3.0, "distinct_paths_per_question": 2.5,
                                    "steps_per_path": round(7 / 6, 3), "unanimous_votes": 0}
    assert path_stats([engine.answer(["What is Sarn?"])[0]])["distinct_paths_per_question"] == 3.0
    assert prediction_from_json(prediction_to_json(p1)) == p1  # a checkpoint keeps the paths
    from hpengine.config import EvalConfig
    from hpengine.eval import Question
    from hpengine.jobs import evaluate

    report = evaluate(engine, [Question(str(i), q, ["Halden"], [], [], None, {}) for i, q in enumerate([q1, q2])],
                      EvalConfig(batch_size=2), progress=False)
    assert report["reasoning_paths"] == path_stats([p1, p2])
    assert [x["answer"] for x in report["records"][0]["paths"]] == ["Halden", "Halden", "Brenholt"]


@pytest.mark.parametrize("restate_ends_path", [False, True])
def test_a_later_step_that_re_asks_the_question_ends_its_path(built, restate_ends_path):
    index, _, encoder, _, _ = built
    q = "Which film came out first, The Salt Lanterns or Sarn?"
    plans = {(q, 0): ["When did The Salt Lanterns come out?", "When did Sarn come out?", q,
                      "When did Brenholt come out?"],
             (q, 1): [q, "When did Sarn come out?"]}  # a first step may be the question itself
    answers = {"Salt Lanterns come": "1950", "Sarn come": "1960", "first": "Brenholt", "Brenholt come": "1940"}
    llm = ScriptedTree(plans, answers, {})
    engine = Engine(index, encoder, config=GragConfig(paths=2, max_depth=4, restate_ends_path=restate_ends_path),
                    decomposer=llm, reader=llm)
    pred = engine.answer([q])[0]
    asked = [h.subquery for h in pred.chain]
    if restate_ends_path:
        assert asked == plans[(q, 0)][:2] + plans[(q, 1)]
        assert [x["steps"] for x in pred.paths] == [2, 2]
    else:
        assert asked == plans[(q, 0)] + plans[(q, 1)]
        assert [h.answer for h in pred.chain[2:4]] == ["Brenholt", "1940"]


@pytest.mark.parametrize("skip", [False, True])
def test_the_final_read_leaves_out_a_step_that_re_asks_the_question(built, skip):
    index, _, encoder, _, _ = built
    q = "Which film came out first, The Salt Lanterns or Sarn?"
    plans = {(q, 0): [q, "When did Sarn come out?"], (q, 1): [q]}  # path 1 has nothing else to show
    answers = {"first": "Brenholt", "Sarn come": "1960"}
    finals = {(q, ("Brenholt", "1960")): "Brenholt", (q, ("1960",)): "Sarn", (q, ("Brenholt",)): "Brenholt"}
    llm = ScriptedTree(plans, answers, finals)
    engine = Engine(index, encoder, config=GragConfig(paths=2, max_depth=3, final_skip_restated=skip),
                    decomposer=llm, reader=llm)
    pred = engine.answer([q])[0]
    assert [x["answer"] for x in pred.paths] == (["Sarn", "Brenholt"] if skip else ["Brenholt", "Brenholt"])
    assert len(pred.chain) == 3  # the step is still asked, read and recorded


@pytest.mark.parametrize("cap", [0, 1, 3, 5])
def test_final_read_holds_the_steps_passages_round_robin(built, cap):
    index, _, encoder, _, _ = built
    q = "Where was the director of The Salt Lanterns born?"
    plans = {(q, 0): ["Who directed The Salt Lanterns?", "Where was Ilse Marrow born?"]}
    llm = ScriptedTree(plans, {"directed": "Ilse Marrow", "born": "Halden"}, {})
    engine = Engine(index, encoder, config=GragConfig(paths=1, max_depth=3, final_passages=cap), decomposer=llm,
                    reader=llm)
    pred = engine.answer([q])[0]
    first, second = (h.linked for h in pred.chain)
    if cap == 0:  # every passage the path read, in read order
        want = first + [p for p in second if p not in first]
    else:
        want = []
        for pair in zip(first, second):
            for p in pair:
                want += [p] if p not in want else []
        want = want[:cap]
    assert len(want) == (cap or len(set(first + second)))
    assert llm.final_facts == engine.steps.passage_texts(torch.tensor([want]))


def test_final_read_can_lead_with_the_questions_own_passages(built):
    index, _, encoder, _, _ = built
    q = "Where was the director of The Salt Lanterns born?"
    plans = {(q, 0): ["Who directed The Salt Lanterns?", "Where was Ilse Marrow born?"], (q, 1): []}
    llm = ScriptedTree(plans, {"directed": "Ilse Marrow", "born": "Halden"}, {})
    cfg = GragConfig(paths=2, max_depth=3, final_passages=4, final_with_question=True)
    engine = Engine(index, encoder, config=cfg, decomposer=llm, reader=llm)
    pred = engine.answer([q])[0]
    own = engine.retriever.search.search([q], engine.steps.encode([q]), cfg.passage_width)["ranked"][0]
    own = [p for p in own[: cfg.reader_passages].tolist() if p >= 0]
    first, second = (h.linked for h in pred.chain)
    want = []
    for trio in zip(own, first, second):
        for p in trio:
            want += [p] if p not in want else []
    path0, path1 = llm.final_facts  # path 1 asked nothing: it reads the question's own passages
    assert path0 == engine.steps.passage_texts(torch.tensor([want[:4]]))[0]
    assert path1 == engine.steps.passage_texts(torch.tensor([own[:4]]))[0]


@pytest.mark.parametrize("mode", ["always", "comparisons", "never"])
def test_final_read_shows_the_sub_answers_as_configured_and_resolves_choices(built, mode):
    index, _, encoder, _, _ = built
    q1 = "Where was the director of The Salt Lanterns born?"
    q2 = "Which is older, The Salt Lanterns or Sarn?"
    plans = {(q1, 0): ["Who directed The Salt Lanterns?"], (q2, 0): ["When was The Salt Lanterns made?"]}
    # the final read of q2 answers with what one option led to: resolve_choice maps it to that option
    finals = {(q1, ("Ilse Marrow",)): "Halden", (q1, ()): "Brenholt", (q2, ("1901",)): "1901", (q2, ()): "Sarn"}
    llm = ScriptedTree(plans, {"directed": "Ilse Marrow", "made": "1901"}, finals)
    engine = Engine(index, encoder, config=GragConfig(paths=1, final_with_steps=mode), decomposer=llm, reader=llm)
    p1, p2 = engine.answer([q1, q2])
    assert p1.answer == ("Halden" if mode == "always" else "Brenholt")
    assert p2.answer == ("Sarn" if mode == "never" else "The Salt Lanterns")
    engine = Engine(index, encoder, config=GragConfig(paths=1, final_with_steps=mode, resolve_choice=False),
                    decomposer=llm, reader=llm)
    assert engine.answer([q2])[0].answer == ("Sarn" if mode == "never" else "1901")


def test_self_consistency_vote_most_paths_then_best_score():
    assert self_consistency_vote(["Halden", "Brenholt", "halden"], [0.2, 0.9, 0.5]) == 2
    assert self_consistency_vote(["a", "b"], [0.1, 0.3]) == 1  # a tie of counts: the better path
    assert self_consistency_vote(["a", "b"], [0.3, 0.3]) == 0  # and then the earlier path
    assert self_consistency_vote(["The city", "city", "Caldoria"], [0.1, 0.2, 0.9]) == 1


def test_self_consistency_vote_unknown_abstains():
    # two paths that could not tell do not outvote the one that could, whatever their scores
    assert self_consistency_vote(["unknown", "Brenholt", "Unknown."], [0.9, 0.1, 0.9]) == 1
    assert self_consistency_vote(["unknown", "", "Halden", "halden", "Brenholt"], [0.9] * 2 + [0.1] * 3) == 2
    # when every path abstains the vote still names one: the best-scored
    assert self_consistency_vote(["unknown", "unknown"], [0.1, 0.4]) == 1


def test_llm_path_stops_when_the_planner_repeats_itself(built):
    index, _, encoder, _, _ = built
    q = "Where was the director of The Salt Lanterns born?"
    plans = {(q, 0): ["Who directed The Salt Lanterns?", "who directed the Salt Lanterns", "Where was Ilse Marrow born?"]}
    llm = ScriptedTree(plans, {"directed": "Ilse Marrow"}, {(q, ("Ilse Marrow",)): "Halden"})
    engine = Engine(index, encoder, config=GragConfig(paths=1, max_depth=3), decomposer=llm, reader=llm)
    pred = engine.answer([q])[0]
    assert [h.subquery for h in pred.chain] == ["Who directed The Salt Lanterns?"]  # the repeat ends the path
    assert pred.answer == "Halden" and llm.plan_calls == [1, 1]


def test_grag_config_validation():
    with pytest.raises(ValueError, match="threshold"):
        GragConfig(threshold=1.5)
    with pytest.raises(ValueError, match="seeds"):
        GragConfig(seeds=0)
    with pytest.raises(ValueError, match="llm_model"):
        GragBuildConfig(triples="llm")


def test_planner_prompt_with_and_without_worked_examples(monkeypatch):
    import hpengine.models._grag_models as gm

    q, history = "Where was the director of Alpha born?", [("Who directed Alpha?", "Ilse Marrow")]
    state = ["Question: " + q, "Step 1: Who directed Alpha? -> Ilse Marrow", "Reply:"]
    bare = gm.planner_prompt(q, history, 1, examples=False).splitlines()
    assert bare[1] == gm.PATH_HINTS[1] and bare[-3:] == state and not any(ln.startswith("Example") for ln in bare)
    full = gm.planner_prompt(q, history, 1).splitlines()
    assert full[-3:] == state and full[-4].endswith(gm.PATH_HINTS[1])
    assert [ln for ln in full if ln.startswith("Example")] == [f"Example {n}" for n in (1, 2, 3)]
    # each worked example ends with the reply it teaches, and the replies parse as the planner's own
    replies = [ln[len("Reply: "):] for ln in full if ln.startswith("Reply: ")]
    assert [gm.parse_plan_step(r) for r in replies] == ["Who is the mother of Xawery Żuławski?", None,
                                                         "Where was Alan Turing born?"]
    seen = []

    def fake_generate(model, tokenizer, prompts, **kw):
        seen.extend(prompts)
        return GenerateResult(["SUFFICIENT"] * len(prompts), 0, 0, 0)

    monkeypatch.setattr(gm, "batched_generate", fake_generate)
    for examples in (True, False):
        assert gm.TreePlanner(None, None, examples=examples).next_steps([q], [history], [1]) == [None]
    assert seen == [gm.planner_prompt(q, history, 1), gm.planner_prompt(q, history, 1, examples=False)]


def test_restate_f1_out_of_range_is_a_config_error():
    with pytest.raises(ValueError, match=r"engine\.restate_f1"):  # the CLI prints it as one line
        GragConfig(restate_f1=1.5)


def test_planner_samples_the_paths_after_the_greedy_ones(monkeypatch):
    import hpengine.models._grag_models as gm

    seen = {}

    def fake_generate(model, tokenizer, prompts, **kw):
        seen.update(kw)
        return GenerateResult(["SUFFICIENT"] * len(prompts), 0, 0, 0)

    monkeypatch.setattr(gm, "batched_generate", fake_generate)
    planner = gm.TreePlanner(None, None, temperature=0.7, greedy_paths=2, seed=3)
    assert planner.next_steps(["q"] * 4, [[]] * 4, [0, 1, 2, 3]) == [None] * 4
    assert seen["temperature"] == [0.0, 0.0, 0.7, 0.7]
    assert len(set(seen["seed"])) == 4  # the path number is in each prompt's seed
    gm.TreePlanner(None, None).next_steps(["q"] * 3, [[]] * 3, [0, 1, 2])
    assert seen["temperature"] == [0.0] * 3  # the default: every path greedy
    with pytest.raises(ValueError, match=r"engine\.path_temperature"):
        GragConfig(path_temperature=-0.1)
