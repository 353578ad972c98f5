"""CSR x dense product for hpengine's sparse chains on CUDA (Triton, compiled on first use).

    out = beta * input + alpha * (A @ x)        A: CSR [m, n], x: dense [n, w], input/out: [m, w]

Equivalent PyTorch (the twin it is tested against, hpengine.sparse._dispatch.csr_addmm_torch)::

    torch.addmm(input, A, x, beta=beta, alpha=alpha, out=out)

It is the CUDA twin of kernels/k_csr_addmm_cpu.cpp: the product of PPR's iteration and of the hop's
walk. One program computes one output row's block of ``BLOCK_W`` columns; it walks the row's
nonzeros in CSR order and reads each gathered row of ``x`` once (a contiguous, masked load).

Accumulation order, as the CPU kernel's: per output element the products ``a_ik * x_kj`` are summed
in CSR order from 0, in the tensor's dtype, without fused multiply-add (``enable_fp_fusion=False``:
by default Triton lets ptxas contract ``a * b + c`` to an FMA), then ``acc * alpha + beta * input``
(input not read when ``beta == 0``, as in torch.addmm). That is the order of torch.addmm on the
CPU, so the product has the CPU's bits; torch.addmm on CUDA (cuSPARSE) sums in an order of its own,
which is why hpengine/sparse/_dispatch.py runs this kernel only when asked (``HPENGINE_KERNELS=on``).

Indices: int32 or int64 ``crow``/``col`` as the CSR stores them; offsets are computed in int64.
``out`` may be ``input`` (each element's input is read before its output is written), never ``x``.

This file needs triton; hpengine/sparse/_dispatch.py imports it (by path: ``kernels/`` is not a
Python package) only when a product asks for it. Under ``TRITON_INTERPRET=1`` (set before this file
is imported) the same kernel runs on CPU tensors in Triton's interpreter, which is how
tests/kernels/test_csr_addmm_triton.py tests it without a GPU (where triton is installed).
"""
import torch
import triton
import triton.language as tl

#: widest block of output columns one program computes (a chunk of questions is usually wider on CUDA)
MAX_BLOCK_W = 128
#: compiler options of every launch: no FMA contraction (the CPU's rounding: a rounded product, then a
#: rounded sum), which tests/kernels/test_csr_addmm_triton.py checks in the generated PTX
COMPILE_OPTIONS = {"enable_fp_fusion": False}


@triton.jit
def _csr_addmm_kernel(
    crow_ptr,  # [m + 1] int32 or int64
    col_ptr,  # [nnz] crow's dtype
    val_ptr,  # [nnz] float32 or float64
    x_ptr,  # [n, w] val's dtype, contiguous
    input_ptr,  # [m, w] val's dtype, contiguous; read only when USE_INPUT
    out_ptr,  # [m, w] val's dtype, contiguous; may be input_ptr
    w,  # int: columns of x, input and out
    beta: tl.float64,  # cast to the tensors' dtype here, as the CPU kernel casts it
    alpha: tl.float64,
    USE_INPUT: tl.constexpr,  # beta != 0
    BLOCK_W: tl.constexpr,  # output columns per program, a power of 2
):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    mask = cols < w
    lo = tl.load(crow_ptr + row).to(tl.int64)
    hi = tl.load(crow_ptr + row + 1).to(tl.int64)
    # tl.full, a builtin (tl.zeros is a jit function, which breaks the interpreter where triton was imported first)
    acc = tl.full([BLOCK_W], 0, out_ptr.dtype.element_ty)
    for k in range(lo, hi):  # one nonzero at a time: the sum's order is CSR order
        j = tl.load(col_ptr + k).to(tl.int64)
        a = tl.load(val_ptr + k)
        acc = acc + a * tl.load(x_ptr + j * w + cols, mask=mask, other=0.0)
    result = acc * tl.full([], alpha, acc.dtype)
    offsets = row.to(tl.int64) * w + cols
    if USE_INPUT:
        result = result + tl.full([], beta, acc.dtype) * tl.load(input_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, result, mask=mask)


def _check(crow, col, val, x, input, out) -> None:
    """Validate before launch: a bad pointer is a crash on the device, not an error."""
    if crow.dtype not in (torch.int32, torch.int64) or col.dtype != crow.dtype:
        raise TypeError(f"crow and col must both be int32 or int64 (got {crow.dtype}, {col.dtype})")
    if val.dtype not in (torch.float32, torch.float64) or {x.dtype, input.dtype, out.dtype} != {val.dtype}:
        raise TypeError(f"val, x, input and out must share float32 or float64 "
                        f"(got {val.dtype}, {x.dtype}, {input.dtype}, {out.dtype})")
    m, w = out.shape
    if crow.shape != (m + 1,) or col.ndim != 1 or val.shape != col.shape or x.ndim != 2 or x.shape[1] != w \
            or input.shape != out.shape:
        raise ValueError(f"expected crow [m + 1], col and val [nnz], x [n, w], input and out [m, w] "
                         f"(got {tuple(crow.shape)}, {tuple(col.shape)}, {tuple(val.shape)}, {tuple(x.shape)}, "
                         f"{tuple(input.shape)}, {tuple(out.shape)})")
    if not (x.is_contiguous() and input.is_contiguous() and out.is_contiguous()
            and crow.is_contiguous() and col.is_contiguous() and val.is_contiguous()):
        raise ValueError("crow, col, val, x, input and out must be contiguous (got a strided one)")
    devices = {t.device for t in (crow, col, val, x, input, out)}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device (got {sorted(map(str, devices))})")


def csr_addmm_out(crow: torch.Tensor, col: torch.Tensor, val: torch.Tensor, x: torch.Tensor, input: torch.Tensor,
                  beta: float, alpha: float, out: torch.Tensor) -> torch.Tensor:
    """``out = beta * input + alpha * (A @ x)`` for the CSR ``A = (crow, col, val)``, in place into
    ``out`` (which may be ``input``); the arguments of ``torch.ops.hpengine.csr_addmm_out``.

    Shapes:
        crow ``[m + 1]``, col and val ``[nnz]``, x ``[n, w]``, input and out ``[m, w]`` -> out.
    """
    _check(crow, col, val, x, input, out)
    m, w = out.shape
    if m == 0 or w == 0:
        return out
    block = min(max(triton.next_power_of_2(w), 16), MAX_BLOCK_W)
    grid = (m, triton.cdiv(w, block))
    _csr_addmm_kernel[grid](crow, col, val, x, input, out, w, float(beta), float(alpha),
                            USE_INPUT=beta != 0.0, BLOCK_W=block, num_warps=max(1, block // 64), **COMPILE_OPTIONS)
    return out
