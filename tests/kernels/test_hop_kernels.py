"""The CPU kernels of the hop's local blocks and BFS (kernels/k_local_blocks_cpu.cpp) against their
PyTorch twins bit for bit: the blocks against TransitionOperator._join_into, the BFS against
batched_bfs on the thresholded blocks, whole hops against HPENGINE_KERNELS=off; and the one line
the first build says."""
import pytest
import torch

from hpengine.graph import HyperGraph
from hpengine.retrieval import hyperprove_hop
from hpengine.retrieval._bfs import batched_bfs
from hpengine.sparse import _dispatch
from hpengine.sparse._dispatch import ENV
from hpengine.testing._graphs import power_law_hypergraph, random_csr, random_hypergraph


@pytest.fixture(scope="module")
def kernels():
    """The CPU kernels, built once per session (torch caches the build); skipped without a compiler."""
    reason = _dispatch.cpu_kernels()
    if reason is not None:
        pytest.skip(f"CPU kernels unavailable: {reason}")


def make_graph(seed: int, kind: str) -> HyperGraph:
    """``plain``: a random graph; ``hubs``: power-law entity degrees (large column groups);
    ``factored``: synonym pairs, so the slots' rows are expanded from the factors."""
    if kind == "hubs":
        return HyperGraph.from_incidence(*power_law_hypergraph(150, seed=seed))
    fe, fp, v, p = random_hypergraph(seed, num_facts=80, num_entities=20, num_passages=15, nnz=140)
    if kind == "plain":
        return HyperGraph.from_incidence(fe, fp, v, p)
    syn = torch.randint(1, v, (2, 12), generator=torch.Generator().manual_seed(seed))
    return HyperGraph.from_incidence(fe, fp, v, p, synonyms=syn, factored=True)


def slots(graph: HyperGraph, num_q: int, m: int, seed: int) -> torch.Tensor:
    """``[num_q, m]`` fact ids with padding (-1) and repeated ids."""
    idx = torch.randint(-1, graph.num_facts, (num_q, m), generator=torch.Generator().manual_seed(seed))
    if m > 3:
        idx[0, 1] = idx[0, 2] = idx[0, 3]  # a fact three times
    return idx


def join_twin(op, idx: torch.Tensor) -> torch.Tensor:
    """The PyTorch path of local_blocks (the kernel's twin), whatever HPENGINE_KERNELS says."""
    out = torch.zeros(*idx.shape, idx.shape[1], dtype=op.dtype)
    if idx.numel():
        op._join_into(idx, out, 7)  # sliced: the slices do not change the sums
    return out


@pytest.mark.parametrize("kind", ["plain", "hubs", "factored"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", [0, 1])
def test_local_blocks_kernel_equals_join(kernels, monkeypatch, kind, dtype, seed):
    monkeypatch.setenv(ENV, "on")
    graph = make_graph(seed, kind)
    op = graph.transition(dtype)
    for num_q, m in [(1, 1), (9, 7), (5, 40), (3, graph.num_facts)]:
        idx = slots(graph, num_q, m, seed + m)
        want = join_twin(op, idx)
        assert torch.equal(op.local_blocks(idx), want), (num_q, m)
        buf = torch.full_like(want, 3.0)  # out= is overwritten, whatever it held
        assert torch.equal(op.local_blocks(idx, out=buf), want)
        assert torch.equal(op.t().local_blocks(idx), want.transpose(1, 2))


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_local_blocks_op_with_either_index_dtype(kernels, index_dtype):
    op = make_graph(2, "plain").transition()
    idx = slots(make_graph(2, "plain"), 6, 20, 3)
    crow, col = op.b.outer.crow_indices().to(index_dtype), op.b.outer.col_indices().to(index_dtype)
    got = torch.ops.hpengine.local_blocks(idx, idx, crow, col, op.inv_degree)
    assert torch.equal(got, join_twin(op, idx))
    flipped = col.clone()  # rows with their columns descending: the kernel sorts them back
    for r in range(crow.numel() - 1):
        flipped[crow[r]:crow[r + 1]] = col[crow[r]:crow[r + 1]].flip(0)
    assert not torch.equal(flipped, col)
    assert torch.equal(torch.ops.hpengine.local_blocks(idx, idx, crow, flipped, op.inv_degree), got)


SEARCHES = [([2, 2], [True, True]), ([2, 3], [False, True]), ([0, 1], [True, False]), ([4, 1], [False, False])]


@pytest.mark.parametrize("kind", ["plain", "hubs", "factored"])
@pytest.mark.parametrize("theta", [0.0, 0.02, 0.1])
@pytest.mark.parametrize("seed", [0, 1])
def test_local_bfs_equals_batched_bfs_on_the_blocks(kernels, kind, theta, seed):
    graph = make_graph(seed, kind)
    op = graph.transition()
    idx = slots(graph, 9, 25, seed)
    sources = torch.rand(9, 25, 2, generator=torch.Generator().manual_seed(seed)) < 0.15
    for transposed in (False, True):
        o = op.t() if transposed else op
        block = torch.nn.functional.threshold(join_twin(op, idx), theta, 0.0)
        block = block.transpose(1, 2) if transposed else block
        for depths, reverse in SEARCHES:
            want = torch.stack([batched_bfs(block, sources[..., b], depths[b], reverse=reverse[b])
                                for b in range(2)], 2)
            assert torch.equal(o.local_bfs(idx, sources, depths, reverse, theta=theta), want), (transposed, depths)


def test_local_ops_have_meta_kernels(kernels):
    """The functional ops give shapes on meta tensors (what torch.compile traces with)."""
    meta = dict(device="meta")
    ids = torch.empty(4, 6, dtype=torch.int64, **meta)
    crow, col = torch.empty(11, dtype=torch.int32, **meta), torch.empty(30, dtype=torch.int32, **meta)
    inv = torch.empty(9, **meta)
    assert torch.ops.hpengine.local_blocks(ids, ids, crow, col, inv).shape == (4, 6, 6)
    sources = torch.empty(4, 6, 3, dtype=torch.bool, **meta)
    out = torch.ops.hpengine.local_bfs(ids, ids, crow, col, inv, 0.1, sources, [1, 2, 3], [0, 1, 0])
    assert out.shape == (4, 6, 3) and out.dtype == torch.int64


@pytest.mark.parametrize("kind", ["plain", "hubs", "factored"])
@pytest.mark.parametrize("theta", [0.0, 0.02])
def test_hops_with_and_without_kernels_are_identical(kernels, monkeypatch, kind, theta):
    graph = make_graph(3, kind)
    g = torch.Generator().manual_seed(3)
    facts = torch.randn(graph.num_facts, 8, generator=g)
    queries = torch.randn(13, 8, generator=g)
    kw = dict(num_seeds=4, subgraph_size=30, top_k=3, theta=theta)
    out = {}
    for mode in ("off", "on"):
        monkeypatch.setenv(ENV, mode)
        runs = []
        for chunk in (5, 7):
            first = hyperprove_hop(graph, facts, queries, query_chunk_size=chunk, **kw)
            runs += [first, hyperprove_hop(graph, facts, queries, first.frontier, query_chunk_size=chunk, **kw)]
        out[mode] = runs
    assert (out["on"][1].distance >= 1).any()  # the struct term is exercised
    for a, b in zip(out["off"], out["on"]):
        for x, y in zip(a, b):
            assert torch.equal(x, y)


def test_build_says_one_line_only_when_it_compiles(monkeypatch, capsys):
    """A build prints one line on stderr before compiling; loading a cached build prints nothing."""
    from torch.utils import cpp_extension

    loads = []
    monkeypatch.setattr(cpp_extension, "load", lambda **kw: loads.append(kw["name"]))
    monkeypatch.setattr(_dispatch, "_register_autograd", lambda: None)
    monkeypatch.setattr(cpp_extension, "is_ninja_available", lambda: True)
    monkeypatch.setenv("CXX", "sh")  # any program on PATH: the compiler is never run here
    monkeypatch.setattr(_dispatch, "_needs_build", lambda sources: True)
    _dispatch.build_cpu_kernels()
    assert capsys.readouterr().err == "hpengine: building CPU kernels (first use, cached after)...\n"
    monkeypatch.setattr(_dispatch, "_needs_build", lambda sources: False)
    _dispatch.build_cpu_kernels()
    assert capsys.readouterr().err == "" and loads == [_dispatch.CPU_EXTENSION] * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("width", [1, 5, 16, 17, 33, 71])
def test_walk_step_kernel_equals_its_twin(kernels, monkeypatch, dtype, index_dtype, width):
    g = torch.Generator().manual_seed(width)
    mat = random_csr(41, 29, 0.2, dtype, index_dtype, width)
    y = torch.randn(29, width, generator=g, dtype=torch.float64).to(dtype)
    x = torch.randn(41, width, generator=g, dtype=torch.float64).to(dtype)
    scale = -torch.rand(41, 1, generator=g, dtype=torch.float64).to(dtype)
    flat = torch.randint(0, 41 * width, (60,), generator=g)
    flat[10:14] = flat[3]  # one element receives several terms, in this order
    flat[20:23] = 0  # padding adds 0 to element 0
    values = torch.rand(60, generator=g, dtype=torch.float64).to(dtype)
    values[20:23] = 0.0
    base = torch.randn(41, width, generator=g, dtype=torch.float64).to(dtype)
    out = {}
    for mode in ("off", "on"):
        monkeypatch.setenv(ENV, mode)
        result, visits = torch.full_like(x, float("nan")), base.clone()
        got = _dispatch.walk_step(mat, y, x, scale, flat, values, out=result, visits=visits)
        assert got is result
        out[mode] = (result, visits)
    want = torch.mul(x, scale)
    want.view(-1).index_add_(0, flat, values)
    want = torch.addmm(want, mat, y)
    assert torch.equal(out["off"][0], want) and torch.equal(out["off"][1], base + want)
    assert torch.equal(out["on"][0], out["off"][0]) and torch.equal(out["on"][1], out["off"][1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("width", [1, 17, 40])
def test_walk_products_skip_zero_rows_exactly(kernels, monkeypatch, dtype, index_dtype, width):
    """Rows marked zero are skipped (x holds zeros there, +0 and -0), and the rows marked for the
    next product are the rows that can be nonzero: the same bits as the twins, which read every row."""
    g = torch.Generator().manual_seed(width)
    bt = random_csr(29, 41, 0.2, dtype, index_dtype, width + 1)  # [C, H]
    b = random_csr(41, 29, 0.2, dtype, index_dtype, width + 2)  # [H, C]
    x = torch.randn(41, width, generator=g, dtype=torch.float64).to(dtype)
    x_rows = torch.rand(41, generator=g) < 0.3
    x[~x_rows] = 0.0
    x[~x_rows & (torch.arange(41) % 2 == 0)] = -0.0
    scale = -torch.rand(41, 1, generator=g, dtype=torch.float64).to(dtype)
    flat = torch.randint(0, 41 * width, (9,), generator=g)
    values = torch.rand(9, generator=g, dtype=torch.float64).to(dtype)
    out = {}
    for mode in ("off", "on"):
        monkeypatch.setenv(ENV, mode)
        y, y_rows = torch.full((29, width), float("nan"), dtype=dtype), torch.zeros(29, dtype=torch.bool)
        _dispatch.walk_product(bt, x, alpha=0.7, out=y, x_rows=x_rows, out_rows=y_rows)
        nxt, visits, rows = torch.empty_like(x), torch.ones_like(x), torch.zeros(41, dtype=torch.bool)
        _dispatch.walk_step(b, y, x, scale, flat, values, out=nxt, visits=visits, y_rows=y_rows, out_rows=rows)
        out[mode] = (y, nxt, visits, y_rows, rows)
    for a, c in zip(out["off"][:3], out["on"][:3]):
        assert torch.equal(a, c)
    assert torch.equal(out["off"][0], torch.addmm(torch.zeros(29, width, dtype=dtype), bt, x, beta=0.0, alpha=0.7))
    y, nxt, _, y_rows, rows = out["on"]
    assert (y[~y_rows] == 0).all() and y_rows.sum() < 29  # the mask is a real saving and never wrong
    assert torch.equal(rows, (nxt != 0).any(1))
    assert out["off"][3].all() and out["off"][4].all()  # the twins mark every row
