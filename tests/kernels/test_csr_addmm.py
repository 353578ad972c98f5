"""The CPU kernel of the CSR x dense product (kernels/k_csr_addmm_cpu.cpp) against its PyTorch twin
(torch.addmm) bit for bit, and the ops that use it (PPR, the hop's walk) against the PyTorch path and
the dense references; the dispatch's modes and its no-compiler path."""

import pytest
import torch

from hpengine.errors import UserError
from hpengine.graph import HyperGraph
from hpengine.retrieval import hyperprove_hop, personalized_pagerank
from hpengine.sparse import _dispatch
from hpengine.sparse._dispatch import ENV, csr_addmm, csr_addmm_torch
from hpengine.testing._graphs import random_csr, random_hypergraph
from hpengine.testing.reference import dense_ppr


@pytest.fixture(scope="module")
def kernels():
    """The CPU kernels, built once per session (torch caches the build); skipped without a compiler."""
    reason = _dispatch.cpu_kernels()
    if reason is not None:
        pytest.skip(f"CPU kernels unavailable: {reason}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("width", [1, 5, 16, 17, 32, 33, 71])
@pytest.mark.parametrize("seed", [0, 1])
def test_kernel_equals_addmm_bitwise(kernels, dtype, index_dtype, width, seed):
    mat = random_csr(37, 53, 0.15, dtype, index_dtype, seed)
    g = torch.Generator().manual_seed(seed + 100)
    x = torch.randn(53, width, generator=g, dtype=torch.float64).to(dtype)
    base = torch.randn(37, width, generator=g, dtype=torch.float64).to(dtype)
    for beta, alpha in [(0.0, 1.0), (1.0, -0.85), (0.15, 0.7225)]:
        want = torch.addmm(base, mat, x, beta=beta, alpha=alpha)
        got = torch.ops.hpengine.csr_addmm(mat.crow_indices(), mat.col_indices(), mat.values(), x, base, beta, alpha)
        assert torch.equal(got, want), (beta, alpha)
        into = base.clone()  # out is input: accumulate in place, as SparseChain does
        assert torch.equal(csr_addmm(into, mat, x, beta=beta, alpha=alpha, out=into), want)
        assert torch.equal(csr_addmm(base, mat, x, beta=beta, alpha=alpha), want)


def test_beta_zero_ignores_input(kernels):
    """As torch.addmm: with beta = 0 the input is not read, so NaN in it does not leak."""
    mat = random_csr(9, 7, 0.4, torch.float32, torch.int32, 3)
    x = torch.rand(7, 4)
    base = torch.full((9, 4), float("nan"))
    want = csr_addmm_torch(torch.zeros(9, 4), mat, x, beta=0.0)
    assert torch.equal(csr_addmm(base, mat, x, beta=0.0, out=base), want)


def test_kernel_under_torch_compile(kernels):
    """The functional op traces (its meta kernel gives the shape) and gives the eager bits."""
    mat = random_csr(11, 13, 0.3, torch.float32, torch.int64, 4)
    x, base = torch.rand(13, 6), torch.rand(11, 6)
    crow, col, val = mat.crow_indices(), mat.col_indices(), mat.values()
    # the CSR arrays as arguments (clones, not views of a sparse tensor, which dynamo cannot guard)
    fn = torch.compile(lambda crow, col, val, x, b: torch.ops.hpengine.csr_addmm(crow, col, val, x, b, 0.5, 2.0) * 1.0,
                       backend="eager", fullgraph=True)
    got = fn(crow.clone(), col.clone(), val.clone(), x, base)
    assert torch.equal(got, torch.addmm(base, mat, x, beta=0.5, alpha=2.0))


def graph_with_synonyms(seed: int) -> HyperGraph:
    """A random graph whose incidence is factored (synonym pairs), so all three CSR factors run."""
    fe, fp, v, p = random_hypergraph(seed, num_facts=60, num_entities=20, num_passages=15, nnz=90)
    g = torch.Generator().manual_seed(seed)
    syn = torch.randint(1, v, (2, 12), generator=g)
    return HyperGraph.from_incidence(fe, fp, v, p, synonyms=syn, factored=True)


def ppr_both(monkeypatch, graph, pers, **kw):
    out = {}
    for mode in ("off", "on"):
        monkeypatch.setenv(ENV, mode)
        out[mode] = personalized_pagerank(graph, pers, **kw)
    return out["off"], out["on"]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("chunk_size", [5, 17])
@pytest.mark.parametrize("method", ["power", "chebyshev"])
def test_ppr_kernel_equals_torch_path(kernels, monkeypatch, seed, chunk_size, method):
    fe, fp, v, p = random_hypergraph(seed)
    graph = HyperGraph.from_incidence(fe, fp, v, p)
    n = v + fp.numel() + p
    g = torch.Generator().manual_seed(seed)
    pers = torch.rand(23, n, generator=g) * (torch.rand(23, n, generator=g) < 0.3)
    pers[:, 0] += 1e-3
    off, on = ppr_both(monkeypatch, graph, pers, method=method, chunk_size=chunk_size)
    assert torch.equal(on, off)
    ref = dense_ppr(fe, fp, v, p, pers[:4])
    on64 = personalized_pagerank(graph, pers[:4].double(), method=method, tol=1e-13, max_iter=2000,
                                 chunk_size=chunk_size)
    torch.testing.assert_close(on64, ref, rtol=0, atol=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_ppr_factored_kernel_equals_torch_path(kernels, monkeypatch, seed):
    graph = graph_with_synonyms(seed)
    n = graph.num_entities + graph.num_facts + graph.num_passages
    ids = torch.randint(0, n, (19, 6), generator=torch.Generator().manual_seed(seed))
    mass = torch.rand(19, 6, generator=torch.Generator().manual_seed(seed + 1)) + 0.1
    off, on = ppr_both(monkeypatch, graph, (ids, mass), chunk_size=7)
    assert torch.equal(on, off)


@pytest.mark.parametrize("seed", [0, 1])
def test_hop_kernel_equals_torch_path(kernels, monkeypatch, seed):
    graph = graph_with_synonyms(seed)
    g = torch.Generator().manual_seed(seed)
    facts = torch.randn(graph.num_facts, 8, generator=g)
    queries = torch.randn(13, 8, generator=g)
    out = {}
    for mode in ("off", "on"):
        monkeypatch.setenv(ENV, mode)
        first = hyperprove_hop(graph, facts, queries, num_seeds=4, subgraph_size=20, top_k=3, query_chunk_size=5)
        out[mode] = (first, hyperprove_hop(graph, facts, queries, first.frontier, num_seeds=4, subgraph_size=20,
                                           top_k=3, query_chunk_size=5))
    for a, b in zip(out["off"], out["on"]):
        for x, y in zip(a, b):
            assert torch.equal(x, y)


@pytest.fixture
def no_compiler(monkeypatch):
    """The kernels' build fails as it does without a compiler; the real build is restored after."""
    def fail():
        raise RuntimeError("Error building extension 'hpengine_cpu_kernels': g++: not found")

    monkeypatch.setattr(_dispatch, "build_cpu_kernels", fail)
    _dispatch.cpu_kernels.cache_clear()
    yield
    _dispatch.cpu_kernels.cache_clear()


def test_no_compiler_runs_the_torch_path_and_says_so_once(no_compiler, monkeypatch, capsys):
    monkeypatch.delenv(ENV, raising=False)
    fe, fp, v, p = random_hypergraph(0)
    graph = HyperGraph.from_incidence(fe, fp, v, p)
    pers = torch.rand(3, v + fp.numel() + p)
    got = personalized_pagerank(graph, pers)
    personalized_pagerank(graph, pers)
    err = capsys.readouterr().err
    assert err.count("hpengine: CPU kernels unavailable") == 1 and "using the PyTorch path" in err
    monkeypatch.setenv(ENV, "off")
    assert torch.equal(got, personalized_pagerank(graph, pers))


def test_explicit_on_without_compiler_is_an_error(no_compiler, monkeypatch):
    monkeypatch.setenv(ENV, "on")
    mat = random_csr(5, 4, 0.5, torch.float32, torch.int32, 0)
    with pytest.raises(UserError, match="HPENGINE_KERNELS=on but the CPU kernels are unavailable"):
        csr_addmm(torch.zeros(5, 2), mat, torch.rand(4, 2))


def test_off_never_builds(monkeypatch):
    def fail():
        raise AssertionError("built with HPENGINE_KERNELS=off")

    monkeypatch.setattr(_dispatch, "build_cpu_kernels", fail)
    _dispatch.cpu_kernels.cache_clear()
    monkeypatch.setenv(ENV, "off")
    try:
        mat = random_csr(5, 4, 0.5, torch.float32, torch.int32, 0)
        x = torch.rand(4, 2)
        assert torch.equal(csr_addmm(torch.zeros(5, 2), mat, x, beta=0.0), mat @ x)
    finally:
        _dispatch.cpu_kernels.cache_clear()


def test_bad_mode_is_a_user_error(monkeypatch):
    monkeypatch.setenv(ENV, "fast")
    with pytest.raises(UserError, match=r"HPENGINE_KERNELS must be one of \['auto', 'on', 'off'\] \(got 'fast'\)"):
        _dispatch.kernel_mode()


def test_functional_op_gradients_match_addmm(kernels):
    """torch.ops.hpengine.csr_addmm composes with autograd: gradients for x and input as torch.addmm's."""
    mat = random_csr(12, 9, 0.3, torch.float64, torch.int64, 5)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(9, 4, generator=g, dtype=torch.float64, requires_grad=True)
    base = torch.randn(12, 4, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(12, 4, generator=g, dtype=torch.float64)
    out = torch.ops.hpengine.csr_addmm(mat.crow_indices(), mat.col_indices(), mat.values(), x, base, 0.3, -1.7)
    got = torch.autograd.grad((out * weight).sum(), (x, base))
    dense = mat.to_dense()
    want = torch.autograd.grad((torch.addmm(base, dense, x, beta=0.3, alpha=-1.7) * weight).sum(), (x, base))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
