"""Lexical evidence for candidate passages: BM25 of the question's words in each passage, the idf
of the question's words its title holds, the share of the question's idf the passage covers, and
what it adds to a first passage (docs/methods/learned.md#what-it-learns-from). Every question and
candidate at once; integer sums, so the scores have the same bits on every device and batch layout."""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.graph import LexicalIndex
from hpengine.sparse import csr_row_entries, gather_csr_rows, sorted_contains

#: the scores :func:`lexical_scores` returns, in the order of its last dimension
LEXICAL_SCORES = ("bm25", "title_idf", "idf_coverage")
#: the scores :func:`pair_coverage` returns, in the order of its last dimension
PAIR_SCORES = ("idf_gain_over_first", "idf_pair_coverage")


def lexical_scores(lex: LexicalIndex, q_crow: Tensor, q_col: Tensor, candidates: Tensor) -> Tensor:
    """:data:`LEXICAL_SCORES` of each candidate passage for its question.

    Args:
        lex: the index's words (:meth:`~hpengine.graph.IndexLookups.lexical`), on the candidates' device.
        q_crow, q_col: CSR ``[Q, V]`` of each question's distinct words, columns ascending
            (:meth:`~hpengine.graph.LexicalIndex.question_words`).
        candidates: int64 ``[Q, C]`` passage ids, ``-1`` padded.

    Returns:
        float32 ``[Q, C, 3]``: BM25 and the title's idf in idf units, the covered share in
        ``[0, 1]``; 0 for padding and for a question with no indexed word.

    Example:
        >>> from hpengine.graph import build_lexical_index
        >>> lex = build_lexical_index(["Oslo", "Bergen"], ["Oslo is a city.", "A city by the sea."])
        >>> crow, col = lex.question_words(["Which city is Oslo?"])
        >>> s = lexical_scores(lex, crow, col, torch.tensor([[0, 1, -1]]))
        >>> (s[0, :, 0] > 0).tolist(), [round(x, 3) for x in s[0, :, 2].tolist()]
        ([True, True, False], [1.0, 0.208, 0.0])
    """
    q, c = candidates.shape
    size = lex.idf.numel()
    owner, asked = _question_keys(lex, q_crow, q_col)  # [n] sorted: owners ascending, words ascending within
    flat = candidates.reshape(-1)
    at, entry = csr_row_entries(lex.crow, flat)
    hit = sorted_contains(asked, torch.div(at, c, rounding_mode="floor") * size + lex.col.index_select(0, entry))
    bm25 = torch.zeros(q * c, dtype=torch.int64, device=flat.device)
    bm25.index_add_(0, at[hit], lex.weight.index_select(0, entry[hit]))
    covered = torch.zeros_like(bm25).index_add_(0, at[hit], lex.idf.index_select(0, lex.col.index_select(0, entry[hit])))
    t_at, t_col = gather_csr_rows(lex.title_crow, lex.title_col, flat)
    t_hit = sorted_contains(asked, torch.div(t_at, c, rounding_mode="floor") * size + t_col)
    title = torch.zeros_like(bm25).index_add_(0, t_at[t_hit], lex.idf.index_select(0, t_col[t_hit]))
    total = torch.zeros(q, dtype=torch.int64, device=flat.device).index_add_(0, owner, lex.idf.index_select(0, q_col))
    unit = lex.unit
    share = covered.view(q, c).double() / total.clamp_min(1)[:, None].double()
    out = torch.stack([bm25.view(q, c).double() * unit, title.view(q, c).double() * unit, share], dim=-1)
    return out.float().masked_fill((candidates < 0)[..., None], 0.0)


def _question_keys(lex: LexicalIndex, q_crow: Tensor, q_col: Tensor) -> tuple[Tensor, Tensor]:
    """``(owner, keys)`` of each question's words: its question, and ``owner * V + word`` (sorted)."""
    owner = torch.repeat_interleave(torch.arange(q_crow.numel() - 1, device=q_col.device), q_crow.diff())
    return owner, owner * lex.idf.numel() + q_col


def _asked_words(lex: LexicalIndex, asked: Tensor, passages: Tensor) -> tuple[Tensor, Tensor]:
    """``(row, key)`` of each word of ``passages`` ``[Q, K]`` its question asks: the flat row
    ``q * K + k`` it came from and the key ``q * V + word``, in row order (so keys ascend per row)."""
    at, entry = csr_row_entries(lex.crow, passages.reshape(-1))
    keys = torch.div(at, passages.shape[1], rounding_mode="floor") * lex.idf.numel() + lex.col.index_select(0, entry)
    hit = sorted_contains(asked, keys)
    return at[hit], keys[hit]


def pair_coverage(lex: LexicalIndex, q_crow: Tensor, q_col: Tensor, candidates: Tensor, first: Tensor) -> Tensor:
    """:data:`PAIR_SCORES` of each candidate: the share of its question's idf it holds and ``first``
    does not, and the share the two hold together (a two-hop question's words spread over its pair
    of passages).

    Args:
        lex, q_crow, q_col, candidates: as :func:`lexical_scores`.
        first: int64 ``[Q, 1]`` each question's first passage (``-1``: none).

    Returns:
        float32 ``[Q, C, 2]`` in ``[0, 1]``; 0 for padding and for a question with no indexed word.

    Example:
        >>> from hpengine.graph import build_lexical_index
        >>> lex = build_lexical_index(["Oslo", "Bergen"], ["Oslo is a city.", "A city by the sea."])
        >>> crow, col = lex.question_words(["Which city by the sea is Oslo?"])
        >>> s = pair_coverage(lex, crow, col, torch.tensor([[1, 0]]), torch.tensor([[0]]))
        >>> [[round(x, 3) for x in row] for row in s[0].tolist()]
        [[0.442, 1.0], [0.0, 0.558]]
    """
    q, c = candidates.shape
    owner, asked = _question_keys(lex, q_crow, q_col)
    _, first_keys = _asked_words(lex, asked, first)  # sorted: one row per question
    first_cov = torch.zeros(q, dtype=torch.int64, device=candidates.device)
    first_cov.index_add_(0, torch.div(first_keys, lex.idf.numel(), rounding_mode="floor"),
                         lex.idf.index_select(0, first_keys % lex.idf.numel()))
    rows, keys = _asked_words(lex, asked, candidates)
    new = ~sorted_contains(first_keys, keys)
    gain = torch.zeros(q * c, dtype=torch.int64, device=candidates.device)
    gain.index_add_(0, rows[new], lex.idf.index_select(0, keys[new] % lex.idf.numel()))
    total = torch.zeros(q, dtype=torch.int64, device=candidates.device).index_add_(0, owner, lex.idf.index_select(0, q_col))
    gain = gain.view(q, c).double()
    denominator = total.clamp_min(1)[:, None].double()
    out = torch.stack([gain / denominator, (gain + first_cov[:, None].double()) / denominator], dim=-1)
    return out.float().masked_fill((candidates < 0)[..., None], 0.0)
