"""Incidence construction and degrees (docs/methods/index.md#incidence-and-degrees)."""
from __future__ import annotations

import warnings

import torch
from torch import Tensor

from hpengine.sparse._sort import sort_keys, unique_keys

#: keys decoded at a time when a transpose's column ids are written (bounds an int64 temporary)
_DECODE_CHUNK = 1 << 24


def coalesce_pairs(index: Tensor, num_rows: int, num_cols: int) -> Tensor:
    """Sort ``(row, col)`` pairs row-major and drop duplicates.

    Args:
        index: int64 ``[2, n]`` pairs.
        num_rows: number of rows (used to form a single sort key).
        num_cols: number of columns.

    Returns:
        int64 ``[2, nnz]`` unique pairs, sorted by row then column.

    Shapes:
        index: ``[2, n]`` -> ``[2, nnz]`` with ``nnz <= n``.
    """
    if index.numel() == 0:
        return index.new_zeros((2, 0))
    key = unique_keys(index[0] * num_cols + index[1], inplace=True)
    return torch.stack([key // num_cols, key % num_cols])


def node_degree(index: Tensor, num_nodes: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Count how often each node appears in ``index`` (scatter-add).

    Args:
        index: int64 ``[n]`` node ids.
        num_nodes: number of nodes (explicit, never ``index.max()``).
        dtype: dtype of the result.

    Returns:
        ``[num_nodes]`` degrees.

    Example:
        >>> node_degree(torch.tensor([0, 2, 2]), 3)
        tensor([1., 0., 2.])
    """
    out = torch.zeros(num_nodes, dtype=dtype, device=index.device)
    return out.index_add_(0, index, torch.ones_like(index, dtype=dtype))


def inverse_or_zero(x: Tensor) -> Tensor:
    """``1 / x`` with infinities (from zeros) replaced by 0, so isolated nodes weigh 0, never NaN."""
    out = x.reciprocal()
    return out.masked_fill_(torch.isinf(out), 0.0)


def augmented_incidence(fact_entity: Tensor, fact_passage: Tensor, num_entities: int) -> Tensor:
    """Pairs of ``B = [B_he | B_hd]``: entity columns first, then passage columns offset by V.

    ``W_s = B_he D_e^-1 B_he^T + B_hd D_d^-1 B_hd^T = B D^-1 B^T`` with ``D = diag(d_e, d_d)``,
    so one incidence and one degree vector describe the whole structural operator.

    Args:
        fact_entity: int64 ``[2, nnz_e]`` coalesced (fact, entity) pairs.
        fact_passage: int64 ``[H]`` passage of each fact.
        num_entities: V.

    Returns:
        int64 ``[2, nnz_e + H]`` (fact, column) pairs, sorted by fact then column.

    Each fact's row is its entity pairs (in the given order) then its passage pair, so every pair's
    place is known without a sort: entity pair ``i`` of fact ``f`` goes to ``i + f`` (``f``
    passage pairs precede it) and fact ``f``'s passage pair to ``(entity pairs of facts <= f) + f``.
    Pairs not sorted by fact are first put in fact order (stable).
    """
    num_facts = fact_passage.numel()
    device = fact_passage.device
    nnz_e = int(fact_entity.shape[1])
    if nnz_e > 1 and not bool((fact_entity[0, 1:] >= fact_entity[0, :-1]).all()):
        fact_entity = fact_entity[:, torch.argsort(fact_entity[0], stable=True)]
    facts = torch.arange(num_facts, device=device)
    pairs = torch.empty((2, nnz_e + num_facts), dtype=torch.int64, device=device)
    place = torch.arange(nnz_e, device=device).add_(fact_entity[0])  # [nnz_e]
    pairs[:, place] = fact_entity
    del place
    place = torch.cumsum(torch.bincount(fact_entity[0], minlength=num_facts), 0).add_(facts)  # [H]
    pairs[0, place] = facts
    pairs[1, place] = fact_passage + num_entities
    return pairs


def csr_index_dtype(num_rows: int, num_cols: int, nnz: int) -> torch.dtype:
    """The index dtype of a CSR matrix of this size: int32 when every row pointer and column id
    fits (half the memory of int64, and MKL's sparse products run faster on it), else int64.

    Example:
        >>> csr_index_dtype(10, 10, 100), csr_index_dtype(10, 3_000_000_000, 100)
        (torch.int32, torch.int64)
    """
    return torch.int32 if max(num_rows, num_cols, nnz) < 2**31 - 1 else torch.int64


def csr_from_sorted_pairs(pairs: Tensor, num_rows: int, num_cols: int, values: Tensor,
                          index_dtype: torch.dtype | None = None) -> Tensor:
    """Build a ``torch.sparse_csr`` matrix from row-sorted pairs without a COO round trip.

    The matrix owns its index arrays (the column ids are a copy, never a view that would keep the
    whole ``[2, nnz]`` pair tensor alive).

    Args:
        pairs: int ``[2, nnz]`` (row, column) pairs sorted by row.
        num_rows, num_cols: the matrix shape.
        values: ``[nnz]`` entry values.
        index_dtype: dtype of ``crow_indices``/``col_indices`` (default: :func:`csr_index_dtype`).

    Shapes:
        pairs: ``[2, nnz]`` sorted by row; values: ``[nnz]`` -> ``[num_rows, num_cols]`` CSR.
    """
    nnz = int(pairs.shape[1])
    index_dtype = index_dtype or csr_index_dtype(num_rows, num_cols, nnz)
    counts = torch.bincount(pairs[0], minlength=num_rows)
    crow = torch.zeros(num_rows + 1, dtype=index_dtype, device=pairs.device)
    torch.cumsum(counts, 0, out=crow[1:])
    cols = torch.empty(nnz, dtype=index_dtype, device=pairs.device).copy_(pairs[1])
    return csr_with_values(crow, cols, values, (num_rows, num_cols))


def csr_with_values(crow: Tensor, cols: Tensor, values: Tensor, size: tuple[int, int]) -> Tensor:
    """A ``torch.sparse_csr`` matrix over existing index arrays (shared, not copied): matrices of
    one sparsity pattern with other values cost only their values.

    Shapes:
        crow ``[R + 1]``, cols ``[nnz]``, values ``[nnz]`` -> ``size`` CSR.
    """
    with warnings.catch_warnings():  # "CSR support is in beta": known, and we rely only on spmm
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, cols, values, size=size, check_invariants=False)


def csr_arrays(rows: Tensor, cols: Tensor, num_rows: int) -> tuple[Tensor, Tensor]:
    """CSR arrays of (row, col) pairs in any order: columns grouped by row, stable within a row.

    Args:
        rows, cols: int64 ``[nnz]``, ``0 <= rows < num_rows``.

    Returns:
        ``(crow [num_rows + 1], col [nnz])``, as :func:`gather_csr_rows` reads them.

    Example:
        >>> csr_arrays(torch.tensor([2, 0, 2]), torch.tensor([5, 6, 7]), 3)
        (tensor([0, 1, 1, 3]), tensor([6, 5, 7]))
    """
    counts = torch.bincount(rows, minlength=num_rows)
    crow = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    return crow, cols[torch.argsort(rows, stable=True)]


def gather_csr_rows(crow: Tensor, col: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """Entries of the CSR rows ``rows`` (``-1`` rows are empty), flattened.

    Args:
        crow: ``[R + 1]`` row pointers; col: ``[nnz]`` column ids (int32 or int64: read as they
            are, only what is gathered is converted).
        rows: int64 ``[n]`` row ids, ``-1`` for none.

    Returns:
        ``(position, column)``, int64: for every entry, the index into ``rows`` it came from and
        its column, in row order. The output size is data-dependent (one host sync to size it).

    Example:
        >>> gather_csr_rows(torch.tensor([0, 2, 3]), torch.tensor([5, 6, 7]), torch.tensor([1, -1, 0]))
        (tensor([0, 2, 2]), tensor([7, 5, 6]))
    """
    position, entry = csr_row_entries(crow, rows)
    return position, col.index_select(0, entry).long()


def csr_row_entries(crow: Tensor, rows: Tensor) -> tuple[Tensor, Tensor]:
    """Entries of the CSR rows ``rows`` (``-1`` rows are empty) as positions into ``col`` (and
    into any values array beside it): :func:`gather_csr_rows` for several arrays of one CSR.

    Shapes:
        crow ``[R + 1]``, rows int64 ``[n]`` -> ``(position, entry)``, int64 ``[nnz of rows]``:
        the index into ``rows`` of each entry and the entry's own index, in row order.

    Example:
        >>> csr_row_entries(torch.tensor([0, 2, 3]), torch.tensor([1, -1, 0]))
        (tensor([0, 2, 2]), tensor([2, 0, 1]))
    """
    safe = rows.clamp_min(0)
    start = crow.index_select(0, safe).long()
    count = torch.where(rows >= 0, crow.index_select(0, safe + 1).long() - start, 0)
    total = int(count.sum())
    position = torch.repeat_interleave(torch.arange(rows.numel(), device=rows.device), count, output_size=total)
    offset = torch.arange(total, device=rows.device) - (torch.cumsum(count, 0) - count).index_select(0, position)
    return position, start.index_select(0, position) + offset


def transpose_csr(pairs: Tensor, num_rows: int, num_cols: int, values: Tensor, *, values_equal: bool = False) -> Tensor:
    """``B^T [num_cols, num_rows]`` as CSR from the row-sorted unique pairs of ``B``.

    The sorted keys ``column * num_rows + row`` are ``B^T``'s pairs in row order, so the only
    ``[nnz]`` temporary is the int64 key buffer (decoded a chunk at a time into the index dtype).
    With ``values_equal`` (all of ``values`` equal, as ``B``'s ones) the keys are sorted as values
    and ``values`` is used as it is, shared with ``B``; otherwise they are sorted with their
    permutation, which ``values`` follows.

    Shapes:
        pairs ``[2, nnz]``, values ``[nnz]`` -> ``[num_cols, num_rows]`` CSR.
    """
    nnz = int(pairs.shape[1])
    index_dtype = csr_index_dtype(num_cols, num_rows, nnz)
    key = torch.mul(pairs[1], num_rows).add_(pairs[0])  # [nnz] (column, row) keys
    if values_equal:
        key = sort_keys(key, inplace=True)
    else:
        key, order = torch.sort(key)
        values = values.index_select(0, order)
        del order
    cols = torch.empty(nnz, dtype=index_dtype, device=pairs.device)
    for lo in range(0, nnz, _DECODE_CHUNK):
        cols[lo:lo + _DECODE_CHUNK] = key[lo:lo + _DECODE_CHUNK] % num_rows
    del key
    crow = torch.zeros(num_cols + 1, dtype=index_dtype, device=pairs.device)
    torch.cumsum(torch.bincount(pairs[1], minlength=num_cols), 0, out=crow[1:])
    return csr_with_values(crow, cols, values, (num_cols, num_rows))
