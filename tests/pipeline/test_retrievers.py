"""The retriever interface: registry, user-registered methods, and the PPR method against a
per-question reference (Python linking + networkx PageRank)."""
from dataclasses import dataclass

import networkx as nx
import pytest
import torch

from hpengine.config import DenseConfig, EncoderConfig, EngineConfig, HyperProveConfig, PPRConfig
from hpengine.models import MentionTagger
from hpengine.pipeline import Engine, Prediction, Retrieved, Retriever, available_retrievers, get_retriever, register_retriever
from hpengine.pipeline.retrievers import PPRRetriever
from hpengine.testing import with_package


@pytest.fixture(scope="module")
def built(builtin_index):
    index, encoder, questions = builtin_index
    return index, encoder, [q.question for q in questions]


def test_registry_has_the_methods_and_names_the_choices():
    assert {"dense", "hyperprove", "ppr"} <= set(available_retrievers())
    assert get_retriever("ppr").config_class is PPRConfig
    with pytest.raises(ValueError, match=r"retriever must be one of \[.*'dense'.*\(got 'bm25'\)"):
        get_retriever("bm25")


@dataclass
class FirstPassagesConfig(EngineConfig):
    method = "first_passages"
    offset: int = 0


class FirstPassages(Retriever):
    """A user's method, whole: passages in id order from ``offset``. The engine does the rest."""

    name = "first_passages"
    config_class = FirstPassagesConfig

    def retrieve(self, questions, question_emb):
        start = self.config.offset
        ids = torch.arange(start, start + self.config.passage_width).repeat(len(questions), 1)
        return Retrieved(torch.where(ids < self.steps.index.num_passages, ids, -1))


def test_user_registered_retriever(built):
    """A fifth method touches its own class and config only: the engine encodes, answers (the
    best bridge of its top passages' facts, as for dense), pads and builds the predictions."""
    index, encoder, questions = built
    register_retriever(FirstPassages)
    register_retriever(FirstPassages)  # idempotent for the same class
    engine = Engine(index, encoder, retriever="first_passages")
    assert engine.method == "first_passages" and isinstance(engine.config, FirstPassagesConfig)
    cfg = FirstPassagesConfig(offset=index.num_passages - 2, passage_width=3)
    preds = Engine(index, encoder, config=cfg).answer(questions[:2])
    assert [p.passages for p in preds] == [[index.num_passages - 2, index.num_passages - 1]] * 2  # padding dropped
    steps = Engine(index, encoder, config=cfg).steps
    top = torch.tensor([[index.num_passages - 2, index.num_passages - 1]] * 2)
    fact_ids, scores = steps.passage_facts(top)
    expected = steps.answer_from_facts(questions[:2], steps.encode(questions[:2]), fact_ids, scores)
    assert [p.answer for p in preds] == expected and all(p.chain == [] for p in preds)

    class Clash(FirstPassages):
        pass

    with pytest.raises(ValueError, match="already registered"):
        register_retriever(Clash)
    with pytest.raises(TypeError, match="Retriever subclass"):
        register_retriever(object)


def test_config_picks_the_method_and_mismatches_are_refused(built):
    index, encoder, _ = built
    assert Engine(index, encoder).method == "hyperprove"
    assert Engine(index, encoder, config=DenseConfig()).method == "dense"
    shared = Engine(index, encoder, config=EngineConfig(passage_width=4), retriever="ppr")
    assert shared.method == "ppr" and shared.config.passage_width == 4 and isinstance(shared.config, PPRConfig)
    with pytest.raises(TypeError, match="needs a PPRConfig"):
        Engine(index, encoder, config=HyperProveConfig(), retriever="ppr")


@pytest.mark.parametrize("kwargs,match", [
    (dict(damping=1.0), "damping must be < 1"), (dict(seed_weighting="idf"), "seed_weighting must be one of"),
    (dict(use_ner=False, link_question=False, fact_seeds=0, passage_reset=0.0), "needs a seed source"), (dict(passage_width=0), "passage_width"),
    (dict(chain_facts=0), "chain_facts"), (dict(tol=0.0), "tol must be >"),
])
def test_ppr_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PPRConfig(**kwargs)


def _ppr_configs():
    return [PPRConfig(),
            PPRConfig(link_threshold=0.5, fact_seeds=0, passage_reset=0.0, fact_mass=0.0, damping=0.85),
            PPRConfig(link_threshold=0.5, seed_weighting="similarity", use_ner=False, fact_seeds=0),
            PPRConfig(link_threshold=0.5, seed_weighting="uniform", fact_seeds=4, passage_reset=0.3,
                      fact_mass=0.5),
            PPRConfig(use_ner=False, link_threshold=0.999, passage_reset=0.2)]


@pytest.mark.parametrize("cfg", _ppr_configs())
def test_ppr_batched_equals_one_by_one(built, cfg):
    index, encoder, questions = built
    engine = Engine(index, encoder, config=cfg)
    together = engine.answer(questions)
    alone = [engine.answer([q])[0] for q in questions]
    for a, b in zip(together, alone):
        assert a.passages == b.passages and a.answer == b.answer and a.notes == b.notes
        assert [f.text for f in a.chain[0].facts] == [f.text for f in b.chain[0].facts]
        for fa, fb in zip(a.chain[0].facts, b.chain[0].facts):
            assert fa.score == pytest.approx(fb.score, rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("group", [1, 3])
def test_ppr_walk_groups_do_not_change_results(built, monkeypatch, group):
    """The walk runs a group of questions at a time (bounded mass matrices at a million passages);
    any grouping gives the same passages, chain facts and scores."""
    index, encoder, questions = built
    cfg = PPRConfig(link_threshold=0.5, fact_seeds=4)
    whole = Engine(index, encoder, config=cfg).answer(questions)
    seen = []

    def groups(self, num_rows):
        seen.append(num_rows)
        return min(num_rows, group)

    monkeypatch.setattr(PPRRetriever, "walk_rows", groups)
    grouped = Engine(index, encoder, config=cfg).answer(questions)
    assert seen and max(seen) > group  # the batch was split
    for a, b in zip(whole, grouped):
        assert a.passages == b.passages and a.notes == b.notes
        assert [f.text for f in a.chain[0].facts] == [f.text for f in b.chain[0].facts]
        assert [f.score for f in a.chain[0].facts] == pytest.approx([f.score for f in b.chain[0].facts], abs=1e-7)


def test_ppr_walk_rows_follow_the_memory_budget(built):
    index, encoder, _ = built
    retriever = Engine(index, encoder, config=PPRConfig(memory_budget_mb=1)).retriever
    h, p, c = index.num_facts, index.num_passages, index.num_entities + index.num_passages
    walk = 4 * (h + 3 * p)  # the group's mass and scores
    solver = 4 * ((c + h) + 4 * c + h + (h + p))  # the solver's chunk, as ppr_chunk_size counts it
    assert retriever.walk_rows(10**6) == (1 << 20) // (walk + solver)
    from hpengine.retrieval import ppr_chunk_size  # a group is never wider than the solver's chunk

    assert retriever.walk_rows(10**6) <= ppr_chunk_size(10**6, num_nodes=c + h, num_columns=c, num_out=h + p,
                                                       memory_budget_mb=1, device_type="cuda")
    assert retriever.walk_rows(2) == 2


@with_package("faiss")
def test_entity_links_follow_the_fact_search_backend(built):
    """Names are searched exactly while the backend resolves to exact for them (the same call as
    before: benchmark-sized indexes do not change), by a DenseIndex otherwise."""
    from hpengine.config import RetrievalConfig
    from hpengine.retrieval import dense_topk

    index, encoder, questions = built
    q = encoder.encode(questions, kind="query").to(index.fact_emb.dtype)
    want = dense_topk(q, index.entity_emb, 4)
    steps = Engine(index, encoder, RetrievalConfig(), PPRConfig()).retriever.steps
    got = steps.entity_topk(q, 4)
    assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0]) and steps._entity_index is None
    flat = Engine(index, encoder, RetrievalConfig(seed_backend="faiss_flat"), PPRConfig()).retriever.steps
    got = flat.entity_topk(q, 4)
    assert flat._entity_index.backend == "faiss_flat" and flat._entity_index.num_keys == index.num_entities
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=0)
    assert (got[1] == want[1]).float().mean() > 0.95  # exact both: ids differ only at float ties
    at_size = RetrievalConfig(approximate_min_keys=index.num_entities)
    sized = Engine(index, encoder, at_size, PPRConfig()).retriever.steps
    sized.entity_topk(q, 4)
    assert sized._entity_index.backend == "faiss_ivf"  # auto: approximate from approximate_min_keys names


def _reference_personalization(index, encoder, question, cfg, tagger):
    """One question's personalization in plain Python: brute-force cosine linking of each NER
    mention and of the question to entity names, weights by cfg.seed_weighting, fact seeds and
    passage reset as documented. Returns {node: mass}."""
    ent = index.entity_emb.double()
    v, h = index.num_entities, index.num_facts
    entity_passages = {}
    for f, e in index.graph.fact_entity.t().tolist():
        entity_passages.setdefault(e, set()).add(int(index.fact_passage[f]))

    def weight(e, sim):
        sim = max(sim, 0.0)
        if cfg.seed_weighting == "uniform":
            return 1.0
        if cfg.seed_weighting == "similarity":
            return sim
        return sim / max(len(entity_passages.get(e, ())), 1)

    mass = {}

    def add(node, w):
        mass[node] = mass.get(node, 0.0) + w

    # unset, the threshold is the encoder's (the hashing encoder has none: EncoderConfig's, MiniLM's 0.6)
    threshold = getattr(encoder, "link_threshold", EncoderConfig.link_threshold) if cfg.link_threshold is None \
        else cfg.link_threshold

    def link(text_emb, k):
        sims = (ent @ text_emb.double()).tolist()
        for e in sorted(range(v), key=lambda i: -sims[i])[:k]:
            if sims[e] >= threshold:
                add(e, weight(e, sims[e]))

    if cfg.use_ner:
        for m in tagger.mentions([question])[0]:
            link(encoder.encode([m])[0], cfg.links_per_mention)
    q_emb = encoder.encode([question])[0]
    if cfg.link_question:
        link(q_emb, cfg.links_per_question)
    if cfg.fact_seeds:
        fsims = (index.fact_emb.double() @ q_emb.double()).tolist()
        raw = index.fact_entity_raw.t().tolist()
        for f in sorted(range(h), key=lambda i: -fsims[i])[: cfg.fact_seeds]:
            for ff, e in raw:
                if ff == f:
                    add(e, weight(e, fsims[f]))
    seeds = {n: w for n, w in mass.items() if w > 0}
    passages = {}
    if cfg.passage_reset:
        psims = (index.passage_emb.double() @ q_emb.double()).tolist()
        top = sorted(range(index.num_passages), key=lambda i: -psims[i])[:200]
        low, high = min(psims[i] for i in top), max(psims[i] for i in top)
        passages = {v + h + i: (psims[i] - low) / (high - low) for i in top if psims[i] > low}
    if not seeds or not passages:
        return seeds or passages
    total_e, total_p = sum(seeds.values()), sum(passages.values())
    out = {n: (1 - cfg.passage_reset) * w / total_e for n, w in seeds.items()}
    out.update({n: cfg.passage_reset * w / total_p for n, w in passages.items()})
    return out


@pytest.mark.parametrize("cfg", _ppr_configs())
def test_ppr_matches_per_question_networkx_reference(built, cfg):
    index, encoder, questions = built
    engine = Engine(index, encoder, config=cfg)
    preds = engine.answer(questions)
    tagger = MentionTagger()
    v, h, p = index.num_entities, index.num_facts, index.num_passages
    g = nx.Graph()
    g.add_nodes_from(range(v + h + p))
    g.add_edges_from((v + f, e) for f, e in index.graph.fact_entity.t().tolist())
    g.add_edges_from((v + f, v + h + int(s)) for f, s in enumerate(index.fact_passage.tolist()))
    checked = 0
    for question, pred in zip(questions, preds):
        seeds = _reference_personalization(index, encoder, question, cfg, tagger)
        if not seeds:
            assert pred.notes == ["ppr: no entity linked, dense passage ranking"]
            continue
        pr = nx.pagerank(g, alpha=cfg.damping, personalization=seeds, tol=1e-12, max_iter=1000)
        score = {j: pr[v + h + j] + cfg.fact_mass * sum(pr[v + f] for f in range(h)
                                                        if int(index.fact_passage[f]) == j) for j in range(p)}
        ranked = sorted(score, key=lambda j: -score[j])
        top = pred.passages[:5]
        # same passages up to ties at the float32 tolerance: each chosen passage scores within
        # 1e-5 of the reference's passage at that rank
        for rank, j in enumerate(top):
            assert score[j] == pytest.approx(score[ranked[rank]], abs=1e-5)
        facts = pred.chain[0].facts
        for fact in facts:
            fid = index.facts.index(fact.text)
            assert fact.score == pytest.approx(pr[v + fid], abs=1e-5)
        checked += 1
    assert checked >= len(questions) // 2


def test_ppr_without_links_falls_back_to_dense_and_says_so(built):
    index, encoder, _ = built
    cfg = PPRConfig(use_ner=False, link_question=True, link_threshold=0.999, fact_seeds=0, passage_reset=0.0)
    pred = Engine(index, encoder, config=cfg).answer(["Qzx vbw pmk?"])[0]
    dense = Engine(index, encoder, config=DenseConfig(passage_width=cfg.passage_width)).answer(["Qzx vbw pmk?"])[0]
    assert pred.notes == ["ppr: no entity linked, dense passage ranking"]
    assert pred.passages == dense.passages and pred.chain[0].facts == []


def test_ppr_ranking_leads_with_reached_passages_then_dense_fill(built):
    index, encoder, questions = built
    engine = Engine(index, encoder, config=PPRConfig(link_threshold=0.5, passage_width=12))
    retriever = engine.retriever
    assert isinstance(retriever, PPRRetriever)
    emb = engine.steps.encode(questions)
    ids, mass = retriever.seeds(questions, emb)
    assert ids.shape == mass.shape and bool((mass >= 0).all())
    assert bool(((ids >= 0) == (mass > 0)).all())  # padding carries no mass
    sums = mass.sum(dim=1)
    assert torch.allclose(sums[sums > 0], torch.ones_like(sums[sums > 0]))
    for pred in engine.answer(questions):
        assert len(pred.passages) == len(set(pred.passages)) == 12
        scores = [f.score for f in pred.chain[0].facts]
        assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
