"""The base of the retriever modules: index tensors as buffers (or parameters), caches that follow
``.to()``, and the output type."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn


class Retrieved(NamedTuple):
    """Output of a retriever module for ``Q`` queries.

    Attributes:
        ids: int64 ``[Q, k]`` ids, best first; ``-1`` padding. No gradient (top-k is discrete).
        scores: ``[Q, k]`` their scores; ``-inf`` padding. Differentiable with respect to the
            query embeddings and to every parameter the scores are computed from.
    """

    ids: Tensor
    scores: Tensor


def unit_rows(x: Tensor) -> Tensor:
    """``x`` with L2-normalised rows; a zero row stays zero (its gradient is zero, never NaN).

    Shapes:
        ``[..., D] -> [..., D]``.
    """
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    safe = torch.where(norm > 0, norm, torch.ones_like(norm))
    return torch.where(norm > 0, x / safe, torch.zeros_like(x))


def check_queries(queries: Tensor, ref: Tensor, name: str = "query_embeddings") -> None:
    """``queries`` is a float ``[Q, D]`` tensor with ``ref``'s ``D`` on ``ref``'s device."""
    if not isinstance(queries, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (got {type(queries).__name__})")
    if not queries.dtype.is_floating_point:
        raise TypeError(f"{name} must be floating point (got {queries.dtype})")
    if queries.dim() != 2 or queries.shape[1] != ref.shape[1]:
        raise ValueError(f"{name} must be [Q, D] with D={ref.shape[1]} (got shape {tuple(queries.shape)})")
    if queries.device != ref.device:
        raise ValueError(f"{name} must be on the module's device {ref.device} (got {queries.device}); "
                         f"move the module with .to(device)")


class IndexModule(nn.Module):
    """An ``nn.Module`` whose index tensors are buffers.

    Buffers are non-persistent by default, so ``state_dict()`` holds only what a user trains (the
    corpus tensors are rebuilt from the index, not checkpointed); ``persistent=True`` includes
    them. Tensors named in ``trainable`` become float32 ``nn.Parameter`` copies instead (always in
    ``state_dict``). ``.to(device)`` / ``.double()`` move or cast every buffer and parameter and
    drop derived caches (the hypergraph and its CSR operators, dense-index norms, scratch), which
    are rebuilt on the next forward.

    Args:
        persistent: keep the index buffers in ``state_dict`` (default False).
        trainable: names of tensors to register as parameters.
    """

    #: tensor names a subclass accepts in ``trainable``
    trainable_names: tuple = ()

    def __init__(self, *, persistent: bool = False, trainable=()):
        super().__init__()
        trainable = (trainable,) if isinstance(trainable, str) else tuple(trainable)
        unknown = sorted(set(trainable) - set(self.trainable_names))
        if unknown:
            raise ValueError(f"trainable must name tensors of {type(self).__name__}: "
                             f"{list(self.trainable_names)} (got {unknown})")
        self.persistent = bool(persistent)
        self._trainable = set(trainable)
        self._cache: dict = {}

    def _add_tensor(self, name: str, tensor: Tensor | None) -> None:
        if tensor is not None and name in self._trainable:
            self.register_parameter(name, nn.Parameter(tensor.detach().clone().float()))
        else:
            self.register_buffer(name, None if tensor is None else tensor.detach(), persistent=self.persistent)

    def _cached(self, key: str, build):
        """``build()`` once per device/dtype state (cleared by ``.to()`` and friends)."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def _apply(self, fn, recurse: bool = True):
        self._cache.clear()
        return super()._apply(fn, recurse)

    def extra_repr(self) -> str:
        trainable = sorted(n for n, _ in self.named_parameters(recurse=False))
        return f"persistent={self.persistent}, trainable={trainable}"
