"""Per-stage wall time and peak memory, for build and evaluation reports."""
from __future__ import annotations

import resource
import time
from contextlib import contextmanager

import torch


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux ``ru_maxrss`` is KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class StageTimer:
    """Collects ``{stage: seconds}``; CUDA work is synchronised before reading clocks.

    Example:
        >>> t = StageTimer()
        >>> with t.stage("extract"):
        ...     pass
        >>> list(t.seconds)
        ['extract']
    """

    def __init__(self, device=None):
        self.seconds: dict[str, float] = {}
        self._cuda = device is not None and torch.device(device).type == "cuda"

    @contextmanager
    def stage(self, name: str):
        if self._cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        try:
            yield
        finally:
            if self._cuda:
                torch.cuda.synchronize()
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def report(self) -> dict:
        out = {"seconds": {k: round(v, 3) for k, v in self.seconds.items()},
               "total_seconds": round(sum(self.seconds.values()), 3),
               "peak_rss_mb": round(peak_rss_mb(), 1)}
        if self._cuda:
            out["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        return out
