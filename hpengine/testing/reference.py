"""Slow, obviously correct reference implementations (dense float64, per-question Python).

Fast paths in hpengine are tested against these. Nothing here is used by the library.
"""
from __future__ import annotations

import torch
from torch import Tensor


def dense_incidence(fact_entity: Tensor, fact_passage: Tensor, num_entities: int, num_passages: int):
    """Dense float64 ``B_he [H, V]`` and ``B_hd [H, P]`` (duplicate pairs count once)."""
    num_facts = fact_passage.numel()
    b_he = torch.zeros(num_facts, num_entities, dtype=torch.float64)
    if fact_entity.numel():
        b_he[fact_entity[0].cpu(), fact_entity[1].cpu()] = 1.0
    b_hd = torch.zeros(num_facts, num_passages, dtype=torch.float64)
    b_hd[torch.arange(num_facts), fact_passage.cpu()] = 1.0
    return b_he, b_hd


def dense_structural_weights(fact_entity: Tensor, fact_passage: Tensor, num_entities: int,
                             num_passages: int) -> Tensor:
    """``W_s = B_he D_e^-1 B_he^T + B_hd D_d^-1 B_hd^T`` straight from the definition (SPEC §1.5)."""
    b_he, b_hd = dense_incidence(fact_entity, fact_passage, num_entities, num_passages)
    d_e, d_d = b_he.sum(0), b_hd.sum(0)
    inv_e = torch.where(d_e > 0, 1.0 / d_e, torch.zeros_like(d_e))
    inv_d = torch.where(d_d > 0, 1.0 / d_d, torch.zeros_like(d_d))
    return b_he @ torch.diag(inv_e) @ b_he.T + b_hd @ torch.diag(inv_d) @ b_hd.T


def row_normalize(w: Tensor) -> Tensor:
    """Divide each row by its sum; all-zero rows stay zero."""
    s = w.sum(-1, keepdim=True)
    return torch.where(s > 0, w / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(w))


def dense_transition(fact_entity: Tensor, fact_passage: Tensor, num_entities: int, num_passages: int) -> Tensor:
    """``T_s = RowNormalize(W_s - diag(W_s))`` as a dense float64 ``[H, H]`` matrix."""
    w = dense_structural_weights(fact_entity, fact_passage, num_entities, num_passages)
    w = w - torch.diag(torch.diag(w))
    return row_normalize(w)


def dense_local_block(t_dense: Tensor, ids: list[int], size: int) -> Tensor:
    """``T*``: ``T_s`` restricted to ``ids`` (in order) and row-normalised again, zero-padded to ``size``.

    Repeated ids are distinct slots whose mutual entries are 0 (T_s has a zero diagonal).
    """
    out = torch.zeros(size, size, dtype=torch.float64)
    n = len(ids)
    for a in range(n):
        for b in range(n):
            if ids[a] != ids[b]:
                out[a, b] = t_dense[ids[a], ids[b]]
    return row_normalize(out)
