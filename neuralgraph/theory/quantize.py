"""Quantizing network parameters to ``b`` bits, to see how general position survives storage.

Schemes, by bit width:

* ``32`` and ``16``: IEEE single and half precision (a cast and back; values beyond the
  float16 range are an error, not silently infinite).
* ``2 <= b <= 15``: uniform symmetric quantization. With ``s = max|t| / (2^(b-1) - 1)``, each
  value becomes ``s * round(t / s)`` (round to nearest, ties to even, as ``torch.round``), so
  ``t`` lands on one of ``2^b - 1`` levels symmetric around 0 and the largest magnitude is kept
  exactly. An all-zero tensor stays zero.

The maximum that sets ``s`` is taken over a *granularity*:

* ``"tensor"`` (default): one scale per weight matrix and one per bias vector. This is
  PyTorch's per-tensor symmetric scheme, and it keeps a layer's small biases from being
  crushed onto a few levels by the scale of its larger weights.
* ``"layer"``: one scale shared by the weight matrix and the bias vector of a layer, as when
  a layer is stored as one affine block.

For a batch ``[B, ...]`` of networks every network gets its own scales.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from neuralgraph.theory.gp import as_batched_mlp

IEEE_FORMATS = {32: torch.float32, 16: torch.float16}
GRANULARITIES = ("tensor", "layer")
UNIFORM_BITS = range(2, 16)


def symmetric_scale(tensors: Sequence[Tensor], bits: int) -> Tensor:
    """``max|t| / (2^(bits-1) - 1)`` over ``tensors`` ``[B, ...]``, one scale per network: ``[B]``."""
    peak = torch.stack([t.detach().abs().flatten(1).amax(dim=1) for t in tensors]).amax(dim=0)
    return peak / (2 ** (bits - 1) - 1)


def quantize(t: Tensor, bits: int, scale: Tensor | None = None, name: str = "tensor") -> Tensor:
    """``t`` stored in ``bits`` bits and read back, in ``t``'s dtype.

    ``scale`` (uniform widths only) broadcasts against ``t``; by default it is ``t``'s own
    ``max|t| / (2^(bits-1) - 1)``. ``name`` only labels error messages.
    """
    if bits in IEEE_FORMATS:
        fmt = IEEE_FORMATS[bits]
        limit = torch.finfo(fmt).max
        if bool((t.abs() > limit).any()):
            raise ValueError(f"{name}: values up to {t.abs().max().item():.4g} overflow {bits}-bit floats (max {limit:.4g})")
        return t.to(fmt).to(t.dtype)
    if bits not in UNIFORM_BITS:
        raise ValueError(f"{name}: cannot quantize to {bits} bits; choose 32, 16 or 2..15")
    if scale is None:
        scale = symmetric_scale([t.reshape(1, -1)], bits)[0]
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(t / safe) * safe


def quantize_mlp(
    weights: Sequence[Tensor], biases: Sequence[Tensor], bits: int, granularity: str = "tensor"
) -> tuple[list[Tensor], list[Tensor]]:
    """Quantize an MLP (``nn.Linear`` convention, single or batched ``[B, ...]``) to ``bits`` bits.

    ``granularity`` is ``"tensor"`` or ``"layer"`` (see the module docstring); it only matters
    for the uniform widths.
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"unknown granularity {granularity!r}; expected one of {GRANULARITIES}")
    batched_w, batched_b, single = as_batched_mlp(weights, biases)
    new_w, new_b = [], []
    for l, (w, b) in enumerate(zip(batched_w, batched_b), start=1):
        if bits in UNIFORM_BITS and granularity == "layer":
            shared = symmetric_scale([w, b], bits)
            scale_w, scale_b = shared.view(-1, 1, 1), shared.view(-1, 1)
        elif bits in UNIFORM_BITS:
            scale_w, scale_b = symmetric_scale([w], bits).view(-1, 1, 1), symmetric_scale([b], bits).view(-1, 1)
        else:
            scale_w = scale_b = None
        new_w.append(quantize(w, bits, scale_w, name=f"layer {l} weight"))
        new_b.append(quantize(b, bits, scale_b, name=f"layer {l} bias"))
    if single:
        return [w[0] for w in new_w], [b[0] for b in new_b]
    return new_w, new_b
