"""GRAG-MH (docs/methods/grag.md) on the shared engine: seed nodes over entity and summary nodes,
decayed k-hop expansion on the summary-augmented triple graph, candidate passages reranked
(cross-encoder when configured, otherwise the bi-encoder score: the passage's cosine blended with
its best fact's) with a greedy diversity penalty.

No-LLM mode runs that retrieval on the question. LLM mode grows ``paths`` reasoning paths per
question (a tree decomposition): at each step one batched planner ``generate`` over every open
path of every question asks its next sub-question or says the path suffices; the sub-questions
are retrieved for together and answered in one batched read; each path then reads the question's
final answer from its passages (:func:`path_read_passages`) and steps (:func:`final_read_steps`)
through the engine's final-read step (``final_with_steps``, ``resolve_choice``), and the most
frequent normalised answer wins (:func:`self_consistency_vote`; ties: the better best path among
those that gave it, a path's score being the mean of its steps' top retrieval scores; a path that
answers "unknown" abstains).

A path stops when the planner says it suffices, asks a sub-question it already asked or, after its
first step, one that re-asks the question (small planners do either instead of stopping;
:func:`path_stops`), or reaches ``max_depth``.

Prediction layout in LLM mode: ``chain`` holds one :class:`HopRecord` per step per path, path 0's
steps first, its ``linked`` the step's read passages; ``notes`` holds the reranker line, one line
per path (``"grag path p: n steps, answer 'a', score s"``) and the vote line; ``paths`` the same per path as
data (``steps``, ``answer``, ``score``), which the eval report sums up (``reasoning_paths``).
"""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.config import GragConfig
from hpengine.errors import UserError
from hpengine.eval import normalize_answer
from hpengine.retrieval import (add_dense_candidates, blended_passage_scores, candidate_support, decayed_expansion,
                                diverse_ranking, grag_seeds, lead_then_fill, mix_cross_encoder_scores,
                                rerank_candidates)
from hpengine.pipeline._text import is_unknown, restates
from hpengine.pipeline._types import HopRecord, Retrieved
from hpengine.pipeline.retrievers._base import Retriever, register_retriever

BUILD_HINT = "hpengine grag-build INDEX"


class GragSearch:
    """Steps 5-7 for a batch of query embeddings (the tensors a retrieval needs, built once).

    Args:
        index: an index with GRAG parts; reranker: None (bi-encoder) or a scorer of
            ``(queries, passages) -> [n]``; cfg: the method's config.
    """

    def __init__(self, index, cfg: GragConfig, reranker=None):
        parts = index.grag
        v = index.num_entities
        crow, col = parts.adjacency(v)
        n = v + parts.num_summaries
        self.num_nodes = n
        self.adjacency = torch.sparse_csr_tensor(crow, col, torch.ones(col.numel(), device=col.device), (n, n),
                                                 check_invariants=False)  # built sorted and in range here
        self.np_crow, self.np_col = parts.node_passages(v, index.fact_passage, index.num_passages)
        self.node_emb = parts.node_emb(index.entity_emb, index.fact_emb)  # [N, D]
        self.is_graph_node = parts.is_graph_node(v)
        self.index, self.cfg, self.reranker = index, cfg, reranker

    @property
    def reranker_name(self) -> str:
        return f"cross-encoder {getattr(self.reranker, 'name', type(self.reranker).__name__)}" \
            if self.reranker is not None else "bi-encoder cosine"

    def seeds(self, query_emb: Tensor) -> tuple[Tensor, Tensor]:
        """``(seeds [Q, n], node_scores [Q, N])``: :func:`~hpengine.retrieval.grag_seeds` over the index's nodes."""
        return grag_seeds(query_emb, self.node_emb, self.is_graph_node, num_seeds=self.cfg.seeds)

    def passage_scores(self, query_emb: Tensor) -> Tensor:
        """The bi-encoder score of every passage (:func:`~hpengine.retrieval.blended_passage_scores`).

        Shapes:
            query_emb ``[Q, D]`` -> ``[Q, P]``."""
        idx = self.index
        return blended_passage_scores(query_emb, idx.passage_emb, idx.fact_emb, idx.fact_passage,
                                      fact_weight=self.cfg.fact_weight, query_chunk_size=self.cfg.query_chunk_size)

    def rerank(self, texts: list, cos: Tensor, support: Tensor) -> tuple[Tensor, Tensor]:
        """Rerank each question's candidates (the passages with a finite ``support``): the best
        ``rerank_candidates`` by ``cosine +`` graph bonus (:func:`~hpengine.retrieval.rerank_candidates`),
        then their rerank score (that sum, or the cross-encoder's sigmoid plus its own graph bonus,
        :func:`~hpengine.retrieval.mix_cross_encoder_scores`):
        ``(ids [Q, C] -1 padded, scores [Q, C] -inf padded)``, in descending score order.

        Shapes:
            cos, support ``[Q, P]`` -> ``[Q, C]``, ``[Q, C]``."""
        cfg = self.cfg
        ids, score = rerank_candidates(cos, support, graph_weight=cfg.graph_weight,
                                       num_candidates=cfg.rerank_candidates)
        if self.reranker is not None:
            pairs = [(qi, p) for qi, row in enumerate(ids.tolist()) for p in row if p >= 0]  # text boundary
            ps = self.index.passages
            ce = self.reranker.score([texts[qi] for qi, _ in pairs], [f"{ps[p].title}: {ps[p].text}" for _, p in pairs])
            ids, score = mix_cross_encoder_scores(ids, ce, support, graph_weight=cfg.graph_weight)
        return ids, score

    def search(self, texts: list, query_emb: Tensor, width: int) -> dict:
        """Ranked passages for each query: the greedy diverse order of its reranked candidates,
        then the dense ranking to fill ``width``.

        Returns:
            ``{"ranked" [Q, width], "scores" [Q, width] (s' of the candidate part, else 0),
            "seeds" [Q, n], "kept" [Q] kept nodes, "candidates" [Q]}``.
        """
        idx, cfg = self.index, self.cfg
        seeds, node_scores = self.seeds(query_emb)
        is_kept, kept_scores = decayed_expansion(self.adjacency, seeds, node_scores, hops=cfg.hops, decay=cfg.decay,
                                                 threshold=cfg.threshold, query_chunk_size=cfg.query_chunk_size,
                                                 max_over_seed=cfg.max_over_seed)
        support = candidate_support(is_kept, kept_scores, self.np_crow, self.np_col, idx.num_passages)
        cos = self.passage_scores(query_emb)  # [Q, P]: the rerank's and dense's, once
        support, dense = add_dense_candidates(support, cos, dense_candidates=cfg.dense_candidates, width=width)
        ids, score = self.rerank(texts, cos, support)
        ranked, scores = diverse_ranking(ids, score, idx.passage_emb, dense, diversity=cfg.diversity, width=width)
        return {"ranked": ranked, "scores": scores, "seeds": seeds, "kept": is_kept.sum(dim=1),
                "candidates": torch.isfinite(support).sum(dim=1)}


def final_read_passages(step_passages: list, cap: int) -> list:
    """The passages a path's final read holds: its steps' ranked passages taken round-robin (every
    step's first, then every step's second, ...) without repeats, at most ``cap``; ``cap = 0``: all
    of them, in the order the path read them.

    Example:
        >>> final_read_passages([[3, 1, 4], [1, 5, 9]], 4), final_read_passages([[3, 1, 4], [1, 5, 9]], 0)
        ([3, 1, 5, 4], [3, 1, 4, 5, 9])
    """
    out: list = []
    if cap == 0:
        for ps in step_passages:
            out.extend(p for p in ps if p not in out)
        return out
    for rank in range(max((len(ps) for ps in step_passages), default=0)):
        for ps in step_passages:
            if rank < len(ps) and ps[rank] not in out:
                out.append(ps[rank])
                if len(out) == cap:
                    return out
    return out


def path_read_passages(question_passages: list, step_passages: list, cfg: GragConfig) -> list:
    """A path's final read: :func:`final_read_passages` over its steps' passages, with the
    question's own ranked passages as the first list when ``cfg.final_with_question``; the
    question's own when the path read none.

    Example:
        >>> path_read_passages([7, 3], [[3, 1, 4], [1, 5, 9]], GragConfig(final_passages=4, final_with_question=True))
        [7, 3, 1, 5]
    """
    lists = ([question_passages] if cfg.final_with_question else []) + list(step_passages)
    return final_read_passages(lists, cfg.final_passages) or list(question_passages)


def path_stops(question: str, asked: list, subquery: str | None, cfg: GragConfig) -> bool:
    """Whether a path that has asked ``asked`` ends instead of asking ``subquery``: the planner said
    it suffices (None), it asks again what it asked, or (``cfg.restate_ends_path``) a step after
    the first re-asks the question (word F1 with it at least ``cfg.restate_f1``).

    Example:
        >>> q, cfg = "Which film came out first, Charley and the Angel or The Boatniks?", GragConfig()
        >>> path_stops(q, [], q, cfg), path_stops(q, ["When was The Boatniks released?"], q, cfg)
        (False, True)
    """
    if not subquery or normalize_answer(subquery) in {normalize_answer(a) for a in asked}:
        return True
    return bool(asked) and cfg.restate_ends_path and restates(subquery, question, cfg.restate_f1)


def final_read_steps(question: str, steps: list, cfg: GragConfig) -> list:
    """The steps (:class:`HopRecord`) a path's final read shows: all, or with
    ``cfg.final_skip_restated`` those that do not re-ask the question (word F1 with it at least
    ``cfg.restate_f1``), unless that leaves none."""
    if not cfg.final_skip_restated:
        return steps
    return [h for h in steps if not restates(h.subquery, question, cfg.restate_f1)] or steps


def self_consistency_vote(answers: list, scores: list) -> int:
    """The winning path's position: its normalised answer is the most frequent (ties: the higher
    best path score among the paths that gave it, then the earlier first path), and among those
    paths it has the best score (then the earliest). A path whose reader said the facts do not
    tell (``"unknown"``) abstains: it votes only when every path abstains.

    Example:
        >>> self_consistency_vote(["Halden", "Brenholt", "halden"], [0.2, 0.9, 0.5])
        2
        >>> self_consistency_vote(["unknown", "Brenholt", "unknown"], [0.9, 0.2, 0.9])
        1
    """
    voters = [i for i, a in enumerate(answers) if not is_unknown(a)] or list(range(len(answers)))
    votes: dict = {}  # normalised answer -> its paths' positions, in path order
    for i in voters:
        votes.setdefault(normalize_answer(answers[i]), []).append(i)
    key = max(votes, key=lambda k: (len(votes[k]), max(scores[i] for i in votes[k]), -votes[k][0]))
    return max(votes[key], key=lambda i: (scores[i], -i))


@register_retriever
class GragRetriever(Retriever):
    """GRAG-MH over the index's GRAG parts (see :class:`~hpengine.config.GragConfig`)."""

    name = "grag"
    config_class = GragConfig

    def __init__(self, steps):
        super().__init__(steps)
        idx = steps.index
        if getattr(idx, "grag", None) is None:
            if idx.meta.get("grag_stale"):  # delete / update dropped them: they described other passages
                raise UserError(f"retriever=grag: {idx.meta['grag_stale']} (got an index whose GRAG parts are stale)")
            where = idx.meta.get("build_config", {}).get("out") or "INDEX"
            raise UserError(f"retriever=grag needs the index's GRAG parts (triples, communities, summary nodes), "
                            f"which this index lacks; build them with `hpengine grag-build {where}` "
                            f"(got an index without grag.json)")
        if idx.passage_emb is None:
            raise UserError("retriever=grag needs passage embeddings in the index (got an index built with "
                            "embed_passages=false)")
        reranker = None
        if self.config.reranker:
            from hpengine.models import CrossEncoder

            reranker = CrossEncoder(self.config.reranker, device=str(idx.device),
                                    batch_size=self.config.reranker_batch_size)
        self.search = GragSearch(idx, self.config, reranker)
        self._planner = None

    @property
    def planner(self):
        """The tree planner: the decomposer itself when it has ``next_steps`` (a scripted one),
        else a :class:`~hpengine.models.TreePlanner` over the decomposer's (or reader's) model."""
        if self._planner is None:
            s = self.steps
            source = s.decomposer if s.decomposer is not None else s.reader
            if hasattr(source, "next_steps"):
                self._planner = source
            else:
                from hpengine.models import TreePlanner

                self._planner = TreePlanner(source.model, source.tokenizer,
                                            max_new_tokens=self.config.planner_max_new_tokens,
                                            batch_size=getattr(source, "batch_size", 8),
                                            max_batch_tokens=getattr(source, "max_batch_tokens", 0),
                                            examples=self.config.planner_examples,
                                            prefix_cache=getattr(source, "prefix_cache", False),
                                            temperature=self.config.path_temperature,
                                            greedy_paths=self.config.greedy_paths, seed=self.config.sample_seed)
        return self._planner

    def llm_components(self) -> list:
        return [self._planner] if self._planner is not None else []

    def _facts(self, passages: Tensor, scores: Tensor) -> list:
        """Chain facts per row: the first facts of the row's passages, scored by their passage's s'."""
        s, cfg = self.steps, self.config
        fact_ids, rank_weight = s.passage_facts(passages)
        per = cfg.facts_per_passage
        score = scores[:, : passages.shape[1]].repeat_interleave(per, dim=1)
        keep = fact_ids >= 0
        # the first chain_facts valid facts, in passage order
        pos = torch.cumsum(keep.long(), dim=1) - 1
        sel = keep & (pos < cfg.chain_facts)
        out_ids = torch.full((passages.shape[0], cfg.chain_facts), -1, dtype=torch.int64, device=passages.device)
        out_sc = torch.zeros(out_ids.shape, device=passages.device)
        r, c = sel.nonzero(as_tuple=True)  # host sync: chain records are text
        out_ids[r, pos[r, c]] = fact_ids[r, c]
        out_sc[r, pos[r, c]] = score[r, c].float()
        del rank_weight
        return s.chain_facts(out_ids, out_sc)

    def retrieve(self, questions: list, question_emb: Tensor) -> Retrieved:
        """The reranked passages; with an LLM, the planner's paths and their vote (see module)."""
        s, cfg = self.steps, self.config
        with s.timer.stage("retrieve"):
            found = self.search.search(questions, question_emb, cfg.passage_width)
        ranked = found["ranked"]
        note = f"grag: reranker {self.search.reranker_name}"
        if s.use_llm:
            return self._answer_llm(questions, ranked, found["scores"], note)
        top = ranked[:, : cfg.reader_passages]
        return Retrieved(ranked, hop_facts=self._facts(top, found["scores"]),
                         hop_linked=[[p for p in row if p >= 0] for row in top.tolist()],
                         notes=[[note] for _ in questions])

    # ------------------------------------------------------------- LLM mode
    def _answer_llm(self, questions: list, ranked: Tensor, question_scores: Tensor, note: str) -> Retrieved:
        s, cfg = self.steps, self.config
        num_paths = cfg.paths
        owner = [qi for qi in range(len(questions)) for _ in range(num_paths)]
        path_no = [p for _ in questions for p in range(num_paths)]
        records = [[] for _ in owner]  # HopRecord per step
        step_scores = [[] for _ in owner]
        open_paths = list(range(len(owner)))
        for _ in range(cfg.max_depth):
            if not open_paths:
                break
            with s.timer.stage("plan"):
                asked = self.planner.next_steps([questions[owner[i]] for i in open_paths],
                                                [[(r.subquery, r.answer) for r in records[i]] for i in open_paths],
                                                [path_no[i] for i in open_paths])
            asking = [(i, sq) for i, sq in zip(open_paths, asked)
                      if not path_stops(questions[owner[i]], [r.subquery for r in records[i]], sq, cfg)]
            if not asking:
                break
            subqs = [sq for _, sq in asking]
            search = [cfg.search_template.format(subquery=sq, question=questions[owner[i]]).strip()
                      for i, sq in asking]
            emb = s.encode(search)
            with s.timer.stage("retrieve"):
                found = self.search.search(search, emb, cfg.passage_width)
            top = found["ranked"][:, : cfg.reader_passages]
            answers = s.read_hop(subqs, s.passage_texts(top), fallback=["unknown"] * len(subqs))
            facts = self._facts(top, found["scores"])
            for row, ((i, sq), a, f, ps) in enumerate(zip(asking, answers, facts, top.tolist())):
                linked = [p for p in ps if p >= 0]
                records[i].append(HopRecord(sq, a, f, linked))
                step_scores[i].append(float(found["scores"][row, 0]))
            open_paths = [i for i, _ in asking]
        own = [[p for p in row if p >= 0] for row in ranked[:, : cfg.reader_passages].tolist()]
        passages = [path_read_passages(own[owner[i]], [r.linked for r in records[i]], cfg) for i in range(len(owner))]
        width = max(len(p) for p in passages) if passages else 0
        block = torch.full((len(owner), max(width, 1)), -1, dtype=torch.int64)
        for i, ps in enumerate(passages):
            block[i, : len(ps)] = torch.tensor(ps, dtype=torch.int64)
        shown = [final_read_steps(questions[owner[i]], records[i], cfg) for i in range(len(owner))]
        finals = s.final_answers([questions[q] for q in owner], s.passage_texts(block), shown)
        qscore = question_scores[:, 0].tolist()
        path_score = [sum(sc) / len(sc) if sc else qscore[owner[i]] for i, sc in enumerate(step_scores)]
        answers, chains, notes, paths, leads = [], [], [], [], []
        for qi in range(len(questions)):
            mine = range(qi * num_paths, (qi + 1) * num_paths)  # a question's paths are contiguous
            winner = mine[self_consistency_vote([finals[i] for i in mine], [path_score[i] for i in mine])]
            agree = sum(normalize_answer(finals[i]) == normalize_answer(finals[winner]) for i in mine)
            notes.append([note] + [f"grag path {path_no[i]}: {len(records[i])} steps, answer {finals[i]!r}, "
                                   f"score {path_score[i]:.4f}" for i in mine]
                         + [f"grag vote: {finals[winner]!r} from {agree} of {len(mine)} paths"])
            leads.append(final_read_passages([r.linked for r in records[winner]], 0))  # every passage it read
            answers.append(finals[winner])
            chains.append([r for i in mine for r in records[i]])
            paths.append([{"steps": len(records[i]), "answer": finals[i], "score": round(path_score[i], 6)}
                          for i in mine])
        lead = torch.full((len(questions), max([len(x) for x in leads] + [1])), -1, dtype=torch.int64)
        for qi, read in enumerate(leads):
            lead[qi, : len(read)] = torch.tensor(read, dtype=torch.int64)
        ranked = lead_then_fill(lead.to(ranked.device), ranked, cfg.passage_width)  # the winner's passages lead
        return Retrieved(ranked, answers=answers, chains=chains, notes=notes, paths=paths)
