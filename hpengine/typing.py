"""Shape aliases and feature flags.

Shape vocabulary (docs/methods/index.md#notation-and-shapes): ``Q`` questions, ``H`` hyperedges
(atomic facts), ``V`` entities, ``P`` passages, ``C = V + P`` columns of the augmented incidence,
``D`` embedding dim, ``K`` facts kept per hop, ``L`` BFS depth, ``M`` local subgraph cap, ``S`` seeds.

Feature flags are computed once at import time from what is installed; they never change
at run time and are the only place the library asks "is backend X available".
"""
from __future__ import annotations

import importlib.util

from torch import Tensor

#: int64 ``[2, nnz]`` (fact, entity) pairs.
FactEntityIndex = Tensor
#: int64 ``[H]`` passage id of each fact (sigma).
FactPassage = Tensor


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


#: triton importable: the CUDA kernels of kernels/ (k_*_triton.py) can run (hpengine/sparse/_dispatch.py)
WITH_TRITON: bool = _has("triton")
WITH_FAISS: bool = _has("faiss")
WITH_FAISS_GPU: bool = False
if WITH_FAISS:
    try:  # faiss-gpu exposes StandardGpuResources; faiss-cpu does not
        import faiss as _faiss

        WITH_FAISS_GPU = hasattr(_faiss, "StandardGpuResources") and _faiss.get_num_gpus() > 0
    except Exception:  # a broken faiss install must not break hpengine
        WITH_FAISS = False

__all__ = ["FactEntityIndex", "FactPassage", "WITH_FAISS", "WITH_FAISS_GPU", "WITH_TRITON"]
