"""Reader: answers a (sub-)question from facts with an instruction LLM, batched (SPEC §2.2-2.3)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from hpengine.eval._metrics import normalize_answer as norm

PROMPT_VERSION = "read-v1"
UNKNOWN = "unknown"

_HOP = ("Answer the question using only the facts. Reply with the answer only: a short phrase "
        "(a name, place, date or number), or 'unknown' if the facts do not say.")
_FINAL = ("Answer the question using the facts. Reply with the answer only: a short phrase "
          "(a name, place, date, number, or yes/no).")


def reading_prompt(question: str, facts: list[str], final: bool, steps: list | None = None) -> str:
    """The reader's prompt: instruction, facts, optionally the chain's (sub-question, answer)
    pairs (``steps``, final read only), then the question."""
    lines = [_FINAL if final else _HOP, "", "Facts:"]
    lines.extend(f"- {f}" for f in facts)
    if steps:
        lines.extend(["", "Answers to the sub-questions:"])
        lines.extend(f"- {q} {a}" for q, a in steps)
    lines.extend(["", f"Question: {question}", "Answer:"])
    return "\n".join(lines)


def clean_answer(text: str) -> str:
    """First line of the output, without an 'Answer:' prefix, quotes or a final period."""
    line = next((ln for ln in text.strip().splitlines() if ln.strip()), "")
    line = re.sub(r"^\s*(answer\s*:)\s*", "", line, flags=re.I).strip().strip('"').strip("'").strip()
    if line.endswith(".") and not re.search(r"\b[A-Z]\.$", line):
        line = line[:-1]
    return line


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


_YES_NO = re.compile(r"^(is|are|was|were|do|does|did|can|could|has|have|had|will|would|should)\b", re.I)


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
    target = norm(answer)
    words = set(target.split())
    if len(options) != 2 or not words or any(words & set(norm(o).split()) for o in options):
        return answer
    for subquery, sub_answer in steps:
        if norm(sub_answer) == target:
            named = [o for o in options if f" {norm(o)} " in f" {norm(subquery)} "]
            if len(named) == 1:
                return named[0]
    return answer


def is_unknown(answer: str) -> bool:
    a = answer.strip().lower()
    return not a or a.startswith(UNKNOWN) or a in {"none", "n/a", "not mentioned", "not given"}


@dataclass
class Reader:
    """One batched ``generate`` per call over all questions of the batch."""

    model: object
    tokenizer: object
    max_new_tokens: int = 24
    batch_size: int = 8
    max_facts: int = 20
    stats: dict = field(default_factory=lambda: {"calls": 0, "unknown": 0, "tokens_in": 0, "tokens_out": 0})

    def read(self, questions: list[str], facts: list[list[str]], final: bool = False,
             steps: list | None = None) -> list[str]:
        """Answer each question from its facts (and, if given, its chain's ``(sub-question,
        answer)`` pairs), one batched ``generate`` for all."""
        from hpengine.models._generate import batched_generate

        steps = steps if steps is not None else [None] * len(questions)
        prompts = [reading_prompt(q, f[: self.max_facts], final, st) for q, f, st in zip(questions, facts, steps)]
        res = batched_generate(self.model, self.tokenizer, prompts, max_new_tokens=self.max_new_tokens,
                               batch_size=self.batch_size)
        self.stats["calls"] += len(prompts)
        self.stats["tokens_in"] += res.tokens_in
        self.stats["tokens_out"] += res.tokens_out
        answers = [clean_answer(t) for t in res.texts]
        self.stats["unknown"] += sum(is_unknown(a) for a in answers)
        return answers
