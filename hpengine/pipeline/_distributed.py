"""Past one process: batch evaluation and index build over ``torch.distributed`` (``torchrun``).

**Evaluation.** The questions are cut into the batches a single process would run
(``eval.batch_size``); batch ``b`` goes to rank ``b % world_size``. Each rank answers its batches
with its own engine; all ranks exchange their predictions (one ``all_gather_object``) and rank 0
scores them with :func:`~hpengine.pipeline.evaluate` in the original order, so the metrics and the
per-question records are those of a single process, not merely close (every batch is the same
batch). Timing fields (``seconds``, ``wall_seconds``, ``questions_per_second``, ``peak_rss_mb``)
describe the distributed run; ``distributed`` adds the world size, backend and per-rank numbers.
With ``eval.checkpoint=FILE`` each rank appends its finished batches to its own file (rank 0 to
FILE, rank r to ``FILE.rank<r>``); a rerun, of any world size or one process, reads them all and
deals out only the questions they lack (:func:`evaluate_distributed`).

**Index build.** Every rank runs the same build (:func:`~hpengine.pipeline.run_index`) with a
rank-sharded extractor and encoder: each extracts its contiguous share of the passages and runs
its share of the encoder's own batches of each list of texts (facts, entity names, passages:
:class:`ShardedEncoder`), and the shares are gathered in order, so every rank holds the same
facts, entities and embeddings as one process (bit-identical: same padded batches; sharding texts
instead changed bf16 results by ~1e-3, enough to flip synonym pairs near the threshold); synonyms
and incidence are then built identically on every rank (no collectives) and only rank 0 saves
(atomic, as :meth:`~hpengine.graph.Index.save`).

**Failures.** Work between collectives runs inside :func:`_exchange`: a rank's exception is sent
to all ranks, every rank raises it (``rank R: message``; a :class:`~hpengine.errors.UserError`
stays one), and nothing is written. A rank that dies outright (killed, segfault) makes torchrun
stop the others; nothing is written either, since rank 0 writes only after the last exchange.

**Devices.** CPU: the ``gloo`` backend. CUDA (``device=cuda``): one GPU per rank,
``cuda:$LOCAL_RANK`` (every ``device`` field of the job that names CUDA is mapped to it), backend
``cpu:gloo,cuda:nccl`` (object exchanges go through gloo on the host, tensors through NCCL).
"""
from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import time
import traceback
from datetime import timedelta

import torch

from hpengine._profiling import peak_rss_mb
from hpengine.errors import UserError
from hpengine.graph import IndexStore

#: environment variable of a test hook: the rank named fails while answering its batches
FAIL_RANK_ENV = "HPENGINE_TEST_FAIL_RANK"
#: seconds a rank waits for the others at an exchange (LLM batches on one rank can be slow)
TIMEOUT_ENV = "HPENGINE_DIST_TIMEOUT"
_TIMING_KEYS = ("seconds", "wall_seconds", "questions_per_second", "peak_rss_mb")


# ------------------------------------------------------------ process group
def launched_by_torchrun() -> bool:
    """Whether this process is one of several started by ``torchrun`` (``WORLD_SIZE > 1``)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def check_torchrun_command(command: str) -> None:
    """Under torchrun (``WORLD_SIZE > 1``) only ``eval`` and ``index`` split their work; any other
    command would run whole on every rank (and ``add`` / ``demo`` would write one folder N times).

    Raises:
        UserError: ``command`` is another command and this process is one of several torchrun ranks.
    """
    if command not in ("eval", "index") and launched_by_torchrun():
        raise UserError(f"under torchrun only `hpengine eval` and `hpengine index` shard their work over the ranks; "
                        f"run {command} as one process (got {command} with WORLD_SIZE={os.environ['WORLD_SIZE']})")


def _dist():
    import torch.distributed as dist

    if not dist.is_available():
        raise UserError("this torch build has no torch.distributed; run without torchrun (got WORLD_SIZE="
                        f"{os.environ.get('WORLD_SIZE')})")
    return dist


def rank_device(device: str) -> str:
    """This rank's device for a job ``device``: ``cuda`` / ``cuda:i`` -> ``cuda:$LOCAL_RANK``; others unchanged."""
    if str(device).startswith("cuda"):
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


def _map_devices(obj) -> None:
    """Every ``device`` field of a job config (nested dataclasses) set to :func:`rank_device`."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == "device" and isinstance(value, str):
            setattr(obj, f.name, rank_device(value))
        elif dataclasses.is_dataclass(value):
            _map_devices(value)


def init_from_env(device: str = "cpu") -> bool:
    """Initialise the default process group from torchrun's environment unless one exists.

    Backend ``gloo`` for a CPU job; for a CUDA job the rank's GPU (``LOCAL_RANK``) becomes the
    current device and the backend is ``cpu:gloo,cuda:nccl``. The exchange timeout is
    ``$HPENGINE_DIST_TIMEOUT`` seconds (default one day: a rank waits at the final exchange while
    the others answer their LLM batches).

    Returns:
        True when this call created the group (the caller destroys it).
    """
    dist = _dist()
    if dist.is_initialized():
        return False
    backend = "gloo"
    if str(device).startswith("cuda"):
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "cpu:gloo,cuda:nccl"
    timeout = timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, 86400)))
    dist.init_process_group(backend=backend, timeout=timeout)
    return True


def _exchange(work, group=None) -> list:
    """Run ``work()`` on every rank and give every rank the list of all ranks' results.

    Raises:
        UserError / RuntimeError: on every rank, when ``work`` raised on any rank (the lowest such
            rank's error, prefixed ``rank R:``).
    """
    dist = _dist()
    try:
        status = (True, work())
    except Exception as exc:  # sent to every rank, raised below on all of them
        status = (False, (isinstance(exc, UserError), f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    gathered = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, status, group=group)
    for rank, (ok, payload) in enumerate(gathered):
        if not ok:
            is_user, message, trace = payload
            if is_user:
                raise UserError(f"rank {rank}: {message.split(': ', 1)[1]}")
            raise RuntimeError(f"rank {rank} failed: {message}\n--- traceback of rank {rank} ---\n{trace}")
    return [payload for _, payload in gathered]


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

    from hpengine.pipeline._eval_job import answer_batch

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
    """What :func:`~hpengine.pipeline.evaluate` reads of an engine, replaying gathered predictions
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
    """Every rank opens its own checkpoint file (:func:`~hpengine.pipeline._checkpoint.rank_path`);
    then rank 0 reads all files of the run. Returns this rank's checkpoint (rank 0's knows every
    finished prediction) and the finished positions, the same list on every rank.

    Raises:
        UserError: on every rank, when a file is refused, or when rank 0 cannot see another rank's
            file (the path must be on a file system every rank sees).
    """
    from pathlib import Path

    from hpengine.pipeline._checkpoint import EvalCheckpoint, run_fingerprint

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
    """:func:`~hpengine.pipeline.evaluate` over an initialised process group.

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
    from hpengine.pipeline._eval_job import evaluate

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
    """``hpengine eval`` under torchrun: :func:`~hpengine.pipeline.run_eval` with the work sharded.

    Outside torchrun (``WORLD_SIZE`` unset or 1) this is ``run_eval(cfg)``. Otherwise every rank
    checks the inputs, loads the index and models on its device, answers its batches; rank 0
    writes ``cfg.output`` and returns the result, the others return None.
    """
    from hpengine.pipeline._eval_job import run_eval

    if not launched_by_torchrun():
        return run_eval(cfg, progress)
    cfg = copy.deepcopy(cfg)
    _map_devices(cfg)
    created = init_from_env(cfg.device)
    try:
        dist = _dist()
        evaluator = lambda engine, questions, eval_cfg, prog: evaluate_distributed(  # noqa: E731
            engine, questions, eval_cfg, prog and dist.get_rank() == 0)
        return run_eval(cfg, progress, evaluator=evaluator)
    finally:
        if created:
            _dist().destroy_process_group()


# -------------------------------------------------------------- index build
class ShardedExtractor:
    """An extractor that extracts this rank's contiguous share of the passages and gathers all
    shares in order (every rank gets every passage's facts). ``stats`` sums the ranks'."""

    def __init__(self, inner, group=None):
        self.inner, self.group = inner, group
        self.stats: dict = {}
        self.own_seconds = 0.0

    def extract(self, passages: list, progress: bool = False) -> list:
        dist = _dist()
        rank, world = dist.get_rank(self.group), dist.get_world_size(self.group)
        lo, hi = _share(len(passages), rank, world)

        def work():
            start = time.perf_counter()
            out = self.inner.extract(passages[lo:hi], progress=progress and rank == 0) if hi > lo else []
            self.own_seconds += time.perf_counter() - start
            return out, dict(getattr(self.inner, "stats", None) or {})

        shares = _exchange(work, self.group)
        keys = {k for _, stats in shares for k in stats}
        self.stats = {k: sum(stats.get(k, 0) for _, stats in shares) for k in sorted(keys)
                      if all(isinstance(stats.get(k, 0), (int, float)) for _, stats in shares)}
        return [facts for part, _ in shares for facts in part]


class ShardedEncoder:
    """An encoder whose forward passes are spread over the ranks, with the embeddings of one process.

    For an :class:`~hpengine.models.Encoder` the texts are planned into the batches the encoder
    itself would run (``Encoder.plan_batches``: tokenised, sorted longest first, cut by
    ``max_tokens_per_batch`` or ``batch_size``); batch ``k`` runs on
    rank ``k % world_size`` as one forward pass over the same texts in the same order, so every
    embedding is computed from the same padded batch as in one process (bit-identical on the
    same hardware). Other encoders (no ``plan_batches``: one text at a time by contract, e.g.
    test fakes) get contiguous shares. The shares are all-gathered in input order, as float32 on the
    inner encoder's output device. Other attributes are the inner encoder's.
    """

    def __init__(self, inner, group=None):
        self.inner, self.group = inner, group
        self.own_seconds = 0.0

    def __getattr__(self, name):
        if name in ("inner", "group", "own_seconds"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def encode(self, texts: list, progress: bool = False, **kwargs):
        dist = _dist()
        rank, world = dist.get_rank(self.group), dist.get_world_size(self.group)
        texts = list(texts)
        if hasattr(self.inner, "plan_batches") and texts:
            plan = self.inner.plan_batches(texts, kind=kwargs.get("kind", "passage"),
                                           batch_size=kwargs.get("batch_size"))
            mine = [b for k, b in enumerate(plan) if k % world == rank]
        else:
            lo, hi = _share(len(texts), rank, world)
            mine = [list(range(lo, hi))] if hi > lo else []
        rest = {k: v for k, v in kwargs.items() if k != "batch_size"}

        def work():
            start = time.perf_counter()
            parts = [self.inner.encode([texts[i] for i in ids], batch_size=len(ids), **rest) for ids in mine]
            self.own_seconds += time.perf_counter() - start
            device = str(parts[0].device) if parts else None
            return [i for ids in mine for i in ids], (torch.cat(parts).detach().cpu() if parts else None), device

        shares = _exchange(work, self.group)
        if not texts:
            return self.inner.encode([], **kwargs)
        dim = next(e.shape[1] for _, e, _ in shares if e is not None)
        out = torch.empty(len(texts), dim, dtype=torch.float32)
        for ids, emb, _ in shares:
            if ids:
                out[torch.tensor(ids)] = emb.float()
        device = next(d for _, e, d in shares if d is not None)
        return out.to(shares[rank][2] or device)


def _share(n: int, rank: int, world: int) -> tuple:
    """``[lo, hi)`` of rank ``rank`` in ``world`` contiguous near-equal shares of ``n`` items."""
    base, extra = divmod(n, world)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (rank < extra)


def run_index_distributed(cfg, *, overwrite: bool = False, progress: bool = True):
    """``hpengine index`` under torchrun: :func:`~hpengine.pipeline.run_index` with extraction and
    embedding sharded over the ranks; rank 0 saves and returns ``(index, report)``, the others
    return None. Outside torchrun this is ``run_index``.

    The LLM extractor's cache is per rank (``<cache_dir>/rank<R>of<N>``), so a killed run resumes
    when restarted with the same number of ranks.
    """
    from hpengine.pipeline._index_job import run_index

    if not launched_by_torchrun():
        return run_index(cfg, overwrite=overwrite, progress=progress)
    cfg = copy.deepcopy(cfg)
    _map_devices(cfg)
    created = init_from_env(cfg.device)
    try:
        dist = _dist()
        rank, world = dist.get_rank(), dist.get_world_size()
        if cfg.extractor.kind == "llm":
            from pathlib import Path

            base = cfg.extractor.cache_dir or str(IndexStore(cfg.out).extract_cache)
            cfg.extractor.cache_dir = os.path.join(base, f"rank{rank}of{world}")
        wrapped = {}

        def wrap(extractor, encoder):
            wrapped["extractor"], wrapped["encoder"] = ShardedExtractor(extractor), ShardedEncoder(encoder)
            return wrapped["extractor"], wrapped["encoder"]

        out = run_index(cfg, overwrite=overwrite, progress=progress and rank == 0, wrap=wrap,
                        save=lambda index: _exchange(lambda: index.save(cfg.out) if rank == 0 else None))
        mine = {"rank": rank, "extract_seconds": round(wrapped["extractor"].own_seconds, 3),
                "embed_seconds": round(wrapped["encoder"].own_seconds, 3), "peak_rss_mb": round(peak_rss_mb(), 1)}
        per_rank = [None] * world
        dist.all_gather_object(per_rank, mine)
        if rank != 0:
            return None
        index, report = out
        report["distributed"] = {"world_size": world, "backend": str(dist.get_backend()), "per_rank": per_rank}
        return index, report
    finally:
        if created:
            _dist().destroy_process_group()
