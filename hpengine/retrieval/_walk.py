"""Random walk with restart on ``T_s`` for a batch of questions, and its top-M local subgraph.

The walk runs on dense ``[H, Q]`` blocks (one column per question) with the factored operator, so
its cost per step is two SpMMs with the incidence ``B`` (``O(nnz(B) * Q)``) plus a few passes over
the block; it has no per-question control flow and no host sync.
"""
from __future__ import annotations

import weakref

import torch
from torch import Tensor

from hpengine.retrieval._topk import blocked_topk
from hpengine.sparse import SparseChain, TransitionOperator, inverse_or_zero, walk_product, walk_step

# op -> (D^-1 B^T r^-1 as CSR [C, H], diag * r^-1 [H]); cached per operator (see _walk_parts)
_WALK_PARTS: "weakref.WeakKeyDictionary[TransitionOperator, tuple[SparseChain, Tensor]]" = weakref.WeakKeyDictionary()


def _walk_parts(op: TransitionOperator) -> tuple[SparseChain, Tensor]:
    """``D^-1 B^T diag(r^-1)`` as one :class:`~hpengine.sparse.SparseChain` ``[C, H]`` and
    ``diag(W_s) * r^-1`` ``[H]``.

    ``T_s^T x = B D^-1 B^T (r^-1 x) - diag * r^-1 x``; folding both scalings into the values of
    ``B^T`` saves two dense passes over ``[H, Q]`` and one over ``[C, Q]`` per walk step (bench_hop:
    dense passes over the ``[H, Q]`` block are a third of the walk's time on CPU). Built once per
    operator from its buffers.
    """
    parts = _WALK_PARTS.get(op)
    if parts is None:  # the scaled copy shares B^T's index arrays: only its values are new
        parts = (op.bt.scaled(row=op.inv_degree, col=op.inv_row_sum), op.diag * op.inv_row_sum)
        _WALK_PARTS[op] = parts
    return parts


def first_occurrence(ids: Tensor) -> Tensor:
    """``True`` at the first occurrence of each valid (``>= 0``) id in each row.

    Shapes:
        ids ``[Q, n]`` int64 -> ``[Q, n]`` bool (an ``[Q, n, n]`` comparison: ``n`` is small).
    """
    n = ids.shape[1]
    same = ids.unsqueeze(2) == ids.unsqueeze(1)  # [Q, n, n]
    earlier = torch.ones(n, n, dtype=torch.bool, device=ids.device).tril(-1)
    return (ids >= 0) & ~(same & earlier).any(2)


def restart_distribution(seeds: Tensor, seed_cos: Tensor, frontier: Tensor, *, frontier_weight: float,
                         seed_weighting: str = "cosine") -> tuple[Tensor, Tensor]:
    """Restart mass ``r0`` of each question as (fact id, mass) entries.

    Each distinct seed weighs ``max(cos, 0)`` (``seed_weighting="cosine"``; uniform when
    ``"uniform"`` or when that mass is 0), normalised to 1 over the seeds; each distinct frontier
    fact weighs ``frontier_weight / |F|``; the total is normalised to 1. Questions without seeds
    and frontier get no mass (their walk stays 0). Repeated ids count once; ``-1`` is padding.

    Args:
        seeds: int64 ``[Q, S]``; seed_cos: float32 ``[Q, S]``; frontier: int64 ``[Q, F]``.
        frontier_weight: total frontier mass relative to the seeds' (``>= 0``).
        seed_weighting: ``"cosine"`` or ``"uniform"``.

    Returns:
        ``(ids, mass)``: int64 ``[Q, S + F]`` (``-1`` kept) and float32 ``[Q, S + F]`` (0 at
        padding and repeats), each row summing to 1 or 0. A fact that is both a seed and in the
        frontier appears twice, with both masses.

    Shapes:
        ``[Q, S], [Q, S], [Q, F] -> [Q, S + F], [Q, S + F]``.

    Example:
        >>> ids, mass = restart_distribution(torch.tensor([[0, 1]]), torch.tensor([[0.6, 0.2]]),
        ...                                  torch.tensor([[2]]), frontier_weight=1.0)
        >>> ids, mass
        (tensor([[0, 1, 2]]), tensor([[0.3750, 0.1250, 0.5000]]))
    """
    is_seed = first_occurrence(seeds)
    is_front = first_occurrence(frontier)
    w = seed_cos.float().clamp(min=0) * is_seed
    uniform = is_seed.float()
    if seed_weighting == "cosine":
        w = torch.where(w.sum(1, keepdim=True) > 0, w, uniform)
    else:
        w = uniform
    w = w * inverse_or_zero(w.sum(1, keepdim=True))  # rows sum to 1, or 0 without seeds
    front = is_front.float()
    front = front * (frontier_weight * inverse_or_zero(front.sum(1, keepdim=True)))
    mass = torch.cat([w, front], dim=1)
    mass = mass * inverse_or_zero(mass.sum(1, keepdim=True))
    return torch.cat([seeds, frontier], dim=1), mass


def walk_visits(op: TransitionOperator, restart_ids: Tensor, restart_mass: Tensor, *, walk_steps: int,
                restart: float, out: Tensor | None = None, workspace: dict | None = None) -> Tensor:
    """Visit mass of a random walk with restart, for every question at once.

    ``x_0 = r0``, ``x_{t+1} = (1 - c) T_s^T x_t + c r0`` (mass moves along the rows of ``T_s``,
    as ``op.t() @ x``), and visits ``= sum_{t=0..walk_steps} x_t``. Mass that reaches a fact
    without neighbours stops there (its row of ``T_s`` is 0).

    Args:
        op: the (non-transposed) ``T_s`` operator, float32 or float64.
        restart_ids: int64 ``[Q, R]`` fact ids of ``r0`` (``-1`` padding); restart_mass: ``[Q, R]``
            (see :func:`restart_distribution`).
        walk_steps: number of steps (``>= 0``). restart: ``c`` in ``[0, 1]``.
        out: optional ``[H, Q]`` buffer for the result.
        workspace: optional dict of reusable flat buffers (``"x"``, ``"x_next"``, ``"visits"``:
            ``[H, Q]``; ``"y"``: ``[C, Q]``); reusing them across chunks avoids fresh allocations
            (on CPU a fresh tensor above 32 MB is a fresh mmap, and its page faults cost as much as
            the arithmetic). Without ``out``, the result lives in ``workspace["visits"]``.

    Returns:
        ``[H, Q]`` visit mass in the operator's dtype (column ``q`` is question ``q``).

    Shapes:
        ``[Q, R], [Q, R] -> [H, Q]``; memory ``(3 H + C) * Q`` floats.

    Example:
        >>> from hpengine.graph import HyperGraph
        >>> g = HyperGraph.from_incidence(torch.tensor([[0, 1, 1, 2], [0, 0, 1, 1]]), torch.tensor([0, 1, 2]),
        ...                               num_entities=2, num_passages=3)
        >>> walk_visits(g.transition(), torch.tensor([[0]]), torch.tensor([[1.0]]), walk_steps=1, restart=0.5)
        tensor([[1.5000],
                [0.5000],
                [0.0000]])
    """
    num_facts, num_q = op.num_facts, restart_ids.shape[0]
    dtype, dev = op.dtype, op.device
    ws = workspace if workspace is not None else {}

    def buffer(name: str, rows: int) -> Tensor:
        flat = ws.get(name)
        if flat is None or flat.numel() < rows * num_q or flat.dtype != dtype:
            flat = torch.empty(rows * num_q, dtype=dtype, device=dev)
            ws[name] = flat
        return flat[: rows * num_q].view(rows, num_q)

    bt_scaled, diag_scaled = _walk_parts(op)
    # r0 as flat (fact * Q + q) entries of the [H, Q] block; padding adds 0 to entry (0, q)
    cols = torch.arange(num_q, device=dev).unsqueeze(1)
    flat = (restart_ids.clamp(min=0) * num_q + cols).reshape(-1)
    mass = torch.where(restart_ids >= 0, restart_mass.to(dtype), 0.0).reshape(-1)
    x = buffer("x", num_facts)
    x.zero_()
    x.view(-1).index_add_(0, flat, mass)
    visits = out if out is not None else buffer("visits", num_facts)
    visits.copy_(x)
    if walk_steps == 0:
        return visits
    x_next = buffer("x_next", num_facts)
    y = buffer("y", op.num_columns)
    work = buffer("work", max(bt_scaled.work_rows(), op.b.work_rows())).view(-1)  # a factored B's inner products
    scaled_restart = mass * restart
    minus_diag = (diag_scaled * -(1.0 - restart)).unsqueeze(1)  # [H, 1]
    # The in-place/addmm forms below are ~2.5x faster on CPU than torch.mm(..., out=) with a
    # sparse CSR operand, which zero-fills the output and takes a slower kernel (bench_hop).
    # rows of x and y that may be nonzero (x starts at the restart rows): the CPU kernels skip the others
    x_rows = torch.zeros(num_facts, dtype=torch.bool, device=dev)
    x_rows.index_fill_(0, restart_ids.clamp(min=0).reshape(-1), True)
    y_rows = torch.empty(op.num_columns, dtype=torch.bool, device=dev)
    for _ in range(walk_steps):  # steps, never questions
        # [C, Q] (1 - c) D^-1 B^T r^-1 x
        walk_product(bt_scaled, x, alpha=1.0 - restart, out=y, work=work, x_rows=x_rows, out_rows=y_rows)
        # x_next = x * minus_diag (the diagonal of W_s, removed) + c r0 + (1 - c) B D^-1 B^T r^-1 x, added to
        # the visits: one pass over the rows with the CPU kernel, four passes on the PyTorch path
        walk_step(op.b, y, x, minus_diag, flat, scaled_restart, out=x_next, visits=visits, work=work, y_rows=y_rows,
                  out_rows=x_rows)
        x, x_next = x_next, x
    return visits


def top_visited(visits: Tensor, forced: Tensor, size: int) -> Tensor:
    """Per question, the ``size`` facts with the largest visit mass (> 0), forced facts first.

    Args:
        visits: ``[H, Q]`` visit mass (modified: forced entries are set to ``+inf``).
        forced: int64 ``[Q, n]`` fact ids always kept (``-1`` padding; ``n <= size``).
        size: ``m <= H``, facts kept per question.

    Returns:
        int64 ``[Q, m]`` fact ids by decreasing mass, ``-1`` where fewer facts have mass.

    Shapes:
        ``[H, Q], [Q, n] -> [Q, m]``.

    Example:
        >>> top_visited(torch.tensor([[0.0], [0.3], [0.2], [0.0]]), torch.tensor([[3]]), 3)
        tensor([[3, 1, 2]])
    """
    num_q = visits.shape[1]
    cols = torch.arange(num_q, device=visits.device).unsqueeze(1)
    flat = (forced.clamp(min=0) * num_q + cols).reshape(-1)
    # +inf for forced ids, -inf (a no-op under amax) for padding: no compaction, no sync
    mark = torch.where(forced >= 0, float("inf"), float("-inf")).to(visits.dtype).reshape(-1)
    visits.view(-1).scatter_reduce_(0, flat, mark, reduce="amax")
    values, ids = blocked_topk(visits, size, dim=0)  # over the facts of each column, no transposed copy
    return torch.where(values > 0, ids, -1)
