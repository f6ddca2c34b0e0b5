"""Output Capacity Expansion's last step: ``k`` predicted networks merged into one wider network."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from neuralgraph.graph import GraphConversionError


def merge_ensemble(weights: Sequence[Tensor], biases: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    r"""One network computing the average of ``k`` networks of one layout, exactly.

    Members ``(d_0, h_1, ..., h_{L-1}, d_L)`` become one network ``(d_0, k h_1, ..., k h_{L-1}, d_L)``:
    the first layer stacks the members' rows (every member reads the same input), hidden layers
    are block-diagonal (members never mix), and the output layer concatenates the members'
    columns scaled by :math:`1/k` with the bias averaged:

    .. math::
        W_L = \tfrac{1}{k}\,[W_L^{(1)}, \dots, W_L^{(k)}], \qquad b_L = \tfrac{1}{k} \textstyle\sum_i b_L^{(i)}

    so that :math:`f(x) = \frac{1}{k}\sum_i f_i(x)` for any elementwise activation. A constant
    added after the last layer (SIREN's output offset) is the same for all members, and the
    average keeps it. A one-layer network is just averaged.

    Args:
        weights: per layer ``[B, k, d_out, d_in]`` (as returned by ``WeightDecoder``).
        biases: per layer ``[B, k, d_out]``.

    Returns:
        per layer ``[B, d_out', d_in']`` and ``[B, d_out']``, ready for ``render``.
    """
    if len(weights) == 0 or len(weights) != len(biases):
        raise GraphConversionError(f"got {len(weights)} weight and {len(biases)} bias tensors; need equal, nonzero")
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        if w.dim() != 4 or b.dim() != 3 or w.shape[:3] != b.shape:
            raise GraphConversionError(
                f"layer {l}: weight {tuple(w.shape)} and bias {tuple(b.shape)} are not [B, k, d_out, d_in] and [B, k, d_out]"
            )
        if w.shape[:2] != weights[0].shape[:2]:
            raise GraphConversionError(f"layer {l}: (B, k) = {tuple(w.shape[:2])} differs from layer 1's {tuple(weights[0].shape[:2])}")
    B, k = weights[0].shape[:2]
    L = len(weights)
    merged_w, merged_b = [], []
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        d_out, d_in = w.shape[-2:]
        first, last = l == 1, l == L
        if first and last:
            merged_w.append(w.mean(1))
            merged_b.append(b.mean(1))
        elif first:
            merged_w.append(w.reshape(B, k * d_out, d_in))
            merged_b.append(b.reshape(B, k * d_out))
        elif last:
            merged_w.append(w.permute(0, 2, 1, 3).reshape(B, d_out, k * d_in) / k)
            merged_b.append(b.mean(1))
        else:
            eye = torch.eye(k, dtype=w.dtype, device=w.device)
            block_diagonal = torch.einsum("bkij,km->bkimj", w, eye).reshape(B, k * d_out, k * d_in)
            merged_w.append(block_diagonal)
            merged_b.append(b.reshape(B, k * d_out))
    return merged_w, merged_b
