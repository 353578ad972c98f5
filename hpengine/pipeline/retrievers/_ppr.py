"""Hypergraph personalised PageRank (docs/methods/ppr.md; the core of HippoRAG), batched.

The entities a question names seed a personalised PageRank over the entity-fact-passage star
graph of the index; passages rank by the PPR mass that reaches them. All questions of a batch
link and walk together: one NER pass, one encoder call for their mentions, one dense top-k over
entity names, one :func:`~hpengine.retrieval.personalized_pagerank` over ``[N, Q]`` blocks.
"""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.config import EncoderConfig, PPRConfig
from hpengine.pipeline._types import Retrieved
from hpengine.retrieval import lead_then_fill, pad_rows
from hpengine.pipeline.retrievers._base import Retriever, register_retriever
from hpengine.sparse import gather_csr_rows

NO_SEED_NOTE = "ppr: no entity linked, dense passage ranking"
# passages whose dense cosine spreads the passage share of the restart mass (passage_reset > 0);
# min-max normalised over these, so the last of them gets none
RESET_PASSAGES = 200


@register_retriever
class PPRRetriever(Retriever):
    """Personalised PageRank from the question's linked entities (see :class:`~hpengine.config.PPRConfig`)."""

    name = "ppr"
    config_class = PPRConfig

    def __init__(self, steps):
        super().__init__(steps)
        idx = steps.index
        # HippoRAG's node specificity: 1 / the number of passages an entity occurs in
        self.entity_passages = idx.graph.entity_passage_count().to(idx.fact_emb.device)  # [V]
        self._tagger = None
        # a cosine threshold is on the encoder's scale: unset, it is the encoder's (E5's cosines sit higher)
        threshold = self.config.link_threshold
        if threshold is None:
            threshold = getattr(steps.encoder, "link_threshold", EncoderConfig.link_threshold)
        self.link_threshold = float(threshold)

    @property
    def tagger(self):
        if self._tagger is None:
            from hpengine.models import MentionTagger

            self._tagger = MentionTagger(self.config.ner_model)
        return self._tagger

    # ------------------------------------------------------------------ seeds
    def seeds(self, questions: list, question_emb: Tensor) -> tuple[Tensor, Tensor]:
        """The personalization of each question as sparse node mass.

        Entity seeds (linked mentions and question, fact seeds) share ``1 - passage_reset`` of
        the mass in proportion to their weights, passages ``passage_reset`` in proportion to
        their min-max normalised dense cosine; a question with no entity seed gives all its mass
        to passages (when there are any).

        Returns:
            ``(ids, mass)``: int64 ``[Q, R]`` star-graph node ids (entities ``[0, V)``, passages
            ``[V + H, N)``), ``-1`` padded, and float32 ``[Q, R]`` non-negative mass, each row
            summing to 1, or all zero when nothing was linked.
        """
        s, cfg, idx = self.steps, self.config, self.steps.index
        q = len(questions)
        rows, nodes, weights = [], [], []
        for row, ent, sim in self._entity_links(questions, question_emb):
            keep = (ent >= 0) & (sim >= self.link_threshold)
            rows.append(row[keep])
            nodes.append(ent[keep])
            weights.append(self._seed_weight(ent[keep], sim[keep]))
        if cfg.fact_seeds > 0 and idx.num_facts:
            row, ent, score = self._fact_entities(question_emb)
            rows.append(row)
            nodes.append(ent)
            weights.append(self._seed_weight(ent, score))
        if cfg.passage_reset > 0 and idx.passage_emb is not None and idx.num_passages:
            cos, pid = s.dense_passages_scored(question_emb, RESET_PASSAGES)
            low, high = cos.min(dim=1, keepdim=True).values, cos.max(dim=1, keepdim=True).values
            scaled = torch.where(high > low, (cos - low) / (high - low), torch.ones_like(cos))
            keep = pid >= 0
            rows.append(torch.arange(q, device=pid.device).unsqueeze(1).expand_as(pid)[keep])
            nodes.append(self.passage_nodes(pid[keep]))
            weights.append(scaled[keep].float())
        device = question_emb.device
        row = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.int64, device=device)
        node = torch.cat(nodes) if nodes else torch.zeros(0, dtype=torch.int64, device=device)
        weight = torch.cat(weights) if weights else torch.zeros(0, device=device)
        # one entry per (question, node): repeated links add up
        num_nodes = idx.num_entities + idx.num_facts + idx.num_passages
        key, inverse = torch.unique(row * num_nodes + node, return_inverse=True)
        mass = torch.zeros(key.numel(), device=device).index_add_(0, inverse, weight.float())
        row, node = key // num_nodes, key % num_nodes
        mass = self._mix(row, node >= idx.num_entities, mass, q)
        keep = mass > 0
        return tuple(pad_rows(row[keep], [node[keep], mass[keep]], q, [-1, 0.0]))

    def passage_nodes(self, passages: Tensor) -> Tensor:
        """Star-graph node ids of passage ids (passages are nodes ``[V + H, N)``; ``-1`` stays ``-1``)."""
        idx = self.steps.index
        return torch.where(passages >= 0, passages + idx.num_entities + idx.num_facts, -1)

    def _mix(self, row: Tensor, is_passage: Tensor, mass: Tensor, num_rows: int) -> Tensor:
        """Normalise each question's entity and passage seeds to ``1 - passage_reset`` and
        ``passage_reset`` of its mass (all to whichever part it has when it lacks the other)."""
        share = self.config.passage_reset
        totals = torch.zeros(num_rows, 2, device=mass.device).index_put_((row, is_passage.long()), mass, accumulate=True)
        has = totals > 0
        part = torch.stack([torch.full((num_rows,), 1.0 - share, device=mass.device),
                            torch.full((num_rows,), share, device=mass.device)], dim=1)
        part = torch.where(has.all(dim=1, keepdim=True), part, has.float())  # one part only: it takes all
        scale = torch.where(has, part / totals.clamp_min(1e-30), torch.zeros_like(totals))
        return mass * scale[row, is_passage.long()]

    def _entity_links(self, questions: list, question_emb: Tensor):
        """Dense links of the question's NER mentions and of the whole question to entity names:
        ``(question row, entity, cosine)`` triples, each ``[n, k]``."""
        s, cfg, idx = self.steps, self.config, self.steps.index
        v = idx.num_entities
        if cfg.use_ner and cfg.links_per_mention > 0 and v:
            with s.timer.stage("ner"):
                mentions = self.tagger.mentions(questions)
            flat = [m for ms in mentions for m in ms]
            if flat:
                owner = torch.tensor([i for i, ms in enumerate(mentions) for _ in ms], device=question_emb.device)
                # a mention is a piece of the question: query prompt (docs/DESIGN.md, "Encoder prompts")
                sim, ent = s.entity_topk(s.encode(flat, kind="query"), min(cfg.links_per_mention, v))
                yield owner.unsqueeze(1).expand_as(ent), ent, sim
        if cfg.link_question and cfg.links_per_question > 0 and v:
            sim, ent = s.entity_topk(question_emb, min(cfg.links_per_question, v))
            yield torch.arange(len(questions), device=ent.device).unsqueeze(1).expand_as(ent), ent, sim

    def _fact_entities(self, question_emb: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Entities of each question's top dense facts (HippoRAG 2's fact seeds) with their fact's
        cosine: ``(row [n], entity [n], score [n])``."""
        s, cfg = self.steps, self.config
        scores, facts = s.fact_index().search(question_emb, min(cfg.fact_seeds, s.index.num_facts))
        crow, col = s.lookups.extracted_incidence(False)
        pair, ent = gather_csr_rows(crow, col, facts.reshape(-1))
        k = facts.shape[1]
        return pair // k, ent, scores.reshape(-1)[pair].clamp_min(0).float()

    def _seed_weight(self, entity: Tensor, sim: Tensor) -> Tensor:
        mode = self.config.seed_weighting
        if mode == "uniform":
            return torch.ones_like(sim, dtype=torch.float32)
        sim = sim.float().clamp_min(0)
        if mode == "similarity":
            return sim
        return sim / self.entity_passages[entity].clamp_min(1).float()

    # ------------------------------------------------------------------ walk
    def walk(self, ids: Tensor, mass: Tensor) -> tuple[Tensor, Tensor]:
        """PPR mass of facts and passages for seeded questions: float ``[Q', H]``, ``[Q', P]``."""
        from hpengine.retrieval import personalized_pagerank

        cfg, idx = self.config, self.steps.index
        v, h = idx.num_entities, idx.num_facts
        out = personalized_pagerank(idx.graph, (ids, mass), damping=cfg.damping, tol=cfg.tol, max_iter=cfg.max_iter,
                                    method=cfg.solver,
                                    nodes=slice(v, v + h + idx.num_passages), memory_budget_mb=cfg.memory_budget_mb)
        return out[:, :h], out[:, h:]

    def passage_scores(self, fact_mass: Tensor, passage_mass: Tensor) -> Tensor:
        """A passage's score: its PPR mass plus ``fact_mass`` times its facts' mass, ``[Q', P]``."""
        if self.config.fact_mass <= 0:
            return passage_mass
        extra = torch.zeros_like(passage_mass).index_add_(1, self.steps.index.fact_passage, fact_mass)
        return passage_mass + self.config.fact_mass * extra

    def walk_rows(self, num_rows: int) -> int:
        """Seeded questions walked at once: one group's ``[Q', H + P]`` PPR mass and ``[Q', P]``
        scores *and* the solver's work for them (:func:`~hpengine.retrieval.ppr_chunk_size`'s
        per-question terms) fit the walk's memory budget together (at a million passages a batch
        of 256 would hold 5 GB of mass; a group the budget holds alone, 39, still added its mass to
        the solver's chunk). Each question's PPR does not depend on the others', so the grouping
        changes no result."""
        from hpengine.retrieval import PPR_BUDGET_MB, ppr_bytes_per_question, resolve_memory_budget_mb

        idx = self.steps.index
        budget = resolve_memory_budget_mb(self.config.memory_budget_mb, idx.device, PPR_BUDGET_MB) << 20
        h, p, c = idx.num_facts, idx.num_passages, idx.num_entities + idx.num_passages
        walk = 4 * (h + 3 * p)  # mass of facts and passages, scores, fill
        solver = ppr_bytes_per_question(num_nodes=c + h, num_columns=c, num_out=h + p,
                                        work_rows=idx.graph.transition().b.work_rows())
        return max(1, min(num_rows, budget // max(walk + solver, 1)))

    def ranked_walk(self, ids: Tensor, mass: Tensor, k_facts: int) -> tuple[Tensor, Tensor, Tensor]:
        """The walk reduced to what the ranking keeps, a group of :meth:`walk_rows` questions at a time.

        Returns:
            ``(passages, fact_ids, fact_scores)``: int64 ``[Q', passage_width]`` passages by score
            (``-1`` where no mass arrived), int64 ``[Q', k_facts]`` facts by PPR mass (``-1`` where
            none) and their float32 mass.
        """
        cfg, idx = self.config, self.steps.index
        num_q = ids.shape[0]
        width = min(cfg.passage_width, idx.num_passages)
        passages = torch.empty(num_q, width, dtype=torch.int64, device=ids.device)
        fact_ids = torch.empty(num_q, k_facts, dtype=torch.int64, device=ids.device)
        fact_scores = torch.empty(num_q, k_facts, dtype=torch.float32, device=ids.device)
        step = self.walk_rows(num_q)
        for lo in range(0, num_q, step):  # groups of questions, each walked as one batch
            part = slice(lo, lo + step)
            fact_mass, passage_mass = self.walk(ids[part], mass[part])
            score = self.passage_scores(fact_mass, passage_mass)
            top_score, top = torch.topk(score, width, dim=1)
            del score, passage_mass
            passages[part] = torch.where(top_score > 0, top, -1)  # unreached passages: dense fill
            if k_facts:
                f_score, f_ids = torch.topk(fact_mass, k_facts, dim=1)
                fact_ids[part] = torch.where(f_score > 0, f_ids, -1)
                fact_scores[part] = torch.where(f_score > 0, f_score.float(), 0.0)
        return passages, fact_ids, fact_scores

    # ------------------------------------------------------------- retrieve
    def retrieve(self, questions: list, question_emb: Tensor) -> Retrieved:
        """PPR ranking (dense fill; dense alone for questions with no seed, with a note) and the
        top facts by PPR mass as evidence and chain."""
        with self.steps.timer.stage("seeds"):
            ids, mass = self.seeds(questions, question_emb)
        return self.retrieve_seeded(questions, question_emb, ids, mass)

    def retrieve_seeded(self, questions: list, question_emb: Tensor, ids: Tensor, mass: Tensor) -> Retrieved:
        """:meth:`retrieve` from a given personalization (``ids``, ``mass`` as :meth:`seeds`
        returns them; another method may add restart mass to PPR's own)."""
        s, cfg, idx = self.steps, self.config, self.steps.index
        q = len(questions)
        dense = s.dense_passages(question_emb, cfg.passage_width)
        seeded = (mass > 0).any(dim=1)
        rows = torch.nonzero(seeded).squeeze(1)  # host sync: which questions walk, once per batch
        ranked = torch.full((q, cfg.passage_width), -1, dtype=torch.int64, device=dense.device)
        ranked[:, : dense.shape[1]] = dense
        k_facts = min(cfg.chain_facts, idx.num_facts)
        chain_ids = torch.full((q, k_facts), -1, dtype=torch.int64, device=dense.device)
        chain_scores = torch.zeros(q, k_facts, device=dense.device)
        if rows.numel():
            with s.timer.stage("ppr"):
                top, f_ids, f_score = self.ranked_walk(ids[rows], mass[rows], k_facts)
            ranked[rows] = lead_then_fill(top, dense[rows], cfg.passage_width)
            if k_facts:
                chain_ids[rows] = f_ids
                chain_scores[rows] = f_score
        notes = [[] if ok else [NO_SEED_NOTE] for ok in seeded.tolist()]
        return Retrieved(ranked, evidence=(chain_ids, chain_scores), hop_facts=s.chain_facts(chain_ids, chain_scores),
                         notes=notes)
