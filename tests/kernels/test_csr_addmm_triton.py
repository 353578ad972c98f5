"""The Triton kernel of the CSR x dense product (kernels/k_csr_addmm_triton.py) against its PyTorch
twin (torch.addmm) bit for bit, PPR with it against the PyTorch path, and the dispatch's modes for it.

Without a GPU the kernel runs on CPU tensors in Triton's interpreter (``TRITON_INTERPRET=1``, set
while this module's tests run); with one it is compiled and run on CUDA, and its product is compared
with the CPU's. The kernel tests skip where triton is not installed (it is optional); the dispatch
tests run everywhere.
"""
import pytest
import torch

from hpengine.errors import UserError
from hpengine.graph import HyperGraph
from hpengine.retrieval import personalized_pagerank
from hpengine.sparse import _dispatch
from hpengine.sparse._dispatch import ENV, csr_addmm
from hpengine.testing._graphs import random_csr, random_hypergraph
from hpengine.testing._triton import triton_kernel_module

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(scope="module")
def kernel():
    """The kernel's module: compiled on CUDA, interpreted on CPU (hpengine.testing._triton)."""
    yield from triton_kernel_module(DEVICE, _dispatch.triton_kernels, _dispatch.load_triton_kernels)


@pytest.fixture
def triton_path(kernel, monkeypatch):
    """The dispatch sends this device's products to the Triton kernel: ``HPENGINE_KERNELS=on`` on CUDA;
    on CPU the same branch of csr_addmm with the interpreted kernel in place of the CPU one."""
    monkeypatch.setenv(ENV, "on")
    if DEVICE.type == "cpu":
        monkeypatch.setattr(_dispatch, "use_cpu_kernel", lambda device: False)
        monkeypatch.setattr(_dispatch, "use_triton_kernel", lambda device: True)
        monkeypatch.setattr(_dispatch, "triton_kernels", lambda: (kernel, None))


def run_kernel(kernel, mat, x, base, beta, alpha, in_place=False):
    """The kernel on DEVICE (into ``base`` itself when ``in_place``), returned on the CPU."""
    mat, x, base = mat.to(DEVICE), x.to(DEVICE), base.to(DEVICE)
    out = base if in_place else torch.empty_like(base)
    kernel.csr_addmm_out(mat.crow_indices(), mat.col_indices(), mat.values(), x, base, beta, alpha, out)
    return out.cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("width", [1, 17, 130])  # 130: two blocks of output columns, the second masked
def test_kernel_equals_cpu_addmm_bitwise(kernel, dtype, index_dtype, width):
    """The kernel sums in CSR order without FMA, as torch.addmm does on the CPU: the same bits."""
    mat = random_csr(11, 19, 0.25, dtype, index_dtype, width)
    g = torch.Generator().manual_seed(width + 100)
    x = torch.randn(19, width, generator=g, dtype=torch.float64).to(dtype)
    base = torch.randn(11, width, generator=g, dtype=torch.float64).to(dtype)
    for beta, alpha in [(0.0, 1.0), (1.0, -0.85), (0.15, 0.7225)]:
        want = torch.addmm(base, mat, x, beta=beta, alpha=alpha)
        assert torch.equal(run_kernel(kernel, mat, x, base, beta, alpha), want), (beta, alpha)
    # out is input: accumulate in place, as SparseChain does
    assert torch.equal(run_kernel(kernel, mat, x, base.clone(), 1.0, -0.85, in_place=True),
                       torch.addmm(base, mat, x, alpha=-0.85))


@pytest.mark.parametrize("value, index", [("fp32", "i32"), ("fp64", "i64")])
def test_compiled_kernel_has_no_fma(monkeypatch, value, index):
    """What the interpreter cannot show: compiled for CUDA (sm_90, no GPU needed: triton ships
    ptxas), the kernel rounds each product and each sum (PTX mul.rn / add.rn, never fma), as the CPU
    does; with FMA contraction allowed the same source would round once per multiply-add."""
    pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # a compiled (not interpreted) kernel
    module = _dispatch.load_triton_kernels()
    signature = {"crow_ptr": f"*{index}", "col_ptr": f"*{index}", "val_ptr": f"*{value}", "x_ptr": f"*{value}",
                 "input_ptr": f"*{value}", "out_ptr": f"*{value}", "w": "i32", "beta": "fp64", "alpha": "fp64",
                 "USE_INPUT": "constexpr", "BLOCK_W": "constexpr"}
    source = ASTSource(module._csr_addmm_kernel, signature, constexprs={"USE_INPUT": True, "BLOCK_W": 128})
    target = GPUTarget("cuda", 90, 32)
    ptx = compile(source, target=target, options={"num_warps": 2, **module.COMPILE_OPTIONS}).asm["ptx"]
    ty = "f32" if value == "fp32" else "f64"
    assert f"mul.rn.{ty}" in ptx and f"add.rn.{ty}" in ptx
    assert "fma" not in ptx and ".ftz" not in ptx
    fused = compile(source, target=target, options={"num_warps": 2, "enable_fp_fusion": True}).asm["ptx"]
    assert f"fma.rn.{ty}" in fused  # the check above can fail


@pytest.mark.skipif(DEVICE.type != "cuda", reason="needs CUDA")
def test_kernel_close_to_cuda_addmm(kernel):
    """torch.addmm on CUDA (cuSPARSE) sums in an order of its own: close to the kernel, not equal in
    the last bits, which is why the dispatch runs the kernel only with HPENGINE_KERNELS=on."""
    mat = random_csr(300, 200, 0.05, torch.float32, torch.int32, 7)
    x, base = torch.randn(200, 64), torch.randn(300, 64)
    want = torch.addmm(base.to(DEVICE), mat.to(DEVICE), x.to(DEVICE), beta=0.15, alpha=0.85).cpu()
    torch.testing.assert_close(run_kernel(kernel, mat, x, base, 0.15, 0.85), want, rtol=1e-6, atol=1e-6)


def test_beta_zero_ignores_input(kernel):
    """As torch.addmm: with beta = 0 the input is not read, so NaN in it does not leak."""
    mat = random_csr(9, 7, 0.4, torch.float32, torch.int32, 3)
    x = torch.rand(7, 4)
    got = run_kernel(kernel, mat, x, torch.full((9, 4), float("nan")), 0.0, 1.0)
    assert torch.equal(got, torch.addmm(torch.zeros(9, 4), mat, x, beta=0.0))


def test_empty_product_and_bad_arguments(kernel):
    mat = random_csr(5, 4, 0.5, torch.float32, torch.int64, 0)
    crow, col, val = (t.to(DEVICE) for t in (mat.crow_indices(), mat.col_indices(), mat.values()))
    empty = torch.empty(5, 0, device=DEVICE)
    assert kernel.csr_addmm_out(crow, col, val, torch.empty(4, 0, device=DEVICE), empty, 1.0, 1.0, empty) is empty
    x, base = torch.rand(4, 3, device=DEVICE), torch.rand(5, 3, device=DEVICE)
    with pytest.raises(TypeError, match="must share float32 or float64"):
        kernel.csr_addmm_out(crow, col, val, x.double(), base, 1.0, 1.0, base)
    with pytest.raises(TypeError, match="crow and col must both be int32 or int64"):
        kernel.csr_addmm_out(crow, col.int(), val, x, base, 1.0, 1.0, base)
    with pytest.raises(ValueError, match=r"expected crow \[m \+ 1\]"):
        kernel.csr_addmm_out(crow, col, val, torch.rand(4, 2, device=DEVICE), base, 1.0, 1.0, base)
    with pytest.raises(ValueError, match="must be contiguous"):
        kernel.csr_addmm_out(crow, col, val, torch.rand(3, 4, device=DEVICE).t(), base, 1.0, 1.0, base)


@pytest.mark.parametrize("method", ["power", "chebyshev"])
def test_ppr_with_triton_product_equals_torch_path(kernel, triton_path, monkeypatch, method):
    """PPR's products through the dispatch's Triton branch: the PyTorch path's result (on CPU bit for
    bit; on CUDA its other ops run on the device as before, so it is compared with the CPU run)."""
    fe, fp, v, p = random_hypergraph(0, num_facts=10, num_entities=6, num_passages=4, nnz=14)
    graph = HyperGraph.from_incidence(fe, fp, v, p)
    n = v + fp.numel() + p
    g = torch.Generator().manual_seed(1)
    pers = torch.rand(5, n, generator=g) * (torch.rand(5, n, generator=g) < 0.4)
    pers[:, 0] += 1e-3
    calls = []
    run = kernel.csr_addmm_out
    monkeypatch.setattr(kernel, "csr_addmm_out", lambda *args: calls.append(1) or run(*args))
    got = personalized_pagerank(graph.to(DEVICE), pers.to(DEVICE), method=method, tol=1e-5, max_iter=8, chunk_size=3).cpu()
    assert calls, "no product went to the Triton kernel"
    monkeypatch.setenv(ENV, "off")
    want = personalized_pagerank(graph, pers, method=method, tol=1e-5, max_iter=8, chunk_size=3)
    if DEVICE.type == "cpu":
        assert torch.equal(got, want)
    else:  # the L1 norms and the updates are CUDA reductions: close, as CUDA runs are to CPU ones
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


# the dispatch's modes for CUDA products (no GPU needed: the device is only inspected)

def test_auto_and_off_keep_torch_on_cuda(monkeypatch):
    def fail():
        raise AssertionError("triton loaded without HPENGINE_KERNELS=on")

    monkeypatch.setattr(_dispatch, "triton_kernels", fail)
    for mode in ("auto", "off"):
        monkeypatch.setenv(ENV, mode)
        assert _dispatch.use_triton_kernel(torch.device("cuda", 0)) is False
    monkeypatch.delenv(ENV)
    assert _dispatch.use_triton_kernel(torch.device("cuda")) is False


def test_on_sends_cuda_products_to_triton_and_never_cpu_ones(monkeypatch):
    monkeypatch.setattr(_dispatch, "triton_kernels", lambda: (object(), None))
    monkeypatch.setenv(ENV, "on")
    assert _dispatch.use_triton_kernel(torch.device("cuda", 0)) is True
    assert _dispatch.use_triton_kernel(torch.device("cpu")) is False


def test_on_without_triton_is_an_error(monkeypatch):
    monkeypatch.setattr(_dispatch, "triton_kernels", lambda: (None, "ModuleNotFoundError: No module named 'triton'"))
    monkeypatch.setenv(ENV, "on")
    with pytest.raises(UserError, match="HPENGINE_KERNELS=on but the Triton kernels are unavailable: "
                                        "ModuleNotFoundError: No module named 'triton'"):
        _dispatch.use_triton_kernel(torch.device("cuda", 0))


def test_missing_triton_is_a_reason_not_a_crash(monkeypatch):
    def no_triton():
        raise ModuleNotFoundError("No module named 'triton'")

    monkeypatch.setattr("hpengine.typing.WITH_TRITON", True)  # installed, but its import fails
    monkeypatch.setattr(_dispatch, "load_triton_kernels", no_triton)
    _dispatch.triton_kernels.cache_clear()
    try:
        assert _dispatch.triton_kernels() == (None, "ModuleNotFoundError: No module named 'triton'")
    finally:
        _dispatch.triton_kernels.cache_clear()


def test_triton_not_installed_is_said_without_importing_it(monkeypatch):
    monkeypatch.setattr("hpengine.typing.WITH_TRITON", False)
    monkeypatch.setattr(_dispatch, "load_triton_kernels", lambda: pytest.fail("tried to import triton"))
    _dispatch.triton_kernels.cache_clear()
    try:
        assert _dispatch.triton_kernels() == (None, "triton is not installed")
    finally:
        _dispatch.triton_kernels.cache_clear()


def test_cpu_products_unchanged_by_triton(monkeypatch):
    """With triton installed or not, a CPU product never goes to the Triton kernel."""
    monkeypatch.setattr(_dispatch, "triton_kernels", lambda: pytest.fail("triton loaded for a CPU product"))
    monkeypatch.setattr(_dispatch, "use_cpu_kernel", lambda device: False)  # as where no compiler is
    monkeypatch.setenv(ENV, "on")
    mat = random_csr(5, 4, 0.5, torch.float32, torch.int32, 0)
    x = torch.rand(4, 2)
    assert torch.equal(csr_addmm(torch.zeros(5, 2), mat, x, beta=0.0), torch.addmm(torch.zeros(5, 2), mat, x, beta=0.0))
