"""Lookups derived from a saved index, built once per index and shared by every retriever:
entity ids by name, each passage's title entity, each entity's home passages, passage -> facts,
and the extracted (pre-synonym) incidence as CSR."""
from __future__ import annotations

import torch
from torch import Tensor

from hpengine.models import entity_key
from hpengine.sparse import csr_arrays


class IndexLookups:
    """Derived lookups of an :class:`~hpengine.graph.Index` (get them with ``index.lookups``).

    Attributes:
        key_to_entity: ``{entity_key(name): entity id}`` (the last id wins for equal keys).
        title_entity: int64 ``[P]``, the entity named exactly by each passage's title, ``-1`` for none.
        home_crow, home_col: CSR ``[V, P]`` of each entity's home passages (titled with its name).
        passage_crow, passage_facts: CSR ``[P, H]`` of each passage's facts, in fact-id order.
    """

    def __init__(self, index):
        self._index = index
        device = index.device
        self.key_to_entity = {entity_key(name): i for i, name in enumerate(index.entities)}
        self.title_entity = torch.tensor([self.key_to_entity.get(entity_key(p.title), -1) for p in index.passages],
                                         dtype=torch.int64, device=device)  # [P]
        titled = torch.nonzero(self.title_entity >= 0).squeeze(1)
        self.home_crow, self.home_col = csr_arrays(self.title_entity[titled], titled, index.num_entities)
        self.passage_crow, self.passage_facts = csr_arrays(
            index.fact_passage, torch.arange(index.num_facts, device=device), index.num_passages)
        self._extracted: dict = {}

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

    def entity_ids(self, names: list[str]) -> Tensor:
        """Entity id named exactly (up to :func:`~hpengine.models.entity_key`) by each string, ``-1``
        otherwise (also for empty strings).

        Shapes:
            ``len(names)`` strings -> int64 ``[len(names)]``.
        """
        ids = [self.key_to_entity.get(entity_key(n), -1) if n else -1 for n in names]
        return torch.tensor(ids, dtype=torch.int64, device=self._index.device)
