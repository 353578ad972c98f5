"""Evaluation over ``torchrun``.

The questions are cut into the batches a single process would run
(``eval.batch_size``); batch ``b`` goes to rank ``b % world_size``. Each rank answers its batches
with its own engine; all ranks exchange their predictions (one ``all_gather_object``) and rank 0
scores them with :func:`~hpengine.jobs.evaluate` in the original order, so the metrics and the
per-question records are those of a single process, not merely close (every batch is the same
batch). Timing fields (``seconds``, ``wall_seconds``, ``questions_per_second``, ``peak_rss_mb``)
describe the distributed run; ``distributed`` adds the world size, backend and per-rank numbers.
With ``eval.checkpoint=FILE`` each rank appends its finished batches to its own file (rank 0 to
FILE, rank r to ``FILE.rank<r>``); a rerun, of any world size or one process, reads them all and
deals out only the questions they lack (:func:`evaluate_distributed`).
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import time

from hpengine._profiling import peak_rss_mb
from hpengine.distributed._launch import _dist, _exchange, _map_devices, launched_by_torchrun, process_group
from hpengine.errors import UserError

#: environment variable of a test hook: the rank named fails while answering its batches
FAIL_RANK_ENV = "HPENGINE_TEST_FAIL_RANK"
_TIMING_KEYS = ("seconds", "wall_seconds", "questions_per_second", "peak_rss_mb")


# ---------------------------------------------------------------- sharding
def shard_batches(num_questions: int, batch_size: int, rank: int, world_size: int) -> list:
    """The batches of rank ``rank``: ``range`` s of question positions, batch ``b`` for ``b % world_size == rank``.

    Example:
        >>> shard_batches(10, 3, 1, 2)
        [range(3, 6), range(9, 10)]
    """
    if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need batch_size >= 1 and 0 <= rank < world_size (got {batch_size}, {rank}, {world_size})")
    starts = range(0, num_questions, batch_size)
    return [range(s, min(s + batch_size, num_questions)) for b, s in enumerate(starts) if b % world_size == rank]


def _rank_batches(todo: list, batch_size: int, rank: int, world_size: int) -> list:
    """Rank ``rank``'s batches of the positions ``todo``: cut in order into batches of
    ``batch_size`` (the batches one process runs on ``todo``), batch ``b`` for ``b % world_size == rank``.
    With every position to do these are :func:`shard_batches`."""
    batches = [todo[s: s + batch_size] for s in range(0, len(todo), batch_size)]
    return batches[rank::world_size]


def shard_questions(questions: list, batch_size: int, group=None) -> list:
    """This rank's share of ``questions`` over an initialised process group, by whole batches.

    Batch ``b`` (questions ``[b * batch_size, (b + 1) * batch_size)``) belongs to rank
    ``b % world_size``; the share keeps the original order. Answering each share in batches of
    ``batch_size`` runs exactly the batches one process would.

    Returns:
        ``[(position, question), ...]`` of this rank.
    """
    dist = _dist()
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    return [(i, questions[i]) for r in shard_batches(len(questions), batch_size, rank, world) for i in r]


def _fail_hook(rank: int, finished: int) -> None:
    """The test hook ``$HPENGINE_TEST_FAIL_RANK``: ``R`` fails rank R before its first batch,
    ``R:N`` after its first N batches (what a kill leaves in a checkpoint)."""
    hook = os.environ.get(FAIL_RANK_ENV, "")
    if not hook:
        return
    who, _, after = hook.partition(":")
    if who == str(rank) and finished == int(after or 0):
        raise RuntimeError(f"{FAIL_RANK_ENV}={hook}: this rank fails on purpose (test hook)")


def _answer_share(engine, questions: list, batches: list, rank: int, progress: bool, ckpt=None) -> dict:
    """Answer this rank's ``batches`` (lists of positions); with ``ckpt``, append each finished batch to it."""
    from tqdm.auto import tqdm

    from hpengine.jobs import answer_batch

    start = time.perf_counter()
    answered = []
    bar = tqdm(total=sum(len(b) for b in batches), desc=f"questions (rank {rank})", disable=not progress)
    for n, positions in enumerate(batches):
        _fail_hook(rank, n)
        answered.append((list(positions), answer_batch(engine, positions, [questions[i] for i in positions], ckpt)))
        bar.update(len(positions))
    bar.close()
    stats = {name: dict(c.stats) for name, c in (("decomposer", engine.decomposer), ("reader", engine.reader))
             if c is not None}
    stats["models"] = [dict(m.stats) for m in engine.llm_components()]  # what the token counts sum
    return {"answered": answered, "seconds": dict(engine.timer.seconds), "stats": stats,
            "wall_seconds": time.perf_counter() - start, "questions": sum(len(b) for b in batches),
            "peak_rss_mb": peak_rss_mb(), "device": str(engine.index.device)}


def answer_distributed(engine, questions: list, batch_size: int, *, group=None, progress: bool = False) -> list:
    """Answer ``questions`` over an initialised process group; every rank gets all predictions.

    Each rank answers its batches (:func:`shard_questions`) with ``engine``; the predictions
    are exchanged and returned in the original order, equal to ``engine.answer`` run batch by
    batch in one process. ``questions`` are strings or :class:`~hpengine.eval.Question` s and
    must be the same list on every rank.

    Example (every rank, after ``torch.distributed.init_process_group``)::

        preds = answer_distributed(Engine(index, encoder), questions, batch_size=64)

    Raises:
        UserError / RuntimeError: on every rank, when any rank failed (its error).
    """
    dist = _dist()
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    mine = _rank_batches(list(range(len(questions))), batch_size, rank, world)
    shares = _exchange(lambda: _answer_share(engine, questions, mine, rank, progress), group)
    return _ordered(shares, len(questions))


def _ordered(shares: list, num_questions: int, done: dict | None = None) -> list:
    """The predictions of every position in order: the ranks' answered batches and ``done`` (position -> prediction)."""
    by_position = dict(done or {})
    for share in shares:
        for positions, preds in share["answered"]:
            by_position.update(zip(positions, preds))
    return [by_position[i] for i in range(num_questions)]


class _StatsOnly:
    """Stands for a rank's decomposer or reader in :func:`evaluate`: only its summed ``stats``."""

    def __init__(self, stats: dict):
        self.stats = stats


def _summed(stats: list) -> _StatsOnly:
    """One model's stats summed over the ranks (numbers only)."""
    keys = {k for st in stats for k in st}
    return _StatsOnly({k: sum(st.get(k, 0) for st in stats) for k in keys
                       if all(isinstance(st.get(k, 0), (int, float)) for st in stats)})


class _Gathered:
    """What :func:`~hpengine.jobs.evaluate` reads of an engine, replaying gathered predictions
    (and those of a checkpoint's earlier runs, whose stage seconds and token counts it adds)."""

    def __init__(self, engine, shares: list, num_questions: int, ckpt=None):
        self.index, self.method = engine.index, engine.method
        self._preds = _ordered(shares, num_questions, ckpt.done if ckpt is not None else None)
        self._next = 0
        self.timer = type("Timer", (), {})()
        stages = sorted({k for s in shares for k in s["seconds"]})
        self.timer.seconds = {k: max(s["seconds"].get(k, 0.0) for s in shares) for k in stages}
        self.decomposer = self.reader = None
        for name in ("decomposer", "reader"):
            if name in shares[0]["stats"]:
                setattr(self, name, _summed([s["stats"][name] for s in shares]))
        # the ranks list the same models in the same order (a method's own, built lazily, last; a
        # rank that answered nothing may lack it): sum each over the ranks
        per_model = itertools.zip_longest(*(s["stats"]["models"] for s in shares), fillvalue={})
        self._models = [_summed(list(stats)) for stats in per_model]
        if ckpt is not None:  # the batches of earlier runs count too
            for k, v in ckpt.seconds.items():
                self.timer.seconds[k] = self.timer.seconds.get(k, 0.0) + v
            self._models.append(_StatsOnly(dict(ckpt.llm)))

    def llm_components(self) -> list:
        return list(self._models)

    def answer(self, questions: list) -> list:
        preds = self._preds[self._next: self._next + len(questions)]
        assert [p.question for p in preds] == list(questions), "gathered predictions out of order"
        self._next += len(questions)
        return preds


def _open_checkpoint(engine, questions: list, path: str, rank: int, group=None):
    """Every rank opens its own checkpoint file (:func:`~hpengine.jobs.rank_path`);
    then rank 0 reads all files of the run. Returns this rank's checkpoint (rank 0's knows every
    finished prediction) and the finished positions, the same list on every rank.

    Raises:
        UserError: on every rank, when a file is refused, or when rank 0 cannot see another rank's
            file (the path must be on a file system every rank sees).
    """
    from pathlib import Path

    from hpengine.jobs import EvalCheckpoint, run_fingerprint

    run = run_fingerprint(engine)
    opened = {}

    def own():
        opened["ckpt"] = EvalCheckpoint(path, run, questions, rank=rank, read_others=False,
                                        num_passages=engine.index.num_passages)
        return str(opened["ckpt"].path.absolute())

    # a barrier too: every rank has created its file before rank 0 reads them, and no rank writes
    # a batch before rank 0 has read them all
    own_files = _exchange(own, group)

    def read_all():
        if rank != 0:
            return None
        unseen = [(r, f) for r, f in enumerate(own_files) if not Path(f).is_file()]
        if unseen:
            r, f = unseen[0]
            raise UserError(f"eval.checkpoint: rank 0 cannot see rank {r}'s file {f!r}; put the checkpoint on a "
                            f"file system every rank sees (got eval.checkpoint={path!r})")
        opened["ckpt"].read_others()
        return sorted(opened["ckpt"].done)

    done = _exchange(read_all, group)[0]
    return opened["ckpt"], done


def evaluate_distributed(engine, questions: list, eval_cfg, progress: bool = True, *, group=None):
    """:func:`~hpengine.jobs.evaluate` over an initialised process group.

    Every rank calls it with its own engine and the same ``questions``; rank 0 returns the result
    (records and metrics equal to one process's; timing fields of this run plus ``distributed``),
    the other ranks return None.

    With ``eval_cfg.checkpoint`` = FILE, rank 0 appends its finished batches to FILE and rank r to
    ``FILE.rank<r>``; the questions that FILE and its rank files already hold (from runs of any
    world size, or one process) are not run again, and the rest are cut into batches as one
    process would cut them and dealt out in turn. FILE must be on a file system every rank sees.

    Raises:
        UserError / RuntimeError: on every rank, when any rank failed (its error).
    """
    from hpengine.jobs import evaluate

    dist = _dist()
    if eval_cfg.max_questions:
        questions = questions[: eval_cfg.max_questions]
    if not questions:
        raise UserError("no questions to evaluate (got 0)")
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    start = time.perf_counter()
    ckpt, done = None, []
    if eval_cfg.checkpoint:
        ckpt, done = _open_checkpoint(engine, questions, eval_cfg.checkpoint, rank, group)
    finished = set(done)
    todo = [i for i in range(len(questions)) if i not in finished]
    mine = _rank_batches(todo, eval_cfg.batch_size, rank, world)
    shares = _exchange(lambda: _answer_share(engine, questions, mine, rank, progress and rank == 0, ckpt), group)
    wall = time.perf_counter() - start
    if rank != 0:
        return None
    result = evaluate(_Gathered(engine, shares, len(questions), ckpt), questions,
                      dataclasses.replace(eval_cfg, checkpoint=""), progress=False)
    wall += ckpt.wall if ckpt is not None else 0.0
    result["wall_seconds"] = round(wall, 3)
    result["questions_per_second"] = round(len(questions) / wall, 3) if wall > 0 else None
    result["resumed_questions"] = len(done)
    result["peak_rss_mb"] = round(max(s["peak_rss_mb"] for s in shares), 1)
    backend = dist.get_backend(group)
    result["distributed"] = {
        "world_size": world, "backend": str(backend), "batch_size": eval_cfg.batch_size,
        "per_rank": [{"rank": r, "device": s["device"], "questions": s["questions"],
                      "wall_seconds": round(s["wall_seconds"], 3), "peak_rss_mb": round(s["peak_rss_mb"], 1),
                      "seconds": {k: round(v, 3) for k, v in s["seconds"].items()}} for r, s in enumerate(shares)],
    }
    # the records field last, as in evaluate()
    result["records"] = result.pop("records")
    return result


def strip_timing(result: dict) -> dict:
    """``result`` without the fields that depend on the run (timings, memory, ``distributed``,
    ``config``): what a distributed and a one-process evaluation share exactly."""
    return {k: v for k, v in result.items() if k not in (*_TIMING_KEYS, "distributed", "config")}


def run_eval_distributed(cfg, progress: bool = True):
    """``hpengine eval`` under torchrun: :func:`~hpengine.jobs.run_eval` with the work sharded.

    Outside torchrun (``WORLD_SIZE`` unset or 1) this is ``run_eval(cfg)``. Otherwise every rank
    checks the inputs, loads the index and models on its device, answers its batches; rank 0
    writes ``cfg.output`` and returns the result, the others return None.
    """
    from hpengine.jobs import run_eval

    if not launched_by_torchrun():
        return run_eval(cfg, progress)
    cfg = copy.deepcopy(cfg)
    _map_devices(cfg)
    with process_group(cfg.device):
        dist = _dist()
        evaluator = lambda engine, questions, eval_cfg, prog: evaluate_distributed(  # noqa: E731
            engine, questions, eval_cfg, prog and dist.get_rank() == 0)
        return run_eval(cfg, progress, evaluator=evaluator)
