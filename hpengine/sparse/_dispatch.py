"""The one place that picks a compiled kernel or the PyTorch path for hpengine's sparse products.

The kernels' sources live in the top-level ``kernels/`` folder (installed as ``hpengine.kernels``)
and are compiled on first use with :func:`torch.utils.cpp_extension.load` (a C++ compiler and
ninja; the build is cached by torch under ``TORCH_EXTENSIONS_DIR``). The PyTorch path is the twin
every kernel is tested equal to, and it is what runs when no compiler is at hand.

``HPENGINE_KERNELS`` (read at each call, so a test or a user can switch it):

* unset or ``auto``: the kernel where it applies and builds; a build (first use) and a failed build
  are each said in one line on stderr, and after a failed one the PyTorch path runs;
* ``off``: always the PyTorch path;
* ``on``: the kernel, and an unavailable kernel is an error (never a silent fallback).

Which product goes to the kernel (``kernels/README.md``, benchmarks/README.md "Kernels"): the CSR x
dense product of PPR's iteration and of the hop's walk on the CPU (bench_ppr, H = 100k, one
thread). On CUDA the same product goes to the Triton kernel (``kernels/k_csr_addmm_triton.py``)
only with ``on``: it sums in the CPU's order, and ``auto`` keeps torch.addmm's (cuSPARSE's) bits
there. Everything else (autograd through the product, broadcast ``input``) stays on ``torch.addmm``.
The local blocks of ``T_s`` and the BFS rounds on them go to their Triton kernels
(``kernels/k_local_blocks_triton.py``) on CUDA likewise only with ``on`` (:func:`use_blocks_kernel`,
:func:`expand_frontier`).
The local blocks of ``T_s`` and the hop's BFS on them (``kernels/k_local_blocks_cpu.cpp``) and the hop's
walk steps on a plain incidence (``kernels/k_hop_walk_cpu.cpp``: :func:`walk_product`, :func:`walk_step`)
take the CPU kernels in the same cases (bench_hop, H = 100k, one thread).
"""
from __future__ import annotations

import functools
import logging
import os
import sys
from pathlib import Path

import torch
from torch import Tensor

from hpengine.errors import UserError

ENV = "HPENGINE_KERNELS"
MODES = ("auto", "on", "off")
#: the C++ kernel of the CSR x dense product (kernels/k_csr_addmm_cpu.cpp)
CPU_SOURCE = "k_csr_addmm_cpu.cpp"
#: every C++ source, built into one extension: the product, the local blocks of T_s with the hop's
#: BFS on them (kernels/k_local_blocks_cpu.cpp) and the hop's fused walk step (kernels/k_hop_walk_cpu.cpp)
CPU_SOURCES = (CPU_SOURCE, "k_local_blocks_cpu.cpp", "k_hop_walk_cpu.cpp")
#: the name of that extension (torch caches its build under TORCH_EXTENSIONS_DIR/<name>)
CPU_EXTENSION = "hpengine_cpu_kernels"
# -ffp-contract=off: no fused multiply-add, so the kernel sums exactly as torch.addmm does (the
# retrieval records must not change with the kernel); -march=native: built on the machine that runs it
CPU_FLAGS = ("-O3", "-fopenmp", "-ffp-contract=off", "-march=native")
#: the Triton kernel of the same product on CUDA (kernels/k_csr_addmm_triton.py; needs triton)
TRITON_SOURCE = "k_csr_addmm_triton.py"
#: the Triton kernel of the local blocks of T_s on CUDA (kernels/k_local_blocks_triton.py; needs triton)
TRITON_BLOCKS_SOURCE = "k_local_blocks_triton.py"

_log = logging.getLogger(__name__)


def kernel_mode() -> str:
    """``HPENGINE_KERNELS`` as one of :data:`MODES` (unset: ``auto``); another value is a UserError."""
    mode = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise UserError(f"{ENV} must be one of {list(MODES)} (got {mode!r})")
    return mode


def kernel_sources() -> Path | None:
    """The folder holding the kernels' sources: the installed ``hpengine.kernels`` package data, or
    ``kernels/`` beside the package in a source checkout; ``None`` when neither has them."""
    import importlib.util

    candidates = [Path(__file__).resolve().parents[2] / "kernels"]
    try:
        spec = importlib.util.find_spec("hpengine.kernels")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        candidates = [Path(p) for p in spec.submodule_search_locations] + candidates
    return next((p for p in candidates if (p / CPU_SOURCE).is_file()), None)


def build_cpu_kernels() -> None:
    """Compile and load the CPU kernels (registers ``torch.ops.hpengine.*``); raises on any failure."""
    import shutil

    from torch.utils import cpp_extension

    folder = kernel_sources()
    missing = [name for name in CPU_SOURCES if folder is None or not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"kernels/{missing[0]} not found beside the package or as hpengine.kernels")
    compiler = os.environ.get("CXX", "c++")  # what cpp_extension calls
    if shutil.which(compiler) is None:
        raise FileNotFoundError(f"no C++ compiler {compiler!r} on PATH")
    if not cpp_extension.is_ninja_available():
        raise FileNotFoundError("no ninja on PATH (pip install ninja)")
    torch_log = logging.getLogger("torch.utils.cpp_extension")
    level = torch_log.level
    torch_log.setLevel(logging.ERROR)  # its compiler-version warnings: the outcome is said in one line
    sources = [str(folder / name) for name in CPU_SOURCES]
    if _needs_build(sources):  # the one line while the compiler runs; a cached build loads silently
        print("hpengine: building CPU kernels (first use, cached after)...", file=sys.stderr, flush=True)
    try:
        cpp_extension.load(name=CPU_EXTENSION, sources=sources, extra_cflags=list(CPU_FLAGS),
                           extra_ldflags=["-fopenmp"], is_python_module=False, verbose=False)
    finally:
        torch_log.setLevel(level)
    _register_autograd()


def _needs_build(sources: list[str]) -> bool:
    """Whether torch's extension cache lacks a build of ``sources`` newer than each of them (the
    cache also rebuilds on new flags or a new torch; then the build runs without this line)."""
    from torch.utils import cpp_extension

    built = Path(cpp_extension._get_build_directory(CPU_EXTENSION, verbose=False)) / f"{CPU_EXTENSION}.so"
    try:
        built_at = built.stat().st_mtime
    except OSError:
        return True
    return any(Path(src).stat().st_mtime > built_at for src in sources)


@functools.lru_cache(maxsize=None)
def _register_autograd() -> None:
    """Gradients of ``torch.ops.hpengine.csr_addmm`` for ``x`` and ``input`` (the CSR values and
    indices are constants): ``dx = alpha * A^T g`` (PyTorch's sparse product), ``dinput = beta * g``.
    Once per process: a second registration (a rebuild after ``cpu_kernels.cache_clear()``) would
    override the first with a warning."""

    def setup_context(ctx, inputs, output):
        crow, col, val, x, _, beta, alpha = inputs
        ctx.save_for_backward(crow, col, val)
        ctx.shape, ctx.beta, ctx.alpha = (crow.shape[0] - 1, x.shape[0]), beta, alpha

    def backward(ctx, grad):
        crow, col, val = ctx.saved_tensors
        mat = torch.sparse_csr_tensor(crow, col, val, size=ctx.shape, check_invariants=False)
        grad_x = torch.mm(mat.t(), grad) * ctx.alpha
        return None, None, None, grad_x, grad * ctx.beta, None, None

    try:
        torch.library.register_autograd("hpengine::csr_addmm", backward, setup_context=setup_context)
    except RuntimeError:  # registered already in this process (a second build after a failed one)
        pass



@functools.lru_cache(maxsize=None)
def cpu_kernels() -> str | None:
    """Build the CPU kernels once per process; ``None`` when they are available, else the reason
    (one line). The outcome is said once: on the log when built, on stderr when not."""
    try:
        build_cpu_kernels()
    except Exception as exc:  # no compiler, no ninja, a failed build: the PyTorch path serves
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        if kernel_mode() == "auto":
            print(f"hpengine: CPU kernels unavailable ({reason[:200]}); using the PyTorch path", file=sys.stderr)
        return reason
    _log.info("hpengine: CPU kernels built (kernels/%s); sparse products and local blocks use them",
              ", ".join(CPU_SOURCES))
    return None


def use_cpu_kernel(device: torch.device) -> bool:
    """Whether a sparse product on ``device`` goes to the CPU kernel (:data:`ENV`; raises a
    UserError when ``on`` and the kernel cannot be built)."""
    mode = kernel_mode()
    if mode == "off" or device.type != "cpu":
        return False
    reason = cpu_kernels()
    if reason is not None and mode == "on":
        raise UserError(f"{ENV}=on but the CPU kernels are unavailable: {reason[:200]} "
                        f"(set {ENV}=off or auto for the PyTorch path)")
    return reason is None


def load_triton_kernels(source: str = TRITON_SOURCE):
    """Import ``kernels/<source>`` (default ``k_csr_addmm_triton.py``) by path (``kernels/`` is not a
    Python package) and return the module; raises ImportError without triton. Each call imports it afresh."""
    import importlib.util

    folder = kernel_sources()
    if folder is None or not (folder / source).is_file():
        raise FileNotFoundError(f"kernels/{source} not found beside the package or as hpengine.kernels")
    spec = importlib.util.spec_from_file_location(f"hpengine_{Path(source).stem}", folder / source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_triton(load) -> tuple[object | None, str | None]:
    """``(load(), None)``, or ``None`` and the reason (one line) triton or the kernel cannot load."""
    from hpengine.typing import WITH_TRITON

    if not WITH_TRITON:
        return None, "triton is not installed"
    try:
        return load(), None
    except Exception as exc:  # triton is optional: not installed, or a broken install
        return None, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


@functools.lru_cache(maxsize=None)
def triton_kernels() -> tuple[object | None, str | None]:
    """The Triton product's module (``kernels/k_csr_addmm_triton.py``), loaded once per process, and
    ``None``; or ``None`` and the reason (one line) it cannot load."""
    return _load_triton(lambda: load_triton_kernels())


@functools.lru_cache(maxsize=None)
def triton_blocks_kernel() -> tuple[object | None, str | None]:
    """The Triton local blocks' module (``kernels/k_local_blocks_triton.py``), loaded once per
    process, and ``None``; or ``None`` and the reason (one line) it cannot load."""
    return _load_triton(lambda: load_triton_kernels(TRITON_BLOCKS_SOURCE))


def _require_triton(loaded: tuple[object | None, str | None]) -> bool:
    module, reason = loaded
    if module is None:
        raise UserError(f"{ENV}=on but the Triton kernels are unavailable: {reason[:200]} "
                        f"(pip install triton, or set {ENV}=off or auto for the PyTorch path)")
    return True


def use_triton_kernel(device: torch.device) -> bool:
    """Whether a sparse product on ``device`` goes to the Triton kernel: CUDA with :data:`ENV` ``on``
    only (raises a UserError when triton cannot load). It sums in the CPU's order, where torch.addmm on
    CUDA (cuSPARSE) sums in its own, so by default (``auto``) CUDA products keep torch.addmm's bits."""
    if device.type != "cuda" or kernel_mode() != "on":
        return False
    return _require_triton(triton_kernels())


def use_triton_blocks_kernel(device: torch.device) -> bool:
    """Whether the local blocks of ``T_s`` on ``device`` go to the Triton kernel
    (``kernels/k_local_blocks_triton.py``): CUDA with :data:`ENV` ``on`` only (raises a UserError when
    triton cannot load). Its sums are the CPU kernel's, in the PyTorch join's order; whether the GPU
    keeps those bits is not yet checked on a GPU, so by default (``auto``) CUDA keeps the join."""
    if device.type != "cuda" or kernel_mode() != "on":
        return False
    return _require_triton(triton_blocks_kernel())


def _kernel_applies(input: Tensor, mat: Tensor, x: Tensor, out: Tensor | None) -> bool:
    if mat.layout != torch.sparse_csr or x.dtype not in (torch.float32, torch.float64):
        return False
    if mat.dtype != x.dtype or input.dtype != x.dtype or input.shape != (mat.shape[0], x.shape[1]):
        return False
    if out is not None and (out.dtype != x.dtype or out.shape != input.shape or not out.is_contiguous()):
        return False
    if torch.is_grad_enabled() and (mat.requires_grad or x.requires_grad or input.requires_grad):
        return False  # the in-place product has no backward; autograd keeps torch.addmm
    return use_cpu_kernel(x.device) or use_triton_kernel(x.device)


def csr_addmm(input: Tensor, mat: Tensor, x: Tensor, *, beta: float = 1.0, alpha: float = 1.0,
              out: Tensor | None = None) -> Tensor:
    """``beta * input + alpha * (mat @ x)`` for a CSR ``mat``: ``torch.addmm``'s result, written into
    ``out`` when given (``out`` may be ``input``, never ``x``).

    The CPU kernel (``kernels/k_csr_addmm_cpu.cpp``) sums in torch.addmm's order and gives the same
    bits (tests/kernels); on CUDA with ``HPENGINE_KERNELS=on`` the Triton kernel
    (``kernels/k_csr_addmm_triton.py``) sums in the same order; other cases run ``torch.addmm`` itself.

    Shapes:
        input ``[m, w]``, mat ``[m, n]`` CSR, x ``[n, w]`` -> ``[m, w]``.
    """
    # bench_ppr (H = 100k, Q = 1,024, 1 thread): PPR 1.25-1.8x, the hop 1.07x, same bits (kernels/README.md)
    if _kernel_applies(input, mat, x, out):
        if out is None:
            out = torch.empty_like(input, memory_format=torch.contiguous_format)
        if not input.is_contiguous():  # never out itself (a given out is contiguous)
            input = input.contiguous()
        # CUDA with HPENGINE_KERNELS=on: the Triton kernel (kernels/k_csr_addmm_triton.py), the CPU's sum order
        kernel = triton_kernels()[0].csr_addmm_out if use_triton_kernel(x.device) else torch.ops.hpengine.csr_addmm_out
        kernel(mat.crow_indices(), mat.col_indices(), mat.values(), x.contiguous(),
               input, float(beta), float(alpha), out)
        return out
    return csr_addmm_torch(input, mat, x, beta=beta, alpha=alpha, out=out)


def use_join_kernel(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the local blocks of ``T_s`` (and the hop's BFS on them) on ``device`` go to the CPU
    kernel (``kernels/k_local_blocks_cpu.cpp``): CPU, float32/float64 (raises a UserError when
    :data:`ENV` is ``on`` and the kernel cannot be built). The blocks are built from integer ids and
    the operator's constant degrees, so no gradient flows through them on either path."""
    if dtype not in (torch.float32, torch.float64):
        return False
    return use_cpu_kernel(device)


def use_blocks_kernel(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether :func:`local_blocks_into` serves the local blocks of ``T_s`` on ``device``: the CPU
    kernel where :func:`use_join_kernel` says so, or on CUDA with :data:`ENV` ``on`` the Triton kernel
    (float32/float64). The BFS without the blocks (:func:`local_bfs`) is the CPU kernel's alone; on
    CUDA the hop forms the blocks and runs ``batched_bfs`` on them (:func:`expand_frontier`)."""
    if dtype not in (torch.float32, torch.float64):
        return False
    return use_join_kernel(device, dtype) or use_triton_blocks_kernel(device)


def expand_frontier(adjacency: Tensor, reached: Tensor, *, reverse: bool) -> Tensor:
    """One round of the level-synchronous BFS (``hpengine.retrieval.batched_bfs``): the slots one
    edge (an entry ``> 0``) from a reached slot, following edges backwards with ``reverse``.

    On CUDA with :data:`ENV` ``on`` the Triton kernel (``kernels/k_local_blocks_triton.py``) tests the
    edges as booleans; the twin (:func:`expand_frontier_torch`) is one batched product and a
    comparison. They agree exactly where the entries are ``>= 0`` and finite, as the BFS requires.

    Args:
        adjacency: ``[Q, M, M]`` floating block, entries ``>= 0``; an edge ``i -> j`` is an entry ``> 0``.
        reached: bool ``[Q, M, B]``, the reached slots of ``B`` searches.
        reverse: hit ``i`` when an edge ``i -> j`` ends in a reached ``j`` (else: when a reached ``i``
            has an edge ``i -> j``, hit ``j``).

    Returns:
        bool ``[Q, M, B]``, reached slots included where an edge leads to them.

    Shapes:
        adjacency ``[Q, M, M]``, reached bool ``[Q, M, B]`` -> bool ``[Q, M, B]``.

    Example:
        >>> a = torch.tensor([[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]])
        >>> reached = torch.tensor([[[True], [False], [False]]])
        >>> expand_frontier(a, reached, reverse=False).view(-1).tolist()
        [False, True, False]
    """
    if adjacency.dtype in (torch.float32, torch.float64) and use_triton_blocks_kernel(adjacency.device):
        out = torch.empty(reached.shape, dtype=torch.bool, device=reached.device)
        triton_blocks_kernel()[0].frontier_hits_out(adjacency, reached.contiguous(), bool(reverse), out)
        return out
    return expand_frontier_torch(adjacency, reached, reverse=reverse)


def expand_frontier_torch(adjacency: Tensor, reached: Tensor, *, reverse: bool) -> Tensor:
    """The PyTorch path of :func:`expand_frontier` (the kernel's twin)."""
    frontier = reached.to(adjacency.dtype)
    if reverse:  # i is one hop closer when some edge i -> j ends in a reached j
        return torch.bmm(adjacency, frontier) > 0
    # j is reached when some reached i has an edge i -> j
    return torch.bmm(frontier.transpose(1, 2), adjacency).transpose(1, 2) > 0


def _require_cpu_kernels() -> None:
    """Build (once) the CPU kernels for a direct call; a UserError when they are unavailable."""
    reason = cpu_kernels()
    if reason is not None:
        raise UserError(f"the CPU kernels are unavailable: {reason[:200]} (set {ENV}=off for the PyTorch path)")


def local_blocks_into(ids: Tensor, rows: Tensor, crow: Tensor, col: Tensor, inv_degree: Tensor, out: Tensor) -> Tensor:
    """Fill ``out`` with the row-normalised local blocks of ``T_s`` (the CPU kernel; on CUDA with
    :data:`ENV` ``on`` the Triton kernel; the PyTorch twin is ``TransitionOperator._join_into``, equal
    bit for bit).

    Args:
        ids: int64 ``[Q, M]`` fact ids, ``-1`` padding. rows: int64 ``[Q, M]`` each slot's row of
            ``crow``/``col`` (``ids`` for a plain ``B``, the expanded rows of a factored one).
        crow, col: a CSR ``[*, C]`` (int32 or int64) of incidence columns. inv_degree: ``[C]`` ``1 / d_c``.
        out: contiguous ``[Q, M, M]`` of ``inv_degree``'s dtype, overwritten.

    Shapes:
        ``[Q, M], [Q, M], [R + 1], [nnz], [C] -> [Q, M, M]``.
    """
    if use_triton_blocks_kernel(ids.device):  # kernels/k_local_blocks_triton.py, the same sums and order
        triton_blocks_kernel()[0].local_blocks_out(ids.contiguous(), rows.contiguous(), crow, col, inv_degree, out)
        return out
    _require_cpu_kernels()
    torch.ops.hpengine.local_blocks_out(ids.contiguous(), rows.contiguous(), crow, col, inv_degree, out)
    return out


def local_bfs(ids: Tensor, rows: Tensor, crow: Tensor, col: Tensor, inv_degree: Tensor, *, theta: float,
              sources: Tensor, depths: list[int], reverse: list[bool]) -> Tensor:
    """BFS distances on the thresholded local blocks (edges ``T*_ij > theta``) without forming them
    (the CPU kernel): search ``b`` is ``batched_bfs(threshold(local_blocks(ids), theta, 0), sources[..., b],
    depths[b], reverse=reverse[b])``, equal to it (tests/kernels/test_hop_kernels.py).

    Shapes:
        ids, rows ``[Q, M]``, sources bool ``[Q, M, B]`` -> int64 ``[Q, M, B]`` (``-1``: unreached).
    """
    _require_cpu_kernels()
    return torch.ops.hpengine.local_bfs(ids.contiguous(), rows.contiguous(), crow, col, inv_degree, float(theta),
                                        sources.contiguous(), [int(d) for d in depths], [int(bool(r)) for r in reverse])


def _one_csr(mat) -> Tensor | None:
    """``mat`` itself (a CSR tensor) or a SparseChain's one CSR matrix; ``None`` for a factored chain."""
    csr = mat if isinstance(mat, Tensor) else None if mat.factored else mat.outer
    return csr if csr is not None and csr.layout == torch.sparse_csr else None


def _rows_arg(rows: Tensor | None, x: Tensor) -> Tensor:
    return rows if rows is not None else x.new_empty(0, dtype=torch.bool)


def walk_product(mat, x: Tensor, *, alpha: float, out: Tensor, work: Tensor | None = None,
                 x_rows: Tensor | None = None, out_rows: Tensor | None = None) -> Tensor:
    """The hop's first walk product, ``out = alpha * (mat @ x)``; returns ``out``.

    The CPU kernel (``kernels/k_hop_walk_cpu.cpp``) skips the rows of ``x`` that ``x_rows`` marks
    zero (exact: they add nothing to a sum) and writes into ``out_rows`` which rows of ``out`` may
    be nonzero. The twin (:func:`walk_product_torch`: ``SparseChain.addmm`` or :func:`csr_addmm`)
    reads every row and marks every row; a factored ``mat``, other devices and
    ``HPENGINE_KERNELS=off`` run it.

    Args:
        mat: CSR ``[m, n]`` or a :class:`~hpengine.sparse.SparseChain`. x: ``[n, w]``.
        out: contiguous ``[m, w]``, not ``x``. work: a factored chain's scratch.
        x_rows: optional bool ``[n]``, ``False`` where the row of ``x`` is zero. out_rows: optional
            bool ``[m]``, written.

    Shapes:
        ``[m, n], [n, w] -> [m, w]``.
    """
    csr = _one_csr(mat)
    if csr is not None and _walk_kernel_applies(csr, x, x, out, out):
        torch.ops.hpengine.walk_product_out(csr.crow_indices(), csr.col_indices(), csr.values(), x,
                                            _rows_arg(x_rows, x), float(alpha), out, _rows_arg(out_rows, x))
        return out
    return walk_product_torch(mat, x, alpha=alpha, out=out, work=work, out_rows=out_rows)


def walk_product_torch(mat, x: Tensor, *, alpha: float, out: Tensor, work: Tensor | None = None,
                       out_rows: Tensor | None = None) -> Tensor:
    """The PyTorch path of :func:`walk_product` (the kernel's twin); every row of ``out`` is marked."""
    if isinstance(mat, Tensor):
        csr_addmm(out, mat, x, beta=0.0, alpha=alpha, out=out)
    else:
        mat.addmm(out, x, beta=0.0, alpha=alpha, out=out, work=work)
    if out_rows is not None:
        out_rows.fill_(True)
    return out


def walk_step(mat, y: Tensor, x: Tensor, scale: Tensor, flat: Tensor, values: Tensor, *, out: Tensor,
              visits: Tensor, work: Tensor | None = None, y_rows: Tensor | None = None,
              out_rows: Tensor | None = None) -> Tensor:
    """The hop's walk step after its first product: ``out = x * scale``, then ``values`` added at the
    flat positions ``flat`` of ``out`` (``index_add_``), then ``out += mat @ y``, then
    ``visits += out``; returns ``out``.

    The CPU kernel (``kernels/k_hop_walk_cpu.cpp``) does it in one pass over the rows, in the twin's
    order (:func:`walk_step_torch`, the same bits, tests/kernels/test_hop_kernels.py), skipping the
    rows of ``y`` that ``y_rows`` marks zero and writing into ``out_rows`` which rows of ``out`` are
    nonzero; a factored ``mat``, other devices and ``HPENGINE_KERNELS=off`` run the twin, which
    marks every row.

    Args:
        mat: CSR ``[m, n]`` (or a :class:`~hpengine.sparse.SparseChain`, which takes the twin unless
            it is one CSR matrix). y: ``[n, w]``. x: ``[m, w]``. scale: ``[m, 1]``.
        flat: int64 ``[r]`` positions in ``out.view(-1)``; values: ``[r]``.
        out, visits: contiguous ``[m, w]``, distinct from ``x`` and ``y``.
        work: the scratch a factored chain's product takes (:meth:`SparseChain.addmm`).
        y_rows: optional bool ``[n]``, ``False`` where the row of ``y`` is zero. out_rows: optional
            bool ``[m]``, written.

    Shapes:
        ``[m, n], [n, w], [m, w], [m, 1], [r], [r] -> [m, w]``.
    """
    csr = _one_csr(mat)
    if csr is not None and _walk_kernel_applies(csr, y, x, out, visits):
        num_rows, width = x.shape
        row = torch.div(flat, width, rounding_mode="floor")
        row, order = torch.sort(row, stable=True)  # each element's terms in index_add_'s order
        rptr = torch.zeros(num_rows + 1, dtype=torch.int64, device=x.device)
        rptr[1:] = torch.bincount(row, minlength=num_rows).cumsum(0)
        torch.ops.hpengine.walk_step_out(csr.crow_indices(), csr.col_indices(), csr.values(), y.contiguous(), x,
                                         scale.reshape(-1).contiguous(), rptr, flat.index_select(0, order) % width,
                                         values.index_select(0, order).contiguous(), _rows_arg(y_rows, x), out,
                                         visits, _rows_arg(out_rows, x))
        return out
    return walk_step_torch(mat, y, x, scale, flat, values, out=out, visits=visits, work=work, out_rows=out_rows)


def _walk_kernel_applies(csr: Tensor, y: Tensor, x: Tensor, out: Tensor, visits: Tensor) -> bool:
    dtype = x.dtype
    if dtype not in (torch.float32, torch.float64) or any(t.dtype != dtype for t in (csr, y, out, visits)):
        return False
    if not (x.is_contiguous() and out.is_contiguous() and visits.is_contiguous()):
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in (csr, y, x, out, visits)):
        return False
    return use_cpu_kernel(x.device)


def walk_step_torch(mat, y: Tensor, x: Tensor, scale: Tensor, flat: Tensor, values: Tensor, *, out: Tensor,
                    visits: Tensor, work: Tensor | None = None, out_rows: Tensor | None = None) -> Tensor:
    """The PyTorch path of :func:`walk_step` (the kernel's twin); every row of ``out`` is marked."""
    torch.mul(x, scale, out=out)
    out.view(-1).index_add_(0, flat, values)
    if isinstance(mat, Tensor):
        csr_addmm(out, mat, y, out=out)
    else:  # a SparseChain (factored or not): its own products
        mat.addmm(out, y, out=out, work=work)
    visits.add_(out)
    if out_rows is not None:
        out_rows.fill_(True)
    return out


def csr_addmm_torch(input: Tensor, mat: Tensor, x: Tensor, *, beta: float = 1.0, alpha: float = 1.0,
                    out: Tensor | None = None) -> Tensor:
    """The PyTorch path of :func:`csr_addmm` (the kernel's twin)."""
    if out is None:
        return torch.addmm(input, mat, x, beta=beta, alpha=alpha)
    if out is input and beta == 1.0:  # accumulate in place (no copy of input)
        return out.addmm_(mat, x, alpha=alpha)
    return torch.addmm(input, mat, x, beta=beta, alpha=alpha, out=out)


__all__ = ["CPU_EXTENSION", "CPU_SOURCE", "CPU_SOURCES", "ENV", "MODES", "TRITON_BLOCKS_SOURCE", "TRITON_SOURCE",
           "build_cpu_kernels", "cpu_kernels", "csr_addmm", "csr_addmm_torch", "expand_frontier", "expand_frontier_torch", "kernel_mode", "kernel_sources",
           "load_triton_kernels", "local_bfs", "local_blocks_into", "triton_blocks_kernel", "triton_kernels",
           "use_blocks_kernel", "use_cpu_kernel", "use_join_kernel", "use_triton_blocks_kernel", "use_triton_kernel",
           "walk_product", "walk_product_torch", "walk_step", "walk_step_torch"]
