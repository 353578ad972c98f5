"""Batched generation with Hugging Face causal LMs (extractor, decomposer, reader, planner).

Prompts are sorted by token length so that each batch pads little, generated left-padded and
greedy (``do_sample=False``) under ``torch.inference_mode``, and returned in input order. A prompt
given a temperature samples instead, from noise seeded by its own seed and tokens
(:mod:`hpengine.models._sampling`), so its sample does not depend on its batch. Identical prompts
of one call (after templating and truncation, with the same temperature and seed) are generated
once: they get the same completion, and callers that grow several paths per question (GRAG-MH's
tree, whose paths often ask the same sub-question) repeat many. With ``prefix_cache``, the token prefix that
all prompts of a call share (an instruction with worked examples) is read once and its key/value
cache copied into every batch.
"""
from __future__ import annotations

import copy
import inspect
import os
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from hpengine.models._sampling import SeededGumbelSampler, row_seed

__all__ = ["GenerateResult", "batched_generate", "format_prompt"]


@dataclass
class GenerateResult:
    """Output of :func:`batched_generate`.

    Attributes:
        texts: decoded completions, one per prompt, in input order (special tokens removed,
            surrounding whitespace stripped).
        tokens_in: prompt tokens the model read (after templating and truncation, no padding;
            each distinct prompt once).
        tokens_out: generated tokens, up to and excluding the first eos/pad (each distinct prompt
            once).
        repeats: prompts answered by an identical prompt's completion (not generated again).
        prefix_tokens: tokens of the prefix every prompt shares that were read once for all
            (``prefix_cache``; counted in ``tokens_in`` for each prompt all the same).
    """

    texts: list[str]
    tokens_in: int
    tokens_out: int
    repeats: int = 0
    prefix_tokens: int = 0


def format_prompt(tokenizer, prompt: str, system: Optional[str] = None,
                  use_chat_template: bool = True) -> tuple[str, bool]:
    """Wrap one prompt in the tokenizer's chat template when it has one.

    Args:
        tokenizer: a Hugging Face tokenizer.
        prompt: the user message.
        system: optional system message (without a chat template it is prepended, followed by a
            blank line).
        use_chat_template: use ``tokenizer.apply_chat_template`` when the tokenizer has a
            template (default True).

    Returns:
        ``(text, add_special_tokens)``: the text to tokenize, and whether the tokenizer should add
        its special tokens (False for templated text, which already contains them).
    """
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return text, False
    return (f"{system}\n\n{prompt}" if system else prompt), True


def _stop_ids(model, tokenizer, pad_id: int) -> set[int]:
    """Token ids that end a completion: tokenizer eos, the model's generation eos ids, pad."""
    ids = {pad_id}
    for source in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source is not None:
            ids.update(int(i) for i in source)
    return ids


def _left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token id lists.

    Returns:
        ``input_ids`` and ``attention_mask``.

    Shapes:
        both ``[B, T]`` int64, ``T = max(len(row))``.
    """
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            input_ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
            attention_mask[i, width - len(row):] = 1
    return input_ids.to(device), attention_mask.to(device)


class _SharedPrefix:
    """The key/value cache of a token prefix, computed once and copied into each batch.

    Each batch's inputs are ``[prefix | left-padded suffixes]`` with the padding masked, so the
    position ids (the attention mask's running count) continue from the prefix as they would
    without padding."""

    def __init__(self, model, prefix: list[int]):
        self.prefix, self.device = prefix, model.device
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([prefix], dtype=torch.long, device=model.device), use_cache=True)
        self.cache = getattr(out, "cache", None) or out.past_key_values
        self.key = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    @property
    def copyable(self) -> bool:
        """Whether the model's cache can be repeated per batch (a ``transformers`` cache object with
        ``batch_repeat_interleave``); a model without one generates uncached."""
        return callable(getattr(self.cache, "batch_repeat_interleave", None))

    def inputs(self, suffixes: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """``input_ids``, ``attention_mask`` (both ``[B, P + S]``) and the cache argument of
        ``generate`` for one batch of suffixes."""
        ids, mask = _left_pad(suffixes, pad_id, self.device)
        head = torch.tensor([self.prefix], dtype=torch.long, device=self.device).expand(len(suffixes), -1)
        cache = copy.deepcopy(self.cache)
        cache.batch_repeat_interleave(len(suffixes))
        return torch.cat([head, ids], 1), torch.cat([torch.ones_like(head), mask], 1), {self.key: cache}


def _shared_prefix_length(rows: list[list[int]]) -> int:
    """Tokens every row starts with, leaving each row at least one of its own.

    Example:
        >>> _shared_prefix_length([[1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 3]])
        2
    """
    return min(len(os.path.commonprefix(rows)), min(len(r) for r in rows) - 1)


def _cut(row: list[int], stop_ids: set[int]) -> list[int]:
    """Generated ids up to (excluding) the first stop id."""
    for i, token in enumerate(row):
        if token in stop_ids:
            return row[:i]
    return row


def _per_prompt(value, n: int, name: str) -> list:
    """One value per prompt from a scalar or a sequence of ``n`` values (sampling arguments)."""
    values = [value] * n if isinstance(value, (int, float)) else list(value)
    if len(values) != n:
        raise ValueError(f"{name} must be one value or one per prompt (got {len(values)} for {n} prompts)")
    return values


def _check_args(prompts, max_new_tokens: int, batch_size: int) -> None:
    if isinstance(prompts, str) or not all(isinstance(p, str) for p in prompts):
        raise TypeError(f"prompts must be a list of str (got {type(prompts).__name__})")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1 (got {max_new_tokens})")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1 (got {batch_size})")


def _cut_batches(lengths: list[int], batch_size: int, max_batch_tokens: int = 0) -> list[range]:
    """Consecutive batches over prompts sorted longest first: at most ``batch_size`` prompts, and
    (when ``max_batch_tokens``) at most that many padded tokens (count x its first, longest,
    prompt), but always at least one prompt.

    Example:
        >>> [list(b) for b in _cut_batches([900, 500, 100, 100, 90], batch_size=4, max_batch_tokens=900)]
        [[0], [1], [2, 3, 4]]
    """
    out, start = [], 0
    while start < len(lengths):
        end = start + 1
        while (end < len(lengths) and end - start < batch_size
               and (not max_batch_tokens or (end - start + 1) * lengths[start] <= max_batch_tokens)):
            end += 1
        out.append(range(start, end))
        start = end
    return out


def batched_generate(model, tokenizer, prompts: Sequence[str], *, max_new_tokens: int,
                     batch_size: int, system: Optional[str] = None, use_chat_template: bool = True,
                     max_input_tokens: Optional[int] = None, max_batch_tokens: int = 0,
                     prefix_cache: bool = False, min_prefix_tokens: int = 32,
                     temperature: float | Sequence[float] = 0.0, seed: int | Sequence[int] = 0,
                     progress: bool = False) -> GenerateResult:
    """Greedy (or seeded sampled) generation for many prompts, batched by length.

    Prompts are templated (:func:`format_prompt`), tokenized, sorted by length (longest first, so
    an out-of-memory error shows up in the first batch), left-padded per batch and generated with
    ``do_sample=False``; completions are returned in input order. The pad id falls back to the
    eos id when the tokenizer has no pad token. The caller's tokenizer and model are not modified.

    Args:
        model: a Hugging Face causal LM (inputs are moved to ``model.device``).
        tokenizer: its tokenizer.
        prompts: user prompts.
        max_new_tokens: generation budget per prompt.
        batch_size: prompts per ``generate`` call.
        system: optional system message (default None).
        use_chat_template: use the tokenizer's chat template when it has one (default True).
        max_input_tokens: keep only the last ``max_input_tokens`` prompt tokens (the end holds
            the generation prompt); ``None`` (default) keeps everything.
        max_batch_tokens: also end a batch before its padded size (prompts x the longest)
            exceeds this; 0 (default): batches of ``batch_size``. On a CPU a decoding step costs
            about the same for 8 or 32 prompts while padding costs real prefill, so a large
            ``batch_size`` with a token cap suits prompts of mixed lengths.
        prefix_cache: read the token prefix all prompts share once (a batch of one) and give
            every batch a copy of its key/value cache, when it is at least ``min_prefix_tokens``
            long and the model's cache can be repeated per batch (default False). Batches are
            then cut by the prompts' own tokens. The same greedy decoding, in other
            floating-point order: in low precision a completion can differ from the uncached one
            where two tokens are nearly tied.
        min_prefix_tokens: the shortest shared prefix worth caching (default 32).
        temperature: 0 (default) decodes greedily; ``T > 0`` samples from ``softmax(logits / T)``;
            one value for every prompt or one per prompt.
        seed: the sampling seed, one for every prompt or one per prompt; a sampled prompt's noise
            comes from this seed and its token ids (:func:`~hpengine.models._sampling.row_seed`).
        progress: show a tqdm progress bar over batches (default False).

    Returns:
        :class:`GenerateResult` with texts in input order and token counts.
    """
    _check_args(prompts, max_new_tokens, batch_size)
    if max_batch_tokens < 0:
        raise ValueError(f"max_batch_tokens must be >= 0 (got {max_batch_tokens})")
    if not prompts:
        return GenerateResult(texts=[], tokens_in=0, tokens_out=0)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad_id is None:
        raise ValueError("the tokenizer needs a pad or an eos token for batched generation "
                         f"(got pad_token_id=None and eos_token_id=None for {type(tokenizer).__name__})")
    stop_ids = _stop_ids(model, tokenizer, pad_id)
    temps, seeds = _per_prompt(temperature, len(prompts), "temperature"), _per_prompt(seed, len(prompts), "seed")
    if any(not (t >= 0) for t in temps):
        raise ValueError(f"temperature must be >= 0 (got {min(temps)})")
    first: dict = {}  # (token ids, temperature, seed) -> position in `encoded` (each distinct prompt once)
    encoded, slot, draw = [], [], []  # draw: (temperature, row seed) per distinct prompt
    for prompt, t, sd in zip(prompts, temps, seeds):
        text, add_special = format_prompt(tokenizer, prompt, system, use_chat_template)
        ids = tokenizer(text, add_special_tokens=add_special)["input_ids"]
        ids = tuple(ids[-max_input_tokens:] if max_input_tokens else ids)
        key = (ids, float(t), int(sd)) if t > 0 else (ids, 0.0, 0)
        if key not in first:
            first[key] = len(encoded)
            encoded.append(list(ids))
            draw.append((float(t), row_seed(sd, ids)) if t > 0 else (0.0, 0))
        slot.append(first[key])
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
    texts: list[str] = [""] * len(encoded)
    tokens_out = 0
    shared = _shared_prefix_length(encoded) if prefix_cache else 0
    prefix = _SharedPrefix(model, encoded[0][:shared]) if shared >= max(min_prefix_tokens, 1) else None
    if prefix is None or not prefix.copyable:
        prefix, shared = None, 0
    batches = [order[b.start:b.stop] for b in _cut_batches([len(encoded[i]) - shared for i in order], batch_size,
                                                            max_batch_tokens)]
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(batches, desc="generate", unit="batch")
    with torch.inference_mode():
        for idx in batches:
            if prefix is not None:
                input_ids, attention_mask, extra = prefix.inputs([encoded[i][shared:] for i in idx], pad_id)
            else:
                (input_ids, attention_mask), extra = _left_pad([encoded[i] for i in idx], pad_id, model.device), {}
            if any(draw[i][0] > 0 for i in idx):
                from transformers import LogitsProcessorList

                extra["logits_processor"] = LogitsProcessorList([SeededGumbelSampler(
                    [draw[i][0] for i in idx], [draw[i][1] for i in idx], input_ids.shape[1])])
            output = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                    max_new_tokens=max_new_tokens, do_sample=False,
                                    temperature=None, top_p=None, top_k=None,
                                    pad_token_id=pad_id, eos_token_id=sorted(stop_ids - {pad_id})
                                    or pad_id, **extra)
            # .tolist() is fine here: generation already synchronised, and decoding is host-side.
            for i, row in zip(idx, output[:, input_ids.shape[1]:].tolist()):
                kept = _cut(row, stop_ids)
                tokens_out += len(kept)
                texts[i] = tokenizer.decode(kept, skip_special_tokens=True).strip()
    return GenerateResult(texts=[texts[j] for j in slot], tokens_in=sum(len(e) for e in encoded),
                          tokens_out=tokens_out, repeats=len(prompts) - len(encoded), prefix_tokens=shared)
