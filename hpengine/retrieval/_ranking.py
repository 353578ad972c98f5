"""Passage ranking from an evidence chain, bridge-entity selection, and the row layouts they use
(batched tensor code: ids in, ids out)."""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.sparse import gather_csr_rows, sorted_contains, unique_keys

# homed bridge candidates score _HOMED_OFFSET + cosine in [1, 3], above any unhomed candidate's
# support / (1 + support) in (0, 1) (see linked_bridges)
_HOMED_OFFSET = 2.0


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
                  facts_per_hop: int = 0, passages_per_hop: int = 0, linked: Tensor | None = None) -> Tensor:
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
        linked: optional int64 ``[Q, T*B]`` passages linked to each hop (the home passages of its
            bridges, ``B`` per hop, ``-1`` padded); hop t's block is ranked right after hop t's
            facts, so the chain reads hop 1 facts, hop 1 bridges' articles, hop 2 facts, ...
            Needs ``facts_per_hop``.

    Returns:
        int64 ``[Q, width]``, ``-1`` padded.
    """
    from_chain = torch.where(chain_facts >= 0, fact_passage[chain_facts.clamp_min(0)], torch.full_like(chain_facts, -1))
    if linked is not None and linked.shape[1] > 0:
        if facts_per_hop <= 0 or from_chain.shape[1] % facts_per_hop:
            raise ValueError(f"linked passages need the chain in blocks of facts_per_hop (got {from_chain.shape[1]} "
                             f"chain columns, facts_per_hop={facts_per_hop})")
        q, hops = from_chain.shape[0], from_chain.shape[1] // facts_per_hop
        if hops == 0 or linked.shape[1] % hops:
            raise ValueError(f"linked has {linked.shape[1]} columns, not a multiple of the {hops} hops of the chain")
        from_chain = torch.cat([from_chain.view(q, hops, facts_per_hop), linked.view(q, hops, -1)], dim=2)
        facts_per_hop = from_chain.shape[2]
        from_chain = from_chain.reshape(q, -1)
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


def lead_then_fill(lead: Tensor, fill: Tensor, width: int) -> Tensor:
    """The distinct ids of ``lead``, then those of ``fill`` not already there, per row.

    Shapes:
        lead ``[Q, A]``, fill ``[Q, B]`` int64 (``-1`` padded) -> ``[Q, width]``, ``-1`` padded.

    Example:
        >>> lead_then_fill(torch.tensor([[4, -1, 4]]), torch.tensor([[2, 4, 3]]), 3)
        tensor([[4, 2, 3]])
    """
    merged = torch.cat([lead, fill], dim=1)
    return compact(merged, first_occurrence(merged), width)


def linked_passages(anchors: Tensor, candidates: Tensor, passage_crow: Tensor, passage_facts: Tensor,
                    fact_crow: Tensor, fact_col: Tensor, home_crow: Tensor, home_col: Tensor,
                    num_passages: int) -> Tensor:
    """Whether each candidate is linked from one of its question's anchors: the home passage of an
    entity that a fact of the anchor names (docs/methods/fusion.md#following-the-first-passages-links).

    Args:
        anchors: int64 ``[Q, A]`` passage ids, ``-1`` padded.
        candidates: int64 ``[Q, W]`` passage ids, ``-1`` padded.
        passage_crow, passage_facts: CSR ``[P, H]`` of each passage's facts.
        fact_crow, fact_col: CSR ``[H, V]`` of each fact's entities.
        home_crow, home_col: CSR ``[V, P]`` of each entity's home passages.
        num_passages: P.

    Returns:
        bool ``[Q, W]`` (False for padding and for a candidate that is one of its own anchors).

    Example:
        >>> crow = torch.tensor([0, 1, 1, 1]); col = torch.tensor([0])  # passage 0 holds fact 0
        >>> fe = (torch.tensor([0, 1]), torch.tensor([0]))  # fact 0 names entity 0
        >>> homes = (torch.tensor([0, 1]), torch.tensor([2]))  # entity 0's home is passage 2
        >>> linked_passages(torch.tensor([[0]]), torch.tensor([[1, 2]]), crow, col, *fe, *homes, 3)
        tensor([[False,  True]])
    """
    q, a = anchors.shape
    question = torch.arange(q, device=anchors.device).repeat_interleave(a)  # [Q * A]
    at, fact = gather_csr_rows(passage_crow, passage_facts, anchors.reshape(-1))
    at2, entity = gather_csr_rows(fact_crow, fact_col, fact)
    at3, home = gather_csr_rows(home_crow, home_col, entity)
    owner = question.index_select(0, at.index_select(0, at2.index_select(0, at3)))
    keys = unique_keys(owner.mul_(num_passages).add_(home), inplace=True)  # sorted (question, linked passage)
    probe = torch.arange(q, device=anchors.device).unsqueeze(1) * num_passages + candidates.clamp_min(0)
    found = sorted_contains(keys, probe)
    own = (candidates.unsqueeze(2) == anchors.unsqueeze(1)).any(2)
    return found & (candidates >= 0) & ~own


def named_passages(candidates: Tensor, title_keys: Tensor, owner: Tensor, keys: Tensor) -> Tensor:
    """Whether each candidate's title name is one of its question's name keys: the passages the
    question names (docs/methods/fusion.md#passages-the-question-names).

    Args:
        candidates: int64 ``[Q, W]`` passage ids, ``-1`` padded.
        title_keys: int64 ``[P]`` each passage's title-name key, ``-1`` for none
            (``IndexLookups.title_names``).
        owner: int64 ``[K]`` the question of each name key in ``keys``.
        keys: int64 ``[K]`` the name keys the questions hold (e.g. hashes of ``name_keys_in``).

    Returns:
        bool ``[Q, W]`` (False for padding and for a passage without a title name).

    Example:
        >>> named_passages(torch.tensor([[0, 1, -1], [2, 1, 0]]), torch.tensor([7, 8, -1]),
        ...                torch.tensor([0, 1]), torch.tensor([8, 7]))
        tensor([[False,  True, False],
                [False, False,  True]])
    """
    q, w = candidates.shape
    title = torch.where(candidates >= 0, title_keys.index_select(0, candidates.clamp_min(0).reshape(-1)).view(q, w), -1)
    values, ids = torch.unique(torch.cat([keys, title.reshape(-1)]), return_inverse=True)  # exact, dense ids
    held = unique_keys(owner * values.numel() + ids[: keys.numel()])  # sorted (question, key id)
    probe = torch.arange(q, device=candidates.device).unsqueeze(1) * values.numel() + ids[keys.numel():].view(q, w)
    return sorted_contains(held, probe) & (title != -1)


def anchor_positions(ranked: Tensor, first: int, named: Tensor | None = None, named_max: int = 0) -> Tensor:
    """The anchors of a ranking: its first ``first`` entries and, after them, its first
    ``named_max`` entries marked in ``named``.

    Shapes:
        ranked int64 ``[Q, W]`` (``-1`` padded), named bool ``[Q, W]`` -> bool ``[Q, W]``.

    Example:
        >>> anchor_positions(torch.tensor([[5, 6, 7, 8]]), 1, torch.tensor([[True, False, True, True]]), 1)
        tensor([[ True, False,  True, False]])
    """
    position = torch.arange(ranked.shape[1], device=ranked.device).expand_as(ranked)
    anchor = position < first
    if named is not None and named_max > 0:
        extra = named & ~anchor
        anchor = anchor | (extra & (torch.cumsum(extra.long(), dim=1) <= named_max))
    return anchor


def follow_links(ranked: Tensor, linked: Tensor, anchors: int | Tensor, moves: int) -> Tensor:
    """A ranking with its anchors first (in their order), then its first ``moves`` linked entries
    that are not anchors (in their order), then every other entry in its order.

    Args:
        ranked: int64 ``[Q, W]``.
        linked: bool ``[Q, W]``.
        anchors: the first ``anchors`` entries (an int), or bool ``[Q, W]`` marking them
            (:func:`anchor_positions`).
        moves: linked entries moved up behind the anchors.

    Returns:
        int64 ``[Q, W]``.

    Example:
        >>> follow_links(torch.tensor([[5, 6, 7, 8]]), torch.tensor([[False, False, True, True]]), 1, 1)
        tensor([[5, 7, 6, 8]])
        >>> follow_links(torch.tensor([[5, 6, 7, 8]]), torch.tensor([[False, True, False, False]]),
        ...              torch.tensor([[True, False, True, False]]), 1)
        tensor([[5, 7, 6, 8]])
    """
    w = ranked.shape[1]
    position = torch.arange(w, device=ranked.device).expand_as(ranked)
    anchor = position < anchors if isinstance(anchors, int) else anchors
    movable = linked & ~anchor
    moved = movable & (torch.cumsum(movable.long(), dim=1) <= moves)
    key = torch.where(anchor, position, torch.where(moved, w, 2 * w) + position)
    return ranked.gather(1, torch.argsort(key, dim=1, stable=True))


def lead_passages(lead_facts: Tensor, fact_passage: Tensor, ranked: Tensor, count: int) -> Tensor:
    """Put the first ``count`` distinct passages of ``lead_facts`` ahead of a ranking (duplicates
    removed, width kept).

    Args:
        lead_facts: int64 ``[Q, K]`` fact ids, best first, ``-1`` padded (e.g. a hop on the
            whole question).
        fact_passage: int64 ``[H]`` (sigma).
        ranked: int64 ``[Q, W]`` a passage ranking, ``-1`` padded.
        count: leading passages to take from ``lead_facts`` (0: ``ranked`` unchanged).

    Returns:
        int64 ``[Q, W]``.

    Example:
        >>> lead_passages(torch.tensor([[0, 1, 2]]), torch.tensor([7, 7, 5]), torch.tensor([[3, 5, 4]]), 1)
        tensor([[7, 3, 5]])
    """
    if count <= 0:
        return ranked
    lead = torch.where(lead_facts >= 0, fact_passage[lead_facts.clamp_min(0)], torch.full_like(lead_facts, -1))
    lead = compact(lead, first_occurrence(lead), count)
    return lead_then_fill(lead, ranked, ranked.shape[1])


def bridge_entities(fact_ids: Tensor, scores: Tensor, incidence_crow: Tensor, incidence_col: Tensor,
                    excluded: Tensor, num_entities: int, entity_weight: Tensor | None = None,
                    reduce: str = "sum", support_floor: float = 1e-6) -> tuple[Tensor, Tensor]:
    """Best-supported entity of each question's selected facts (the no-LLM bridge,
    docs/methods/index.md#no-llm-answer-bridge-entities).

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
        support_floor: added to every fact's (positive part of the) score, so that a selected
            fact scored <= 0 still nominates its entities.

    Returns:
        ``(entity [Q], support [Q])``; entity ``-1`` and support 0 when no candidate exists.
    """
    q = fact_ids.shape[0]
    question, entity, support = _candidate_support(fact_ids, scores, incidence_crow, incidence_col, excluded,
                                                   num_entities, entity_weight, reduce, support_floor)
    best = torch.zeros(q, device=fact_ids.device).scatter_reduce(0, question, support, reduce="amax")
    is_best = support == best[question]
    # lowest entity id among ties: deterministic
    choice = torch.full((q,), num_entities, dtype=torch.int64, device=fact_ids.device)
    choice = choice.scatter_reduce(0, question[is_best], entity[is_best], reduce="amin")
    found = choice < num_entities
    return torch.where(found, choice, torch.full_like(choice, -1)), torch.where(found, best, torch.zeros_like(best))


def _candidate_support(fact_ids: Tensor, scores: Tensor, incidence_crow: Tensor, incidence_col: Tensor,
                       excluded: Tensor, num_entities: int, entity_weight: Tensor | None,
                       reduce: str, support_floor: float) -> tuple[Tensor, Tensor, Tensor]:
    """(question, entity) candidate pairs of the selected facts and their support.

    Returns:
        ``(question [n], entity [n], support [n])``, sorted by (question, entity); pairs that are
        excluded or weighted 0 are dropped.
    """
    if reduce not in ("sum", "max"):
        raise ValueError(f"reduce must be 'sum' or 'max' (got {reduce!r})")
    q, k = fact_ids.shape
    rows, ents = gather_csr_rows(incidence_crow, incidence_col, fact_ids.reshape(-1))
    weight = scores.reshape(-1)[rows].clamp_min(0).float() + support_floor  # a selected fact always gives some support
    if entity_weight is not None:
        weight = weight * entity_weight[ents]
    key = (rows // k) * num_entities + ents
    uniq, inverse = torch.unique(key, return_inverse=True)
    total = torch.zeros(uniq.numel(), device=fact_ids.device)
    if reduce == "sum":
        total.index_add_(0, inverse, weight)
    else:
        total.scatter_reduce_(0, inverse, weight, reduce="amax")
    keep = total > 0
    if excluded.numel():
        keep &= ~torch.isin(uniq, excluded[0] * num_entities + excluded[1])
    uniq, total = uniq[keep], total[keep]
    return uniq // num_entities, uniq % num_entities, total


def best_home(question: Tensor, entity: Tensor, home_crow: Tensor, home_col: Tensor, query_emb: Tensor,
               passage_emb: Tensor | None) -> tuple[Tensor, Tensor]:
    """For each (question, entity) pair: the entity's home passage (a passage titled with its
    name) most similar to the question, and that cosine.

    Returns:
        ``(passage [n], cosine [n])``; passage ``-1`` (cosine ``-inf``) for entities without a home.
        Among equally similar homes the lowest passage id wins; without passage embeddings every
        home scores 0.
    """
    n = entity.numel()
    pair, passage = gather_csr_rows(home_crow, home_col, entity)
    if passage_emb is None:
        cos = torch.zeros(pair.numel(), device=entity.device)
    else:
        cos = (query_emb[question[pair]].float() * passage_emb[passage].float()).sum(-1)
    best = torch.full((n,), float("-inf"), device=entity.device).scatter_reduce(0, pair, cos, reduce="amax")
    is_best = cos == best[pair]
    home = torch.full((n,), torch.iinfo(torch.int64).max, dtype=torch.int64, device=entity.device)
    home = home.scatter_reduce(0, pair[is_best], passage[is_best], reduce="amin")
    return torch.where(torch.isfinite(best), home, torch.full_like(home, -1)), best


def linked_bridges(fact_ids: Tensor, scores: Tensor, incidence_crow: Tensor, incidence_col: Tensor,
                   excluded: Tensor, num_entities: int, num_bridges: int, *, home_crow: Tensor, home_col: Tensor,
                   query_emb: Tensor, passage_emb: Tensor | None, entity_weight: Tensor | None = None,
                   reduce: str = "sum", support_floor: float = 1e-6) -> tuple[Tensor, Tensor, Tensor]:
    """The ``num_bridges`` best bridge entities of each question's selected facts, looking one
    step ahead through the passages the entities are the subject of (the no-LLM bridge,
    docs/methods/index.md#no-llm-answer-bridge-entities).

    Candidates are the entities named by the selected facts, less ``excluded`` pairs and
    entities weighted 0. A candidate that is the title of a passage (its *home*: in a corpus of
    Wikipedia-style articles, the article about it) is scored by the cosine between the question
    and its best home passage: the bridge a multi-hop question needs is the one whose article
    answers the rest of it ("the director of film X" -> the director, whose article holds the
    birthplace the question asks for). Candidates with a home always rank above those without;
    the latter are ordered by support (as :func:`bridge_entities`). Ties go to the lower entity id.

    Args:
        fact_ids: int64 ``[Q, K]`` selected facts, ``-1`` padded.
        scores: float ``[Q, K]`` their scores.
        incidence_crow, incidence_col: CSR of the fact -> entity incidence ``[H, V]``.
        excluded: int64 ``[2, n]`` (question, entity) pairs that may not be chosen.
        num_entities: V.
        num_bridges: B, bridges returned per question.
        home_crow, home_col: CSR of entity -> home passages ``[V, P]``.
        query_emb: float ``[Q, D]`` normalised question embeddings.
        passage_emb: float ``[P, D]`` normalised passage embeddings (None: homes score 0).
        entity_weight: optional float ``[V]`` support multiplier (0 bars an entity).
        reduce: ``"sum"`` or ``"max"`` of the supporting facts' scores.
        support_floor: see :func:`bridge_entities`.

    Returns:
        ``(entity [Q, B], home [Q, B], value [Q, B])``: best first, ``-1`` padded (home ``-1`` also
        for a bridge without a home); value is ``2 + cosine`` for bridges with a home and
        ``support / (1 + support)`` (in (0, 1)) for the others, 0 for padding. The offset 2 is
        what puts every homed candidate first with one sort: a cosine lies in [-1, 1], so
        ``2 + cosine`` lies in [1, 3], above every ``support / (1 + support)`` < 1.
    """
    q = fact_ids.shape[0]
    question, entity, support = _candidate_support(fact_ids, scores, incidence_crow, incidence_col, excluded,
                                                   num_entities, entity_weight, reduce, support_floor)
    home, cos = best_home(question, entity, home_crow, home_col, query_emb, passage_emb)
    value = torch.where(home >= 0, _HOMED_OFFSET + cos, support / (1.0 + support))
    # best first within each question; pairs come sorted by (question, entity), so stable sorts keep
    # the lower entity id first among equal values
    order = torch.argsort(value, descending=True, stable=True)
    order = order[torch.argsort(question[order], stable=True)]
    question, entity, home, value = question[order], entity[order], home[order], value[order]
    counts = torch.bincount(question, minlength=q)
    rank = torch.arange(question.numel(), device=question.device) - torch.repeat_interleave(
        torch.cumsum(counts, 0) - counts, counts)
    keep = rank < num_bridges
    slot = question[keep] * num_bridges + rank[keep]
    out_entity = torch.full((q * num_bridges,), -1, dtype=torch.int64, device=fact_ids.device)
    out_home = torch.full_like(out_entity, -1)
    out_value = torch.zeros(q * num_bridges, device=fact_ids.device)
    out_entity[slot], out_home[slot], out_value[slot] = entity[keep], home[keep], value[keep]
    return (out_entity.view(q, num_bridges), out_home.view(q, num_bridges), out_value.view(q, num_bridges))


def pad_rows(row: Tensor, values: list, num_rows: int, fill: list) -> list:
    """Group flat entries by row into left-aligned ``[num_rows, R]`` blocks (R = the largest row).

    Args:
        row: int64 ``[n]`` row of each entry, sorted ascending.
        values: tensors ``[n]`` to lay out.
        num_rows: number of rows.
        fill: padding value per tensor of ``values``.

    Returns:
        one ``[num_rows, R]`` tensor per tensor of ``values``.

    Example:
        >>> pad_rows(torch.tensor([0, 0, 2]), [torch.tensor([5, 6, 7])], 3, [-1])
        [tensor([[ 5,  6],
                [-1, -1],
                [ 7, -1]])]
    """
    counts = torch.bincount(row, minlength=num_rows)
    width = int(counts.max()) if row.numel() else 0  # host sync: the block width, once per batch
    start = torch.cumsum(counts, 0) - counts
    pos = torch.arange(row.numel(), device=row.device) - start[row]
    out = []
    for v, f in zip(values, fill):
        block = v.new_full((num_rows, width), f)
        block[row, pos] = v
        out.append(block)
    return out
