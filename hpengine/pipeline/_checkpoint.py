"""Resumable evaluation: each finished batch of predictions is appended to a JSONL file and
fsynced before the next batch starts, so a killed ``eval`` (an LLM-mode run of hours) resumes
where it stopped instead of starting over.

Layout: the first line is a header ``{"hpengine_eval_checkpoint": 1, "run": {...}}`` naming what
produced the predictions (method, its config, the hop config, the index, the LLM); each further
line is one batch ``{"positions", "ids", "predictions", "wall", "seconds", "llm"}`` with the
batch's wall time, its stage seconds and its LLM token counts, so a resumed run reports the
cost of all its batches, not only of the last process. A file written by a different run is
refused (one line naming the first setting that differs); a torn last line (the process was
killed while writing it) is dropped and its batch runs again.

Under torchrun each rank appends to its own file: rank 0 to FILE, rank ``r`` to ``FILE.rank<r>``
(:func:`rank_path`), so no two processes write one file. A run resumes from FILE and every
``FILE.rank<r>`` beside it, whatever world size wrote them: one process resumes a torchrun run,
and a torchrun run of any size resumes one process's or another world size's.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict
from pathlib import Path

from hpengine.errors import UserError
from hpengine.pipeline._types import ChainFact, HopRecord, Prediction

FORMAT = 1
LLM_KEYS = ("tokens_in", "tokens_out", "repeats")


def _model_name(component) -> str:
    """The model a decomposer / reader runs: its HF folder or hub id, else the component's class."""
    return getattr(getattr(component, "model", None), "name_or_path", "") or type(component).__name__


def run_fingerprint(engine) -> dict:
    """What decides an engine's predictions: method, its config, the hop config, the index
    (corpus, encoder, passage / fact / entity counts), the LLM (the decomposer's and reader's
    model) and, in LLM mode, the versions of the LLM prompts; JSON-safe."""
    from hpengine.models import QA_PROMPT_VERSIONS

    meta = engine.index.meta
    llm = {name: _model_name(c) for name, c in (("decomposer", engine.decomposer), ("reader", engine.reader))
           if c is not None}
    return json.loads(json.dumps({
        "method": engine.method, "engine": asdict(engine.config), "retrieval": asdict(engine.retrieval),
        "index": {k: meta.get(k) for k in ("corpus", "encoder", "num_passages", "num_facts", "num_entities")},
        "llm": llm, "prompts": dict(QA_PROMPT_VERSIONS) if llm else None,
    }, default=str))


def prediction_to_json(p: Prediction) -> dict:
    return asdict(p)


def prediction_from_json(d: dict) -> Prediction:
    chain = [HopRecord(h["subquery"], h["answer"], [ChainFact(**f) for f in h["facts"]], list(h["linked"]))
             for h in d["chain"]]
    return Prediction(d["question"], d["answer"], chain, list(d["passages"]), list(d.get("diagnostics", [])),
                      list(d.get("notes", [])), [dict(x) for x in d.get("paths", [])])


def _key(question) -> str:
    """A question's identity in the file: its id and text (ids alone repeat across files)."""
    return f"{question.id}\t{question.question}"


def rank_path(path, rank: int) -> Path:
    """The file rank ``rank`` of a torchrun eval appends to: ``path`` itself for rank 0 (and one
    process), ``path.rank<rank>`` for the others."""
    path = Path(path)
    return path if rank == 0 else path.with_name(f"{path.name}.rank{rank}")


def checkpoint_files(path) -> list:
    """``path`` and the rank files beside it (``path.rank<r>``) that exist, rank 0 first."""
    path = Path(path)
    pattern = re.compile(re.escape(path.name) + r"\.rank([1-9][0-9]*)")
    found = (pattern.fullmatch(f.name) for f in path.parent.iterdir()) if path.parent.is_dir() else ()
    ranks = sorted(int(m.group(1)) for m in found if m)
    return [f for f in (path, *(rank_path(path, r) for r in ranks)) if f.is_file()]


def _first_difference(a, b, path: str = "") -> str:
    """The first key path where two JSON values differ, with both values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in [*a, *(k for k in b if k not in a)]:  # the run's own order: method first
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else k)
    return f"{path}: {b!r} in the file, {a!r} now"


class EvalCheckpoint:
    """The batches already finished by earlier runs, and the writer of new ones.

    Args:
        path: the JSONL file FILE (created with its header when missing).
        run: :func:`run_fingerprint` of the engine about to run.
        questions: the run's questions (after ``max_questions``); a recorded batch must name the
            same question ids at the same positions.
        rank: the torchrun rank that writes (to :func:`rank_path` of ``path``); 0 for one process.
        read_others: also read the other files of the run now (:meth:`read_others`); a torchrun
            rank opens only its own file and rank 0 reads the others once every rank has opened its own.

    ``done`` maps each finished position to its prediction; ``wall`` and ``seconds`` are the
    earlier processes' wall time and stage seconds: a file's batches summed, the longest file's
    when there are several (the ranks ran side by side, as a torchrun result reports this run's
    ranks); ``llm`` sums every file's batches.

    Raises:
        UserError: a file is not a checkpoint, was written by a different run, or records
            questions this run does not have at those positions.
    """

    def __init__(self, path: str, run: dict, questions: list, *, rank: int = 0, read_others: bool = True):
        self.path, self._base = rank_path(path, rank), Path(path)
        self._run, self._questions = run, questions
        self.done: dict = {}  # position -> Prediction
        self.wall = 0.0
        self.seconds: dict = {}
        self.llm = {k: 0 for k in LLM_KEYS}
        if Path(path).is_dir():
            raise UserError(f"eval.checkpoint={path!r} is a folder; give a file path (a .jsonl file)")
        if self.path.exists() and self.path.stat().st_size > 0:
            self._load(self.path, own=True)
        if read_others:  # before this file is created: a refused run writes nothing
            self.read_others()
        if not (self.path.exists() and self.path.stat().st_size > 0):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._append({"hpengine_eval_checkpoint": FORMAT, "run": run})

    def read_others(self) -> None:
        """Read the run's other files (FILE and its rank files, :func:`checkpoint_files`) into
        ``done`` and the totals, read-only: a torn last line there is skipped, not repaired (its
        writer is another process)."""
        for other in checkpoint_files(self._base):
            if other != self.path and other.stat().st_size > 0:
                self._load(other, own=False)

    def _load(self, path: Path, own: bool) -> None:
        run, questions = self._run, self._questions
        lines = path.read_text(encoding="utf-8").split("\n")
        try:
            head = json.loads(lines[0])
        except json.JSONDecodeError:
            head = None
        if not isinstance(head, dict) or head.get("hpengine_eval_checkpoint") != FORMAT:
            raise UserError(f"eval.checkpoint={str(path)!r} is not an hpengine eval checkpoint (line 1); "
                            f"give a new path")
        if head.get("run") != run:
            raise UserError(f"eval.checkpoint={str(path)!r} was written by a different run "
                            f"({_first_difference(run, head.get('run'))}); give a new path or delete it")
        body = [ln for ln in lines[1:] if ln.strip()]
        good = []
        for n, line in enumerate(body):
            try:
                good.append(json.loads(line))
            except json.JSONDecodeError:
                if n != len(body) - 1:
                    raise UserError(f"eval.checkpoint={str(path)!r}: line {n + 2} is not JSON (only a "
                                    f"torn last line is dropped); give a new path") from None
        if own and len(good) < len(body):  # a torn last line: rewrite the file without it, atomically
            self._rewrite(head, good)
        wall, seconds = 0.0, {}
        for batch in good:
            for pos, qid, pred in zip(batch["positions"], batch["ids"], batch["predictions"]):
                if pos >= len(questions) or _key(questions[pos]) != qid:
                    raise UserError(f"eval.checkpoint={str(path)!r} records question {qid!r} at position "
                                    f"{pos}, which this run's questions do not have there; give a new path")
                self.done.setdefault(pos, prediction_from_json(pred))
            wall += batch["wall"]
            for k, v in batch["seconds"].items():
                seconds[k] = seconds.get(k, 0.0) + v
            for k in LLM_KEYS:
                self.llm[k] += batch["llm"].get(k, 0)
        self.wall = max(self.wall, wall)
        for k, v in seconds.items():
            self.seconds[k] = max(self.seconds.get(k, 0.0), v)

    def _rewrite(self, head: dict, batches: list) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for obj in [head, *batches]:
                f.write(json.dumps(obj, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def _append(self, obj: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def add(self, positions: list, questions: list, preds: list, wall: float, seconds: dict, llm: dict) -> None:
        """Record one finished batch (durable when this returns)."""
        self._append({"positions": positions, "ids": [_key(q) for q in questions],
                      "predictions": [prediction_to_json(p) for p in preds], "wall": wall,
                      "seconds": seconds, "llm": llm})
