"""The words of an index's passages (docs/methods/learned.md#what-it-learns-from): each passage's
distinct words over a sorted vocabulary, and each word's idf, built from the passage texts on first
use and kept with the index's other lookups.

The idf is kept as integers in units of ``2**-SCALE_BITS``: a question's idf mass in a passage is
then a sum of integers, exact in any order, so it has the same bits on every device and batch
layout (float sums would not: CUDA's ``index_add_`` adds in no fixed order).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

#: fixed-point scale of the stored idf: ``2**SCALE_BITS`` units per 1.0
SCALE_BITS = 20
_WORD = re.compile(r"\w+")
#: function words that say nothing of which passage a question is about
STOPWORDS = frozenset(
    "a an and are as at be been by did do does for from had has have he her his how in is it its of on or "
    "she than that the their they this to was were what when where which who whom whose why with".split())


def words_of(text: str) -> list[str]:
    """The lower-cased words of ``text`` (runs of letters, digits and ``_``), stopwords dropped.

    Example:
        >>> words_of("Who directed the film Halden's Return?")
        ['directed', 'film', 'halden', 's', 'return']
    """
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


@dataclass
class PassageWords:
    """Each passage's distinct words (title and text) as CSR over a sorted vocabulary, with their idf.

    Attributes:
        vocabulary: ``{word: id}``, ids in sorted word order ``[V]``.
        crow, col: CSR ``[P, V]`` of each passage's distinct words, columns ascending.
        idf: int64 ``[V]``: ``ln(1 + (P - df + 0.5) / (df + 0.5))`` in ``2**-SCALE_BITS`` units.
        title_crow, title_col: CSR ``[P, V]`` of the distinct words of each passage's title alone.
        key_crow, key_col: CSR ``[V, P]``: the passages whose title's rarest word (highest idf, then
            lowest id) each word is, ascending; a passage without title words is in no row. Every
            passage whose title another passage holds whole is in the row of one of that passage's words.
        title_idf: int64 ``[P]``: the idf of each passage's title words summed (same units as ``idf``).
    """

    vocabulary: dict
    crow: Tensor
    col: Tensor
    idf: Tensor
    title_crow: Tensor
    title_col: Tensor
    key_crow: Tensor
    key_col: Tensor
    title_idf: Tensor

    @property
    def unit(self) -> float:
        """The value of one stored unit of :attr:`idf` (``2**-SCALE_BITS``)."""
        return math.ldexp(1.0, -SCALE_BITS)

    def to(self, device) -> "PassageWords":
        return PassageWords(self.vocabulary, *(t.to(device) for t in (self.crow, self.col, self.idf, self.title_crow,
                                                                       self.title_col, self.key_crow, self.key_col,
                                                                       self.title_idf)))

    def question_words(self, questions: list[str]) -> tuple[Tensor, Tensor]:
        """CSR ``[Q, V]`` (``crow``, ``col``, int64 on the index's device) of each question's
        distinct words that some passage holds, columns ascending (host text, a few words each)."""
        ids = [sorted({self.vocabulary[w] for w in words_of(q) if w in self.vocabulary}) for q in questions]
        crow = np.zeros(len(ids) + 1, dtype=np.int64)
        crow[1:] = np.cumsum([len(i) for i in ids])
        col = np.fromiter((i for row in ids for i in row), dtype=np.int64, count=int(crow[-1]))
        device = self.idf.device
        return torch.from_numpy(crow).to(device), torch.from_numpy(col).to(device)


def build_passage_words(titles: list[str], texts: list[str]) -> PassageWords:
    """The :class:`PassageWords` of ``P`` passages (title and text each); CPU tensors.

    Example:
        >>> words = build_passage_words(["Oslo", "Bergen"], ["Oslo is a city.", "A city by the sea."])
        >>> sorted(words.vocabulary), words.crow.tolist(), words.col.tolist()
        (['bergen', 'city', 'oslo', 'sea'], [0, 2, 5], [1, 2, 0, 1, 3])
    """
    docs = [words_of(f"{t} {x}") for t, x in zip(titles, texts)]
    vocabulary = {w: i for i, w in enumerate(sorted({w for d in docs for w in d}))}
    crow, col = _distinct_words(docs, vocabulary)
    df = np.bincount(col, minlength=len(vocabulary)).astype(np.float64)
    idf = np.rint(np.log1p((len(docs) - df + 0.5) / (df + 0.5)) * float(1 << SCALE_BITS)).astype(np.int64)
    title_crow, title_col = _distinct_words([words_of(t) for t in titles], vocabulary)
    key_crow, key_col, title_idf = _title_keys(title_crow, title_col, idf)
    return PassageWords(vocabulary, *map(torch.from_numpy, (crow, col, idf, title_crow, title_col, key_crow, key_col,
                                                            title_idf)))


def _title_keys(title_crow: np.ndarray, title_col: np.ndarray, idf: np.ndarray) -> tuple:
    """``(key_crow, key_col, title_idf)`` of :class:`PassageWords` from the titles' CSR ``[P, V]``."""
    num, size = len(title_crow) - 1, max(len(idf), 1)
    rows = np.repeat(np.arange(num, dtype=np.int64), np.diff(title_crow))
    title_idf = np.zeros(num, dtype=np.int64)
    np.add.at(title_idf, rows, idf[title_col])  # integer sums: exact
    order = np.lexsort((title_col, -idf[title_col], rows))  # per title: rarest word first, then lowest id
    first = np.unique(rows[order], return_index=True)[1]
    titled, key = rows[order][first], title_col[order][first]
    by_key = np.lexsort((titled, key))
    key_crow = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(np.bincount(key, minlength=size), out=key_crow[1:])
    return key_crow, titled[by_key], title_idf


def _distinct_words(docs: list[list[str]], vocabulary: dict) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``[len(docs), V]`` (int64 ``crow``, ``col``) of each document's distinct words, columns ascending."""
    num, size = len(docs), max(len(vocabulary), 1)
    rows = np.repeat(np.arange(num, dtype=np.int64), [len(d) for d in docs])
    cols = np.fromiter((vocabulary[w] for d in docs for w in d), dtype=np.int64, count=len(rows))
    keys = np.unique(rows * size + cols)  # distinct (document, word), sorted
    crow = np.zeros(num + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // size, minlength=num), out=crow[1:])
    return crow, keys % size
