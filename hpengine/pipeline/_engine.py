"""The QA engine: questions in, answers with evidence chains and ranked passages out (SPEC §2).

All questions of a batch advance hop by hop together: one encoder call, one
``hyperprove_hop`` and (with an LLM) one batched ``generate`` per hop. Python loops here run
over hops, and over questions only at the text boundary (building prompts and query strings,
reading the answers back), never around tensor work.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from hpengine._profiling import StageTimer
from hpengine.config import RetrievalConfig
from hpengine.models._decomposer import names_shared, rewrite
from hpengine.models._entities import entity_key
from hpengine.models._reader import is_comparison, is_unknown, resolve_choice
from hpengine.pipeline._ranking import (
    best_home,
    bridge_entities,
    linked_bridges,
    lead_passages,
    rank_passages,
)
from hpengine.sparse import csr_arrays, gather_csr_rows

RETRIEVERS = ("hyperprove", "dense")
FINAL_STEPS = ("always", "comparisons", "never")


@dataclass
class ChainFact:
    text: str
    title: str
    passage: int
    score: float
    distance: int  # BFS distance to the carried frontier; -1 when unreachable / first hop


@dataclass
class HopRecord:
    subquery: str  # as rewritten with the answers of earlier hops
    answer: str
    facts: list
    linked: list = field(default_factory=list)  # passage ids titled with the hop's bridges / answer


@dataclass
class Prediction:
    question: str
    answer: str
    chain: list
    passages: list  # ranked passage ids
    diagnostics: list = field(default_factory=list)  # per hop: {"seeds", "subgraph", "selected"} passage ids

    def to_dict(self, index) -> dict:
        return {
            "question": self.question, "prediction": self.answer,
            "retrieved": [index.passages[p].title for p in self.passages],
            "chain": [{"subquery": h.subquery, "answer": h.answer, "facts": [vars(f) for f in h.facts],
                       "linked": [index.passages[p].title for p in h.linked]} for h in self.chain],
        }


@dataclass
class EngineConfig:
    """Pipeline settings around the hop (retrieval parameters live in RetrievalConfig)."""

    retriever: str = "hyperprove"
    num_hops: int = 2  # no-LLM mode: fixed hops; with an LLM: the most sub-queries a plan may have
    passage_width: int = 10  # ranked passages returned per question
    bridge_template: str = "{question} {bridge}"  # no-LLM mode: next hop's query
    reader_passages: int = 5  # dense retriever: passages given to the reader
    diagnostics: bool = False  # record per-hop passage sets of seeds, subgraph and selected facts
    passages_per_hop: int = 0  # leading passages per hop in the ranking (0: plain hop-then-score order)
    bridge_idf: bool = False  # weight bridge support by log(1 + H / d_e) (off: the dev sweep found it slightly worse)
    bridge_skip_digits: bool = True  # dates and numbers are not carried as bridges (no-LLM mode)
    bridge_reduce: str = "sum"  # sum | max of the scores of the facts naming a candidate bridge
    bridge_skip_own_title: bool = True  # a fact's own passage title is its subject, not a bridge it points to
    bridge_lookahead: bool = True  # score bridges by the question's cosine with the passage titled with them
    bridges_per_hop: int = 2  # no-LLM mode: bridges carried into the next query (bridge comparisons need two)
    link_bridge_passages: bool = True  # rank the passages titled with a hop's bridges (answers) after its facts
    # LLM mode: which final reads also see each hop's (sub-question, answer): "always", "never", or
    # "comparisons" (choice and yes/no questions, decided from the sub-answers; for the others the
    # 1.5B reader copies the last sub-answer instead of reading the facts)
    final_with_steps: str = "comparisons"
    # LLM mode: the text a hop searches with; the question keeps the context that a sub-question
    # drops ("What is the name of the star?"); the reader still reads the plain sub-question
    search_template: str = "{subquery} {question}"
    # ... except for a sub-question that names something the question names ("Who directed
    # Flannelfoot?" in a comparison of two films): it searches alone, the question would pull
    # in the other film (off: every sub-question uses search_template)
    anchored_search_alone: bool = True
    # ... and so is a sub-question that names an earlier hop's answer ("What is the average
    # snowfall in Seattle?" after hop 1 answered "Seattle"): the question would pull the search
    # back to hop 1's facts. Off by default: a real run (session 4) changed 13 of 100 chains on
    # 2Wiki and MuSiQue each for +1 / +0 EM and -1.0 / -2.2 R@5 points
    answers_anchor: bool = False
    # LLM mode: the ranking starts with the best passages of one hop on the whole question (the
    # no-LLM mode's first hop); the answer-guided chain follows. Retrieval only: the readers do
    # not see that hop's facts (0: off)
    question_passages: int = 1
    # LLM mode: a choice question's answer that is what one option led to ("Which film has the
    # director who died first, A or B?" answered with A's director) is mapped back to that option
    # through the chain (models._reader.resolve_choice)
    resolve_choice: bool = True

    def __post_init__(self):
        if self.retriever not in RETRIEVERS:
            raise ValueError(f"retriever must be one of {list(RETRIEVERS)} (got {self.retriever!r})")
        if self.num_hops < 1:
            raise ValueError(f"num_hops must be >= 1 (got {self.num_hops})")
        if self.bridges_per_hop < 1:
            raise ValueError(f"bridges_per_hop must be >= 1 (got {self.bridges_per_hop})")
        # the field was a bool before session 4: True / False (or Hydra's "true" / "false") still work
        legacy = {"true": "always", "false": "never"}
        self.final_with_steps = legacy.get(str(self.final_with_steps).lower(), self.final_with_steps)
        if self.final_with_steps not in FINAL_STEPS:
            raise ValueError(f"final_with_steps must be one of {list(FINAL_STEPS)} (got {self.final_with_steps!r})")


class Engine:
    """Answer-guided multi-hop retrieval and reading over an :class:`~hpengine.graph.Index`.

    Args:
        index: the index (its tensors' device is where retrieval runs).
        encoder: query encoder; must be the one the index was built with.
        retrieval: hop parameters.
        config: pipeline parameters.
        decomposer, reader: LLM components; both None selects the no-LLM mode.
    """

    def __init__(self, index, encoder, retrieval: RetrievalConfig | None = None, config: EngineConfig | None = None,
                 *, decomposer=None, reader=None):
        if index.meta.get("encoder") not in (None, encoder.name):
            raise ValueError(f"index was built with encoder {index.meta.get('encoder')!r} but the engine got "
                             f"{encoder.name!r}; use the same encoder")
        self.index = index
        self.encoder = encoder
        self.retrieval = retrieval or RetrievalConfig()
        self.config = config or EngineConfig()
        self.decomposer = decomposer
        self.reader = reader
        self.timer = StageTimer(index.device)
        self.stats = {"questions": 0}
        graph = index.graph
        self._key_to_entity = {entity_key(name): i for i, name in enumerate(index.entities)}
        self._title_entity = torch.tensor([self._key_to_entity.get(entity_key(p.title), -1) for p in index.passages],
                                          dtype=torch.int64, device=index.device)  # [P]
        self._home_crow, self._home_col = self._home_csr()
        raw = self._bridge_pairs(index)
        # CSR of the extracted (pre-synonym) incidence: bridges are entities the facts name
        self._raw_crow, self._raw_col = csr_arrays(raw[0], raw[1], index.num_facts)
        self._passage_crow, self._passage_facts = csr_arrays(
            graph.fact_passage, torch.arange(index.num_facts, device=index.device), index.num_passages)
        self._bridge_weight = self._make_bridge_weight()
        self._fact_index = None  # built on first use, once per engine (FAISS training is not per hop)
        self._workspace: dict = {}
        self._fp_list: list | None = None  # the hop's scratch buffers, reused across hops and batches

    # -------------------------------------------------------------- helpers
    def _bridge_pairs(self, index) -> Tensor:
        """Extracted (fact, entity) pairs that may serve as bridges: with ``bridge_skip_own_title``
        the title entity of a fact's own passage is dropped (the fact is about it; the next hop
        needs what it points to)."""
        raw = index.fact_entity_raw
        if not self.config.bridge_skip_own_title or raw.numel() == 0:
            return raw
        own = self._title_entity[index.fact_passage[raw[0]]] == raw[1]
        return raw[:, ~own]

    def _home_csr(self) -> tuple[Tensor, Tensor]:
        """CSR ``[V, P]`` of each entity's home passages: the passages titled with its name."""
        titled = torch.nonzero(self._title_entity >= 0).squeeze(1)
        return csr_arrays(self._title_entity[titled], titled, self.index.num_entities)

    def _make_bridge_weight(self) -> Tensor:
        """float ``[V]`` multiplier of bridge support (IDF of the extracted incidence, 0 for barred names)."""
        idx, cfg = self.index, self.config
        weight = torch.ones(idx.num_entities, device=idx.device)
        if cfg.bridge_idf:
            degree = torch.bincount(idx.fact_entity_raw[1], minlength=idx.num_entities).float()
            weight = torch.log1p(idx.num_facts / degree.clamp_min(1.0))
        if cfg.bridge_skip_digits:
            ok = torch.tensor([not any(c.isdigit() for c in name) for name in idx.entities], device=idx.device)
            weight = weight * ok
        return weight

    def _facts_index(self):
        if self._fact_index is None:
            from hpengine.retrieval import DenseIndex

            r = self.retrieval
            self._fact_index = DenseIndex(self.index.fact_emb, backend=r.seed_backend, nlist=r.faiss_nlist,
                                          nprobe=r.faiss_nprobe)
        return self._fact_index

    def _encode(self, texts: list) -> Tensor:
        with self.timer.stage("encode"):
            return self.encoder.encode(texts).to(self.index.device, self.index.fact_emb.dtype)

    def _dense_passages(self, query_emb: Tensor, k: int) -> Tensor:
        from hpengine.retrieval import dense_topk

        if self.index.passage_emb is None:
            return query_emb.new_full((query_emb.shape[0], 0), -1, dtype=torch.int64)
        k = min(k, self.index.num_passages)
        with self.timer.stage("dense"):
            _, ids = dense_topk(query_emb, self.index.passage_emb, k)
        return ids

    def _named_pairs(self, questions: list, fact_ids: Tensor, used: list) -> Tensor:
        """(question, entity) pairs of candidate bridge entities that the question already names
        or that earlier hops already used. String matching is per question by nature."""
        q, k = fact_ids.shape
        rows, ents = gather_csr_rows(self._raw_crow, self._raw_col, fact_ids.reshape(-1))
        pairs = torch.unique(torch.stack([rows // k, ents]), dim=1)
        lowered = [" " + entity_key(text) + " " for text in questions]
        bad = [(qi, e) for qi, e in pairs.t().tolist()  # host copy: text matching below
               if e in used[qi] or f"{entity_key(self.index.entities[e])}" in lowered[qi]]
        if not bad:
            return pairs.new_zeros((2, 0))
        return torch.tensor(bad, dtype=torch.int64, device=fact_ids.device).t()

    def _bridges(self, questions: list, question_emb: Tensor, fact_ids: Tensor, scores: Tensor, used: list,
                 num_bridges: int = 1) -> tuple[list, Tensor]:
        """No-LLM bridges of a hop: entity names per question (best first, at most ``num_bridges``,
        each recorded in ``used``) and their home passages, int64 ``[Q, num_bridges]``, ``-1`` padded."""
        cfg, idx = self.config, self.index
        excluded = self._named_pairs(questions, fact_ids, used)
        if cfg.bridge_lookahead:
            ent, home, _ = linked_bridges(fact_ids, scores, self._raw_crow, self._raw_col, excluded, idx.num_entities,
                                          num_bridges, home_crow=self._home_crow, home_col=self._home_col,
                                          query_emb=question_emb, passage_emb=idx.passage_emb,
                                          entity_weight=self._bridge_weight, reduce=cfg.bridge_reduce)
        else:
            best, _ = bridge_entities(fact_ids, scores, self._raw_crow, self._raw_col, excluded, idx.num_entities,
                                      self._bridge_weight, reduce=cfg.bridge_reduce)
            ent, home = best.unsqueeze(1), self._homes_of(best, question_emb).unsqueeze(1)
        names = []
        for qi, row in enumerate(ent.tolist()):  # host copy: names are text
            used[qi].update(e for e in row if e >= 0)
            names.append([idx.entities[e] for e in row if e >= 0])
        return names, home

    def _homes_of(self, entity: Tensor, question_emb: Tensor) -> Tensor:
        """Home passage of each question's entity (``[Q]``, ``-1`` for none) most similar to the question."""
        question = torch.arange(entity.numel(), device=entity.device)
        home, _ = best_home(question, entity, self._home_crow, self._home_col, question_emb, self.index.passage_emb)
        return home

    def _answer_entities(self, answers: list) -> Tensor:
        """Entity id named exactly (up to :func:`entity_key`) by each answer string, ``-1`` otherwise."""
        ids = [self._key_to_entity.get(entity_key(a), -1) if a else -1 for a in answers]
        return torch.tensor(ids, dtype=torch.int64, device=self.index.device)

    def _chain_facts(self, fact_ids: Tensor, scores: Tensor, distance: Tensor) -> list:
        idx = self.index
        if self._fp_list is None:  # host copy of sigma, once: chain records are text
            self._fp_list = idx.fact_passage.tolist()
        fp = self._fp_list
        out = []
        for ids, sc, ds in zip(fact_ids.tolist(), scores.tolist(), distance.tolist()):
            out.append([ChainFact(idx.facts[f], idx.passages[fp[f]].title, fp[f], round(s, 5), d)
                        for f, s, d in zip(ids, sc, ds) if f >= 0])
        return out

    # ------------------------------------------------------------------ run
    def answer(self, questions: list) -> list:
        """Answer a batch of questions.

        Returns:
            one :class:`Prediction` per question.
        """
        if not questions:
            return []
        self.stats["questions"] += len(questions)
        if self.config.retriever == "dense":
            return self._answer_dense(questions)
        return self._answer_hyperprove(questions)

    def _plans(self, questions: list) -> list:
        if self.decomposer is None:
            return [[q] * self.config.num_hops for q in questions]
        with self.timer.stage("decompose"):
            return self.decomposer.decompose(questions)

    def _answer_hyperprove(self, questions: list) -> list:
        from hpengine.retrieval import hyperprove_hop

        idx, cfg = self.index, self.config
        q = len(questions)
        plans = self._plans(questions)
        num_hops = max(len(p) for p in plans)
        question_emb = self._encode(questions)
        frontier = torch.full((q, 0), -1, dtype=torch.int64, device=idx.device)
        answers = [[] for _ in range(q)]  # per hop: the hop's answer (no-LLM: its best bridge)
        carried = [""] * q  # no-LLM mode: the bridges the next query carries
        chains = [[] for _ in range(q)]
        used = [set() for _ in range(q)]
        diagnostics = [[] for _ in range(q)]
        linked = []  # per hop: [Q, B] passages titled with the hop's bridges / answer
        num_bridges = cfg.bridges_per_hop if self.reader is None else 1
        for t in range(num_hops):
            active_list = [len(p) > t for p in plans]
            texts = self._hop_queries(questions, plans, t, active_list, answers, carried)
            active = torch.tensor(active_list, device=idx.device)
            search = self._search_texts(questions, texts, active_list, answers)
            query_emb = question_emb if search == questions else self._encode(search)
            with self.timer.stage("retrieve"):
                hop = hyperprove_hop(idx.graph, idx.fact_emb, query_emb, frontier, active=active,
                                     index=self._facts_index(), cfg=self.retrieval, workspace=self._workspace)
            frontier = hop.frontier
            if cfg.diagnostics:
                self._record_diagnostics(diagnostics, hop, active_list)
            facts = self._chain_facts(hop.fact_ids, hop.scores, hop.distance)
            with self.timer.stage("bridge"):
                bridges, homes = self._bridges(questions, question_emb, hop.fact_ids, hop.scores, used, num_bridges)
            if self.reader is None:
                hop_answers = [b[0] if b else "" for b in bridges]
                carried = [" ".join(b) for b in bridges]
            else:
                hop_answers, homes = self._read_hop(texts, frontier, bridges, homes, question_emb)
            linked.append(torch.where(active.unsqueeze(1), homes, torch.full_like(homes, -1)))
            for i, row in enumerate(linked[-1].tolist()):  # host copy: chain records
                if cfg.diagnostics and active_list[i]:
                    diagnostics[i][-1]["linked"] = sorted({p for p in row if p >= 0})
                if active_list[i]:
                    answers[i].append(hop_answers[i])
                    chains[i].append(HopRecord(texts[i], hop_answers[i], facts[i], [p for p in row if p >= 0]))
        if self.reader is None:
            final = [a[-1] if a else "" for a in answers]
        else:
            steps = [[(h.subquery, h.answer) for h in chain] for chain in chains]
            shown = [st if self._final_steps(qu) else None for qu, st in zip(questions, steps)]
            with self.timer.stage("read"):
                final = self.reader.read(questions, self._frontier_texts(frontier), final=True, steps=shown)
            if cfg.resolve_choice:
                final = [resolve_choice(qu, a, st) for qu, a, st in zip(questions, final, steps)]
        dense = self._dense_passages(question_emb, cfg.passage_width)
        ranked = rank_passages(frontier, idx.fact_passage, dense, cfg.passage_width,
                               facts_per_hop=self.retrieval.top_k, passages_per_hop=cfg.passages_per_hop,
                               linked=torch.cat(linked, dim=1) if cfg.link_bridge_passages else None)
        if self.decomposer is not None and cfg.question_passages > 0:
            with self.timer.stage("retrieve"):
                empty = torch.full((q, 0), -1, dtype=torch.int64, device=idx.device)
                lead = hyperprove_hop(idx.graph, idx.fact_emb, question_emb, empty, index=self._facts_index(),
                                      cfg=self.retrieval, workspace=self._workspace).fact_ids
            ranked = lead_passages(lead, idx.fact_passage, ranked, cfg.question_passages)
        return [Prediction(questions[i], final[i], chains[i], [p for p in ranked[i].tolist() if p >= 0],
                           diagnostics[i]) for i in range(q)]

    def _final_steps(self, question: str) -> bool:
        mode = self.config.final_with_steps
        return mode == "always" or (mode == "comparisons" and is_comparison(question))

    def _hop_queries(self, questions: list, plans: list, t: int, active: list, answers: list, carried: list) -> list:
        """Query text of hop ``t`` per question (text building: per question by nature)."""
        texts = []
        for i, plan in enumerate(plans):
            if not active[i]:
                texts.append(questions[i])
            elif self.decomposer is None:
                texts.append(self.config.bridge_template.format(question=questions[i], bridge=carried[i]).strip()
                             if carried[i] else questions[i])
            else:
                texts.append(rewrite(plan[t], answers[i]))
        return texts

    def _search_texts(self, questions: list, texts: list, active: list, answers: list) -> list:
        """LLM mode: hop ``t``'s search text per question from ``search_template`` (text building).
        ``answers[i]`` holds question i's earlier hop answers (anchors with ``answers_anchor``)."""
        if self.decomposer is None:
            return texts
        cfg = self.config
        out = []
        for q, s, a, earlier in zip(questions, texts, active, answers):
            anchors = " ".join([q, *earlier]) if cfg.answers_anchor else q
            if not a or s == q:
                out.append(q)
            elif cfg.anchored_search_alone and names_shared(s, anchors):
                out.append(s)
            else:
                out.append(cfg.search_template.format(subquery=s, question=q).strip())
        return out

    def _read_hop(self, texts: list, frontier: Tensor, bridges: list, homes: Tensor, question_emb: Tensor):
        """LLM mode: the reader answers the hop's sub-query from the chain so far; an "unknown"
        answer falls back to the no-LLM bridge. Returns the answers and the ``[Q, 1]`` passages
        titled with them; where an answer names no titled entity (a date, a name spelled unlike
        any title) the no-LLM bridge's best home passage stands in."""
        with self.timer.stage("read"):
            read = self.reader.read(texts, self._frontier_texts(frontier))
        hop_answers = [(b[0] if b else "") if is_unknown(a) else a for a, b in zip(read, bridges)]
        answer_homes = self._homes_of(self._answer_entities(hop_answers), question_emb).unsqueeze(1)
        return hop_answers, torch.where(answer_homes >= 0, answer_homes, homes[:, :1])

    def _record_diagnostics(self, out: list, hop, active: list) -> None:
        """Passage ids reached by each stage of the hop (host copies: diagnostics mode only)."""
        fp = self.index.fact_passage

        def passages(ids):
            return torch.where(ids >= 0, fp[ids.clamp_min(0)], torch.full_like(ids, -1)).tolist()

        stages = {"seeds": passages(hop.seeds), "subgraph": passages(hop.subgraph), "selected": passages(hop.fact_ids)}
        for i, is_active in enumerate(active):
            if is_active:
                out[i].append({k: sorted({p for p in v[i] if p >= 0}) for k, v in stages.items()})

    def _frontier_texts(self, frontier: Tensor) -> list:
        return [[self.index.facts[f] for f in row if f >= 0] for row in frontier.tolist()]

    def _answer_dense(self, questions: list) -> list:
        idx, cfg = self.index, self.config
        query_emb = self._encode(questions)
        ranked = self._dense_passages(query_emb, cfg.passage_width)
        top = ranked[:, : cfg.reader_passages]
        if self.reader is None:
            # facts of the top passages, weighted by passage rank, give the answer entity
            fact_ids, scores = self._passage_facts_of(top)
            used = [set() for _ in questions]
            bridges, _ = self._bridges(questions, query_emb, fact_ids, scores, used)
            final = [b[0] if b else "" for b in bridges]
        else:
            texts = [[f"{idx.passages[p].title}: {idx.passages[p].text}" for p in row if p >= 0] for row in top.tolist()]
            with self.timer.stage("read"):
                final = self.reader.read(questions, texts, final=True)
        return [Prediction(questions[i], final[i], [], [p for p in ranked[i].tolist() if p >= 0])
                for i in range(len(questions))]

    def _passage_facts_of(self, passages: Tensor, per_passage: int = 16):
        """Facts of each question's top passages: ids ``[Q, R*per_passage]`` and a rank weight."""
        q, r = passages.shape
        safe = passages.clamp_min(0)
        start = self._passage_crow[safe]
        count = torch.where(passages >= 0, self._passage_crow[safe + 1] - start, torch.zeros_like(start))
        slot = torch.arange(per_passage, device=passages.device)
        ids = torch.where(slot < count.unsqueeze(-1), self._passage_facts[(start.unsqueeze(-1) + slot).clamp(
            max=self._passage_facts.numel() - 1)], torch.full_like(start.unsqueeze(-1).expand(-1, -1, per_passage), -1))
        weight = (1.0 / (1.0 + torch.arange(r, device=passages.device, dtype=torch.float32))).view(1, r, 1)
        scores = weight.expand(q, r, per_passage)
        return ids.reshape(q, -1), scores.reshape(q, -1)
