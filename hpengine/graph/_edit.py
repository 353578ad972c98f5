"""Delete and update passages of an index (docs/methods/index.md#delete-and-update).

Both return the index that a from-scratch build on the edited corpus returns (passages in index
order, a deleted one left out, an updated one in its place with its new text), without
re-extracting or re-embedding the passages that stay:

- facts of the deleted / replaced passages go; the replacements' facts are extracted and embedded;
  facts, entities and passages are renumbered compactly in scratch order (entities by first
  appearance), their kept embedding rows reused;
- an entity that no remaining fact uses goes. A name is displayed as its first mention is; when
  the first mention of a kept entity goes, the passage of its new first mention is extracted again
  to read that mention's form (a case variant is a new name, so it is embedded again);
- synonym pairs: ``synonym_max_per_entity`` caps each name's nearest neighbours, so removing a
  name can admit another one into a kept name's list and adding one can push one out. The names
  whose capped lists can change (a neighbour went, or a changed name is within eta of them), and
  their neighbours, are searched again with the build's search; every other pair is kept;
- degrees and the transition matrices are derived again from the incidence (``Index.graph``).

Equal means every text and integer tensor, and every embedding when the encoder embeds a text the
same whatever its batch (the tests' hashing encoder). A transformer encoder pads each batch to its
longest text, so its new rows can differ from a scratch build's in the last bits, as with
:func:`~hpengine.graph.add_passages`.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import Tensor

from hpengine._profiling import StageTimer
from hpengine.config import EncoderConfig, GraphConfig
from hpengine.errors import UserError
from hpengine.graph._builder import _assemble, _encode, synonym_eligible, _synonyms_of
from hpengine.graph._corpus import Passage
from hpengine.graph._index import Index
from hpengine.graph._synonyms import symmetrize_pairs, synonym_pairs
from hpengine.models import entity_key, normalize_entity

#: synonym backends whose search is exact, so re-searching some names gives the rows a full
#: search gives; with an approximate one (or ``auto`` above ``synonym_exact_max_keys``) an edit
#: runs the full search, as a scratch build does
_EXACT_BACKENDS = ("torch", "faiss")
#: BLAS kernels round a product row differently when a matmul has few rows (MKL: under 12, or
#: not a multiple of 4; FAISS: under 20 queries), so re-searched names go in blocks of at least
#: this many rows, and a block of the full search smaller than it is searched whole, as it was
#: (calibrated on CPU; cuBLAS picks kernels by shape, so on CUDA a pair within rounding of eta
#: or of the cap's last cosine can still differ)
_MIN_ROWS = 64


# ------------------------------------------------------------------ selection
def find_passages(index: Index, *, ids=None, titles=None, passages=None) -> list:
    """Passage ids (positions in ``index.passages``) named by ids, titles or passage records.

    Args:
        index: the index.
        ids: passage ids.
        titles: titles; a title selects every passage that has it.
        passages: :class:`Passage` records: each selects the passage with its title and text,
            else the one passage with its title.

    Returns:
        sorted, unique passage ids.

    Raises:
        UserError: nothing named, an id out of range, a title no passage has, a record that
            matches no passage or whose title names several (with other text).

    Example:
        >>> from hpengine.graph import build_index
        >>> from hpengine.testing._fakes import HashingEncoder, ListExtractor
        >>> corpus = [Passage("A", "one"), Passage("B", "two"), Passage("A", "three")]
        >>> index, _ = build_index(corpus, extractor=ListExtractor({}), encoder=HashingEncoder())
        >>> find_passages(index, titles=["A"]), find_passages(index, ids=[1], passages=[Passage("A", "three")])
        ([0, 2], [1, 2])
    """
    selected = set(_checked_ids(index, ids or ()))
    by_title = _ids_by_title(index)
    titles = list(titles or ())
    unknown = [t for t in titles if t not in by_title]
    if unknown:
        raise UserError(f"{len(unknown)} of {len(titles)} titles name no passage of the index (first: {unknown[0]!r}; "
                        f"titles match exactly, case included) (got titles={titles!r:.200})")
    for t in titles:
        selected.update(by_title[t])
    selected.update(_match_record(index, by_title, p) for p in passages or ())
    if not selected:
        raise UserError("nothing to select: name passages by ids=, titles= or a corpus file (got none)")
    return sorted(selected)


def _checked_ids(index: Index, ids) -> list:
    ids = list(ids)
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < index.num_passages:
            raise UserError(f"passage ids are positions 0..{index.num_passages - 1} in the index (got {i!r})")
    return ids


def _ids_by_title(index: Index) -> dict:
    by_title = defaultdict(list)
    for i, p in enumerate(index.passages):
        by_title[p.title].append(i)
    return by_title


def _match_record(index: Index, by_title: dict, record: Passage) -> int:
    """The id of the passage ``record`` names: same title and text, else the one with its title."""
    ids = by_title.get(record.title, [])
    same = [i for i in ids if index.passages[i].text == record.text]
    if same:
        return same[0]
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise UserError(f"no passage of the index has title {record.title!r} (titles match exactly, case included) "
                        f"(got a record with that title)")
    raise UserError(f"title {record.title!r} names {len(ids)} passages (ids {ids[:8]}) and none has the record's "
                    f"text; name them by id (got text {record.text!r:.60})")


def _match_updates(index: Index, passages: list, ids) -> tuple[dict, int]:
    """``({passage id: new passage}, unchanged)``: the passages an update replaces, by title or ``ids``."""
    if not passages:
        raise UserError("an update needs at least one passage (got none)")
    if ids is not None:
        targets = _checked_ids(index, ids)
        if len(targets) != len(passages):
            raise UserError(f"ids= gives the passage each record replaces, one per record (got {len(targets)} ids "
                            f"for {len(passages)} records)")
    else:
        by_title = _ids_by_title(index)
        targets = [_unique_title(by_title, p.title) for p in passages]
    seen = {}
    for target, p in zip(targets, passages):
        if target in seen:
            raise UserError(f"passage {target} ({index.passages[target].title!r}) is updated twice (got records "
                            f"{seen[target]} and {len(seen)})")
        seen[target] = len(seen)
    replaced = {t: p for t, p in zip(targets, passages) if p != index.passages[t]}
    _check_no_duplicates(index, replaced)
    return replaced, len(passages) - len(replaced)


def _unique_title(by_title: dict, title: str) -> int:
    ids = by_title.get(title, [])
    if len(ids) != 1:
        what = "no passage" if not ids else f"{len(ids)} passages (ids {ids[:8]})"
        raise UserError(f"an update matches its records by title, and {title!r} names {what} of the index; "
                        f"give ids= (one passage id per record) (got title {title!r})")
    return ids[0]


def _check_no_duplicates(index: Index, replaced: dict) -> None:
    """A scratch build keeps one of two equal passages; an update must not make two."""
    seen = {}
    for i, p in enumerate(index.passages):
        p = replaced.get(i, p)
        if (p.title, p.text) in seen:
            raise UserError(f"the update makes passages {seen[(p.title, p.text)]} and {i} equal (title {p.title!r}); "
                            f"delete one instead (got the same title and text twice)")
        seen[(p.title, p.text)] = i


# ------------------------------------------------------------------ public API
def delete_passages(index: Index, *, ids=None, titles=None, passages=None, extractor=None, encoder=None,
                    graph_cfg: GraphConfig | None = None, progress: bool = False):
    """Remove passages from ``index``; the result equals a from-scratch build on the rest.

    Nothing that stays is re-extracted or re-embedded, with one exception: when the first mention
    of a kept entity is deleted, the passage of its new first mention is extracted again to read
    how that mention writes the name (``reread_passages`` in the report), and a name that reads
    differently (another case) is embedded again. Only then are ``extractor`` and ``encoder``
    used. Equality holds for an exact synonym search (``torch``, ``faiss``, or ``auto`` up to
    ``synonym_exact_max_keys`` names); above that the full approximate search runs, as a scratch
    build's does. GRAG parts are dropped and the meta marks them stale (``grag_stale``).

    Args:
        index: the index (not changed).
        ids, titles, passages: what to delete (see :func:`find_passages`).
        extractor: the index's extractor (``extract(passages, progress)``).
        encoder: the index's encoder (``encode(texts, kind=, progress=)``, ``name``).
        graph_cfg: synonym settings; with ``synonym_threshold`` unset, the index's eta.
        progress: progress bars.

    Returns:
        ``(new_index, report)``; the report counts what went and what was searched again.

    Raises:
        UserError: a selection :func:`find_passages` refuses, or one that would delete every
            passage; checked before any work.
        ValueError: a re-read is needed without ``extractor``/``encoder``, or ``encoder`` (when a
            name is embedded again) is not the index's.

    Example:
        >>> from hpengine.graph import build_index
        >>> from hpengine.testing._fakes import HashingEncoder, ListExtractor
        >>> table = {"A": [("A met B.", ["A", "B"])], "B": [("B met C.", ["B", "C"])]}
        >>> kw = dict(extractor=ListExtractor(table), encoder=HashingEncoder())
        >>> index, _ = build_index([Passage("A", "a"), Passage("B", "b")], **kw)
        >>> smaller, report = delete_passages(index, titles=["A"], **kw)
        >>> smaller.entities, report["removed_facts"]
        (['B', 'C'], 1)
    """
    deleted = find_passages(index, ids=ids, titles=titles, passages=passages)
    if len(deleted) == index.num_passages:
        raise UserError(f"deleting all {index.num_passages} passages would leave the index empty; build a new index "
                        f"instead (got {len(deleted)} of {index.num_passages} passages selected)")
    return _edit(index, deleted, {}, extractor=extractor, encoder=encoder, graph_cfg=graph_cfg, progress=progress,
                 what="delete")


def update_passages(index: Index, passages: list, *, extractor, encoder, ids=None,
                    graph_cfg: GraphConfig | None = None, progress: bool = False):
    """Replace the text of passages of ``index``; the result equals a from-scratch build on the
    corpus with the new texts in place.

    Only the replaced passages are extracted and embedded (and, as in :func:`delete_passages`,
    the passages holding a kept entity's new first mention are extracted again). A record whose
    title and text equal its passage's changes nothing (``unchanged_passages``).

    Args:
        index: the index (not changed).
        passages: the new :class:`Passage` records.
        extractor, encoder: the index's extractor and encoder.
        ids: the passage id each record replaces (default: the one passage with its title).
        graph_cfg: synonym settings; with ``synonym_threshold`` unset, the index's eta.
        progress: progress bars.

    Returns:
        ``(new_index, report)``.

    Raises:
        UserError: no records, a title that names no passage or several (without ``ids``), bad
            ``ids``, a passage updated twice, or an update making two passages equal; checked
            before any work.
        ValueError: ``encoder`` is not the index's.

    Example:
        >>> from hpengine.graph import build_index
        >>> from hpengine.testing._fakes import HashingEncoder, ListExtractor
        >>> table = {"A": [("A met B.", ["A", "B"])], "A2": [("A met C.", ["A", "C"])]}
        >>> kw = dict(extractor=ListExtractor(table), encoder=HashingEncoder())
        >>> index, _ = build_index([Passage("A", "a")], **kw)
        >>> updated, _ = update_passages(index, [Passage("A2", "a, again")], ids=[0], **kw)
        >>> updated.facts, updated.entities
        (['A met C.'], ['A', 'C'])
    """
    replaced, unchanged = _match_updates(index, list(passages), ids)
    _check_encoder(index, encoder)
    new_index, report = _edit(index, [], replaced, extractor=extractor, encoder=encoder, graph_cfg=graph_cfg,
                              progress=progress, what="update")
    report["unchanged_passages"] = unchanged
    return new_index, report


def _check_encoder(index: Index, encoder) -> None:
    if encoder.name != index.meta.get("encoder"):
        raise ValueError(f"index was built with encoder {index.meta.get('encoder')!r}; cannot edit it with "
                         f"{encoder.name!r}")


def _graph_config(index: Index, graph_cfg: GraphConfig | None, encoder) -> GraphConfig:
    """``graph_cfg`` with eta resolved as :func:`~hpengine.graph.add_passages` does."""
    graph_cfg = graph_cfg or GraphConfig()
    eta = graph_cfg.synonym_threshold
    if eta is None:
        eta = index.meta.get("synonym_threshold")
    if eta is None:
        eta = getattr(encoder, "synonym_threshold", EncoderConfig.synonym_threshold)
    return dataclasses.replace(graph_cfg, synonym_threshold=float(eta))


# ------------------------------------------------------------------ the edit
@dataclass
class _Fresh:
    """The replacement passages' extraction, numbered as :func:`_assemble` numbers it."""

    old_pid: Tensor  # int64 [F_p] old id of each replaced passage, increasing
    facts: list  # fact texts
    fact_passage: Tensor  # int64 [H_f] row of old_pid of each fact
    pairs: Tensor  # int64 [2, n_f] (fresh fact, unified entity id)
    displays: list  # display name of each pair's mention
    new_entities: list  # display names of the new keys (unified ids V_old, V_old + 1, ...)


@dataclass
class _Pairs:
    """Every kept and fresh (fact, entity) pair in scratch order."""

    fact: Tensor  # int64 [n] new fact id
    entity: Tensor  # int64 [n] unified entity id (old ids, then the new keys)
    old_pos: Tensor  # int64 [n] column in the old fact_entity_raw, -1 for a fresh pair
    fresh_pos: Tensor  # int64 [n] row of _Fresh.displays, -1 for a kept pair


def _edit(index: Index, deleted: list, replaced: dict, *, extractor, encoder, graph_cfg, progress: bool, what: str):
    """The scratch build of ``index``'s passages without ``deleted``, with ``replaced`` (id -> new
    passage) in place; see the module docstring."""
    cfg = _graph_config(index, graph_cfg, encoder)
    timer = StageTimer(index.device)
    device = index.device
    is_deleted = _mask(deleted, index.num_passages, device)
    new_pid = torch.cumsum(~is_deleted, 0) - 1  # [P_old] new passage id (deleted: unused)
    with timer.stage("extract"):
        fresh = _extract_fresh(index, replaced, extractor, progress)
    kept, comb_pid, order = _fact_order(index, is_deleted | _mask(sorted(replaced), index.num_passages, device),
                                        new_pid, fresh)
    new_of_comb = torch.empty_like(order)
    new_of_comb[order] = torch.arange(order.numel(), device=device)
    pairs = _ordered_pairs(index, kept, new_of_comb, fresh)
    new_u, first_pair = _entities_by_first_mention(pairs, index.num_entities + len(fresh.new_entities))
    with timer.stage("extract"):
        names, reread = _entity_names(index, new_u, first_pair, pairs, fresh, extractor, progress)
    is_stay = torch.tensor([u < index.num_entities and name == index.entities[u]
                            for u, name in zip(new_u.tolist(), names)], dtype=torch.bool, device=device)
    if fresh.facts or not bool(is_stay.all()):
        _check_can_embed(index, encoder, int((~is_stay).sum()))
    with timer.stage("embed"):
        fact_emb, entity_emb, passage_emb = _embeddings(index, kept, order, fresh, replaced, is_deleted, new_pid,
                                                        new_u, is_stay, names, encoder, progress)
    with timer.stage("synonyms"):
        synonyms, requeried = _edited_synonyms(index, new_u, is_stay, entity_emb, names, cfg)
    comb_facts = [index.facts[i] for i in kept.tolist()] + fresh.facts
    new_of_u = torch.full((index.num_entities + len(fresh.new_entities),), -1, dtype=torch.long, device=device)
    new_of_u[new_u] = torch.arange(new_u.numel(), device=device)
    gone = set(deleted)
    new_index = Index(
        passages=[replaced.get(i, p) for i, p in enumerate(index.passages) if i not in gone],
        facts=[comb_facts[i] for i in order.tolist()], entities=names, fact_passage=comb_pid[order],
        fact_entity_raw=torch.stack([pairs.fact, new_of_u[pairs.entity]]), synonyms=synonyms,
        fact_emb=fact_emb, entity_emb=entity_emb, passage_emb=passage_emb,
        meta=_edited_meta(index, cfg, what, len(deleted) + len(replaced)),
    )
    with timer.stage("structure"):
        new_index.graph.transition()  # builds the CSR caches once, here
    kept_entities = int((new_u < index.num_entities).sum())
    report = {f"{what}d_passages": len(deleted) + len(replaced), "removed_facts": index.num_facts - kept.numel(),
              "added_facts": len(fresh.facts), "removed_entities": index.num_entities - kept_entities,
              "added_entities": new_u.numel() - kept_entities, "renamed_entities": kept_entities - int(is_stay.sum()),
              "reread_passages": reread, "requeried_entities": requeried, "synonym_threshold": cfg.synonym_threshold,
              **new_index.summary(), **timer.report()}
    return new_index, _with_notes(report, new_index, extractor if fresh.facts or reread else None)


def _fact_order(index: Index, is_gone: Tensor, new_pid: Tensor, fresh: _Fresh) -> tuple[Tensor, Tensor, Tensor]:
    """``(kept [H_k], comb_pid [H_k + H_f], order [H])``: the old facts that stay; the new passage of
    each kept then fresh fact; and the scratch order of those combined facts (new fact -> combined)."""
    kept = torch.nonzero(~is_gone[index.fact_passage]).squeeze(1)  # offline edit: data-dependent size is fine
    comb_pid = torch.cat([new_pid[index.fact_passage[kept]], new_pid[fresh.old_pid[fresh.fact_passage]]])
    return kept, comb_pid, torch.argsort(comb_pid, stable=True)  # stable: a passage's facts keep their order


def _check_can_embed(index: Index, encoder, num_names: int) -> None:
    if encoder is None:
        raise ValueError(f"{num_names} entity names must be embedded again (a kept entity's first mention went and "
                         f"the next one is written otherwise); pass encoder=")
    _check_encoder(index, encoder)


def _with_notes(report: dict, new_index: Index, extractor) -> dict:
    if "grag_stale" in new_index.meta:
        report["grag_stale"] = new_index.meta["grag_stale"]
    stats = getattr(extractor, "stats", None)
    if stats:
        report["extractor"] = dict(stats)
    return report


def _mask(ids: list, size: int, device) -> Tensor:
    mask = torch.zeros(size, dtype=torch.bool, device=device)
    mask[torch.tensor(ids, dtype=torch.long, device=device)] = True
    return mask


def _extract_fresh(index: Index, replaced: dict, extractor, progress: bool) -> _Fresh:
    device = index.device
    old_pid = sorted(replaced)
    extracted = extractor.extract([replaced[i] for i in old_pid], progress=progress) if old_pid else []
    vocab = {entity_key(name): i for i, name in enumerate(index.entities)}
    asm = _assemble(extracted, 0, 0, vocab, index.num_entities)
    displays = [d for passage_facts in extracted for fact in passage_facts for d in _mention_displays(fact)]
    assert len(displays) * 2 == len(asm.pairs), "display walk out of step with _assemble"
    return _Fresh(old_pid=torch.tensor(old_pid, dtype=torch.long, device=device), facts=asm.facts,
                  fact_passage=torch.tensor(asm.fact_passage, dtype=torch.long, device=device),
                  pairs=torch.tensor(asm.pairs, dtype=torch.long, device=device).view(-1, 2).t(),
                  displays=displays, new_entities=asm.new_entities)


def _mention_displays(fact) -> list:
    """The display name of each entity mention of ``fact`` that :func:`_assemble` makes a pair
    of: non-empty keys, the first mention of each key."""
    seen, out = set(), []
    for name in fact.entities:
        display = normalize_entity(name)
        key = entity_key(display)
        if key and key not in seen:
            seen.add(key)
            out.append(display)
    return out


def _ordered_pairs(index: Index, kept: Tensor, new_of_comb: Tensor, fresh: _Fresh) -> _Pairs:
    """Kept and fresh (fact, entity) pairs sorted by new fact (stable: a fact's mention order)."""
    raw = index.fact_entity_raw
    comb_of_old = torch.full((index.num_facts,), -1, dtype=torch.long, device=raw.device)
    comb_of_old[kept] = torch.arange(kept.numel(), device=raw.device)
    kept_pos = torch.nonzero(comb_of_old[raw[0]] >= 0).squeeze(1)
    fresh_n = fresh.pairs.shape[1]
    fact = torch.cat([new_of_comb[comb_of_old[raw[0, kept_pos]]], new_of_comb[kept.numel() + fresh.pairs[0]]])
    entity = torch.cat([raw[1, kept_pos], fresh.pairs[1]])
    old_pos = torch.cat([kept_pos, kept_pos.new_full((fresh_n,), -1)])
    fresh_pos = torch.cat([kept_pos.new_full((kept_pos.numel(),), -1), torch.arange(fresh_n, device=raw.device)])
    order = torch.argsort(fact, stable=True)
    return _Pairs(fact[order], entity[order], old_pos[order], fresh_pos[order])


def _entities_by_first_mention(pairs: _Pairs, num_unified: int) -> tuple[Tensor, Tensor]:
    """``(new_u, first_pair)``: the unified ids of the entities some pair uses, in order of first
    mention (new entity id -> unified id), and the position of that first mention in ``pairs``."""
    n = pairs.entity.numel()
    position = torch.arange(n, device=pairs.entity.device)
    first = torch.full((num_unified,), n, dtype=torch.long, device=position.device)
    first.scatter_reduce_(0, pairs.entity, position, reduce="amin")
    first_pair, new_u = torch.sort(first)
    alive = first_pair < n
    return new_u[alive], first_pair[alive]


def _entity_names(index: Index, new_u: Tensor, first_pair: Tensor, pairs: _Pairs, fresh: _Fresh, extractor,
                  progress: bool) -> tuple[list, int]:
    """Display name of every new entity (its first mention's), and how many passages were re-read."""
    raw = index.fact_entity_raw
    v = index.num_entities
    names = [index.entities[u] if u < v else fresh.new_entities[u - v] for u in new_u.tolist()]
    old_first = torch.full((v,), raw.shape[1], dtype=torch.long, device=raw.device)
    old_first.scatter_reduce_(0, raw[1], torch.arange(raw.shape[1], device=raw.device), reduce="amin")
    old_pos = pairs.old_pos[first_pair]
    is_old = new_u < v
    is_known = torch.zeros_like(is_old)  # the first mention is the one the name was read from
    is_known[is_old] = (old_pos[is_old] >= 0) & (old_pos[is_old] == old_first[new_u[is_old]])
    unknown = []  # (new entity, old fact) of first mentions whose form the index does not hold
    for i in torch.nonzero(~is_known).squeeze(1).tolist():  # the few entities whose first mention moved
        p = int(first_pair[i])
        if int(pairs.fresh_pos[p]) >= 0:
            names[i] = fresh.displays[int(pairs.fresh_pos[p])]
        else:
            unknown.append((i, int(raw[0, int(pairs.old_pos[p])])))
    reread = _reread_names(index, unknown, names, extractor, progress) if unknown else 0
    return names, reread


def _reread_names(index: Index, unknown: list, names: list, extractor, progress: bool) -> int:
    """Extract again the passages holding ``unknown`` first mentions; set those entities' names to
    the mentions' forms. Returns the number of passages read."""
    if extractor is None:
        raise ValueError(f"{len(unknown)} kept entities lost their first mention; their passages must be extracted "
                         f"again to read the next one's form; pass extractor= and encoder=")
    pids = sorted({int(index.fact_passage[f]) for _, f in unknown})
    extracted = dict(zip(pids, extractor.extract([index.passages[p] for p in pids], progress=progress)))
    bounds = torch.tensor(pids, dtype=torch.long, device=index.device)
    starts = torch.searchsorted(index.fact_passage, bounds).tolist()  # facts are grouped by passage
    ends = torch.searchsorted(index.fact_passage, bounds, right=True).tolist()
    first_fact = dict(zip(pids, starts))
    for p, start, end in zip(pids, starts, ends):
        got = [fact.text for fact in extracted[p]]
        if got != index.facts[start:end]:
            raise UserError(f"passage {p} ({index.passages[p].title!r}) extracts to other facts than the index holds, "
                            f"so the names it mentions cannot be read again; use the extractor the index was built "
                            f"with (got {len(got)} facts, the index holds {end - start})")
    for i, f in unknown:
        p = int(index.fact_passage[f])
        facts = extracted[p]
        key = entity_key(names[i])
        found = [d for d in _mention_displays(facts[f - first_fact[p]]) if entity_key(d) == key]
        if not found:
            raise UserError(f"passage {p} ({index.passages[p].title!r}) extracts to facts without the entity "
                            f"{names[i]!r} the index holds for them; use the extractor the index was built with "
                            f"(got fact {facts[f - first_fact[p]].text!r:.80})")
        names[i] = found[0]
    return len(pids)


def _embeddings(index: Index, kept: Tensor, order: Tensor, fresh: _Fresh, replaced: dict, is_deleted: Tensor,
                new_pid: Tensor, new_u: Tensor, is_stay: Tensor, names: list, encoder, progress: bool):
    """``(fact_emb [H, D], entity_emb [V, D], passage_emb [P, D] or None)`` of the edited index:
    kept rows reused, the rest encoded."""
    device = index.device
    fact_emb = index.fact_emb[kept]
    if fresh.facts:
        fact_emb = torch.cat([fact_emb, _encode(encoder, fresh.facts, progress, device).to(fact_emb.dtype)])
    fact_emb = fact_emb[order]
    entity_emb = index.entity_emb.new_empty((new_u.numel(), index.entity_emb.shape[1]))
    entity_emb[is_stay] = index.entity_emb[new_u[is_stay]]
    changed = torch.nonzero(~is_stay).squeeze(1).tolist()
    if changed:
        entity_emb[~is_stay] = _encode(encoder, [names[i] for i in changed], progress, device).to(entity_emb.dtype)
    passage_emb = index.passage_emb
    if passage_emb is not None:
        passage_emb = passage_emb[~is_deleted]
        if replaced:
            texts = [f"{replaced[i].title}\n{replaced[i].text}" for i in fresh.old_pid.tolist()]
            passage_emb[new_pid[fresh.old_pid]] = _encode(encoder, texts, progress, device).to(passage_emb.dtype)
    return fact_emb, entity_emb, passage_emb


def _edited_meta(index: Index, cfg: GraphConfig, what: str, count: int) -> dict:
    meta = dict(index.meta)
    meta["synonym_threshold"] = cfg.synonym_threshold
    if index.grag is not None or "grag_stale" in meta:  # the parts describe the passages before the edit
        meta["grag_stale"] = (f"`hpengine {what}` changed {count} passages after the GRAG parts were built, so "
                              f"they were dropped; rebuild them with `hpengine grag-build INDEX`")
    return meta


# ------------------------------------------------------------------ synonyms
def _edited_synonyms(index: Index, new_u: Tensor, is_stay: Tensor, entity_emb: Tensor, names: list,
                     cfg: GraphConfig) -> tuple[Tensor, int]:
    """``(synonyms [2, n], names searched again)``: the symmetric pairs a scratch build finds.

    A kept name's capped neighbour list can change only when a neighbour of it went (deleted, or
    embedded again) or a changed name lies within eta of it: those are searched again, and so are
    their old neighbours (whose lists may hold them) and the changed names. Every other pair of
    two names that stay is kept as it was.
    """
    device = entity_emb.device
    eligible = synonym_eligible(names, cfg, device)
    key_ids = torch.nonzero(eligible).squeeze(1)
    if not _is_exact(cfg, key_ids.numel()):  # an approximate search is a function of every name: run it whole
        return symmetrize_pairs(_synonyms_of(entity_emb, eligible, 0, cfg)), key_ids.numel()
    old_to_new = torch.full((index.num_entities,), -1, dtype=torch.long, device=device)
    old_to_new[new_u[is_stay]] = torch.nonzero(is_stay).squeeze(1)
    old = old_to_new[index.synonyms]  # [2, n] new ids, -1 for a name that went or changed
    is_candidate = torch.zeros(new_u.numel(), dtype=torch.bool, device=device)
    lost = (old[0] >= 0) & (old[1] < 0)
    is_candidate[old[0, lost]] = True
    changed = torch.nonzero(~is_stay & eligible).squeeze(1)
    is_candidate[_within_eta(entity_emb, key_ids, changed, cfg)] = True
    is_candidate &= is_stay
    is_query = is_candidate | (~is_stay & eligible)
    kept = old[:, (old >= 0).all(0)]  # pairs of two names that stay
    is_query[kept[1, is_candidate[kept[0]]]] = True  # the candidates' neighbours
    is_query &= eligible
    untouched = kept[:, ~is_candidate[kept[0]] & ~is_candidate[kept[1]]]
    searched = _search_rows(entity_emb, key_ids, torch.nonzero(is_query).squeeze(1), cfg)
    return symmetrize_pairs(torch.cat([untouched, searched], dim=1)), int(is_query.sum())


def _is_exact(cfg: GraphConfig, num_keys: int) -> bool:
    if cfg.synonym_backend == "auto":
        return num_keys <= cfg.synonym_exact_max_keys
    return cfg.synonym_backend in _EXACT_BACKENDS


def _within_eta(entity_emb: Tensor, key_ids: Tensor, query_ids: Tensor, cfg: GraphConfig) -> Tensor:
    """Ids of the keys within eta of some query (uncapped, exact; a hair below eta, so rounding
    cannot hide one: a name found needlessly is only searched again)."""
    if not query_ids.numel() or not key_ids.numel():
        return query_ids[:0]
    pairs = synonym_pairs(entity_emb[query_ids], entity_emb[key_ids], threshold=max(cfg.synonym_threshold - 1e-5, -1.0),
                          max_per_entity=0, block_size=cfg.synonym_block_size, exclude_self=False, backend="torch")
    return key_ids[pairs[1]]


def _search_rows(entity_emb: Tensor, key_ids: Tensor, query_ids: Tensor, cfg: GraphConfig) -> Tensor:
    """Directed pairs (query, key) of ``query_ids`` (a subset of ``key_ids``, increasing), self
    pairs removed, each row as the full search computes it (:func:`_synonyms_of` with
    ``first_new=0``): a query whose block of that search has under ``_MIN_ROWS`` rows is searched
    with its whole block, the others together in blocks of at least ``_MIN_ROWS`` rows."""
    if not query_ids.numel():
        return query_ids.new_zeros((2, 0))
    size, n = cfg.synonym_block_size, key_ids.numel()
    block = torch.searchsorted(key_ids, query_ids) // size
    block_rows = (n - block * size).clamp(max=size)
    parts = []
    for b in torch.unique(block[block_rows < _MIN_ROWS]).tolist():  # at most one, unless blocks are small
        rows = key_ids[b * size:min((b + 1) * size, n)]
        parts.append(_search(entity_emb, key_ids, rows, cfg))
    big = query_ids[block_rows >= _MIN_ROWS]
    if big.numel():
        parts.append(_search(entity_emb, key_ids, _padded(big, size), cfg))
    pairs = torch.cat(parts, dim=1)
    is_query = torch.zeros(entity_emb.shape[0], dtype=torch.bool, device=pairs.device)
    is_query[query_ids] = True
    pairs = pairs[:, is_query[pairs[0]]]
    return torch.unique(pairs, dim=1)  # a padded row repeats a query's pairs


def _padded(ids: Tensor, size: int) -> Tensor:
    """``ids`` with its first one repeated so that every block of ``size`` holds at least ``_MIN_ROWS``."""
    tail = ids.numel() % size
    need = _MIN_ROWS - tail if 0 < tail < _MIN_ROWS and size >= _MIN_ROWS else 0
    return torch.cat([ids, ids[:1].expand(need)])


def _search(entity_emb: Tensor, key_ids: Tensor, query_ids: Tensor, cfg: GraphConfig) -> Tensor:
    """The build's capped search (:func:`_synonyms_of`) for the queries ``query_ids``: pairs in
    entity ids, self pairs removed. Only exact backends come here, whose rows do not depend on
    the other queries."""
    cap = cfg.synonym_max_per_entity + 1 if cfg.synonym_max_per_entity else 0  # +1: the entity itself
    backend = "torch" if cfg.synonym_backend == "auto" else cfg.synonym_backend
    pairs = synonym_pairs(entity_emb[query_ids], entity_emb[key_ids], threshold=cfg.synonym_threshold,
                          max_per_entity=cap, block_size=cfg.synonym_block_size, exclude_self=False, backend=backend)
    pairs = torch.stack([query_ids[pairs[0]], key_ids[pairs[1]]])
    return pairs[:, pairs[0] != pairs[1]]
