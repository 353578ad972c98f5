"""The QA engine on the built-in corpus with the real fast extractor and a hashing encoder."""
import json

import pytest

from hpengine.config import DenseConfig, EvalConfig, HyperProveConfig, RetrievalConfig
from hpengine.jobs import evaluate
from hpengine.pipeline import Engine
from hpengine.testing._fakes import HashingEncoder


@pytest.fixture(scope="module")
def built(builtin_index):
    return builtin_index


def small_cfg(**kw):
    return RetrievalConfig(num_seeds=4, subgraph_size=40, top_k=3, **kw)


def test_chain_and_passages(built):
    index, encoder, questions = built
    engine = Engine(index, encoder, small_cfg(), HyperProveConfig(num_hops=2, passage_width=6))
    preds = engine.answer([q.question for q in questions])
    assert len(preds) == len(questions)
    for p in preds:
        assert len(p.chain) == 2
        assert len(p.passages) == len(set(p.passages)) == 6
        assert all(0 <= i < index.num_passages for i in p.passages)
        for hop in p.chain:
            assert 1 <= len(hop.facts) <= 3
            scores = [f.score for f in hop.facts]
            assert scores == sorted(scores, reverse=True)
        # the chain's passages come first, in chain order: each hop's facts, then the passages
        # titled with its bridges
        chain_passages = []
        for hop in p.chain:
            for passage in [f.passage for f in hop.facts] + hop.linked:
                if passage not in chain_passages:
                    chain_passages.append(passage)
        assert p.passages[: len(chain_passages)] == chain_passages[:6]
        # the second hop's query carries the first hop's bridge
        assert p.chain[1].subquery.startswith(p.question)
        if p.chain[0].answer:
            assert p.chain[0].answer in p.chain[1].subquery


def test_batched_equals_one_by_one(built):
    index, encoder, questions = built
    engine = Engine(index, encoder, small_cfg(), HyperProveConfig(num_hops=2))
    texts = [q.question for q in questions[:5]]
    together = engine.answer(texts)
    alone = [engine.answer([t])[0] for t in texts]
    for a, b in zip(together, alone):
        assert a.answer == b.answer and a.passages == b.passages
        assert [[f.text for f in h.facts] for h in a.chain] == [[f.text for f in h.facts] for h in b.chain]


def test_dense_baseline_and_eval(built, tmp_path):
    index, encoder, questions = built
    engine = Engine(index, encoder, small_cfg(), DenseConfig(passage_width=5))
    result = evaluate(engine, questions, EvalConfig(), progress=False)
    for key in ("num_questions", "recall@2", "recall@5", "em", "f1", "seconds", "questions_per_second",
                "llm_tokens_in", "llm_tokens_out", "records"):
        assert key in result
    assert result["num_questions"] == len(questions)
    assert 0.0 <= result["recall@5"] <= 1.0 and result["recall@2"] <= result["recall@5"]
    rec = result["records"][0]
    assert {"prediction", "gold", "retrieved", "chain", "em", "f1"} <= set(rec)
    json.dumps(result)  # serialisable


def test_encoder_mismatch_refused(built):
    index, _, _ = built
    with pytest.raises(ValueError, match="encoder"):
        Engine(index, HashingEncoder(dim=32))


class ScriptedLLM:
    """Decomposer + reader stand-in: fixed plans, answers looked up by substring."""

    def __init__(self, plans, answers):
        self.plans, self.answers = plans, answers
        self.stats = {"tokens_in": 0, "tokens_out": 0, "fallback": 0}
        self.read_calls = []

    def decompose(self, questions):
        return [self.plans[q] for q in questions]

    def read(self, questions, facts, final=False, steps=None):
        self.read_calls.append((list(questions), final))
        self.steps = steps
        return [next((a for key, a in self.answers.items() if key in q), "unknown") for q in questions]


def test_llm_mode_rewrites_with_answers_and_masks_short_plans(built):
    index, encoder, _ = built
    q1, q2 = "Where was the director of Alpha born?", "What is Sarn?"
    llm = ScriptedLLM({q1: ["Who directed Alpha?", "Where was #1 born?"], q2: ["What is Sarn?"]},
                      {"directed Alpha": "Ilse Marrow", "Ilse Marrow born": "Halden", "What is Sarn": "a city"})
    # question_passages=0: the ranking is the chain's alone (the lead is tested below)
    engine = Engine(index, encoder, small_cfg(), HyperProveConfig(question_passages=0, final_with_steps="always"),
                    decomposer=llm, reader=llm)
    p1, p2 = engine.answer([q1, q2])
    assert [h.subquery for h in p1.chain] == ["Who directed Alpha?", "Where was Ilse Marrow born?"]
    assert [h.answer for h in p1.chain] == ["Ilse Marrow", "Halden"]
    assert len(p2.chain) == 1  # masked on hop 2
    # answers that name a passage title link that passage right after their hop's facts
    titled = {psg.title: i for i, psg in enumerate(index.passages)}
    assert p1.chain[0].linked == [titled["Ilse Marrow"]]
    assert p1.chain[1].linked == ([titled["Halden"]] if "Halden" in titled else [])
    assert len(p2.chain[0].linked) <= 1  # "a city" names no passage: the no-LLM bridge's home, if any
    hop1 = list(dict.fromkeys([f.passage for f in p1.chain[0].facts] + [titled["Ilse Marrow"]]))
    assert p1.passages[: len(hop1)] == hop1
    assert llm.read_calls[-1] == ([q1, q2], True)  # one final batched read over all questions
    # the final read sees each question's chain of (sub-question, answer)
    assert llm.steps == [[("Who directed Alpha?", "Ilse Marrow"), ("Where was Ilse Marrow born?", "Halden")],
                         [("What is Sarn?", "a city")]]


@pytest.mark.parametrize("count", [1, 2])
def test_llm_mode_ranking_leads_with_the_question_hop(built, count):
    from hpengine.retrieval import hyperprove_hop

    index, encoder, _ = built
    q1, q2 = "Where was the director of Alpha born?", "What is Sarn?"
    llm = ScriptedLLM({q1: ["Who directed Alpha?", "Where was #1 born?"], q2: ["What is Sarn?"]},
                      {"directed Alpha": "Ilse Marrow", "Ilse Marrow born": "Halden", "What is Sarn": "a city"})
    plain = Engine(index, encoder, small_cfg(), HyperProveConfig(question_passages=0), decomposer=llm, reader=llm)
    led = Engine(index, encoder, small_cfg(), HyperProveConfig(question_passages=count), decomposer=llm, reader=llm)
    hop = hyperprove_hop(index.graph, index.fact_emb, encoder.encode([q1, q2]), cfg=small_cfg())
    for p, lead, q in zip(plain.answer([q1, q2]), led.answer([q1, q2]), hop.fact_ids.tolist()):
        first = list(dict.fromkeys(index.fact_passage[f].item() for f in q if f >= 0))[:count]
        assert lead.passages[:count] == first  # the question hop's best passages lead
        expect = list(dict.fromkeys(first + p.passages))[: len(p.passages)]
        assert lead.passages == expect  # then the chain's ranking, repeats removed
        assert [h.facts for h in lead.chain] == [h.facts for h in p.chain]  # readers see the same facts


@pytest.mark.parametrize("resolve", [True, False])
def test_llm_mode_maps_a_choice_answer_back_to_its_option(built, resolve):
    index, encoder, _ = built
    q = "Which film has the director born first, Alpha or Beta?"
    llm = ScriptedLLM({q: ["Who directed Alpha?", "Who directed Beta?", "Who was born first, #1 or #2?"]},
                      {"directed Alpha": "Ilse Marrow", "directed Beta": "Oskar Venn", "born first": "Ilse Marrow"})
    engine = Engine(index, encoder, small_cfg(), HyperProveConfig(num_hops=3, resolve_choice=resolve),
                    decomposer=llm, reader=llm)
    (p,) = engine.answer([q])
    assert [h.answer for h in p.chain] == ["Ilse Marrow", "Oskar Venn", "Ilse Marrow"]
    # the final read answered with Alpha's director; the chain maps it back to Alpha
    assert p.answer == ("Alpha" if resolve else "Ilse Marrow")


@pytest.mark.parametrize("mode", ["always", "comparisons", "never", True, False])
def test_final_read_sees_steps_per_mode(built, mode):
    index, encoder, _ = built
    q1, q2 = "Where was the director of Alpha born?", "Which film came out first, Alpha or Beta?"
    llm = ScriptedLLM({q1: ["Who directed Alpha?", "Where was #1 born?"], q2: ["When was Alpha released?"]},
                      {"directed Alpha": "Ilse Marrow", "Ilse Marrow born": "Halden", "Alpha released": "1961"})
    engine = Engine(index, encoder, small_cfg(), HyperProveConfig(final_with_steps=mode), decomposer=llm, reader=llm)
    engine.answer([q1, q2])
    steps1 = [("Who directed Alpha?", "Ilse Marrow"), ("Where was Ilse Marrow born?", "Halden")]
    steps2 = [("When was Alpha released?", "1961")]
    expected = {"always": [steps1, steps2], True: [steps1, steps2], "never": [None, None], False: [None, None],
                "comparisons": [None, steps2]}  # only the choice question's final read sees its steps
    assert llm.steps == expected[mode]


def test_final_with_steps_is_validated():
    with pytest.raises(ValueError, match="final_with_steps must be one of"):
        HyperProveConfig(final_with_steps="sometimes")
    assert HyperProveConfig(final_with_steps="False").final_with_steps == "never"  # a Hydra override of the old bool


class RecordingEncoder(HashingEncoder):
    def __init__(self, dim):
        super().__init__(dim=dim)
        self.seen = []

    def encode(self, texts, progress=False, batch_size=None, kind="passage"):
        self.seen.append(list(texts))
        return super().encode(texts, kind=kind)


@pytest.mark.parametrize("template,anchored,by_answers", [("{subquery} {question}", True, False),
                                                          ("{subquery} {question}", True, True),
                                                          ("{subquery} {question}", False, True),
                                                          ("{subquery}", True, False)])
def test_llm_mode_searches_with_template_reads_plain_subquery(built, template, anchored, by_answers):
    index, _, _ = built
    encoder = RecordingEncoder(dim=256)
    q1, q2 = "Where was the director of Alpha born?", "What is Sarn?"
    llm = ScriptedLLM({q1: ["Who directed Alpha?", "Where was #1 born?"], q2: ["What is Sarn?"]},
                      {"directed Alpha": "Ilse Marrow", "Ilse Marrow born": "Halden", "What is Sarn": "a city"})
    cfg = HyperProveConfig(search_template=template, anchored_search_alone=anchored, answers_anchor=by_answers)
    engine = Engine(index, encoder, small_cfg(), cfg, decomposer=llm, reader=llm)
    p1, _ = engine.answer([q1, q2])
    assert [h.subquery for h in p1.chain] == ["Who directed Alpha?", "Where was Ilse Marrow born?"]
    # "Who directed Alpha?" names Alpha as the question does: with anchoring it searches alone
    hop1 = "Who directed Alpha?" if anchored else template.format(subquery="Who directed Alpha?", question=q1)
    # "Where was Ilse Marrow born?" names hop 1's answer: with answers as anchors it searches alone
    hop2 = ("Where was Ilse Marrow born?" if anchored and by_answers
            else template.format(subquery="Where was Ilse Marrow born?", question=q1))
    # encoder calls: the questions, then one call per hop; a one-step plan equal to its question
    # searches with the question alone, and a masked question keeps its question
    assert encoder.seen[1] == [hop1, q2] and encoder.seen[2] == [hop2, q2]
    assert llm.read_calls[0][0] == ["Who directed Alpha?", "What is Sarn?"]
    assert llm.read_calls[1][0] == ["Where was Ilse Marrow born?", q2]


def test_diagnostics_stages(built):
    from hpengine.jobs import hop_diagnostics

    index, encoder, questions = built
    engine = Engine(index, encoder, small_cfg(), HyperProveConfig(num_hops=2, diagnostics=True))
    preds = engine.answer([q.question for q in questions])
    for p in preds:
        assert len(p.diagnostics) == len(p.chain) == 2
        for d, hop in zip(p.diagnostics, p.chain):
            assert set(d["selected"]) <= set(d["subgraph"])  # selected facts come from the subgraph
            assert d["selected"] == sorted({f.passage for f in hop.facts})
            assert d["linked"] == sorted(set(hop.linked))
    diag = hop_diagnostics(questions, preds, index)
    assert len(diag) == 2
    for hop in diag:
        assert set(hop) == {"seeds", "subgraph", "selected", "linked", "chain"}
        assert all(0.0 <= v <= 1.0 for v in hop.values())
        assert hop["chain"] >= max(hop["selected"], hop["linked"]) - 1e-9
    assert diag[1]["chain"] >= diag[0]["chain"]
