"""The saved index: hypergraph + texts + embeddings, written atomically, loaded without pickle.

Files of one generation (the folder layout, the writer lock and the commit are
:mod:`hpengine.graph._store`'s)::

    index.json          (the manifest) format, generation, sizes, encoder name, build config and report
    texts.json          passages [{title, text}], facts [str], entities [str]
    tensors.safetensors fact_passage [H], fact_entity_raw [2, nnz_raw] (before synonyms),
                        synonyms [2, n] (symmetric entity pairs), fact_emb [H, D],
                        entity_emb [V, D], passage_emb [P, D] (optional)

The expanded incidence ``A_i+ = A_i ∪ Syn(A_i)`` is derived from ``fact_entity_raw`` and
``synonyms`` on load (O(nnz)), so incremental adds can re-derive it exactly. On the CPU a load
memory-maps ``tensors.safetensors`` (:mod:`hpengine.graph._mmap`; ``Index.load(mmap=...)``).

A generation written by ``Index.save(append=True)`` (``hpengine add``, the GRAG build; format 3)
extends the one before it without rewriting it: its ``texts.json`` and ``tensors.safetensors``,
and its segments ``seg-<i>/`` (each a ``texts.json`` and ``tensors.safetensors`` of appended rows:
passages, facts, new entities, their fact_passage and fact_entity_raw with global ids, and
embeddings), are hard links of the previous generation's files; the new rows go in one new
segment, and ``synonyms.safetensors`` holds the whole synonym list (it replaces the one in
``tensors.safetensors``). A load concatenates the segments (a copy, so their number is capped:
past ``MAX_SEGMENTS`` the next save writes the index whole again, as delete and update always do).
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from hpengine.errors import UserError
from hpengine.graph._hypergraph import HyperGraph
from hpengine.graph._files import check_entry, open_read, write_atomic
from hpengine.graph._mmap import map_safetensors, page_out, read_safetensors, write_safetensors
from hpengine.graph._store import (DEFAULT_LOCK_TIMEOUT, MANIFEST, SEGMENTED_VERSION, Generation, IndexFormatError,
                                   IndexStore, read_generation, read_json, write_json_durable)
from hpengine.graph._texts import PassageColumn, TextColumn, release_freed_memory

_META, _TEXTS, _TENSORS = MANIFEST, "texts.json", "tensors.safetensors"
_SYNONYMS = "synonyms.safetensors"
#: appended segments one generation may hold; the next append writes the index whole instead (a
#: load copies a segmented index's tensors into one tensor each)
MAX_SEGMENTS = 16
#: manifest keys that describe a generation, not the index (not carried into Index.meta)
_GENERATION_KEYS = ("format", "format_version", "generation", "store_token", "segments")
_INT_TENSORS = ("fact_passage", "fact_entity_raw", "synonyms")
_FLOAT_TENSORS = ("fact_emb", "entity_emb", "passage_emb")
#: ``Index.load(verify="auto")`` skips the value checks of memory-mapped embeddings above this many
#: bytes (all float tensors together): they read every byte, which mapping is there to avoid
VERIFY_AUTO_MAX_BYTES = 1 << 30
#: rows per block of the value checks (bounds their temporary masks)
_CHECK_ROWS = 1 << 16


@dataclass
class Index:
    """Everything retrieval needs, on one device.

    Attributes:
        passages: P passages (a list of :class:`~hpengine.graph.Passage`; a loaded index holds a
            read-only :class:`~hpengine.graph.PassageColumn`, one UTF-8 buffer per field).
        facts: H fact texts (a list of str; loaded: a read-only :class:`~hpengine.graph.TextColumn`).
        entities: V entity display names (as ``facts``).
        fact_passage: int64 ``[H]`` (sigma).
        fact_entity_raw: int64 ``[2, nnz_raw]`` extracted (fact, entity) pairs, before synonyms.
        synonyms: int64 ``[2, n]`` symmetric synonym entity pairs (cos >= eta).
        fact_emb, entity_emb: float ``[H, D]``, ``[V, D]`` L2-normalised embeddings.
        passage_emb: float ``[P, D]`` or None.
        meta: encoder name, build config, build report.
    """

    passages: Sequence
    facts: Sequence
    entities: Sequence
    fact_passage: Tensor
    fact_entity_raw: Tensor
    synonyms: Tensor
    fact_emb: Tensor
    entity_emb: Tensor
    passage_emb: Tensor | None = None
    meta: dict = field(default_factory=dict)
    _graph: HyperGraph | None = field(default=None, repr=False)
    _lookups: object = field(default=None, repr=False)
    #: GRAG-MH's optional parts (:class:`~hpengine.graph.GragParts`, files ``grag.*``); None when
    #: the index has none (every index before them; ``add`` drops them, they describe old passages)
    grag: object = field(default=None, repr=False)

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
        """The hypergraph over the synonym-expanded incidence (built once, cached), kept as the
        extracted pairs and the synonym pairs: the expansion adds ``deg(e) * |Syn(e)|`` incidences
        per entity, which grows faster than the corpus (docs/methods/index.md#the-expanded-incidence-as-factors)."""
        if self._graph is None:
            self._graph = HyperGraph.from_incidence(self.fact_entity_raw, self.fact_passage, self.num_entities,
                                                    self.num_passages, synonyms=self.synonyms)
        return self._graph

    @property
    def lookups(self):
        """Derived lookups (:class:`~hpengine.graph.IndexLookups`): built once, shared by every retriever."""
        if self._lookups is None:
            from hpengine.graph._lookups import IndexLookups

            self._lookups = IndexLookups(self)
        return self._lookups

    def to(self, device) -> "Index":
        """A copy with all tensors on ``device``."""
        device = torch.device(device)
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Index(self.passages, self.facts, self.entities, move(self.fact_passage), move(self.fact_entity_raw),
                     move(self.synonyms), move(self.fact_emb), move(self.entity_emb), move(self.passage_emb),
                     dict(self.meta), None if self._graph is None else self._graph.to(device),
                     grag=None if self.grag is None else self.grag.to(device))

    def page_out(self) -> int:
        """Hand the resident pages of the index's memory-mapped tensors back to the kernel
        (:func:`~hpengine.graph.page_out`).

        Queries read scattered rows of the mapped embeddings (candidates re-scored exactly), and
        the kernel maps whole page-cache folios around each row it faults in: at a million
        passages 10,000 random fact rows leave about 2 GB of the file in the resident set. Paging
        them out loses nothing (a page is read from the file again when touched; a page an edit
        copied stays) and does nothing to tensors in ordinary memory.

        Returns:
            How many of the index's tensors were memory-mapped and paged out.
        """
        tensors = (self.fact_emb, self.entity_emb, self.passage_emb, self.fact_passage, self.fact_entity_raw,
                   self.synonyms)
        return sum(page_out(t) for t in tensors if t is not None)

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
    def save(self, path: str | os.PathLike, *, writer=None, lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
             append: bool = False) -> Path:
        """Commit the index as a new generation of the index folder ``path``.

        Args:
            writer: a :class:`~hpengine.graph.StoreWriter` of ``path`` already held (a job that
                loads, changes and saves under one lock); default: take the lock for this save.
            lock_timeout: seconds to wait for another writer (without ``writer``).
            append: this index extends the generation current under ``writer``: it was loaded from
                it under the same lock and only grew (rows appended; synonyms and GRAG parts may
                change). The new generation hard-links the files already written and writes only
                the new rows, as one segment, and the synonyms: an add costs its own rows, not the
                index's. A whole write instead when the previous generation records no row counts
                (written before them, or format 1), the index is not larger in every part, or the
                segments would pass ``MAX_SEGMENTS``.

        Raises:
            IndexLockedError: another process holds the lock beyond ``lock_timeout``.
        """
        if writer is None:
            with IndexStore(path).writer(timeout=lock_timeout, command="Index.save") as held:
                return self.save(path, writer=held, append=append)
        if writer.store.path != IndexStore(path).path:
            raise ValueError(f"the writer holds {writer.store.path}, not {path}")
        meta = {k: v for k, v in self.meta.items() if k not in _GENERATION_KEYS}
        meta.update(num_facts=self.num_facts, num_entities=self.num_entities, num_passages=self.num_passages,
                    embedding_dim=int(self.fact_emb.shape[1]), nnz_raw=int(self.fact_entity_raw.shape[1]),
                    has_passage_emb=self.passage_emb is not None)
        try:
            folder = writer.new_folder()
            segments = self._append_files(folder, writer.previous) if append else None
            if segments is None:
                self._write_files(folder)
                writer.commit(folder, meta)
            else:
                writer.commit(folder, {**meta, "segments": segments}, version=SEGMENTED_VERSION)
        except OSError as exc:  # disk full, quota, permissions: the current generation is untouched
            raise UserError(f"{path}: cannot write the index ({exc.strerror or exc}); the index there is as it "
                            f"was") from exc
        return Path(path)

    def _write_files(self, folder: Path) -> None:
        """The data files of one generation into ``folder``, fsynced."""
        tensors = {
            "fact_passage": self.fact_passage, "fact_entity_raw": self.fact_entity_raw,
            "synonyms": self.synonyms, "fact_emb": self.fact_emb, "entity_emb": self.entity_emb,
        }
        if self.passage_emb is not None:
            tensors["passage_emb"] = self.passage_emb
        _save_tensors(tensors, folder / _TENSORS)
        _write_texts(folder / _TEXTS, self.passages, self.facts, self.entities)
        if self.grag is not None:
            self.grag.save(folder)

    def _append_files(self, folder: Path, previous: Generation | None) -> int | None:
        """The files of a generation that extends ``previous`` into ``folder`` (see :meth:`save`);
        returns its number of segments, or None when it must be written whole."""
        if previous is None or previous.number == 0:
            return None
        m = previous.manifest
        old = [m.get(k) for k in ("num_passages", "num_facts", "num_entities", "nnz_raw")]
        new = [self.num_passages, self.num_facts, self.num_entities, int(self.fact_entity_raw.shape[1])]
        if not all(type(c) is int for c in old) or any(b < a for a, b in zip(old, new)) \
                or m.get("has_passage_emb") is not (self.passage_emb is not None) \
                or m.get("embedding_dim") != int(self.fact_emb.shape[1]):
            return None
        kept = m.get("segments", 0) if m.get("format_version") == SEGMENTED_VERSION else 0
        grew = new != old
        if kept + grew > MAX_SEGMENTS:
            return None
        for rel in [_TEXTS, _TENSORS] + [f"{_segment(i)}/{n}" for i in range(1, kept + 1) for n in (_TEXTS, _TENSORS)]:
            _link(previous.folder / rel, folder / rel)
        if grew:
            p0, h0, v0, n0 = old
            seg = folder / _segment(kept + 1)
            seg.mkdir()
            tensors = {"fact_passage": self.fact_passage[h0:], "fact_entity_raw": self.fact_entity_raw[:, n0:],
                       "fact_emb": self.fact_emb[h0:], "entity_emb": self.entity_emb[v0:]}
            if self.passage_emb is not None:
                tensors["passage_emb"] = self.passage_emb[p0:]
            _save_tensors(tensors, seg / _TENSORS)
            _write_texts(seg / _TEXTS, self.passages[p0:], self.facts[h0:], self.entities[v0:])
        _save_tensors({"synonyms": self.synonyms}, folder / _SYNONYMS)
        if self.grag is not None:
            self.grag.save(folder)
        return kept + grew

    @classmethod
    def load(cls, path: str | os.PathLike, *, device="cpu", mmap: bool | None = None, verify="auto",
             expected_encoder: str | None = None) -> "Index":
        """Load the current generation of a saved index (no pickle), checking format version,
        shapes and encoder. Reads only: nothing in or beside ``path`` is changed.

        With ``mmap`` the tensors are views of a private memory mapping of ``tensors.safetensors``
        (:func:`~hpengine.graph._mmap.map_safetensors`): loading reads only the header and the int
        tensors, so its time does not grow with the embeddings; a query reads the pages it touches,
        and an in-place edit of a tensor copies the page, never changing the file.

        What is checked (:meth:`check`):

        - always: the safetensors header (known dtypes, shapes, offsets inside the file, no
          overlaps; safetensors' own reader checks it for ``mmap=False`` off the CPU), dtypes
          (int64 ids, floating-point embeddings), every shape against the text counts, one
          embedding dim, and the int tensors in full (ids in range);
        - the embedding values (finite, no all-zero row), which read every byte: with
          ``verify=True`` always, with ``False`` never, with ``"auto"`` unless the embeddings stay
          memory-mapped (``mmap`` on the CPU) and total more than ``VERIFY_AUTO_MAX_BYTES`` (1 GiB:
          about 700k rows of 384 float32 over facts, entities and passages). A copy has read every
          byte anyway.

        Args:
            path: index folder.
            device: where tensors go.
            mmap: memory-map the tensors file (default None: True when ``device`` is the CPU). On
                another device the mapped tensors are copied there, without a CPU copy between.
                False: read every tensor into memory on ``device``.
            verify: ``"auto"``, True or False: whether to check the embedding values (above).
            expected_encoder: when given, the index must have been built with this encoder name.

        Raises:
            IndexFormatError: missing files, other format version, JSON of the wrong shape, a
                corrupt tensors file, inconsistent shapes, ids out of range, non-finite or zero
                embeddings (when checked), or another encoder than ``expected_encoder``; the
                message names the file.
        """
        device = torch.device(device)
        if mmap is None:
            mmap = device.type == "cpu"
        if not isinstance(mmap, bool):
            raise TypeError(f"mmap must be None, True or False (got {mmap!r})")
        if not (verify is True or verify is False or verify == "auto"):
            raise ValueError(f"verify must be one of 'auto', True, False (got {verify!r})")
        return read_generation(path, lambda gen: cls._load_generation(path, gen, device, expected_encoder,
                                                                      mmap=mmap, verify=verify))

    @classmethod
    def _load_generation(cls, path, gen: Generation, device, expected_encoder, *, mmap: bool = False,
                         verify="auto") -> "Index":
        meta, folder = gen.manifest, gen.folder
        if expected_encoder is not None and meta.get("encoder") != expected_encoder:
            raise IndexFormatError(f"{path}: index was built with encoder {meta.get('encoder')!r} but "
                                   f"{expected_encoder!r} is configured; rebuild the index or configure that encoder")
        device = torch.device(device)
        root = Path(os.path.abspath(path))  # every file is read below it, no link followed
        if meta.get("format_version") == SEGMENTED_VERSION:
            passages, facts, entities, tensors = _read_segments(path, folder, meta, device, mmap, root)
        else:
            passages, facts, entities = _read_texts(folder / _TEXTS, root)
            tensors = _read_tensors(folder / _TENSORS, device, mmap, root)
        for name, t in tensors.items():
            wanted = torch.int64 if name in _INT_TENSORS else None
            if wanted is not None and t.dtype != wanted:
                raise IndexFormatError(f"{folder / _TENSORS}: tensor {name} must be int64 (got {t.dtype})")
            if name in _FLOAT_TENSORS and not t.is_floating_point():
                raise IndexFormatError(f"{folder / _TENSORS}: tensor {name} must be floating point (got {t.dtype})")
        index = cls(
            passages=passages, facts=facts, entities=entities,
            fact_passage=_need(tensors, "fact_passage", folder), fact_entity_raw=_need(tensors, "fact_entity_raw", folder),
            synonyms=_need(tensors, "synonyms", folder), fact_emb=_need(tensors, "fact_emb", folder),
            entity_emb=_need(tensors, "entity_emb", folder), passage_emb=tensors.get("passage_emb"),
            meta={k: v for k, v in meta.items() if k not in _GENERATION_KEYS},
        )
        if verify == "auto":
            float_bytes = sum(t.numel() * t.element_size() for n, t in tensors.items() if n in _FLOAT_TENSORS)
            verify = not (mmap and device.type == "cpu" and float_bytes > VERIFY_AUTO_MAX_BYTES)
        index.check(folder / _TENSORS, values=verify)
        from hpengine.graph._grag import GragParts, has_grag_files

        if has_grag_files(folder):
            index.grag = GragParts.load(folder, device=device, num_facts=len(facts), num_entities=len(entities),
                                        dim=int(index.fact_emb.shape[1]), root=root)
        for key, count in (("num_facts", len(facts)), ("num_entities", len(entities)),
                           ("num_passages", len(passages))):
            if key in meta and meta[key] != count:
                raise IndexFormatError(f"{path}/{_META}: {key} is {meta[key]!r} but {folder / _TEXTS} holds "
                                       f"{count}; the index files do not belong together")
        return index

    def check(self, where="index", *, values: bool = True) -> None:
        """Consistency of texts and tensors: shapes against the text counts, fact -> passage and
        entity ids in range, one embedding dim, and with ``values`` finite, non-zero embedding rows
        (checked in blocks of rows, so their masks stay small). O(nnz + (H + V + P) D), run on every
        load (the values as ``Index.load(verify=...)`` says). Raises :class:`IndexFormatError` naming
        ``where``."""
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
            raise IndexFormatError(f"{where}: fact_passage refers to passages outside [0, {p}) (got ids "
                                   f"{int(self.fact_passage.min())}..{int(self.fact_passage.max())})")
        # rows: (fact, entity) for fact_entity_raw, (entity, entity) for synonyms
        for name, t, row_size in (("fact_entity_raw", self.fact_entity_raw, h), ("synonyms", self.synonyms, v)):
            if not t.numel():
                continue
            if int(t[1].max()) >= v or int(t[1].min()) < 0:
                raise IndexFormatError(f"{where}: {name} refers to entities outside [0, {v})")
            if int(t[0].max()) >= row_size or int(t[0].min()) < 0:
                what = "facts" if name == "fact_entity_raw" else "entities"
                raise IndexFormatError(f"{where}: {name} refers to {what} outside [0, {row_size})")
        embeddings = [(n, getattr(self, n)) for n in _FLOAT_TENSORS if getattr(self, n) is not None]
        dims = {n: int(t.shape[1]) for n, t in embeddings}
        if len(set(dims.values())) > 1:
            raise IndexFormatError(f"{where}: embeddings must share one dim D (got {dims})")
        expected_dim = self.meta.get("embedding_dim")
        if expected_dim is not None and dims and expected_dim not in dims.values():
            raise IndexFormatError(f"{where}: embeddings have dim {dims['fact_emb']} but {_META} says "
                                   f"embedding_dim={expected_dim!r}")
        for name, t in embeddings if values else ():
            zeros, first = 0, None
            for start in range(0, t.shape[0], _CHECK_ROWS) if t.numel() else ():
                rows = t[start:start + _CHECK_ROWS]
                # one pass: a row's L1 norm is NaN/inf when a value is, and 0 only when all are 0
                # (a sum of non-negative values never rounds below its largest term)
                norms = torch.linalg.vector_norm(rows, ord=1, dim=1, dtype=torch.float64 if rows.dtype ==
                                                 torch.float64 else torch.float32)  # [rows]
                if not bool(torch.isfinite(norms).all()) and not bool(torch.isfinite(rows).all()):
                    raise IndexFormatError(f"{where}: tensor {name} has non-finite values (NaN or inf)")
                zero = (norms == 0).nonzero()
                if zero.numel():
                    zeros += zero.numel()
                    first = start + int(zero[0, 0]) if first is None else first
            if zeros:  # the encoder normalises every row: a zero row is damage, not data
                raise IndexFormatError(f"{where}: tensor {name} has {zeros} all-zero rows (first: row "
                                       f"{first}); embeddings are L2-normalised, so the file is corrupt")


def _segment(i: int) -> str:
    return f"seg-{i:03d}"


def _save_tensors(tensors: dict, path: Path) -> None:
    write_safetensors({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, path)  # durable


def _write_texts(path: Path, passages: list, facts: list, entities: list) -> None:
    write_json_durable(path, {"passages": [{"title": p.title, "text": p.text} for p in passages],
                              "facts": list(facts), "entities": list(entities)})


def _link(src: Path, dst: Path) -> None:
    """``dst`` as a hard link of the immutable file ``src`` (a copy where links are refused)."""
    dst.parent.mkdir(exist_ok=True)
    check_entry(src, folder=False)  # a link planted in the previous generation is refused, not copied
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        with os.fdopen(open_read(src), "rb") as source:  # streamed: a copy never holds the file in memory
            write_atomic(dst, lambda f: shutil.copyfileobj(source, f, 1 << 23))


def _read_tensors(path: Path, device: torch.device, mmap: bool, root: Path | None = None) -> dict:
    """The tensors of one safetensors file on ``device`` (memory-mapped with ``mmap``), read below
    ``root`` with no link followed; a missing file is an :class:`IndexFormatError` naming it."""
    try:
        if mmap or device.type != "cpu":  # views of one private mapping; copied to another device tensor by tensor
            tensors = map_safetensors(path, root)
            return tensors if device.type == "cpu" else {name: t.to(device) for name, t in tensors.items()}
        return read_safetensors(path, root)  # read into memory (a copy of a mapping would touch every page twice)
    except FileNotFoundError as exc:
        raise IndexFormatError(f"{path} is missing; the index is incomplete") from exc


def _read_segments(path, folder: Path, meta: dict, device: torch.device, mmap: bool, root: Path | None = None) -> tuple:
    """``(passages, facts, entities, tensors)`` of a segmented generation: the base files, then
    each segment's rows appended, and the synonyms of ``synonyms.safetensors``."""
    count = meta.get("segments")
    if type(count) is not int or not 0 <= count <= MAX_SEGMENTS:
        raise IndexFormatError(f"{path}/{_META}: segments must be an int in [0, {MAX_SEGMENTS}] (got {count!r})")
    parts = [folder] + [folder / _segment(i) for i in range(1, count + 1)]
    columns, blocks = [], []
    for part in parts:
        columns.append(_read_texts(part / _TEXTS, root))
        blocks.append(_read_tensors(part / _TENSORS, device, mmap, root))
    passages = PassageColumn.concat([c[0] for c in columns])
    facts, entities = (TextColumn.concat([c[k] for c in columns]) for k in (1, 2))
    tensors = dict(blocks[0])
    for name in ("fact_passage", "fact_emb", "entity_emb", "passage_emb", "fact_entity_raw"):
        pieces = [b.get(name) for b in blocks]
        if pieces[0] is None or len(pieces) == 1:
            continue
        if any(t is None for t in pieces):
            raise IndexFormatError(f"{folder}: tensor {name} is missing from a segment")
        try:
            tensors[name] = torch.cat(pieces, dim=1 if name == "fact_entity_raw" else 0)
        except RuntimeError as exc:
            raise IndexFormatError(f"{folder}: the segments' {name} do not fit together "
                                   f"({str(exc).splitlines()[0][:120]})") from exc
    synonyms = _read_tensors(folder / _SYNONYMS, device, mmap, root).get("synonyms")
    if synonyms is None:
        raise IndexFormatError(f"{folder / _SYNONYMS}: missing tensor 'synonyms'")
    tensors["synonyms"] = synonyms
    return passages, facts, entities, tensors


def _need(tensors: dict, name: str, path: Path) -> Tensor:
    if name not in tensors:
        raise IndexFormatError(f"{path / _TENSORS}: missing tensor {name!r}")
    return tensors[name]


def _read_texts(path: Path, root: Path | None = None) -> tuple[PassageColumn, TextColumn, TextColumn]:
    """``texts.json`` as (passages, facts, entities) columns, every field type-checked (read below
    ``root``, no link followed)."""
    texts = read_json(path, root)
    if not isinstance(texts, dict):
        raise IndexFormatError(f"{path}: expected a JSON object with passages, facts, entities "
                               f"(got {type(texts).__name__})")
    for key in ("passages", "facts", "entities"):
        if not isinstance(texts.get(key), list):
            raise IndexFormatError(f"{path}: {key!r} must be a list "
                                   f"(got {type(texts.get(key)).__name__ if key in texts else 'no such key'})")
    for i, rec in enumerate(texts["passages"]):
        if not (isinstance(rec, dict) and isinstance(rec.get("title"), str) and isinstance(rec.get("text"), str)):
            raise IndexFormatError(f"{path}: passages[{i}] must be an object with str 'title' and 'text' "
                                   f"(got {rec!r:.80})")
    for key in ("facts", "entities"):
        bad = next((i for i, x in enumerate(texts[key]) if not isinstance(x, str)), None)
        if bad is not None:
            raise IndexFormatError(f"{path}: {key}[{bad}] must be a str (got {texts[key][bad]!r:.80})")
    # compact columns (one UTF-8 buffer each), each list dropped as soon as it is packed
    records = texts.pop("passages")
    passages = PassageColumn(TextColumn.from_strings(r["title"] for r in records),
                             TextColumn.from_strings(r["text"] for r in records))
    del records
    facts = TextColumn.from_strings(texts.pop("facts"))
    entities = TextColumn.from_strings(texts.pop("entities"))
    del texts
    release_freed_memory()
    return passages, facts, entities
