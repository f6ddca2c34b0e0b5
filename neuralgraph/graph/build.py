"""Building parameter graphs from weights: input validation and the one constructor, :func:`blocks_to_graph`.

Every check names the layer (or skip, shortcut) it refuses, before any tensor is built; a batch of
one layout is assembled by :mod:`neuralgraph.graph.batch`.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from neuralgraph.graph.batch import batch_of_one_layout
from neuralgraph.graph.schema import (
    Activation,
    Graph,
    GraphConversionError,
    Layout,
    ParameterGraph,
    Shortcut,
    Skips,
    layout_structure,
)


def _check_blocks(weights: Sequence[Tensor], biases: Sequence[Optional[Tensor]]) -> tuple[Layout, Optional[int]]:
    """Validate edge-feature blocks ``[(B,) d_out, d_in, f]``; return the layout and batch size."""
    if len(weights) == 0:
        raise GraphConversionError("no layers given: expected at least one weight matrix")
    if len(biases) != len(weights):
        raise GraphConversionError(f"got {len(weights)} weight tensors but {len(biases)} bias tensors")
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        for name, t in (("weight", w), ("bias", b)):
            if t is not None and not isinstance(t, Tensor):
                raise GraphConversionError(f"layer {l}: {name} is {type(t).__name__}, expected a tensor")
    batched = weights[0].dim() == 4
    batch_size = weights[0].shape[0] if batched else None
    if batch_size == 0:
        raise GraphConversionError("layer 1: weight has batch size 0; there are no networks to convert")
    layout = [weights[0].shape[-2]]
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        if not w.is_floating_point():
            raise GraphConversionError(f"layer {l}: weight dtype {w.dtype} is not a real floating-point type")
        if w.dim() != (4 if batched else 3):
            raise GraphConversionError(
                f"layer {l}: weight has {w.dim() - 1} dims, expected {'[B, d_out, d_in]' if batched else '[d_out, d_in]'}"
                " like layer 1"
            )
        if batched and w.shape[0] != batch_size:
            raise GraphConversionError(f"layer {l}: batch size {w.shape[0]} differs from layer 1's {batch_size}")
        d_out, d_in = w.shape[-3], w.shape[-2]
        if d_out == 0 or d_in == 0:
            raise GraphConversionError(f"layer {l}: weight has {d_out} outputs and {d_in} inputs; every layer needs a neuron")
        if d_in != layout[-1]:
            raise GraphConversionError(
                f"layer {l}: weight expects {d_in} inputs but layer {l - 1} has {layout[-1]} outputs"
            )
        if b is None:
            raise GraphConversionError(f"layer {l}: bias is missing (pass zeros for a bias-free layer)")
        expected = (batch_size, d_out) if batched else (d_out,)
        if tuple(b.shape) != expected:
            raise GraphConversionError(f"layer {l}: bias has shape {tuple(b.shape)}, expected {expected}")
        if b.dtype != w.dtype:
            raise GraphConversionError(f"layer {l}: bias dtype {b.dtype} differs from weight dtype {w.dtype}")
        if w.dtype != weights[0].dtype:
            raise GraphConversionError(f"layer {l}: dtype {w.dtype} differs from layer 1's {weights[0].dtype}")
        for name, t in (("weight", w), ("bias", b)):
            if not torch.isfinite(t).all():
                raise GraphConversionError(f"layer {l}: {name} contains NaN or infinite values")
        layout.append(d_out)
    return tuple(int(d) for d in layout), batch_size


def _check_skips(skips: Sequence[tuple[int, int]], layout: Layout) -> Skips:
    """Residual skips as node-layer pairs ``(a, b)``: ``a < b``, equal widths, each at most once."""
    checked = []
    for a, b in skips:
        a, b = int(a), int(b)
        if not 0 <= a < b < len(layout):
            raise GraphConversionError(f"skip ({a}, {b}): expected node layers 0 <= a < b <= {len(layout) - 1}")
        if layout[a] != layout[b]:
            raise GraphConversionError(
                f"skip ({a}, {b}): an identity skip joins layers of equal width, not {layout[a]} and {layout[b]}"
            )
        if (a, b) in checked:
            raise GraphConversionError(f"skip ({a}, {b}) is given twice")
        checked.append((a, b))
    return tuple(checked)


def _node_activations(activations: Tensor, layout: Layout, batch_size: Optional[int]) -> Tensor:
    """The ``activation`` node field from per-layer codes ``[L + 1]`` (or ``[B, L + 1]`` for a batch)."""
    expected = (len(layout),) if batch_size is None else (batch_size, len(layout))
    if not isinstance(activations, Tensor) or activations.dtype != torch.long or tuple(activations.shape) != expected:
        shown = tuple(activations.shape) if isinstance(activations, Tensor) else type(activations).__name__
        raise GraphConversionError(f"activations {shown}: expected a long tensor {expected} of codes, one per node layer")
    if bool(((activations < 0) | (activations >= len(Activation))).any()):
        raise GraphConversionError(f"activations hold a code outside [0, {len(Activation)}) "
                                   f"(vocabulary {Activation.names()})")
    sizes = torch.tensor(layout, device=activations.device)
    return activations.repeat_interleave(sizes, dim=-1).reshape(-1)


def _check_shortcuts(shortcuts: Sequence[Shortcut], layout: Layout, skips: Skips, ref: Tensor,
                     batch_size: Optional[int]) -> tuple[Skips, list[Tensor]]:
    """Projection shortcuts ``(a, b, block)``: ``a < b``, blocks ``[(B,) d_b, d_a, f]`` like the weights."""
    pairs, blocks = [], []
    for a, b, block in shortcuts:
        a, b = int(a), int(b)
        name = f"shortcut ({a}, {b})"
        if not 0 <= a < b < len(layout):
            raise GraphConversionError(f"{name}: expected node layers 0 <= a < b <= {len(layout) - 1}")
        if (a, b) in pairs or (a, b) in skips:
            raise GraphConversionError(f"{name}: layers {a} and {b} are joined by a skip or shortcut already")
        expected = (layout[b], layout[a]) if batch_size is None else (batch_size, layout[b], layout[a])
        if not isinstance(block, Tensor) or block.dim() != len(expected) + 1 or tuple(block.shape[:-1]) != expected:
            shown = tuple(block.shape) if isinstance(block, Tensor) else type(block).__name__
            raise GraphConversionError(f"{name}: block {shown}, expected {expected + ('f',)}")
        if block.dtype != ref.dtype:
            raise GraphConversionError(f"{name}: dtype {block.dtype} differs from layer 1's {ref.dtype}")
        if not bool(torch.isfinite(block).all()):
            raise GraphConversionError(f"{name}: weight contains NaN or infinite values")
        pairs.append((a, b))
        blocks.append(block)
    return tuple(pairs), blocks


def blocks_to_graph(weights: Sequence[Tensor], biases: Sequence[Tensor], skips: Sequence[tuple[int, int]] = (),
                    activations: Optional[Tensor] = None, shortcuts: Sequence[Shortcut] = ()) -> Graph:
    """Build the graph of one network (or a batch of one layout) from edge-feature blocks.

    ``weights[l]`` is ``[(B,) d_out, d_in, f_l]``: the ``f_l`` features of each edge (1 for a
    linear layer, ``kh * kw`` for a convolution). Features are zero-padded to ``F = max f_l``.
    This is the one constructor behind :func:`mlp_to_graph` and ``module_to_graph``.

    ``skips``: residual connections as node-layer pairs ``(a, b)``, each adding layer ``a``'s
    values to layer ``b``'s; they become identity edges and the ``edge_kind`` field.
    ``activations``: codes (:func:`activation_codes`) ``[L + 1]``, or ``[B, L + 1]`` for a
    batch, of each node layer's activation; they become the ``activation`` field.
    ``shortcuts``: projection shortcuts ``(a, b, block)`` adding a layer of weights ``block``
    ``[(B,) d_b, d_a, f]`` on layer ``a``'s values to layer ``b``'s; their edges follow the skips.
    A shortcut's bias acts on layer ``b``'s neurons: it belongs in ``biases[b - 1]``.

    Args:
        weights: per layer ``[(B,) d_out, d_in, f_l]``.
        biases: per layer ``[(B,) d_out]``.
        skips: residual connections ``(a, b)``.
        activations: activation codes per node layer, or ``None``.
        shortcuts: projection shortcuts ``(a, b, block)``.

    Returns:
        A ``ParameterGraph``, or a ``Batch`` of ``B`` graphs for batched blocks.
    """
    layout, batch_size = _check_blocks(weights, biases)
    skips = _check_skips(skips, layout)
    shortcut_pairs, shortcut_blocks = _check_shortcuts(shortcuts, layout, skips, weights[0], batch_size)
    activation = None if activations is None else _node_activations(activations, layout, batch_size)
    single = batch_size is None
    if single:
        weights = [w.unsqueeze(0) for w in weights]
        biases = [b.unsqueeze(0) for b in biases]
        shortcut_blocks = [w.unsqueeze(0) for w in shortcut_blocks]
        batch_size = 1
    B = batch_size
    ref = weights[0]
    width = max(w.shape[-1] for w in weights + shortcut_blocks)
    padded = [torch.nn.functional.pad(w, (0, width - w.shape[-1])).reshape(B, -1, width)
              for w in weights + shortcut_blocks]
    num_skip_edges = sum(layout[b] for _, b in skips)
    identity = ref.new_zeros(B, num_skip_edges, width)
    identity[..., 0] = 1
    blocks = padded[:len(weights)] + [identity] + padded[len(weights):]
    edge_attr = torch.cat(blocks, dim=1).reshape(-1, width)
    x = torch.cat([ref.new_zeros(B, layout[0])] + list(biases), dim=1).reshape(-1, 1)
    struct = layout_structure(layout, skips, shortcut_pairs)
    if activation is not None:
        struct = {**struct, "activation": activation}
    if single:
        struct = {k: v.to(ref.device, copy=True) for k, v in struct.items()}
        return ParameterGraph(x=x, edge_attr=edge_attr, layout=layout, **struct)
    return batch_of_one_layout(x, edge_attr, struct, layout, B)



def mlp_to_graph(weights: Sequence[Tensor], biases: Sequence[Tensor]) -> Graph:
    """Parameter graph of an MLP given in ``nn.Linear`` convention.

    Args:
        weights: per layer ``[d_out, d_in]``, or ``[B, d_out, d_in]`` for a batch of ``B``
            networks of one layout.
        biases: per layer ``[d_out]`` (or ``[B, d_out]``); every layer needs one.

    Returns:
        a ``Data`` for one network, a ``Batch`` of ``B`` graphs for batched input (built with
        a few tensor ops, no Python loop over networks). Mixed layouts are batched with
        ``Batch.from_data_list`` on single graphs.
    """
    for l, w in enumerate(weights, start=1):
        if not isinstance(w, Tensor) or w.dim() not in (2, 3):
            shape = tuple(w.shape) if isinstance(w, Tensor) else type(w).__name__
            raise GraphConversionError(f"layer {l}: weight {shape} is not [d_out, d_in] or [B, d_out, d_in]")
    return blocks_to_graph([w.unsqueeze(-1) for w in weights], biases)
