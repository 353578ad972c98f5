"""Word evidence for candidate passages (docs/methods/learned.md#what-it-learns-from): the share of
a question's idf a candidate holds beyond a first passage, the share the two hold together, and how
much of one passage's title another passage's words hold (a mention of it, linked or not).
Every question and candidate at once; integer sums, so the shares have the same bits on every
device and batch layout."""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.graph import PassageWords
from hpengine.retrieval._ranking import pad_rows
from hpengine.sparse import csr_row_entries, sorted_contains, unique_keys

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


def title_shares(words: PassageWords, titled: Tensor, holders: Tensor) -> Tensor:
    """The share of the idf of each ``titled`` passage's title words that each ``holders`` passage of
    the same question holds: how fully one passage mentions another by name, whether or not an
    entity link joins them.

    Args:
        words: the index's words (:meth:`~hpengine.graph.IndexLookups.words`), on the passages' device.
        titled: int64 ``[Q, C]`` passage ids whose titles are looked for, ``-1`` padded.
        holders: int64 ``[Q, K]`` passage ids whose words are searched, ``-1`` padded.

    Returns:
        float32 ``[Q, C, K]`` in ``[0, 1]``; 0 where either passage is padding and for a title with
        no indexed word.

    Example:
        >>> from hpengine.graph import build_passage_words
        >>> words = build_passage_words(["Oslo", "Bergen", "Ida Berg"], ["A city.", "Ida Berg was born in Oslo.", "A poet."])
        >>> s = title_shares(words, torch.tensor([[0, 2, -1]]), torch.tensor([[1, 0]]))
        >>> [[round(x, 3) for x in row] for row in s[0].tolist()]
        [[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]]
    """
    q, c = titled.shape
    k = holders.shape[1]
    size = words.idf.numel()
    held_at, held_entry = csr_row_entries(words.crow, holders.reshape(-1))
    held = held_at * size + words.col.index_select(0, held_entry)  # sorted keys (q * K + k) * V + word
    at, entry = csr_row_entries(words.title_crow, titled.reshape(-1))  # at: q * C + c
    word = words.title_col.index_select(0, entry)
    idf = words.idf.index_select(0, word)
    total = torch.zeros(q * c, dtype=torch.int64, device=titled.device).index_add_(0, at, idf)
    slot = torch.div(at, c, rounding_mode="floor")[:, None] * k + torch.arange(k, device=titled.device)  # [n, K]
    found = sorted_contains(held, slot * size + word[:, None])
    shares = torch.zeros(q * c * k, dtype=torch.int64, device=titled.device)
    shares.index_add_(0, (at[:, None] * k + torch.arange(k, device=titled.device))[found], idf[:, None].expand(-1, k)[found])
    out = shares.view(q, c, k).double() / total.clamp_min(1).view(q, c, 1).double()
    return out.float().masked_fill((titled < 0)[..., None] | (holders < 0)[:, None, :], 0.0)


def mentioned_passages(words: PassageWords, holders: Tensor, width: int) -> Tensor:
    """The passages whose whole title one of a question's ``holders`` holds (every title word is
    among that passage's words): the passages it names, whether or not an entity link joins them;
    the rarest-titled first (highest summed title idf, then lowest id), at most ``width`` per
    question. A holder names itself.

    Args:
        words: the index's words (:meth:`~hpengine.graph.IndexLookups.words`), on the passages' device.
        holders: int64 ``[Q, K]`` passage ids whose words are searched, ``-1`` padded.
        width: the most passages kept per question.

    Returns:
        int64 ``[Q, width]`` passage ids, ``-1`` padded.

    Example:
        >>> from hpengine.graph import build_passage_words
        >>> words = build_passage_words(["Oslo", "Bergen", "Ida Berg"], ["A city.", "Ida Berg was born in Oslo.", "A poet."])
        >>> mentioned_passages(words, torch.tensor([[1], [2]]), 3).tolist()
        [[1, 2, 0], [2, -1, -1]]
    """
    q, k = holders.shape
    size, device = words.idf.numel(), holders.device
    held_at, held_entry = csr_row_entries(words.crow, holders.reshape(-1))  # held_at: q * K + k
    held_word = words.col.index_select(0, held_entry)
    held = held_at * size + held_word  # sorted keys (q * K + k) * V + word
    # a whole title holds its rarest word: only the passages keyed by a held word can be named
    pos, entry = csr_row_entries(words.key_crow, held_word)
    slot, named = held_at.index_select(0, pos), words.key_col.index_select(0, entry)
    at, title_entry = csr_row_entries(words.title_crow, named)
    found = sorted_contains(held, slot.index_select(0, at) * size + words.title_col.index_select(0, title_entry))
    missing = torch.zeros(named.numel(), dtype=torch.int64, device=device).index_add_(0, at, (~found).long())
    whole = missing == 0
    p = words.title_idf.numel()
    pairs = unique_keys(torch.div(slot[whole], k, rounding_mode="floor") * p + named[whole])  # (question, passage)
    question, named = torch.div(pairs, p, rounding_mode="floor"), pairs % p
    order = torch.sort(-words.title_idf.index_select(0, named), stable=True).indices  # ids ascend within ties
    order = order.index_select(0, torch.sort(question.index_select(0, order), stable=True).indices)
    block = pad_rows(question.index_select(0, order), [named.index_select(0, order)], q, [-1])[0]  # rarest first
    return torch.nn.functional.pad(block[:, :width], (0, max(width - block.shape[1], 0)), value=-1)
