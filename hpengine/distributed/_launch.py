"""The process group under ``torchrun``: whether this process is a rank, its device, the group's
set-up, and the exchange every sharded job runs its work in.

**Failures.** Work between collectives runs inside :func:`_exchange`: a rank's exception is sent
to all ranks, every rank raises it (``rank R: message``; a :class:`~hpengine.errors.UserError`
stays one), and nothing is written. A rank that dies outright (killed, segfault) makes torchrun
stop the others; nothing is written either, since rank 0 writes only after the last exchange.

**Devices.** CPU: the ``gloo`` backend. CUDA (``device=cuda``): one GPU per rank,
``cuda:$LOCAL_RANK`` (every ``device`` field of the job that names CUDA is mapped to it), backend
``cpu:gloo,cuda:nccl`` (object exchanges go through gloo on the host, tensors through NCCL).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import traceback
from datetime import timedelta

import torch

from hpengine.errors import UserError

#: seconds a rank waits for the others at an exchange (LLM batches on one rank can be slow)
TIMEOUT_ENV = "HPENGINE_DIST_TIMEOUT"


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


@contextlib.contextmanager
def process_group(device: str = "cpu"):
    """The job's process group: :func:`init_from_env` on entry; on exit, when this call created it,
    a barrier then ``destroy_process_group``.

    The barrier (normal exit only) keeps a rank from tearing its connections down while a peer
    still finishes the last exchange: a rank that exits first made gloo abort the peer at shutdown
    now and then (SIGABRT, "terminate called without an active exception"). On an exception there
    is no barrier: a rank that died before it would leave the others waiting for the timeout.
    """
    created = init_from_env(device)
    ok = False
    try:
        yield created
        ok = True
    finally:
        if created:
            dist = _dist()
            if ok:
                dist.barrier()
            dist.destroy_process_group()


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
