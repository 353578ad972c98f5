"""Resumable evaluation: each finished batch of predictions is appended to a JSONL file and
fsynced before the next batch starts, so a killed ``eval`` (an LLM-mode run of hours) resumes
where it stopped instead of starting over.

Layout: the first line is a header ``{"hpengine_eval_checkpoint": 1, "run": {...}}`` naming what
produced the predictions (method, its config, the hop config, the index, the LLM); each further
line is one batch ``{"positions", "ids", "predictions", "wall", "seconds", "llm"}`` with the
batch's wall time, its stage seconds and its LLM token counts, so a resumed run reports the
cost of all its batches, not only of the last process. A file written by a different run is
refused (one line naming the first setting that differs); a torn last line (the process was
killed while writing it: not JSON, or not UTF-8) is dropped and its batch runs again. Every other
line must have the shape :meth:`EvalCheckpoint.add` writes, to the last field of the last
prediction; a line that does not is refused with one line naming the file, the line and the field.

Under torchrun each rank appends to its own file: rank 0 to FILE, rank ``r`` to ``FILE.rank<r>``
(:func:`rank_path`), so no two processes write one file. A run resumes from FILE and every
``FILE.rank<r>`` beside it, whatever world size wrote them: one process resumes a torchrun run,
and a torchrun run of any size resumes one process's or another world size's.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict
from pathlib import Path

from hpengine.errors import UserError
from hpengine.pipeline import ChainFact, HopRecord, Prediction

FORMAT = 1
LLM_KEYS = ("tokens_in", "tokens_out", "repeats")
BATCH_KEYS = ("positions", "ids", "predictions", "wall", "seconds", "llm")
FACT_KEYS = {"text": str, "title": str, "passage": int, "score": float, "distance": int}


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


def check_checkpoint_path(path, key: str = "eval.checkpoint") -> None:
    """``path`` can be appended to: an existing file that opens for appending (nothing is written),
    or a new file whose folder exists or is created now. Cheap; entry points call it before any
    model loads, :class:`EvalCheckpoint` again before it reads anything.

    Raises:
        UserError: ``path`` is a folder, a file that refuses appends (read-only, a special file),
            or under a folder that cannot be created (a file on the way, no permission).
    """
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{key}={str(path)!r} is a folder; give a file path (a .jsonl file)")
    if p.exists():
        try:
            with open(p, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise UserError(f"{key}={str(path)!r} cannot be appended to ({exc.strerror or exc}); give a "
                            f"writable file") from None
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{key}={str(path)!r}: cannot create its folder {str(p.parent)!r} "
                        f"({exc.strerror or type(exc).__name__})") from None
    if not os.access(p.parent, os.W_OK | os.X_OK):
        raise UserError(f"{key}={str(path)!r}: its folder {str(p.parent)!r} is not writable")


class _ShapeError(Exception):
    """A field of a checkpoint line (``""``: the line itself) that is not what
    :meth:`EvalCheckpoint.add` writes, what it must be and what was found."""

    def __init__(self, field: str, expected: str, value):
        if isinstance(value, (list, dict)):
            got = f"{'a list' if isinstance(value, list) else 'an object'} of {len(value)}"
        else:
            got = f"{type(value).__name__} {value!r:.60}"
        super().__init__(field, expected, got)
        self.field, self.expected, self.got = field, expected, got


_MISSING = object()


def _need(ok: bool, field: str, expected: str, value) -> None:
    if not ok:
        raise _ShapeError(field, expected, value)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _get(obj: dict, key: str, where: str, expected: str, kind, default=_MISSING):
    """``obj[key]`` checked to be a ``kind`` (a missing key is refused unless ``default`` is given)."""
    field = f"{where}.{key}" if where else key
    value = obj.get(key, _MISSING)
    if value is _MISSING:
        if default is _MISSING:
            raise _ShapeError(field, f"present ({expected})", obj)
        return default
    ok = _is_int(value) if kind is int else _is_number(value) if kind is float else isinstance(value, kind)
    _need(ok, field, expected, value)
    return value


def _check_passage_ids(ids: list, where: str, num_passages) -> None:
    top = num_passages if _is_int(num_passages) else None
    expected = f"a passage id in [0, {top})" if top is not None else "a passage id >= 0"
    for j, p in enumerate(ids):
        _need(_is_int(p) and p >= 0 and (top is None or p < top), f"{where}[{j}]", expected, p)


def _check_prediction(pred, where: str, num_passages) -> None:
    """One prediction as :func:`prediction_to_json` writes it."""
    _need(isinstance(pred, dict), where, "an object (a prediction)", pred)
    _get(pred, "question", where, "a string", str)
    _get(pred, "answer", where, "a string", str)
    chain = _get(pred, "chain", where, "a list of hop records", list)
    _check_passage_ids(_get(pred, "passages", where, "a list of passage ids", list), f"{where}.passages", num_passages)
    for t, hop in enumerate(chain):
        at = f"{where}.chain[{t}]"
        _need(isinstance(hop, dict), at, "an object {subquery, answer, facts, linked}", hop)
        _get(hop, "subquery", at, "a string", str)
        _get(hop, "answer", at, "a string", str)
        _check_passage_ids(_get(hop, "linked", at, "a list of passage ids", list), f"{at}.linked", num_passages)
        for j, fact in enumerate(_get(hop, "facts", at, "a list of facts", list)):
            fat = f"{at}.facts[{j}]"
            _need(isinstance(fact, dict) and set(fact) == set(FACT_KEYS), fat,
                  f"an object with exactly {sorted(FACT_KEYS)}", fact)
            for key, kind in FACT_KEYS.items():  # a score may be -inf (JSON -Infinity): any number
                _get(fact, key, fat, {str: "a string", int: "an int", float: "a number"}[kind], kind)
    for t, hop in enumerate(_get(pred, "diagnostics", where, "a list of hops", list, default=[])):
        at = f"{where}.diagnostics[{t}]"
        _need(isinstance(hop, dict) and "selected" in hop, at, "an object {stage: passage ids} with 'selected'", hop)
        for stage, ids in hop.items():
            _need(isinstance(ids, list), f"{at}.{stage}", "a list of passage ids", ids)
            _check_passage_ids(ids, f"{at}.{stage}", num_passages)
    for j, note in enumerate(_get(pred, "notes", where, "a list of strings", list, default=[])):
        _need(isinstance(note, str), f"{where}.notes[{j}]", "a string", note)
    steps = 0
    for j, path in enumerate(_get(pred, "paths", where, "a list of paths", list, default=[])):
        at = f"{where}.paths[{j}]"
        _need(isinstance(path, dict), at, "an object {steps, answer, score}", path)
        n = _get(path, "steps", at, "an int >= 0", int)
        _need(n >= 0, f"{at}.steps", "an int >= 0", n)
        _get(path, "answer", at, "a string", str)
        _get(path, "score", at, "a number", float)
        steps += n
    # path j's steps are the next records of the chain (Prediction.paths)
    _need(steps <= len(chain), f"{where}.paths", f"paths of at most the {len(chain)} chain records in all", steps)


def _check_batch(batch, num_passages) -> None:
    """One batch line as :meth:`EvalCheckpoint.add` writes it, every field.

    Raises:
        _ShapeError: naming the first field that is missing or of the wrong type or length.
    """
    if not isinstance(batch, dict):
        raise _ShapeError("", f"a JSON object with {list(BATCH_KEYS)}", batch)
    positions = _get(batch, "positions", "", "a non-empty list of positions", list)
    _need(len(positions) > 0, "positions", "a non-empty list of positions", positions)
    for j, pos in enumerate(positions):
        _need(_is_int(pos) and pos >= 0, f"positions[{j}]", "an int >= 0", pos)
    n = len(positions)
    ids = _get(batch, "ids", "", f"a list of {n} question keys, one per position", list)
    _need(len(ids) == n, "ids", f"a list of {n} question keys, one per position", ids)
    for j, key in enumerate(ids):
        _need(isinstance(key, str), f"ids[{j}]", "a string", key)
    preds = _get(batch, "predictions", "", f"a list of {n} predictions, one per position", list)
    _need(len(preds) == n, "predictions", f"a list of {n} predictions, one per position", preds)
    for j, pred in enumerate(preds):
        _check_prediction(pred, f"predictions[{j}]", num_passages)
    wall = _get(batch, "wall", "", "a number of seconds >= 0", float)
    _need(math.isfinite(wall) and wall >= 0, "wall", "a number of seconds >= 0", wall)
    seconds = _get(batch, "seconds", "", "an object {stage: seconds}", dict)
    for stage, value in seconds.items():
        _need(_is_number(value) and math.isfinite(value) and value >= 0, f"seconds.{stage}", "a number >= 0", value)
    llm = _get(batch, "llm", "", f"an object {{{', '.join(LLM_KEYS)}}}", dict)
    for key in LLM_KEYS:
        if key in llm:
            _need(_is_int(llm[key]) and llm[key] >= 0, f"llm.{key}", "an int >= 0", llm[key])


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
        num_passages: the index's passages (recorded passage ids must be below it); default: the
            run's ``index.num_passages`` when it names one.

    ``done`` maps each finished position to its prediction; ``wall`` and ``seconds`` are the
    earlier processes' wall time and stage seconds: a file's batches summed, the longest file's
    when there are several (the ranks ran side by side, as a torchrun result reports this run's
    ranks); ``llm`` sums every file's batches.

    Raises:
        UserError: the file cannot be appended to (:func:`check_checkpoint_path`), a file is not a
            checkpoint, was written by a different run, has a line of the wrong shape (naming the
            line and the field), or records questions this run does not have at those positions.
    """

    def __init__(self, path: str, run: dict, questions: list, *, rank: int = 0, read_others: bool = True,
                 num_passages: int | None = None):
        self.path, self._base = rank_path(path, rank), Path(path)
        self._run, self._questions = run, questions
        index = run.get("index") if isinstance(run, dict) else None
        self._num_passages = num_passages if num_passages is not None else (
            index.get("num_passages") if isinstance(index, dict) else None)
        self.done: dict = {}  # position -> Prediction
        self.wall = 0.0
        self.seconds: dict = {}
        self.llm = {k: 0 for k in LLM_KEYS}
        if Path(path).is_dir():
            raise UserError(f"eval.checkpoint={path!r} is a folder; give a file path (a .jsonl file)")
        check_checkpoint_path(self.path)  # before anything is read: a run that cannot record its work does none
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
        lines = path.read_bytes().split(b"\n")  # decoded line by line: a kill can cut a character in two
        try:
            head = json.loads(lines[0].decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            head = None
        if not isinstance(head, dict) or head.get("hpengine_eval_checkpoint") != FORMAT:
            raise UserError(f"eval.checkpoint={str(path)!r} is not an hpengine eval checkpoint (line 1); "
                            f"give a new path")
        if head.get("run") != run:
            raise UserError(f"eval.checkpoint={str(path)!r} was written by a different run "
                            f"({_first_difference(run, head.get('run'))}); give a new path or delete it")
        body = [(n, ln) for n, ln in enumerate(lines[1:], start=2) if ln.strip()]  # n: the line in the file
        good = []
        for j, (n, line) in enumerate(body):
            try:
                batch = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):  # JSONDecodeError is a ValueError
                if j != len(body) - 1:
                    raise UserError(f"eval.checkpoint={str(path)!r}: line {n} is not JSON (only a "
                                    f"torn last line is dropped); give a new path") from None
                continue
            try:
                _check_batch(batch, self._num_passages)
            except _ShapeError as err:
                what = f"line {n}: field {err.field!r}" if err.field else f"line {n}"
                raise UserError(f"eval.checkpoint={str(path)!r}: {what} must be {err.expected} (got {err.got}); "
                                f"not a batch hpengine wrote: give a new path or delete the file") from None
            good.append((n, batch))
        if own and len(good) < len(body):  # a torn last line: rewrite the file without it, atomically
            self._rewrite(head, [batch for _, batch in good])
        wall, seconds = 0.0, {}
        for n, batch in good:
            for j, (pos, qid, pred) in enumerate(zip(batch["positions"], batch["ids"], batch["predictions"])):
                if pos >= len(questions) or _key(questions[pos]) != qid:
                    raise UserError(f"eval.checkpoint={str(path)!r}: line {n} records question {qid!r:.80} at "
                                    f"position {pos}, which this run's questions do not have there; give a new path")
                if pred["question"] != questions[pos].question:
                    raise UserError(f"eval.checkpoint={str(path)!r}: line {n}: field 'predictions[{j}].question' "
                                    f"must be the question at position {pos} (got {pred['question']!r:.80}); "
                                    f"give a new path or delete the file")
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
