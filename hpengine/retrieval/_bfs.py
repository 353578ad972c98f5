"""Bounded breadth-first search on dense local blocks, all questions at once."""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.sparse import expand_frontier


def batched_bfs(adjacency: Tensor, sources: Tensor, depth: int, *, reverse: bool = False) -> Tensor:
    """Hop distances from (or, with ``reverse``, to) a set of source slots, at most ``depth`` hops.

    Each round is one batched matrix product with the block (``[Q, M, M] x [Q, M, B]``) and a
    comparison, so the loop runs over rounds, never over questions; it always runs ``depth``
    rounds (no data-dependent early exit, so no host sync). ``B`` independent searches over the
    same block share each read of it (the hop runs its two searches this way when the block is
    symmetric). On CUDA with ``HPENGINE_KERNELS=on`` a Triton kernel tests the edges of each round
    without the product (:func:`hpengine.sparse.expand_frontier`: the same distances).

    Args:
        adjacency: ``[Q, M, M]`` floating block; an edge ``i -> j`` is ``adjacency[q, i, j] > 0``
            (threshold the block beforehand; entries must be ``>= 0``).
        sources: ``[Q, M]`` bool, the slots at distance 0; or ``[Q, M, B]`` for ``B`` searches.
        depth: most hops (``>= 0``).
        reverse: follow edges backwards, giving the distance from each slot *to* the nearest
            source (forwards: *from* the nearest source).

    Returns:
        int64 of the shape of ``sources``: hop count, ``-1`` when farther than ``depth`` or
        unreachable.

    Shapes:
        ``[Q, M, M], [Q, M] -> [Q, M]``; ``[Q, M, M], [Q, M, B] -> [Q, M, B]``.

    Example:
        >>> a = torch.tensor([[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]])
        >>> batched_bfs(a, torch.tensor([[True, False, False]]), 2)
        tensor([[0, 1, 2]])
        >>> batched_bfs(a, torch.tensor([[False, False, True]]), 1, reverse=True)
        tensor([[-1,  1,  0]])
    """
    if adjacency.dim() != 3 or adjacency.shape[1] != adjacency.shape[2]:
        raise ValueError(f"adjacency must be [Q, M, M] (got shape {tuple(adjacency.shape)})")
    if sources.dim() not in (2, 3) or sources.shape[:2] != adjacency.shape[:2] or sources.dtype != torch.bool:
        raise ValueError(f"sources must be a bool [Q, M] or [Q, M, B] mask with [Q, M] = {list(adjacency.shape[:2])} "
                         f"(got {sources.dtype} {tuple(sources.shape)})")
    if sources.device != adjacency.device:
        raise ValueError(f"sources must be on the adjacency's device {adjacency.device} (got {sources.device})")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"depth must be a non-negative int (got {depth!r})")
    single = sources.dim() == 2
    reached = sources.unsqueeze(2) if single else sources  # [Q, M, B]
    reached = reached.clone()
    distance = torch.where(reached, 0, -1)
    for step in range(1, depth + 1):  # rounds, never questions
        # a batched product (on CUDA with HPENGINE_KERNELS=on the Triton kernel, hpengine.sparse)
        hit = expand_frontier(adjacency, reached, reverse=reverse)
        new = hit & ~reached
        distance.masked_fill_(new, step)
        reached |= new
    return distance.squeeze(2) if single else distance
