"""Batched personalised PageRank on the star expansion of the hypergraph
(docs/methods/ppr.md#personalised-pagerank).

The star graph has ``N = V + H + P`` nodes: entities ``[0, V)``, facts ``[V, V + H)`` and passages
``[V + H, N)``, with an undirected unit edge for each (fact, entity) incidence (synonym-expanded,
``graph.fact_entity``) and for each fact and its passage (``graph.fact_passage``). With the
augmented incidence ``B = [B_he | B_hd]`` (``[H, C]``, ``C = V + P``; the graph's cached CSR), the
adjacency is ``A = [[0, B^T], [B, 0]]`` (no ``N x N`` matrix is formed) and the walk matrix is
``M = D^-1 A`` (degrees by bincount, ``1/0 -> 0``: a dangling node has a zero row).

PPR with restart ``1 - d`` (networkx convention: dangling mass goes back to the personalization)
is, for a personalization ``p`` normalised to ``p^ = p / sum(p)``::

    u = (1 - d) p^ + d M^T u          (mass reaching a dangling node stays there)
    x = u / sum(u)                    (= networkx's fixed point: the dangling mass re-enters as p^)

``x`` is homogeneous of degree 0 in ``p``, so the row normalisation is part of the map and of its
gradient. The star graph is bipartite ({entities, passages} vs facts), so the fact block is
eliminated exactly, ``f = (1 - d) p^_f + d S_down a``, and the solver runs on the entity/passage
block ``a`` ``[C, Qc]``::

    (I - d^2 S_up S_down) a = (1 - d) (p^_a + d S_up p^_f)
    S_up = B^T D_f^-1  [C, H],   S_down = B D_c^-1  [H, C]    (degree scalings folded into CSR values)

One iteration costs two products with ``B`` (``O(nnz(B) * Qc)``; a factored ``B``, a
:class:`~hpengine.sparse.SparseChain`, costs its factors' entries instead). ``S_up S_down`` is similar to
``K K^T`` with ``K = D_c^-1/2 B^T D_f^-1/2`` (``||K|| <= 1``), so the reduced system's eigenvalues
lie in ``[1 - d^2, 1]``. ``method="power"`` iterates ``a <- b + d^2 S_up S_down a``: the power
iteration of the star graph with the fact half-step done in place (Gauss-Seidel order), error
factor ``d^2`` per iteration, i.e. one iteration is two plain power-iteration steps.
``method="chebyshev"`` runs Chebyshev iteration on the same interval (error factor
``(sqrt(k) - 1) / (sqrt(k) + 1) = 0.31`` for ``d = 0.85``, ``k = 1 / (1 - d^2)``), which needs about a
third of the iterations for the same tolerance. Both are linear in ``p`` for a fixed iteration
count and converge to the same fixed point.

The gradient with respect to the personalization solves the adjoint system ``(I - d M) v = (1 - d) w``
by the same iteration (``S_up, S_down`` replaced by ``D_c^-1 B^T``, ``D_f^-1 B``), so no iterate is
kept for backward: ``dL/dp = v / (sum(u) sum(p))`` with ``w = g - (g . x) 1``.
"""
from __future__ import annotations

import weakref

import torch
from torch import Tensor

from hpengine.sparse import SparseChain, TransitionOperator
from hpengine.retrieval._chunking import PPR_BUDGET_MB, resolve_memory_budget_mb

#: most questions per chunk on CPU: beyond ~32 columns the rows of the ``[C, Qc]`` block gathered
#: by each SpMM stop fitting in cache (bench_ppr, H = 100k, one thread: 0.44 ms per question and
#: iteration at 32 columns, 0.59 at 64, 0.81 at 128); on CUDA wide blocks mean fewer launches.
CPU_CHUNK = 32
METHODS = ("power", "chebyshev")

# op -> {kind: CSR}; the scaled copies of B and B^T, built once per operator (see _parts)
_PARTS: "weakref.WeakKeyDictionary[TransitionOperator, dict]" = weakref.WeakKeyDictionary()


def _parts(op: TransitionOperator, adjoint: bool) -> tuple[SparseChain, SparseChain]:
    """``(up [C, H], down [H, C])``: ``(B^T D_f^-1, B D_c^-1)``, or ``(D_c^-1 B^T, D_f^-1 B)`` (adjoint)."""
    cache = _PARTS.setdefault(op, {})
    key = "adjoint" if adjoint else "forward"
    if key not in cache:  # the scaled copies share B's and B^T's index arrays: only values are new
        inv_fact = op.fact_degree.reciprocal()  # >= 1: every fact has its passage
        inv_col = op.inv_degree  # [C], 0 for a dangling entity or passage
        if adjoint:  # D_c^-1 B^T: scaled by row of B^T; D_f^-1 B: by row of B
            cache[key] = (op.bt.scaled(row=inv_col), op.b.scaled(row=inv_fact))
        else:  # B^T D_f^-1: scaled by column of B^T (a fact); B D_c^-1: by column of B
            cache[key] = (op.bt.scaled(col=inv_fact), op.b.scaled(col=inv_col))
    return cache[key]


def _node_rows(nodes: Tensor, num_entities: int, num_facts: int, num_columns: int) -> Tensor:
    """Row of each star-graph node in the solver's ``[C + H]`` layout (entities, passages, facts)."""
    is_fact = (nodes >= num_entities) & (nodes < num_entities + num_facts)
    is_passage = nodes >= num_entities + num_facts
    return torch.where(is_fact, nodes - num_entities + num_columns, torch.where(is_passage, nodes - num_facts, nodes))


def ppr_bytes_per_question(*, num_nodes: int, num_columns: int, num_out: int, value_bytes: int = 4,
                           work_rows: int = 0) -> int:
    """Bytes one question of a :func:`personalized_pagerank` chunk holds (:func:`ppr_chunk_size`'s
    formula): ``b * (N + 4 C + H + num_out + work_rows)``, ``work_rows`` the rows of a factored
    incidence's inner products (:meth:`~hpengine.sparse.SparseChain.work_rows`; 0 for one matrix)."""
    return value_bytes * (num_nodes + 4 * num_columns + (num_nodes - num_columns) + num_out + work_rows)


def ppr_chunk_size(num_questions: int, *, num_nodes: int, num_columns: int, num_out: int,
                   memory_budget_mb: int, chunk_size: int = 0, value_bytes: int = 4,
                   device_type: str = "cpu", work_rows: int = 0) -> int:
    """Questions per chunk of :func:`personalized_pagerank` from a memory budget.

    A chunk of ``Qc`` questions holds, per question, the personalization block and the fact
    work block (``N`` values), the iteration's three ``[C]`` vectors (iterate, residual, step;
    the power method uses two) and the ``[C]`` product, plus the gathered output row::

        per question = b * (N + 4 C + H + num_out)        (b = 4 for float32)

    plus ``work_rows`` values for a factored incidence's inner products (``C``; see
    :func:`ppr_bytes_per_question`). So ``Qc = floor(budget / per question)``, at least 1, at most ``num_questions``, and on CPU at
    most ``CPU_CHUNK`` (cache; see the constant). ``chunk_size > 0`` overrides all of this. The
    graph, its scaled CSR copies and the ``[Q, num_out]`` output come on top.

    Example:
        >>> ppr_chunk_size(1024, num_nodes=163_288, num_columns=63_288, num_out=16_644,
        ...                memory_budget_mb=64, device_type="cuda")
        31
    """
    if chunk_size > 0:
        return max(1, min(chunk_size, max(num_questions, 1)))
    per_question = ppr_bytes_per_question(num_nodes=num_nodes, num_columns=num_columns, num_out=num_out,
                                          value_bytes=value_bytes, work_rows=work_rows)
    chunk = int(memory_budget_mb) * 2**20 // max(per_question, 1)
    if device_type == "cpu":
        chunk = min(chunk, CPU_CHUNK)
    return max(1, min(chunk, max(num_questions, 1)))


def _solve(up: SparseChain, down: SparseChain, rhs: Tensor, num_columns: int, *, damping: float, tol: float,
           max_iter: int, method: str, emit) -> int:
    """Solve the reduced system for the columns of one chunk; ``emit(cols, u)`` gets finished columns.

    ``rhs`` is the ``[C + H, w]`` right-hand side (personalization or adjoint seed, rows: entities,
    passages, facts). A column is finished at the first iteration whose step (the L1 change of the
    entity/passage iterate) is ``<= tol``, or at ``max_iter``; ``emit`` receives its local column
    ids (int64 ``[k]``) and the full ``[C + H, k]`` solution ``u = (a, (1-d) rhs_f + d down a)``,
    and the column is dropped from the block (converged columns are not updated any more).
    Returns the number of iterations run.
    """
    d, d2 = damping, damping * damping
    if d2 == 0.0:  # no walk: the first iterate is exact, and Chebyshev's interval is empty
        method = "power"
    rhs_a, rhs_f = rhs[:num_columns], rhs[num_columns:]
    # b = (1 - d) (rhs_a + d up rhs_f); the iterate starts at b
    # a factored B's inner products (up's and down's, one at a time): [C, w]
    work = torch.empty(max(up.work_rows(), down.work_rows()) * rhs.shape[1], dtype=rhs.dtype, device=rhs.device)
    x = up.addmm(rhs_a, rhs_f, beta=1.0 - d, alpha=d * (1.0 - d), work=work)
    rhs_f = rhs_f.contiguous()
    num_facts = rhs_f.shape[0]
    cols = torch.arange(rhs.shape[1], device=rhs.device)
    tmp_flat = torch.empty(rhs_f.numel(), dtype=rhs.dtype, device=rhs.device)  # [H, w], shrinks with w

    def apply_down(block: Tensor) -> Tensor:  # down @ block into the [H, w] work buffer
        tmp = tmp_flat[: num_facts * block.shape[1]].view(num_facts, block.shape[1])
        return down.addmm(tmp, block, beta=0.0, out=tmp, work=work)

    if method == "chebyshev":
        theta, delta = 1.0 - d2 / 2.0, d2 / 2.0  # centre and half-width of [1 - d^2, 1]
        sigma = theta / delta
        rho = 1.0 / sigma
        r = up.addmm(x, apply_down(x), beta=0.0, alpha=d2, work=work)  # r0 = b - A b = d^2 up down b
        state = [x, r, r / theta, rhs_f]  # iterate, residual, step, fact rhs
    else:
        state = [x, x.clone(), rhs_f, torch.empty_like(x)]  # iterate, b, fact rhs, next iterate
    iterations = 0
    for it in range(1, max_iter + 1):  # iterations, never questions
        iterations = it
        if method == "chebyshev":
            x, r, step = state[0], state[1], state[2]
            if it > 1:
                rho_next = 1.0 / (2.0 * sigma - rho)
                step.mul_(rho_next * rho).add_(r, alpha=2.0 * rho_next / delta)
                rho = rho_next
            change = torch.linalg.vector_norm(step, ord=1, dim=0)  # [w]
            x.add_(step)
        else:
            x, b, x_next = state[0], state[1], state[3]
            up.addmm(b, apply_down(x), alpha=d2, out=x_next, work=work)  # b + d^2 up down x
            change = torch.linalg.vector_norm(x.sub_(x_next), ord=1, dim=0)  # [w]
            state[0], state[3] = x_next, x
            x = x_next
        done = change <= tol
        if it == max_iter:
            done = torch.ones_like(done)
        # one host sync per iteration: the loop must know whether columns finished
        if bool(done.any()):
            idx = done.nonzero().squeeze(1)
            x_done = x.index_select(1, idx)  # index_select: the same values as x[:, idx], ~6x faster on CPU
            f_done = down.addmm(state[2 if method == "power" else 3].index_select(1, idx), x_done, beta=1.0 - d,
                                alpha=d, work=work)
            emit(cols[idx], torch.cat([x_done, f_done]))
            keep = (~done).nonzero().squeeze(1)
            if keep.numel() == 0:
                break
            cols = cols[keep]
            state = [t.index_select(1, keep) for t in state]  # finished columns leave the block (contiguous)
        if method == "chebyshev":
            step = state[2]
            residual = state[1].sub_(step)  # r -= A step, A = I - d^2 up down
            up.addmm(residual, apply_down(step), alpha=d2, out=residual, work=work)
    return iterations


class _Plan:
    """Everything a forward or backward pass needs besides the personalization tensors."""

    def __init__(self, graph, dtype, damping, tol, max_iter, method, rows_out, chunk, ids_rows):
        self.graph, self.dtype, self.damping, self.tol = graph, dtype, damping, tol
        self.max_iter, self.method, self.chunk = max_iter, method, chunk
        self.rows_out = rows_out  # int64 [n]: solver-layout row of each output column
        self.ids_rows = ids_rows  # int64 [Q, R] solver-layout rows of sparse personalization ids, or None
        self.op = graph.transition(dtype)
        self.num_columns = self.op.num_columns
        self.num_rows = self.num_columns + graph.num_facts  # C + H


def _rhs_from(plan: _Plan, dense: Tensor | None, ids_rows: Tensor | None, mass: Tensor | None, qs: slice,
              scale: Tensor) -> Tensor:
    """The ``[C + H, w]`` block of questions ``qs``: ``scale[q] * p_q`` in the solver's row layout."""
    w = qs.stop - qs.start
    g = plan.graph
    v, h = g.num_entities, g.num_facts
    s = scale[qs].unsqueeze(0)
    if dense is not None:
        rows = dense[qs]  # [w, N]
        block = torch.cat([rows[:, :v], rows[:, v + h:], rows[:, v:v + h]], dim=1).t() * s
        return block.contiguous()
    block = torch.zeros(plan.num_rows * w, dtype=plan.dtype, device=mass.device)
    r = ids_rows[qs]  # [w, R], -1 padding
    flat = (r.clamp(min=0) * w + torch.arange(w, device=r.device).unsqueeze(1)).reshape(-1)
    vals = torch.where(r >= 0, mass[qs].to(plan.dtype), 0.0).reshape(-1)
    block.index_add_(0, flat, vals)
    return block.view(plan.num_rows, w) * s


def _forward(plan: _Plan, dense, mass, inv_sum_p: Tensor, num_q: int) -> tuple[Tensor, Tensor]:
    """Normalised PPR rows ``[Q, n_out]`` and ``sum(u)`` per question ``[Q]``."""
    up, down = _parts(plan.op, adjoint=False)
    dev = inv_sum_p.device
    n_out = plan.rows_out.numel()
    out = torch.empty(num_q, n_out, dtype=plan.dtype, device=dev)
    sums = torch.empty(num_q, dtype=plan.dtype, device=dev)
    perm = plan.rows_out
    for start in range(0, num_q, plan.chunk):  # chunks of questions, each solved as one block
        qs = slice(start, min(start + plan.chunk, num_q))
        rhs = _rhs_from(plan, dense, plan.ids_rows, mass, qs, inv_sum_p)

        def emit(cols: Tensor, u: Tensor, start=start) -> None:
            total = u.sum(0)  # [k] >= 1 - d
            out.index_copy_(0, cols + start, (u.index_select(0, perm) / total).t())
            sums.index_copy_(0, cols + start, total)

        _solve(up, down, rhs, plan.num_columns, damping=plan.damping, tol=plan.tol, max_iter=plan.max_iter,
               method=plan.method, emit=emit)
    return out, sums


class _PPRFunction(torch.autograd.Function):
    """Forward: :func:`_forward`; backward: the adjoint system, solved by the same iteration."""

    @staticmethod
    def forward(ctx, values: Tensor, plan: _Plan, is_dense: bool, inv_sum_p: Tensor):
        num_q = values.shape[0]
        dense, mass = (values, None) if is_dense else (None, values)
        out, sums = _forward(plan, dense, mass, inv_sum_p, num_q)
        ctx.plan, ctx.is_dense = plan, is_dense
        ctx.save_for_backward(out, sums, inv_sum_p)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        out, sums, inv_sum_p = ctx.saved_tensors
        plan = ctx.plan
        up, down = _parts(plan.op, adjoint=True)
        num_q = out.shape[0]
        grad_out = grad_out.to(plan.dtype)
        gamma = (grad_out * out).sum(1)  # [Q]: w = g - (g . x) 1
        scale = inv_sum_p / sums  # dL/dp = v / (sum(u) sum(p))
        width = ctx.plan.ids_rows.shape[1] if not ctx.is_dense else plan.num_rows
        grad = torch.empty(num_q, width, dtype=plan.dtype, device=out.device)
        perm = plan.rows_out
        if ctx.is_dense:  # gradient columns in node order (entities, facts, passages)
            g = plan.graph
            node_rows = _node_rows(torch.arange(g.num_entities + g.num_facts + g.num_passages, device=out.device),
                                   g.num_entities, g.num_facts, plan.num_columns)
        for start in range(0, num_q, plan.chunk):
            qs = slice(start, min(start + plan.chunk, num_q))
            w = qs.stop - qs.start
            gq = grad_out[qs].t()  # [n_out, w]
            rhs = torch.zeros(plan.num_rows, w, dtype=plan.dtype, device=out.device)
            rhs.index_add_(0, perm, gq)  # repeated nodes add up
            rhs -= gamma[qs].unsqueeze(0)

            def emit(cols: Tensor, v: Tensor, start=start) -> None:
                rows = cols + start
                v = v * scale[rows].unsqueeze(0)  # [C + H, k]
                if ctx.is_dense:
                    grad.index_copy_(0, rows, v.index_select(0, node_rows).t())
                else:
                    r = plan.ids_rows[rows]  # [k, R]
                    picked = v.t().gather(1, r.clamp(min=0))
                    grad.index_copy_(0, rows, torch.where(r >= 0, picked, 0.0))

            _solve(up, down, rhs, plan.num_columns, damping=plan.damping, tol=plan.tol, max_iter=plan.max_iter,
                   method=plan.method, emit=emit)
        return grad, None, None, None


def _check_options(damping, tol, max_iter, method, chunk_size, memory_budget_mb) -> None:
    if not isinstance(damping, (int, float)) or isinstance(damping, bool) or not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be a float in [0, 1) (got {damping!r})")
    if not isinstance(tol, (int, float)) or isinstance(tol, bool) or not tol >= 0.0:
        raise ValueError(f"tol must be a non-negative float (got {tol!r})")
    for name, value, low in (("max_iter", max_iter, 1), ("chunk_size", chunk_size, 0),
                             ("memory_budget_mb", memory_budget_mb, 0)):
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an int >= {low} (got {value!r})")
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)} (got {method!r})")


def _resolve_nodes(nodes, num_nodes: int, device: torch.device) -> Tensor | None:
    if nodes is None:
        return None
    if isinstance(nodes, slice):
        r = range(num_nodes)[nodes]
        return torch.arange(r.start, r.stop, r.step, device=device)
    if not isinstance(nodes, Tensor):
        raise TypeError(f"nodes must be None, a slice or an int64 tensor (got {type(nodes).__name__})")
    if nodes.dtype != torch.int64 or nodes.dim() != 1:
        raise ValueError(f"nodes must be a 1-D int64 tensor (got {nodes.dtype}, shape {tuple(nodes.shape)})")
    if nodes.device != device:
        raise ValueError(f"nodes must be on the graph's device {device} (got {nodes.device})")
    # boundary check (one sync): out-of-range ids would read another node's row
    if nodes.numel() and (int(nodes.min()) < 0 or int(nodes.max()) >= num_nodes):
        raise ValueError(f"nodes must lie in [0, {num_nodes}) (got range [{int(nodes.min())}, {int(nodes.max())}])")
    return nodes


def _check_rows(mass_sum: Tensor, bad: Tensor, name: str) -> None:
    # boundary checks (host syncs): a bad row would silently give NaN rows
    if bool(bad.any()):
        raise ValueError(f"{name} entries must be finite and non-negative (got a bad value in row "
                         f"{int(bad.nonzero()[0, 0])})")
    zero = mass_sum <= 0
    if bool(zero.any()):
        raise ValueError(f"every personalization row needs positive mass (got an all-zero row "
                         f"{int(zero.nonzero()[0, 0])})")


def personalized_pagerank(graph, personalization, *, damping: float = 0.85, tol: float = 1e-6,
                          max_iter: int = 100, nodes: slice | Tensor | None = None, method: str = "chebyshev",
                          chunk_size: int = 0, memory_budget_mb: int = 0) -> Tensor:
    """Personalised PageRank of every question at once on the entity-fact-passage star graph.

    Nodes are entities ``[0, V)``, facts ``[V, V + H)`` and passages ``[V + H, N)``; edges are the
    (fact, entity) incidences of ``graph`` (synonym-expanded) and fact-passage membership, all
    undirected with unit weight. Restart probability is ``1 - damping``; mass reaching a node
    without edges returns to the personalization (networkx's convention, ``dangling=None``), so
    the result equals ``networkx.pagerank(G, alpha=damping, personalization=p)`` per question.

    Questions are solved in chunks of ``Qc`` columns; each chunk iterates on ``[C, Qc]`` blocks
    with two SpMMs per iteration (module docstring). **Convergence is per column**: a question
    is finished at the first iteration whose L1 change of its entity/passage iterate is ``<= tol``
    (the whole-vector change is then at most ``(1 + damping) tol``); it is written out and dropped
    from the block, so it is not updated further and its result does not depend on the other
    questions or on the chunk size. A question still running after ``max_iter`` iterations
    returns its last iterate. The chunk stops when all its questions are finished.

    Differentiable with respect to the personalization (dense values or sparse mass): backward
    solves the adjoint system by the same iteration (same ``tol``, ``max_iter``), and keeps only
    the output, not the iterates.

    Args:
        graph: a :class:`hpengine.graph.HyperGraph`.
        personalization: either a float ``[Q, N]`` tensor of non-negative weights (rows are
            normalised inside), or a tuple ``(ids, mass)``: int64 ``[Q, R]`` node ids (``-1``
            padding; repeated ids add up) and float ``[Q, R]`` non-negative mass, so that no
            ``[Q, N]`` input is needed for large ``N``. An all-zero row is a ``ValueError`` naming
            the row.
        damping: ``d`` in ``[0, 1)`` (0.85).
        tol: per-question L1 change at which iteration stops (1e-6; use ~1e-12 in float64 checks).
        max_iter: most iterations per question (100). One iteration is two power-iteration steps
            of the star graph (``method="power"``).
        nodes: which columns to return: ``None`` (all ``N``), a ``slice`` of node ids or an int64
            ``[n]`` id tensor (any order, repeats allowed). The engine's PPR retriever asks for
            ``slice(V + H, N)`` (passages) or ``slice(V, N)`` (facts and passages), so only
            ``[Q, n]`` is ever held, never ``[Q, N]``. Values are the full solution's entries
            (rows of the result then sum to at most 1).
        method: ``"chebyshev"`` (the default: power iteration with Chebyshev acceleration; bench_ppr,
            H = 100k, Q = 1024, one thread: 16x per-question igraph against 5.5x for plain power
            iteration, at a smaller L1 error; ~3x fewer iterations) or ``"power"`` (plain power
            iteration). Both solve the same reduced system and reach the same fixed point.
        chunk_size: questions per chunk, 0 = derive from ``memory_budget_mb``
            (:func:`ppr_chunk_size`).
        memory_budget_mb: working memory of one chunk in MiB; 0: 1024 on the CPU, a share of the
            free memory on CUDA (:func:`~hpengine.retrieval._chunking.resolve_memory_budget_mb`).

    Returns:
        ``[Q, n]`` PPR mass (``n = N`` without ``nodes``) in the personalization's float dtype
        (computed in float32 for float16/bfloat16 inputs), on the inputs' device; without
        ``nodes`` each row sums to 1.

    Raises:
        ValueError: bad shapes, values (negative, non-finite, all-zero rows), options, or mixed
            devices. TypeError: wrong types.

    Shapes:
        ``[Q, N] -> [Q, n]`` or ``([Q, R] int64, [Q, R]) -> [Q, n]``; memory per chunk
        ``Qc * (N + 4 C + H + n)`` values (``C = V + P``).

    Example:
        >>> from hpengine.graph import HyperGraph
        >>> g = HyperGraph.from_incidence(torch.tensor([[0, 1], [0, 0]]), torch.tensor([0, 0]),
        ...                               num_entities=1, num_passages=1)  # N = 1 + 2 + 1 nodes
        >>> personalized_pagerank(g, torch.tensor([[1.0, 0.0, 0.0, 0.0]]), tol=1e-10)
        tensor([[0.3453, 0.2297, 0.2297, 0.1953]])
        >>> personalized_pagerank(g, (torch.tensor([[0]]), torch.tensor([[2.0]])), nodes=slice(3, 4), tol=1e-10)
        tensor([[0.1953]])
    """
    _check_options(damping, tol, max_iter, method, chunk_size, memory_budget_mb)
    device = graph.device
    memory_budget_mb = resolve_memory_budget_mb(memory_budget_mb, device, PPR_BUDGET_MB)
    v, h, p = graph.num_entities, graph.num_facts, graph.num_passages
    num_nodes = v + h + p
    if isinstance(personalization, tuple):
        if len(personalization) != 2:
            raise ValueError(f"sparse personalization must be a tuple (ids, mass) (got {len(personalization)} items)")
        ids, values = personalization
        if not isinstance(ids, Tensor) or not isinstance(values, Tensor):
            raise TypeError(f"personalization (ids, mass) must be tensors (got {type(ids).__name__}, "
                            f"{type(values).__name__})")
        if ids.dtype != torch.int64 or ids.dim() != 2:
            raise ValueError(f"personalization ids must be int64 [Q, R] (got {ids.dtype}, shape {tuple(ids.shape)})")
        if values.shape != ids.shape:
            raise ValueError(f"personalization mass must have the ids' shape {tuple(ids.shape)} "
                             f"(got {tuple(values.shape)})")
        is_dense = False
    elif isinstance(personalization, Tensor):
        ids, values, is_dense = None, personalization, True
        if values.dim() != 2 or values.shape[1] != num_nodes:
            raise ValueError(f"personalization must be [Q, N] with N = V + H + P = {num_nodes} "
                             f"(got shape {tuple(values.shape)})")
    else:
        raise TypeError(f"personalization must be a tensor or a tuple (ids, mass) "
                        f"(got {type(personalization).__name__})")
    if not values.dtype.is_floating_point:
        raise TypeError(f"personalization values must be floating point (got {values.dtype})")
    for name, t in (("personalization", values), ("personalization ids", ids)):
        if t is not None and t.device != device:
            raise ValueError(f"{name} must be on the graph's device {device} (got {t.device})")
    out_dtype = values.dtype
    dtype = out_dtype if out_dtype in (torch.float32, torch.float64) else torch.float32
    rows_out = _resolve_nodes(nodes, num_nodes, device)
    num_q = values.shape[0]
    num_out = num_nodes if rows_out is None else rows_out.numel()
    if num_q == 0:
        return values.new_zeros((0, num_out), dtype=out_dtype)
    work = values.to(dtype)
    if is_dense:
        mass_sum = work.detach().sum(1)
        _check_rows(mass_sum, ~torch.isfinite(work.detach()).all(1) | (work.detach() < 0).any(1), "personalization")
        ids_rows = None
    else:
        if ids.numel() and (int(ids.min()) < -1 or int(ids.max()) >= num_nodes):
            raise ValueError(f"personalization ids must lie in [0, {num_nodes}) or be -1 "
                             f"(got range [{int(ids.min())}, {int(ids.max())}])")
        valid = ids >= 0
        live = torch.where(valid, work, 0.0)
        bad = (valid & (~torch.isfinite(work) | (work < 0))).any(1)
        mass_sum = live.detach().sum(1)
        _check_rows(mass_sum, bad, "personalization mass")
        ids_rows = torch.where(valid, _node_rows(ids, v, h, v + p), -1)
    if rows_out is None:  # all nodes, in node order
        rows_out = torch.arange(num_nodes, device=device)
    perm = _node_rows(rows_out, v, h, v + p)  # [n] rows of the solver's layout
    chunk = ppr_chunk_size(num_q, num_nodes=num_nodes, num_columns=v + p, num_out=num_out,
                           memory_budget_mb=memory_budget_mb, chunk_size=chunk_size,
                           value_bytes=torch.finfo(dtype).bits // 8, device_type=device.type,
                           work_rows=graph.transition(dtype).b.work_rows())
    plan = _Plan(graph, dtype, float(damping), float(tol), max_iter, method, perm, chunk, ids_rows)
    inv_sum_p = mass_sum.reciprocal()
    if torch.is_grad_enabled() and work.requires_grad:
        out = _PPRFunction.apply(work, plan, is_dense, inv_sum_p)
    else:
        with torch.no_grad():
            out, _ = _forward(plan, work if is_dense else None, None if is_dense else work, inv_sum_p, num_q)
    return out.to(out_dtype)


__all__ = ["personalized_pagerank", "ppr_chunk_size"]
