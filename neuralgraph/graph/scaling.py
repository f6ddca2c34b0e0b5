"""Neuron rescalings: the symmetries beyond permutations that an activation function adds.

Multiplying hidden neuron ``i`` of layer ``l`` by ``q_i`` multiplies row ``i`` of ``W_l`` and
``b_l[i]`` by ``q_i`` and column ``i`` of ``W_{l+1}`` by ``1 / q_i``. The function is unchanged when
``sigma(q z) = q sigma(z)``:

* ``"sign"``: ``q = +-1`` for odd activations (``sine`` of SIRENs, ``tanh``);
* ``"scale"``: ``q > 0`` for positively homogeneous ones (ReLU, LeakyReLU).

Each :class:`~neuralgraph.graph.schema.Activation` names its group (``Activation.scaling``).

A weight ``W_l[i, j]`` (edge ``j -> i``) is multiplied by ``q_i / q_j`` and a bias ``b_l[i]`` by
``q_i``; input and output neurons have ``q = 1``.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from neuralgraph.graph.schema import SCALING_GROUPS, GraphConversionError, Layout


def check_group(group: str) -> None:
    """ValueError unless ``group`` is one of :data:`~neuralgraph.graph.schema.SCALING_GROUPS`.

    Args:
        group: ``"sign"`` or ``"scale"``.
    """
    if group not in SCALING_GROUPS:
        raise ValueError(f"group={group!r}: expected one of {SCALING_GROUPS}")


def scaling_invariant(v: Tensor, scaling: Optional[str]) -> Tensor:
    r""":math:`\kappa(v)`, unchanged when ``v`` is multiplied by a group element.

    ``None``: ``v`` itself (no scaling group); ``"sign"``: ``|v|``; ``"scale"``: ``v / ||v||``
    over the last dimension (``0`` stays ``0``).

    Args:
        v: ``[..., d]`` features.
        scaling: ``None``, ``"sign"`` or ``"scale"``.

    Returns:
        ``[..., d]``.
    """
    if scaling is None:
        return v
    check_group(scaling)
    if scaling == "sign":
        return v.abs()
    return v / v.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(v.dtype).tiny)


def random_hidden_scalings(
    layout: Layout, group: str, batch_size: Optional[int] = None, generator: Optional[torch.Generator] = None,
    dtype: torch.dtype = torch.float64,
) -> list[Tensor]:
    """Random elements of ``group`` per hidden layer: ``[d_l]``, or ``[B, d_l]`` with ``batch_size``.

    ``"sign"``: independent fair signs; ``"scale"``: ``exp(U(-1, 1))``, in ``[1/e, e]``.

    Args:
        layout: the layer widths.
        group: ``"sign"`` or ``"scale"``.
        batch_size: ``B``, for one element per network; ``None`` for one shared.
        generator: the random source (default: torch's global one).
        dtype: the dtype of the elements.

    Returns:
        Per hidden layer, ``[d_l]`` or ``[B, d_l]``.
    """
    check_group(group)
    shape = () if batch_size is None else (batch_size,)
    scalings = []
    for d in layout[1:-1]:
        u = torch.rand(*shape, d, generator=generator, dtype=dtype)
        scalings.append(torch.where(u < 0.5, -1.0, 1.0).to(dtype) if group == "sign" else torch.exp(2 * u - 1))
    return scalings


def rescale_mlp(
    weights: Sequence[Tensor], biases: Sequence[Tensor], scalings: Sequence[Optional[Tensor]]
) -> tuple[list[Tensor], list[Tensor]]:
    """Apply per-neuron scalings ``q`` to the hidden layers of an MLP (single or batched ``[B, ...]``).

    ``scalings`` has one entry per hidden layer, ``[d_l]`` or ``[B, d_l]`` (``None``: identity);
    every entry must be finite and nonzero.

    Args:
        weights: per layer ``[(B,) d_out, d_in]``.
        biases: per layer ``[(B,) d_out]``.
        scalings: per hidden layer, ``q``.

    Returns:
        ``(weights, biases)``, with the rows and biases of hidden layer ``l`` times ``q`` and the
        columns of the next layer divided by it.
    """
    L = len(weights)
    if len(scalings) != L - 1:
        raise GraphConversionError(f"got {len(scalings)} scalings for {L} layers: expected {L - 1} (one per hidden layer)")
    new_w, new_b = list(weights), list(biases)
    for l, q in enumerate(scalings, start=1):
        if q is None:
            continue
        d = weights[l - 1].shape[-2]
        if q.shape[-1] != d:
            raise GraphConversionError(f"hidden layer {l}: {q.shape[-1]} scalings for {d} neurons")
        if not bool((torch.isfinite(q) & (q != 0)).all()):
            raise GraphConversionError(f"hidden layer {l}: scalings must be finite and nonzero")
        q = q.to(weights[l - 1].dtype)
        new_w[l - 1] = new_w[l - 1] * q.unsqueeze(-1)
        new_b[l - 1] = new_b[l - 1] * q
        new_w[l] = new_w[l] / q.unsqueeze(-2)
    return new_w, new_b
