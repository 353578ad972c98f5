"""Device parametrisation for tests: CPU always, CUDA when present."""
from __future__ import annotations

import importlib.util

import torch


def available_devices() -> list[str]:
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda:0")
    return devices


def with_devices(func):
    """Parametrise a test over ``device`` (``cpu``, plus ``cuda:0`` when a GPU exists)."""
    import pytest

    return pytest.mark.parametrize("device", available_devices())(func)


def only_cuda(func):
    import pytest

    return pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")(func)


def with_package(name: str):
    import pytest

    missing = importlib.util.find_spec(name) is None
    return pytest.mark.skipif(missing, reason=f"needs package {name}")
