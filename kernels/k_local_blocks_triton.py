"""Local blocks of T_s and the BFS frontier step on them, for the hop on CUDA (Triton, compiled on first use).

    out[q] = T*(ids[q])        ids: [Q, M] fact ids (-1 padding), out: [Q, M, M]
    hit = frontier_hits_out(adjacency, reached, reverse, out)   [Q, M, M], [Q, M, B] bool -> [Q, M, B] bool

Equivalent PyTorch (the twin it is tested against, tests/kernels/test_local_blocks_triton.py)::

    out = TransitionOperator.local_blocks(ids)   # the sort-and-join, TransitionOperator._join_into

It is the CUDA twin of ``local_blocks_out`` in kernels/k_local_blocks_cpu.cpp, with the same
arguments. Slot ``i`` of question ``q`` holds fact ``ids[q, i]``; its incidence columns are
``col[crow[r] : crow[r + 1]]`` with ``r = rows[q, i]`` (``rows = ids`` for a plain ``B``, the expanded
rows of a factored one). For slots ``i != j`` with facts ``f_i != f_j``::

    T*[i, j] = sum over the columns c of slot i, ascending:  inv_degree[c] * inv_row[i]   (once per
               entry of c in slot j)
    inv_row[i] = 1 / sum over the columns c of slot i, ascending:  inv_degree[c] * (g_c - mult_i)

(``g_c``: entries of column ``c`` among the question's slots; ``mult_i``: slots holding ``f_i``;
``1 / 0`` gives 0), and 0 elsewhere (the diagonal, equal facts, padding).

Accumulation order, as the CPU kernel's and the PyTorch join's: each sum runs from 0 in ascending
column order, a rounded product then a rounded sum (``enable_fp_fusion=False``: by default Triton
lets ptxas contract ``a * b + c`` to an FMA), and the inverse is a correctly rounded division
(``div_rn``; Triton's float32 ``/`` may be an approximate one). So the blocks should have the CPU's
bits on the GPU too, which is why hpengine/sparse/_dispatch.py runs this kernel only when asked
(``HPENGINE_KERNELS=on``) until a GPU run confirms it.

How: the launcher lays each slot's columns out sorted in a ``[Q, E, M]`` block (``E``: most columns
of one slot; narrowed to int32 when the column count allows), then one program computes one block
row's tile of ``BLOCK_J`` entries: it counts ``mult_i`` and each ``g_c`` by comparing the column
with every slot's columns (the question's ``E x M`` block, no sort or hash per question), forms
``inv_row[i]``, and adds each column's term to the tile's partners, column after column. Its work is
``O(E_i * E * M)`` per row, where the PyTorch join's is the number of (slot, slot, column) pairs;
the speed against that join on a GPU is not measured yet.

``frontier_hits_out`` is one round of the level-synchronous BFS of ``batched_bfs``
(hpengine/retrieval/_bfs.py) on a thresholded block: slot ``i`` is hit when some edge
``adjacency[q, i, j] > 0`` ends in a reached ``j`` (``reverse``), or when some reached ``i`` has an
edge to it (forwards). Its twin is the batched product ``bmm(adjacency, reached) > 0``; with entries
``>= 0`` a sum is ``> 0`` exactly when one of its terms is, so the kernel tests the edges as booleans
and reads the block once per round without a product. One program computes a tile of ``BLOCK_O``
slots of one question and search, reading the block a ``[BLOCK_O, BLOCK_K]`` tile at a time.

This file needs triton; hpengine/sparse/_dispatch.py imports it (by path: ``kernels/`` is not a
Python package) only when a block asks for it. Under ``TRITON_INTERPRET=1`` (set before this file is
imported) the same kernel runs on CPU tensors in Triton's interpreter, which is how
tests/kernels/test_local_blocks_triton.py tests it without a GPU (where triton is installed).
"""
import os

import torch
import triton
import triton.language as tl

#: widest tile of one block row that one program computes (a row wider than this takes several)
MAX_BLOCK_J = 1024
#: most slot columns one program holds at once (BLOCK_E x BLOCK_J; a slot with many columns narrows the tile)
MAX_TILE = 8192
#: compiler options of every launch: no FMA contraction (the CPU's rounding), which
#: tests/kernels/test_local_blocks_triton.py checks in the generated PTX
COMPILE_OPTIONS = {"enable_fp_fusion": False}

__all__ = ["COMPILE_OPTIONS", "MAX_BLOCK_J", "MAX_TILE", "frontier_hits_out", "local_blocks_out", "slot_columns"]


# The kernel's reductions: tl.reduce with these, not tl.sum / tl.max, which are jit functions of
# triton.language decorated once when triton is imported, so a process that imported triton under
# the interpreter (the tests) could not compile them later. Interpreted (TRITON_INTERPRET=1 when this
# file is imported, as triton decides then too), the combine functions are triton's own, which the
# interpreter recognises and runs as one NumPy reduction instead of element by element.
@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b)


_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
_SUM = tl.standard._sum_combine if _INTERPRETED else _add
_MAX = tl.standard._elementwise_max if _INTERPRETED else _maximum


@triton.jit
def _local_blocks_kernel(
    ids_ptr,  # [Q, M] int64 fact ids, -1 padding, contiguous
    cols_ptr,  # [Q, E, M] int32 or int64: slot j's e-th column (ascending in e) at [q, e, j]; -1 past its count
    count_ptr,  # [Q * M] int32: columns of each slot (0 for padding)
    inv_degree_ptr,  # [C] float32 or float64: 1 / d_c
    out_ptr,  # [Q, M, M] inv_degree's dtype, contiguous; every entry written
    m,  # int: M, slots per question
    e_max,  # int: E, most columns of one slot
    BLOCK_E: tl.constexpr,  # a power of 2 >= E
    BLOCK_J: tl.constexpr,  # block entries per program, a power of 2
    IS_FP32: tl.constexpr,  # out's dtype is float32 (div_rn), else float64 (its division is correctly rounded)
):
    slot = tl.program_id(0).to(tl.int64)  # q * M + i
    q = slot // m
    i = slot - q * m
    first = q * m  # the question's first slot
    cols_q = q * e_max * m  # the question's [E, M] columns
    ee = tl.arange(0, BLOCK_E)[:, None]
    jj = tl.program_id(1) * BLOCK_J + tl.arange(0, BLOCK_J)
    in_tile = jj < m
    fact_i = tl.load(ids_ptr + slot)
    n_i = tl.load(count_ptr + slot)  # 0 for padding: its row stays zero
    # tl.full, a builtin (tl.zeros is a jit function, which breaks the interpreter where triton was imported first)
    acc = tl.full([BLOCK_J], 0, out_ptr.dtype.element_ty)
    if n_i > 0:
        # mult_i: the slots holding fact_i (their pairs with slot i are diagonal entries of T_s)
        mult = tl.full([], 0, tl.int32)
        for t in range(0, m, BLOCK_J):
            j = t + tl.arange(0, BLOCK_J)
            mult += tl.reduce((tl.load(ids_ptr + first + j, mask=j < m, other=-1) == fact_i).to(tl.int32), 0, _SUM)
        # the row sum, in ascending column order from 0: inv_degree[c] * (g_c - mult_i)
        total = tl.full([], 0, out_ptr.dtype.element_ty)
        for p in range(0, n_i):
            c = tl.load(cols_ptr + cols_q + p * m + i)
            g = tl.full([], 0, tl.int32)
            for t in range(0, m, BLOCK_J):  # the question's [E, M] columns, a tile of slots at a time
                j = t + tl.arange(0, BLOCK_J)[None, :]
                tile = tl.load(cols_ptr + cols_q + ee * m + j, mask=(ee < e_max) & (j < m), other=-1)
                g += tl.reduce(tl.reduce((tile == c).to(tl.int32), 1, _SUM), 0, _SUM)
            total = total + tl.load(inv_degree_ptr + c) * (g - mult).to(total.dtype)
        # inverse_or_zero: 1 / 0 (or a denormal) gives 0 (a zero sum is not divided at all)
        divisor = tl.where(total == 0, tl.full([], 1, total.dtype), total)
        if IS_FP32:
            inv = tl.math.div_rn(tl.full([], 1, total.dtype), divisor)
        else:
            inv = tl.full([], 1, total.dtype) / divisor
        inv = tl.where((total == 0) | (inv == float("inf")), tl.full([], 0, total.dtype), inv)
        partner = tl.load(ids_ptr + first + jj, mask=in_tile, other=-1) != fact_i  # not i, no equal fact
        mine = tl.load(cols_ptr + cols_q + ee * m + jj[None, :], mask=(ee < e_max) & in_tile[None, :], other=-1)
        for p in range(0, n_i):  # the row's terms, column after column: the sum's order
            c = tl.load(cols_ptr + cols_q + p * m + i)
            w = tl.load(inv_degree_ptr + c) * inv
            hits = tl.reduce((mine == c).to(tl.int32), 0, _SUM)  # [BLOCK_J] entries of column c in each slot
            hits = tl.where(partner, hits, 0)
            for r in range(0, tl.reduce(hits, 0, _MAX)):  # a column repeated in slot j adds its term again
                acc = tl.where(hits > r, acc + w, acc)
    tl.store(out_ptr + slot * m + jj, acc, mask=in_tile)


def _check(ids, rows, crow, col, inv_degree, out) -> None:
    """Validate before launch: a bad pointer is a crash on the device, not an error."""
    if ids.dtype != torch.int64 or rows.dtype != torch.int64:
        raise TypeError(f"ids and rows must be int64 (got {ids.dtype}, {rows.dtype})")
    if crow.dtype not in (torch.int32, torch.int64) or col.dtype != crow.dtype:
        raise TypeError(f"crow and col must both be int32 or int64 (got {crow.dtype}, {col.dtype})")
    if inv_degree.dtype not in (torch.float32, torch.float64) or out.dtype != inv_degree.dtype:
        raise TypeError(f"inv_degree and out must share float32 or float64 (got {inv_degree.dtype}, {out.dtype})")
    if ids.ndim != 2 or rows.shape != ids.shape or crow.ndim != 1 or col.ndim != 1 or inv_degree.ndim != 1 \
            or out.shape != (*ids.shape, ids.shape[1]):
        raise ValueError(f"expected ids and rows [Q, M], crow [R + 1], col [nnz], inv_degree [C], out [Q, M, M] "
                         f"(got {tuple(ids.shape)}, {tuple(rows.shape)}, {tuple(crow.shape)}, {tuple(col.shape)}, "
                         f"{tuple(inv_degree.shape)}, {tuple(out.shape)})")
    if not (out.is_contiguous() and inv_degree.is_contiguous()):
        raise ValueError("out and inv_degree must be contiguous (got a strided one)")
    devices = {t.device for t in (ids, rows, crow, col, inv_degree, out)}
    if len(devices) != 1:
        raise ValueError(f"all tensors must be on one device (got {sorted(map(str, devices))})")


def slot_columns(ids: torch.Tensor, rows: torch.Tensor, crow: torch.Tensor, col: torch.Tensor,
                 num_columns: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each slot's incidence columns, ascending, as the kernel reads them: ``([Q, E, M] columns, -1
    past a slot's count; [Q * M] int32 counts)``, ``E`` the most columns of one slot (0 when no slot
    has any). Columns are narrowed to int32 when ``num_columns`` allows (they index ``inv_degree``).

    Shapes:
        ids, rows ``[Q, M]``, crow ``[R + 1]``, col ``[nnz]`` -> ``[Q, E, M]``, ``[Q * M]``.
    """
    num_q, m = ids.shape
    valid = ids.reshape(-1) >= 0
    row = torch.where(valid, rows.reshape(-1), 0)
    start = crow.index_select(0, row).long()
    count = torch.where(valid, crow.index_select(0, row + 1).long() - start, 0)  # [Q * M]
    # Host sync: E sizes the layout (the PyTorch join syncs for its sizes too)
    e_max = int(count.max()) if count.numel() else 0
    index_dtype = torch.int32 if num_columns < 2**31 - 1 else torch.int64
    if e_max == 0:
        return torch.full((num_q, 0, m), -1, dtype=index_dtype, device=ids.device), count.int()
    ar = torch.arange(e_max, device=ids.device)
    present = ar < count.unsqueeze(1)  # [Q * M, E]
    at = torch.where(present, start.unsqueeze(1) + ar, 0)
    cols = torch.where(present, col.index_select(0, at.reshape(-1)).view_as(at).long(), num_columns)
    cols = torch.sort(cols, dim=1).values  # ascending per slot; the sentinel C sorts last
    cols = torch.where(present, cols, -1).to(index_dtype)
    return cols.view(num_q, m, e_max).transpose(1, 2).contiguous(), count.int()


def local_blocks_out(ids: torch.Tensor, rows: torch.Tensor, crow: torch.Tensor, col: torch.Tensor,
                     inv_degree: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Fill ``out`` with the row-normalised local blocks of ``T_s`` on each question's slots; the
    arguments of ``torch.ops.hpengine.local_blocks_out`` (kernels/k_local_blocks_cpu.cpp).

    Shapes:
        ids, rows ``[Q, M]``, crow ``[R + 1]``, col ``[nnz]``, inv_degree ``[C]``, out ``[Q, M, M]`` -> out.
    """
    _check(ids, rows, crow, col, inv_degree, out)
    num_q, m = ids.shape
    if num_q * m == 0:
        return out
    ids = ids.contiguous()
    cols, count = slot_columns(ids, rows, crow, col, inv_degree.numel())
    if cols.shape[1] == 0:  # no slot has a column: every entry is 0
        return out.zero_()
    e_max = cols.shape[1]
    block_e = triton.next_power_of_2(e_max)
    # a program holds its tile's [BLOCK_E, BLOCK_J] columns: at most MAX_TILE of them
    block = max(min(triton.next_power_of_2(m), MAX_BLOCK_J, MAX_TILE // block_e), 16)
    grid = (num_q * m, triton.cdiv(m, block))
    _local_blocks_kernel[grid](ids, cols, count, inv_degree, out, m, e_max, BLOCK_E=block_e, BLOCK_J=block,
                               IS_FP32=out.dtype == torch.float32, num_warps=max(1, min(8, block * block_e // 1024)),
                               **COMPILE_OPTIONS)
    return out


@triton.jit
def _frontier_hits_kernel(
    adj_ptr,  # [Q, M, M] float32 or float64, any strides; an edge is an entry > 0
    reached_ptr,  # [Q, M, B] uint8 (a bool tensor's bytes), contiguous
    hit_ptr,  # [Q, M, B] uint8, contiguous; every entry written
    m,  # int: M
    num_b,  # int: B, searches
    stride_q, stride_i, stride_j,  # adjacency's strides (elements)
    REVERSE: tl.constexpr,  # hit i when an edge i -> j ends in a reached j; else j when a reached i has i -> j
    BLOCK_O: tl.constexpr,  # output slots per program, a power of 2
    BLOCK_K: tl.constexpr,  # slots read per step of the loop, a power of 2
):
    q = tl.program_id(0).to(tl.int64)
    b = tl.program_id(2)
    oo = tl.program_id(1) * BLOCK_O + tl.arange(0, BLOCK_O)
    in_tile = oo < m
    adj_q = adj_ptr + q * stride_q
    state_q = q * m * num_b + b
    hit = tl.full([BLOCK_O], 0, tl.int32)
    for t in range(0, m, BLOCK_K):
        kk = t + tl.arange(0, BLOCK_K)
        reached = tl.load(reached_ptr + state_q + kk * num_b, mask=kk < m, other=0).to(tl.int32)  # [BLOCK_K]
        mask = in_tile[:, None] & (kk < m)[None, :]
        if REVERSE:  # rows oo of the block, columns kk
            edge = tl.load(adj_q + oo[:, None] * stride_i + kk[None, :] * stride_j, mask=mask, other=0.0) > 0
        else:  # columns oo of the block, rows kk
            edge = tl.load(adj_q + kk[None, :] * stride_i + oo[:, None] * stride_j, mask=mask, other=0.0) > 0
        hit = tl.maximum(hit, tl.reduce(edge.to(tl.int32) * reached[None, :], 1, _MAX))
    tl.store(hit_ptr + state_q + oo * num_b, hit.to(tl.uint8), mask=in_tile)


def frontier_hits_out(adjacency: torch.Tensor, reached: torch.Tensor, reverse: bool, out: torch.Tensor) -> torch.Tensor:
    """One BFS round's hits into ``out``: ``out[q, i, b]`` is whether slot ``i`` is one edge
    (``adjacency > 0``) from a reached slot of search ``b`` (``reverse``: an edge ``i -> j`` to a reached
    ``j``; forwards: an edge ``j -> i`` from a reached ``j``). Equivalent PyTorch (``batched_bfs``'s
    round): ``bmm(adjacency, reached.to(adjacency.dtype)) > 0`` (``reverse``), else
    ``bmm(reached.transpose(1, 2).to(adjacency.dtype), adjacency).transpose(1, 2) > 0``.

    Shapes:
        adjacency ``[Q, M, M]`` float32/float64, reached and out bool ``[Q, M, B]`` -> out.
    """
    if adjacency.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"adjacency must be float32 or float64 (got {adjacency.dtype})")
    if reached.dtype != torch.bool or out.dtype != torch.bool:
        raise TypeError(f"reached and out must be bool (got {reached.dtype}, {out.dtype})")
    num_q, m = adjacency.shape[:2]
    if adjacency.shape != (num_q, m, m) or reached.ndim != 3 or reached.shape[:2] != (num_q, m) \
            or out.shape != reached.shape:
        raise ValueError(f"expected adjacency [Q, M, M], reached and out [Q, M, B] "
                         f"(got {tuple(adjacency.shape)}, {tuple(reached.shape)}, {tuple(out.shape)})")
    if not (reached.is_contiguous() and out.is_contiguous()):
        raise ValueError("reached and out must be contiguous (got a strided one)")
    if len({adjacency.device, reached.device, out.device}) != 1:
        raise ValueError(f"all tensors must be on one device (got {adjacency.device}, {reached.device}, {out.device})")
    num_b = reached.shape[2]
    if num_q * m * num_b == 0:
        return out
    block_o = min(max(triton.next_power_of_2(m), 16), 64)
    block_k = min(max(triton.next_power_of_2(m), 16), 128)
    grid = (num_q, triton.cdiv(m, block_o), num_b)
    _frontier_hits_kernel[grid](adjacency, reached.view(torch.uint8), out.view(torch.uint8), m, num_b,
                                *adjacency.stride(), REVERSE=bool(reverse), BLOCK_O=block_o, BLOCK_K=block_k,
                                num_warps=4)
    return out
