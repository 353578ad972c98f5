"""The structural transition operator T_s, kept factored (SPEC §1.5, "Tensor form of T_s").

With the augmented incidence ``B = [B_he | B_hd]`` (``[H, C]``, ``C = V + P``) and column
degrees ``d``::

    W_s      = B D^-1 B^T
    diag_i   = sum_c B[i,c] / d[c]
    r_i      = sum_c B[i,c] (d[c] - 1) / d[c]          (row sums of W_s - diag(W_s))
    T_s X    = r^-1 * (B (D^-1 (B^T X)) - diag * X)
    T_s^T X  = W_s (r^-1 * X) - diag * r^-1 * X        (W_s is symmetric)

``r_i`` is a sum of non-negative terms, so a fact with no neighbour gets exactly 0 and an
all-zero row (``r^-1`` is set to 0, never inf or NaN). Rows of T_s sum to 1, or to 0 for an
isolated fact. Applying the operator costs O(nnz(B)) per column of ``X``; W_s is never formed
(``to_dense`` exists for small-graph tests only).
"""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.sparse._incidence import csr_from_sorted_pairs, inverse_or_zero, node_degree


class TransitionOperator:
    """Factored ``T_s`` (or its transpose) acting on dense ``[H, B]`` blocks.

    Build it with :meth:`hpengine.HyperGraph.transition`; the constructor takes the augmented
    incidence pairs directly.

    Args:
        pairs: int64 ``[2, nnz]`` (fact, column) pairs of ``B``, sorted by fact, unique.
        num_facts: H.
        num_columns: C = V + P.
        dtype: floating dtype of the operator (float32 default; float64 for references).

    Shapes:
        ``op @ X``: ``[H, B] -> [H, B]``; ``op.local_blocks(idx)``: ``[Q, M] -> [Q, M, M]``.
    """

    def __init__(self, pairs: Tensor, num_facts: int, num_columns: int, dtype: torch.dtype = torch.float32,
                 *, _transposed: bool = False, _parts: dict | None = None):
        if _parts is not None:
            self.__dict__.update(_parts)
            self.transposed = _transposed
            return
        if not dtype.is_floating_point:
            raise TypeError(f"transition dtype must be floating point (got {dtype})")
        self.num_facts = num_facts
        self.num_columns = num_columns
        self.dtype = dtype
        self.transposed = False
        self.pairs = pairs
        ones = torch.ones(pairs.shape[1], dtype=dtype, device=pairs.device)
        degree = node_degree(pairs[1], num_columns, dtype)  # [C]
        self.inv_degree = inverse_or_zero(degree)  # [C]
        per_pair = self.inv_degree[pairs[1]]
        self.diag = torch.zeros(num_facts, dtype=dtype, device=pairs.device).index_add_(0, pairs[0], per_pair)
        off = (degree[pairs[1]] - 1.0) * per_pair  # >= 0 term by term
        self.row_sum = torch.zeros(num_facts, dtype=dtype, device=pairs.device).index_add_(0, pairs[0], off)
        self.inv_row_sum = inverse_or_zero(self.row_sum)  # [H]
        # CSR of B and of B^T, built once: every product reuses them.
        self.b = csr_from_sorted_pairs(pairs, num_facts, num_columns, ones)  # [H, C]
        order = torch.argsort(pairs[1] * num_facts + pairs[0])
        self.bt = csr_from_sorted_pairs(pairs.flip(0)[:, order], num_columns, num_facts, ones)  # [C, H]

    # ------------------------------------------------------------------ products
    @property
    def device(self) -> torch.device:
        return self.diag.device

    @property
    def shape(self) -> tuple[int, int]:
        return (self.num_facts, self.num_facts)

    def t(self) -> "TransitionOperator":
        """The transpose ``T_s^T`` as an operator sharing all buffers."""
        parts = {k: v for k, v in self.__dict__.items() if k != "transposed"}
        return TransitionOperator(None, 0, 0, _transposed=not self.transposed, _parts=parts)

    def _w_apply(self, x: Tensor) -> Tensor:
        """``(W_s - diag(W_s)) x`` for ``x [H, B]``."""
        y = self.bt @ x  # [C, B]
        y = y * self.inv_degree.unsqueeze(1)
        return self.b @ y - self.diag.unsqueeze(1) * x

    def matmul(self, x: Tensor) -> Tensor:
        """Apply the operator to a dense block.

        Args:
            x: ``[H]`` or ``[H, B]`` dense tensor of the operator's dtype and device.

        Returns:
            ``T_s x`` (or ``T_s^T x`` for a transposed operator), same shape as ``x``.
        """
        self._check_block(x)
        squeeze = x.dim() == 1
        if squeeze:
            x = x.unsqueeze(1)
        if self.transposed:
            out = self._w_apply(x * self.inv_row_sum.unsqueeze(1))
        else:
            out = self._w_apply(x) * self.inv_row_sum.unsqueeze(1)
        return out.squeeze(1) if squeeze else out

    __matmul__ = matmul

    def _check_block(self, x: Tensor) -> None:
        if not isinstance(x, Tensor):
            raise TypeError(f"expected a torch.Tensor (got {type(x).__name__})")
        if x.dim() not in (1, 2) or x.shape[0] != self.num_facts:
            raise ValueError(f"expected a dense [H] or [H, B] block with H={self.num_facts} (got {tuple(x.shape)})")
        if x.device != self.device:
            raise ValueError(f"block is on {x.device} but the operator is on {self.device}; move one of them")
        if x.dtype != self.dtype:
            raise TypeError(f"block dtype must match the operator's {self.dtype} (got {x.dtype})")
        if x.layout != torch.strided:
            raise NotImplementedError(f"only dense blocks are supported (got layout {x.layout})")

    def to_dense(self) -> Tensor:
        """The ``[H, H]`` matrix (small graphs and tests only: O(H^2) memory)."""
        eye = torch.eye(self.num_facts, dtype=self.dtype, device=self.device)
        dense = self.matmul(eye)  # column j = T e_j
        return dense

    # ------------------------------------------------------------ local blocks
    def local_blocks(self, idx: Tensor) -> Tensor:
        """Dense row-renormalised restrictions ``T*`` of T_s to per-question fact sets.

        Entries come from pairs of local facts sharing an entity or a passage: a sort-and-join
        over (question, column) keys, O(number of such pairs), never a dense one-hot over
        entities. Rows are normalised by the block's own row sums (SPEC §2), so a fact with no
        neighbour *inside the block* has an all-zero row. Pairs of equal fact ids (duplicates in
        a row of ``idx``) contribute nothing, as T_s has a zero diagonal. The transposed
        operator returns the transposed blocks.

        Args:
            idx: int64 ``[Q, M]`` fact ids, ``-1`` for padding.

        Returns:
            ``[Q, M, M]`` of the operator's dtype; rows and columns of padding are zero.

        Shapes:
            idx: ``[Q, M]`` -> ``[Q, M, M]``.
        """
        if idx.dim() != 2:
            raise ValueError(f"idx must be [Q, M] (got shape {tuple(idx.shape)})")
        if idx.dtype != torch.int64:
            raise TypeError(f"idx must be int64 (got {idx.dtype})")
        if idx.device != self.device:
            raise ValueError(f"idx is on {idx.device} but the operator is on {self.device}")
        num_q, m = idx.shape
        out = torch.zeros(num_q * m * m, dtype=self.dtype, device=self.device)
        flat = idx.reshape(-1)
        slot = torch.nonzero(flat >= 0).squeeze(1)  # data-dependent size: needed to gather rows
        facts = flat[slot]
        crow = self.b.crow_indices()
        cols = self.b.col_indices()
        start, count = crow[facts], crow[facts + 1] - crow[facts]
        # one entry per (slot, column of B in that fact's row)
        entry_slot = torch.repeat_interleave(slot, count)
        offsets = torch.arange(entry_slot.numel(), device=self.device) - torch.repeat_interleave(
            torch.cumsum(count, 0) - count, count)
        entry_col = cols[torch.repeat_interleave(start, count) + offsets]
        entry_q = entry_slot // m
        key = entry_q * self.num_columns + entry_col
        key, order = torch.sort(key, stable=True)
        entry_slot, entry_col = entry_slot[order], entry_col[order]
        # groups of equal (question, column): every ordered pair inside a group is an edge
        _, group_size = torch.unique_consecutive(key, return_counts=True)
        group_start = torch.cumsum(group_size, 0) - group_size
        size_e = torch.repeat_interleave(group_size, group_size)  # [n] size of own group
        start_e = torch.repeat_interleave(group_start, group_size)
        left = torch.repeat_interleave(torch.arange(key.numel(), device=self.device), size_e)
        pos = torch.arange(left.numel(), device=self.device) - torch.repeat_interleave(
            torch.cumsum(size_e, 0) - size_e, size_e)
        right = start_e[left] + pos
        ls, rs = entry_slot[left], entry_slot[right]
        keep = flat[ls] != flat[rs]  # self pairs (and duplicate ids) are the removed diagonal
        ls, rs = ls[keep], rs[keep]
        value = self.inv_degree[entry_col[left[keep]]]
        q = ls // m
        out.index_add_(0, q * m * m + (ls % m) * m + (rs % m), value)
        out = out.view(num_q, m, m)
        out = out * inverse_or_zero(out.sum(dim=2, keepdim=True))
        return out.transpose(1, 2) if self.transposed else out

    def __repr__(self) -> str:
        name = "T_s^T" if self.transposed else "T_s"
        return (f"TransitionOperator({name}, num_facts={self.num_facts}, num_columns={self.num_columns}, "
                f"nnz={self.pairs.shape[1]}, dtype={self.dtype}, device={self.device})")
