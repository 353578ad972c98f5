"""Build components from config dataclasses (no Hydra here)."""
from __future__ import annotations

from pathlib import Path

from hpengine.config import EncoderConfig, ExtractorConfig


def make_encoder(cfg: EncoderConfig):
    from hpengine.models import Encoder

    return Encoder(cfg)


def make_extractor(cfg: ExtractorConfig, out_dir: str | None = None):
    """The configured extractor; the LLM cache defaults to ``<out>.extract_cache`` beside the index."""
    if cfg.kind == "fast":
        from hpengine.models import FastExtractor

        return FastExtractor(cfg)
    from hpengine.models import LLMExtractor

    if not cfg.llm_model:
        raise ValueError("extractor=llm needs extractor.llm_model (a local HF checkpoint folder or hub name; "
                         "set it or the HPENGINE_LLM environment variable) (got '')")
    if not cfg.cache_dir:
        if out_dir is None:
            raise ValueError("extractor.cache_dir must be set for the LLM extractor (got '')")
        out = Path(out_dir)
        cfg.cache_dir = str(out.with_name(out.name + ".extract_cache"))
    return LLMExtractor(cfg)
