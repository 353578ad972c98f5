"""Fusion (docs/methods/fusion.md): several methods on one batch, their passage rankings fused.

The members (default HyperProve, PPR and dense) run on the same questions with the one question
encoding the engine computed, through one set of shared steps: the fact index, the bridge lookups
and the models are built once, and a dense passage ranking of the batch's questions is computed
once per width and served to every member that asks for it (:class:`MemberSteps`). Their rankings
are then fused for all questions at once on the device:

- ``rrf``: reciprocal-rank fusion, a passage at rank ``r`` (from 1) of member ``m`` adds
  ``w_m / (k + r)`` (:func:`rrf_scores`);
- ``score``: normalised-score mixing, each member's scores min-max normalised over its list and
  summed with its weight (:func:`minmax_scores`); a member whose ranking carries no scores (the
  :class:`~hpengine.pipeline.Retrieved` interface has none) is scored by its ranks;
- ``lead_then_fill``: the lead member's first passages (dense's first), then the RRF fusion of the
  other members, then the lead's other passages (:func:`~hpengine.retrieval.lead_then_fill`).

With two or more members, the fused ranking then puts its anchors first, its first passages
(``link_anchors``) and the passages whose title the question names (``named_anchors``,
:func:`~hpengine.retrieval.named_passages`), and follows their links (``link_moves``): the passages
they link to (homes of entities their facts name) move up behind them
(:func:`~hpengine.retrieval.linked_passages`, :func:`~hpengine.retrieval.follow_links`).

The prediction's chain keeps each member's evidence, labelled by method in ``notes``; the answer
is the engine's (LLM: one read of the fused top passages; no LLM: the best bridge of their facts).
With an LLM, the members run their no-LLM modes unless ``member_llm`` is set: their own LLM steps
(HyperProve's decomposition and hop reads) would cost calls whose answers the fusion does not use.
"""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.config import EngineConfig, FusionConfig
from hpengine.models import entity_key, name_keys_in, title_name
from hpengine.pipeline._types import HopRecord, Retrieved
from hpengine.pipeline.retrievers._base import Retriever, get_retriever, register_retriever
from hpengine.retrieval import anchor_positions, follow_links, lead_then_fill, linked_passages, named_passages


# ------------------------------------------------------------------ fusion ops
def rrf_scores(ranked: Tensor, weights: Tensor, k: float) -> Tensor:
    """Reciprocal-rank contributions: ``weights[m] / (k + r)`` for the passage at rank ``r``
    (from 1) of member ``m``, 0 for padding.

    Shapes:
        ranked int64 ``[Q, M, W]`` (``-1`` padded), weights float ``[M]`` -> float32 ``[Q, M, W]``.

    Example:
        >>> rrf_scores(torch.tensor([[[4, 2], [2, -1]]]), torch.tensor([1.0, 2.0]), 0.0)
        tensor([[[1.0000, 0.5000],
                 [2.0000, 0.0000]]])
    """
    w = ranked.shape[-1]
    rank = torch.arange(1, w + 1, device=ranked.device, dtype=torch.float32)
    contrib = weights.to(ranked.device, torch.float32).view(1, -1, 1) / (k + rank)
    return torch.where(ranked >= 0, contrib, torch.zeros((), device=ranked.device))


def minmax_scores(scores: Tensor, ranked: Tensor) -> Tensor:
    """Each list's scores min-max normalised to ``[0, 1]`` over its valid entries (a list whose
    scores are all equal gets 1); 0 for padding.

    Shapes:
        scores float ``[Q, M, W]``, ranked int64 ``[Q, M, W]`` -> float32 ``[Q, M, W]``.

    Example:
        >>> minmax_scores(torch.tensor([[[0.9, 0.5, 0.1]]]), torch.tensor([[[3, 1, -1]]]))
        tensor([[[1., 0., 0.]]])
    """
    valid = ranked >= 0
    s = scores.float()
    high = torch.where(valid, s, torch.full_like(s, float("-inf"))).amax(dim=-1, keepdim=True)
    low = torch.where(valid, s, torch.full_like(s, float("inf"))).amin(dim=-1, keepdim=True)
    span = high - low
    out = torch.where(span > 0, (s - low) / torch.where(span > 0, span, torch.ones_like(span)), torch.ones_like(s))
    return torch.where(valid, out, torch.zeros_like(out))


def fuse_rankings(ranked: Tensor, contrib: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """Fuse member rankings: each distinct passage scores the sum of its entries' ``contrib``;
    passages rank by that score, ties by their first position in rank-major order (every
    member's first passage in member order, then every member's second, ...). Entries with id
    ``-1`` are padding; a passage that appears in some list always ranks (even with score 0).

    Args:
        ranked: int64 ``[Q, M, W]`` member rankings, ``-1`` padded.
        contrib: float ``[Q, M, W]`` what each entry adds to its passage's score.
        width: passages returned per question.

    Returns:
        ``(ids, scores)``: int64 ``[Q, width]`` (``-1`` padded) and float32 ``[Q, width]``
        (``-inf`` padded).

    Example:
        >>> ranked = torch.tensor([[[5, 7, 9], [7, 3, -1]]])
        >>> fuse_rankings(ranked, rrf_scores(ranked, torch.ones(2), 0.0), 4)[0]
        tensor([[7, 5, 3, 9]])
    """
    q, m, w = ranked.shape
    n = m * w
    ids = ranked.transpose(1, 2).reshape(q, n)  # rank-major: column r * M + m
    val = contrib.transpose(1, 2).reshape(q, n).float()
    # runs of equal ids per row; the stable sort keeps each run in column order, so its first
    # entry is the passage's first position
    sorted_ids, order = torch.sort(ids, dim=1, stable=True)
    is_first = torch.ones_like(sorted_ids, dtype=torch.bool)
    is_first[:, 1:] = sorted_ids[:, 1:] != sorted_ids[:, :-1]
    run = torch.cumsum(is_first.long(), dim=1) - 1  # [Q, N] run of each sorted entry
    total = torch.zeros(q, n, device=ids.device).scatter_add_(1, run, val.gather(1, order))
    # every entry of a run carries the run's id (and validity): scattering any of them is exact
    is_run = torch.zeros(q, n, dtype=torch.bool, device=ids.device).scatter_(1, run, sorted_ids >= 0)
    run_id = torch.zeros_like(sorted_ids).scatter_(1, run, sorted_ids)
    first_pos = torch.full_like(order, n).scatter_reduce_(1, run, order, reduce="amin")
    # order runs by (score desc, first position asc); padding runs last
    key = torch.where(is_run, total, torch.full_like(total, float("-inf")))
    by_pos = torch.argsort(torch.where(is_run, first_pos, torch.full_like(first_pos, n)), dim=1)
    by_score = torch.sort(key.gather(1, by_pos), dim=1, descending=True, stable=True).indices
    pick = by_pos.gather(1, by_score)[:, :width]
    out_ids = torch.where(is_run.gather(1, pick), run_id.gather(1, pick), torch.full_like(pick, -1))
    out_scores = key.gather(1, pick)
    if pick.shape[1] < width:
        out_ids = torch.cat([out_ids, out_ids.new_full((q, width - pick.shape[1]), -1)], dim=1)
        out_scores = torch.cat([out_scores, out_scores.new_full((q, width - pick.shape[1]), float("-inf"))], dim=1)
    return out_ids, out_scores


def stack_rankings(rankings: list, fill: float | int = -1) -> Tensor:
    """``[Q, W_m]`` tensors of one batch stacked to ``[Q, M, max W_m]``, right-padded with ``fill``."""
    w = max(r.shape[1] for r in rankings)
    return torch.stack([torch.nn.functional.pad(r, (0, w - r.shape[1]), value=fill) for r in rankings], dim=1)


# ------------------------------------------------------------------ shared steps
class MemberSteps:
    """A member's view of the engine's :class:`~hpengine.pipeline.QASteps`: the member's own
    config, everything else the shared steps' own (fact index, lookups, models, timer, stats), and
    the dense passage ranking of the batch's questions computed once per width for all members.

    Only ``config`` and, with ``llm`` False, the models differ from the shared steps, and a
    member's shared fields are the fusion's (:func:`member_config`), so the shared steps' methods,
    which read the shared fields, serve the member as they serve the fusion. With ``llm`` False the
    member sees no decomposer and no reader: it runs its no-LLM mode.
    """

    def __init__(self, steps, config: EngineConfig, cache: dict, llm: bool = True):
        self._steps = steps
        self.config = config
        self._cache = cache
        self.decomposer = steps.decomposer if llm else None
        self.reader = steps.reader if llm else None

    def __getattr__(self, name):
        return getattr(self._steps, name)

    @property
    def use_llm(self) -> bool:
        return self.reader is not None

    def dense_passages(self, query_emb: Tensor, k: int) -> Tensor:
        return self.dense_passages_scored(query_emb, k)[1]

    def dense_passages_scored(self, query_emb: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """The shared step, once per batch and width for the batch's question embedding (a
        narrower width is the prefix of a wider one already computed)."""
        cache = self._cache
        if query_emb is not cache.get("emb") or self._steps.index.passage_emb is None:
            return self._steps.dense_passages_scored(query_emb, k)
        k = min(k, self._steps.index.num_passages)
        dense = cache["dense"]
        if k not in dense:
            wider = [w for w in dense if w > k]
            if wider:
                cos, ids = dense[min(wider)]
                dense[k] = (cos[:, :k], ids[:, :k])
            else:
                dense[k] = self._steps.dense_passages_scored(query_emb, k)
        return dense[k]


def member_config(cfg: FusionConfig, name: str, config_class: type) -> EngineConfig:
    """Member ``name``'s config: its settings in ``cfg`` (``cfg.<name>``, else ``config_class``'s
    defaults) with the shared fields the fusion's and ``passage_width`` its ``member_width``."""
    from dataclasses import fields, replace

    shared = {f.name: getattr(cfg, f.name) for f in fields(EngineConfig)}
    shared["passage_width"] = cfg.member_width or cfg.passage_width
    own = {f.name for f in fields(cfg)} - set(shared)
    nested = getattr(cfg, name) if name in own else None
    return replace(nested if isinstance(nested, config_class) else config_class(), **shared)


# ------------------------------------------------------------------ the method
@register_retriever
class FusionRetriever(Retriever):
    """The members of :class:`~hpengine.config.FusionConfig` on one batch, rankings fused."""

    name = "fusion"
    config_class = FusionConfig

    def __init__(self, steps):
        super().__init__(steps)
        cfg = self.config
        self._cache: dict = {}
        self.members = {}  # name -> (retriever, weight); members with weight 0 are not built
        for name in cfg.members:
            weight = cfg.weight(name)
            if weight > 0:
                cls = get_retriever(name)
                view = MemberSteps(steps, self._member_config(name, cls.config_class), self._cache, cfg.member_llm)
                self.members[name] = (cls(view), weight)

    def _member_config(self, name: str, config_class: type) -> EngineConfig:
        """Member ``name``'s config (:func:`member_config`); a method built on the fusion changes it here."""
        return member_config(self.config, name, config_class)

    def llm_components(self) -> list:
        models = [m for retriever, _ in self.members.values() for m in retriever.llm_components()]
        return list({id(m): m for m in models}.values())

    def retrieve(self, questions: list, question_emb: Tensor) -> Retrieved:
        """Every member on the batch, then one fusion of their rankings; chains and notes per member."""
        s = self.steps
        self._cache.clear()
        self._cache.update(emb=question_emb, dense={})
        try:
            outs = self._run_members(questions, question_emb)
            with s.timer.stage("fuse"):
                by_rule = self._fuse_rule(outs)
                ranked, anchor = self._follow_links(by_rule, questions, len(outs))
        finally:
            self._cache.clear()  # the batch's tensors are not kept
        chains, notes, diagnostics = self._records(questions, outs)
        if ranked is not by_rule:
            self._link_notes(notes, by_rule, ranked, anchor)
        return Retrieved(ranked, chains=chains, notes=notes, diagnostics=diagnostics)

    def _run_members(self, questions: list, question_emb: Tensor) -> dict:
        """name -> the member's :class:`Retrieved`, in member order; with ``restart_share``, PPR
        runs after HyperProve and restarts partly at its passages (:meth:`_restart_seeds`)."""
        restart = self.config.restart() > 0
        outs = {}
        for name, (retriever, _) in self.members.items():
            if not (restart and name == "ppr"):
                outs[name] = retriever.retrieve(questions, question_emb)
        if restart:
            ppr = self.members["ppr"][0]
            with self.steps.timer.stage("seeds"):
                ids, mass = self._restart_seeds(*ppr.seeds(questions, question_emb), outs["hyperprove"].ranked)
            outs["ppr"] = ppr.retrieve_seeded(questions, question_emb, ids, mass)
        return {name: outs[name] for name in self.members}

    def _restart_seeds(self, ids: Tensor, mass: Tensor, ranked: Tensor) -> tuple[Tensor, Tensor]:
        """PPR's personalization (rows summing to 1, or 0) plus the restart share of mass on the
        first ``restart_passages`` of ``ranked`` (weight ``1 / (1 + rank)``), rows renormalised.

        Shapes:
            ids int64 ``[Q, R]``, mass ``[Q, R]``, ranked int64 ``[Q, W]`` ->
            ``[Q, R + n]`` each, ``n = min(restart_passages, W)``.
        """
        top = ranked[:, : self.config.restart_passages]
        rank = torch.arange(top.shape[1], device=top.device, dtype=torch.float32)
        weight = torch.where(top >= 0, 1.0 / (1.0 + rank), 0.0)
        weight = weight / weight.sum(1, keepdim=True).clamp_min(1e-30)
        nodes = self.members["ppr"][0].passage_nodes(top)
        mass = torch.cat([mass, self.config.restart() * weight.to(mass.dtype)], dim=1)
        return torch.cat([ids, nodes], dim=1), mass / mass.sum(1, keepdim=True).clamp_min(1e-30)

    # ------------------------------------------------------------- fusion
    def _fuse(self, outs: dict, questions: list) -> Tensor:
        """``[Q, passage_width]`` fused passage ids: the members' rankings fused by the rule, then
        the anchors' links followed (``link_anchors``, ``named_anchors``)."""
        return self._follow_links(self._fuse_rule(outs), questions, len(outs))[0]

    def _follow_links(self, ranked: Tensor, questions: list, members: int) -> tuple[Tensor, Tensor | None]:
        """``ranked`` with its anchors first and their links followed, and the anchors (bool
        ``[Q, W]``, positions in ``ranked``); ``(ranked, None)`` when the step is off (no anchors)
        or one member ran (its ranking passes through as it is)."""
        cfg = self.config
        if cfg.link_anchors + cfg.named_anchors == 0 or members < 2:
            return ranked, None
        lk, idx = self.steps.lookups, self.steps.index
        named = self._named(ranked, questions) if cfg.named_anchors else None
        anchor = anchor_positions(ranked, cfg.link_anchors, named, cfg.named_anchors)
        fact_crow, fact_col = lk.extracted_incidence()
        linked = linked_passages(torch.where(anchor, ranked, -1), ranked, lk.passage_crow, lk.passage_facts,
                                 fact_crow, fact_col, lk.home_crow, lk.home_col, idx.num_passages)
        return follow_links(ranked, linked, anchor, cfg.link_moves), anchor

    def _named(self, ranked: Tensor, questions: list) -> Tensor:
        """bool ``[Q, W]``: the passages of ``ranked`` whose title name the question names as a run
        of whole words, and not only inside the longer title name of another such passage (the
        longest match: "Halden University" named, "Halden" not by itself). The word runs are host
        text; the matches are tensor work."""
        lk = self.steps.lookups
        title_keys, max_words = lk.title_names()
        named = self._holds(ranked, [name_keys_in(q, max_words) for q in questions])
        hits = named.nonzero().tolist()  # [n, 2] (question, position): a few per question
        if not hits:
            return named
        inner = [[] for _ in questions]  # per question: the shorter names inside its named titles
        titles = self.steps.index.passages
        for (i, _), p in zip(hits, ranked[named].tolist()):
            whole = title_name(titles[p].title)
            inner[i].extend(k for k in name_keys_in(whole, max_words) if k != entity_key(whole))
        return named & ~self._holds(ranked, inner)

    def _holds(self, ranked: Tensor, names: list) -> Tensor:
        """bool ``[Q, W]``: whether each passage's title name is one of its question's ``names``
        (entity keys, one list per question)."""
        lk = self.steps.lookups
        counts = torch.tensor([len(n) for n in names], dtype=torch.int64)
        owner = torch.repeat_interleave(torch.arange(len(names)), counts)
        keys = lk.name_hashes([k for n in names for k in n])
        return named_passages(ranked, lk.title_names()[0], owner.to(ranked.device), keys.to(ranked.device))

    def _fuse_rule(self, outs: dict) -> Tensor:
        """``[Q, passage_width]`` fused passage ids from the members' rankings (rule: config)."""
        cfg = self.config
        names = list(outs)
        if cfg.rule == "lead_then_fill":
            lead = outs[cfg.lead].ranked
            others = [n for n in names if n != cfg.lead]
            if others:
                ranked = stack_rankings([outs[n].ranked for n in others])
                fill, _ = fuse_rankings(ranked, rrf_scores(ranked, self._weights(others, ranked), cfg.rrf_k),
                                        ranked.shape[1] * ranked.shape[2])
            else:
                fill = lead[:, :0]
            head = lead[:, : cfg.lead_passages]
            return lead_then_fill(head, torch.cat([fill, lead[:, cfg.lead_passages:]], dim=1), cfg.passage_width)
        ranked = stack_rankings([outs[n].ranked for n in names])
        weights = self._weights(names, ranked)
        if cfg.rule == "rrf":
            contrib = rrf_scores(ranked, weights, cfg.rrf_k)
        else:  # score
            scores = stack_rankings([self._scores(outs[n].ranked) for n in names], fill=0.0)
            contrib = minmax_scores(scores, ranked) * weights.view(1, -1, 1)
        return fuse_rankings(ranked, contrib, cfg.passage_width)[0]

    def _weights(self, names: list, like: Tensor) -> Tensor:
        return torch.tensor([self.members[n][1] for n in names], dtype=torch.float32, device=like.device)

    def _scores(self, ranked: Tensor) -> Tensor:
        """A member ranking's own scores: the cosines when it is a dense ranking the shared step
        served this batch, else its negative ranks (min-max normalised: linear in the rank)."""
        for cos, ids in self._cache["dense"].values():
            if ranked is ids:
                return cos.float()
        rank = torch.arange(ranked.shape[1], device=ranked.device, dtype=torch.float32)
        return (-rank).expand(ranked.shape[0], -1)

    # ------------------------------------------------------------- records
    def _records(self, questions: list, outs: dict) -> tuple[list, list, list | None]:
        """Per question: the members' chain records in member order, a note per member naming
        its weight and its slice of the chain, the members' own notes, their diagnostics."""
        q = len(questions)
        chains = [[] for _ in range(q)]
        notes = [[] for _ in range(q)]
        diagnostics = [[] for _ in range(q)]
        for name, out in outs.items():
            weight = self.members[name][1]
            own = self._member_chains(questions, out)
            for i in range(q):
                start = len(chains[i])
                chains[i].extend(own[i])
                where = f"chain[{start}:{len(chains[i])}]" if own[i] else "no chain records"
                notes[i].append(f"fusion: {name} (weight {weight:g}): {where}")
                for note in (out.notes[i] if out.notes else []):
                    notes[i].append(note if note.startswith(f"{name}:") else f"{name}: {note}")
                if out.diagnostics:
                    diagnostics[i].extend(out.diagnostics[i])
        return chains, notes, diagnostics if any(diagnostics) else None

    def _link_notes(self, notes: list, by_rule: Tensor, ranked: Tensor, anchor: Tensor) -> None:
        """Per question whose ranking the step changed, a note naming the anchors and the passages
        moved up (host text, like the rest of the notes)."""
        ps = self.steps.index.passages
        rows = zip(by_rule.tolist(), ranked.tolist(), torch.where(anchor, by_rule, -1).tolist())
        for i, (before, after, anchors) in enumerate(rows):
            if before == after:
                continue
            anchors = [p for p in anchors if p >= 0]
            moved = [p for k, p in enumerate(after) if p >= 0 and p not in anchors and k < before.index(p)]
            named = [p for p in anchors[self.config.link_anchors:] if after.index(p) < before.index(p)]
            titles = lambda ids: ", ".join(repr(ps[p].title) for p in ids)  # noqa: E731
            if named:
                notes[i].append(f"fusion: named by the question, moved up {titles(named)}")
            if moved:
                notes[i].append(f"fusion: links of {titles(anchors)} moved up {titles(moved)}")

    @staticmethod
    def _member_chains(questions: list, out: Retrieved) -> list:
        """A member's chain records per question: its own, or its single hop (answered with its
        own answer, ``""`` when it leaves the answer to the engine), or none."""
        q = len(questions)
        if out.chains is not None:
            return out.chains
        if out.hop_facts is not None:
            answers = out.answers or [""] * q
            linked = out.hop_linked or [[] for _ in range(q)]
            return [[HopRecord(qu, a, f, list(ln))] for qu, a, f, ln in zip(questions, answers, out.hop_facts, linked)]
        return [[] for _ in range(q)]
