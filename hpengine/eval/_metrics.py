"""Evaluation metrics (docs/methods/index.md#evaluation-protocol): SQuAD EM/F1 over answer aliases, passage Recall@k."""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any, Iterable

import torch
from torch import Tensor

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD answer normalisation: lower-case, drop punctuation, drop articles, collapse whitespace.

    The same steps in the same order as the official SQuAD v1.1 evaluation script.

    Args:
        text: an answer string.

    Returns:
        The normalised string.

    Example:
        >>> normalize_answer("  The  Eiffel-Tower, Paris! ")
        'eiffeltower paris'
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _check_golds(golds: Any) -> None:
    if isinstance(golds, str) or not isinstance(golds, (list, tuple)):
        raise TypeError(f"golds must be a list of answer strings (got {type(golds).__name__})")
    if not golds:
        raise ValueError("golds must hold at least one answer (got an empty list)")


def exact_match(pred: str, golds: list[str]) -> float:
    """1.0 if the normalised prediction equals a normalised gold alias, else 0.0.

    Args:
        pred: predicted answer.
        golds: gold answer and its aliases (at least one).

    Returns:
        0.0 or 1.0.

    Example:
        >>> exact_match("the Louvre.", ["Louvre Museum", "Louvre"])
        1.0
    """
    _check_golds(golds)
    norm = normalize_answer(pred)
    return float(any(norm == normalize_answer(gold) for gold in golds))


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:  # SQuAD v2 rule: both empty counts as a match
        return float(pred_tokens == gold_tokens)
    num_same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(pred: str, golds: list[str]) -> float:
    """Token-level F1 of the normalised strings (official SQuAD script), max over gold aliases.

    Tokens are whitespace-split after :func:`normalize_answer`, counted as a multiset. When the
    prediction or the gold normalises to no token, F1 is 1.0 if both are empty, else 0.0.

    Args:
        pred: predicted answer.
        golds: gold answer and its aliases (at least one).

    Returns:
        F1 in [0, 1].

    Example:
        >>> f1_score("Barack Obama", ["Obama"])  # precision 1/2, recall 1
        0.6666666666666666
    """
    _check_golds(golds)
    pred_tokens = normalize_answer(pred).split()
    return max(_token_f1(pred_tokens, normalize_answer(gold).split()) for gold in golds)


def _passage_key(passage: Any) -> tuple[str, str]:
    """``(title, text)`` of a tuple/list pair, a ``{"title", "text"}`` dict or a ``Passage``."""
    if isinstance(passage, dict):
        return passage["title"], passage["text"]
    if hasattr(passage, "title") and hasattr(passage, "text"):
        return passage.title, passage.text
    title, text = passage
    return title, text


def recall_at_k(retrieved: list[tuple[str, str]], gold: list[tuple[str, str]], k: int) -> float:
    """Passage Recall@k of one question: ``|top-k ∩ gold| / |gold|``
    (docs/methods/index.md#evaluation-protocol).

    Passages are compared as ``(title, text)`` pairs, never by title alone (MuSiQue repeats
    titles). Gold passages are deduplicated; a passage retrieved twice counts once. When fewer
    than ``k`` passages are retrieved, all of them are used.

    Args:
        retrieved: ranked passages, best first, as ``(title, text)`` pairs (dicts with
            ``title``/``text`` and ``Passage`` objects are accepted too).
        gold: the supporting passages, same forms.
        k: cut-off, >= 1.

    Returns:
        Recall in [0, 1]; ``nan`` when ``gold`` is empty (undefined: average with ``nanmean`` to
        skip such questions, or filter them out).

    Example:
        >>> recall_at_k([("A", "a1"), ("B", "b"), ("A", "a2")], [("A", "a2"), ("B", "b")], k=2)
        0.5
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1 (got {k!r})")
    gold_keys = {_passage_key(p) for p in gold}
    if not gold_keys:
        return float("nan")
    top = {_passage_key(p) for p in retrieved[:k]}
    return len(top & gold_keys) / len(gold_keys)


def recall_at_k_batch(retrieved: Tensor, gold: Tensor, k: int) -> Tensor:
    """Vectorised Recall@k over a batch, with passages as integer ids (e.g. corpus indices).

    Ids must identify passages by ``(title, text)``: map duplicates of one pair to one id.
    ``-1`` pads both inputs. Duplicate gold ids count once, as do duplicate retrieved ids.

    Args:
        retrieved: int64 ``[Q, R]`` ranked passage ids, best first, ``-1`` padded.
        gold: int64 ``[Q, G]`` gold passage ids, ``-1`` padded, same device.
        k: cut-off, >= 1 (``k > R`` uses all R columns).

    Returns:
        float32 ``[Q]`` recalls on the input device; ``nan`` for a question without gold ids.

    Shapes:
        ``[Q, R]``, ``[Q, G]`` -> ``[Q]``.

    Example:
        >>> recall_at_k_batch(torch.tensor([[3, 1, 2], [5, -1, -1]]), torch.tensor([[1, 2], [-1, -1]]), k=2)
        tensor([0.5000,    nan])
    """
    _check_id_matrix("retrieved", retrieved)
    _check_id_matrix("gold", gold)
    if retrieved.shape[0] != gold.shape[0] or retrieved.device != gold.device:
        raise ValueError(f"retrieved and gold must have the same Q and device "
                         f"(got {tuple(retrieved.shape)} on {retrieved.device}, {tuple(gold.shape)} on {gold.device})")
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1 (got {k!r})")
    gold = gold.sort(dim=1).values  # [Q, G]; duplicates become neighbours
    is_first = torch.ones_like(gold, dtype=torch.bool)
    is_first[:, 1:] = gold[:, 1:] != gold[:, :-1]
    is_gold = (gold >= 0) & is_first  # [Q, G] distinct real gold ids
    top = retrieved[:, :k]  # [Q, min(k, R)]
    is_hit = (gold.unsqueeze(2) == top.unsqueeze(1)).any(dim=2) & is_gold  # [Q, G]
    num_gold = is_gold.sum(dim=1).to(torch.float32)
    return is_hit.sum(dim=1).to(torch.float32) / num_gold  # 0/0 = nan: no gold


def _check_id_matrix(arg: str, ids: Tensor) -> None:
    if not isinstance(ids, Tensor):
        raise TypeError(f"{arg} must be a torch.Tensor (got {type(ids).__name__})")
    if ids.ndim != 2:
        raise ValueError(f"{arg} must be 2-D [Q, n] (got shape {tuple(ids.shape)})")
    if ids.dtype != torch.long:
        raise TypeError(f"{arg} must be int64 (got {ids.dtype})")


def passage_ids(passages: Iterable[Any], index: dict[tuple[str, str], int]) -> list[int]:
    """Map passages to ids through a ``(title, text) -> id`` table; unknown passages give -1.

    Args:
        passages: ``(title, text)`` pairs, dicts or ``Passage`` objects.
        index: ``{(title, text): id}``, e.g. built from the corpus list.

    Returns:
        One id per passage.

    Example:
        >>> passage_ids([("A", "x"), ("B", "y")], {("B", "y"): 0})
        [-1, 0]
    """
    return [index.get(_passage_key(p), -1) for p in passages]


__all__ = ["exact_match", "f1_score", "normalize_answer", "passage_ids", "recall_at_k", "recall_at_k_batch"]
