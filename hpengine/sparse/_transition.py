"""The structural transition operator T_s, kept factored (docs/methods/index.md#structural-transition-matrix-t_s).

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

from hpengine.sparse._dispatch import local_bfs, local_blocks_into, use_blocks_kernel, use_join_kernel
from hpengine.sparse._factored import SparseChain, expanded_rows, factored_incidence
from hpengine.sparse._incidence import csr_from_sorted_pairs, inverse_or_zero, node_degree, transpose_csr

class TransitionOperator:
    """Factored ``T_s`` (or its transpose) acting on dense ``[H, B]`` blocks.

    Build it with :meth:`hpengine.HyperGraph.transition`; the constructor takes the augmented
    incidence pairs directly.

    Args:
        pairs: int64 ``[2, nnz]`` (fact, column) pairs of ``B``, sorted by fact, unique.
        num_facts: H.
        num_columns: C = V + P.
        dtype: floating dtype of the operator (float32 default; float64 for references).
        relation: optional int64 ``[2, n]`` pairs of a relation ``N`` on the columns (the synonym
            pairs): the operator is then over ``bin(B (I + N))``, the incidence with every related
            column added, kept as factors (:func:`~hpengine.sparse.factored_incidence`) instead of
            materialised.

    Attributes:
        b, bt: ``B [H, C]`` and ``B^T [C, H]`` as :class:`~hpengine.sparse.SparseChain` (one CSR
            matrix, or the factors of the expanded incidence).
        nnz: entries of ``B``; fact_degree: ``[H]`` entries per row; column_degree, inv_degree:
            ``[C]`` entries per column and their inverses (0 for an empty column).

    Shapes:
        ``op @ X``: ``[H, B] -> [H, B]``; ``op.local_blocks(idx)``: ``[Q, M] -> [Q, M, M]``.
    """

    def __init__(self, pairs: Tensor, num_facts: int, num_columns: int, dtype: torch.dtype = torch.float32,
                 *, relation: Tensor | None = None, _transposed: bool = False, _parts: dict | None = None):
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
        if relation is not None:
            self._init_factored(*factored_incidence(pairs, relation, num_facts, num_columns, dtype))
            return
        self.nnz = int(pairs.shape[1])  # the pairs themselves are not kept: the CSR pair holds them
        ones = torch.ones(pairs.shape[1], dtype=dtype, device=pairs.device)  # shared by B and B^T
        degree = node_degree(pairs[1], num_columns, dtype)  # [C]
        self.column_degree = degree
        self.inv_degree = inverse_or_zero(degree)  # [C]
        per_pair = self.inv_degree[pairs[1]]
        self.diag = torch.zeros(num_facts, dtype=dtype, device=pairs.device).index_add_(0, pairs[0], per_pair)
        off = (degree[pairs[1]] - 1.0) * per_pair  # >= 0 term by term
        del per_pair
        self.row_sum = torch.zeros(num_facts, dtype=dtype, device=pairs.device).index_add_(0, pairs[0], off)
        del off
        self.inv_row_sum = inverse_or_zero(self.row_sum)  # [H]
        # CSR of B and of B^T, built once: every product reuses them.
        b = csr_from_sorted_pairs(pairs, num_facts, num_columns, ones)  # [H, C]
        self.fact_degree = (b.crow_indices()[1:] - b.crow_indices()[:-1]).to(dtype)  # [H]
        self.b = SparseChain(b)
        self.bt = SparseChain(transpose_csr(pairs, num_facts, num_columns, ones, values_equal=True))  # [C, H]

    def _init_factored(self, b, bt, row_count: Tensor, col_count: Tensor) -> None:
        """Degrees, diagonal and row sums of ``bin(B (I + N))`` from its factors: exact integer
        counts, and one product with ``B`` for the sums over each row."""
        self.b, self.bt = b, bt
        self.nnz = int(row_count.sum())
        self.fact_degree = row_count.to(self.dtype)
        degree = self.column_degree = col_count.to(self.dtype)
        self.inv_degree = inverse_or_zero(degree)
        sums = self.b @ torch.stack([self.inv_degree, (degree - 1.0) * self.inv_degree], dim=1)  # [H, 2]
        self.diag, self.row_sum = sums[:, 0].contiguous(), sums[:, 1].clamp(min=0.0)
        self.inv_row_sum = inverse_or_zero(self.row_sum)

    @property
    def factored(self) -> bool:
        """Whether ``B`` is kept as the factors of an expanded incidence."""
        return self.b.factored

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
    def local_blocks(self, idx: Tensor, *, out: Tensor | None = None, max_pairs: int | None = None) -> Tensor:
        """Dense row-renormalised restrictions ``T*`` of T_s to per-question fact sets.

        Entries come from pairs of local facts sharing an entity or a passage: a sort-and-join
        over (question, column) keys, O(number of such pairs), never a dense one-hot over
        entities. Rows are normalised by the block's own row sums
        (docs/methods/index.md#local-blocks), so a fact with no neighbour *inside the block* has an
        all-zero row. Pairs of equal fact ids (duplicates in
        a row of ``idx``) contribute nothing, as T_s has a zero diagonal. The transposed
        operator returns the transposed blocks.

        How: the incidence rows of each question's facts are laid out in a ``[Q, E_max]`` block
        (``E_max`` = most incidences of one question) and sorted per row by column, which puts
        each (question, column) group in a contiguous run; every ordered pair inside a run of
        ``g >= 2`` entries adds ``1 / d_c`` (divided by its row's sum, known from the run sizes)
        to one block entry. The join is data-dependent, so the function syncs with the host twice
        per call (entry and pair counts; twice more when the pairs are sliced) and materialises
        the pairs in slices of at most ``max_pairs``. On the CPU the compiled kernel
        (``kernels/k_local_blocks_cpu.cpp``, chosen by :mod:`hpengine.sparse._dispatch`) forms the same
        sums in the same order per question, with no pairs materialised and no host sync; on CUDA with
        ``HPENGINE_KERNELS=on`` the Triton kernel (``kernels/k_local_blocks_triton.py``) forms them too
        (one host sync, for the most columns of one slot).

        Args:
            idx: int64 ``[Q, M]`` fact ids, ``-1`` for padding.
            out: optional contiguous ``[Q, M, M]`` buffer of the operator's dtype and device; it
                is overwritten (reusing it avoids a fresh ``Q * M^2`` allocation per call).
            max_pairs: most (slot, slot, column) pairs held at once (default: all at once). Each
                pair costs about 64 bytes of temporaries; on CPU, slices of ~2^18 pairs are also
                the fastest (they stay in cache).

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
        if max_pairs is not None and (isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or max_pairs < 1):
            raise ValueError(f"max_pairs must be a positive int or None (got {max_pairs!r})")
        num_q, m = idx.shape
        dev = self.device
        given = out is not None
        if out is None:
            out = torch.zeros(num_q, m, m, dtype=self.dtype, device=dev)
        else:
            if out.shape != (num_q, m, m) or out.dtype != self.dtype or out.device != dev or not out.is_contiguous():
                raise ValueError(f"out must be a contiguous [{num_q}, {m}, {m}] {self.dtype} tensor on {dev} "
                                 f"(got {tuple(out.shape)} {out.dtype} on {out.device})")
        # the CPU kernel (kernels/k_local_blocks_cpu.cpp); on CUDA with HPENGINE_KERNELS=on the Triton one
        if num_q * m and use_blocks_kernel(self.device, self.dtype):
            local_blocks_into(idx, *self._join_operands(idx), self.inv_degree, out)
        elif num_q * m:
            if given:
                out.zero_()
            self._join_into(idx, out, max_pairs)
        return out.transpose(1, 2) if self.transposed else out

    def uses_join_kernel(self) -> bool:
        """Whether :meth:`local_blocks` runs the CPU kernel here, and :meth:`local_bfs` can run
        (``HPENGINE_KERNELS``, the device and dtype; :mod:`hpengine.sparse._dispatch`)."""
        return use_join_kernel(self.device, self.dtype)

    def local_bfs(self, idx: Tensor, sources: Tensor, depths: list[int], reverse: list[bool], *,
                  theta: float = 0.0) -> Tensor:
        """BFS distances on the local blocks thresholded at ``theta`` (edges ``T*_ij > theta``),
        without forming the blocks: the CPU kernel (``kernels/k_local_blocks_cpu.cpp``; callers check
        :meth:`uses_join_kernel`). Search ``b`` equals
        ``batched_bfs(threshold(local_blocks(idx), theta, 0), sources[..., b], depths[b],
        reverse=reverse[b])`` (tests/kernels/test_hop_kernels.py).

        Shapes:
            idx ``[Q, M]``, sources bool ``[Q, M, B]`` -> int64 ``[Q, M, B]`` (``-1``: unreached).
        """
        if self.transposed:  # the transposed blocks: every edge reversed
            reverse = [not r for r in reverse]
        return local_bfs(idx, *self._join_operands(idx), self.inv_degree, theta=theta, sources=sources,
                         depths=depths, reverse=reverse)

    def _join_operands(self, idx: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(rows [Q, M], crow, col)``: each slot's incidence columns as a CSR row, for the kernels
        (a plain ``B``: its own CSR, rows = ``idx``; a factored one: the slots' expanded rows)."""
        if not self.factored:
            return idx, self.b.outer.crow_indices(), self.b.outer.col_indices()
        count, cols = expanded_rows(self.b, idx.reshape(-1))
        crow = torch.zeros(count.numel() + 1, dtype=torch.int64, device=idx.device)
        torch.cumsum(count, 0, out=crow[1:])
        rows = torch.arange(idx.numel(), device=idx.device).view(idx.shape)
        return rows, crow, cols

    def _join_into(self, idx: Tensor, out: Tensor, max_pairs: int | None) -> None:
        """Fill ``out [Q, M, M]`` (zeroed) with the row-normalised local blocks of ``idx``.

        Row sums are known before any pair exists: slot ``i`` with fact ``f`` gets
        ``sum_{c in row f} (g_c - mult_i) / d_c`` from the group sizes ``g_c`` of its columns, where
        ``mult_i`` (the number of slots holding ``f``) removes the pairs of equal facts. So each pair
        adds an already normalised value, self pairs land on the diagonal (zeroed afterwards), and
        only questions with repeated ids need a masking pass over their blocks.
        """
        num_q, m = idx.shape
        dev = self.device
        num_cols = self.num_columns
        flat_idx = idx.reshape(-1)
        valid = flat_idx >= 0
        fact = flat_idx.clamp(min=0)
        if self.factored:  # each slot's row of B, expanded from the factors (slot order)
            count, slot_cols = expanded_rows(self.b, flat_idx)
        else:
            crow, cols = self.b.outer.crow_indices(), self.b.outer.col_indices()
            start = crow.index_select(0, fact).long()  # [Q*M] (the CSR may hold int32 indices)
            count = torch.where(valid, crow.index_select(0, fact + 1).long() - start, 0)  # incidences of each slot
        per_q = count.view(num_q, m).sum(1)  # [Q]
        # multiplicity of each slot's fact within its question (sorted rows, run lengths)
        sorted_idx, order = torch.sort(idx, dim=1)
        run_start = torch.ones_like(sorted_idx, dtype=torch.bool)
        run_start[:, 1:] = sorted_idx[:, 1:] != sorted_idx[:, :-1]
        run_id = torch.cumsum(run_start.view(-1), 0) - 1
        run_size = torch.zeros(num_q * m, dtype=torch.int64, device=dev).index_add_(
            0, run_id, torch.ones(num_q * m, dtype=torch.int64, device=dev))
        mult = torch.empty(num_q * m, dtype=torch.int64, device=dev)
        mult[(order + torch.arange(num_q, device=dev).unsqueeze(1) * m).view(-1)] = run_size.index_select(0, run_id)
        has_repeats = ((mult > 1) & valid).any()
        # Host sync 1: the size of the entry list, of its per-question layout, and whether ids repeat.
        total, width, repeats = torch.stack([per_q.sum(), per_q.max(), has_repeats.long()]).tolist()
        if total == 0:
            return
        # entries (question, slot, column), in slot order
        slot = torch.repeat_interleave(torch.arange(num_q * m, device=dev), count, output_size=total)
        ar = torch.arange(total, device=dev)
        if self.factored:
            col = slot_cols
        else:
            col = cols.index_select(0, ar + (start - (torch.cumsum(count, 0) - count)).index_select(0, slot))
        q_of = torch.div(slot, m, rounding_mode="floor")
        pos = q_of * width + ar - (torch.cumsum(per_q, 0) - per_q).index_select(0, q_of)
        # [Q, width] layout sorted per row by column; padding gets the sentinel column C (sorts last).
        # Keys are narrowed to int32 when C allows it: the per-row sort is the join's main cost.
        key_dtype = torch.int32 if num_cols < 2**31 - 1 else torch.int64
        keys = torch.full((num_q * width,), num_cols, dtype=key_dtype, device=dev)
        keys[pos] = col.to(key_dtype)
        slots = torch.zeros(num_q * width, dtype=torch.int64, device=dev)
        slots[pos] = slot - q_of * m  # local slot of each entry
        keys, order = torch.sort(keys.view(num_q, width), dim=1)
        slots = torch.gather(slots.view(num_q, width), 1, order).view(-1)
        keys = keys.view(-1)
        n = num_q * width
        new_group = torch.ones(n, dtype=torch.bool, device=dev)
        new_group[1:] = keys[1:] != keys[:-1]
        new_group.view(num_q, width)[:, 0] = True  # groups never span two questions
        group_id = torch.cumsum(new_group, 0) - 1
        group_size = torch.zeros(n, dtype=torch.int64, device=dev).index_add_(
            0, group_id, torch.ones(n, dtype=torch.int64, device=dev))
        positions = torch.arange(n, device=dev)
        group_start = torch.where(new_group, positions, 0).cummax(0).values  # [n]
        size = group_size.index_select(0, group_id)
        real = keys < num_cols
        q_pos = torch.div(positions, width, rounding_mode="floor")
        row_pos = q_pos * m + slots  # row of the flattened [Q*M, M] block
        weight = torch.where(real, self.inv_degree.index_select(0, keys.clamp(max=num_cols - 1).long()), 0.0)
        # row sums of the raw block from the groups alone: every partner except the equal facts
        row_sum = torch.zeros(num_q * m, dtype=self.dtype, device=dev).index_add_(
            0, row_pos, weight * (size - mult.index_select(0, row_pos)))
        weight = weight * inverse_or_zero(row_sum).index_select(0, row_pos)  # normalised per-pair value
        partners = torch.where(real & (size > 1), size, 0)  # ordered pairs (self included) per entry
        cum = torch.cumsum(partners, 0)
        # Host sync 2: the number of pairs, and slice boundaries when it exceeds max_pairs.
        num_pairs = int(cum[-1])
        bounds, done = [0, n], [0, num_pairs]
        if max_pairs is not None and num_pairs > max_pairs:
            # entry ranges holding at most ~max_pairs pairs each (one entry's run is never split)
            cuts = torch.searchsorted(cum, torch.arange(1, -(-num_pairs // max_pairs), device=dev) * max_pairs,
                                      right=True)
            cuts = torch.unique(torch.cat([cuts.clamp(1, n - 1), cuts.new_tensor([n])]))
            bounds = [0, *cuts.tolist()]
            done = [0, *cum[cuts - 1].tolist()]
        flat_out = out.view(-1)
        shift = group_start
        for lo, hi, before, after in zip(bounds[:-1], bounds[1:], done[:-1], done[1:]):
            size_here = after - before
            if size_here == 0:
                continue
            part = partners[lo:hi]
            left = torch.repeat_interleave(positions[lo:hi], part, output_size=size_here)
            first = torch.cumsum(part, 0) - part
            # right partner = start of left's run + rank of this pair among left's pairs
            right = torch.arange(size_here, device=dev) + (shift[lo:hi] - first).index_select(0, left - lo)
            target = row_pos.index_select(0, left) * m + slots.index_select(0, right)
            flat_out.index_add_(0, target, weight.index_select(0, left))
        out.diagonal(dim1=1, dim2=2).zero_()  # self pairs: T_s has a zero diagonal
        if repeats:  # pairs of two slots holding the same fact are diagonal entries too
            out.masked_fill_((idx.unsqueeze(2) == idx.unsqueeze(1)) & (idx >= 0).unsqueeze(2), 0.0)

    def __repr__(self) -> str:
        name = "T_s^T" if self.transposed else "T_s"
        return (f"TransitionOperator({name}, num_facts={self.num_facts}, num_columns={self.num_columns}, "
                f"nnz={self.nnz}, factored={self.factored}, dtype={self.dtype}, device={self.device})")
