"""General position (GP): can the hidden neurons of a network be told apart?

A network is in (bias) general position when, in every hidden layer, the biases are pairwise
distinct. Then sorting each hidden layer by bias fixes a canonical neuron order, and anything
computed from that order is invariant to hidden permutations (see
:mod:`neuralgraph.theory.canonical`).

Biases are not the only thing that can tell two neurons ``i, j`` of hidden layer ``l`` apart.
The five *separators*, in the order canonicalisation uses them:

==========================  ==========================================================
``bias``                    ``b_l[i]``
``incoming_row``            ``W_l[i, :]``, the weights into the neuron
``outgoing_column``         ``W_{l+1}[:, i]``, the weights out of the neuron
``incoming_row_norm``       ``||W_l[i, :]||_2``
``outgoing_column_norm``    ``||W_{l+1}[:, i]||_2``
==========================  ==========================================================

A pair *ties* on a separator when its values are exactly equal. A network is in *combined GP*
when every pair of neurons in every hidden layer is separated by at least one separator.
The two norms can only separate pairs the full row/column already separates (equal vectors
have equal norms); they are listed because they are cheap permutation-invariant scalars a
model can read, and with them the tie counts show how much each summary keeps.

*Invariant GP* (:func:`invariant_tie_matrices`) keeps only scalar separators that hidden
permutations of the *neighbouring* layers leave unchanged: bias, incoming row sum and norm,
outgoing column sum and norm. Whole rows and columns are dropped, because their entries are
ordered by the neighbouring layers' neurons.

With ``group="sign"`` (odd activations) or ``group="scale"`` (ReLU) the audit runs on the
canonical scaling of the network (:mod:`neuralgraph.theory.scaling`), so two neurons tie when
they tie after fixing each neuron's sign (or scale): GP up to that group.

Everything works on a batch ``[B, ...]`` of networks of one layout at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import Tensor

from neuralgraph.graph import Layout
from neuralgraph.graph.build import _check_blocks
from neuralgraph.theory.scaling import canonical_scaling

#: The separators, in the order canonicalisation uses them (module docstring).
SEPARATORS = ("bias", "incoming_row", "outgoing_column", "incoming_row_norm", "outgoing_column_norm")
#: The scalar separators hidden permutations of the neighbouring layers leave unchanged (invariant GP).
INVARIANT_SEPARATORS = ("bias", "incoming_row_sum", "outgoing_column_sum", "incoming_row_norm", "outgoing_column_norm")
#: Every separator :func:`separator_values` computes.
KNOWN_SEPARATORS = SEPARATORS + INVARIANT_SEPARATORS[1:3]


def as_batched_mlp(weights: Sequence[Tensor], biases: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor], bool]:
    """Validate an MLP in ``nn.Linear`` convention and return it batched.

    Returns weights ``[B, d_out, d_in]``, biases ``[B, d_out]`` and whether the input was a
    single network (``B = 1`` added). Errors name the layer at fault.

    Args:
        weights: per layer ``[(B,) d_out, d_in]``.
        biases: per layer ``[(B,) d_out]``.

    Returns:
        ``(weights, biases, single)``.
    """
    _, batch_size = _check_blocks([w.unsqueeze(-1) for w in weights], biases)
    single = batch_size is None
    if single:
        return [w.unsqueeze(0) for w in weights], [b.unsqueeze(0) for b in biases], True
    return list(weights), list(biases), False


def layout_of(weights: Sequence[Tensor]) -> Layout:
    """Layer widths ``(d_0, ..., d_L)`` of batched weights ``[B, d_out, d_in]``.

    Args:
        weights: per layer ``[B, d_out, d_in]``.

    Returns:
        The layout.
    """
    return (weights[0].shape[-1], *(w.shape[-2] for w in weights))


def separator_values(weights: Sequence[Tensor], biases: Sequence[Tensor], layer: int, separator: str) -> Tensor:
    """Values of ``separator`` for the neurons of hidden ``layer`` (1-based): ``[B, d_layer, k]``.

    ``weights``/``biases`` are batched (see :func:`as_batched_mlp`). Sums and norms are
    computed in float64 so that rounding cannot merge two different values.

    Args:
        weights: per layer ``[B, d_out, d_in]``.
        biases: per layer ``[B, d_out]``.
        layer: the hidden layer, 1-based.
        separator: one of :data:`KNOWN_SEPARATORS`.

    Returns:
        ``[B, d_layer, k]``, ``k`` values per neuron (1 for a scalar separator).
    """
    if not 1 <= layer < len(weights):
        raise ValueError(f"layer {layer} is not a hidden layer of a {len(weights)}-layer network")
    if separator not in KNOWN_SEPARATORS:
        raise ValueError(f"unknown separator {separator!r}; expected one of {KNOWN_SEPARATORS}")
    if separator == "bias":
        return biases[layer - 1].unsqueeze(-1)
    vectors = weights[layer - 1] if separator.startswith("incoming") else weights[layer].transpose(1, 2)
    if separator.endswith("_norm"):
        return vectors.double().norm(dim=-1, keepdim=True)
    if separator.endswith("_sum"):
        return vectors.double().sum(dim=-1, keepdim=True)
    return vectors


def tie_matrices(weights: Sequence[Tensor], biases: Sequence[Tensor], separators: Sequence[str] = ("bias",)) -> list[Tensor]:
    """Per hidden layer, ``[B, d, d]`` bool: ``i != j`` tie on *every* separator in ``separators``.

    Accepts a single network or a batch; the output always has the batch dimension.

    Args:
        weights: per layer ``[(B,) d_out, d_in]``.
        biases: per layer ``[(B,) d_out]``.
        separators: the separators compared (:data:`KNOWN_SEPARATORS`).

    Returns:
        Per hidden layer ``[B, d, d]`` bool.
    """
    weights, biases, _ = as_batched_mlp(weights, biases)
    ties = []
    for layer in range(1, len(weights)):
        d = biases[layer - 1].shape[1]
        tied = ~torch.eye(d, dtype=torch.bool, device=biases[0].device).unsqueeze(0)
        for separator in separators:
            v = separator_values(weights, biases, layer, separator)
            tied = tied & (v.unsqueeze(2) == v.unsqueeze(1)).all(dim=-1)
        ties.append(tied)
    return ties


def invariant_tie_matrices(weights: Sequence[Tensor], biases: Sequence[Tensor]) -> list[Tensor]:
    r"""Per hidden layer, ``[B, d, d]`` bool: ``i != j`` tie on all five invariant separators.

    Neurons ``i != j`` of hidden layer ``l`` tie when

    .. math::

        b_l[i] = b_l[j], \quad \textstyle\sum W_l[i,:] = \sum W_l[j,:], \quad \|W_l[i,:]\|_2 = \|W_l[j,:]\|_2,
        \quad \textstyle\sum W_{l+1}[:,i] = \sum W_{l+1}[:,j], \quad \|W_{l+1}[:,i]\|_2 = \|W_{l+1}[:,j]\|_2.

    The network is in invariant GP when no pair ties: the five-tuples are then distinct, so
    sorting them lexicographically orders each layer on its own, whatever the order of the
    other layers. These are the per-neuron invariants that one equivariant weight-space layer
    (DWSNets, NFN) reads by pooling a neuron's row and column, linearly or after squaring.
    This criterion is defined here; it is not taken from a published table.

    Args:
        weights: per layer ``[(B,) d_out, d_in]``.
        biases: per layer ``[(B,) d_out]``.

    Returns:
        Per hidden layer ``[B, d, d]`` bool.
    """
    return tie_matrices(weights, biases, INVARIANT_SEPARATORS)


def _count_pairs(ties: list[Tensor]) -> Tensor:
    """Unordered tied pairs per network, summed over hidden layers: ``[B]``."""
    return sum(t.flatten(1).sum(dim=1) for t in ties) // 2


@dataclass
class GPAudit:
    """GP status of a batch of networks of one layout.

    ``bias_ties[l-1]``, ``combined_ties[l-1]`` and ``invariant_ties[l-1]`` are the
    ``[B, d_l, d_l]`` tie matrices of hidden layer ``l`` for the bias separator alone, for the
    five :data:`SEPARATORS` and for the five :data:`INVARIANT_SEPARATORS`.

    Attributes:
        layout: the networks' layout.
        bias_ties: per hidden layer, ties on the bias.
        combined_ties: per hidden layer, ties on every separator.
        invariant_ties: per hidden layer, ties on every invariant separator.
    """

    layout: Layout
    bias_ties: list[Tensor]
    combined_ties: list[Tensor]
    invariant_ties: list[Tensor]

    @property
    def bias_tied_pairs(self) -> Tensor:
        """``[B]`` int: pairs of hidden neurons with equal biases, per network."""
        return _count_pairs(self.bias_ties)

    @property
    def combined_tied_pairs(self) -> Tensor:
        """``[B]`` int: pairs of hidden neurons no separator tells apart, per network."""
        return _count_pairs(self.combined_ties)

    @property
    def invariant_tied_pairs(self) -> Tensor:
        """``[B]`` int: pairs of hidden neurons no invariant separator tells apart, per network."""
        return _count_pairs(self.invariant_ties)

    @property
    def in_gp(self) -> Tensor:
        """``[B]`` bool: every hidden layer has pairwise distinct biases."""
        return self.bias_tied_pairs == 0

    @property
    def in_combined_gp(self) -> Tensor:
        """``[B]`` bool: every pair of hidden neurons is separated by some separator."""
        return self.combined_tied_pairs == 0

    @property
    def in_invariant_gp(self) -> Tensor:
        """``[B]`` bool: every pair of hidden neurons is separated by some invariant separator."""
        return self.invariant_tied_pairs == 0

    def tied_neurons(self, network: int = 0, combined: bool = False, invariant: bool = False) -> dict[int, list[tuple[int, int]]]:
        """Tied pairs ``(i, j)``, ``i < j``, of one network, keyed by hidden layer (1-based).

        Bias ties by default; ``combined`` or ``invariant`` for those criteria's ties.
        """
        if combined and invariant:
            raise ValueError("tied_neurons: choose combined or invariant, not both")
        ties = self.combined_ties if combined else self.invariant_ties if invariant else self.bias_ties
        found = {}
        for layer, tied in enumerate(ties, start=1):
            pairs = torch.triu(tied[network], diagonal=1).nonzero().tolist()
            if pairs:
                found[layer] = [tuple(p) for p in pairs]
        return found


def audit_gp(weights: Sequence[Tensor], biases: Sequence[Tensor], group: Optional[str] = None) -> GPAudit:
    """GP audit of one MLP or a batch ``[B, ...]`` of one layout (vectorised over networks).

    ``group``: ``None`` (permutations only), ``"sign"`` or ``"scale"``: audit the canonical scaling.

    Args:
        weights: per layer ``[(B,) d_out, d_in]``.
        biases: per layer ``[(B,) d_out]``.
        group: the scaling group audited up to, or ``None``.

    Returns:
        The :class:`GPAudit`.
    """
    weights, biases, _ = as_batched_mlp(weights, biases)
    if group is not None:
        weights, biases, _, _ = canonical_scaling(weights, biases, group)
    return GPAudit(
        layout=layout_of(weights),
        bias_ties=tie_matrices(weights, biases, ("bias",)),
        combined_ties=tie_matrices(weights, biases, SEPARATORS),
        invariant_ties=invariant_tie_matrices(weights, biases),
    )
