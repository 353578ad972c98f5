"""Seeded temperature sampling that does not depend on the batch a prompt lands in.

``batched_generate`` decodes greedily; a row that samples gets Gumbel noise added to its scaled
logits, and the argmax of ``logits / T + G`` with ``G`` standard Gumbel is a draw from
``softmax(logits / T)`` (the Gumbel-max trick). The noise of row ``r`` at decoding step ``t`` for
token ``v`` is a counter-based hash of ``(seed_r, t, v)`` computed as tensor ops, so a prompt's
sample is a function of its own seed alone: the same whatever else shares its batch, whatever the
batch size, and the same on every run (up to the model's own floating-point noise).
"""
from __future__ import annotations

import hashlib
from typing import Sequence

import torch
from torch import Tensor

__all__ = ["SeededGumbelSampler", "gumbel_noise", "hash32", "row_seed"]

_MASK32 = 0xFFFFFFFF


def _mul32(x: Tensor, c: int) -> Tensor:
    """``x * c mod 2**32`` for ``0 <= x < 2**32`` in int64 without overflow (``c`` split in 16-bit halves)."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _MASK32


def hash32(x: Tensor) -> Tensor:
    """A 32-bit integer hash (Wellons' lowbias32) applied elementwise to int64 values in ``[0, 2**32)``.

    Example:
        >>> hash32(torch.tensor([0, 1, 2])).tolist()
        [0, 1753845952, 3507691905]
    """
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def row_seed(seed: int, token_ids: Sequence[int]) -> int:
    """The 32-bit seed of one prompt: its caller's ``seed`` mixed with the prompt's token ids, so two
    prompts with one seed draw unrelated samples and one prompt draws the same sample every time."""
    h = hashlib.blake2b(digest_size=8)
    h.update(int(seed).to_bytes(8, "little", signed=True))
    h.update(b"".join(int(t).to_bytes(4, "little") for t in token_ids))
    return int.from_bytes(h.digest()[:4], "little")


def gumbel_noise(seeds: Tensor, step: int, vocab: int) -> Tensor:
    """Standard Gumbel noise of each row at one decoding step, from the hash of ``(seed, step, token)``.

    Shapes:
        seeds ``[B]`` int64 in ``[0, 2**32)`` -> ``[B, vocab]`` float32.
    """
    key = hash32(seeds.long() ^ hash32(torch.tensor(step * 0x9E3779B9 + 0x85EBCA6B, device=seeds.device)))  # [B]
    tokens = torch.arange(vocab, dtype=torch.int64, device=seeds.device)
    bits = hash32(hash32(key[:, None] ^ tokens[None, :]) + 0x27D4EB2F)  # [B, V]
    u = ((bits >> 8).double() + 0.5) / float(1 << 24)  # uniform in (0, 1), 24 bits
    return (-torch.log(-torch.log(u))).float()


class SeededGumbelSampler:
    """A ``generate`` logits processor: rows with a temperature ``T > 0`` get ``scores / T`` plus
    their seeded Gumbel noise, so the (greedy) argmax samples ``softmax(scores / T)``; rows with
    ``T = 0`` are left as they are (greedy).

    Args:
        temperatures: one per row of the batch (0: greedy).
        seeds: one 32-bit seed per row (:func:`row_seed`).
        start: the length of the batch's input ids (the first generated token is step 0).
    """

    def __init__(self, temperatures: Sequence[float], seeds: Sequence[int], start: int):
        self.temperatures = torch.tensor([float(t) for t in temperatures], dtype=torch.float32)
        self.seeds = torch.tensor([int(s) for s in seeds], dtype=torch.int64)
        self.hot = self.temperatures > 0  # [B] bool, on the host
        self.any_hot = bool(self.hot.any())  # decided on the host, once
        self.start = start

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        """Shapes: input_ids ``[B, L]``, scores ``[B, V]`` -> ``[B, V]``."""
        if not self.any_hot:
            return scores
        out = scores.float().clone()
        hot = self.hot.to(scores.device)  # only the sampling rows are hashed
        noise = gumbel_noise(self.seeds[self.hot].to(scores.device), input_ids.shape[1] - self.start, scores.shape[1])
        out[hot] = out[hot] / self.temperatures[self.hot].to(scores.device)[:, None] + noise
        return out.to(scores.dtype)
