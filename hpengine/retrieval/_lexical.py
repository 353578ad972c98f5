"""Word evidence for candidate passages (docs/methods/learned.md#what-it-learns-from): the share of
a question's idf a candidate holds beyond a first passage, and the share the two hold together.
Every question and candidate at once; integer sums, so the shares have the same bits on every
device and batch layout."""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.graph import PassageWords
from hpengine.sparse import csr_row_entries, sorted_contains

#: the scores :func:`pair_coverage` returns, in the order of its last dimension
PAIR_SCORES = ("idf_gain_over_first", "idf_pair_coverage")


def _asked_words(words: PassageWords, asked: Tensor, passages: Tensor) -> tuple[Tensor, Tensor]:
    """``(row, key)`` of each word of ``passages`` ``[Q, K]`` its question asks (``asked``: sorted
    keys ``q * V + word``): the flat row ``q * K + k`` it came from and its key, in row order."""
    at, entry = csr_row_entries(words.crow, passages.reshape(-1))
    keys = torch.div(at, passages.shape[1], rounding_mode="floor") * words.idf.numel() + words.col.index_select(0, entry)
    hit = sorted_contains(asked, keys)
    return at[hit], keys[hit]


def pair_coverage(words: PassageWords, q_crow: Tensor, q_col: Tensor, candidates: Tensor, first: Tensor) -> Tensor:
    """:data:`PAIR_SCORES` of each candidate: the share of its question's idf it holds and ``first``
    does not, and the share the two hold together (a two-hop question's words spread over its pair
    of passages).

    Args:
        words: the index's words (:meth:`~hpengine.graph.IndexLookups.words`), on the candidates' device.
        q_crow, q_col: CSR ``[Q, V]`` of each question's distinct words, columns ascending
            (:meth:`~hpengine.graph.PassageWords.question_words`).
        candidates: int64 ``[Q, C]`` passage ids, ``-1`` padded.
        first: int64 ``[Q, 1]`` each question's first passage (``-1``: none).

    Returns:
        float32 ``[Q, C, 2]`` in ``[0, 1]``; 0 for padding and for a question with no indexed word.

    Example:
        >>> from hpengine.graph import build_passage_words
        >>> words = build_passage_words(["Oslo", "Bergen"], ["Oslo is a city.", "A city by the sea."])
        >>> crow, col = words.question_words(["Which city by the sea is Oslo?"])
        >>> s = pair_coverage(words, crow, col, torch.tensor([[1, 0]]), torch.tensor([[0]]))
        >>> [[round(x, 3) for x in row] for row in s[0].tolist()]
        [[0.442, 1.0], [0.0, 0.558]]
    """
    q, c = candidates.shape
    size = words.idf.numel()
    owner = torch.repeat_interleave(torch.arange(q, device=candidates.device), q_crow.diff())
    asked = owner * size + q_col  # sorted: owners ascending, words ascending within
    _, first_keys = _asked_words(words, asked, first)  # sorted: one row per question
    first_idf = torch.zeros(q, dtype=torch.int64, device=candidates.device)
    first_idf.index_add_(0, torch.div(first_keys, size, rounding_mode="floor"), words.idf.index_select(0, first_keys % size))
    rows, keys = _asked_words(words, asked, candidates)
    new = ~sorted_contains(first_keys, keys)
    gain = torch.zeros(q * c, dtype=torch.int64, device=candidates.device)
    gain.index_add_(0, rows[new], words.idf.index_select(0, keys[new] % size))
    total = torch.zeros(q, dtype=torch.int64, device=candidates.device).index_add_(0, owner, words.idf.index_select(0, q_col))
    gain = gain.view(q, c).double()
    denominator = total.clamp_min(1)[:, None].double()
    out = torch.stack([gain / denominator, (gain + first_idf[:, None].double()) / denominator], dim=-1)
    return out.float().masked_fill((candidates < 0)[..., None], 0.0)
