"""The shards of a streaming index build (docs/scale.md#streaming-build).

A build cuts the corpus into shards of ``shard_size`` passages. Each shard is extracted and its
facts and passages embedded, then written to the build folder and dropped from memory, so the work
in flight is one shard's. A shard is two files::

    shard-<k>.safetensors   fact_emb [F_k, D] and passage_emb [P_k, D] (when passages are embedded)
    shard-<k>.json          its passage range and, per passage, its facts as (text, [entity name])

written in that order, each durably; the JSON is written last, so a shard whose JSON exists is
complete. ``build.json`` holds the fingerprint of the build (the passages and the settings that
change what a shard holds): a build started again with the same fingerprint skips the finished
shards (a killed build resumes), with another it starts afresh. Entities are numbered when the
shards are merged, in passage order, so the result does not depend on which shards ran when.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch
from torch import Tensor

from hpengine.graph._index import _save_tensors
from hpengine.graph._mmap import map_safetensors
from hpengine.graph._store import _fsync_dir, _kill_point, read_json, write_json_durable

BUILD_FORMAT = "hpengine-build"
BUILD_VERSION = 1
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
    """The folder of one build's shards.

    Args:
        folder: where the shards go (created when missing).
        fingerprint: :func:`build_fingerprint` of this build.
        num_shards: how many shards the build has.
    """

    def __init__(self, folder: str | os.PathLike, fingerprint: str, num_shards: int):
        self.folder = Path(folder)
        self.fingerprint = fingerprint
        self.num_shards = num_shards
        self._open()

    def _plan(self) -> dict:
        return {"format": BUILD_FORMAT, "format_version": BUILD_VERSION, "fingerprint": self.fingerprint,
                "num_shards": self.num_shards}

    def _open(self) -> None:
        """Keep the finished shards of the same build; start afresh otherwise."""
        plan_path = self.folder / PLAN_FILE
        if plan_path.is_file():
            try:
                same = read_json(plan_path) == self._plan()
            except Exception:  # an unreadable plan is a plan of no build: start afresh
                same = False
            if same:
                return
        self.folder.mkdir(parents=True, exist_ok=True)
        for entry in self.folder.iterdir():
            if entry.name.startswith("shard-") and entry.is_file():
                entry.unlink()
        write_json_durable(plan_path, self._plan())
        _fsync_dir(self.folder)

    def _paths(self, k: int) -> tuple:
        return self.folder / f"shard-{k:06d}.safetensors", self.folder / f"shard-{k:06d}.json"

    def done(self) -> list:
        """The shards whose files are complete, in order."""
        return [k for k in range(self.num_shards) if self._paths(k)[1].is_file()]

    def write(self, k: int, span: tuple, extracted: list, fact_emb: Tensor, passage_emb: Tensor | None) -> None:
        """Write shard ``k``: passages ``span = (lo, hi)``, ``extracted`` their facts (one list of
        ``ExtractedFact`` per passage).

        Shapes:
            fact_emb ``[F_k, D]`` (the shard's facts in passage order), passage_emb ``[hi - lo, D]``.
        """
        tensors_path, json_path = self._paths(k)
        tensors = {"fact_emb": fact_emb} if passage_emb is None else {"fact_emb": fact_emb, "passage_emb": passage_emb}
        tmp = tensors_path.with_name(tensors_path.name + ".tmp")
        _save_tensors(tensors, tmp)
        os.replace(tmp, tensors_path)
        write_json_durable(json_path, {"shard": k, "passages": list(span),
                                       "facts": [[[f.text, list(f.entities)] for f in facts] for facts in extracted]})
        _fsync_dir(self.folder)
        _kill_point("after-shard")

    def read_facts(self, k: int) -> list:
        """Shard ``k``'s facts: one list of ``ExtractedFact`` per passage."""
        from hpengine.models import ExtractedFact

        return [[ExtractedFact(text, list(names)) for text, names in facts]
                for facts in read_json(self._paths(k)[1])["facts"]]

    def read_tensors(self, k: int) -> dict:
        """Shard ``k``'s embeddings (``fact_emb``, and ``passage_emb`` when written), the file's
        header checked (a damaged shard is one line naming it). The tensors are views of a private
        mapping of the file: the merge copies them once, into the index's rows (no temporary copy of
        the shard; half the merge's time: benchmarks/README.md, "Structure and merge against N")."""
        return map_safetensors(self._paths(k)[0])


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
