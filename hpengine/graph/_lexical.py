"""The words of an index's passages, for lexical (BM25) evidence beside the embeddings
(docs/methods/learned.md#features): built from the passage texts on first use and kept with the
index's other lookups.

Scores are kept as integers in units of ``2**-SCALE_BITS``: a question's BM25 score of a passage is
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

#: BM25's term-frequency saturation and length normalisation (the usual defaults)
BM25_K1, BM25_B = 1.2, 0.75
#: fixed-point scale of the stored scores: ``2**SCALE_BITS`` units per 1.0
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
class LexicalIndex:
    """Per passage, its words' BM25 weights and its title's words, as CSR over a sorted vocabulary.

    Attributes:
        vocabulary: ``{word: id}``, ids in sorted word order ``[V]``.
        crow, col: CSR ``[P, V]`` of each passage's words (title and text), columns ascending.
        weight: int64 ``[nnz]``: ``idf(word) * bm25_tf(word, passage)`` in ``2**-SCALE_BITS`` units.
        idf: int64 ``[V]``: each word's idf in the same units.
        title_crow, title_col: CSR ``[P, V]`` of each passage's title words.
    """

    vocabulary: dict
    crow: Tensor
    col: Tensor
    weight: Tensor
    idf: Tensor
    title_crow: Tensor
    title_col: Tensor

    @property
    def unit(self) -> float:
        """The value of one stored unit of :attr:`weight` and :attr:`idf` (``2**-SCALE_BITS``)."""
        return math.ldexp(1.0, -SCALE_BITS)

    def to(self, device) -> "LexicalIndex":
        move = {k: v.to(device) for k, v in vars(self).items() if isinstance(v, Tensor)}
        return LexicalIndex(self.vocabulary, **move)

    def question_words(self, questions: list[str]) -> tuple[Tensor, Tensor]:
        """CSR ``[Q, V]`` (``crow``, ``col``, int64 on the index's device) of each question's
        distinct words that some passage holds, columns ascending (host text, a few words each)."""
        ids = [sorted({self.vocabulary[w] for w in words_of(q) if w in self.vocabulary}) for q in questions]
        crow = np.zeros(len(ids) + 1, dtype=np.int64)
        crow[1:] = np.cumsum([len(i) for i in ids])
        col = np.fromiter((i for row in ids for i in row), dtype=np.int64, count=int(crow[-1]))
        device = self.idf.device
        return torch.from_numpy(crow).to(device), torch.from_numpy(col).to(device)


def _fixed(x: np.ndarray) -> np.ndarray:
    return np.rint(x * float(1 << SCALE_BITS)).astype(np.int64)


def _pairs_csr(rows: np.ndarray, cols: np.ndarray, num_rows: int, num_cols: int,
               counts: bool = False) -> tuple:
    """Distinct (row, col) pairs as CSR (columns ascending), with each pair's count when asked."""
    keys, count = np.unique(rows * num_cols + cols, return_counts=True)
    crow = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // num_cols, minlength=num_rows), out=crow[1:])
    return (crow, keys % num_cols, count) if counts else (crow, keys % num_cols)


def build_lexical_index(titles: list[str], texts: list[str], *, k1: float = BM25_K1,
                        b: float = BM25_B) -> LexicalIndex:
    """The :class:`LexicalIndex` of ``P`` passages (title and text each); CPU tensors.

    Example:
        >>> lex = build_lexical_index(["Oslo", "Bergen"], ["Oslo is a city.", "A city by the sea."])
        >>> sorted(lex.vocabulary), lex.crow.tolist(), lex.title_col.tolist()
        (['bergen', 'city', 'oslo', 'sea'], [0, 2, 5], [2, 0])
    """
    docs = [words_of(f"{t} {x}") for t, x in zip(titles, texts)]
    heads = [words_of(t) for t in titles]
    words = sorted({w for d in docs for w in d})
    vocabulary = {w: i for i, w in enumerate(words)}
    num, size = len(docs), max(len(words), 1)
    lengths = np.fromiter(map(len, docs), dtype=np.float64, count=num)
    rows = np.repeat(np.arange(num, dtype=np.int64), lengths.astype(np.int64))
    cols = np.fromiter((vocabulary[w] for d in docs for w in d), dtype=np.int64, count=len(rows))
    crow, col, tf = _pairs_csr(rows, cols, num, size, counts=True)
    df = np.bincount(col, minlength=size).astype(np.float64)
    idf = np.log1p((num - df + 0.5) / (df + 0.5))
    owner = np.repeat(np.arange(num), np.diff(crow))
    norm = k1 * (1.0 - b + b * lengths[owner] / max(float(lengths.mean()) if num else 1.0, 1e-9))
    weight = idf[col] * tf * (k1 + 1.0) / (tf + norm)
    head_rows = np.repeat(np.arange(num, dtype=np.int64), [len(h) for h in heads])
    head_cols = np.fromiter((vocabulary[w] for h in heads for w in h), dtype=np.int64, count=len(head_rows))
    title_crow, title_col = _pairs_csr(head_rows, head_cols, num, size)
    as_t = torch.from_numpy
    return LexicalIndex(vocabulary, as_t(crow), as_t(col), as_t(_fixed(weight)), as_t(_fixed(idf[:len(words)])),
                        as_t(title_crow), as_t(title_col))
