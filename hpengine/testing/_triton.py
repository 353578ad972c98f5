"""A Triton kernel file's module for tests: compiled on CUDA, interpreted on CPU."""
from __future__ import annotations

import os

import pytest


def triton_kernel_module(device, load_compiled, load_interpreted):
    """Generator for a module-scoped fixture yielding a Triton kernels' module.

    On CUDA, ``load_compiled()`` (``(module, reason)``, the dispatch's cached loader) must give the
    module. On CPU the file is imported afresh by ``load_interpreted()`` with ``TRITON_INTERPRET=1``:
    triton reads it when a kernel is decorated, triton.language's own jit functions included, so it
    is set before the file is imported and kept while the fixture's tests run, then restored. Skips
    where triton is not installed.
    """
    if device.type == "cuda":
        pytest.importorskip("triton")
        module, reason = load_compiled()
        assert module is not None, reason
        yield module
        return
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        pytest.importorskip("triton")
        yield load_interpreted()
    finally:
        if before is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = before
