import pytest
import torch

from hpengine.graph import HyperGraph
from hpengine.retrieval import personalized_pagerank, ppr_chunk_size
from hpengine.testing import with_devices
from hpengine.testing._graphs import random_hypergraph
from hpengine.testing.reference import dense_ppr, networkx_ppr

TIGHT = 1e-13  # float64 tolerance of the op in reference checks
METHODS = ["power", "chebyshev"]


def make(seed: int, device="cpu", **kw):
    fe, fp, v, p = random_hypergraph(seed, **kw)
    # isolated entity (the last id is never drawn when V is raised by one) and an empty passage
    v, p = v + 1, p + 1
    g = HyperGraph.from_incidence(fe.to(device), fp.to(device), v, p)
    return g, (fe, fp, v, p)


def personalization(num_q: int, n: int, seed: int = 0, density: float = 0.2) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(num_q, n, generator=gen, dtype=torch.float64) * (torch.rand(num_q, n, generator=gen) < density)
    x[:, 0] += 1e-3 * (x.sum(1) == 0)  # no all-zero row
    return x


@with_devices
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_networkx(seed, method, device):
    g, raw = make(seed, device)
    v, h, p = g.num_entities, g.num_facts, g.num_passages
    n = v + h + p
    pers = personalization(4, n, seed)
    pers[0] = 0.0
    pers[0, v - 1] = 1.0  # all mass on the isolated entity: it keeps it (dangling mass returns)
    pers[1] = 0.0
    pers[1, n - 1], pers[1, v + h - 1] = 2.0, 1.0  # the empty passage and the isolated-ish last fact
    pers[2] *= 7.0  # unnormalised
    expected = networkx_ppr(*raw, pers)
    out = personalized_pagerank(g, pers.to(device), tol=TIGHT, method=method)
    assert out.dtype == torch.float64 and out.device.type == torch.device(device).type
    torch.testing.assert_close(out.cpu(), expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(out.cpu(), dense_ppr(*raw, pers), atol=1e-10, rtol=0)
    torch.testing.assert_close(out.sum(1).cpu(), torch.ones(4, dtype=torch.float64))
    assert out[0, v - 1] == 1.0
    # float32 at the default tolerance is within 1e-5 in L1
    out32 = personalized_pagerank(g, pers.float().to(device), method=method)
    assert out32.dtype == torch.float32
    assert (out32.double().cpu() - expected).abs().sum(1).max() < 1e-5


@pytest.mark.parametrize("damping", [0.0, 0.5, 0.95])
def test_damping(damping):
    g, raw = make(3)
    n = g.num_entities + g.num_facts + g.num_passages
    pers = personalization(2, n, 3)
    out = personalized_pagerank(g, pers, damping=damping, tol=TIGHT, max_iter=1000)
    torch.testing.assert_close(out, networkx_ppr(*raw, pers, damping=damping), atol=1e-6, rtol=0)
    if damping == 0.0:
        torch.testing.assert_close(out, pers / pers.sum(1, keepdim=True))


def test_tiny_exact():
    # entity 0 in facts 0 and 1, both in passage 0: nodes e0, f0, f1, p0 form a 4-cycle
    g = HyperGraph.from_incidence(torch.tensor([[0, 1, 1], [0, 0, 0]]), torch.tensor([0, 0]), num_entities=1,
                                  num_passages=1)  # duplicate pair (1, 0) counts once
    out = personalized_pagerank(g, torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64), tol=1e-15)
    d = 0.85
    # on a 4-cycle: x0 = (1-d) + d x1, x1 = (1-d) 0 + d (x0 + x3) / 2, x3 = d x1, so
    x1 = d * (1 - d) / (2 - d * d - d * d)
    x0 = (1 - d) + d * x1
    expected = torch.tensor([[x0, x1, x1, d * x1]], dtype=torch.float64)
    torch.testing.assert_close(out, expected / expected.sum())


@pytest.mark.parametrize("method", METHODS)
def test_batched_equals_single_and_chunks(method):
    g, _ = make(4)
    n = g.num_entities + g.num_facts + g.num_passages
    pers = personalization(23, n, 4)
    full = personalized_pagerank(g, pers, tol=1e-12, method=method)
    for chunk in (1, 5, 17):
        torch.testing.assert_close(personalized_pagerank(g, pers, tol=1e-12, method=method, chunk_size=chunk), full,
                                   atol=1e-14, rtol=0)
    singles = torch.cat([personalized_pagerank(g, pers[q:q + 1], tol=1e-12, method=method) for q in range(23)])
    torch.testing.assert_close(singles, full, atol=1e-14, rtol=0)
    # float32, default tolerance: per-column convergence makes the chunk size irrelevant
    f32 = personalized_pagerank(g, pers.float(), method=method)
    torch.testing.assert_close(personalized_pagerank(g, pers.float(), method=method, chunk_size=5), f32,
                               atol=1e-7, rtol=0)


def test_methods_agree():
    g, _ = make(5)
    n = g.num_entities + g.num_facts + g.num_passages
    pers = personalization(6, n, 5)
    torch.testing.assert_close(personalized_pagerank(g, pers, tol=TIGHT, method="power"),
                               personalized_pagerank(g, pers, tol=TIGHT, method="chebyshev"), atol=1e-12, rtol=0)


@with_devices
def test_sparse_form_and_nodes(device):
    g, _ = make(6, device)
    v, h, p = g.num_entities, g.num_facts, g.num_passages
    n = v + h + p
    ids = torch.tensor([[0, 3, 3, -1, v + 2], [n - 1, -1, -1, -1, -1], [v, v + h, 1, 2, 5]], device=device)
    mass = torch.tensor([[0.5, 0.25, 0.25, 9.0, 1.0], [1.0, 0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 0.0]],
                        dtype=torch.float64, device=device)
    dense = torch.zeros(3, n, dtype=torch.float64, device=device)
    dense.scatter_add_(1, ids.clamp(min=0), torch.where(ids >= 0, mass, 0.0))  # -1 padding adds nothing
    full = personalized_pagerank(g, dense, tol=TIGHT)
    torch.testing.assert_close(personalized_pagerank(g, (ids, mass), tol=TIGHT), full, atol=1e-14, rtol=0)
    passages = personalized_pagerank(g, (ids, mass), tol=TIGHT, nodes=slice(v + h, n))
    torch.testing.assert_close(passages, full[:, v + h:], atol=1e-14, rtol=0)
    pick = torch.tensor([n - 1, 0, v + 1, v + 1, v + h], device=device)  # any order, repeats
    torch.testing.assert_close(personalized_pagerank(g, dense, tol=TIGHT, nodes=pick), full[:, pick], atol=1e-14,
                               rtol=0)
    torch.testing.assert_close(personalized_pagerank(g, dense, tol=TIGHT, nodes=slice(None, None, 3)),
                               full[:, ::3], atol=1e-14, rtol=0)


@pytest.mark.parametrize("method", METHODS)
def test_gradcheck(method):
    g, _ = make(7, num_facts=12, num_entities=6, num_passages=5, nnz=16)
    n = g.num_entities + g.num_facts + g.num_passages
    gen = torch.Generator().manual_seed(7)
    pers = (torch.rand(3, n, generator=gen, dtype=torch.float64) + 0.1).requires_grad_()
    nodes = torch.tensor([0, 4, g.num_entities + 2, n - 1, 4])

    def fn(x):
        return personalized_pagerank(g, x, tol=1e-14, method=method, nodes=nodes, chunk_size=2)

    assert torch.autograd.gradcheck(fn, (pers,))
    ids = torch.tensor([[0, 3, -1, g.num_entities + 1], [n - 1, n - 1, 2, -1], [5, 6, 7, 8]])
    mass = (torch.rand(3, 4, generator=gen, dtype=torch.float64) + 0.1).requires_grad_()
    assert torch.autograd.gradcheck(lambda m: personalized_pagerank(g, (ids, m), tol=1e-14, method=method), (mass,))


def test_gradient_matches_dense_solve():
    g, raw = make(8)
    n = g.num_entities + g.num_facts + g.num_passages
    pers = (personalization(3, n, 8) + 0.01).requires_grad_()
    weight = torch.randn(3, n, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    ours = torch.autograd.grad((personalized_pagerank(g, pers, tol=TIGHT) * weight).sum(), pers)[0]
    ref = torch.autograd.grad((dense_ppr(*raw, pers) * weight).sum(), pers)[0]
    torch.testing.assert_close(ours, ref, atol=1e-10, rtol=0)


def test_per_column_convergence_and_max_iter():
    g, raw = make(9)
    n = g.num_entities + g.num_facts + g.num_passages
    pers = personalization(2, n, 9)
    loose = personalized_pagerank(g, pers, tol=1e-3)
    exact = dense_ppr(*raw, pers)
    assert (loose - exact).abs().sum(1).max() < 1e-2
    one = personalized_pagerank(g, pers, max_iter=1, tol=0.0)
    torch.testing.assert_close(one.sum(1), torch.ones(2, dtype=torch.float64))
    assert (one - exact).abs().sum() > (loose - exact).abs().sum()


def test_empty_batch_and_half_input():
    g, _ = make(10)
    n = g.num_entities + g.num_facts + g.num_passages
    assert personalized_pagerank(g, torch.zeros(0, n)).shape == (0, n)
    out = personalized_pagerank(g, personalization(2, n, 10).to(torch.bfloat16), nodes=slice(0, 5))
    assert out.dtype == torch.bfloat16 and out.shape == (2, 5)


def test_errors():
    g, _ = make(11)
    n = g.num_entities + g.num_facts + g.num_passages
    good = personalization(3, n, 11)
    bad = good.clone()
    bad[2] = 0.0
    with pytest.raises(ValueError, match="all-zero row 2"):
        personalized_pagerank(g, bad)
    bad = good.clone()
    bad[1, 4] = -1.0
    with pytest.raises(ValueError, match="row 1"):
        personalized_pagerank(g, bad)
    bad[1, 4] = float("nan")
    with pytest.raises(ValueError, match="finite"):
        personalized_pagerank(g, bad)
    with pytest.raises(ValueError, match=rf"\[Q, N\] with N = V \+ H \+ P = {n}"):
        personalized_pagerank(g, good[:, :-1])
    with pytest.raises(ValueError, match="personalization must be"):
        personalized_pagerank(g, good[0])
    with pytest.raises(TypeError, match="floating point"):
        personalized_pagerank(g, torch.ones(2, n, dtype=torch.int64))
    with pytest.raises(TypeError, match="tensor or a tuple"):
        personalized_pagerank(g, good.tolist())
    ids = torch.tensor([[0, -1], [-1, -1]])
    with pytest.raises(ValueError, match="all-zero row 1"):
        personalized_pagerank(g, (ids, torch.ones(2, 2)))
    with pytest.raises(ValueError, match="ids' shape"):
        personalized_pagerank(g, (ids, torch.ones(2, 3)))
    with pytest.raises(ValueError, match=r"lie in \[0"):
        personalized_pagerank(g, (torch.tensor([[n]]), torch.ones(1, 1)))
    with pytest.raises(ValueError, match="int64"):
        personalized_pagerank(g, (ids.int(), torch.ones(2, 2)))
    with pytest.raises(ValueError, match="nodes must lie"):
        personalized_pagerank(g, good, nodes=torch.tensor([n]))
    with pytest.raises(TypeError, match="nodes must be"):
        personalized_pagerank(g, good, nodes=[1, 2])
    with pytest.raises(ValueError, match="damping"):
        personalized_pagerank(g, good, damping=1.0)
    with pytest.raises(ValueError, match=r"method must be one of \['power', 'chebyshev'\]"):
        personalized_pagerank(g, good, method="gmres")
    with pytest.raises(ValueError, match="max_iter"):
        personalized_pagerank(g, good, max_iter=0)


def test_mixed_devices_raise():
    g, _ = make(12)
    n = g.num_entities + g.num_facts + g.num_passages
    with pytest.raises(ValueError, match="graph's device cpu"):
        personalized_pagerank(g, torch.ones(1, n, device="meta"))
    with pytest.raises(ValueError, match="graph's device cpu"):
        personalized_pagerank(g, (torch.zeros(1, 1, dtype=torch.int64, device="meta"), torch.ones(1, 1)))


def test_chunk_size_from_budget():
    kw = dict(num_nodes=1000, num_columns=400, num_out=100)
    assert ppr_chunk_size(10, memory_budget_mb=1, chunk_size=3, **kw) == 3
    per_question = 4 * (1000 + 4 * 400 + 600 + 100)
    assert ppr_chunk_size(10_000, memory_budget_mb=1, device_type="cuda", **kw) == 2**20 // per_question
    assert ppr_chunk_size(10_000, memory_budget_mb=1024, **kw) == 32  # CPU cap
    assert ppr_chunk_size(5, memory_budget_mb=1024, **kw) == 5
