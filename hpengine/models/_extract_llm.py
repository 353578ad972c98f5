"""LLM atomic-fact extractor (HyperProve's method; docs/extraction.md#llm-extractor-llmextractor-kind-llm):
batched generation of JSON facts.

Per passage the model returns ``{"entities": [...], "facts": [{"fact": ..., "entities": [...]}]}``.
The raw output is parsed by :func:`parse_extraction` (first JSON object, repaired when broken,
validated, or rejected). Raw outputs are cached on disk as JSONL, one line per passage, keyed by
``sha256(title, text, model name, PROMPT_VERSION)`` and flushed after every batch, so an
interrupted run resumes where it stopped.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from hpengine.config import ExtractorConfig
from hpengine.models._entities import ExtractedFact, merge_entities
from hpengine.models._extract_fast import FastExtractor, make_standalone
from hpengine.models._generate import batched_generate, format_prompt

__all__ = ["LLMExtractor", "ParsedExtraction", "parse_extraction", "PROMPT_VERSION", "build_prompt"]

PROMPT_VERSION = "atomic-facts-v1"
CACHE_FILE = "llm_extract.jsonl"

SYSTEM_PROMPT = "You extract atomic facts from passages and answer with JSON only."

_INSTRUCTIONS = """Split the passage into atomic facts and list its entities.
Return one JSON object: {"entities": [...], "facts": [{"fact": "...", "entities": [...]}]}
Rules:
- "entities": named entities, dates, places, works, organisations and salient concepts of the passage.
- Each "fact" is one short standalone declarative sentence: replace pronouns with the names they refer to, and keep qualifiers of time, place, cause and source.
- Each fact lists the entities it mentions, written as in "entities".
- Cover every piece of information in the passage. Output JSON only.

Example:
Title: Vellmora Bridge
Passage: Vellmora Bridge is a stone bridge over the River Ost. It was designed by Ana Kell and opened in 1871 after a flood destroyed the old ferry.
JSON: {"entities": ["Vellmora Bridge", "River Ost", "Ana Kell", "1871"], "facts": [{"fact": "Vellmora Bridge is a stone bridge over the River Ost.", "entities": ["Vellmora Bridge", "River Ost"]}, {"fact": "Vellmora Bridge was designed by Ana Kell.", "entities": ["Vellmora Bridge", "Ana Kell"]}, {"fact": "Vellmora Bridge opened in 1871 after a flood destroyed the old ferry.", "entities": ["Vellmora Bridge", "1871"]}]}

"""

_FENCE = re.compile(r"```(?:json|JSON)?")
_SPACES = re.compile(r"\s+")


def build_prompt(title: str, text: str) -> str:
    """The user prompt of one passage (version :data:`PROMPT_VERSION`)."""
    return f"{_INSTRUCTIONS.rstrip()}\n\nTitle: {title}\nPassage: {text}\nJSON:"


# ---------------------------------------------------------------------------------------------
# Parsing and repair
# ---------------------------------------------------------------------------------------------
@dataclass
class ParsedExtraction:
    """Result of :func:`parse_extraction` for one passage.

    Attributes:
        facts: validated facts (empty when rejected).
        entities: passage entity list (model entities, plus fact entities and the title).
        status: ``"ok"`` (valid JSON), ``"repaired"`` (valid after repair or type fixes) or
            ``"rejected"`` (no usable fact).
        reason: why it was repaired or rejected (``""`` when ok).
    """

    facts: list[ExtractedFact] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    status: str = "ok"
    reason: str = ""


def _normalise_quotes(text: str) -> str:
    """Rewrite single-quoted JSON strings as double-quoted ones and drop trailing commas.

    Apostrophes inside double-quoted strings are untouched; a double quote inside a
    single-quoted string is escaped.
    """
    out: list[str] = []
    quote = None  # the quote char of the string we are in, or None
    escaped = False
    for ch in text:
        if quote is not None:
            if escaped:
                escaped = False
                out.append(ch)
            elif ch == "\\":
                escaped = True
                out.append(ch)
            elif ch == quote:
                quote = None
                out.append('"')
            elif ch == '"':  # only reachable inside a single-quoted string
                out.append('\\"')
            else:
                out.append(ch)
        elif ch in "\"'":
            quote = ch
            out.append('"')
        elif ch in "}]":
            while out and out[-1].isspace():
                out.pop()
            if out and out[-1] == ",":
                out.pop()  # trailing comma
            out.append(ch)
        else:
            out.append(ch)
    return "".join(out)


def _scan(text: str) -> tuple[Optional[int], list[tuple[int, str]]]:
    """Scan JSON text from its first ``{``.

    Returns:
        ``(end, closes)``: the index of the ``}`` that closes the first object (None when the
        text is truncated), and for every ``}``/``]`` at depth >= 1 its index with the closers
        still needed after it (used to cut truncated output back to its last complete value).
    """
    stack: list[str] = []
    closes: list[tuple[int, str]] = []
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack[-1] != ch:
                return None, closes  # mismatched bracket: treat the rest as garbage
            stack.pop()
            if not stack:
                return i, closes
            closes.append((i, "".join(reversed(stack))))
    return None, closes


def _loads(text: str):
    try:
        return json.loads(text, strict=False)
    except (json.JSONDecodeError, RecursionError):
        return None


def _decode(raw: str) -> tuple[Optional[object], str]:
    """Find and decode the first JSON object of ``raw``.

    Returns:
        ``(value, how)``: ``how`` is ``"ok"``, ``"repaired: <what>"`` or ``"rejected: <why>"``.
    """
    text = _FENCE.sub("", raw)
    start = text.find("{")
    if start < 0:
        return None, "rejected: no JSON object"
    text = text[start:]
    end, _ = _scan(text)
    if end is not None:
        value = _loads(text[:end + 1])
        if value is not None:
            return value, "ok"
    fixed = _normalise_quotes(text)
    end, closes = _scan(fixed)
    if end is not None:
        value = _loads(fixed[:end + 1])
        if value is not None:
            return value, "repaired: quotes or trailing commas"
    for index, closers in reversed(closes):  # truncated: keep the longest complete prefix
        value = _loads(fixed[:index + 1] + closers)
        if value is not None:
            return value, "repaired: truncated output closed"
    return None, "rejected: unparseable JSON"


def _as_names(value, notes: list[str]) -> list[str]:
    """A list of entity names from a model value (strings kept, numbers converted)."""
    if value is None:
        return []
    if isinstance(value, str):
        notes.append("entities given as a string")
        return [value]
    if not isinstance(value, list):
        notes.append(f"entities of type {type(value).__name__}")
        return []
    names = []
    for item in value:
        if isinstance(item, str):
            names.append(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            notes.append("number entity converted to a string")
            names.append(str(item))
        else:
            notes.append(f"entity of type {type(item).__name__} dropped")
    return names


def _as_fact(item, notes: list[str]) -> Optional[tuple[str, list[str]]]:
    """``(text, entity names)`` of one fact item, or None when unusable."""
    if isinstance(item, str):
        notes.append("fact given as a string")
        item = {"fact": item}
    if not isinstance(item, dict):
        notes.append(f"fact of type {type(item).__name__} dropped")
        return None
    text = item.get("fact", item.get("text"))
    if not isinstance(text, str):
        notes.append("fact without a string 'fact' dropped")
        return None
    text = _SPACES.sub(" ", text).strip()
    if not text:
        return None  # empty facts are dropped without counting as a repair
    return text, _as_names(item.get("entities"), notes)


def _mentioned(names: list[str], text: str) -> list[str]:
    """Names (of two or more characters) that occur in ``text`` as whole words, ignoring case.

    An occurrence inside the occurrence of a longer name does not count ("Coney Island" inside
    "Coney Island Baby").
    """
    covered: list[tuple[int, int]] = []
    found = []
    for name in sorted((n for n in names if len(n) > 1), key=len, reverse=True):
        spans = [m.span() for m in re.finditer(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE)]
        free = [(a, b) for a, b in spans if not any(c <= a and b <= d for c, d in covered)]
        if free:
            found.append(name)
        covered.extend(spans)
    return found


def parse_extraction(raw: str, title: str, standalone: bool = True) -> ParsedExtraction:
    """Parse, repair and validate one raw LLM output.

    Steps: strip code fences; take the first JSON object (``{`` ... its matching ``}``); if it
    does not decode, repair single quotes and trailing commas, and close truncated output after
    its last complete value (so complete facts are kept and a half-written one is dropped).
    Validation: ``facts`` must be a list; a fact is an object with a string ``fact`` (a plain
    string is accepted as a fact without entities); entity names must be strings (numbers are
    converted); facts with empty text are dropped. Each fact's entities are its own, plus passage
    entities whose name occurs in its text (whole words, any case), plus the title; fact
    entities missing from the passage list are added to it. Names are normalised and
    deduplicated by ``entity_key``. With ``standalone``, each fact text goes through the fast
    extractor's ``make_standalone`` (a leading pronoun becomes the title, a fact that does not name
    the title gets a ``"<title>: "`` prefix), a safety net for small models that leave pronouns.

    Args:
        raw: the generated text.
        title: the passage title (added to every fact's entities).
        standalone: apply ``make_standalone`` to fact texts (default True).

    Returns:
        :class:`ParsedExtraction`; ``status == "rejected"`` when no fact survives.

    Example:
        >>> parse_extraction('{"entities": ["Oslo"], "facts": [{"fact": "Ann lives in Oslo.", '
        ...                  '"entities": ["Oslo"],}]}', "Ann").status
        'repaired'
    """
    value, how = _decode(raw)
    if how.startswith("rejected"):
        return ParsedExtraction(status="rejected", reason=how[len("rejected: "):])
    notes = [how[len("repaired: "):]] if how.startswith("repaired") else []
    if not isinstance(value, dict) or not isinstance(value.get("facts"), list):
        return ParsedExtraction(status="rejected", reason="no 'facts' list in the JSON object")
    passage_names = _as_names(value.get("entities"), notes)
    items = [f for f in (_as_fact(item, notes) for item in value["facts"]) if f is not None]
    if not items:
        return ParsedExtraction(status="rejected", reason="no fact with text")
    passage_entities = merge_entities(passage_names + [n for _, names in items for n in names],
                                      first=title)
    # mentions are looked up in the text as generated, before the title is put into it
    facts = [ExtractedFact(text=make_standalone(text, title) if standalone else text,
                           entities=merge_entities(names + _mentioned(passage_entities, text), first=title))
             for text, names in items]
    status = "repaired" if notes else "ok"
    return ParsedExtraction(facts=facts, entities=passage_entities, status=status, reason="; ".join(notes))


# ---------------------------------------------------------------------------------------------
# Cache
# ---------------------------------------------------------------------------------------------
def cache_key(title: str, text: str, model_name: str) -> str:
    """sha256 hex of (title, text, model name, PROMPT_VERSION)."""
    payload = json.dumps([title, text, model_name, PROMPT_VERSION], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _read_cache(path: Path) -> dict[str, str]:
    """Read ``key -> raw`` from the JSONL cache; a truncated last line is cut off the file.

    A corrupt line elsewhere is skipped with a warning (its passage is generated again).
    """
    if not path.exists():
        return {}
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):  # interrupted mid-write: drop the partial line
        cut = data.rfind(b"\n") + 1
        with path.open("r+b") as f:
            f.truncate(cut)
        data = data[:cut]
    cache: dict[str, str] = {}
    for line_no, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            cache[record["key"]] = record["raw"]
        except (json.JSONDecodeError, KeyError, TypeError):
            warnings.warn(f"{path}:{line_no}: corrupt extraction cache line skipped; that passage "
                          f"will be generated again (got {line[:60]!r})", stacklevel=3)
    return cache


# ---------------------------------------------------------------------------------------------
# Extractor
# ---------------------------------------------------------------------------------------------
def _load_model(cfg: ExtractorConfig):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not cfg.llm_model:
        raise ValueError("extractor.llm_model must name a local folder or hub model for the LLM "
                         "extractor when no model is passed (got '')")
    from hpengine.models._encoder import resolve_dtype

    dtype = resolve_dtype(cfg.llm_dtype, cfg.device, "extractor.llm_dtype")  # checked before the model loads
    tokenizer = AutoTokenizer.from_pretrained(cfg.llm_model)
    model = AutoModelForCausalLM.from_pretrained(cfg.llm_model, dtype=dtype)
    return model.to(cfg.device).eval(), tokenizer


class LLMExtractor:
    """Atomic facts from a Hugging Face causal LM, with on-disk cache and per-passage rejection.

    Args:
        cfg: extractor settings; ``cache_dir`` is required. Uses ``llm_model`` (when ``model`` is
            None), ``llm_dtype``, ``llm_batch_size``, ``llm_max_new_tokens``,
            ``llm_max_input_tokens`` (the passage text is cut to fit), ``llm_make_standalone``,
            ``on_reject`` and ``device``; the fast-extractor fields when ``on_reject == "fast"``.
        model: an already loaded causal LM (default None: load ``cfg.llm_model``).
        tokenizer: its tokenizer (required when ``model`` is given).

    Attributes:
        stats: counts accumulated over :meth:`extract` calls: ``generated`` and ``cached``
            (passages), ``repaired`` and ``rejected`` (passages), ``tokens_in``, ``tokens_out``.
        cache_path: the JSONL cache file, ``<cache_dir>/llm_extract.jsonl``.
        model_name: the model name that enters the cache key: ``cfg.llm_model`` when set (also
            when a loaded model is passed), else ``model.config.name_or_path``, else the class name.
    """

    def __init__(self, cfg: ExtractorConfig, model=None, tokenizer=None):
        if not isinstance(cfg, ExtractorConfig):
            raise TypeError(f"cfg must be an ExtractorConfig (got {type(cfg).__name__})")
        if not cfg.cache_dir:
            raise ValueError("extractor.cache_dir must be set for the LLM extractor (the index "
                             "builder sets it to <out>.extract_cache) (got '')")
        if (model is None) != (tokenizer is None):
            raise ValueError("pass both model and tokenizer, or neither (got "
                             f"model={type(model).__name__}, tokenizer={type(tokenizer).__name__})")
        self.cfg = cfg
        if model is None:
            model, tokenizer = _load_model(cfg)
        self.model, self.tokenizer = model, tokenizer
        config_name = getattr(getattr(model, "config", None), "name_or_path", "")
        self.model_name = cfg.llm_model or str(config_name or type(model).__name__)
        self.cache_path = Path(cfg.cache_dir) / CACHE_FILE
        self.stats = {"generated": 0, "cached": 0, "repaired": 0, "rejected": 0,
                      "tokens_in": 0, "tokens_out": 0}
        self._fast = None
        self._text_budget: Optional[int] = None

    def _fit_text(self, text: str) -> str:
        """Cut the passage text so that the templated prompt fits ``llm_max_input_tokens``."""
        if self._text_budget is None:
            overhead, _ = format_prompt(self.tokenizer, build_prompt("", ""), SYSTEM_PROMPT)
            used = len(self.tokenizer(overhead, add_special_tokens=False)["input_ids"])
            self._text_budget = self.cfg.llm_max_input_tokens - used - 32  # room for the title
            if self._text_budget < 16:
                raise ValueError(f"extractor.llm_max_input_tokens is too small for the extraction "
                                 f"prompt of {used} tokens (got {self.cfg.llm_max_input_tokens})")
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) <= self._text_budget:
            return text
        return self.tokenizer.decode(ids[:self._text_budget], skip_special_tokens=True)

    def _generate_missing(self, todo: list[tuple[str, object]], cache: dict[str, str],
                          progress: bool) -> None:
        """Generate raw outputs for ``(key, passage)`` pairs, appending each batch to the cache."""
        todo = sorted(todo, key=lambda kp: -len(kp[1].text))  # similar lengths share a batch
        size = self.cfg.llm_batch_size
        batches = range(0, len(todo), size)
        if progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, desc="llm extract", unit="batch")
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        with self.cache_path.open("a", encoding="utf-8") as f:
            for start in batches:
                chunk = todo[start:start + size]
                prompts = [build_prompt(p.title, self._fit_text(p.text)) for _, p in chunk]
                result = batched_generate(self.model, self.tokenizer, prompts,
                                          max_new_tokens=self.cfg.llm_max_new_tokens,
                                          batch_size=size, system=SYSTEM_PROMPT)
                for (key, passage), raw in zip(chunk, result.texts):
                    cache[key] = raw
                    f.write(json.dumps({"key": key, "title": passage.title, "raw": raw},
                                       ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())  # an interrupted run keeps every finished batch
                self.stats["generated"] += len(chunk)
                self.stats["tokens_in"] += result.tokens_in
                self.stats["tokens_out"] += result.tokens_out

    def _fallback(self, passages: list) -> list[list[ExtractedFact]]:
        if self.cfg.on_reject == "skip" or not passages:
            return [[] for _ in passages]
        if self._fast is None:
            self._fast = FastExtractor(self.cfg)
        return self._fast.extract(passages)

    def extract(self, passages: Sequence, progress: bool = False) -> list[list[ExtractedFact]]:
        """Extract atomic facts, generating only passages missing from the cache.

        Args:
            passages: objects with ``title`` and ``text`` string attributes (``Passage``).
            progress: show a tqdm progress bar over generation batches (default False).

        Returns:
            One list of :class:`ExtractedFact` per passage, in input order. A rejected passage
            gets the fast extractor's facts (``on_reject="fast"``) or ``[]`` (``"skip"``).
        """
        for index, passage in enumerate(passages):
            if not isinstance(getattr(passage, "text", None), str) or not isinstance(
                    getattr(passage, "title", None), str):
                raise TypeError(f"passages[{index}] must have str fields 'title' and 'text' "
                                f"(got {type(passage).__name__})")
        keys = [cache_key(p.title, p.text, self.model_name) for p in passages]
        cache = _read_cache(self.cache_path)
        todo = {}
        for key, passage in zip(keys, passages):
            if key not in cache and key not in todo:
                todo[key] = passage
        self.stats["cached"] += sum(key in cache for key in keys)
        self._generate_missing(list(todo.items()), cache, progress)
        out: list[list[ExtractedFact]] = []
        rejected: list[int] = []
        for i, (key, passage) in enumerate(zip(keys, passages)):
            parsed = parse_extraction(cache[key], passage.title.strip(), self.cfg.llm_make_standalone)
            if parsed.status != "ok":
                self.stats[parsed.status] += 1
            if parsed.status == "rejected":
                rejected.append(i)
            out.append(parsed.facts)
        for i, facts in zip(rejected, self._fallback([passages[i] for i in rejected])):
            out[i] = facts
        return out
