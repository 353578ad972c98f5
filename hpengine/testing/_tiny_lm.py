"""Tiny randomly initialised causal LMs for CI-speed tests of the model code paths (offline).

The standard "tiny random model" pattern: a byte-level BPE tokenizer trained in the test on the
test's own texts, and a 2-layer Qwen2 built from a config. Nothing is downloaded.
"""
from __future__ import annotations

from typing import Iterable

import torch

__all__ = ["build_tiny_tokenizer", "build_tiny_lm", "build_tiny_pair"]


def build_tiny_tokenizer(texts: Iterable[str], vocab_size: int = 320, pad: bool = True):
    """Byte-level BPE trained on ``texts``, wrapped as a fast HF tokenizer with ``<eos>`` (and ``<pad>``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<eos>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(texts), trainer)
    kwargs = {"pad_token": "<pad>"} if pad else {}
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", **kwargs)


def build_tiny_lm(vocab_size: int, initializer_range: float = 0.02, max_positions: int = 8192, seed: int = 0):
    """Randomly initialised 2-layer Qwen2 (hidden 32), in eval mode.

    A large ``initializer_range`` (e.g. 0.5) spreads the logits so greedy argmax has no near-ties,
    which makes batch-size invariance checks exact.
    """
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                      pad_token_id=0, bos_token_id=1, eos_token_id=1, initializer_range=initializer_range)
    return Qwen2ForCausalLM(cfg).eval()


def build_tiny_pair(texts: Iterable[str], vocab_size: int = 320, **lm_kwargs):
    """``(model, tokenizer)``: :func:`build_tiny_tokenizer` on ``texts`` and a matching :func:`build_tiny_lm`."""
    tokenizer = build_tiny_tokenizer(texts, vocab_size)
    return build_tiny_lm(len(tokenizer), **lm_kwargs), tokenizer
