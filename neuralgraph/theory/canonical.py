"""Canonical neuron order: one representative per hidden-permutation orbit.

:func:`canonicalize` sorts the neurons of each hidden layer, front to back, by the key
(most significant first)

1. the bias ``b_l[i]``;
2. the incoming row ``W_l[i, :]``, lexicographically, with its columns already in the
   canonical order of layer ``l - 1`` (inputs keep their order);
3. the outgoing column ``W_{l+1}[:, i]``: for the last hidden layer the column itself (output
   order is fixed); for earlier layers its *sorted values*, because the order of layer
   ``l + 1`` is not canonical yet and a multiset does not depend on it.

The row and column norms of :mod:`neuralgraph.theory.gp` add nothing after 2 and 3 (equal
vectors have equal norms), so they are not used. On networks in general position the bias
alone decides and the key is never consulted further.

Two neurons with equal keys are harmless when their outgoing columns are also identical: the
neurons are then exact duplicates, swapping them leaves the parameters unchanged, and the
canonical network is still unique (only the permutation is not). Any other tie is
*unresolved*: the result could depend on the input order. ``canonicalize`` then raises
:class:`CanonicalizationError` naming the layer and neurons, or, with ``on_tie="flag"``,
returns the result with ``unresolved`` set so the caller can discard it.

With ``group="sign"`` or ``group="scale"`` the network is first brought to its canonical
scaling (:mod:`neuralgraph.theory.scaling`: canonical sign, or unit incoming vectors), then
ordered as above: one representative per orbit of permutations and sign flips (or positive
rescalings) together.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import Tensor

from neuralgraph.theory.equivariant_space import flatten_parameters
from neuralgraph.theory.gp import as_batched_mlp
from neuralgraph.theory.scaling import canonical_scaling

ON_TIE = ("raise", "flag")


class CanonicalizationError(ValueError):
    """Hidden neurons that no key separates; the message names the network, layer and neurons."""


@dataclass
class CanonicalForm:
    """Result of :func:`canonicalize`, shaped like its input (single or batched ``[B, ...]``).

    ``perms[l-1]`` is the order of hidden layer ``l``: canonical neuron ``i`` is input neuron
    ``perms[l-1][..., i]``, so ``permute_mlp(weights, biases, perms)`` reproduces the result
    for a single network. ``unresolved`` is ``True`` for networks with an unresolved tie (or a
    neuron without canonical scaling). ``scalings[l-1]`` (``None`` without ``group``) are the
    per-neuron scalings applied before ordering, indexed like the input's neurons:
    ``permute_mlp(*rescale_mlp(weights, biases, scalings), perms)`` is the result.

    Attributes:
        weights: per layer, the canonical network's weights.
        biases: per layer, its biases.
        perms: per hidden layer, the order applied.
        unresolved: ``True`` where a tie (or a neuron without canonical scaling) is unresolved.
        scalings: per hidden layer, the scalings applied first (``None`` without ``group``).
    """

    weights: list[Tensor]
    biases: list[Tensor]
    perms: list[Tensor]
    unresolved: Tensor
    scalings: Optional[list[Tensor]] = None


def lexsort_rows(keys: Tensor) -> Tensor:
    """Per batch entry, the order sorting the rows of ``keys`` ``[B, d, K]`` lexicographically.

    Stable argsorts from the least to the most significant column: ``[B, d]``.

    Args:
        keys: ``[B, d, K]`` rows to sort, column 0 the most significant.

    Returns:
        ``[B, d]`` the order.
    """
    B, d, K = keys.shape
    order = torch.arange(d, device=keys.device).expand(B, d)
    for k in reversed(range(K)):
        column = keys[..., k].gather(1, order)
        order = order.gather(1, torch.argsort(column, dim=1, stable=True))
    return order


def canonicalize(weights: Sequence[Tensor], biases: Sequence[Tensor], on_tie: str = "raise",
                 group: Optional[str] = None) -> CanonicalForm:
    """Canonical form of an MLP (``nn.Linear`` convention, single or batched ``[B, ...]``).

    The result computes the same function, and is identical for every hidden permutation of
    the input unless ``unresolved`` (see the module docstring for the exact key); with
    ``group="sign"``/``"scale"``, for every permutation combined with sign flips/rescalings.

    Args:
        weights: per layer ``[(B,) d_out, d_in]``.
        biases: per layer ``[(B,) d_out]``.
        on_tie: ``"raise"`` (:class:`CanonicalizationError` on an unresolved tie) or ``"flag"`` (mark it
            in ``unresolved``).
        group: ``None``, ``"sign"`` or ``"scale"``.

    Returns:
        The :class:`CanonicalForm`.
    """
    if on_tie not in ON_TIE:
        raise ValueError(f"on_tie={on_tie!r}: expected one of {ON_TIE}")
    weights, biases, single = as_batched_mlp(weights, biases)
    weights, biases = list(weights), list(biases)
    B, L = biases[0].shape[0], len(weights)
    unresolved = torch.zeros(B, dtype=torch.bool, device=biases[0].device)
    scalings = None
    if group is not None:
        weights, biases, scalings, dead = canonical_scaling(weights, biases, group)
        if on_tie == "raise" and bool(dead.any()):
            b = int(dead.nonzero()[0])
            where = "" if single else f"network {b}: "
            raise CanonicalizationError(
                f"{where}a hidden neuron has zero bias and zero incoming weights, so it has no canonical "
                f"{group}; pass on_tie='flag'"
            )
        unresolved |= dead
    perms = []
    for l in range(1, L):
        outgoing = weights[l].transpose(1, 2)  # [B, d_l, d_{l+1}]
        outgoing_key = outgoing if l == L - 1 else outgoing.sort(dim=-1).values
        keys = torch.cat([biases[l - 1].unsqueeze(-1), weights[l - 1], outgoing_key], dim=-1)
        order = lexsort_rows(keys)
        sorted_keys = keys.gather(1, order.unsqueeze(-1).expand_as(keys))
        sorted_outgoing = outgoing.gather(1, order.unsqueeze(-1).expand_as(outgoing))
        same_key = (sorted_keys[:, 1:] == sorted_keys[:, :-1]).all(-1)
        same_neuron = (sorted_outgoing[:, 1:] == sorted_outgoing[:, :-1]).all(-1)
        clash = same_key & ~same_neuron  # [B, d_l - 1]: canonical positions k, k+1
        if on_tie == "raise" and bool(clash.any()):
            b, k = clash.nonzero()[0].tolist()
            i, j = order[b, k].item(), order[b, k + 1].item()
            where = "" if single else f"network {b}, "
            raise CanonicalizationError(
                f"{where}hidden layer {l}: neurons {i} and {j} share bias, incoming row and sorted outgoing "
                "weights but are not duplicates; no canonical order exists (put biases in general position, "
                "or pass on_tie='flag')"
            )
        unresolved |= clash.any(dim=1)
        weights[l - 1] = weights[l - 1].gather(1, order.unsqueeze(-1).expand_as(weights[l - 1]))
        biases[l - 1] = biases[l - 1].gather(1, order)
        weights[l] = weights[l].gather(2, order.unsqueeze(1).expand_as(weights[l]))
        perms.append(order)
    if single:
        return CanonicalForm([w[0] for w in weights], [b[0] for b in biases], [p[0] for p in perms], unresolved[0],
                             None if scalings is None else [q[0] for q in scalings])
    return CanonicalForm(weights, biases, perms, unresolved, scalings)


def canonical_features(weights: Sequence[Tensor], biases: Sequence[Tensor], group: Optional[str] = None) -> Tensor:
    """Weight-space vector of the canonical form, ``[P]`` or ``[B, P]``: an invariant embedding.

    Coordinates follow :func:`~neuralgraph.theory.equivariant_space.flatten_parameters`. Two
    networks get equal features iff their canonical forms are equal, i.e. (when no tie is
    unresolved, else this raises) iff they are related by a hidden permutation.

    Args:
        weights: per layer ``[(B,) d_out, d_in]``.
        biases: per layer ``[(B,) d_out]``.
        group: ``None``, ``"sign"`` or ``"scale"``, as in :func:`canonicalize`.

    Returns:
        ``[P]`` or ``[B, P]``.
    """
    form = canonicalize(weights, biases, group=group)
    if form.biases[0].dim() == 1:
        return flatten_parameters(form.weights, form.biases)
    return torch.vmap(flatten_parameters)(form.weights, form.biases)
