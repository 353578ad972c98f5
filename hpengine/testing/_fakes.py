"""Deterministic stand-ins for models, for fast offline tests of the plumbing around them."""
from __future__ import annotations

import hashlib
import re

import torch
from torch import Tensor


class HashingEncoder:
    """Bag of hashed word and character-trigram features, L2-normalised.

    Each text is embedded independently of the others (no batching effects), so results are
    bit-for-bit reproducible; similar strings get similar vectors, which is all tests need.
    """

    def __init__(self, dim: int = 64, name: str = "hashing-encoder"):
        self.dim = dim
        self.name = f"{name}-{dim}"
        self.calls = 0
        self.texts_encoded = 0
        self.kinds: list = []  # the kind= of each call, in order

    def _features(self, text: str) -> list[int]:
        words = re.findall(r"\w+", text.lower())
        grams = [w[i:i + 3] for w in words for i in range(max(1, len(w) - 2))]
        return [int(hashlib.md5(g.encode()).hexdigest()[:8], 16) % self.dim for g in words + grams]

    def encode(self, texts: list, progress: bool = False, batch_size=None, kind: str = "passage") -> Tensor:
        if kind not in ("query", "passage"):
            raise ValueError(f"kind must be one of ['query', 'passage'] (got {kind!r})")
        self.calls += 1
        self.kinds.append(kind)
        self.texts_encoded += len(texts)
        out = torch.zeros(len(texts), self.dim)
        for i, t in enumerate(texts):
            for f in self._features(t):
                out[i, f] += 1.0
        return torch.nn.functional.normalize(out, dim=1)


class ListExtractor:
    """Extractor returning facts from a dict ``title -> [(fact text, [entities])]``; counts calls."""

    def __init__(self, table: dict):
        self.table = table
        self.seen_titles: list = []

    def extract(self, passages: list, progress: bool = False) -> list:
        from hpengine.models import ExtractedFact

        self.seen_titles.extend(p.title for p in passages)
        return [[ExtractedFact(text, list(ents)) for text, ents in self.table.get(p.title, [])] for p in passages]


class TableTagger:
    """A :class:`~hpengine.models.MentionTagger` stand-in serving recorded mentions (``text ->
    [mention]``), for machines without spaCy; a text it has no record of is an error."""

    def __init__(self, table: dict):
        self.table = table

    def mentions(self, texts: list) -> list:
        missing = [t for t in texts if t not in self.table]
        if missing:
            raise KeyError(f"no recorded mentions for {missing[0]!r}")
        return [list(self.table[t]) for t in texts]
