"""The Triton kernels of the hop's local blocks and BFS rounds (kernels/k_local_blocks_triton.py)
against their PyTorch twins (TransitionOperator._join_into bit for bit; the BFS round's batched
product), a hop with them against the PyTorch path, and the dispatch's modes for them.

Without a GPU the kernel runs on CPU tensors in Triton's interpreter (``TRITON_INTERPRET=1``, set
while this module's tests run), which runs one program at a time in Python: the graphs here are
small. With a GPU it is compiled and run on CUDA, and its blocks are compared with the CPU twin's.
The kernel tests skip where triton is not installed (it is optional); the dispatch tests run
everywhere.
"""
import pytest
import torch

from hpengine.errors import UserError
from hpengine.graph import HyperGraph
from hpengine.retrieval import hyperprove_hop
from hpengine.sparse import TransitionOperator, _dispatch
from hpengine.sparse._dispatch import ENV, expand_frontier_torch
from hpengine.testing._graphs import power_law_hypergraph, random_csr, random_hypergraph
from hpengine.testing._triton import triton_kernel_module

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(scope="module")
def kernel():
    """The kernel's module: compiled on CUDA, interpreted on CPU (hpengine.testing._triton)."""
    yield from triton_kernel_module(DEVICE, _dispatch.triton_blocks_kernel,
                                    lambda: _dispatch.load_triton_kernels(_dispatch.TRITON_BLOCKS_SOURCE))


def csr_operator(seed: int, dtype: torch.dtype) -> TransitionOperator:
    """``T_s`` of a random CSR pattern (random_csr: 40 facts, 12 columns) with a hub column (0, in
    every other fact) and facts without any column (empty rows: all-zero rows of the blocks)."""
    pattern = random_csr(40, 12, 0.15, torch.float64, torch.int64, seed).to_dense() != 0
    pattern[::2, 0] = True
    pattern[[5, 20, 33]] = False  # row 20 is random_csr's own empty row
    return TransitionOperator(pattern.nonzero().T.contiguous(), 40, 12, dtype)


def make_operator(seed: int, kind: str, dtype: torch.dtype) -> TransitionOperator:
    """``csr``: :func:`csr_operator`; ``plain``: a random hypergraph (hub entity, isolated facts);
    ``hubs``: power-law entity degrees; ``factored``: synonym pairs, rows expanded from the factors."""
    if kind == "csr":
        return csr_operator(seed, dtype)
    if kind == "hubs":
        return HyperGraph.from_incidence(*power_law_hypergraph(120, seed=seed)).transition(dtype)
    fe, fp, v, p = random_hypergraph(seed, num_facts=60, num_entities=20, num_passages=12, nnz=100)
    if kind == "plain":
        return HyperGraph.from_incidence(fe, fp, v, p).transition(dtype)
    syn = torch.randint(1, v, (2, 10), generator=torch.Generator().manual_seed(seed))
    return HyperGraph.from_incidence(fe, fp, v, p, synonyms=syn, factored=True).transition(dtype)


def slots(num_facts: int, num_q: int, m: int, seed: int) -> torch.Tensor:
    """``[num_q, m]`` fact ids with padding (-1) and a fact held three times."""
    idx = torch.randint(-1, num_facts, (num_q, m), generator=torch.Generator().manual_seed(seed))
    if m > 3:
        idx[0, 1] = idx[0, 2] = idx[0, 3]
    return idx


def join_twin(op: TransitionOperator, idx: torch.Tensor) -> torch.Tensor:
    """The PyTorch path of local_blocks (the kernel's twin) on the CPU, whatever HPENGINE_KERNELS says."""
    out = torch.zeros(*idx.shape, idx.shape[1], dtype=op.dtype)
    if idx.numel():
        op._join_into(idx, out, None)
    return out


def run_kernel(kernel, op: TransitionOperator, idx: torch.Tensor, *, crow=None, col=None) -> torch.Tensor:
    """The kernel's blocks on DEVICE (into a buffer of 3.0: every entry is written), on the CPU."""
    rows, op_crow, op_col = op._join_operands(idx)
    crow = op_crow if crow is None else crow
    col = op_col if col is None else col
    out = torch.full((*idx.shape, idx.shape[1]), 3.0, dtype=op.dtype, device=DEVICE)
    got = kernel.local_blocks_out(idx.to(DEVICE), rows.to(DEVICE), crow.to(DEVICE), col.to(DEVICE),
                                  op.inv_degree.to(DEVICE), out)
    assert got is out
    return out.cpu()


@pytest.mark.parametrize("kind", ["csr", "plain", "hubs", "factored"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernel_equals_join_bitwise(kernel, kind, dtype):
    """Each entry and row sum in ascending column order from 0, no FMA: the PyTorch join's bits."""
    op = make_operator(0, kind, dtype)
    for num_q, m in [(1, 1), (3, 6), (2, 19)]:
        idx = slots(op.num_facts, num_q, m, m)
        want = join_twin(op, idx)
        assert want.any() or m == 1
        assert torch.equal(run_kernel(kernel, op, idx), want), (num_q, m)


def test_row_tiles_and_unsorted_int32_rows(kernel, monkeypatch):
    """A block row wider than one program's tile (three tiles of 16), and CSR rows held with int32
    indices and their columns descending (the launcher sorts each slot's columns)."""
    monkeypatch.setattr(kernel, "MAX_BLOCK_J", 16)
    op = make_operator(1, "plain", torch.float32)
    idx = slots(op.num_facts, 1, 37, 5)
    want = join_twin(op, idx)
    _, crow, col = op._join_operands(idx)
    flipped = col.clone()
    for r in range(crow.numel() - 1):
        flipped[crow[r]:crow[r + 1]] = col[crow[r]:crow[r + 1]].flip(0)
    assert not torch.equal(flipped, col)
    assert torch.equal(run_kernel(kernel, op, idx, crow=crow.int(), col=flipped.int()), want)


def test_repeated_column_in_a_row_adds_its_term_again(kernel):
    """As the CPU kernel does (its twin for rows no incidence holds: ``B``'s pairs are unique)."""
    reason = _dispatch.cpu_kernels()
    if reason is not None:
        pytest.skip(f"CPU kernels unavailable: {reason}")
    crow = torch.tensor([0, 3, 5, 7, 8])
    col = torch.tensor([0, 0, 2, 0, 1, 1, 2, 2])  # row 0 holds column 0 twice
    ids = torch.tensor([[0, 1, 2, 3, -1]])
    inv_degree = torch.tensor([1 / 3, 1 / 7, 0.1])
    want = torch.ops.hpengine.local_blocks(ids, ids, crow, col, inv_degree)
    out = torch.empty(1, 5, 5, device=DEVICE)
    kernel.local_blocks_out(ids.to(DEVICE), ids.to(DEVICE), crow.to(DEVICE), col.to(DEVICE), inv_degree.to(DEVICE), out)
    assert want[0, 0, 1] > 0 and torch.equal(out.cpu(), want)


def test_empty_and_bad_arguments(kernel):
    op = make_operator(0, "csr", torch.float32)
    rows, crow, col = (t.to(DEVICE) for t in op._join_operands(torch.zeros(1, 1, dtype=torch.int64)))
    inv = op.inv_degree.to(DEVICE)
    empty = torch.empty(0, 4, dtype=torch.int64, device=DEVICE)
    assert kernel.local_blocks_out(empty, empty, crow, col, inv, torch.empty(0, 4, 4, device=DEVICE)).shape == (0, 4, 4)
    pad = torch.full((2, 3), -1, dtype=torch.int64, device=DEVICE)  # padding only: no columns at all
    assert not kernel.local_blocks_out(pad, pad, crow, col, inv, torch.ones(2, 3, 3, device=DEVICE)).any()
    ids = torch.zeros(2, 3, dtype=torch.int64, device=DEVICE)
    out = torch.empty(2, 3, 3, device=DEVICE)
    with pytest.raises(TypeError, match="must share float32 or float64"):
        kernel.local_blocks_out(ids, ids, crow, col, inv.double(), out)
    with pytest.raises(TypeError, match="crow and col must both be int32 or int64"):
        kernel.local_blocks_out(ids, ids, crow.int(), col.long(), inv, out)
    with pytest.raises(TypeError, match="ids and rows must be int64"):
        kernel.local_blocks_out(ids.int(), ids, crow, col, inv, out)
    with pytest.raises(ValueError, match=r"expected ids and rows \[Q, M\]"):
        kernel.local_blocks_out(ids, ids, crow, col, inv, torch.empty(2, 3, 4, device=DEVICE))
    with pytest.raises(ValueError, match="must be contiguous"):
        kernel.local_blocks_out(ids, ids, crow, col, inv, torch.empty(3, 3, 2, device=DEVICE).permute(2, 0, 1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("num_q, m, num_b", [(3, 5, 1), (2, 37, 2), (1, 150, 2)])  # 37, 150: several tiles
def test_frontier_hits_equal_the_bfs_product(kernel, dtype, num_q, m, num_b):
    """One BFS round, both directions, on thresholded blocks and on their transposed views (strides)."""
    g = torch.Generator().manual_seed(m)
    block = torch.rand(num_q, m, m, generator=g, dtype=torch.float64).to(dtype)
    block = torch.nn.functional.threshold(block, 0.9, 0.0)
    block[0, 0] = 0.0  # a slot with no edge out
    block[:, 1, 2] = block[:, 3, 1] = 1.0  # an edge out of and one into the reached slot 1
    reached = torch.rand(num_q, m, num_b, generator=g) < 0.2
    reached[:, 1] = True
    for adjacency in (block, block.transpose(1, 2)):
        for reverse in (True, False):
            want = expand_frontier_torch(adjacency, reached, reverse=reverse)
            out = torch.empty(reached.shape, dtype=torch.bool, device=DEVICE)
            kernel.frontier_hits_out(adjacency.to(DEVICE), reached.to(DEVICE), reverse, out)
            assert want.any() and torch.equal(out.cpu(), want), reverse


def test_frontier_hits_bad_arguments(kernel):
    adjacency, reached = torch.rand(2, 4, 4, device=DEVICE), torch.zeros(2, 4, 1, dtype=torch.bool, device=DEVICE)
    out = torch.empty_like(reached)
    with pytest.raises(TypeError, match="adjacency must be float32 or float64"):
        kernel.frontier_hits_out(adjacency.half(), reached, True, out)
    with pytest.raises(TypeError, match="reached and out must be bool"):
        kernel.frontier_hits_out(adjacency, reached.float(), True, out)
    with pytest.raises(ValueError, match=r"expected adjacency \[Q, M, M\]"):
        kernel.frontier_hits_out(adjacency, reached[:, :3], True, out)
    with pytest.raises(ValueError, match="must be contiguous"):
        kernel.frontier_hits_out(adjacency, reached.expand(2, 4, 3), True, torch.empty_like(reached.expand(2, 4, 3)))


@pytest.mark.parametrize("value", ["fp32", "fp64"])
def test_compiled_kernel_has_no_fma(monkeypatch, value):
    """What the interpreter cannot show: compiled for CUDA (sm_90, no GPU needed: triton ships
    ptxas), the kernel rounds each product and each sum (PTX mul.rn / add.rn, never fma) and divides
    with correct rounding (div.rn), as the CPU does; with FMA contraction allowed the same source
    would round once per multiply-add."""
    pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # a compiled (not interpreted) kernel
    module = _dispatch.load_triton_kernels(_dispatch.TRITON_BLOCKS_SOURCE)
    signature = {"ids_ptr": "*i64", "cols_ptr": "*i32", "count_ptr": "*i32", "inv_degree_ptr": f"*{value}",
                 "out_ptr": f"*{value}", "m": "i32", "e_max": "i32", "BLOCK_E": "constexpr", "BLOCK_J": "constexpr",
                 "IS_FP32": "constexpr"}
    constexprs = {"BLOCK_E": 4, "BLOCK_J": 256, "IS_FP32": value == "fp32"}
    source = ASTSource(module._local_blocks_kernel, signature, constexprs=constexprs)
    target = GPUTarget("cuda", 90, 32)
    ptx = compile(source, target=target, options={"num_warps": 1, **module.COMPILE_OPTIONS}).asm["ptx"]
    ty = "f32" if value == "fp32" else "f64"
    assert f"mul.rn.{ty}" in ptx and f"add.rn.{ty}" in ptx and f"div.rn.{ty}" in ptx
    assert "fma" not in ptx and ".ftz" not in ptx and "div.full" not in ptx and "div.approx" not in ptx
    fused = compile(source, target=target, options={"num_warps": 1, "enable_fp_fusion": True}).asm["ptx"]
    assert f"fma.rn.{ty}" in fused  # the check above can fail


@pytest.fixture
def triton_path(kernel, monkeypatch):
    """The dispatch sends this device's local blocks to the Triton kernel with ``HPENGINE_KERNELS=on``
    (and only then); on CPU the same branch with the interpreted kernel and no CPU kernel."""
    if DEVICE.type == "cpu":
        monkeypatch.setattr(_dispatch, "use_cpu_kernel", lambda device: False)
        monkeypatch.setattr(_dispatch, "use_triton_blocks_kernel", lambda device: _dispatch.kernel_mode() == "on")
        monkeypatch.setattr(_dispatch, "triton_blocks_kernel", lambda: (kernel, None))


def test_local_blocks_through_the_dispatch(kernel, triton_path, monkeypatch):
    """TransitionOperator.local_blocks takes the kernel with ``on``: the twin's blocks, transposed for T_s^T."""
    monkeypatch.setenv(ENV, "on")
    graph = HyperGraph.from_incidence(*random_hypergraph(2, num_facts=60, num_entities=20, num_passages=12, nnz=100))
    op, dev_op = graph.transition(), graph.to(DEVICE).transition()
    idx = slots(op.num_facts, 3, 9, 2)
    calls = []
    run = kernel.local_blocks_out
    monkeypatch.setattr(kernel, "local_blocks_out", lambda *args: calls.append(1) or run(*args))
    want = join_twin(op, idx)
    assert torch.equal(dev_op.local_blocks(idx.to(DEVICE)).cpu(), want)
    assert torch.equal(dev_op.t().local_blocks(idx.to(DEVICE)).cpu(), want.transpose(1, 2))
    assert len(calls) == 2


def test_hop_with_triton_blocks_equals_torch_path(kernel, triton_path, monkeypatch):
    """Two hops with the blocks and the BFS rounds from the kernels against HPENGINE_KERNELS=off."""
    graph = HyperGraph.from_incidence(*random_hypergraph(3, num_facts=40, num_entities=12, num_passages=8, nnz=70))
    g = torch.Generator().manual_seed(3)
    facts, queries = torch.randn(graph.num_facts, 8, generator=g), torch.randn(5, 8, generator=g)
    kw = dict(num_seeds=3, subgraph_size=10, top_k=3, theta=0.02, query_chunk_size=3)
    calls, rounds = [], []
    run, step = kernel.local_blocks_out, kernel.frontier_hits_out
    monkeypatch.setattr(kernel, "local_blocks_out", lambda *args: calls.append(1) or run(*args))
    monkeypatch.setattr(kernel, "frontier_hits_out", lambda *args: rounds.append(1) or step(*args))
    out = {}
    for mode in ("on", "off"):
        monkeypatch.setenv(ENV, mode)
        dev_graph, dev_facts, dev_queries = (x.to(DEVICE) for x in (graph, facts, queries))
        first = hyperprove_hop(dev_graph, dev_facts, dev_queries, **kw)
        out[mode] = [first, hyperprove_hop(dev_graph, dev_facts, dev_queries, first.frontier, **kw)]
    assert len(calls) == 4 and rounds  # two chunks per hop, with "on" only
    assert (out["on"][1].distance >= 1).any()
    for a, b in zip(out["off"], out["on"]):
        for x, y in zip(a, b):
            assert torch.equal(x, y)


# the dispatch's modes for CUDA blocks (no GPU needed: the device is only inspected)

def test_auto_and_off_keep_the_join_on_cuda(monkeypatch):
    monkeypatch.setattr(_dispatch, "triton_blocks_kernel", lambda: pytest.fail("triton loaded without on"))
    for mode in ("auto", "off"):
        monkeypatch.setenv(ENV, mode)
        assert _dispatch.use_blocks_kernel(torch.device("cuda", 0), torch.float32) is False
    monkeypatch.setenv(ENV, "on")
    assert _dispatch.use_blocks_kernel(torch.device("cuda", 0), torch.float16) is False


def test_on_sends_cuda_blocks_to_triton_never_cpu_ones(monkeypatch):
    monkeypatch.setattr(_dispatch, "triton_blocks_kernel", lambda: (object(), None))
    monkeypatch.setattr(_dispatch, "use_cpu_kernel", lambda device: False)  # as where no compiler is
    monkeypatch.setenv(ENV, "on")
    assert _dispatch.use_blocks_kernel(torch.device("cuda", 0), torch.float64) is True
    assert _dispatch.use_blocks_kernel(torch.device("cpu"), torch.float32) is False
    # the BFS without the blocks is the CPU kernel's alone: on CUDA the hop forms them (batched_bfs)
    assert _dispatch.use_join_kernel(torch.device("cuda", 0), torch.float32) is False


def test_on_without_triton_is_an_error(monkeypatch):
    monkeypatch.setattr(_dispatch, "triton_blocks_kernel", lambda: (None, "triton is not installed"))
    monkeypatch.setenv(ENV, "on")
    with pytest.raises(UserError, match="HPENGINE_KERNELS=on but the Triton kernels are unavailable: "
                                        "triton is not installed"):
        _dispatch.use_blocks_kernel(torch.device("cuda", 0), torch.float32)


def test_missing_blocks_source_is_a_reason_not_a_crash(monkeypatch):
    def missing(source=_dispatch.TRITON_SOURCE):
        raise FileNotFoundError(f"kernels/{source} not found beside the package or as hpengine.kernels")

    monkeypatch.setattr("hpengine.typing.WITH_TRITON", True)
    monkeypatch.setattr(_dispatch, "load_triton_kernels", missing)
    _dispatch.triton_blocks_kernel.cache_clear()
    try:
        assert _dispatch.triton_blocks_kernel() == (
            None, "FileNotFoundError: kernels/k_local_blocks_triton.py not found beside the package or as hpengine.kernels")
    finally:
        _dispatch.triton_blocks_kernel.cache_clear()


def test_cpu_bfs_rounds_never_load_triton(monkeypatch):
    """A CPU block's BFS round is the batched product in every mode, triton installed or not."""
    monkeypatch.setattr(_dispatch, "triton_blocks_kernel", lambda: pytest.fail("triton loaded for a CPU block"))
    block = torch.tensor([[[0.0, 0.5], [0.0, 0.0]]])
    reached = torch.tensor([[[True], [False]]])
    for mode in ("auto", "on", "off"):
        monkeypatch.setenv(ENV, mode)
        assert _dispatch.expand_frontier(block, reached, reverse=False).view(-1).tolist() == [False, True]
