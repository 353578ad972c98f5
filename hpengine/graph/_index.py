"""The saved index: hypergraph + texts + embeddings, written atomically, loaded without pickle.

On-disk layout (folder)::

    index.json          format version, sizes, encoder name, build config, build report
    texts.json          passages [{title, text}], facts [str], entities [str]
    tensors.safetensors fact_passage [H], fact_entity_raw [2, nnz_raw] (before synonyms),
                        synonyms [2, n] (symmetric entity pairs), fact_emb [H, D],
                        entity_emb [V, D], passage_emb [P, D] (optional)

The expanded incidence ``A_i+ = A_i ∪ Syn(A_i)`` is derived from ``fact_entity_raw`` and
``synonyms`` on load (O(nnz)), so incremental adds can re-derive it exactly.

Atomicity: a save writes a sibling temporary folder ``.DIR.tmp-<pid>-<hex>``, then swaps it in
with two renames (``old -> .bak``, ``tmp -> old``) and deletes the backup. An interruption
before the swap leaves the previous index untouched; one between the two renames leaves
``DIR.bak`` complete, and the next :meth:`Index.load` or :meth:`Index.save` renames it back.

Leftovers of killed saves are cleaned up by the next save or load of the same folder, only when
provably stale (:func:`clean_stale`): a temporary folder whose writing process is gone, and a
backup when ``DIR`` itself is complete. The only complete copy is never deleted.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from hpengine.errors import OutputExistsError, UserError
from hpengine.graph._corpus import Passage
from hpengine.graph._hypergraph import HyperGraph
from hpengine.graph._synonyms import expand_with_synonyms

FORMAT_VERSION = 1
_META, _TEXTS, _TENSORS = "index.json", "texts.json", "tensors.safetensors"
#: a temporary folder written by the pre-pid format, older than this, is a leftover (seconds)
_LEGACY_TMP_AGE = 3600
_INT_TENSORS = ("fact_passage", "fact_entity_raw", "synonyms")
#: test hook: ``HPENGINE_TEST_KILL_AT=<point>`` makes a save SIGKILL its own process at that point
#: (``before-swap``, ``after-backup``, ``before-cleanup``) so the kill -9 tests hit each window
_KILL_ENV = "HPENGINE_TEST_KILL_AT"
_FLOAT_TENSORS = ("fact_emb", "entity_emb", "passage_emb")


class IndexFormatError(UserError):
    """A saved index is missing, corrupt, or of another format version or encoder (a user error:
    the message names the file found wrong)."""


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
        """The hypergraph over the synonym-expanded incidence (built once, cached)."""
        if self._graph is None:
            expanded = expand_with_synonyms(self.fact_entity_raw, self.synonyms, self.num_facts, self.num_entities)
            self._graph = HyperGraph.from_incidence(expanded, self.fact_passage, self.num_entities, self.num_passages)
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
        clean_stale(path)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
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
            if self.grag is not None:
                self.grag.save(tmp)
            meta = dict(self.meta)
            meta.update(format_version=FORMAT_VERSION, num_facts=self.num_facts, num_entities=self.num_entities,
                        num_passages=self.num_passages, embedding_dim=int(self.fact_emb.shape[1]))
            _write_json(tmp / _META, meta)  # written last: its presence marks a complete folder
            _kill_point("before-swap")
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
            IndexFormatError: missing files, other format version, JSON of the wrong shape,
                inconsistent shapes, ids out of range, non-finite embeddings, or another encoder
                than ``expected_encoder``; the message names the file.
        """
        path = Path(path)
        if path.parent.is_dir():
            clean_stale(path)
        if not (path / _META).exists():
            raise IndexFormatError(f"{path} is not an hpengine index (no {_META})")
        meta = _read_json(path / _META)
        if not isinstance(meta, dict):
            raise IndexFormatError(f"{path / _META}: expected a JSON object (got {type(meta).__name__})")
        version = meta.get("format_version")
        if version != FORMAT_VERSION:
            raise IndexFormatError(f"{path}: index format version {version} is not supported "
                                   f"(expected {FORMAT_VERSION}); rebuild the index with this hpengine")
        if expected_encoder is not None and meta.get("encoder") != expected_encoder:
            raise IndexFormatError(f"{path}: index was built with encoder {meta.get('encoder')!r} but "
                                   f"{expected_encoder!r} is configured; rebuild the index or configure that encoder")
        passages, facts, entities = _read_texts(path / _TEXTS)
        try:
            tensors = load_file(str(path / _TENSORS), device=str(torch.device(device)))
        except Exception as exc:  # safetensors raises its own error types
            raise IndexFormatError(f"{path / _TENSORS}: cannot read tensors ({exc})") from exc
        for name, t in tensors.items():
            wanted = torch.int64 if name in _INT_TENSORS else None
            if wanted is not None and t.dtype != wanted:
                raise IndexFormatError(f"{path / _TENSORS}: tensor {name} must be int64 (got {t.dtype})")
            if name in _FLOAT_TENSORS and not t.is_floating_point():
                raise IndexFormatError(f"{path / _TENSORS}: tensor {name} must be floating point (got {t.dtype})")
        index = cls(
            passages=passages, facts=facts, entities=entities,
            fact_passage=_need(tensors, "fact_passage", path), fact_entity_raw=_need(tensors, "fact_entity_raw", path),
            synonyms=_need(tensors, "synonyms", path), fact_emb=_need(tensors, "fact_emb", path),
            entity_emb=_need(tensors, "entity_emb", path), passage_emb=tensors.get("passage_emb"),
            meta={k: v for k, v in meta.items() if k != "format_version"},
        )
        index.check(path / _TENSORS)
        from hpengine.graph._grag import GragParts, has_grag_files

        if has_grag_files(path):
            index.grag = GragParts.load(path, device=device, num_facts=len(facts), num_entities=len(entities),
                                        dim=int(index.fact_emb.shape[1]))
        for key, count in (("num_facts", len(facts)), ("num_entities", len(entities)),
                           ("num_passages", len(passages))):
            if key in meta and meta[key] != count:
                raise IndexFormatError(f"{path / _META}: {key} is {meta[key]!r} but {_TEXTS} holds {count}; "
                                       f"the index files do not belong together")
        return index

    def check(self, where="index") -> None:
        """Consistency of texts and tensors: shapes against the text counts, fact -> passage and
        entity ids in range, one embedding dim, finite embeddings. O(nnz + (H + V + P) D), run on
        every load. Raises :class:`IndexFormatError` naming ``where``."""
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
        for name, t in embeddings:
            if t.numel() and not bool(torch.isfinite(t).all()):
                raise IndexFormatError(f"{where}: tensor {name} has non-finite values (NaN or inf)")


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
    except UnicodeDecodeError as exc:
        raise IndexFormatError(f"{path}: not valid UTF-8 (byte offset {exc.start})") from exc
    except (ValueError, RecursionError, OSError) as exc:  # int too long, nesting too deep, unreadable
        raise IndexFormatError(f"{path}: cannot read ({type(exc).__name__}: {str(exc)[:120]})") from exc


def _read_texts(path: Path) -> tuple[list, list, list]:
    """``texts.json`` as (passages, facts, entities), every field type-checked."""
    texts = _read_json(path)
    if not isinstance(texts, dict):
        raise IndexFormatError(f"{path}: expected a JSON object with passages, facts, entities "
                               f"(got {type(texts).__name__})")
    for key in ("passages", "facts", "entities"):
        if not isinstance(texts.get(key), list):
            raise IndexFormatError(f"{path}: {key!r} must be a list "
                                   f"(got {type(texts.get(key)).__name__ if key in texts else 'no such key'})")
    passages = []
    for i, rec in enumerate(texts["passages"]):
        if not (isinstance(rec, dict) and isinstance(rec.get("title"), str) and isinstance(rec.get("text"), str)):
            raise IndexFormatError(f"{path}: passages[{i}] must be an object with str 'title' and 'text' "
                                   f"(got {rec!r:.80})")
        passages.append(Passage(rec["title"], rec["text"]))
    for key in ("facts", "entities"):
        bad = next((i for i, x in enumerate(texts[key]) if not isinstance(x, str)), None)
        if bad is not None:
            raise IndexFormatError(f"{path}: {key}[{bad}] must be a str (got {texts[key][bad]!r:.80})")
    return passages, texts["facts"], texts["entities"]


def is_complete_index(folder: Path) -> bool:
    """All three files of an index are there (``index.json`` alone is not enough: a half-deleted
    backup may still hold it)."""
    return all((folder / name).is_file() for name in (_META, _TEXTS, _TENSORS))


_TMP_NAME = re.compile(r"^\.(?P<name>.+)\.tmp-(?:(?P<pid>\d+)-)?[0-9a-f]{8}$")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def clean_stale(path: str | os.PathLike) -> list[Path]:
    """Recover and remove what killed saves of index folder ``path`` left behind.

    - ``DIR`` missing or incomplete and ``DIR.bak`` complete: a save was killed between its two
      renames; the backup is renamed back to ``DIR`` (it is the only complete copy). An
      incomplete ``DIR`` (not an index) is left alone and the backup stays.
    - ``DIR`` complete and ``DIR.bak`` present: the backup is stale (the save finished its renames
      and was killed while deleting it); it is deleted.
    - ``.DIR.tmp-<pid>-<hex>`` whose process ``pid`` is gone: deleted; a legacy
      ``.DIR.tmp-<hex>`` (no pid) only when older than an hour. A live save's folder is kept.

    Returns:
        The paths deleted or renamed.
    """
    path = Path(path)
    backup = path.with_name(path.name + ".bak")
    done, live_writer = [], False
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        siblings = []
    for entry in siblings:
        match = _TMP_NAME.match(entry.name)
        if not match or match.group("name") != path.name or not entry.is_dir() or entry.is_symlink():
            continue
        pid = match.group("pid")
        if pid is not None:
            stale = int(pid) != os.getpid() and not _pid_alive(int(pid))
        else:
            try:
                stale = time.time() - entry.stat().st_mtime > _LEGACY_TMP_AGE
            except OSError:
                stale = False
        if stale:
            shutil.rmtree(entry, ignore_errors=True)
            done.append(entry)
        else:
            live_writer = True
    if backup.is_dir() and not backup.is_symlink():
        if not path.exists() and is_complete_index(backup):
            if not live_writer:  # a live save is between its renames: it puts DIR back itself
                os.replace(backup, path)
                done.append(backup)
        elif is_complete_index(path):
            shutil.rmtree(backup, ignore_errors=True)
            done.append(backup)
    return done


def _swap_in(tmp: Path, path: Path) -> None:
    backup = path.with_name(path.name + ".bak")
    if path.exists():
        if not path.is_dir() or (any(path.iterdir()) and not (path / _META).exists()):
            raise OutputExistsError(f"{path} exists and is not an hpengine index; refusing to replace it")
        if backup.exists():  # DIR is there: the backup is a leftover, not the only copy
            shutil.rmtree(backup)
        os.replace(path, backup)
        _kill_point("after-backup")
    elif backup.exists():  # clean_stale renamed a complete backup back, so this one is incomplete
        shutil.rmtree(backup)
    os.replace(tmp, path)
    _kill_point("before-cleanup")
    shutil.rmtree(backup, ignore_errors=True)


def _kill_point(name: str) -> None:
    if os.environ.get(_KILL_ENV) == name:  # tests only (tests/pipeline/test_cli_errors.py)
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
