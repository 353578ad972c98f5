"""An expanded incidence kept as factors: ``B = bin(R (I + N)) = R (I + N) - K``
(docs/methods/index.md#the-expanded-incidence-as-factors).

``R [H, C]`` is a binary incidence (the extracted (fact, entity) pairs and each fact's passage
column) and ``N [C, C]`` a binary relation on its columns (the synonym pairs). Row ``f`` of ``B``
holds every column of ``R``'s row ``f`` and every column related to one of them. ``R (I + N)``
counts each such column once per column of row ``f`` that reaches it; ``K`` holds the excess
(count - 1 where the count is at least 2), so ``B = R (I + N) - K`` exactly, and products with
``B`` and ``B^T`` are products with the three factors: ``O(nnz(R) + nnz(I + N) + nnz(K))`` per
column instead of ``O(nnz(B))``. Materialising ``B`` adds ``deg(e) * |N(e)|`` incidences per
column ``e``, which grows faster than the corpus where frequent names also gain related names.

``K`` is found from pairs of columns that share a row of ``R``: a column reached twice from row
``f`` is reached from two distinct columns of that row, so it lies in the intersection of their
rows of ``I + N``. Pairs that cannot share a column (a column outside the relation, or rows with
no common signature bit) are dropped; for the others the shorter row is probed in the longer one.
"""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.sparse._dispatch import csr_addmm
from hpengine.sparse._incidence import csr_from_sorted_pairs, csr_with_values, gather_csr_rows, transpose_csr
from hpengine.sparse._sort import sort_keys, sorted_contains, unique_keys


def closed_relation_pairs(relation: Tensor, num_columns: int) -> Tensor:
    """The pairs of ``I + N``: the relation's pairs and every ``(c, c)``, unique, sorted by row then
    column.

    Shapes:
        relation int64 ``[2, n]`` -> int64 ``[2, n' + C]``.
    """
    diag = torch.arange(num_columns, device=relation.device)
    keys = torch.cat([relation[0] * num_columns + relation[1], diag * num_columns + diag])
    keys = unique_keys(keys, inplace=True)
    return torch.stack([keys // num_columns, keys % num_columns])


def row_pair_positions(rows: Tensor, num_rows: int) -> tuple[Tensor, Tensor]:
    """Every pair of entries that share a row, as positions ``(i, j)``, ``i < j``, int64 ``[m]``
    each, ``m = sum_rows n_row (n_row - 1) / 2``.

    Args:
        rows: int64 ``[nnz]`` row of each entry, sorted.
    """
    dev = rows.device
    counts = torch.bincount(rows, minlength=num_rows)
    start = torch.cumsum(counts, 0).sub_(counts)  # [num_rows]
    position = torch.arange(rows.numel(), device=dev)
    after = (start + counts).index_select(0, rows).sub_(position).sub_(1)  # entries after each one in its row
    total = int(after.sum())
    left = torch.repeat_interleave(position, after, output_size=total)
    first = torch.cumsum(after, 0).sub_(after)
    right = torch.arange(total, device=dev).sub_(torch.repeat_interleave(first, after, output_size=total))
    return left, right.add_(left).add_(1)


def row_pairs(pairs: Tensor, num_rows: int) -> Tensor:
    """Every pair of entries that share a row: ``(row, col_i, col_j)`` for ``i < j`` in the row's
    order, int64 ``[3, m]`` with ``m = sum_rows n_row (n_row - 1) / 2``.

    Args:
        pairs: int64 ``[2, nnz]`` (row, column) pairs sorted by row then column, unique.
    """
    left, right = row_pair_positions(pairs[0], num_rows)
    return torch.stack([pairs[0].index_select(0, left), pairs[1].index_select(0, left), pairs[1].index_select(0, right)])


#: 63-bit words per neighbourhood signature (63 W bits: fewer pairs pass by chance when rows are long)
SIGNATURE_WORDS = 4


def signature_bit(cols: Tensor, width: int) -> Tensor:
    """The signature bit of each column, int64 in ``[0, width)`` (a multiplicative hash)."""
    return torch.remainder(cols * 2654435761, width)


def neighbour_signatures(closed: Tensor, num_columns: int, words: int = SIGNATURE_WORDS,
                         rows: Tensor | None = None) -> Tensor:
    """int64 ``[C, words]``: for each row of ``I + N``, the OR of one bit (of ``63 * words``,
    :func:`signature_bit`) per column in it. Two rows that share a column have a common bit, so an
    all-zero AND rules a pair out without reading either row.

    Args:
        rows: optional bool ``[C]``: only those rows, in order (``[rows.sum(), words]``; row ``i``
            is the ``i``-th selected one).

    Shapes:
        closed int64 ``[2, n]`` -> ``[C, words]``.
    """
    width = 63 * words  # the sign bit of each word stays clear
    row, col = closed[0], closed[1]
    count = num_columns
    if rows is not None:
        keep = rows.index_select(0, row).nonzero().squeeze(1)
        compact = torch.cumsum(rows, 0).sub_(1)
        row, col = compact.index_select(0, row.index_select(0, keep)), col.index_select(0, keep)
        count = int(rows.sum())
    keys = unique_keys(row * width + signature_bit(col, width), inplace=True)  # each (row, bit) once: a sum is an OR
    bit = keys % width
    flat = torch.zeros(count * words, dtype=torch.int64, device=closed.device)
    slot = keys.div_(width, rounding_mode="floor").mul_(words).add_(bit // 63)
    flat.index_add_(0, slot, torch.bitwise_left_shift(torch.ones_like(bit), bit.remainder_(63)))
    return flat.view(count, words)


def excess_pairs(pairs: Tensor, closed: Tensor, num_rows: int, num_columns: int) -> tuple[Tensor, Tensor]:
    """``K = R (I + N) - bin(R (I + N))``: the (row, column) entries reached more than once, and by
    how much.

    Only entries whose column takes part in the relation (has a related column, or is one) can
    share a reached column with another entry of their row, and only pairs whose rows of ``I + N``
    share a signature bit (:func:`neighbour_signatures`) can share a column, so only those pairs
    are probed; of the shorter row's columns, only those whose bit is in the longer row's
    signature are looked up in it.

    Args:
        pairs: int64 ``[2, nnz]`` pairs of ``R``, sorted by row then column, unique.
        closed: int64 ``[2, n]`` pairs of ``I + N`` (:func:`closed_relation_pairs`), sorted.
        num_rows, num_columns: ``R``'s shape.

    Returns:
        ``(pairs [2, k] sorted by row then column, excess [k] int64 >= 1)``.

    Shapes:
        ``[2, nnz], [2, n] -> [2, k], [k]``.
    """
    dev = pairs.device
    empty = (torch.zeros(2, 0, dtype=torch.int64, device=dev), torch.zeros(0, dtype=torch.int64, device=dev))
    crow = torch.zeros(num_columns + 1, dtype=torch.int64, device=dev)
    torch.cumsum(torch.bincount(closed[0], minlength=num_columns), 0, out=crow[1:])
    length = crow[1:] - crow[:-1]  # [C] >= 1 (the diagonal)
    involved = (length > 1) | (torch.bincount(closed[1], minlength=num_columns) > 1)
    keep = involved.index_select(0, pairs[1]).nonzero().squeeze(1)
    row, col = pairs[0].index_select(0, keep), pairs[1].index_select(0, keep)  # entries of involved columns
    left, right = row_pair_positions(row, num_rows)  # two involved columns of one row
    if not left.numel():
        return empty
    words = SIGNATURE_WORDS
    sig = neighbour_signatures(closed, num_columns, words, rows=involved)  # [n_involved, words]
    compact = torch.cumsum(involved, 0).sub_(1)  # [C] row of each involved column in sig
    a, b = col.index_select(0, left), col.index_select(0, right)
    shared = sig.index_select(0, compact.index_select(0, a)) & sig.index_select(0, compact.index_select(0, b))
    ok = shared.ne(0).any(1).nonzero().squeeze(1)  # a pair whose rows share a column shares its bit
    del shared
    left, a, b = left.index_select(0, ok), a.index_select(0, ok), b.index_select(0, ok)
    swap = length.index_select(0, a) > length.index_select(0, b)  # probe the shorter row in the longer one
    short, long = torch.where(swap, b, a), torch.where(swap, a, b)
    which, common = gather_csr_rows(crow, closed[1], short)  # candidates: the short row's columns
    bit = signature_bit(common, 63 * words)  # a candidate in the long row has its bit in the long row's signature
    slot = compact.index_select(0, long.index_select(0, which)).mul_(words).add_(bit // 63)
    maybe = sig.view(-1).index_select(0, slot).bitwise_right_shift_(bit.remainder_(63)).bitwise_and_(1)
    maybe = maybe.nonzero().squeeze(1)
    which, common = which.index_select(0, maybe), common.index_select(0, maybe)
    closed_keys = closed[0] * num_columns + closed[1]  # sorted (closed is row-major, unique)
    probe = long.index_select(0, which).mul_(num_columns).add_(common)
    hit = sorted_contains(closed_keys, probe).nonzero().squeeze(1)
    if not hit.numel():
        return empty
    reached = row.index_select(0, left.index_select(0, which.index_select(0, hit)))
    keys = sort_keys(reached.mul_(num_columns).add_(common.index_select(0, hit)), inplace=True)
    keys, pair_count = torch.unique_consecutive(keys, return_counts=True)
    # a column reached from c columns of the row is hit by c (c - 1) / 2 of its pairs: excess c - 1
    excess = ((torch.sqrt(8.0 * pair_count.double() + 1.0) - 1.0) / 2.0).round().long()
    return torch.stack([keys // num_columns, keys % num_columns]), excess


def scaled_csr(m: Tensor, row: Tensor | None = None, col: Tensor | None = None) -> Tensor:
    """``diag(row) @ m @ diag(col)`` for a CSR ``m``, sharing its index arrays (only values are new)."""
    crow, cols, values = m.crow_indices(), m.col_indices(), m.values()
    if row is not None:
        values = values * row.repeat_interleave((crow[1:] - crow[:-1]).long())
    if col is not None:
        values = values * col.index_select(0, cols)
    return csr_with_values(crow, cols, values, tuple(m.shape))


class SparseChain:
    """The sparse map ``x -> outer @ (inner @ x) - minus @ x`` (``inner``, ``minus`` optional: a
    plain CSR matrix is ``SparseChain(m)``), applied to dense ``[n, w]`` blocks.

    Shapes:
        ``[n, w] -> [m, w]``.
    """

    def __init__(self, outer: Tensor, inner: Tensor | None = None, minus: Tensor | None = None):
        self.outer, self.inner, self.minus = outer, inner, minus

    @property
    def shape(self) -> tuple[int, int]:
        cols = (self.inner if self.inner is not None else self.outer).shape[1]
        return (int(self.outer.shape[0]), int(cols))

    @property
    def factored(self) -> bool:
        return self.inner is not None or self.minus is not None

    def scaled(self, row: Tensor | None = None, col: Tensor | None = None) -> "SparseChain":
        """``diag(row) @ self @ diag(col)``, its factors sharing this chain's index arrays."""
        if self.inner is None:
            outer = scaled_csr(self.outer, row, col)
            inner = None
        else:
            outer, inner = scaled_csr(self.outer, row, None), scaled_csr(self.inner, None, col)
        minus = None if self.minus is None else scaled_csr(self.minus, row, col)
        return SparseChain(outer, inner, minus)

    def addmm(self, input: Tensor, x: Tensor, *, beta: float = 1.0, alpha: float = 1.0,
              out: Tensor | None = None, work: Tensor | None = None) -> Tensor:
        """``beta * input + alpha * (self @ x)``, written into ``out`` when given (which may be
        ``input``, never ``x``).

        ``work``: an optional flat buffer of at least ``inner.shape[0] * x.shape[1]`` elements
        for ``inner @ x`` (a hot loop passes one: a fresh ``[C, w]`` block per product costs
        its first touch, more than the product itself on large graphs)."""
        inner = x if self.inner is None else self._inner_times(x, work)
        # csr_addmm: the compiled CPU kernel or torch.addmm, chosen in hpengine.sparse._dispatch
        y = csr_addmm(input, self.outer, inner, beta=beta, alpha=alpha, out=out)
        if self.minus is not None:
            y = csr_addmm(y, self.minus, x, alpha=-alpha, out=y)
        return y

    def _inner_times(self, x: Tensor, work: Tensor | None) -> Tensor:
        rows = int(self.inner.shape[0])
        if work is None:
            return self.inner @ x
        t = work[: rows * x.shape[1]].view(rows, x.shape[1])
        return csr_addmm(t, self.inner, x, beta=0.0, out=t)

    def work_rows(self) -> int:
        """Rows of the ``work`` block :meth:`addmm` needs per column of ``x`` (0 for one matrix)."""
        return 0 if self.inner is None else int(self.inner.shape[0])

    def matmul(self, x: Tensor) -> Tensor:
        y = self.outer @ (x if self.inner is None else self.inner @ x)
        if self.minus is not None:
            y.addmm_(self.minus, x, alpha=-1.0)
        return y

    __matmul__ = matmul

    def to_dense(self) -> Tensor:
        """The ``[m, n]`` matrix (tests only)."""
        eye = torch.eye(self.shape[1], dtype=self.outer.dtype, device=self.outer.device)
        return self.matmul(eye)


def factored_incidence(pairs: Tensor, relation: Tensor, num_rows: int, num_columns: int, dtype: torch.dtype):
    """The factors of ``B = bin(R (I + N))`` as CSR matrices and ``B``'s exact integer row and
    column counts.

    Args:
        pairs: int64 ``[2, nnz]`` pairs of ``R`` sorted by row then column, unique.
        relation: int64 ``[2, n]`` pairs of ``N`` (any order, repeats allowed).
        num_rows, num_columns: ``R``'s shape ``[H, C]``.
        dtype: the factors' value dtype.

    Returns:
        ``(b, bt, row_count, col_count)``: :class:`SparseChain` ``B [H, C]`` and ``B^T [C, H]``,
        int64 ``[H]`` entries per row and ``[C]`` per column of ``B``.
    """
    dev = pairs.device
    closed = closed_relation_pairs(relation, num_columns)  # I + N
    extra, excess = excess_pairs(pairs, closed, num_rows, num_columns)
    ones = lambda n: torch.ones(n, dtype=dtype, device=dev)  # noqa: E731
    r = csr_from_sorted_pairs(pairs, num_rows, num_columns, ones(pairs.shape[1]))
    n = csr_from_sorted_pairs(closed, num_columns, num_columns, ones(closed.shape[1]))
    k = csr_from_sorted_pairs(extra, num_rows, num_columns, excess.to(dtype))
    rt = transpose_csr(pairs, num_rows, num_columns, r.values(), values_equal=True)  # ones shared with R
    nt = transpose_csr(closed, num_columns, num_columns, n.values(), values_equal=True)
    kt = transpose_csr(extra, num_rows, num_columns, k.values())
    # exact counts: reach of each column of R through I + N, minus the excess
    reach = torch.bincount(closed[0], minlength=num_columns)  # [C] |row c of I + N|
    row_count = torch.zeros(num_rows, dtype=torch.int64, device=dev).index_add_(0, pairs[0], reach[pairs[1]])
    row_count.index_add_(0, extra[0], -excess)
    per_col = torch.bincount(pairs[1], minlength=num_columns)  # [C] rows of R per column
    col_count = torch.zeros(num_columns, dtype=torch.int64, device=dev).index_add_(0, closed[1], per_col[closed[0]])
    col_count.index_add_(0, extra[1], -excess)
    return SparseChain(r, n, k), SparseChain(nt, rt, kt), row_count, col_count


def expanded_rows(b: SparseChain, rows: Tensor) -> tuple[Tensor, Tensor]:
    """The entries of rows ``rows`` of ``B`` (``-1`` rows are empty).

    Returns:
        ``(count [n] int64, column [sum(count)] int64)``: columns grouped by position in ``rows``
        (sorted within a row for a factored ``B``, in CSR order otherwise).
    """
    position, col = gather_csr_rows(b.outer.crow_indices(), b.outer.col_indices(), rows)
    if b.inner is not None:  # through I + N, then each row's distinct columns
        via, col = gather_csr_rows(b.inner.crow_indices(), b.inner.col_indices(), col)
        width = int(b.shape[1])
        keys = unique_keys(position.index_select(0, via).mul_(width).add_(col), inplace=True)
        position, col = keys // width, keys % width
    return torch.bincount(position, minlength=rows.numel()), col


__all__ = ["SparseChain", "closed_relation_pairs", "excess_pairs", "expanded_rows", "factored_incidence",
           "neighbour_signatures", "row_pair_positions", "row_pairs", "scaled_csr",
           "signature_bit"]
