"""Neuron permutations: the symmetry group that metanetworks must respect.

Permuting the hidden neurons of layer ``l`` by ``p`` (new neuron ``i`` is old neuron ``p[i]``)
permutes the rows of ``W_l``, ``b_l`` and the columns of ``W_{l+1}``; the function is unchanged.
Permuting input or output neurons (the larger "NP" group of NFN) changes the function.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from neuralgraph.graph.schema import GraphConversionError, Layout


def random_hidden_permutation(layout: Layout, generator: Optional[torch.Generator] = None) -> list[Tensor]:
    """One random permutation per hidden layer of ``layout`` (``len(layout) - 2`` of them).

    Args:
        layout: the layer widths.
        generator: the random source (default: torch's global one).

    Returns:
        Per hidden layer, a permutation ``[d_l]``.
    """
    return [torch.randperm(d, generator=generator) for d in layout[1:-1]]


def random_hidden_permutations(layout: Layout, batch_size: int, generator: Optional[torch.Generator] = None) -> list[Tensor]:
    """Independent random permutations for each of ``batch_size`` networks: per hidden layer ``[B, d_l]``.

    Args:
        layout: the layer widths.
        batch_size: ``B``, the networks.
        generator: the random source (default: torch's global one).

    Returns:
        Per hidden layer, ``[B, d_l]``.
    """
    return [torch.argsort(torch.rand(batch_size, d, generator=generator), dim=1) for d in layout[1:-1]]


def _take(t: Tensor, perm: Tensor, dim: int) -> Tensor:
    """``t`` reindexed along ``dim`` by ``perm``: one permutation ``[d]``, or one per network ``[B, d]``."""
    dim, perm = dim % t.dim(), perm.to(t.device)
    if perm.dim() == 1:
        return t.index_select(dim, perm)
    shape = [1] * t.dim()
    shape[0], shape[dim] = perm.shape
    return t.gather(dim, perm.view(shape).expand(*t.shape[:dim], perm.shape[1], *t.shape[dim + 1:]))


def permute_mlp(
    weights: Sequence[Tensor], biases: Sequence[Tensor], perms: Sequence[Optional[Tensor]]
) -> tuple[list[Tensor], list[Tensor]]:
    """Apply neuron permutations to an MLP (single or batched ``[B, ...]``).

    ``perms`` has one entry per hidden layer (``len(weights) - 1``), or one per layer
    including input and output (``len(weights) + 1``); ``None`` keeps a layer as it is. An
    entry is a permutation ``[d]`` shared by the batch, or ``[B, d]``, one per network.

    Args:
        weights: per layer ``[(B,) d_out, d_in]``.
        biases: per layer ``[(B,) d_out]``.
        perms: the permutations, as above.

    Returns:
        ``(weights, biases)`` of the permuted networks, which compute the same functions for
        hidden-only permutations.
    """
    L = len(weights)
    if len(perms) == L - 1:
        perms = [None, *perms, None]
    elif len(perms) != L + 1:
        raise GraphConversionError(
            f"got {len(perms)} permutations for {L} layers: expected {L - 1} (hidden) or {L + 1} (all)"
        )
    for l, p in enumerate(perms):
        size = weights[l].shape[-1] if l < L else weights[-1].shape[-2]
        if p is None:
            continue
        expected = torch.arange(size, device=p.device).expand_as(p)
        if p.shape[-1] != size or not torch.equal(p.sort(dim=-1).values, expected):
            raise GraphConversionError(f"layer {l}: permutation is not a permutation of its {size} neurons")
    new_w, new_b = [], []
    for l in range(1, L + 1):
        w, b = weights[l - 1], biases[l - 1]
        rows, cols = perms[l], perms[l - 1]
        if rows is not None:
            w, b = _take(w, rows, -2), _take(b, rows, -1)
        if cols is not None:
            w = _take(w, cols, -1)
        new_w.append(w)
        new_b.append(b)
    return new_w, new_b
