"""The shards of a streaming index build (docs/guides/index.md#the-streaming-build).

A build cuts the corpus into shards of ``shard_size`` passages. Each shard is extracted and its
facts and passages embedded, then written to the build folder and dropped from memory, so the work
in flight is one shard's. A shard is two files::

    shard-<k>.safetensors   fact_emb [F_k, D] and passage_emb [P_k, D] (when passages are embedded)
    shard-<k>.json          its passage range and, per passage, its facts as (text, [entity name]),
                            with checksums of both files' contents and of what it was made from

written in that order, each durably (a new file renamed into place); the JSON is written last, so
a shard whose JSON exists is complete, and a resumed build uses it only once it verifies. ``build.json`` holds the fingerprint of the build (the passages and the settings that
change what a shard holds): a build started again with the same fingerprint skips the finished
shards (a killed build resumes), with another it starts afresh. Entities are numbered when the
shards are merged, in passage order, so the result does not depend on which shards ran when.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

import torch
from torch import Tensor

from hpengine.errors import UserError
from hpengine.graph._files import make_dir, open_read
from hpengine.graph._index import _save_tensors
from hpengine.graph._mmap import map_safetensors
from hpengine.graph._store import _kill_point, read_json, write_json_durable

BUILD_FORMAT = "hpengine-build"
BUILD_VERSION = 2
SHARD_FORMAT = "hpengine-shard-2"
PLAN_FILE = "build.json"


def build_fingerprint(passages: list, settings: dict) -> str:
    """sha256 over ``settings`` (JSON, sorted keys) and every passage's title and text, in order."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for p in passages:
        h.update(p.title.encode())
        h.update(b"\0")
        h.update(p.text.encode())
        h.update(b"\1")
    return h.hexdigest()


def shard_ranges(num_passages: int, shard_size: int) -> list:
    """``[(lo, hi)]`` of each shard: ``shard_size`` passages each, the last one the rest."""
    if shard_size < 1:
        raise ValueError(f"shard_size must be >= 1 (got {shard_size})")
    return [(lo, min(lo + shard_size, num_passages)) for lo in range(0, num_passages, shard_size)]


class ShardFolder:
    """The folder of one build's shards, each verified before it is used.

    A shard's record (``shard-<k>.json``, written last) carries what it was made from (the
    build's fingerprint, the sha256 of its corpus slice and of the settings) and checksums of what
    it holds (sha256 of its facts and of its tensors file, and the tensors' row counts). A shard
    whose record or files do not verify (edited, truncated, a link, another build's) is removed
    and made again; :attr:`redone` says which and why.

    Args:
        folder: where the shards go (the build folder, inside the index folder ``root``).
        fingerprint: :func:`build_fingerprint` of this build.
        num_shards: how many shards the build has.
        root: the index folder: no link below it is followed (default: ``folder``'s parent).
        slices: ``k -> sha256`` of shard ``k``'s corpus slice (:func:`slice_digest`); None skips
            that check (the record's own fingerprint still binds it to the build).
        settings_digest: sha256 of the settings (:func:`settings_digest`).
    """

    def __init__(self, folder: str | os.PathLike, fingerprint: str, num_shards: int, *,
                 root: str | os.PathLike | None = None, slices=None, settings_digest: str = ""):
        self.folder = Path(os.path.abspath(folder))
        self.root = self.folder.parent if root is None else Path(os.path.abspath(root))
        self.fingerprint = fingerprint
        self.num_shards = num_shards
        self.slices = slices
        self.settings_digest = settings_digest
        self.redone: list = []  # [(k, why)] shards found damaged and removed, to be made again
        self._verified: set = set()
        self._open()

    def _plan(self) -> dict:
        return {"format": BUILD_FORMAT, "format_version": BUILD_VERSION, "fingerprint": self.fingerprint,
                "num_shards": self.num_shards}

    def _open(self) -> None:
        """Keep the finished shards of the same build; start afresh otherwise."""
        self.root.mkdir(parents=True, exist_ok=True)  # the index folder: what the user named
        make_dir(self.folder, self.root, exist_ok=True)
        plan_path = self.folder / PLAN_FILE
        try:
            same = read_json(plan_path, self.root) == self._plan()
        except UserError:  # missing, unreadable or a link: a plan of no build
            same = False
        if same:
            return
        for entry in self.folder.iterdir():
            if entry.name.startswith("shard-"):
                entry.unlink()  # removes a link itself, never what it points to
        write_json_durable(plan_path, self._plan(), self.root)

    def _paths(self, k: int) -> tuple:
        return self.folder / f"shard-{k:06d}.safetensors", self.folder / f"shard-{k:06d}.json"

    def done(self) -> list:
        """The shards whose files are complete and verify, in order; a shard that does not verify
        is removed (to be made again) and listed in :attr:`redone`."""
        out = []
        for k in range(self.num_shards):
            tensors_path, json_path = self._paths(k)
            if not os.path.lexists(json_path):
                continue
            if k not in self._verified:
                why = self._verify(k)
                if why is not None:
                    for path in (json_path, tensors_path):
                        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                            path.unlink()
                    self.redone.append((k, why))
                    continue
                self._verified.add(k)
            out.append(k)
        return out

    def _verify(self, k: int) -> str | None:
        """Why shard ``k`` cannot be used (None: it verifies)."""
        tensors_path, json_path = self._paths(k)
        try:
            record = read_json(json_path, self.root)
        except UserError as exc:
            return str(exc).split("; hpengine does not")[0]
        if not isinstance(record, dict) or record.get("format") != SHARD_FORMAT:
            return f"{json_path.name} is not a shard record of this hpengine"
        expect = {"shard": k, "build": self.fingerprint, "settings_sha256": self.settings_digest}
        if self.slices is not None:
            expect["slice_sha256"] = self.slices(k)
        for key, value in expect.items():
            if record.get(key) != value:
                return f"its {key} does not match this build"
        facts, span = record.get("facts"), record.get("passages")
        if not (isinstance(span, list) and len(span) == 2 and all(type(x) is int for x in span)):
            return "its passage range is not two ints"
        if not isinstance(facts, list) or len(facts) != span[1] - span[0]:
            return "its facts do not cover its passages"
        if _digest(_canonical(facts)) != record.get("facts_sha256"):
            return "its facts do not match their checksum"
        try:
            if _file_digest(tensors_path, self.root) != record.get("tensors_sha256"):
                return "its tensors file does not match its checksum"
            tensors = map_safetensors(tensors_path, self.root)
        except FileNotFoundError:
            return f"{tensors_path.name} is missing"
        except UserError as exc:
            return str(exc).split("; hpengine does not")[0]
        rows = {"fact_emb": sum(len(f) for f in facts), "passage_emb": span[1] - span[0]}
        for name, t in tensors.items():
            if name not in rows or t.dim() != 2 or t.shape[0] != rows[name]:
                return f"its tensor {name} has shape {tuple(t.shape)}, not {rows.get(name)} rows"
        return None

    def write(self, k: int, span: tuple, extracted: list, fact_emb: Tensor, passage_emb: Tensor | None) -> None:
        """Write shard ``k``: passages ``span = (lo, hi)``, ``extracted`` their facts (one list of
        ``ExtractedFact`` per passage).

        Shapes:
            fact_emb ``[F_k, D]`` (the shard's facts in passage order), passage_emb ``[hi - lo, D]``.

        Raises:
            UserError: the shard could not be written (disk full); finished shards are kept.
        """
        tensors_path, json_path = self._paths(k)
        tensors = {"fact_emb": fact_emb} if passage_emb is None else {"fact_emb": fact_emb, "passage_emb": passage_emb}
        facts = [[[f.text, list(f.entities)] for f in facts] for facts in extracted]
        record = {"format": SHARD_FORMAT, "shard": k, "passages": list(span), "build": self.fingerprint,
                  "settings_sha256": self.settings_digest,
                  "slice_sha256": self.slices(k) if self.slices is not None else None,
                  "facts_sha256": _digest(_canonical(facts)), "facts": facts}
        try:
            _save_tensors(tensors, tensors_path)  # created exclusively and renamed into place
            record["tensors_sha256"] = _file_digest(tensors_path, self.root)
            write_json_durable(json_path, record, self.root)  # last: a shard with a record is complete
        except OSError as exc:
            raise UserError(f"cannot write shard {k} to {self.folder} ({exc.strerror or exc}); the finished shards "
                            f"are kept: free space and run the same command again to resume") from exc
        self._verified.add(k)
        _kill_point("after-shard")

    def read_facts(self, k: int) -> list:
        """Shard ``k``'s facts: one list of ``ExtractedFact`` per passage."""
        from hpengine.models import ExtractedFact

        return [[ExtractedFact(text, list(names)) for text, names in facts]
                for facts in read_json(self._paths(k)[1], self.root)["facts"]]

    def read_tensors(self, k: int) -> dict:
        """Shard ``k``'s embeddings (``fact_emb``, and ``passage_emb`` when written), the file's
        header checked (a damaged shard is one line naming it). The tensors are views of a private
        mapping of the file: the merge copies them once, into the index's rows (no temporary copy of
        the shard; half the merge's time, measured by benchmarks/e2e/bench_structure.py)."""
        return map_safetensors(self._paths(k)[0], self.root)


def slice_digest(passages: list) -> str:
    """sha256 of a corpus slice: every passage's title and text, in order."""
    return build_fingerprint(passages, {})


def settings_digest(settings: dict) -> str:
    """sha256 of the settings that change what a shard holds (JSON, sorted keys)."""
    return _digest(json.dumps(settings, sort_keys=True, default=str).encode())


def _canonical(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_digest(path: Path, root: Path) -> str:
    """sha256 of a file read below ``root`` (no link followed), in blocks."""
    h = hashlib.sha256()
    with os.fdopen(open_read(path, root), "rb") as f:
        for block in iter(lambda: f.read(1 << 23), b""):
            h.update(block)
    return h.hexdigest()


def gather_rows(parts, totals: dict, device, allocate=None) -> dict:
    """Stack the row blocks of each name into one preallocated ``[totals[name], D]`` tensor, the
    blocks read once (peak: the results and one part).

    Args:
        parts: an iterable of ``{name: [rows, D] block}`` (a shard's tensors), in row order.
        totals: ``{name: rows}`` of the results.
        allocate: ``(name, shape, dtype) -> tensor`` that makes each result (default
            ``torch.empty`` on ``device``; the build maps them to files, :func:`mapped_empty`).

    Returns:
        ``{name: tensor}``; a name no part holds is None.
    """
    if allocate is None:
        def allocate(name, shape, dtype):
            return torch.empty(shape, dtype=dtype, device=device)
    out, row = dict.fromkeys(totals), dict.fromkeys(totals, 0)
    for part in parts:
        for name in totals:
            block = part[name]
            if out[name] is None:
                out[name] = allocate(name, (totals[name], block.shape[1]), block.dtype)
            out[name][row[name]:row[name] + len(block)] = block.to(device)
            row[name] += len(block)
    for name, total in totals.items():
        if out[name] is not None and row[name] != total:
            raise RuntimeError(f"shards hold {row[name]} rows of {name}, expected {total}")
    return out
