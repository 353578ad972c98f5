"""hpengine.nn: the differentiable retrieval modules equal the functional ops, their scores are
differentiable (float64 gradcheck on small graphs), buffers follow .to() and stay out of state_dict."""
import pytest
import torch
from torch.func import functional_call

from hpengine.config import RetrievalConfig
from hpengine.graph import HyperGraph
from hpengine.nn import DifferentiableDense, DifferentiableHyperProveHop, DifferentiablePPR
from hpengine.retrieval import DenseIndex, hyperprove_hop, personalized_pagerank
from hpengine.testing import with_devices
from hpengine.testing._graphs import random_hypergraph

HOP = RetrievalConfig(num_seeds=3, subgraph_size=16, top_k=4, alpha=0.6, walk_steps=4)


def graph_and_embeddings(seed=0, dim=6, dtype=torch.float64, device="cpu"):
    fe, fp, v, p = random_hypergraph(seed, num_facts=24, num_entities=10, num_passages=8, nnz=40)
    g = HyperGraph.from_incidence(fe.to(device), fp.to(device), v, p)
    gen = torch.Generator().manual_seed(seed + 1)
    fact = torch.randn(g.num_facts, dim, generator=gen, dtype=dtype).to(device)
    ent = torch.randn(v, dim, generator=gen, dtype=dtype).to(device)
    queries = torch.randn(3, dim, generator=gen, dtype=dtype).to(device)
    return g, fact, ent, queries


# ---------------------------------------------------------------------- dense
@with_devices
def test_dense_equals_library_search(device):
    _, fact, _, q = graph_and_embeddings(device=device, dtype=torch.float32)
    out = DifferentiableDense(fact, k=5)(q)
    scores, ids = DenseIndex(fact).search(q, 5)
    assert torch.equal(out.ids, ids)
    torch.testing.assert_close(out.scores, scores)


def test_dense_gradcheck_queries_and_keys():
    _, fact, _, q = graph_and_embeddings()
    m = DifferentiableDense(fact, k=4).double()
    q = q.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: m(x).scores, (q,))
    mk = DifferentiableDense(fact, k=4, trainable="keys").double()
    assert isinstance(mk.keys, torch.nn.Parameter)
    by_keys = lambda keys: functional_call(mk, {"keys": keys}, (q.detach(),)).scores  # noqa: E731
    assert torch.autograd.gradcheck(by_keys, (fact.clone().requires_grad_(True),), fast_mode=True)


def test_dense_padding_has_no_gradient_nan():
    m = DifferentiableDense(torch.eye(3, dtype=torch.float64), k=5)
    q = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    out = m(q)
    assert out.ids[0, 3:].tolist() == [-1, -1] and torch.isneginf(out.scores[0, 3:]).all()
    out.scores[:, :3].sum().backward()
    assert torch.isfinite(q.grad).all()


# ------------------------------------------------------------------------ hop
@pytest.mark.parametrize("seed", [0, 1])
def test_hop_equals_library_op_over_two_hops(seed):
    g, fact, _, q = graph_and_embeddings(seed, dtype=torch.float32)
    hop = DifferentiableHyperProveHop(g, fact, HOP)
    frontier = None
    for _ in range(2):
        ref = hyperprove_hop(g, fact, q, frontier, cfg=HOP)
        out = hop(q, frontier)
        for name in ("fact_ids", "distance", "frontier", "seeds", "subgraph"):
            assert torch.equal(getattr(out, name), getattr(ref, name)), name
        torch.testing.assert_close(out.scores, ref.scores)
        frontier = ref.frontier
    assert (out.distance >= 1).any()  # the second hop has a structural term


def test_hop_gradcheck_queries_facts_alpha():
    g, fact, _, q = graph_and_embeddings(2)
    hop = DifferentiableHyperProveHop(g, fact, HOP, trainable=("fact_emb", "alpha")).double()
    first = hop(q)
    frontier = first.frontier
    out = hop(q, frontier)
    ids, dist = out.fact_ids, out.distance
    assert (dist >= 1).any()
    qq = q.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: hop.score(x, ids, dist).masked_fill(ids < 0, 0.0), (qq,))
    # the module's forward, not just score(): gradients through the whole call equal score()'s
    out = hop(qq, frontier)
    out.scores.masked_fill(ids < 0, 0.0).sum().backward()
    assert hop.alpha.grad is not None and hop.fact_emb.grad is not None and qq.grad is not None

    def by_alpha_and_facts(alpha, facts):  # the whole forward with the tensors swapped in
        res = functional_call(hop, {"alpha": alpha, "fact_emb": facts}, (q, frontier))
        assert torch.equal(res.fact_ids, ids)
        return res.scores.masked_fill(ids < 0, 0.0)

    assert torch.autograd.gradcheck(by_alpha_and_facts, (torch.tensor(0.6, dtype=torch.float64, requires_grad=True),
                                                         fact.clone().requires_grad_(True)), fast_mode=True)


# ------------------------------------------------------------------------ PPR
@pytest.mark.parametrize("weighting", ["softmax", "relu"])
def test_ppr_equals_library_op(weighting):
    g, _, ent, q = graph_and_embeddings(3, dtype=torch.float32)
    m = DifferentiablePPR(g, ent, k=4, links=3, weighting=weighting, temperature=0.2)
    ids, mass = m.personalization(q)
    assert torch.allclose(mass.sum(1), torch.ones(3))
    v, h = g.num_entities, g.num_facts
    ref = personalized_pagerank(g, (ids, mass.detach()), nodes=slice(v + h, v + h + g.num_passages))
    out = m(q)
    top, top_ids = torch.topk(ref, 4, dim=1)
    assert torch.equal(out.ids, top_ids)
    torch.testing.assert_close(out.scores, top)
    # the links are the top entities by cosine
    assert torch.equal(ids, DenseIndex(ent).search(q, 3)[1])


@pytest.mark.parametrize("weighting", ["softmax", "relu"])
def test_ppr_gradcheck_queries(weighting):
    g, _, ent, q = graph_and_embeddings(4)
    m = DifferentiablePPR(g, ent, k=3, links=4, weighting=weighting, threshold=-0.5, temperature=0.3, tol=1e-14,
                          max_iter=500).double()
    assert torch.autograd.gradcheck(lambda x: m(x).scores, (q.clone().requires_grad_(True),))
    assert torch.autograd.gradcheck(lambda x: m.mass(x), (q.clone().requires_grad_(True),), fast_mode=True)


def test_ppr_gradcheck_entity_embeddings():
    g, _, ent, q = graph_and_embeddings(5)
    m = DifferentiablePPR(g, ent, k=3, links=4, tol=1e-14, max_iter=500, trainable="entity_emb").double()
    def by_entities(e):
        return functional_call(m, {"entity_emb": e}, (q,)).scores

    assert torch.autograd.gradcheck(by_entities, (ent.clone().requires_grad_(True),), fast_mode=True)


# ------------------------------------------------------- the engine's retrieval
def test_modules_equal_the_engines_retrieval():
    from hpengine.graph import Passage, build_index
    from hpengine.pipeline import Engine
    from hpengine.testing._fakes import HashingEncoder, ListExtractor

    table = {"Ada": [("Ada Lovelace wrote the first program.", ["Ada Lovelace", "program"]),
                     ("Ada Lovelace was the daughter of Lord Byron.", ["Ada Lovelace", "Lord Byron"])],
             "Byron": [("Lord Byron was a poet.", ["Lord Byron", "poet"]),
                       ("Lord Byron died in Greece.", ["Lord Byron", "Greece"])],
             "Greece": [("Greece is a country in Europe.", ["Greece", "Europe"])],
             "Babbage": [("Charles Babbage designed the Analytical Engine.", ["Charles Babbage", "Analytical Engine"]),
                         ("Ada Lovelace wrote about the Analytical Engine.", ["Ada Lovelace", "Analytical Engine"])]}
    passages = [Passage(t, " ".join(f for f, _ in facts)) for t, facts in table.items()]
    encoder = HashingEncoder(dim=64)
    index, _ = build_index(passages, extractor=ListExtractor(table), encoder=encoder)
    engine = Engine(index, encoder, RetrievalConfig(num_seeds=2, top_k=2, subgraph_size=8), retriever="hyperprove")
    q = engine.steps.encode(["Where did the father of Ada Lovelace die?", "Who designed the Analytical Engine?"])
    assert torch.equal(DifferentiableDense.from_index(index, k=3)(q).ids, engine.steps.dense_passages(q, 3))
    ref = hyperprove_hop(index.graph, index.fact_emb, q, index=engine.steps.fact_index(), cfg=engine.retrieval)
    out = DifferentiableHyperProveHop.from_index(index, engine.retrieval)(q)
    assert torch.equal(out.fact_ids, ref.fact_ids) and torch.equal(out.distance, ref.distance)
    torch.testing.assert_close(out.scores, ref.scores)


# ----------------------------------------------------- buffers, devices, state
def test_buffers_not_in_state_dict_unless_asked():
    g, fact, ent, _ = graph_and_embeddings(dtype=torch.float32)
    assert DifferentiableDense(fact).state_dict() == {}
    assert list(DifferentiableHyperProveHop(g, fact, HOP).state_dict()) == []
    assert set(DifferentiablePPR(g, ent, persistent=True).state_dict()) == {"fact_entity", "fact_passage", "entity_emb"}
    hop = DifferentiableHyperProveHop(g, fact, HOP, trainable="alpha")
    assert list(hop.state_dict()) == ["alpha"] and [n for n, _ in hop.named_parameters()] == ["alpha"]
    with torch.no_grad():
        hop.alpha.fill_(0.25)
    fresh = DifferentiableHyperProveHop(g, fact, HOP, trainable="alpha")
    fresh.load_state_dict(hop.state_dict())
    assert float(fresh.alpha.detach()) == 0.25
    with pytest.raises(ValueError,
                       match=r"trainable must name tensors of DifferentiableHyperProveHop.*\(got \['keys'\]\)"):
        DifferentiableHyperProveHop(g, fact, HOP, trainable="keys")


@with_devices
def test_to_moves_buffers_and_rebuilds_the_graph(device):
    g, fact, ent, q = graph_and_embeddings(dtype=torch.float32)
    m = DifferentiablePPR(g, ent, k=3)
    before = m(q)
    m = m.to(device)
    assert all(b.device.type == torch.device(device).type for b in m.buffers())
    assert m.graph.device.type == torch.device(device).type
    after = m(q.to(device))
    assert torch.equal(after.ids.cpu(), before.ids)
    torch.testing.assert_close(after.scores.cpu(), before.scores)
    hop = DifferentiableHyperProveHop(g, fact, HOP).double()
    assert hop.fact_emb.dtype == torch.float64 and hop.fact_entity.dtype == torch.int64
    with pytest.raises(ValueError, match="must be on the module's device"):
        DifferentiableDense(fact).to("meta")(q)


def test_optimizer_step_rebuilds_the_fact_index():
    g, fact, _, q = graph_and_embeddings(dtype=torch.float32)
    hop = DifferentiableHyperProveHop(g, fact, HOP, trainable="fact_emb")
    first = hop._dense_index()
    assert hop._dense_index() is first
    with torch.no_grad():
        hop.fact_emb.mul_(2.0)
    assert hop._dense_index() is not first


# -------------------------------------------------------------- training loop
def test_training_a_query_adapter_lowers_the_loss():
    """A linear adapter (identity init) on noisy queries, listwise loss over the dense module's
    candidates with the true key as the target: the loss goes down and recall goes up."""
    gen = torch.Generator().manual_seed(0)
    keys = torch.nn.functional.normalize(torch.randn(64, 16, generator=gen), dim=1)
    gold = torch.randint(0, 64, (48,), generator=gen)
    mix = torch.randn(16, 16, generator=gen) * 0.6 + torch.eye(16)
    queries = keys[gold] @ mix  # a distorted view the adapter can undo
    retriever = DifferentiableDense(keys, k=16)
    adapter = torch.nn.Linear(16, 16, bias=False)
    with torch.no_grad():
        adapter.weight.copy_(torch.eye(16))
    opt = torch.optim.Adam(adapter.parameters(), lr=0.05)

    def step():
        out = retriever(adapter(queries))
        target = (out.ids == gold.unsqueeze(1)).float()
        has = target.sum(1) > 0
        logp = torch.log_softmax(out.scores / 0.1, dim=1)
        loss = -(logp * target).sum(1)[has].mean()
        return loss, float((out.ids[:, :1] == gold.unsqueeze(1)).float().mean())

    losses, hits = [], []
    for _ in range(40):
        loss, hit = step()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        hits.append(hit)
    assert losses[-1] < 0.5 * losses[0], losses
    assert hits[-1] > hits[0], hits


@pytest.mark.slow
def test_dense_module_compiles():
    """torch.compile (inductor on CPU): same ids and scores. About 20-40 s of compilation on a
    2-core CPU, hence slow."""
    _, fact, _, q = graph_and_embeddings(dtype=torch.float32)
    m = DifferentiableDense(fact, k=5)
    eager = m(q)
    compiled = torch.compile(m)(q)
    assert torch.equal(compiled.ids, eager.ids)
    torch.testing.assert_close(compiled.scores, eager.scores)


@pytest.mark.slow
def test_hop_and_ppr_modules_run_compiled():
    """torch.compile on the hop and PPR modules: their data-dependent shapes and host syncs
    (BFS rounds, convergence checks) make graph breaks, not errors; results equal eager."""
    g, fact, ent, q = graph_and_embeddings(4, dtype=torch.float32)
    hop = DifferentiableHyperProveHop(g, fact, HOP)
    eager, compiled = hop(q, None), torch.compile(hop)(q, None)
    for name in ("fact_ids", "distance", "frontier"):
        assert torch.equal(getattr(compiled, name), getattr(eager, name)), name
    torch.testing.assert_close(compiled.scores, eager.scores)
    ppr = DifferentiablePPR(g, ent, k=4, links=3)
    eager, compiled = ppr(q), torch.compile(ppr)(q)
    assert torch.equal(compiled.ids, eager.ids)
    torch.testing.assert_close(compiled.scores, eager.scores)

