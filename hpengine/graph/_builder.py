"""Offline index construction and incremental add (docs/methods/index.md#the-index-an-atomic-fact-hypergraph)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from hpengine._profiling import StageTimer
from hpengine.config import EncoderConfig, GraphConfig
from hpengine.graph._index import Index
from hpengine.graph._synonyms import symmetrize_pairs, synonym_pairs
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


def _synonym_eligible(names: list, cfg: GraphConfig, device) -> Tensor:
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
    query_ids = key_ids[key_ids >= first_new]
    cap = cfg.synonym_max_per_entity + 1 if cfg.synonym_max_per_entity else 0  # +1: the entity itself
    pairs = synonym_pairs(entity_emb[query_ids], entity_emb[key_ids], threshold=cfg.synonym_threshold,
                          max_per_entity=cap, block_size=cfg.synonym_block_size, exclude_self=False,
                          backend=cfg.synonym_backend, exact_max_keys=cfg.synonym_exact_max_keys,
                          ann_neighbors=cfg.synonym_ann_neighbors)
    pairs = torch.stack([query_ids[pairs[0]], key_ids[pairs[1]]])
    return pairs[:, pairs[0] != pairs[1]]


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
    graph_cfg = graph_cfg or GraphConfig()
    eta = graph_cfg.synonym_threshold
    if eta is None and index is not None:
        eta = index.meta.get("synonym_threshold")
    if eta is None:  # the encoder's scale (duck-typed encoders without one: MiniLM's)
        eta = getattr(encoder, "synonym_threshold", EncoderConfig.synonym_threshold)
    graph_cfg = dataclasses.replace(graph_cfg, synonym_threshold=float(eta))
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
    known = set() if index is None else {(p.title, p.text) for p in index.passages}
    fresh, skipped = [], 0
    for p in passages:
        if (p.title, p.text) in known:
            skipped += 1
            continue
        known.add((p.title, p.text))
        fresh.append(p)

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
    if index is not None:
        fact_emb = torch.cat([index.fact_emb, fact_emb.to(index.fact_emb.dtype)])
        entity_emb = torch.cat([index.entity_emb, entity_emb.to(index.entity_emb.dtype)])
        if embed_passages:
            passage_emb = torch.cat([index.passage_emb, passage_emb.to(index.passage_emb.dtype)])
    with timer.stage("synonyms"):
        names = ([] if index is None else index.entities) + asm.new_entities
        new_syn = _synonyms_of(entity_emb, _synonym_eligible(names, graph_cfg, device), old_v, graph_cfg)
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


def _encode(encoder, texts: list, progress: bool, device) -> Tensor:
    # everything an index holds is a document of the asymmetric encoders: passages, facts and
    # entity names all take the passage prompt (docs/DESIGN.md, "Encoder prompts")
    emb = encoder.encode(texts, kind="passage", progress=progress)
    return emb.to(device)
