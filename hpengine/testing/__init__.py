"""Test utilities: device decorators, tiny hypergraphs, reference implementations."""
from hpengine.testing._devices import available_devices, only_cuda, with_devices, with_package

__all__ = ["available_devices", "only_cuda", "with_devices", "with_package"]
