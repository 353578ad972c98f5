"""Sorting integer keys, the step every sparse structure here is built by.

Each ``(row, col)`` pair of a structure is one int64 key ``row * num_cols + col``, so building a
CSR, its transpose or a coalesced pair list is a sort of key *values*, never an argsort: the sorted
keys decode back to the pairs. On CPU the sort is NumPy's (its SIMD sort sorts 7.6M int64 keys ~6x
faster than ``torch.sort``, measured by benchmarks/e2e/bench_structure.py); on other devices
it is ``torch.sort``. Both give the same result: a sort of values has one answer.
"""
from __future__ import annotations

import torch
from torch import Tensor


def sort_keys(keys: Tensor, *, inplace: bool = False) -> Tensor:
    """Ascending values of an integer ``keys [n]``.

    Args:
        keys: integer ``[n]`` tensor, any device.
        inplace: sort ``keys`` itself (no second ``[n]`` buffer) and return it.

    Returns:
        ``[n]`` sorted, same dtype and device.

    Example:
        >>> sort_keys(torch.tensor([3, 1, 2]))
        tensor([1, 2, 3])
    """
    if keys.dim() != 1 or keys.dtype.is_floating_point or keys.dtype == torch.bool:
        raise TypeError(f"sort_keys takes a 1-D integer tensor (got {keys.dtype} of shape {tuple(keys.shape)})")
    if keys.device.type != "cpu" or (inplace and not keys.is_contiguous()):
        return keys.copy_(torch.sort(keys).values) if inplace else torch.sort(keys).values
    out = keys if inplace else keys.contiguous().clone()
    out.numpy().sort()  # a view of out's memory: sorted in place
    return out


def unique_keys(keys: Tensor, *, inplace: bool = False) -> Tensor:
    """Sorted distinct values of an integer ``keys [n]`` (``torch.unique(keys, sorted=True)``).

    Args:
        keys: integer ``[n]``.
        inplace: sort ``keys`` itself (its contents are then the sorted keys, repeats included).

    Returns:
        ``[m]``, ``m <= n``.

    Example:
        >>> unique_keys(torch.tensor([3, 1, 3, 2]))
        tensor([1, 2, 3])
    """
    s = sort_keys(keys, inplace=inplace)
    if s.numel() < 2:
        return s.clone() if inplace else s
    first = torch.ones(s.numel(), dtype=torch.bool, device=s.device)
    torch.ne(s[1:], s[:-1], out=first[1:])
    return s[first]


def sorted_contains(keys: Tensor, probe: Tensor) -> Tensor:
    """Whether each value of ``probe`` is one of ``keys`` (sorted ascending), by one
    ``searchsorted`` (``torch.isin`` without sorting ``keys`` again).

    Shapes:
        keys ``[n]`` sorted, probe any shape -> bool, ``probe``'s shape.

    Example:
        >>> sorted_contains(torch.tensor([1, 4, 9]), torch.tensor([[4, 5], [9, 0]]))
        tensor([[ True, False],
                [ True, False]])
    """
    if not keys.numel():
        return torch.zeros_like(probe, dtype=torch.bool)
    at = torch.searchsorted(keys, probe).clamp_(max=keys.numel() - 1)
    return keys[at] == probe


__all__ = ["sort_keys", "sorted_contains", "unique_keys"]
