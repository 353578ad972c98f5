"""Lookups derived from a saved index, built once per index and shared by every retriever:
entity ids by name, each passage's title entity, each entity's home passages, passage -> facts,
and the extracted (pre-synonym) incidence as CSR."""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from hpengine.graph._lexical import PassageWords, build_passage_words
from hpengine.graph._texts import PassageColumn
from hpengine.models import entity_key, title_name
from hpengine.sparse import csr_arrays


#: the 64-bit key hash of the entity lookup (Python's own: the table lives in one process only)
_hash = hash


def _titles(passages):
    """The passages' titles (a loaded index's column of them, without building the passages)."""
    return passages.titles if isinstance(passages, PassageColumn) else [p.title for p in passages]


class IndexLookups:
    """Derived lookups of an :class:`~hpengine.graph.Index` (get them with ``index.lookups``).

    Attributes:
        title_entity: int64 ``[P]``, the entity named exactly by each passage's title, ``-1`` for none.
        home_crow, home_col: CSR ``[V, P]`` of each entity's home passages (titled with its name).
        passage_crow, passage_facts: CSR ``[P, H]`` of each passage's facts, in fact-id order.
    """

    def __init__(self, index):
        self._index = index
        device = index.device
        # entity ids by name key: the keys' hashes sorted (16 bytes per entity; a dict of the keys
        # took 0.7 GB at a million passages), every hit checked against the entity's own key
        hashes = np.fromiter((_hash(entity_key(name)) for name in index.entities), dtype=np.int64,
                             count=index.num_entities)
        self._key_order = np.argsort(hashes, kind="stable")  # equal hashes keep id order
        self._key_hash = hashes[self._key_order]
        self.title_entity = torch.from_numpy(self._ids_of_keys([entity_key(t) for t in _titles(index.passages)]))
        self.title_entity = self.title_entity.to(device)  # [P]
        titled = torch.nonzero(self.title_entity >= 0).squeeze(1)
        self.home_crow, self.home_col = csr_arrays(self.title_entity[titled], titled, index.num_entities)
        self.passage_crow, self.passage_facts = csr_arrays(
            index.fact_passage, torch.arange(index.num_facts, device=device), index.num_passages)
        self._extracted: dict = {}
        self._title_names: tuple | None = None
        self._words: PassageWords | None = None

    def _ids_of_keys(self, keys: list) -> np.ndarray:
        """int64 ``[n]``: :meth:`entity_id` of each key, the hash search done for all at once."""
        hashes = np.fromiter(map(_hash, keys), dtype=np.int64, count=len(keys))
        lo = np.searchsorted(self._key_hash, hashes, "left")
        hi = np.searchsorted(self._key_hash, hashes, "right")
        ids = np.full(len(keys), -1, dtype=np.int64)
        for i in np.nonzero(hi > lo)[0].tolist():  # only keys whose hash some entity has
            ids[i] = self._checked(keys[i], int(lo[i]), int(hi[i]))
        return ids

    def _checked(self, key: str, lo: int, hi: int) -> int:
        for e in self._key_order[lo:hi][::-1].tolist():  # usually one candidate; the last id wins
            if entity_key(self._index.entities[e]) == key:
                return e
        return -1

    def entity_id(self, key: str) -> int:
        """The entity whose :func:`~hpengine.models.entity_key` is ``key`` (the last id for equal
        keys), ``-1`` for none."""
        return int(self._ids_of_keys([key])[0])

    def extracted_incidence(self, skip_own_title: bool = False) -> tuple[Tensor, Tensor]:
        """CSR ``[H, V]`` (``crow``, ``col``) of the extracted (fact, entity) pairs, before synonyms.

        Args:
            skip_own_title: drop each fact's own passage title entity (the fact is about it; a
                bridge is what the fact points to).
        """
        if skip_own_title not in self._extracted:
            idx = self._index
            raw = idx.fact_entity_raw
            if skip_own_title and raw.numel():
                own = self.title_entity[idx.fact_passage[raw[0]]] == raw[1]
                raw = raw[:, ~own]
            self._extracted[skip_own_title] = csr_arrays(raw[0], raw[1], idx.num_facts)
        return self._extracted[skip_own_title]

    def title_names(self) -> tuple[Tensor, int]:
        """Each passage's title name as a key hash, for matching names in a text
        (docs/methods/fusion.md#passages-the-question-names).

        Returns:
            ``(keys, max_words)``: int64 ``[P]``, :meth:`name_hashes` of
            ``entity_key(title_name(title))`` (``-1`` for a title with no name; a hash is never
            ``-1``), and the most words any title name has (0 for none).
        """
        if self._title_names is None:
            names = [entity_key(title_name(t)) for t in _titles(self._index.passages)]
            keys = self.name_hashes(names)
            keys[[i for i, n in enumerate(names) if not n]] = -1
            max_words = max((len(n.split()) for n in names), default=0)
            self._title_names = (keys.to(self._index.device), max_words)
        return self._title_names

    def words(self) -> PassageWords:
        """The passages' words and their idf (:class:`~hpengine.graph.PassageWords`, on the index's
        device), built from their texts on first use: only the learned method reads them."""
        if self._words is None:
            passages = self._index.passages
            texts = passages.texts if isinstance(passages, PassageColumn) else [p.text for p in passages]
            self._words = build_passage_words(_titles(passages), texts).to(self._index.device)
        return self._words

    @staticmethod
    def name_hashes(keys: list[str]) -> Tensor:
        """int64 ``[len(keys)]`` hashes of name keys, the ones :meth:`title_names` uses (Python's
        string hash: valid within one process, never ``-1``)."""
        return torch.from_numpy(np.fromiter(map(_hash, keys), dtype=np.int64, count=len(keys)))

    def entity_ids(self, names: list[str]) -> Tensor:
        """Entity id named exactly (up to :func:`~hpengine.models.entity_key`) by each string, ``-1``
        otherwise (also for empty strings).

        Shapes:
            ``len(names)`` strings -> int64 ``[len(names)]``.
        """
        ids = self._ids_of_keys([entity_key(n) for n in names])
        empty = [i for i, n in enumerate(names) if not n]
        if empty:
            ids[empty] = -1
        return torch.from_numpy(ids).to(self._index.device)
