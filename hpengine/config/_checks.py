"""Value checks shared by the config dataclasses (one-line errors that name the key), and the
documented maxima of their size settings.

Every ``__post_init__`` first calls :func:`_check_finite`, which walks all fields of the
dataclass: a float setting that is NaN or infinite passes every ``<`` / ``>`` comparison of the
range checks unnoticed and then ranks nothing, so it is refused before any range check runs, for
every float field, including fields added later.
"""
from __future__ import annotations

import dataclasses
import math

# Maxima of the int size settings, each named in its field's comment. A value above one runs for
# minutes or allocates more memory than any machine has before it could fail; none is near a
# useful value (the dev-set defaults and sweeps use a tenth or less of each).
MAX_BATCH = 65_536  # items per batch: texts per forward pass, prompts per generate call, questions per eval batch
MAX_TOKENS = 131_072  # a token length: input or generated tokens (the longest LLM context windows, 128 Ki)
MAX_BATCH_TOKENS = 16_777_216  # padded tokens of one forward pass (2^24)
MAX_MEMORY_MB = 1_048_576  # a memory budget: 1 TiB
MAX_PASSAGES = 1000  # passages ranked or read per question (also the largest Recall@k)
MAX_TOP = 1000  # a per-question top-n list: seeds, links, candidates, chain facts
MAX_HOPS = 16  # hops / sub-questions of one question (multi-hop QA data has at most 4)
MAX_STEPS = 100  # walk steps / BFS rounds of one hop (mass and reach stop changing long before)
MAX_SUBGRAPH = 4096  # the local subgraph of a hop: its [M, M] float32 block is 64 MiB per question
MAX_ITER = 10_000  # power / Chebyshev iterations (damping 0.999 converges to 1e-6 in about 14k power steps)
MAX_PROCESSES = 1024  # worker processes
MAX_CELLS = 65_536  # FAISS IVF cells (lowered to the keys / 39 for small indexes)
MAX_KEYS = 10**11  # keys of one dense search (far past any corpus's facts)


def _key(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _check_finite(config, prefix: str) -> None:
    """Every float value of the dataclass ``config`` is finite (NaN and +-inf are refused, naming
    the key ``prefix.field`` and the value)."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{_key(prefix, f.name)} must be a finite number (got {value!r})")


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)} (got {value!r})")


def _check_range(name: str, value, lo=None, hi=None, lo_open=False) -> None:
    if isinstance(value, float) and not math.isfinite(value):  # NaN compares False with every bound
        raise ValueError(f"{name} must be a finite number (got {value!r})")
    if lo is not None and (value < lo or (lo_open and value == lo)):
        op = ">" if lo_open else ">="
        raise ValueError(f"{name} must be {op} {lo} (got {value!r})")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi} (got {value!r})")
