"""Learned ranking (docs/methods/learned.md): the fusion's members run once on the batch, their
lists (and the fusion's own rankings) give each question a set of candidate passages with features
the engine already computes, and a trained :class:`~hpengine.nn.CandidateRanker` orders them.

Features of a candidate (:data:`FEATURES`), all tensor work on the batch:

- for each list (dense, HyperProve, PPR: ``candidate_width`` deep; the fusion's rule and its final
  ranking: ``passage_width``): ``1 / (1 + rank)`` in it (0 when absent) and whether it is there
  (the passages the fused top five name whole are candidates too, ``mention_width`` of them, in no
  list: a second hop an entity link missed can be ranked only if it is a candidate);
- its cosine to the question, and that cosine less the best candidate's;
- whether the question names its title (the fusion's named anchors), whether the fused first
  passage links to it (the home of an entity a fact of it names), whether the fused second or third
  does where the question names that one, whether it does where that one is linked with the first
  either way, and whether it links back to the fused first passage;
- the best cosine of one of its facts to the question, and that less the best candidate's;
- its cosine to the fused first passage (the bridge of a two-hop question resembles its first hop);
- the share of the question's idf it holds and the fused first passage does not, and the share the
  two hold together (a two-hop question's words spread over its two passages), each also less the
  best candidate's;
- how fully the fused first passage mentions its title, how fully it mentions the first passage's
  title, and how fully the fused second or third passage mentions its title (idf shares of the title's
  words: a mention counts where entity linking missed it, as "son of Baji Rao II").
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import torch
from torch import Tensor

from hpengine.config import LearnedConfig
from hpengine.errors import UserError
from hpengine.pipeline._types import Retrieved
from hpengine.pipeline.retrievers._base import register_retriever
from hpengine.pipeline.retrievers._fusion import FusionRetriever, fuse_rankings, member_config, rrf_scores, stack_rankings
from hpengine.retrieval import PAIR_SCORES, linked_passages, mentioned_passages, pair_coverage, title_shares
from hpengine.sparse import gather_csr_rows

#: the lists a candidate's ranks are read from, in feature order
LISTS = ("dense", "hyperprove", "ppr", "fusion_rule", "fusion")
#: the fused passages whose words are searched for whole titles (candidates in no list)
MENTION_ANCHORS = 5
#: the title-mention features (:meth:`LearnedRetriever._mentions`)
MENTIONS = ("mentioned_by_first", "mentions_first", "mentioned_by_next")
#: the feature names, in the order of the last dimension of :meth:`LearnedRetriever.candidate_features`
FEATURES = (*(f"rr_{n}" for n in LISTS), *(f"in_{n}" for n in LISTS), "cosine", "cosine_gap", "named",
            "linked_from_first", "rrf_union", "linked_from_named_next", "linked_from_chained_next",
            "links_to_first", "fact_cosine", "fact_cosine_gap", "cosine_to_first", *PAIR_SCORES,
            *(f"{n}_gap" for n in PAIR_SCORES), *MENTIONS)


def less_best(scores: Tensor, valid: Tensor) -> Tensor:
    """Each valid candidate's score less the best valid candidate's of its question (0 elsewhere).

    Shapes:
        scores float ``[Q, C]`` or ``[Q, C, k]`` (k scores each), valid bool ``[Q, C]`` -> scores' shape.

    Example:
        >>> less_best(torch.tensor([[0.5, 0.2, 9.0]]), torch.tensor([[True, True, False]])).tolist()
        [[0.0, -0.30000001192092896, 0.0]]
    """
    mask = valid if scores.dim() == 2 else valid[..., None]
    best = scores.masked_fill(~mask, float("-inf")).amax(1, keepdim=True)
    return torch.where(mask, scores - best, torch.zeros_like(scores))


def list_ranks(candidates: Tensor, lists: Tensor) -> Tensor:
    """Rank (from 0) of each candidate in each list, ``-1`` where it is absent.

    Shapes:
        candidates int64 ``[Q, C]`` (``-1`` padded), lists int64 ``[Q, L, W]`` (``-1`` padded) ->
        int64 ``[Q, C, L]``.

    Example:
        >>> list_ranks(torch.tensor([[7, 3, -1]]), torch.tensor([[[3, 7], [9, -1]]]))[0].tolist()
        [[1, -1], [0, -1], [-1, -1]]
    """
    hit = (candidates[:, :, None, None] == lists[:, None, :, :]) & (candidates[:, :, None, None] >= 0)  # [Q, C, L, W]
    first = hit.int().argmax(-1)  # [Q, C, L] first position of a hit (0 when none)
    return torch.where(hit.any(-1), first, torch.full_like(first, -1))


def default_ranker_path(encoder: str) -> Path:
    """The ranker shipped for ``encoder`` (the index's encoder name), whether or not it exists."""
    key = re.sub(r"[^a-z0-9]+", "-", encoder.lower()).strip("-")
    return Path(__file__).resolve().parents[2] / "data" / "rankers" / f"{key}.safetensors"  # hpengine/data/rankers


def resolve_ranker(path: str, encoder: str) -> tuple:
    """``(model, meta)`` of the ranker at ``path`` (empty: the one shipped for ``encoder``),
    refused with one line when missing, damaged, or made for another encoder or feature schema.
    Cheap (one small file): jobs call it before any model loads."""
    from hpengine.nn import load_ranker

    where = Path(path) if path else default_ranker_path(encoder)
    if not where.is_file():
        if path and where.is_dir():
            raise UserError(f"engine.ranker={path!r} is a folder; name a ranker file (hpengine train ... "
                            f"out=ranker.safetensors writes one)")
        if path:
            raise UserError(f"engine.ranker={path!r}: no such file")
        raise UserError(f"no ranker ships for encoder {encoder!r}; train one with `hpengine train IDX questions=FILE "
                        f"out=ranker.safetensors` and pass engine.ranker=ranker.safetensors")
    try:
        model, meta = load_ranker(where)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if meta.get("encoder") != encoder:
        raise UserError(f"ranker {str(where)!r} was trained for encoder {meta.get('encoder')!r}, and this index uses "
                        f"{encoder!r}; train one on this encoder's indexes (hpengine train)")
    if list(meta.get("features") or ()) != list(FEATURES):
        raise UserError(f"ranker {str(where)!r} was trained on other features than this hpengine computes "
                        f"({_schema_difference(list(meta.get('features') or ()), list(FEATURES))}); train it again")
    return model, meta


def _schema_difference(theirs: list, ours: list) -> str:
    """What a ranker's feature list lacks, adds, or orders differently, in a few words."""
    lacks, adds = [f for f in ours if f not in theirs], [f for f in theirs if f not in ours]
    parts = ([f"it lacks {', '.join(lacks[:4])}{' ...' if len(lacks) > 4 else ''}"] if lacks else []) + \
        ([f"it reads {', '.join(adds[:4])}{' ...' if len(adds) > 4 else ''}, which this hpengine does not compute"]
         if adds else [])
    return "; ".join(parts) or "the same features in another order"


@register_retriever
class LearnedRetriever(FusionRetriever):
    """The fusion's members on one batch, their candidates ordered by a trained ranker."""

    name = "learned"
    config_class = LearnedConfig

    def __init__(self, steps, ranker=None):
        super().__init__(steps)
        self._ranker = ranker

    def _member_config(self, name: str, config_class: type):
        """The fusion's member config with lists ``candidate_width`` deep: the candidates."""
        own = member_config(self.config, name, config_class)
        return dataclasses.replace(own, passage_width=self.config.candidate_width)

    @property
    def ranker(self):
        """The ranker (``engine.ranker``, else the one shipped for the index's encoder), read on first
        use: a trainer reads the candidates' features before any ranker exists."""
        if self._ranker is None:
            model, _ = resolve_ranker(self.config.ranker, str(self.steps.index.meta.get("encoder", "")))
            self._ranker = model
        return self._ranker.to(self.steps.index.fact_emb.device).eval()

    def retrieve(self, questions: list, question_emb: Tensor) -> Retrieved:
        """The candidates of the members' lists, ordered by the ranker; chains and notes as the fusion's."""
        ranker = self.ranker  # before the members run: a missing ranker is one line, at once
        with torch.no_grad():
            question_emb = ranker.adapt(question_emb)  # the ranker's query adapter, where it has one
        candidates, features, valid, outs = self._candidates(questions, question_emb)
        with self.steps.timer.stage("rank"), torch.no_grad():
            scores = ranker(features, valid)  # [Q, C]
            order = torch.sort(scores, dim=1, descending=True, stable=True).indices
            ranked = torch.where(valid.gather(1, order), candidates.gather(1, order), -1)[:, : self.config.passage_width]
        chains, notes, diagnostics = self._records(questions, outs)
        return Retrieved(ranked, chains=chains, notes=notes, diagnostics=diagnostics)

    def candidate_features(self, questions: list, question_emb: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(candidates, features, valid)`` of a batch: int64 ``[Q, C]`` passage ids (``-1``
        padded), float32 ``[Q, C, len(FEATURES)]``, bool ``[Q, C]`` (what a trainer reads).
        ``question_emb`` is used as given (a trainer passes them through its adapter first)."""
        return self._candidates(questions, question_emb)[:3]

    def _candidates(self, questions: list, question_emb: Tensor) -> tuple:
        s, cfg = self.steps, self.config
        self._cache.clear()
        self._cache.update(emb=question_emb, dense={})
        try:
            outs = self._run_members(questions, question_emb)
            with s.timer.stage("fuse"):
                short = {n: dataclasses.replace(o, ranked=o.ranked[:, : cfg.member_width or cfg.passage_width])
                         for n, o in outs.items()}
                by_rule = self._fuse_rule(short)
                final, _ = self._follow_links(by_rule, questions, len(outs))
            with s.timer.stage("features"):
                member_lists = [outs[n].ranked if n in outs else by_rule[:, :0] for n in LISTS[:3]]
                lists = stack_rankings([*member_lists, by_rule, final])  # [Q, L, W]
                out = self._features(questions, question_emb, lists, self._mentioned(final))
        finally:
            self._cache.clear()
        return (*out, outs)

    def _features(self, questions: list, question_emb: Tensor, lists: Tensor,
                  mentioned: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Candidates (every passage of ``lists`` ``[Q, L, W]`` and of ``mentioned`` ``[Q, M]``,
        once), their features and validity (:meth:`candidate_features`)."""
        n_lists = lists.shape[1]
        every = stack_rankings([*lists.unbind(1), mentioned])  # [Q, L + 1, W']
        weights = torch.tensor([1.0] * n_lists + [0.0])  # the named passages add no rank score
        width = n_lists * lists.shape[2] + mentioned.shape[1]  # room for every distinct passage
        candidates, rrf = fuse_rankings(every, rrf_scores(every, weights, 1.0), width)
        valid = candidates >= 0
        ranks = list_ranks(candidates, lists).float()  # [Q, C, L]
        rr = torch.where(ranks >= 0, 1.0 / (1.0 + ranks), torch.zeros_like(ranks))
        present = (ranks >= 0).float()
        first = lists[:, -1, :1]  # [Q, 1] the fused first passage
        cos, to_first = self._passage_cosines(question_emb, candidates, first, valid)
        gap = less_best(cos, valid)
        named = self._named(candidates, questions).float() if candidates.shape[1] else cos * 0
        linked = self._linked_from(first, candidates).float()
        rrf = torch.where(valid, rrf, torch.zeros_like(rrf))
        back = self._links_to(candidates, first).float()
        linked_next = self._linked_from_next(candidates, lists[:, -1, 1:3], (named, linked + back))  # [Q, C, 2]
        fact_cos = self._fact_cosines(question_emb, candidates, valid)
        fact_gap = less_best(fact_cos, valid)
        extra = [cos, gap, named, linked, rrf, *linked_next.unbind(-1), back, fact_cos, fact_gap, to_first]
        words = self._pair_coverage(questions, candidates, first)  # [Q, C, 2]
        mentions = self._mentions(candidates, lists[:, -1, :3])  # [Q, C, 3]
        features = torch.cat([rr, present, torch.stack(extra, dim=-1), words, less_best(words, valid), mentions], dim=-1)
        return candidates, features.masked_fill(~valid[..., None], 0.0), valid

    def _linked_from_next(self, candidates: Tensor, nxt: Tensor, ties: tuple[Tensor, ...]) -> Tensor:
        """float32 ``[Q, C, T]``: for each of the ``T`` ``ties`` (float ``[Q, C]`` each), whether
        one of the fused second and third passages ``nxt`` (int64 ``[Q, <=2]``, ``-1`` padded) that is
        tied to its question that way links to each of the ``candidates`` (int64 ``[Q, C]``, ``-1``
        padded). Only a tied one's links count: an untied one is often a near miss of the
        question's chain, whose links lead off it; a named one and one linked with the first are
        told apart, as their links lead on the chain unequally often (docs/methods/learned.md).
        One link lookup for every tie."""
        anchors = torch.cat([self._tied_next(candidates, nxt, tie) for tie in ties])  # [T * Q, <=2]
        linked = self._linked_from(anchors, candidates.repeat(len(ties), 1))  # [T * Q, C]
        return linked.view(len(ties), *candidates.shape).permute(1, 2, 0).float()

    @staticmethod
    def _tied_next(candidates: Tensor, nxt: Tensor, ties: Tensor) -> Tensor:
        """int64 ``[Q, <=2]``: the fused second and third passages ``nxt`` (int64 ``[Q, <=2]``, ``-1``
        padded) that are tied to their question (``ties`` float ``[Q, C]`` of their candidate is
        above 0), ``-1`` for the others.

        Example:
            >>> LearnedRetriever._tied_next(torch.tensor([[4, 7, 9]]), torch.tensor([[7, 9]]),
            ...                             torch.tensor([[0.0, 1.0, 0.0]])).tolist()
            [[7, -1]]
        """
        hit = (candidates[:, None, :] == nxt[..., None]) & (nxt[..., None] >= 0)  # [Q, 2, C]
        tied = (hit & (ties > 0)[:, None, :]).any(-1)
        return torch.where(tied, nxt, torch.full_like(nxt, -1))

    def _passage_cosines(self, question_emb: Tensor, candidates: Tensor, first: Tensor,
                         valid: Tensor) -> tuple[Tensor, Tensor]:
        """float32 ``[Q, C]`` twice: each candidate passage's cosine to its question, and to its
        question's ``first`` ``[Q, 1]`` passage (0 without passage embeddings, and for padding).
        The candidates' embeddings are gathered once for both."""
        emb = self.steps.index.passage_emb
        if emb is None:
            zeros = torch.zeros(candidates.shape, device=candidates.device)
            return zeros, zeros.clone()
        rows = emb.index_select(0, candidates.clamp_min(0).reshape(-1)).view(*candidates.shape, -1).float()
        anchor = emb.index_select(0, first.clamp_min(0).reshape(-1)).float()  # [Q, D]
        cos = torch.einsum("qd,qcd->qc", question_emb.float(), rows)
        to_first = torch.einsum("qd,qcd->qc", anchor, rows)
        return (torch.where(valid, cos, torch.zeros_like(cos)),
                torch.where(valid & (first >= 0), to_first, torch.zeros_like(to_first)))

    def _pair_coverage(self, questions: list, candidates: Tensor, first: Tensor) -> Tensor:
        """float32 ``[Q, C, 2]``: :func:`~hpengine.retrieval.pair_coverage` of the candidates with
        their question's ``first`` ``[Q, 1]`` passage."""
        words = self.steps.lookups.words()
        return pair_coverage(words, *words.question_words(list(questions)), candidates, first)

    def _mentioned(self, final: Tensor) -> Tensor:
        """int64 ``[Q, mention_width]``: the passages the ``final`` ``[Q, W]`` ranking's first
        :data:`MENTION_ANCHORS` name whole (:func:`~hpengine.retrieval.mentioned_passages`)."""
        if not self.config.mention_width:
            return final[:, :0]
        return mentioned_passages(self.steps.lookups.words(), final[:, :MENTION_ANCHORS], self.config.mention_width)

    def _mentions(self, candidates: Tensor, top: Tensor) -> Tensor:
        """float32 ``[Q, C, 3]``: :data:`MENTIONS` of the ``candidates`` int64 ``[Q, C]`` (``-1``
        padded), given each question's fused ``top`` ``[Q, <=3]`` passages
        (:func:`~hpengine.retrieval.title_shares`; a passage mentions itself fully)."""
        words = self.steps.lookups.words()
        top = torch.nn.functional.pad(top, (0, 3 - top.shape[1]), value=-1)  # a list shorter than 3
        by_top = title_shares(words, candidates, top)  # [Q, C, 3]
        of_first = title_shares(words, top[:, :1], candidates)[:, 0]  # [Q, C]
        return torch.stack([by_top[..., 0], of_first, by_top[..., 1:].amax(-1)], dim=-1)

    def _linked_from(self, anchors: Tensor, candidates: Tensor) -> Tensor:
        """bool ``[Q, C]``: whether one of the question's ``anchors`` ``[Q, A]`` links to each candidate."""
        lk, idx = self.steps.lookups, self.steps.index
        fact_crow, fact_col = lk.extracted_incidence()
        return linked_passages(anchors, candidates, lk.passage_crow, lk.passage_facts, fact_crow, fact_col,
                               lk.home_crow, lk.home_col, idx.num_passages)

    def _links_to(self, candidates: Tensor, first: Tensor) -> Tensor:
        """bool ``[Q, C]``: whether each candidate links to its question's ``first`` ``[Q, 1]``
        passage (each candidate an anchor of its own)."""
        q, c = candidates.shape
        target = first.expand(q, c).reshape(-1, 1)
        return self._linked_from(candidates.reshape(-1, 1), target).view(q, c) & (candidates >= 0)

    def _fact_cosines(self, question_emb: Tensor, candidates: Tensor, valid: Tensor) -> Tensor:
        """float32 ``[Q, C]``: the best cosine of a candidate's facts to its question (0 for a
        passage without facts, and for padding)."""
        lk, idx = self.steps.lookups, self.steps.index
        q, c = candidates.shape
        at, facts = gather_csr_rows(lk.passage_crow, lk.passage_facts, candidates.clamp_min(0).reshape(-1))
        owner = torch.div(at, c, rounding_mode="floor")  # the question of each gathered fact
        sims = (idx.fact_emb.index_select(0, facts).float() * question_emb.float().index_select(0, owner)).sum(-1)
        best = torch.full((q * c,), float("-inf"), device=candidates.device)
        best = best.scatter_reduce(0, at, sims, reduce="amax", include_self=True).view(q, c)
        return torch.where(valid & torch.isfinite(best), best, torch.zeros_like(best))
