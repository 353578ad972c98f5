"""Seeded temperature sampling that does not depend on the batch a prompt lands in.

``batched_generate`` decodes greedily; a row that samples gets Gumbel noise added to its scaled
logits, and the argmax of ``logits / T + G`` with ``G`` standard Gumbel is a draw from
``softmax(logits / T)`` (the Gumbel-max trick). The noise of row ``r`` at decoding step ``t`` for
token ``v`` is a counter-based hash of ``(seed_r, t, v)`` computed as tensor ops, so a prompt's
sample is a function of its own seed alone: the same whatever else shares its batch, whatever the
batch size, and the same on every run (up to the model's own floating-point noise).

On CPU the sampler hashes only the tokens that can still win a row's draw: the 24-bit noise is
bounded (:data:`GUMBEL_SPREAD`), so a token whose scaled logit lies more than that spread below the
row's best cannot beat it. The draw is the same as with noise on every token (tested against
:func:`gumbel_noise`); on CUDA, where hashing the whole vocabulary is cheap and picking the
candidates would cost a device sync per step, every token is hashed.
"""
from __future__ import annotations

import hashlib
import math
from typing import Optional, Sequence

import torch
from torch import Tensor

__all__ = ["GUMBEL_SPREAD", "SeededGumbelSampler", "gumbel_noise", "gumbel_noise_at", "hash32", "perturb", "row_seed",
           "step_keys"]

_MASK32 = 0xFFFFFFFF
_UNIT = 1 << 24  # the uniform draws have 24 bits
#: The largest minus the smallest noise value :func:`gumbel_noise` can return (about 20.2).
GUMBEL_SPREAD = -math.log(-math.log(1 - 0.5 / _UNIT)) + math.log(-math.log(0.5 / _UNIT))


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


def step_keys(seeds: Tensor, step: int) -> Tensor:
    """Each row's key at one decoding step. Shapes: seeds ``[B]`` int64 in ``[0, 2**32)`` -> ``[B]``."""
    return hash32(seeds.long() ^ hash32(torch.tensor(step * 0x9E3779B9 + 0x85EBCA6B, device=seeds.device)))


def gumbel_noise_at(keys: Tensor, tokens: Tensor) -> Tensor:
    """Standard Gumbel noise of (row key, token) pairs, elementwise with broadcasting.

    Shapes:
        keys ``[...]`` int64 (:func:`step_keys`), tokens ``[...]`` int64 -> broadcast shape, float32.
    """
    bits = hash32(hash32(keys ^ tokens) + 0x27D4EB2F)
    u = ((bits >> 8).double() + 0.5) / float(_UNIT)  # uniform in (0, 1), 24 bits
    return (-torch.log(-torch.log(u))).float()


def gumbel_noise(seeds: Tensor, step: int, vocab: int) -> Tensor:
    """Standard Gumbel noise of each row at one decoding step, from the hash of ``(seed, step, token)``.

    Shapes:
        seeds ``[B]`` int64 in ``[0, 2**32)`` -> ``[B, vocab]`` float32.
    """
    tokens = torch.arange(vocab, dtype=torch.int64, device=seeds.device)
    return gumbel_noise_at(step_keys(seeds, step)[:, None], tokens[None, :])


def perturb(scaled: Tensor, keys: Tensor, prune: bool) -> Tensor:
    """``scaled + noise`` for the rows of one step, or (``prune``) the same values on the tokens that
    can still win each row's argmax and ``-inf`` elsewhere, which leaves every row's argmax as it is.

    Shapes:
        scaled ``[H, V]`` float32 (logits / T), keys ``[H]`` int64 -> ``[H, V]`` float32.
    """
    if not prune:
        tokens = torch.arange(scaled.shape[1], dtype=torch.int64, device=scaled.device)
        return scaled + gumbel_noise_at(keys[:, None], tokens[None, :])
    top = scaled.max(dim=1, keepdim=True).values  # [H, 1]
    # The winner scores at least top + min noise; a token needs top - spread to reach that. The
    # margin covers float32 rounding of the sums.
    floor = top - (GUMBEL_SPREAD + 1.0) - top.abs() * 2.0**-16
    rows, tokens = (scaled >= floor).nonzero(as_tuple=True)  # [K], [K]
    out = torch.full_like(scaled, float("-inf"))
    out[rows, tokens] = scaled[rows, tokens] + gumbel_noise_at(keys[rows], tokens)
    return out


class SeededGumbelSampler:
    """A ``generate`` logits processor: rows with a temperature ``T > 0`` get ``scores / T`` plus
    their seeded Gumbel noise, so the (greedy) argmax samples ``softmax(scores / T)``; rows with
    ``T = 0`` are left as they are (greedy).

    Args:
        temperatures: one per row of the batch (0: greedy).
        seeds: one 32-bit seed per row (:func:`row_seed`).
        start: the length of the batch's input ids (the first generated token is step 0).
        prune: hash only the tokens that can win a row's draw (same draws; default: on CPU only).
    """

    def __init__(self, temperatures: Sequence[float], seeds: Sequence[int], start: int,
                 prune: Optional[bool] = None):
        self.temperatures = torch.tensor([float(t) for t in temperatures], dtype=torch.float32)
        self.seeds = torch.tensor([int(s) for s in seeds], dtype=torch.int64)
        self.hot = self.temperatures > 0  # [B] bool, on the host
        self.any_hot = bool(self.hot.any())  # decided on the host, once
        self.start = start
        self.prune = prune

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        """Shapes: input_ids ``[B, L]``, scores ``[B, V]`` -> ``[B, V]``."""
        if not self.any_hot:
            return scores
        out = scores.float().clone()
        hot = self.hot.to(scores.device)  # only the sampling rows are hashed
        keys = step_keys(self.seeds[self.hot].to(scores.device), input_ids.shape[1] - self.start)
        scaled = out[hot] / self.temperatures[self.hot].to(scores.device)[:, None]
        prune = (not scores.is_cuda) if self.prune is None else self.prune
        out[hot] = perturb(scaled, keys, prune)
        return out.to(scores.dtype)
