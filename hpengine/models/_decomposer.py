"""Question decomposition into dependent sub-queries with ``#k`` references
(docs/methods/hyperprove.md#decomposition-and-rewriting)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

PROMPT_VERSION = "decompose-v2"

_INSTRUCTION = (
    "You break a multi-hop question into the simple sub-questions needed to answer it, one per line, "
    "numbered. A later sub-question refers to the answer of an earlier one as #1, #2, ... "
    "Use at most {max_hops} sub-questions. Here are worked examples."
)
_EXAMPLES = [
    ("Who is the mother of the director of film Polish-Russian War?",
     ["Who directed the film Polish-Russian War?", "Who is the mother of #1?"]),
    ("Which film came out first, Blind Shaft or The Mask Of Fu Manchu?",
     ["When did the film Blind Shaft come out?", "When did the film The Mask Of Fu Manchu come out?"]),
    ("In which country is the city where Alan Turing was born?",
     ["Where was Alan Turing born?", "In which country is #1?"]),
    ("What is the capital of France?", ["What is the capital of France?"]),
]
_LINE = re.compile(r"^\s*(?:\d+\s*[.):-]|[-*])\s*(.+?)\s*$")
_REF = re.compile(r"#(\d+)")


def decomposition_prompt(question: str, max_hops: int) -> str:
    """The few-shot decomposition prompt for one question."""
    parts = [_INSTRUCTION.format(max_hops=max_hops), ""]
    for n, (q, subs) in enumerate(_EXAMPLES, 1):
        parts.append(f"Example {n}")
        parts.append(f"Question: {q}")
        parts.append("Sub-questions:")
        parts.extend(f"{i}. {s}" for i, s in enumerate(subs, 1))
        parts.append("")
    parts.append("Now decompose only the following question. Output only its numbered sub-questions.")
    parts.append(f"Question: {question}")
    parts.append("Sub-questions:")
    return "\n".join(parts)


def parse_plan(text: str, max_hops: int) -> list[str] | None:
    """Parse a numbered list of sub-questions; None when it is not a valid plan.

    Valid: 1..max_hops non-empty lines, each ``#k`` referring to an earlier sub-question.
    Lines after the first non-list line that follows the list are ignored (models ramble).
    """
    subs: list[str] = []
    for line in text.strip().splitlines():
        if line.strip().lower().startswith(("question:", "example")):
            if subs:
                break
            continue
        m = _LINE.match(line)
        if m:
            subs.append(m.group(1))
        elif subs and line.strip():
            break
    if not subs or len(subs) > max_hops:
        return None
    for i, s in enumerate(subs, 1):
        if any(int(k) < 1 or int(k) >= i for k in _REF.findall(s)):
            return None
    return subs


@dataclass
class Decomposer:
    """LLM decomposer: one batched ``generate`` for all questions; malformed plans fall back to
    the question itself (counted in ``stats['fallback']``)."""

    model: object
    tokenizer: object
    max_hops: int = 4
    max_new_tokens: int = 96
    batch_size: int = 8
    max_batch_tokens: int = 0  # padded prompt tokens per generate call at most (0: batch_size alone)
    prefix_cache: bool = False  # the prompts' shared token prefix read once per call
    stats: dict = field(default_factory=lambda: {"plans": 0, "fallback": 0, "tokens_in": 0, "tokens_out": 0,
                                                 "repeats": 0})

    def decompose(self, questions: list[str]) -> list[list[str]]:
        from hpengine.models._generate import batched_generate

        prompts = [decomposition_prompt(q, self.max_hops) for q in questions]
        res = batched_generate(self.model, self.tokenizer, prompts, max_new_tokens=self.max_new_tokens,
                               batch_size=self.batch_size, max_batch_tokens=self.max_batch_tokens,
                               prefix_cache=self.prefix_cache)
        self.stats["tokens_in"] += res.tokens_in
        self.stats["tokens_out"] += res.tokens_out
        self.stats["repeats"] += res.repeats
        plans = []
        for q, text in zip(questions, res.texts):
            plan = parse_plan(text, self.max_hops)
            self.stats["plans"] += 1
            if plan is None:
                self.stats["fallback"] += 1
                plan = [q]
            plans.append(plan)
        return plans
