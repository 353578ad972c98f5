"""Build GRAG-MH's parts for a saved index and commit them as its next generation, under the
index's writer lock (:mod:`hpengine.graph._store`: the old generation stays current until the new
one is complete)."""
from __future__ import annotations

import dataclasses
import time

import torch

from hpengine.config import GragBuildConfig
from hpengine.errors import UserError
from hpengine.graph import DEFAULT_LOCK_TIMEOUT, GragParts, Index, build_grag_parts
from hpengine.models import entity_key


def _triple_ids(index: Index, cfg: GragBuildConfig, cache_dir: str, progress: bool, report: dict):
    """Triples of the index as ``(head, tail, fact)`` int64 ``[T]`` and relations ``T``."""
    from hpengine.models import DependencyTripleExtractor

    raw = index.fact_entity_raw
    names_of = [[] for _ in index.facts]
    ids_of = [[] for _ in index.facts]
    for f, e in raw.t().tolist():  # host copy: the extractor reads names
        names_of[f].append(index.entities[e])
        ids_of[f].append(e)
    # the passage title first: a subject naming no entity maps to it
    titles = [entity_key(index.passages[p].title) for p in index.fact_passage.tolist()]
    for f in range(len(names_of)):
        order = sorted(range(len(names_of[f])), key=lambda j: entity_key(names_of[f][j]) != titles[f])
        names_of[f] = [names_of[f][j] for j in order]
        ids_of[f] = [ids_of[f][j] for j in order]
    head, tail, fact, rel = [], [], [], []
    llm_passages: set = set()
    if cfg.triples == "llm":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from hpengine.models import LLMTripleExtractor, resolve_model_path

        path = resolve_model_path(cfg.llm_model)
        tok = AutoTokenizer.from_pretrained(path)
        from hpengine.models import resolve_dtype

        model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(cfg.dtype, cfg.device, "grag.dtype"))
        model = model.to(cfg.device).eval()
        ex = LLMTripleExtractor(model, tok, cache_dir, model_name=cfg.llm_model, batch_size=cfg.llm_batch_size,
                                max_new_tokens=cfg.llm_max_new_tokens)
        llm_passages = add_llm_triples(index, ex.extract(index.passages, progress=progress), head, tail, fact, rel)
        report["llm"] = dict(ex.stats)
        report["llm_triples"] = len(rel)
    todo = [f for f, p in enumerate(index.fact_passage.tolist()) if p not in llm_passages]
    found = DependencyTripleExtractor(cfg.spacy_model).extract([index.facts[f] for f in todo],
                                                               [names_of[f] for f in todo])
    for f, triples in zip(todo, found):
        for h, r, t in triples:
            head.append(ids_of[f][h])
            tail.append(ids_of[f][t])
            fact.append(f)
            rel.append(r)
    report["fast_triples"] = len(rel) - report.get("llm_triples", 0)
    as_t = lambda xs: torch.tensor(xs, dtype=torch.int64)  # noqa: E731
    return as_t(head), as_t(tail), as_t(fact), rel


def add_llm_triples(index: Index, per_passage: list, head: list, tail: list, fact: list, rel: list) -> set:
    """Map LLM triples (names) onto index entities (by ``entity_key``; names the index lacks are
    dropped) and source facts (the passage's first fact naming both, else naming the head, else
    its first fact). Returns the passages that got at least one triple."""
    by_key = {}
    for e, name in enumerate(index.entities):
        by_key.setdefault(entity_key(name), e)
    facts_of = [[] for _ in index.passages]
    for f, p in enumerate(index.fact_passage.tolist()):
        facts_of[p].append(f)
    done = set()
    for p, triples in enumerate(per_passage):
        for h_name, r, t_name in triples:
            h, t = by_key.get(entity_key(h_name)), by_key.get(entity_key(t_name))
            if h is None or t is None or h == t or not facts_of[p]:
                continue
            texts = [index.facts[f].casefold() for f in facts_of[p]]
            both = [f for f, x in zip(facts_of[p], texts) if h_name.casefold() in x and t_name.casefold() in x]
            one = [f for f, x in zip(facts_of[p], texts) if h_name.casefold() in x]
            head.append(h)
            tail.append(t)
            fact.append((both or one or facts_of[p])[0])
            rel.append(r)
            done.add(p)
    return done


def build_grag(index: Index, encoder, cfg: GragBuildConfig, *, cache_dir: str = "", progress: bool = False):
    """GRAG parts of ``index``: triples, Louvain communities, summary nodes (extractive, or
    abstractive with ``cfg.summarizer``), summary embeddings by ``encoder``.

    Returns:
        ``(parts, report)``; the report lists triples, communities, summary nodes and seconds
        per stage.
    """
    report: dict = {}
    seconds: dict = {}
    t0 = time.perf_counter()
    head, tail, fact, rel = _triple_ids(index, cfg, cache_dir, progress, report)
    seconds["triples"] = time.perf_counter() - t0
    summarize = None
    if cfg.summarizer:
        from hpengine.models import load_summarizer

        summarizer = load_summarizer(cfg.summarizer, device=cfg.device, dtype=cfg.dtype, cache_dir=cache_dir or None,
                                     batch_size=cfg.summary_batch_size, max_new_tokens=cfg.summary_max_new_tokens)
        summarize = summarizer.summarize
    parts = build_grag_parts(head, tail, fact, rel, facts=index.facts, entities=index.entities, encoder=encoder,
                             summarize=summarize, seed=cfg.louvain_seed, resolution=cfg.louvain_resolution,
                             min_community=cfg.min_community, token_budget=cfg.summary_tokens,
                             names=cfg.summary_names, timer=seconds)
    sizes = parts.summary_crow.diff()
    report.update(triples=parts.num_triples, entities_in_triples=int(parts.is_graph_node(index.num_entities)
                                                                     [: index.num_entities].sum()),
                  communities=parts.num_summaries, summary_nodes=parts.num_summaries,
                  largest_community=int(sizes.max()) if sizes.numel() else 0,
                  summaries="abstractive " + cfg.summarizer if cfg.summarizer else "extractive",
                  seconds={k: round(v, 3) for k, v in seconds.items()},
                  total_seconds=round(sum(seconds.values()), 3))
    parts.meta = {"build_config": dataclasses.asdict(cfg), "build_report": report}
    return parts.to(index.device), report


def run_grag_build(index_dir: str, cfg: GragBuildConfig, *, encoder=None, progress: bool = True,
                   lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> dict:
    """Load the index at ``index_dir``, build its GRAG parts, save it back atomically.

    Args:
        encoder: the index's encoder (default: the one its build config names).
        lock_timeout: seconds to wait while another process writes the index.

    Returns:
        the build report.
    """
    from hpengine.graph import IndexStore
    from hpengine.jobs._paths import check_index_dir, check_writable

    check_index_dir(index_dir)
    check_writable(index_dir, "index")
    store = IndexStore(index_dir)
    with store.writer(timeout=lock_timeout, command="hpengine grag-build") as writer:
        index = Index.load(index_dir, device=cfg.device)  # the latest generation, under the lock
        if encoder is None:
            from hpengine.config import EncoderConfig
            from hpengine.models import make_encoder

            enc = index.meta.get("build_config", {}).get("encoder", {})
            fields = {f.name for f in dataclasses.fields(EncoderConfig)}
            encoder = make_encoder(EncoderConfig(**{k: v for k, v in enc.items() if k in fields}))
        if index.meta.get("encoder") not in (None, encoder.name):
            raise UserError(f"index={index_dir!r} was built with encoder {index.meta.get('encoder')!r} "
                            f"(got {encoder.name!r})")
        parts, report = build_grag(index, encoder, cfg, cache_dir=str(store.grag_cache), progress=progress)
        index.grag = parts
        index.meta.pop("grag_stale", None)  # the parts of a delete / update before are rebuilt
        index.save(index_dir, writer=writer, append=True)  # GRAG's files; the rest is linked
    return report


def format_grag_report(report: dict, where: str) -> str:
    lines = [f"GRAG parts written to {where}"]
    for key in ("triples", "fast_triples", "entities_in_triples", "communities", "summary_nodes", "largest_community",
                "summaries"):
        if key in report:
            lines.append(f"  {key:<20} {report[key]}")
    lines.append("  seconds per stage: " + ", ".join(f"{k} {v:.1f}" for k, v in report["seconds"].items())
                 + f" (total {report['total_seconds']:.1f})")
    return "\n".join(lines)
