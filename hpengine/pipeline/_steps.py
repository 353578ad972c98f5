"""The steps every retrieval method shares, written once: encoding, decomposition, the no-LLM
answer (the best bridge entity of the evidence facts), rewriting and search texts, reading
(hop, final, passages), and the evidence chain records.

Tensor work is batched over the questions; Python loops here run over questions only at the
text boundary (prompts, query strings, names read back from ids).
"""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.config import EngineConfig, RetrievalConfig
from hpengine.models import entity_key
from hpengine.retrieval import best_home, bridge_entities, linked_bridges
from hpengine.pipeline._text import is_comparison, is_unknown, resolve_choice
from hpengine.pipeline._types import ChainFact
from hpengine.sparse import gather_csr_rows


class QASteps:
    """Shared steps over one index, encoder and (optionally) LLM decomposer and reader.

    Args:
        index: the :class:`~hpengine.graph.Index` (its device is where retrieval runs).
        encoder: the query encoder the index was built with.
        config: the method's :class:`~hpengine.config.EngineConfig` (shared fields are read here).
        retrieval: HyperProve hop parameters (also the fact index's backend).
        decomposer, reader: LLM components; both None selects the no-LLM mode.
        timer: a :class:`~hpengine._profiling.StageTimer` the steps record into.
    """

    def __init__(self, index, encoder, config: EngineConfig, retrieval: RetrievalConfig, decomposer, reader, timer):
        self.index = index
        self.encoder = encoder
        self.config = config
        self.retrieval = retrieval
        self.decomposer = decomposer
        self.reader = reader
        self.timer = timer
        self.lookups = index.lookups
        self.stats = {"unknown": 0}
        # bridges are entities the facts name (extracted incidence, before synonyms)
        self.bridge_crow, self.bridge_col = self.lookups.extracted_incidence(config.bridge_skip_own_title)
        self.bridge_weight = self._make_bridge_weight()
        # built on first use (FAISS training is not per hop)
        self._fact_index = self._passage_index = self._entity_index = None
        self._fp_list: list | None = None

    @property
    def use_llm(self) -> bool:
        return self.reader is not None

    # ------------------------------------------------------------ retrieval
    def encode(self, texts: list, kind: str = "query") -> Tensor:
        """float ``[len(texts), D]`` on the index's device and in its embedding dtype.

        ``kind`` is the encoder's prompt kind: ``"query"`` (the default: questions, sub-queries,
        search texts, question mentions) or ``"passage"`` (a text compared as a document)."""
        with self.timer.stage("encode"):
            return self.encoder.encode(texts, kind=kind).to(self.index.device, self.index.fact_emb.dtype)

    def fact_index(self):
        """The :class:`~hpengine.retrieval.DenseIndex` over fact embeddings (built once)."""
        if self._fact_index is None:
            self._fact_index = self._dense_index(self.index.fact_emb)
        return self._fact_index

    def _dense_index(self, keys: Tensor):
        """A :class:`~hpengine.retrieval.DenseIndex` from ``retrieval``; when it is approximate, the
        blocks of memory-mapped keys its build reads are handed back to the kernel as it goes
        (:func:`~hpengine.graph.page_out`): FAISS keeps its own codes and later searches read only
        the candidates' rows."""
        from hpengine.graph import page_out
        from hpengine.retrieval import DenseIndex

        return DenseIndex.from_config(keys, self.retrieval, release=page_out)

    def entity_topk(self, queries: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """The ``k`` entity names nearest each query: ``(cosine, entity id)``, float32 and int64
        ``[n, k]``.

        Exact (:func:`~hpengine.retrieval.dense_topk` over the unit name vectors) while
        ``retrieval.seed_backend`` resolves to ``"exact"`` for the index's names; otherwise a
        :class:`~hpengine.retrieval.DenseIndex` over them, built once (at 4.2M names the exact scan
        reads 3.3 GB of name vectors per batch).
        """
        from hpengine.retrieval import dense_topk, resolve_backend

        names, cfg = self.index.entity_emb, self.retrieval
        if resolve_backend(cfg.seed_backend, int(names.shape[0]), cfg.approximate_min_keys) == "exact":
            return dense_topk(queries, names, k)
        if self._entity_index is None:
            self._entity_index = self._dense_index(names)
        return self._entity_index.search(queries, k)

    def passage_index(self):
        """The :class:`~hpengine.retrieval.DenseIndex` over passage embeddings (built once; its
        backend resolved from ``retrieval.seed_backend`` and the number of passages)."""
        if self._passage_index is None:
            self._passage_index = self._dense_index(self.index.passage_emb)
        return self._passage_index

    def dense_passages(self, query_emb: Tensor, k: int) -> Tensor:
        """Top-``k`` passages by cosine: int64 ``[Q, min(k, P)]`` (``[Q, 0]`` without passage embeddings)."""
        return self.dense_passages_scored(query_emb, k)[1]

    def dense_passages_scored(self, query_emb: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """Top-``k`` passages by cosine: float32 cosines and int64 ids, ``[Q, min(k, P)]`` each.

        Exact (:func:`~hpengine.retrieval.dense_topk` on the stored embeddings) unless
        :meth:`passage_index` resolved to ``faiss_ivf``: then its search (``-1`` padded where IVF
        finds fewer than ``k``)."""
        from hpengine.retrieval import dense_topk

        if self.index.passage_emb is None:
            empty = query_emb.new_full((query_emb.shape[0], 0), -1, dtype=torch.int64)
            return empty.float(), empty
        k = min(k, self.index.num_passages)
        with self.timer.stage("dense"):
            if self.passage_index().backend == "faiss_ivf":
                return self.passage_index().search(query_emb, k)
            return dense_topk(query_emb, self.index.passage_emb, k)

    def passage_facts(self, passages: Tensor) -> tuple[Tensor, Tensor]:
        """Facts of each question's ranked passages with a rank weight ``1 / (1 + rank)``: the
        first ``facts_per_passage`` facts of each passage.

        Shapes:
            passages: int64 ``[Q, R]`` (``-1`` padded) -> ids int64 ``[Q, R * F]`` (``-1`` padded),
            weights float ``[Q, R * F]``, F = ``config.facts_per_passage``.
        """
        per_passage = self.config.facts_per_passage
        crow, facts = self.lookups.passage_crow, self.lookups.passage_facts
        q, r = passages.shape
        safe = passages.clamp_min(0)
        start = crow[safe]
        count = torch.where(passages >= 0, crow[safe + 1] - start, torch.zeros_like(start))
        slot = torch.arange(per_passage, device=passages.device)
        gathered = facts[(start.unsqueeze(-1) + slot).clamp(max=max(facts.numel() - 1, 0))]
        ids = torch.where(slot < count.unsqueeze(-1), gathered, torch.full_like(gathered, -1))
        weight = (1.0 / (1.0 + torch.arange(r, device=passages.device, dtype=torch.float32))).view(1, r, 1)
        return ids.reshape(q, -1), weight.expand(q, r, per_passage).reshape(q, -1)

    # ------------------------------------------------------ no-LLM answers
    def _make_bridge_weight(self) -> Tensor:
        """float ``[V]`` multiplier of bridge support (IDF of the extracted incidence, 0 for barred names)."""
        idx, cfg = self.index, self.config
        weight = torch.ones(idx.num_entities, device=idx.device)
        if cfg.bridge_idf:
            degree = torch.bincount(idx.fact_entity_raw[1], minlength=idx.num_entities).float()
            weight = torch.log1p(idx.num_facts / degree.clamp_min(1.0))
        if cfg.bridge_skip_digits:
            ok = torch.tensor([not any(c.isdigit() for c in name) for name in idx.entities], device=idx.device,
                              dtype=torch.bool)
            weight = weight * ok
        return weight

    def _named_pairs(self, questions: list, fact_ids: Tensor, used: list) -> Tensor:
        """(question, entity) pairs of candidate bridge entities that the question already names
        or that earlier hops already used. String matching is per question by nature."""
        q, k = fact_ids.shape
        rows, ents = gather_csr_rows(self.bridge_crow, self.bridge_col, fact_ids.reshape(-1))
        pairs = torch.unique(torch.stack([rows // max(k, 1), ents]), dim=1)
        lowered = [" " + entity_key(text) + " " for text in questions]
        bad = [(qi, e) for qi, e in pairs.t().tolist()  # host copy: text matching below
               if e in used[qi] or f"{entity_key(self.index.entities[e])}" in lowered[qi]]
        if not bad:
            return pairs.new_zeros((2, 0))
        return torch.tensor(bad, dtype=torch.int64, device=fact_ids.device).t()

    def bridges(self, questions: list, question_emb: Tensor, fact_ids: Tensor, scores: Tensor, used: list,
                num_bridges: int = 1) -> tuple[list, Tensor]:
        """Bridge entities of scored evidence facts (the no-LLM answer;
        docs/methods/index.md#no-llm-answer-bridge-entities).

        Args:
            questions: Q question texts (entities they name are not bridges).
            question_emb: float ``[Q, D]``.
            fact_ids, scores: int64 / float ``[Q, K]`` evidence facts (``-1`` padded) and scores.
            used: per question, the set of entity ids already used (updated in place).
            num_bridges: B, bridges per question.

        Returns:
            ``(names, homes)``: per question the bridge names, best first (at most B), and their
            home passages int64 ``[Q, B]``, ``-1`` padded.
        """
        cfg, idx = self.config, self.index
        lk = self.lookups
        excluded = self._named_pairs(questions, fact_ids, used)
        if cfg.bridge_lookahead:
            ent, home, _ = linked_bridges(fact_ids, scores, self.bridge_crow, self.bridge_col, excluded,
                                          idx.num_entities, num_bridges, home_crow=lk.home_crow, home_col=lk.home_col,
                                          query_emb=question_emb, passage_emb=idx.passage_emb,
                                          entity_weight=self.bridge_weight, reduce=cfg.bridge_reduce,
                                          support_floor=cfg.bridge_support_floor)
        else:
            best, _ = bridge_entities(fact_ids, scores, self.bridge_crow, self.bridge_col, excluded, idx.num_entities,
                                      self.bridge_weight, reduce=cfg.bridge_reduce,
                                      support_floor=cfg.bridge_support_floor)
            ent, home = best.unsqueeze(1), self.homes_of(best, question_emb).unsqueeze(1)
        names = []
        for qi, row in enumerate(ent.tolist()):  # host copy: names are text
            used[qi].update(e for e in row if e >= 0)
            names.append([idx.entities[e] for e in row if e >= 0])
        return names, home

    def answer_from_facts(self, questions: list, question_emb: Tensor, fact_ids: Tensor, scores: Tensor) -> list:
        """The no-LLM answer of each question: its evidence facts' best bridge entity (``""`` for none)."""
        names, _ = self.bridges(questions, question_emb, fact_ids, scores, [set() for _ in questions])
        return [b[0] if b else "" for b in names]

    def homes_of(self, entity: Tensor, question_emb: Tensor) -> Tensor:
        """Home passage of each question's entity (``[Q]``, ``-1`` for none) most similar to the question."""
        question = torch.arange(entity.numel(), device=entity.device)
        home, _ = best_home(question, entity, self.lookups.home_crow, self.lookups.home_col, question_emb,
                            self.index.passage_emb)
        return home

    # ---------------------------------------------------------- chain texts
    def chain_facts(self, fact_ids: Tensor, scores: Tensor, distance: Tensor | None = None) -> list:
        """Per question, the :class:`ChainFact` records of ``[Q, K]`` fact ids (``-1`` skipped)."""
        idx = self.index
        if self._fp_list is None:  # host copy of sigma, once: chain records are text
            self._fp_list = idx.fact_passage.tolist()
        fp = self._fp_list
        if distance is None:
            distance = torch.full_like(fact_ids, -1)
        out = []
        for ids, sc, ds in zip(fact_ids.tolist(), scores.tolist(), distance.tolist()):
            out.append([ChainFact(idx.facts[f], idx.passages[fp[f]].title, fp[f], round(s, 5), d)
                        for f, s, d in zip(ids, sc, ds) if f >= 0])
        return out

    def passage_texts(self, passages: Tensor) -> list:
        """Per question, ``"title: text"`` of ``[Q, R]`` passage ids (``-1`` skipped)."""
        ps = self.index.passages
        return [[f"{ps[p].title}: {ps[p].text}" for p in row if p >= 0] for row in passages.tolist()]

    # ------------------------------------------------------------ LLM steps
    def read_hop(self, texts: list, facts: list, fallback: list) -> list:
        """LLM mode: the reader answers each sub-query from its facts; an "unknown" answer becomes
        ``fallback`` (the no-LLM bridge)."""
        with self.timer.stage("read"):
            read = self.reader.read(texts, facts)
        self.stats["unknown"] += sum(is_unknown(a) for a in read)
        return [f if is_unknown(a) else a for a, f in zip(read, fallback)]

    def final_answers(self, questions: list, facts: list, chains: list) -> list:
        """LLM mode: the final read of each question from its evidence facts, with the chain's
        (sub-question, answer) pairs shown as ``final_with_steps`` says, then ``resolve_choice``."""
        cfg = self.config
        steps = [[(h.subquery, h.answer) for h in chain] for chain in chains]
        shown = [st if self._final_steps(qu) else None for qu, st in zip(questions, steps)]
        with self.timer.stage("read"):
            final = self.reader.read(questions, facts, final=True, steps=shown)
        if cfg.resolve_choice:
            final = [resolve_choice(qu, a, st) for qu, a, st in zip(questions, final, steps)]
        return final

    def read_passages(self, questions: list, passages: Tensor) -> list:
        """LLM mode: the final read of each question from its ``[Q, R]`` top passages."""
        with self.timer.stage("read"):
            return self.reader.read(questions, self.passage_texts(passages), final=True)

    def _final_steps(self, question: str) -> bool:
        mode = self.config.final_with_steps
        return mode == "always" or (mode == "comparisons" and is_comparison(question))
