"""Passage ranking from an evidence chain, and bridge-entity selection (batched tensor code)."""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.sparse import gather_csr_rows


def first_occurrence(ids: Tensor) -> Tensor:
    """Mask of the first occurrence of each non-negative id in every row.

    Args:
        ids: int64 ``[Q, N]``, ``-1`` for padding.

    Returns:
        bool ``[Q, N]``: True where ``ids[q, n] >= 0`` and no earlier column of row q holds it.

    Example:
        >>> first_occurrence(torch.tensor([[3, 1, 3, -1, 1]]))
        tensor([[ True,  True, False, False, False]])
    """
    q, n = ids.shape
    if n == 0:
        return torch.zeros_like(ids, dtype=torch.bool)
    # sort each row by id, stable, so equal ids keep column order; the first of a run wins
    sorted_ids, order = torch.sort(ids, dim=1, stable=True)
    is_first_sorted = torch.ones_like(sorted_ids, dtype=torch.bool)
    is_first_sorted[:, 1:] = sorted_ids[:, 1:] != sorted_ids[:, :-1]
    mask = torch.zeros_like(is_first_sorted).scatter_(1, order, is_first_sorted)
    return mask & (ids >= 0)


def compact(ids: Tensor, keep: Tensor, width: int) -> Tensor:
    """Keep the ``keep`` entries of each row in order, left-aligned, ``-1`` padded to ``width``.

    Shapes:
        ids, keep: ``[Q, N]`` -> ``[Q, width]``.
    """
    q, n = ids.shape
    # stable sort puts kept columns first, in their original order
    order = torch.sort((~keep).to(torch.int8), dim=1, stable=True).indices
    out = torch.where(keep, ids, torch.full_like(ids, -1)).gather(1, order)
    if n >= width:
        return out[:, :width]
    return torch.cat([out, out.new_full((q, width - n), -1)], dim=1)


def rank_passages(chain_facts: Tensor, fact_passage: Tensor, dense_passages: Tensor, width: int,
                  facts_per_hop: int = 0, passages_per_hop: int = 0) -> Tensor:
    """Ranked passage ids per question: passages of the chain's facts (in chain order: by hop,
    then score), then the dense passage ranking to fill up; duplicates removed.

    With ``passages_per_hop > 0`` (and the chain laid out in blocks of ``facts_per_hop`` columns,
    one block per hop, as ``hyperprove_hop`` builds the frontier), only the first
    ``passages_per_hop`` new passages of each hop come first; the chain's other passages follow,
    still by hop then score, before the dense fill. This keeps one hop's many facts from one
    area of the corpus from pushing later hops' passages out of the top ranks.

    Args:
        chain_facts: int64 ``[Q, F]`` fact ids in chain order, ``-1`` padded.
        fact_passage: int64 ``[H]`` (sigma).
        dense_passages: int64 ``[Q, R]`` dense passage ranking, ``-1`` padded.
        width: passages to return per question.
        facts_per_hop: K, the width of each hop's block of ``chain_facts`` (needed for the cap).
        passages_per_hop: cap of leading passages per hop (0: no cap).

    Returns:
        int64 ``[Q, width]``, ``-1`` padded.
    """
    from_chain = torch.where(chain_facts >= 0, fact_passage[chain_facts.clamp_min(0)], torch.full_like(chain_facts, -1))
    ids = torch.cat([from_chain, dense_passages], dim=1)
    keep = first_occurrence(ids)
    if passages_per_hop > 0 and facts_per_hop > 0 and from_chain.shape[1] > 0:
        f = from_chain.shape[1]
        new = keep[:, :f].view(keep.shape[0], -1, facts_per_hop).to(torch.int64)
        rank_in_hop = (torch.cumsum(new, dim=2) - new).view(keep.shape[0], f)  # new passages before this one
        col = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
        secondary = torch.zeros_like(keep)
        secondary[:, :f] = rank_in_hop >= passages_per_hop
        dense_part = col >= f
        # order: capped chain passages, other chain passages, dense fill; column order within each
        priority = col + secondary.to(torch.int64) * ids.shape[1] + dense_part.to(torch.int64) * 2 * ids.shape[1]
        order = torch.argsort(torch.where(keep, priority, priority + 3 * ids.shape[1]), dim=1, stable=True)
        ids, keep = ids.gather(1, order), keep.gather(1, order)
    return compact(ids, keep, width)


def bridge_entities(fact_ids: Tensor, scores: Tensor, incidence_crow: Tensor, incidence_col: Tensor,
                    excluded: Tensor, num_entities: int, entity_weight: Tensor | None = None,
                    reduce: str = "sum") -> tuple[Tensor, Tensor]:
    """Best-supported entity of each question's selected facts (no-LLM bridge, SPEC §2 no-LLM mode).

    An entity's support is the sum of the (positive part of the) scores of the selected facts
    it occurs in; entities in ``excluded`` (e.g. named by the question) are skipped.

    Args:
        fact_ids: int64 ``[Q, K]`` selected facts, ``-1`` padded.
        scores: float ``[Q, K]`` their scores.
        incidence_crow, incidence_col: CSR arrays of the fact -> entity incidence ``[H, V]``.
        excluded: int64 ``[2, n]`` (question, entity) pairs that may not be chosen.
        num_entities: V.
        entity_weight: optional float ``[V]`` multiplier of each entity's support (e.g. an IDF
            that keeps hubs such as nationalities from winning; 0 bars an entity).
        reduce: ``"sum"`` of the supporting facts' scores, or ``"max"`` (the best fact naming it).

    Returns:
        ``(entity [Q], support [Q])``; entity ``-1`` and support 0 when no candidate exists.
    """
    q, k = fact_ids.shape
    flat = fact_ids.reshape(-1)
    rows, ents = gather_csr_rows(incidence_crow, incidence_col, flat)
    weight = scores.reshape(-1)[rows].clamp_min(0).float() + 1e-6  # a selected fact always gives some support
    if entity_weight is not None:
        weight = weight * entity_weight[ents]
    question = rows // k
    key = question * num_entities + ents
    uniq, inverse = torch.unique(key, return_inverse=True)
    if reduce not in ("sum", "max"):
        raise ValueError(f"reduce must be 'sum' or 'max' (got {reduce!r})")
    total = torch.zeros(uniq.numel(), device=flat.device)
    if reduce == "sum":
        total.index_add_(0, inverse, weight)
    else:
        total.scatter_reduce_(0, inverse, weight, reduce="amax")
    if excluded.numel():
        bad = excluded[0] * num_entities + excluded[1]
        total = torch.where(torch.isin(uniq, bad), torch.zeros_like(total), total)
    best = torch.full((q,), -1.0, device=flat.device)
    best = best.scatter_reduce(0, uniq // num_entities, total, reduce="amax")
    is_best = (total == best[uniq // num_entities]) & (total > 0)
    # lowest entity id among ties: deterministic
    choice = torch.full((q,), num_entities, dtype=torch.int64, device=flat.device)
    choice = choice.scatter_reduce(0, uniq[is_best] // num_entities, uniq[is_best] % num_entities, reduce="amin")
    found = choice < num_entities
    return torch.where(found, choice, torch.full_like(choice, -1)), torch.where(found, best, torch.zeros_like(best))
