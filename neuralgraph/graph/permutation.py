"""Neuron permutations: the symmetry group that metanetworks must respect.

Permuting the hidden neurons of layer ``l`` by ``p`` (new neuron ``i`` is old neuron ``p[i]``)
permutes the rows of ``W_l``, ``b_l`` and the columns of ``W_{l+1}``; the function is unchanged.
Permuting input or output neurons (the larger "NP" group of NFN) changes the function.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from neuralgraph.graph.core import GraphConversionError, Layout


def random_hidden_permutation(layout: Layout, generator: Optional[torch.Generator] = None) -> list[Tensor]:
    """One random permutation per hidden layer of ``layout`` (``len(layout) - 2`` of them)."""
    return [torch.randperm(d, generator=generator) for d in layout[1:-1]]


def permute_mlp(
    weights: Sequence[Tensor], biases: Sequence[Tensor], perms: Sequence[Optional[Tensor]]
) -> tuple[list[Tensor], list[Tensor]]:
    """Apply neuron permutations to an MLP (single or batched ``[B, ...]``).

    ``perms`` has one entry per hidden layer (``len(weights) - 1``), or one per layer
    including input and output (``len(weights) + 1``); ``None`` keeps a layer as it is.
    """
    L = len(weights)
    if len(perms) == L - 1:
        perms = [None, *perms, None]
    elif len(perms) != L + 1:
        raise GraphConversionError(
            f"got {len(perms)} permutations for {L} layers: expected {L - 1} (hidden) or {L + 1} (all)"
        )
    new_w, new_b = [], []
    for l in range(1, L + 1):
        w, b = weights[l - 1], biases[l - 1]
        rows, cols = perms[l], perms[l - 1]
        for name, p, size in (("output", rows, w.shape[-2]), ("input", cols, w.shape[-1])):
            if p is not None and sorted(p.tolist()) != list(range(size)):
                raise GraphConversionError(f"layer {l}: {name} permutation is not a permutation of {size} neurons")
        if rows is not None:
            w, b = w[..., rows, :], b[..., rows]
        if cols is not None:
            w = w[..., :, cols]
        new_w.append(w)
        new_b.append(b)
    return new_w, new_b
