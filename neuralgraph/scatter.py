"""The one place where the scatter backend is chosen.

``torch_scatter`` is 2-5x faster than native ``torch.scatter_reduce`` for sum/mean on CPU,
but it is an optional, compiled dependency (the GPU image has none). Everything in
neuralgraph that reduces over edges calls :func:`scatter` from here.

Set ``NEURALGRAPH_SCATTER=native`` to force the native path (benchmarks compare both).
"""
from __future__ import annotations

import os
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import scatter as _pyg_scatter

try:  # pragma: no cover - depends on the environment
    import torch_scatter as _torch_scatter
except ImportError:  # pragma: no cover
    _torch_scatter = None

REDUCTIONS = ("sum", "mean", "min", "max")


def available_backends() -> list[str]:
    """Backends usable in this environment, the preferred one first."""
    return (["torch_scatter"] if _torch_scatter is not None else []) + ["native"]


_backend = os.environ.get("NEURALGRAPH_SCATTER", available_backends()[0])


def get_backend() -> str:
    return _backend


def set_backend(name: str) -> None:
    """Select ``"torch_scatter"`` or ``"native"`` for all later scatter calls."""
    global _backend
    if name not in available_backends():
        raise ValueError(
            f"scatter backend {name!r} is not available here; choose one of {available_backends()}"
        )
    _backend = name


if _backend not in ("torch_scatter", "native"):
    raise ValueError(f"NEURALGRAPH_SCATTER={_backend!r}: expected 'torch_scatter' or 'native'")
if _backend == "torch_scatter" and _torch_scatter is None:
    raise ValueError("NEURALGRAPH_SCATTER=torch_scatter but torch_scatter is not installed")


def scatter(
    src: Tensor, index: Tensor, dim: int = 0, dim_size: Optional[int] = None, reduce: str = "sum"
) -> Tensor:
    """Reduce ``src`` into ``dim_size`` buckets given by ``index`` along ``dim``.

    Empty buckets are 0 for every reduction (as in torch_scatter).
    """
    if reduce not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduce!r}; expected one of {REDUCTIONS}")
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() else 0
    if _backend == "torch_scatter":
        return _torch_scatter.scatter(src, index, dim=dim, dim_size=dim_size, reduce=reduce)
    return _pyg_scatter(src, index, dim=dim, dim_size=dim_size, reduce=reduce)


def scatter_std(src: Tensor, index: Tensor, dim_size: int, eps: float = 1e-5) -> Tensor:
    """Per-bucket standard deviation along dim 0, ``sqrt(relu(E[x^2] - E[x]^2) + eps)``."""
    mean = scatter(src, index, 0, dim_size, "mean")
    mean_sq = scatter(src * src, index, 0, dim_size, "mean")
    return torch.sqrt(torch.relu(mean_sq - mean * mean) + eps)
