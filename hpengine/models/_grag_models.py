"""Models GRAG-MH adds (docs/methods/grag.md): abstractive community summaries, a cross-encoder
reranker and the tree planner that grows reasoning paths. Each is batched; the summarizer is
cached on disk (JSONL, resumable) like the extractors."""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from hpengine.models._extract_llm import _read_cache
from hpengine.models._generate import batched_generate

__all__ = ["CrossEncoder", "Summarizer", "TreePlanner", "load_summarizer", "SUMMARY_PROMPT_VERSION"]

SUMMARY_PROMPT_VERSION = "community-summary-v1"
SUMMARY_CACHE_FILE = "grag_summaries.jsonl"
_SUMMARY_INSTRUCTIONS = ("Summarize what these facts say about the entities they share, in at most "
                         "three sentences. Keep names, dates and places.\n\nFacts:\n")


class Summarizer:
    """Abstractive summaries of fact groups with a Hugging Face model, batched and cached.

    Args:
        model, tokenizer: a seq2seq model (``model.config.is_encoder_decoder``, BART/T5) or a
            causal LM (prompted through its chat template by :func:`batched_generate`).
        cache_dir: folder of ``grag_summaries.jsonl`` (None: no cache).
        model_name: enters the cache key.
        batch_size, max_new_tokens, max_input_tokens: generation settings.
    """

    def __init__(self, model, tokenizer, cache_dir: str | None = None, model_name: str = "", batch_size: int = 8,
                 max_new_tokens: int = 96, max_input_tokens: int = 768):
        self.model, self.tokenizer = model, tokenizer
        self.is_seq2seq = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
        self.model_name = model_name or str(getattr(getattr(model, "config", None), "name_or_path", "")
                                            or type(model).__name__)
        self.cache_path = Path(cache_dir) / SUMMARY_CACHE_FILE if cache_dir else None
        self.batch_size, self.max_new_tokens, self.max_input_tokens = batch_size, max_new_tokens, max_input_tokens
        self.stats = {"generated": 0, "cached": 0, "tokens_in": 0, "tokens_out": 0, "repeats": 0}

    def _key(self, texts: Sequence[str]) -> str:
        payload = json.dumps([list(texts), self.model_name, SUMMARY_PROMPT_VERSION], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def _generate(self, prompts: list) -> list:
        if not self.is_seq2seq:
            res = batched_generate(self.model, self.tokenizer, prompts, max_new_tokens=self.max_new_tokens,
                                   batch_size=self.batch_size)
            self.stats["tokens_in"] += res.tokens_in
            self.stats["tokens_out"] += res.tokens_out
            self.stats["repeats"] += res.repeats
            return res.texts
        device = next(self.model.parameters()).device
        batch = self.tokenizer(prompts, return_tensors="pt", padding=True, truncation=True,
                               max_length=self.max_input_tokens).to(device)
        with torch.inference_mode():
            out = self.model.generate(**batch, max_new_tokens=self.max_new_tokens, do_sample=False, num_beams=1)
        self.stats["tokens_in"] += int(batch["attention_mask"].sum())
        self.stats["tokens_out"] += int((out != self.tokenizer.pad_token_id).sum())
        return [t.strip() for t in self.tokenizer.batch_decode(out, skip_special_tokens=True)]

    def summarize(self, groups: Sequence[Sequence[str]]) -> list:
        """One summary per group of fact texts, in order; cached groups are not generated again
        (each finished batch is appended and fsynced, so a killed build resumes)."""
        keys = [self._key(g) for g in groups]
        cache = _read_cache(self.cache_path) if self.cache_path is not None else {}
        todo = {k: g for k, g in zip(keys, groups) if k not in cache}
        self.stats["cached"] += len(keys) - sum(k in todo for k in keys)
        items = sorted(todo.items(), key=lambda kg: -sum(map(len, kg[1])))
        sink = None
        if self.cache_path is not None and items:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            sink = self.cache_path.open("a", encoding="utf-8")
        try:
            for start in range(0, len(items), self.batch_size):
                chunk = items[start:start + self.batch_size]
                prompts = [_SUMMARY_INSTRUCTIONS + "\n".join(f"- {t}" for t in g) for _, g in chunk]
                for (key, _), text in zip(chunk, self._generate(prompts)):
                    cache[key] = re.sub(r"\s+", " ", text).strip()
                    if sink is not None:
                        sink.write(json.dumps({"key": key, "raw": cache[key]}, ensure_ascii=False) + "\n")
                if sink is not None:
                    sink.flush()
                    os.fsync(sink.fileno())
                self.stats["generated"] += len(chunk)
        finally:
            if sink is not None:
                sink.close()
        return [cache[k] for k in keys]


def load_summarizer(name: str, *, device: str = "cpu", dtype: str = "float32", cache_dir: str | None = None,
                    batch_size: int = 8, max_new_tokens: int = 96) -> Summarizer:
    """A :class:`Summarizer` over the HF model ``name`` (a folder or hub id): seq2seq when its
    config is encoder-decoder, else causal."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    from hpengine.models._encoder import resolve_dtype, resolve_model_path

    path = resolve_model_path(name)
    config = AutoConfig.from_pretrained(path)
    cls = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = cls.from_pretrained(path, dtype=resolve_dtype(dtype, device, "grag.dtype")).to(device).eval()
    return Summarizer(model, tokenizer, cache_dir=cache_dir, model_name=name, batch_size=batch_size,
                      max_new_tokens=max_new_tokens)


class CrossEncoder:
    """(query, passage) relevance with ``AutoModelForSequenceClassification`` (bge-reranker style:
    one logit per pair; with several labels, the last one's logit), batched.

    Args:
        name: model folder or hub id; or pass ``model`` and ``tokenizer``.
        device, batch_size, max_length: inference settings.
    """

    def __init__(self, name: str = "", *, model=None, tokenizer=None, device: str = "cpu", batch_size: int = 32,
                 max_length: int = 512):
        if model is None:
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            from hpengine.models._encoder import resolve_model_path

            path = resolve_model_path(name)
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForSequenceClassification.from_pretrained(path).to(device).eval()
        self.name = name or str(getattr(model.config, "name_or_path", type(model).__name__))
        self.model, self.tokenizer = model, tokenizer
        self.batch_size, self.max_length = batch_size, max_length

    def score(self, queries: Sequence[str], passages: Sequence[str]) -> Tensor:
        """float32 ``[n]`` scores of the pairs ``(queries[i], passages[i])`` (on CPU)."""
        out = []
        device = next(self.model.parameters()).device
        for start in range(0, len(queries), self.batch_size):
            batch = self.tokenizer(list(queries[start:start + self.batch_size]),
                                   list(passages[start:start + self.batch_size]), padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="pt").to(device)
            with torch.inference_mode():
                logits = self.model(**batch).logits
            out.append(logits[:, -1].float().cpu())
        return torch.cat(out) if out else torch.zeros(0)


# ---------------------------------------------------------------------------------------------
# Tree decomposition
# ---------------------------------------------------------------------------------------------
PLANNER_PROMPT_VERSION = "grag-tree-v2"
#: one strategy hint per path: distinct prompts make distinct greedy paths
PATH_HINTS = (
    "Start with the entity the question names first.",
    "Start with the entity the question names last.",
    "Start with the most specific fact the question needs.",
    "Ask about the relation between the entities the question names.",
)
_PLAN_TASK = ("You answer a multi-hop question step by step. Given the question and the steps so far, "
              "either ask the next single-hop sub-question or, if the answers so far are enough to answer "
              "the question, reply 'SUFFICIENT'. ")
_PLAN_REPLY = "Reply with one line: 'Next: <sub-question>' or 'SUFFICIENT'."
_PLAN_BARE = _PLAN_TASK + _PLAN_REPLY
_PLAN = (_PLAN_TASK + "A sub-question asks for one fact, names its entities in full (with the answers so far "
         "in place of what they found) and keeps the question's details. " + _PLAN_REPLY
         + " Here are worked examples.")
#: worked examples (question, steps so far, reply): a bridge hop that uses the answer found, a
#: comparison whose steps suffice, and a first step. Small planners otherwise ask vague
#: sub-questions ("What is the name of the home?") that lose the question's details.
_PLAN_EXAMPLES = (
    ("Who is the mother of the director of film Polish-Russian War?",
     (("Who directed the film Polish-Russian War?", "Xawery Żuławski"),),
     "Next: Who is the mother of Xawery Żuławski?"),
    ("Which film came out first, Blind Shaft or The Mask Of Fu Manchu?",
     (("When did the film Blind Shaft come out?", "2003"),
      ("When did the film The Mask Of Fu Manchu come out?", "1932")),
     "SUFFICIENT"),
    ("In which country is the city where Alan Turing was born?", (), "Next: Where was Alan Turing born?"),
)


def _plan_state(question: str, history: Sequence) -> list:
    lines = [f"Question: {question}"]
    lines += [f"Step {i + 1}: {q} -> {a}" for i, (q, a) in enumerate(history)]
    return lines


def planner_prompt(question: str, history: Sequence, path: int, examples: bool = True) -> str:
    """The planner's prompt for path ``path`` after ``history`` ``[(sub-question, answer)]``, with
    the worked examples (``examples``) or the instruction alone.

    Example:
        >>> prompt = planner_prompt("Where was the director of Alpha born?", [("Who directed Alpha?", "Ilse")], 0)
        >>> for line in prompt.splitlines()[-4:]:
        ...     print(line)
        Now the question to answer. Start with the entity the question names first.
        Question: Where was the director of Alpha born?
        Step 1: Who directed Alpha? -> Ilse
        Reply:
    """
    hint = PATH_HINTS[path % len(PATH_HINTS)]
    if not examples:
        return "\n".join([_PLAN_BARE, hint, "", *_plan_state(question, history), "Reply:"])
    lines = [_PLAN, ""]
    for n, (q, h, reply) in enumerate(_PLAN_EXAMPLES, 1):
        lines += [f"Example {n}", *_plan_state(q, h), f"Reply: {reply}", ""]
    lines.append(f"Now the question to answer. {hint}")
    lines += _plan_state(question, history)
    lines.append("Reply:")
    return "\n".join(lines)


def parse_plan_step(text: str) -> str | None:
    """The next sub-question of a planner reply, or None when it says the path suffices
    (``SUFFICIENT``, or nothing usable).

    Example:
        >>> parse_plan_step("Next: Who directed Alpha?"), parse_plan_step("SUFFICIENT")
        ('Who directed Alpha?', None)
    """
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    if not line or re.match(r"^\W*sufficient", line, re.I):
        return None
    line = re.sub(r"^\W*(next|sub-?question)\s*:\s*", "", line, flags=re.I).strip()
    return line or None


class TreePlanner:
    """Grows the reasoning paths of GRAG-MH's tree decomposition: one batched ``generate`` per
    step over all paths of all questions.

    Args:
        model, tokenizer: a causal instruction LM (the reader's).
        max_new_tokens, batch_size, max_batch_tokens, prefix_cache: generation settings
            (:func:`batched_generate`).
        examples: the planner prompt carries worked examples (:func:`planner_prompt`).
        temperature, greedy_paths, seed: paths numbered ``greedy_paths`` and up sample their
            sub-questions at ``temperature`` (0: every path greedy), with the seed ``seed`` and
            their path number mixed into each prompt's seed; the first ``greedy_paths`` decode
            greedily.
    """

    def __init__(self, model, tokenizer, max_new_tokens: int = 48, batch_size: int = 8, max_batch_tokens: int = 0,
                 examples: bool = True, prefix_cache: bool = False, temperature: float = 0.0,
                 greedy_paths: int = 1, seed: int = 0):
        self.model, self.tokenizer, self.examples = model, tokenizer, examples
        self.max_new_tokens, self.batch_size, self.max_batch_tokens = max_new_tokens, batch_size, max_batch_tokens
        self.prefix_cache = prefix_cache
        self.temperature, self.greedy_paths, self.seed = temperature, greedy_paths, seed
        self.stats = {"calls": 0, "tokens_in": 0, "tokens_out": 0, "repeats": 0, "prefix_tokens": 0}

    def path_temperatures(self, paths: Sequence[int]) -> list:
        """The sampling temperature of each path number (0: greedy).

        Example:
            >>> TreePlanner(None, None, temperature=0.7, greedy_paths=1).path_temperatures([0, 1, 2])
            [0.0, 0.7, 0.7]
        """
        return [self.temperature if p >= self.greedy_paths else 0.0 for p in paths]

    def next_steps(self, questions: Sequence[str], histories: Sequence, paths: Sequence[int]) -> list:
        """Per path (its question, its ``[(sub-question, answer)]`` history, its path number), the
        next sub-question or None (sufficient)."""
        prompts = [planner_prompt(q, h, p, self.examples) for q, h, p in zip(questions, histories, paths)]
        if not prompts:
            return []
        res = batched_generate(self.model, self.tokenizer, prompts, max_new_tokens=self.max_new_tokens,
                               batch_size=self.batch_size, max_batch_tokens=self.max_batch_tokens,
                               prefix_cache=self.prefix_cache, temperature=self.path_temperatures(paths),
                               seed=[self.seed * 1_000_003 + p for p in paths])
        self.stats["calls"] += len(prompts)
        self.stats["tokens_in"] += res.tokens_in
        self.stats["tokens_out"] += res.tokens_out
        self.stats["repeats"] += res.repeats
        self.stats["prefix_tokens"] += res.prefix_tokens
        return [parse_plan_step(t) for t in res.texts]
