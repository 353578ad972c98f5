"""Text rules of the QA pipeline that need no model: rewriting sub-queries, anchoring, choice
questions, "unknown" answers, re-asked questions. Every retriever's reading steps use these."""
from __future__ import annotations

import re

from hpengine.eval import f1_score, normalize_answer

UNKNOWN = "unknown"

_REF = re.compile(r"#(\d+)")
_WORD = re.compile(r"[^\W\d_][\w'-]*")
_YES_NO = re.compile(r"^(is|are|was|were|do|does|did|can|could|has|have|had|will|would|should)\b", re.I)


def rewrite(subquery: str, answers: list[str]) -> str:
    """Substitute resolved answers into ``#k`` references (the rewrite step,
    docs/methods/hyperprove.md#decomposition-and-rewriting).

    Example:
        >>> rewrite("Who is the mother of #1?", ["Ryszard Bugajski"])
        'Who is the mother of Ryszard Bugajski?'
    """
    def sub(m):
        k = int(m.group(1))
        return answers[k - 1] if 0 < k <= len(answers) and answers[k - 1] else m.group(0)

    return _REF.sub(sub, subquery)


def _words(text: str) -> list[str]:
    """Words without a possessive ``'s`` / ``'``."""
    return [re.sub(r"'s?$", "", w) for w in _WORD.findall(text)]


def _names(text: str) -> set[str]:
    """Capitalised words after the first one: the names a sentence mentions, roughly."""
    return {w for w in _words(text)[1:] if len(w) > 1 and w[0].isupper()}


def names_shared(subquery: str, question: str) -> bool:
    """Whether the sub-question names something the question names (it is anchored in it).

    Example:
        >>> names_shared("Who directed Flannelfoot?", "Which film came out first, The Hitler Gang or Flannelfoot?")
        True
        >>> names_shared("What is the name of the star?", "What is one of the stars of The Newcomers known for?")
        False
    """
    return bool(_names(subquery) & set(_words(question)))


def choice_options(question: str) -> list[str]:
    """The two options of a choice question ("Which film came out first, Alpha or Beta?"): the
    text after the first comma, split at its last " or "; ``[]`` when the question offers none.

    Example:
        >>> choice_options("Which film has the director who died first, Love, Honor And Oh-Baby! or Flannelfoot?")
        ['Love, Honor And Oh-Baby!', 'Flannelfoot']
    """
    q = question.strip().rstrip("?").strip()
    if "," not in q:
        return []
    parts = q.split(",", 1)[1].rsplit(" or ", 1)
    options = [p.strip() for p in parts]
    return options if len(parts) == 2 and all(options) else []


def is_comparison(question: str) -> bool:
    """Whether the question compares (offers two options, or asks yes/no): its answer is decided
    from the sub-answers rather than read off one fact.

    Example:
        >>> is_comparison("Which film came out first, Alpha or Beta?"), is_comparison("Are Alpha and Beta both films?")
        (True, True)
        >>> is_comparison("Where was the director of Alpha born?")
        False
    """
    return bool(choice_options(question)) or bool(_YES_NO.match(question.strip()))


def resolve_choice(question: str, answer: str, steps: list) -> str:
    """Map a choice question's answer back to an option when the reader answered with what one
    of the options led to: for "Which film has the director who died first, Alpha or Beta?" the
    chain's "Who directed Alpha?" -> "Ann Lee" turns the answer "Ann Lee" into "Alpha".

    The answer is kept when the question offers no two options, when the answer already shares
    a word with an option, or when no single option is named by a sub-question answered with it.

    Args:
        question: the question.
        answer: the final read's answer.
        steps: the chain's ``(sub-question, answer)`` pairs.

    Example:
        >>> resolve_choice("Which film came out first, Alpha or Beta?", "Ann Lee", [("Who directed Alpha?", "Ann Lee")])
        'Alpha'
    """
    options = choice_options(question)
    target = normalize_answer(answer)
    words = set(target.split())
    if len(options) != 2 or not words or any(words & set(normalize_answer(o).split()) for o in options):
        return answer
    for subquery, sub_answer in steps:
        if normalize_answer(sub_answer) == target:
            named = [o for o in options if f" {normalize_answer(o)} " in f" {normalize_answer(subquery)} "]
            if len(named) == 1:
                return named[0]
    return answer


def restates(subquery: str, question: str, threshold: float) -> bool:
    """Whether a sub-question re-asks the question: its word F1 with the question (SQuAD
    normalisation) is at least ``threshold``.

    Example:
        >>> q = "Which film came out first, Charley and the Angel or The Boatniks?"
        >>> restates("Which film came out first, Charley and the Angel or The Boatniks?", q, 0.9)
        True
        >>> restates("When was The Boatniks released?", q, 0.9)
        False
    """
    return f1_score(subquery, [question]) >= threshold


def is_unknown(answer: str) -> bool:
    """Whether a reader's answer says the facts do not tell (``"unknown"``, empty, "n/a", ...).

    Example:
        >>> is_unknown("Unknown."), is_unknown("Paris")
        (True, False)
    """
    a = answer.strip().lower()
    return not a or a.startswith(UNKNOWN) or a in {"none", "n/a", "not mentioned", "not given"}
