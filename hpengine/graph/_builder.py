"""Offline index construction and incremental add (docs/methods/index.md#the-index-an-atomic-fact-hypergraph)."""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from hpengine._profiling import StageTimer
from hpengine.config import EncoderConfig, GraphConfig
from hpengine.graph._index import Index
from hpengine.graph._mmap import mapped_empty, page_out
from hpengine.graph._synonyms import resolve_synonym_backend, symmetrize_pairs, synonym_pairs
from hpengine.models import entity_key, normalize_entity


@dataclass
class _Assembled:
    facts: list
    fact_passage: list
    pairs: list  # flat [fact, entity, fact, entity, ...]
    new_entities: list


def _assemble(extracted: list, passage_offset: int, fact_offset: int, vocab: dict, num_entities: int) -> _Assembled:
    """Number facts and entities. ``vocab`` (entity_key -> id) is extended in place.

    Entity ids are given in order of first appearance, so building A then adding B numbers
    everything exactly as a from-scratch build of A + B.
    """
    facts, fact_passage, pairs, new_entities = [], [], [], []
    for j, passage_facts in enumerate(extracted):
        for fact in passage_facts:
            h = fact_offset + len(facts)
            facts.append(fact.text)
            fact_passage.append(passage_offset + j)
            seen = set()
            for name in fact.entities:
                display = normalize_entity(name)
                key = entity_key(display)
                if not key:
                    continue
                if key not in vocab:
                    vocab[key] = num_entities + len(new_entities)
                    new_entities.append(display)
                e = vocab[key]
                if e not in seen:
                    seen.add(e)
                    pairs.extend((h, e))
    return _Assembled(facts, fact_passage, pairs, new_entities)


def _pairs_tensor(flat: list, device) -> Tensor:
    return torch.tensor(flat, dtype=torch.int64, device=device).view(-1, 2).t().contiguous()


def synonym_eligible(names: list, cfg: GraphConfig, device) -> Tensor:
    """bool ``[V]``: entities that take part in embedding synonym search.

    With ``cfg.synonym_skip_digits`` names containing a digit (dates, years, numbered titles)
    match only exactly: sentence embedders put "8 May 1958" and "February 4, 1958" above any
    useful threshold, and such pairs would link unrelated facts.
    """
    if not cfg.synonym_skip_digits:
        return torch.ones(len(names), dtype=torch.bool, device=device)
    return torch.tensor([not any(ch.isdigit() for ch in name) for name in names], dtype=torch.bool, device=device)


def _synonyms_of(entity_emb: Tensor, eligible: Tensor, first_new: int, cfg: GraphConfig) -> Tensor:
    """Synonym pairs (new entity, any entity) among eligible entities, self pairs removed.

    Shapes:
        entity_emb ``[V, D]``, eligible ``[V]`` -> ``[2, n]``.
    """
    key_ids = torch.nonzero(eligible).squeeze(1)  # build time, not a hot path
    cap = cfg.synonym_max_per_entity + 1 if cfg.synonym_max_per_entity else 0  # +1: the entity itself
    options = dict(threshold=cfg.synonym_threshold, max_per_entity=cap, block_size=cfg.synonym_block_size,
                   exclude_self=False, exact_max_keys=cfg.synonym_exact_max_keys,
                   ann_neighbors=cfg.synonym_ann_neighbors, ann_dims=cfg.synonym_ann_dims)
    if resolve_synonym_backend(cfg.synonym_backend, len(key_ids), cfg.synonym_exact_max_keys) == "nndescent":
        # every name is searched (the tables as they are: no copy of millions of names' embeddings)
        # and pairs with an ineligible name are dropped after; such a name can take one of a
        # name's candidates or, above η, one of its max_per_entity places
        pairs = synonym_pairs(entity_emb[first_new:], entity_emb, query_offset=first_new, backend="nndescent",
                              **options)
        pairs = pairs[:, eligible[pairs[0]] & eligible[pairs[1]]]
        return pairs[:, pairs[0] != pairs[1]]
    # the queries are the new eligible entities: a suffix of the keys, searched as a view of them
    # (no second copy of the names' embeddings)
    offset = int((key_ids < first_new).sum())
    keys = entity_emb if len(key_ids) == len(entity_emb) else entity_emb[key_ids]
    pairs = synonym_pairs(keys[offset:], keys, query_offset=offset, backend=cfg.synonym_backend, **options)
    pairs = key_ids[pairs]
    return pairs[:, pairs[0] != pairs[1]]


def entity_synonyms(entity_emb: Tensor, names: list, graph_cfg: GraphConfig) -> Tensor:
    """The symmetric synonym pairs of all ``names`` as a build searches them (``graph_cfg`` with
    η set: its backend, cap and digit rule).

    Shapes:
        entity_emb ``[V, D]`` -> int64 ``[2, n]``.
    """
    if graph_cfg.synonym_threshold is None:
        raise ValueError("graph_cfg.synonym_threshold must be set (got None)")
    eligible = synonym_eligible(names, graph_cfg, entity_emb.device)
    return symmetrize_pairs(_synonyms_of(entity_emb, eligible, 0, graph_cfg))


def build_index(passages: list, *, extractor, encoder, graph_cfg: GraphConfig | None = None,
                embed_passages: bool = True, device="cpu", progress: bool = False, meta: dict | None = None):
    """Build an :class:`Index` from passages.

    Stages: extract (``extractor.extract``), embed (facts, entity names, passages),
    synonyms (blocked top-k search, cos >= eta), structure (expanded incidence and T_s).

    Args:
        passages: list of :class:`Passage`.
        extractor: object with ``extract(passages, progress) -> list[list[ExtractedFact]]``.
        encoder: object with ``encode(texts, kind=, progress=) -> [N, D]`` and ``name`` (an
            :class:`~hpengine.models.Encoder`); facts, entity names and passages are all
            embedded with ``kind="passage"``. Its ``synonym_threshold`` (when it has one) is η
            where ``graph_cfg`` leaves it unset.
        graph_cfg: synonym settings (default :class:`GraphConfig`).
        embed_passages: also embed passages (dense baseline, passage ranking fill-up).
        device: where the index tensors live.
        progress: show progress bars.
        meta: extra metadata stored in ``index.json`` (build config).

    Returns:
        ``(index, report)``; the report has counts, seconds per stage and peak memory. The
        index meta records the encoder (``encoder``: its name, which includes its prompts;
        ``encoder_prompts``; ``encoder_config`` when the encoder has one, from which eval
        rebuilds it) and the η used (``synonym_threshold``).
    """
    return add_passages(None, passages, extractor=extractor, encoder=encoder, graph_cfg=graph_cfg,
                        embed_passages=embed_passages, device=device, progress=progress, meta=meta)


def add_passages(index: Index | None, passages: list, *, extractor, encoder, graph_cfg: GraphConfig | None = None,
                 embed_passages: bool | None = None, device=None, progress: bool = False, meta: dict | None = None):
    """Append passages to ``index`` (or build from scratch when ``index`` is None).

    Old passages are neither re-extracted nor re-embedded: new facts and entities are appended
    (entity names already known are reused), synonyms of the *new* entities are searched
    against all entities, and the expanded incidence and degrees are re-derived (O(nnz)).
    Passages equal (title and text) to one already in the index are skipped and counted.
    The result equals a from-scratch build on the union whenever no entity reaches
    ``max_per_entity`` synonyms (the top-k cap of old entities is not revisited).

    With ``graph_cfg.synonym_threshold`` unset, η is the one the index was built with (so add
    equals a scratch build), else the encoder's ``synonym_threshold``.

    Returns:
        ``(new_index, report)``.
    """
    graph_cfg = _resolve_eta(graph_cfg, index, encoder)
    timer = StageTimer(device)
    if index is not None:
        if encoder.name != index.meta.get("encoder"):
            raise ValueError(f"index was built with encoder {index.meta.get('encoder')!r}; "
                             f"cannot add with {encoder.name!r}")
        device = index.device if device is None else torch.device(device)
        index = index.to(device)
        if embed_passages is None:
            embed_passages = index.passage_emb is not None
    device = torch.device(device if device is not None else "cpu")
    embed_passages = True if embed_passages is None else embed_passages
    fresh, skipped = _fresh_passages(index, passages)
    old_p = 0 if index is None else index.num_passages
    old_h = 0 if index is None else index.num_facts
    old_v = 0 if index is None else index.num_entities
    vocab = {} if index is None else {entity_key(name): i for i, name in enumerate(index.entities)}

    with timer.stage("extract"):
        extracted = extractor.extract(fresh, progress=progress) if fresh else []
    asm = _assemble(extracted, old_p, old_h, vocab, old_v)
    with timer.stage("embed"):
        fact_emb = _encode(encoder, asm.facts, progress, device)
        entity_emb = _encode(encoder, asm.new_entities, progress, device)
        passage_emb = (_encode(encoder, [f"{p.title}\n{p.text}" for p in fresh], progress, device)
                       if embed_passages else None)
    return _combine(index, fresh, skipped, asm, (fact_emb, entity_emb, passage_emb), encoder=encoder,
                    extractor=extractor, graph_cfg=graph_cfg, timer=timer, device=device, meta=meta)


def _resolve_eta(graph_cfg: GraphConfig | None, index, encoder) -> GraphConfig:
    """``graph_cfg`` with η set: its own, else the index's, else the encoder's scale (duck-typed
    encoders without one: MiniLM's)."""
    graph_cfg = graph_cfg or GraphConfig()
    eta = graph_cfg.synonym_threshold
    if eta is None and index is not None:
        eta = index.meta.get("synonym_threshold")
    if eta is None:
        eta = getattr(encoder, "synonym_threshold", EncoderConfig.synonym_threshold)
    return dataclasses.replace(graph_cfg, synonym_threshold=float(eta))


def _fresh_passages(index: Index | None, passages: list) -> tuple:
    """``(passages not yet in index and not repeated, count skipped)``; equal means same title and text."""
    known = set() if index is None else {(p.title, p.text) for p in index.passages}
    fresh, skipped = [], 0
    for p in passages:
        if (p.title, p.text) in known:
            skipped += 1
            continue
        known.add((p.title, p.text))
        fresh.append(p)
    return fresh, skipped


def _combine(index: Index | None, fresh: list, skipped: int, asm: _Assembled, embeddings: tuple, *, encoder,
             extractor, graph_cfg: GraphConfig, timer: StageTimer, device, meta: dict | None):
    """The index with ``fresh`` passages appended (their facts and new entities numbered in
    ``asm``, ``embeddings = (fact_emb, new entity_emb, passage_emb or None)`` of them): synonyms
    of the new entities against all, the raw incidence, the encoder's record and the structure.

    Returns:
        ``(new_index, report)``.
    """
    fact_emb, entity_emb, passage_emb = embeddings
    old_v = 0 if index is None else index.num_entities
    if index is not None:
        fact_emb = torch.cat([index.fact_emb, fact_emb.to(index.fact_emb.dtype)])
        entity_emb = torch.cat([index.entity_emb, entity_emb.to(index.entity_emb.dtype)])
        if passage_emb is not None:
            passage_emb = torch.cat([index.passage_emb, passage_emb.to(index.passage_emb.dtype)])
    with timer.stage("synonyms"):
        names = ([] if index is None else index.entities) + asm.new_entities
        new_syn = _synonyms_of(entity_emb, synonym_eligible(names, graph_cfg, device), old_v, graph_cfg)
        old_syn = index.synonyms if index is not None else new_syn.new_zeros((2, 0))
        synonyms = symmetrize_pairs(torch.cat([old_syn, new_syn], dim=1))
    new_pairs = _pairs_tensor(asm.pairs, device)
    new_index = Index(
        passages=([] if index is None else list(index.passages)) + fresh,
        facts=([] if index is None else list(index.facts)) + asm.facts,
        entities=([] if index is None else list(index.entities)) + asm.new_entities,
        fact_passage=torch.cat([index.fact_passage if index is not None else torch.zeros(0, dtype=torch.int64, device=device),
                                torch.tensor(asm.fact_passage, dtype=torch.int64, device=device)]),
        fact_entity_raw=torch.cat([index.fact_entity_raw if index is not None else new_pairs.new_zeros((2, 0)),
                                   new_pairs], dim=1),
        synonyms=synonyms, fact_emb=fact_emb, entity_emb=entity_emb, passage_emb=passage_emb,
        meta=dict(index.meta if index is not None else (meta or {})),
    )
    new_index.meta["encoder"] = encoder.name
    new_index.meta["encoder_prompts"] = dict(getattr(encoder, "prompts", None) or {"query": "", "passage": ""})
    enc_cfg = getattr(encoder, "config", None)
    if dataclasses.is_dataclass(enc_cfg):  # what eval/ask rebuild the encoder from (the index's encoder)
        new_index.meta["encoder_config"] = dataclasses.asdict(enc_cfg)
    new_index.meta["synonym_threshold"] = graph_cfg.synonym_threshold
    with timer.stage("structure"):
        new_index.graph.transition()  # builds the CSR caches once, here
    report = {"added_passages": len(fresh), "skipped_known_passages": skipped,
              "added_facts": len(asm.facts), "added_entities": len(asm.new_entities),
              "synonym_threshold": graph_cfg.synonym_threshold, **new_index.summary(), **timer.report()}
    stats = getattr(extractor, "stats", None)
    if stats:
        report["extractor"] = dict(stats)
    return new_index, report


def build_index_sharded(passages: list, *, extractor, encoder, shard_folder, shard_size: int,
                        graph_cfg: GraphConfig | None = None, embed_passages: bool = True, device="cpu",
                        progress: bool = False, meta: dict | None = None, settings: dict | None = None,
                        my_shards=None, merge: bool = True):
    """:func:`build_index` streamed through shards of ``shard_size`` passages
    (docs/guides/index.md#the-streaming-build): each shard is extracted, its facts and passages embedded and
    written to ``shard_folder`` (:class:`~hpengine.graph._shards.ShardFolder`), so the work in flight
    is one shard's; shards finished by an earlier run of the same build are not redone. The merge
    then numbers facts and entities in passage order, embeds the entity names and builds synonyms
    and structure as :func:`build_index` does. With one shard (``shard_size`` at least the passages)
    every encoder call sees the texts :func:`build_index` gives it: the same index.

    Args:
        shard_folder: the build folder (a path).
        settings: what else changes a shard's contents (extractor and encoder settings); with the
            passages it makes the build's fingerprint.
        my_shards: ``list[int] -> list[int]``, the pending shards this process runs (a torchrun
            rank's share); every shard must be done before the merge.
        merge: False: only write this process's shards and return their numbers (a torchrun
            rank's share; one of them then merges).

    Returns:
        ``(index, report)``; the report adds ``shards``, ``resumed_shards`` (finished before this
        call) and ``shards_run`` (by this call).
    """
    from hpengine.graph._shards import (ShardFolder, build_fingerprint, gather_rows, settings_digest, shard_ranges,
                                        slice_digest)

    graph_cfg = _resolve_eta(graph_cfg, None, encoder)
    device = torch.device(device)
    timer = StageTimer(device)
    fresh, skipped = _fresh_passages(None, passages)
    spans = shard_ranges(len(fresh), shard_size)
    settings = {"encoder": encoder.name, "embed_passages": embed_passages, **(settings or {})}
    folder = ShardFolder(shard_folder, build_fingerprint(fresh, settings), len(spans),
                         slices=lambda k: slice_digest(fresh[spans[k][0]:spans[k][1]]),
                         settings_digest=settings_digest(settings))
    finished = set(folder.done())
    for k, why in folder.redone:  # one line each: the user sees that a kept shard was not trusted
        print(f"hpengine: shard {k} of {folder.folder} did not verify ({why}); making it again", file=sys.stderr)
    pending = [k for k in range(len(spans)) if k not in finished]
    mine = my_shards(pending) if my_shards is not None else pending
    for k in mine:
        lo, hi = spans[k]
        with timer.stage("extract"):
            extracted = extractor.extract(fresh[lo:hi], progress=progress)
        with timer.stage("embed"):
            fact_emb = _encode(encoder, [f.text for facts in extracted for f in facts], progress, "cpu")
            passage_emb = (_encode(encoder, [f"{p.title}\n{p.text}" for p in fresh[lo:hi]], progress, "cpu")
                           if embed_passages else None)
        folder.write(k, (lo, hi), extracted, fact_emb, passage_emb)
        del extracted, fact_emb, passage_emb
    if not merge:
        return mine
    missing = sorted(set(range(len(spans))) - set(folder.done()))
    if missing:
        raise RuntimeError(f"shards {missing[:5]} of {folder.folder} are not written; cannot merge")
    asm = _assemble([facts for k in range(len(spans)) for facts in folder.read_facts(k)], 0, 0, {}, 0)
    with timer.stage("embed"):
        entity_emb = _encode(encoder, asm.new_entities, progress, device)
    with timer.stage("merge"):
        totals = {"fact_emb": len(asm.facts), **({"passage_emb": len(fresh)} if embed_passages else {})}
        rows = gather_rows((folder.read_tensors(k) for k in range(len(spans))), totals, device,
                           _merged_rows_allocator(folder.folder, device))
        for t in rows.values():  # not read again until the save: out of the resident set while synonyms run
            if t is not None:
                page_out(t)
    fact_emb, passage_emb = rows["fact_emb"], rows.get("passage_emb")
    if fact_emb is None:
        fact_emb = entity_emb.new_zeros((0, entity_emb.shape[1]))
    new_index, report = _combine(None, fresh, skipped, asm, (fact_emb, entity_emb, passage_emb), encoder=encoder,
                                 extractor=extractor, graph_cfg=graph_cfg, timer=timer, device=device, meta=meta)
    report.update(shards=len(spans), resumed_shards=len(finished), shards_run=len(mine),
                  redone_shards=[{"shard": k, "why": why} for k, why in folder.redone])
    return new_index, report


def _merged_rows_allocator(folder, device):
    """On CPU, the merge's fact and passage rows go to files of the build folder
    (``merged-<name>.bin``, shared mappings) instead of anonymous memory: the synonym search and
    the structure after the merge do not read them, so their pages can leave the resident set (at
    a million passages 3.7 GB of bfloat16 rows). The index commits them as any tensor; the build
    folder goes after the commit, the mappings with the index's tensors."""
    if torch.device(device).type != "cpu":
        return None
    return lambda name, shape, dtype: mapped_empty(Path(folder) / f"merged-{name}.bin", shape, dtype)


def _encode(encoder, texts: list, progress: bool, device) -> Tensor:
    # everything an index holds is a document of the asymmetric encoders: passages, facts and
    # entity names all take the passage prompt (docs/DESIGN.md, "Encoder prompts")
    emb = encoder.encode(texts, kind="passage", progress=progress)
    return emb.to(device)
