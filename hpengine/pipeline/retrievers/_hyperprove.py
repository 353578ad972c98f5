"""HyperProve (docs/methods/hyperprove.md): answer-guided multi-hop retrieval over the fact hypergraph.

All questions advance hop by hop together: per hop one encoder call, one batched
:func:`~hpengine.retrieval.hyperprove_hop` and, with an LLM, one batched read. The bridge (the
hop's answer) rewrites the next sub-query; the selected facts are carried as the frontier.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from hpengine.config import HyperProveConfig
from hpengine.errors import UserError
from hpengine.retrieval import lead_passages, rank_passages
from hpengine.pipeline._text import names_shared, rewrite
from hpengine.pipeline._types import HopRecord, Retrieved
from hpengine.pipeline.retrievers._base import Retriever, register_retriever


@dataclass
class ChainState:
    """What a batch carries from hop to hop (per question lists, index ``i`` = question ``i``).

    Attributes:
        frontier: int64 ``[Q, F]`` facts selected so far, in hop blocks of K, ``-1`` padded.
        answers: per question, the answers of its hops so far (no-LLM: the best bridge).
        carried: no-LLM mode: the bridges the next hop's query carries.
        used: per question, entity ids already used as bridges.
        chains: per question, its :class:`HopRecord` list.
        diagnostics: per question, per hop ``{stage: passage ids}`` (with ``diagnostics`` on).
        linked: per hop, int64 ``[Q, B]`` passages titled with the hop's bridges / answer.
    """

    frontier: Tensor
    answers: list
    carried: list
    used: list
    chains: list
    diagnostics: list
    linked: list = field(default_factory=list)

    @classmethod
    def start(cls, num_questions: int, device) -> "ChainState":
        q = num_questions
        return cls(torch.full((q, 0), -1, dtype=torch.int64, device=device), [[] for _ in range(q)], [""] * q,
                   [set() for _ in range(q)], [[] for _ in range(q)], [[] for _ in range(q)])

    def record_hop(self, texts: list, hop_answers: list, facts: list, homes: Tensor, active: Tensor,
                   active_list: list, with_diagnostics: bool) -> None:
        """Append a hop's answers, chain records and linked passages (inactive questions: nothing)."""
        self.linked.append(torch.where(active.unsqueeze(1), homes, torch.full_like(homes, -1)))
        for i, row in enumerate(self.linked[-1].tolist()):  # host copy: chain records
            if not active_list[i]:
                continue
            if with_diagnostics:
                self.diagnostics[i][-1]["linked"] = sorted({p for p in row if p >= 0})
            self.answers[i].append(hop_answers[i])
            self.chains[i].append(HopRecord(texts[i], hop_answers[i], facts[i], [p for p in row if p >= 0]))


@register_retriever
class HyperProveRetriever(Retriever):
    """Answer-guided hypergraph expansion; hop parameters are the engine's ``retrieval`` config."""

    name = "hyperprove"
    config_class = HyperProveConfig

    def __init__(self, steps):
        super().__init__(steps)
        self._check_sizes()
        self._scratch: dict = {}  # the hop's scratch buffers, reused across hops and batches

    def _check_sizes(self) -> None:
        """Refuse, before any question, hops the index cannot serve: hop ``t`` forces its ``t * K``
        carried facts and its ``S`` seeds into a subgraph of ``M`` facts, which must hold them
        when the index has more than ``M`` facts (else the hop fails mid-run).

        Raises:
            UserError: ``(num_hops - 1) * top_k + num_seeds > subgraph_size < H``.
        """
        r, hops = self.steps.retrieval, self.config.num_hops
        need = (hops - 1) * r.top_k + r.num_seeds
        if self.steps.index.num_facts > r.subgraph_size and need > r.subgraph_size:
            raise UserError(
                f"engine.num_hops={hops} carries (num_hops - 1) * retrieval.top_k={r.top_k} facts into its last hop, "
                f"which with its retrieval.num_seeds={r.num_seeds} seeds must fit the subgraph of "
                f"retrieval.subgraph_size={r.subgraph_size} facts; lower engine.num_hops or retrieval.top_k, or raise "
                f"retrieval.subgraph_size (got {hops - 1} * {r.top_k} + {r.num_seeds} = {need} > {r.subgraph_size})")

    def retrieve(self, questions: list, question_emb: Tensor) -> Retrieved:
        """The hops of every question together; answers and chain are the hops' own."""
        s = self.steps
        plans = self._plans(questions)
        state = ChainState.start(len(questions), s.index.device)
        for t in range(max(len(p) for p in plans)):
            self._hop(questions, plans, t, question_emb, state)
        if s.use_llm:
            final = s.final_answers(questions, self._fact_texts(state.frontier), state.chains)
        else:
            final = [a[-1] if a else "" for a in state.answers]
        return Retrieved(self._ranking(question_emb, state), answers=final, chains=state.chains,
                         diagnostics=state.diagnostics)

    def _hop(self, questions: list, plans: list, t: int, question_emb: Tensor, state: ChainState) -> None:
        """Hop ``t`` of every question that has one: search, select facts, answer, record."""
        from hpengine.retrieval import hyperprove_hop

        s, cfg = self.steps, self.config
        active_list = [len(p) > t for p in plans]
        texts = self._hop_queries(questions, plans, t, active_list, state)
        active = torch.tensor(active_list, device=s.index.device)
        search = self._search_texts(questions, texts, active_list, state.answers)
        query_emb = question_emb if search == questions else s.encode(search)
        with s.timer.stage("retrieve"):
            hop = hyperprove_hop(s.index.graph, s.index.fact_emb, query_emb, state.frontier, active=active,
                                 index=s.fact_index(), cfg=s.retrieval, workspace=self._scratch)
        state.frontier = hop.frontier
        if cfg.diagnostics:
            self._record_diagnostics(state.diagnostics, {"seeds": hop.seeds, "subgraph": hop.subgraph,
                                                     "selected": hop.fact_ids}, active_list)
        facts = s.chain_facts(hop.fact_ids, hop.scores, hop.distance)
        num_bridges = 1 if s.use_llm else cfg.bridges_per_hop
        with s.timer.stage("bridge"):
            bridges, homes = s.bridges(questions, question_emb, hop.fact_ids, hop.scores, state.used, num_bridges)
        best = [b[0] if b else "" for b in bridges]
        if s.use_llm:
            hop_answers = s.read_hop(texts, self._fact_texts(state.frontier), fallback=best)
            # the passage titled with the answer; where the answer names no titled entity (a date,
            # a name spelled unlike any title) the no-LLM bridge's best home stands in
            answer_homes = s.homes_of(s.lookups.entity_ids(hop_answers), question_emb).unsqueeze(1)
            homes = torch.where(answer_homes >= 0, answer_homes, homes[:, :1])
        else:
            hop_answers = best
            state.carried = [" ".join(b) for b in bridges]
        state.record_hop(texts, hop_answers, facts, homes, active, active_list, cfg.diagnostics)

    def _hop_queries(self, questions: list, plans: list, t: int, active: list, state: ChainState) -> list:
        """Query text of hop ``t`` per question (text building: per question by nature)."""
        s, cfg = self.steps, self.config
        texts = []
        for i, plan in enumerate(plans):
            if not active[i]:
                texts.append(questions[i])
            elif s.decomposer is None:
                carried = state.carried[i]
                texts.append(cfg.bridge_template.format(question=questions[i], bridge=carried).strip()
                             if carried else questions[i])
            else:
                texts.append(rewrite(plan[t], state.answers[i]))
        return texts

    def _ranking(self, question_emb: Tensor, state: ChainState) -> Tensor:
        """Ranked passages ``[Q, passage_width]``: the chain (each hop's facts, then its linked
        passages), the dense ranking to fill up; in LLM mode led by one hop on the whole question."""
        from hpengine.retrieval import hyperprove_hop

        s, cfg = self.steps, self.config
        idx = s.index
        dense = s.dense_passages(question_emb, cfg.passage_width)
        ranked = rank_passages(state.frontier, idx.fact_passage, dense, cfg.passage_width,
                               facts_per_hop=s.retrieval.top_k, passages_per_hop=cfg.passages_per_hop,
                               linked=torch.cat(state.linked, dim=1) if cfg.link_bridge_passages else None)
        if s.decomposer is not None and cfg.question_passages > 0:
            with s.timer.stage("retrieve"):
                empty = state.frontier.new_full((question_emb.shape[0], 0), -1)
                lead = hyperprove_hop(idx.graph, idx.fact_emb, question_emb, empty, index=s.fact_index(),
                                      cfg=s.retrieval, workspace=self._scratch).fact_ids
            ranked = lead_passages(lead, idx.fact_passage, ranked, cfg.question_passages)
        return ranked

    # ------------------------------------------------------------- its steps
    def _plans(self, questions: list) -> list:
        """Sub-queries per question: the decomposer's plan, or the question ``num_hops`` times (no LLM)."""
        s = self.steps
        if s.decomposer is None:
            return [[q] * self.config.num_hops for q in questions]
        with s.timer.stage("decompose"):
            return s.decomposer.decompose(questions)

    def _search_texts(self, questions: list, texts: list, active: list, answers: list) -> list:
        """LLM mode: the text each question's hop searches with, from ``search_template``.
        ``answers[i]`` holds question i's earlier hop answers (anchors with ``answers_anchor``).
        No-LLM mode: ``texts`` unchanged."""
        if self.steps.decomposer is None:
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

    def _fact_texts(self, fact_ids: Tensor) -> list:
        """Per question, the texts of ``[Q, F]`` fact ids (``-1`` skipped)."""
        facts = self.steps.index.facts
        return [[facts[f] for f in row if f >= 0] for row in fact_ids.tolist()]

    def _record_diagnostics(self, out: list, stages: dict, active: list) -> None:
        """Append each active question's passage ids per stage (``stages``: name -> fact ids
        ``[Q, n]``, ``-1`` padded). Host copies: diagnostics mode only."""
        fp = self.steps.index.fact_passage

        def passages(ids):
            return torch.where(ids >= 0, fp[ids.clamp_min(0)], torch.full_like(ids, -1)).tolist()

        rows = {k: passages(v) for k, v in stages.items()}
        for i, is_active in enumerate(active):
            if is_active:
                out[i].append({k: sorted({p for p in v[i] if p >= 0}) for k, v in rows.items()})
