"""The saved index: hypergraph + texts + embeddings, written atomically, loaded without pickle.

On-disk layout (folder)::

    index.json          format version, sizes, encoder name, build config, build report
    texts.json          passages [{title, text}], facts [str], entities [str]
    tensors.safetensors fact_passage [H], fact_entity_raw [2, nnz_raw] (before synonyms),
                        synonyms [2, n] (symmetric entity pairs), fact_emb [H, D],
                        entity_emb [V, D], passage_emb [P, D] (optional)

The expanded incidence ``A_i+ = A_i ∪ Syn(A_i)`` is derived from ``fact_entity_raw`` and
``synonyms`` on load (O(nnz)), so incremental adds can re-derive it exactly.

Atomicity: a save writes a sibling temporary folder, then swaps it in with two renames
(``old -> .bak``, ``tmp -> old``) and deletes the backup. An interruption before the swap
leaves the previous index untouched; one between the two renames leaves ``DIR.bak`` complete,
and :meth:`Index.load` recovers from it.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from hpengine.graph._corpus import Passage
from hpengine.graph._hypergraph import HyperGraph
from hpengine.graph._synonyms import expand_with_synonyms

FORMAT_VERSION = 1
_META, _TEXTS, _TENSORS = "index.json", "texts.json", "tensors.safetensors"


class IndexFormatError(ValueError):
    """A saved index is missing, corrupt, or of another format version or encoder."""


@dataclass
class Index:
    """Everything retrieval needs, on one device.

    Attributes:
        passages: P passages.
        facts: H fact texts.
        entities: V entity display names.
        fact_passage: int64 ``[H]`` (sigma).
        fact_entity_raw: int64 ``[2, nnz_raw]`` extracted (fact, entity) pairs, before synonyms.
        synonyms: int64 ``[2, n]`` symmetric synonym entity pairs (cos >= eta).
        fact_emb, entity_emb: float ``[H, D]``, ``[V, D]`` L2-normalised embeddings.
        passage_emb: float ``[P, D]`` or None.
        meta: encoder name, build config, build report.
    """

    passages: list
    facts: list
    entities: list
    fact_passage: Tensor
    fact_entity_raw: Tensor
    synonyms: Tensor
    fact_emb: Tensor
    entity_emb: Tensor
    passage_emb: Tensor | None = None
    meta: dict = field(default_factory=dict)
    _graph: HyperGraph | None = field(default=None, repr=False)

    # ----------------------------------------------------------------- views
    @property
    def num_facts(self) -> int:
        return len(self.facts)

    @property
    def num_entities(self) -> int:
        return len(self.entities)

    @property
    def num_passages(self) -> int:
        return len(self.passages)

    @property
    def device(self) -> torch.device:
        return self.fact_passage.device

    @property
    def graph(self) -> HyperGraph:
        """The hypergraph over the synonym-expanded incidence (built once, cached)."""
        if self._graph is None:
            expanded = expand_with_synonyms(self.fact_entity_raw, self.synonyms, self.num_facts, self.num_entities)
            self._graph = HyperGraph.from_incidence(expanded, self.fact_passage, self.num_entities, self.num_passages)
        return self._graph

    def to(self, device) -> "Index":
        """A copy with all tensors on ``device``."""
        device = torch.device(device)
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Index(self.passages, self.facts, self.entities, move(self.fact_passage), move(self.fact_entity_raw),
                     move(self.synonyms), move(self.fact_emb), move(self.entity_emb), move(self.passage_emb),
                     dict(self.meta), None if self._graph is None else self._graph.to(device))

    def summary(self) -> dict:
        """Counts for reports: passages, facts, entities, synonym pairs, nnz."""
        return {
            "passages": self.num_passages,
            "facts": self.num_facts,
            "entities": self.num_entities,
            "synonym_pairs": int(self.synonyms.shape[1]) // 2,
            "nnz_raw": int(self.fact_entity_raw.shape[1]),
            "nnz": self.graph.nnz,
        }

    # ------------------------------------------------------------------- I/O
    def save(self, path: str | os.PathLike) -> Path:
        """Write the index atomically to folder ``path`` (see module docstring)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
        tmp.mkdir()
        try:
            tensors = {
                "fact_passage": self.fact_passage, "fact_entity_raw": self.fact_entity_raw,
                "synonyms": self.synonyms, "fact_emb": self.fact_emb, "entity_emb": self.entity_emb,
            }
            if self.passage_emb is not None:
                tensors["passage_emb"] = self.passage_emb
            save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp / _TENSORS))
            texts = {"passages": [{"title": p.title, "text": p.text} for p in self.passages],
                     "facts": self.facts, "entities": self.entities}
            _write_json(tmp / _TEXTS, texts)
            meta = dict(self.meta)
            meta.update(format_version=FORMAT_VERSION, num_facts=self.num_facts, num_entities=self.num_entities,
                        num_passages=self.num_passages, embedding_dim=int(self.fact_emb.shape[1]))
            _write_json(tmp / _META, meta)  # written last: its presence marks a complete folder
            _swap_in(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, *, device="cpu", expected_encoder: str | None = None) -> "Index":
        """Load a saved index (no pickle), checking format version, shapes and encoder.

        Args:
            path: index folder.
            device: where tensors go.
            expected_encoder: when given, the index must have been built with this encoder name.

        Raises:
            IndexFormatError: missing files, other format version, inconsistent shapes, or
                another encoder than ``expected_encoder``.
        """
        path = Path(path)
        backup = path.with_name(path.name + ".bak")
        if not (path / _META).exists() and (backup / _META).exists():
            os.replace(backup, path)  # a save was interrupted between its two renames
        if not (path / _META).exists():
            raise IndexFormatError(f"{path} is not an hpengine index (no {_META})")
        meta = _read_json(path / _META)
        version = meta.get("format_version")
        if version != FORMAT_VERSION:
            raise IndexFormatError(f"{path}: index format version {version} is not supported "
                                   f"(expected {FORMAT_VERSION}); rebuild the index with this hpengine")
        if expected_encoder is not None and meta.get("encoder") != expected_encoder:
            raise IndexFormatError(f"{path}: index was built with encoder {meta.get('encoder')!r} but "
                                   f"{expected_encoder!r} is configured; rebuild the index or configure that encoder")
        texts = _read_json(path / _TEXTS)
        try:
            tensors = load_file(str(path / _TENSORS), device=str(torch.device(device)))
        except Exception as exc:  # safetensors raises its own error types
            raise IndexFormatError(f"{path / _TENSORS}: cannot read tensors ({exc})") from exc
        index = cls(
            passages=[Passage(p["title"], p["text"]) for p in texts["passages"]],
            facts=texts["facts"], entities=texts["entities"],
            fact_passage=_need(tensors, "fact_passage", path), fact_entity_raw=_need(tensors, "fact_entity_raw", path),
            synonyms=_need(tensors, "synonyms", path), fact_emb=_need(tensors, "fact_emb", path),
            entity_emb=_need(tensors, "entity_emb", path), passage_emb=tensors.get("passage_emb"),
            meta={k: v for k, v in meta.items() if k != "format_version"},
        )
        index.check(path)
        return index

    def check(self, where="index") -> None:
        """Shape consistency of texts and tensors; raises :class:`IndexFormatError`."""
        h, v, p = self.num_facts, self.num_entities, self.num_passages
        expect = {"fact_passage": (h,), "fact_emb": (h, None), "entity_emb": (v, None)}
        if self.passage_emb is not None:
            expect["passage_emb"] = (p, None)
        for name, shape in expect.items():
            t = getattr(self, name)
            if t.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, t.shape)):
                raise IndexFormatError(f"{where}: tensor {name} has shape {tuple(t.shape)}, expected "
                                       f"{tuple('D' if s is None else s for s in shape)}")
        for name in ("fact_entity_raw", "synonyms"):
            t = getattr(self, name)
            if t.dim() != 2 or t.shape[0] != 2:
                raise IndexFormatError(f"{where}: tensor {name} must be [2, n] (got {tuple(t.shape)})")
        if h and (int(self.fact_passage.max()) >= p or int(self.fact_passage.min()) < 0):
            raise IndexFormatError(f"{where}: fact_passage refers to passages outside [0, {p})")
        for name, t in (("fact_entity_raw", self.fact_entity_raw), ("synonyms", self.synonyms)):
            if t.numel() and (int(t[1].max()) >= v or int(t[1].min()) < 0):
                raise IndexFormatError(f"{where}: {name} refers to entities outside [0, {v})")


def _need(tensors: dict, name: str, path: Path) -> Tensor:
    if name not in tensors:
        raise IndexFormatError(f"{path / _TENSORS}: missing tensor {name!r}")
    return tensors[name]


def _write_json(path: Path, obj) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())


def _read_json(path: Path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError as exc:
        raise IndexFormatError(f"{path} is missing") from exc
    except json.JSONDecodeError as exc:
        raise IndexFormatError(f"{path}: invalid JSON at line {exc.lineno} ({exc.msg})") from exc


def _swap_in(tmp: Path, path: Path) -> None:
    backup = path.with_name(path.name + ".bak")
    if backup.exists():
        shutil.rmtree(backup)
    if path.exists():
        if not path.is_dir() or (any(path.iterdir()) and not (path / _META).exists()):
            raise FileExistsError(f"{path} exists and is not an hpengine index; refusing to replace it")
        os.replace(path, backup)
    os.replace(tmp, path)
    shutil.rmtree(backup, ignore_errors=True)
