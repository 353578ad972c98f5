"""Lexical evidence for candidate passages: BM25 of the question's words in each passage, the idf
of the question's words its title holds, and the share of the question's idf the passage covers
(docs/methods/learned.md#features). Every question and candidate at once; integer sums, so the
scores have the same bits on every device and batch layout."""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.graph import LexicalIndex
from hpengine.sparse import csr_row_entries, gather_csr_rows, sorted_contains

#: the scores :func:`lexical_scores` returns, in the order of its last dimension
LEXICAL_SCORES = ("bm25", "title_idf", "idf_coverage")


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
    owner = torch.repeat_interleave(torch.arange(q, device=candidates.device), q_crow.diff())
    asked = owner * size + q_col  # [n] sorted: owners ascending, words ascending within
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
