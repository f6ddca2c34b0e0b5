"""Quantizing network parameters to ``b`` bits, to see how general position survives storage.

Schemes:

* ``2 <= b <= 16``: uniform symmetric quantization. With ``s = max|t| / (2^(b-1) - 1)``, each
  value becomes ``s * round(t / s)`` (round to nearest, ties to even, as ``torch.round``), so
  ``t`` lands on one of ``2^b - 1`` levels symmetric around 0 and the largest magnitude is kept
  exactly. An all-zero tensor stays zero. This is the default at 16 bits too: it is the scheme
  whose general-position rates match the paper's table at 16 bits (docs/inr.md, docs/theory.md).
* ``32`` bits, and ``16`` with ``ieee=True`` (granularity ``"ieee"``): IEEE single and half
  precision (a cast and back; values beyond the float16 range are an error, not silently
  infinite).

The maximum that sets ``s`` is taken over a *granularity*:

* ``"tensor"`` (default): one scale per weight matrix and one per bias vector. This is
  PyTorch's per-tensor symmetric scheme, and it keeps a layer's small biases from being
  crushed onto a few levels by the scale of its larger weights.
* ``"layer"``: one scale shared by the weight matrix and the bias vector of a layer, as when
  a layer is stored as one affine block.
* ``"ieee"``: no scale; a cast to IEEE floats (16 or 32 bits only).

For a batch ``[B, ...]`` of networks every network gets its own scales.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from neuralgraph.theory.gp import as_batched_mlp

IEEE_FORMATS = {32: torch.float32, 16: torch.float16}
#: What one quantization scale is shared by (module docstring).
GRANULARITIES = ("tensor", "layer", "ieee")
UNIFORM_BITS = range(2, 17)


def symmetric_scale(tensors: Sequence[Tensor], bits: int) -> Tensor:
    """``max|t| / (2^(bits-1) - 1)`` over ``tensors`` ``[B, ...]``, one scale per network: ``[B]``.

    Args:
        tensors: tensors ``[B, ...]`` sharing the scale.
        bits: the bit width.

    Returns:
        ``[B]``.
    """
    peak = torch.stack([t.detach().abs().flatten(1).amax(dim=1) for t in tensors]).amax(dim=0)
    return peak / (2 ** (bits - 1) - 1)


def is_ieee(bits: int, ieee: bool = False) -> bool:
    """Whether ``bits`` is stored as an IEEE float: always at 32 bits, at 16 only when asked.

    Args:
        bits: the bit width.
        ieee: store 16 bits as IEEE half.

    Returns:
        Whether the scheme is an IEEE cast.
    """
    return bits == 32 or (ieee and bits in IEEE_FORMATS)


def quantize(t: Tensor, bits: int, scale: Tensor | None = None, name: str = "tensor", ieee: bool = False) -> Tensor:
    """``t`` stored in ``bits`` bits and read back, in ``t``'s dtype.

    ``scale`` (uniform widths only) broadcasts against ``t``; by default it is ``t``'s own
    ``max|t| / (2^(bits-1) - 1)``. ``ieee=True`` casts to IEEE half at 16 bits instead.
    ``name`` only labels error messages.

    Args:
        t: the tensor.
        bits: 2..16 or 32.
        scale: the quantization step, or ``None`` for ``t``'s own.
        name: the label of error messages.
        ieee: IEEE half at 16 bits.

    Returns:
        The quantized tensor, ``t``'s shape and dtype.
    """
    if ieee and bits not in IEEE_FORMATS:
        raise ValueError(f"{name}: IEEE floats have 16 or 32 bits, not {bits}")
    if is_ieee(bits, ieee):
        fmt = IEEE_FORMATS[bits]
        limit = torch.finfo(fmt).max
        if bool((t.abs() > limit).any()):
            raise ValueError(f"{name}: values up to {t.abs().max().item():.4g} overflow {bits}-bit floats (max {limit:.4g})")
        return t.to(fmt).to(t.dtype)
    if bits not in UNIFORM_BITS:
        raise ValueError(f"{name}: cannot quantize to {bits} bits; choose 32 or 2..16")
    if scale is None:
        scale = symmetric_scale([t.reshape(1, -1)], bits)[0]
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(t / safe) * safe


def quantize_mlp(
    weights: Sequence[Tensor], biases: Sequence[Tensor], bits: int, granularity: str = "tensor"
) -> tuple[list[Tensor], list[Tensor]]:
    """Quantize an MLP (``nn.Linear`` convention, single or batched ``[B, ...]``) to ``bits`` bits.

    ``granularity`` is ``"tensor"``, ``"layer"`` or ``"ieee"`` (see the module docstring).

    Args:
        weights: per layer ``[(B,) d_out, d_in]``.
        biases: per layer ``[(B,) d_out]``.
        bits: 2..16 or 32.
        granularity: one of :data:`GRANULARITIES`.

    Returns:
        ``(weights, biases)``, shaped like the input.
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"unknown granularity {granularity!r}; expected one of {GRANULARITIES}")
    ieee = granularity == "ieee"
    batched_w, batched_b, single = as_batched_mlp(weights, biases)
    new_w, new_b = [], []
    for l, (w, b) in enumerate(zip(batched_w, batched_b), start=1):
        if is_ieee(bits, ieee) or bits not in UNIFORM_BITS:
            scale_w = scale_b = None
        elif granularity == "layer":
            shared = symmetric_scale([w, b], bits)
            scale_w, scale_b = shared.view(-1, 1, 1), shared.view(-1, 1)
        else:
            scale_w, scale_b = symmetric_scale([w], bits).view(-1, 1, 1), symmetric_scale([b], bits).view(-1, 1)
        new_w.append(quantize(w, bits, scale_w, name=f"layer {l} weight", ieee=ieee))
        new_b.append(quantize(b, bits, scale_b, name=f"layer {l} bias", ieee=ieee))
    if single:
        return [w[0] for w in new_w], [b[0] for b in new_b]
    return new_w, new_b
