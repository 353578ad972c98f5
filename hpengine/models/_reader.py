"""Reader: answers a (sub-)question from facts with an instruction LLM, batched
(docs/methods/hyperprove.md#hop-answers, #final-answer)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

PROMPT_VERSION = "read-v1"

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


@dataclass
class Reader:
    """One batched ``generate`` per call over all questions of the batch."""

    model: object
    tokenizer: object
    max_new_tokens: int = 24
    batch_size: int = 8
    max_batch_tokens: int = 0  # padded prompt tokens per generate call at most (0: batch_size alone)
    prefix_cache: bool = False  # the prompts' shared token prefix read once per call
    max_facts: int = 20
    stats: dict = field(default_factory=lambda: {"calls": 0, "tokens_in": 0, "tokens_out": 0, "repeats": 0})

    def read(self, questions: list[str], facts: list[list[str]], final: bool = False,
             steps: list | None = None) -> list[str]:
        """Answer each question from its facts (and, if given, its chain's ``(sub-question,
        answer)`` pairs), one batched ``generate`` for all."""
        from hpengine.models._generate import batched_generate

        steps = steps if steps is not None else [None] * len(questions)
        prompts = [reading_prompt(q, f[: self.max_facts], final, st) for q, f, st in zip(questions, facts, steps)]
        res = batched_generate(self.model, self.tokenizer, prompts, max_new_tokens=self.max_new_tokens,
                               batch_size=self.batch_size, max_batch_tokens=self.max_batch_tokens,
                               prefix_cache=self.prefix_cache)
        self.stats["calls"] += len(prompts)
        self.stats["tokens_in"] += res.tokens_in
        self.stats["tokens_out"] += res.tokens_out
        self.stats["repeats"] += res.repeats
        return [clean_answer(t) for t in res.texts]
