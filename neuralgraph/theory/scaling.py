"""Canonical scaling: one representative per orbit of the sign or positive-scale group.

Odd activations (``sin``, ``tanh``) let each hidden neuron flip sign, ReLU lets it rescale by
``q > 0`` (see :mod:`neuralgraph.graph.scaling`). :func:`canonical_scaling` fixes that freedom
front to back: in hidden layer ``l`` (whose incoming columns are already canonical) each neuron's
incoming vector ``v_i = [b_l[i], W_l[i, :]]`` is

* ``"sign"``: flipped so that its first nonzero entry is positive;
* ``"scale"``: divided by its Euclidean norm.

The scaling is per neuron, so it commutes with permutations: canonical scaling followed by
canonical order (:func:`~neuralgraph.theory.canonical.canonicalize` with ``group=``) gives one
network per orbit of permutations and scalings together. A neuron with ``v_i = 0`` (no bias,
no incoming weight) has no canonical scaling and is reported as unresolved.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import torch
from torch import Tensor

from neuralgraph.graph.scaling import check_group


class CanonicalScaling(NamedTuple):
    """Batched canonical network, the scalings ``q`` per hidden layer ``[B, d_l]`` that produce
    it (``rescale_mlp(input, scalings)``), and ``[B]`` bool for networks with a zero incoming vector.

    Attributes:
        weights: per layer ``[B, d_out, d_in]``, the canonical network.
        biases: per layer ``[B, d_out]``.
        scalings: per hidden layer ``[B, d_l]``, the ``q`` applied.
        unresolved: ``[B]`` bool, networks with a zero incoming vector.
    """

    weights: list[Tensor]
    biases: list[Tensor]
    scalings: list[Tensor]
    unresolved: Tensor


def canonical_scaling(weights: Sequence[Tensor], biases: Sequence[Tensor], group: str) -> CanonicalScaling:
    """Canonical sign or scale of every hidden neuron of batched MLPs ``[B, d_out, d_in]``.

    Args:
        weights: per layer ``[B, d_out, d_in]``.
        biases: per layer ``[B, d_out]``.
        group: ``"sign"`` (first nonzero incoming entry positive) or ``"scale"`` (unit incoming vector).

    Returns:
        The :class:`CanonicalScaling`.
    """
    check_group(group)
    weights, biases = list(weights), list(biases)
    unresolved = torch.zeros(biases[0].shape[0], dtype=torch.bool, device=biases[0].device)
    scalings = []
    for l in range(1, len(weights)):
        incoming = torch.cat([biases[l - 1].unsqueeze(-1), weights[l - 1]], dim=-1)  # [B, d, 1 + d_in]
        nonzero = incoming != 0
        dead = ~nonzero.any(-1)
        if group == "sign":
            first = incoming.gather(-1, nonzero.to(torch.uint8).argmax(-1, keepdim=True)).squeeze(-1)
            q = torch.where(first < 0, -1.0, 1.0).to(incoming.dtype)
        else:
            q = 1.0 / torch.where(dead, torch.ones_like(incoming[..., 0]), incoming.norm(dim=-1))
        unresolved |= dead.any(-1)
        weights[l - 1] = weights[l - 1] * q.unsqueeze(-1)
        biases[l - 1] = biases[l - 1] * q
        weights[l] = weights[l] / q.unsqueeze(-2)
        scalings.append(q)
    return CanonicalScaling(weights, biases, scalings, unresolved)
