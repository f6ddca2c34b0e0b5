"""Reading weights back from parameter graphs: layouts, weight blocks, skips and shortcuts, with checks.

Decoding works from ``node_layer``/``node_index``/``edge_index`` rather than the storage order,
and refuses, naming the layer or field, a graph whose indices, edges or values do not describe a
network of its layout.
"""
from __future__ import annotations

import copy

import torch
from torch import Tensor
from torch_geometric.data import Batch

from neuralgraph.graph.schema import (
    CHAIN_EDGE_KINDS,
    EDGE_KINDS,
    SHORTCUT_EDGE,
    SKIP_EDGE,
    WEIGHT_EDGE,
    Graph,
    GraphConversionError,
    Layout,
    Skips,
)


def graph_layouts(graph: Graph) -> list[Layout]:
    """Layouts of the graphs in ``graph`` (one entry for a ``Data``).

    Args:
        graph: a ``Data`` or a ``Batch``.

    Returns:
        One layout per graph.
    """
    layout = graph.layout
    if isinstance(graph, Batch):
        return [tuple(l) for l in layout]
    return [tuple(layout)]


def common_layout(graph: Graph) -> Layout:
    """The single layout shared by every graph in ``graph``; error on a mixed batch.

    Args:
        graph: a ``Data`` or a ``Batch``.

    Returns:
        The layout.
    """
    layouts = graph_layouts(graph)
    distinct = sorted(set(layouts))
    if len(distinct) != 1:
        raise GraphConversionError(
            f"batch mixes layouts {distinct}; convert each graph of batch.to_data_list() separately"
        )
    return distinct[0]


def graph_to_blocks(graph: Graph) -> tuple[list[Tensor], list[Tensor]]:
    """Inverse of :func:`blocks_to_graph`: per layer ``[B, d_out, d_in, F]`` and ``[B, d_out]``.

    Works from ``node_layer``/``node_index``/``edge_index`` rather than the storage order, so
    a graph whose nodes or edges were relabelled still decodes to the right matrices: each edge
    is scattered to its slot in the flattened parameter vector of its network. Residual skip and
    shortcut edges (``edge_kind``) are left out (:func:`graph_skips`, :func:`graph_shortcuts`).

    Args:
        graph: a ``Data`` or a ``Batch`` of one layout, with weight, skip and shortcut edges only.

    Returns:
        ``(weights, biases)``, per layer ``[B, d_out, d_in, F]`` and ``[B, d_out]`` (``B = 1`` for a ``Data``).
    """
    layout = common_layout(graph)
    _refuse_general(graph, "graph_to_blocks")
    graph = _weight_edges(graph)
    B = graph.num_graphs if isinstance(graph, Batch) else 1
    device = graph.x.device
    sizes = torch.tensor(layout, device=device)
    fan_in, fan_out = sizes[:-1], sizes[1:]
    weight_sizes = (fan_in * fan_out).tolist()
    weight_offset = torch.cat([sizes.new_zeros(1), (fan_in * fan_out).cumsum(0)[:-1]])
    node_offset = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    P, N = sum(weight_sizes), int(sizes.sum())
    _check_indices(graph, sizes)
    node_graph = graph.batch if isinstance(graph, Batch) else torch.zeros(graph.num_nodes, dtype=torch.long, device=device)
    src, dst = graph.edge_index
    layer = graph.edge_layer
    if graph.num_edges != B * P or not bool(
        ((graph.node_layer[src] == layer) & (graph.node_layer[dst] == layer + 1)).all()
    ):
        _raise_edge_count_error(graph, layout, B)
    slot = node_graph[dst] * P + weight_offset[layer] + graph.node_index[dst] * fan_in[layer] + graph.node_index[src]
    hit = torch.zeros(B * P, dtype=torch.bool, device=device)
    hit[slot] = True
    if not bool(hit.all()):
        missing = int((~hit).nonzero()[0]) % P
        l = int((torch.tensor(weight_sizes).cumsum(0) <= missing).sum()) + 1
        raise GraphConversionError(f"layer {l}: some weights have duplicate or missing edges")
    flat = graph.edge_attr.new_empty(B * P, graph.edge_attr.shape[1])
    flat[slot] = graph.edge_attr
    flat = flat.view(B, P, -1)
    node_slot = node_graph * N + node_offset[graph.node_layer] + graph.node_index
    node_hit = torch.zeros(B * N, dtype=torch.bool, device=device)
    node_hit[node_slot] = True
    if graph.num_nodes != B * N or not bool(node_hit.all()):
        raise GraphConversionError(
            f"graph has {graph.num_nodes} nodes for {B} x {N} neurons of layout {layout}, or two nodes share a "
            "(node_layer, node_index) position"
        )
    node_values = graph.x.new_empty(B * N)
    node_values[node_slot] = graph.x[:, 0]
    node_values = node_values.view(B, N)
    weights = [
        block.reshape(B, d_out, d_in, -1)
        for block, d_in, d_out in zip(flat.split(weight_sizes, dim=1), layout[:-1], layout[1:])
    ]
    biases = list(node_values[:, layout[0]:].split(layout[1:], dim=1))
    return weights, biases


def _refuse_general(graph: Graph, reader: str) -> None:
    """A general parameter graph (normalisation, attention or position edges) has no per-layer weight blocks."""
    kind = getattr(graph, "edge_kind", None)
    if kind is not None and bool((kind >= len(CHAIN_EDGE_KINDS)).any()):
        first = EDGE_KINDS[int(kind[kind >= len(CHAIN_EDGE_KINDS)][0])] if int(kind.max()) < len(EDGE_KINDS) else "?"
        raise GraphConversionError(f"graph has {first} edges (edge_kind): a general parameter graph, which {reader} "
                                   "cannot read as per-layer weight blocks; use graph_to_module(graph, template)")


def _weight_edges(graph: Graph) -> Graph:
    """``graph`` itself, or a shallow copy keeping only the weight edges when it has skip or shortcut edges."""
    kind = getattr(graph, "edge_kind", None)
    if kind is None or not bool((kind != WEIGHT_EDGE).any()):
        return graph
    keep = kind == WEIGHT_EDGE
    weights = copy.copy(graph)
    weights.edge_index, weights.edge_attr = graph.edge_index[:, keep], graph.edge_attr[keep]
    weights.edge_layer, weights.edge_kind = graph.edge_layer[keep], kind[keep]
    return weights


def _edge_groups(graph: Graph, code: int) -> list[tuple[int, int, Tensor, Tensor, Tensor]]:
    """The edges of kind ``code`` of a single graph, grouped by the node layers ``(a, b)`` they join:
    ``(a, b, source node_index, target node_index, features)`` per group, ``a < b`` and
    ``edge_layer = b - 1`` checked."""
    kind = getattr(graph, "edge_kind", None)
    if kind is None:
        return []
    bad = (kind < 0) | (kind >= len(EDGE_KINDS))
    if bool(bad.any()):
        raise GraphConversionError(f"edge_kind holds {int(kind[bad][0])}: expected one of "
                                   + ", ".join(f"{c} ({name})" for c, name in enumerate(EDGE_KINDS)))
    mine = kind == code
    (src, dst), edge_layer, attr = graph.edge_index[:, mine], graph.edge_layer[mine], graph.edge_attr[mine]
    a, b = graph.node_layer[src], graph.node_layer[dst]
    groups = []
    for pa, pb in sorted(set(zip(a.tolist(), b.tolist()))):
        pair = (a == pa) & (b == pb)
        if pa >= pb:
            raise GraphConversionError(f"{EDGE_KINDS[code]} edges from layer {pa} to layer {pb} do not go forward")
        if not bool((edge_layer[pair] == pb - 1).all()):
            raise GraphConversionError(f"{EDGE_KINDS[code]} edges into layer {pb} have an edge_layer other than {pb - 1}")
        groups.append((pa, pb, graph.node_index[src[pair]], graph.node_index[dst[pair]], attr[pair]))
    return groups


def graph_shortcuts(graph: Graph) -> dict[tuple[int, int], Tensor]:
    """The projection shortcuts of a single graph: ``{(a, b): block [d_b, d_a, F]}`` from its
    shortcut edges (``edge_kind`` 2), each pair of neurons of the two layers exactly once.

    Args:
        graph: one graph (a ``Data``).

    Returns:
        The shortcut blocks by node-layer pair.
    """
    layout, blocks = graph_layouts(graph)[0], {}
    for a, b, cols, rows, attr in _edge_groups(graph, SHORTCUT_EDGE):
        slot = rows * layout[a] + cols
        if len(slot) != layout[a] * layout[b] or len(torch.unique(slot)) != len(slot):
            raise GraphConversionError(f"shortcut edges from layer {a} to layer {b} are not one edge per pair of "
                                       f"their neurons (layout {layout})")
        block = attr.new_empty(layout[b] * layout[a], attr.shape[1])
        block[slot] = attr
        blocks[(a, b)] = block.view(layout[b], layout[a], -1)
    return blocks


def graph_skips(graph: Graph) -> Skips:
    """The residual skips ``(a, b)`` of a single graph, from its skip edges (``edge_kind`` 1).

    Each must be complete (neuron ``j`` of layer ``a`` to neuron ``j`` of layer ``b``, for every
    ``j``, ``edge_layer = b - 1``) and hold the identity, features ``[1, 0, ..., 0]``.

    Args:
        graph: one graph (a ``Data``).

    Returns:
        The pairs, in edge order.
    """
    layout, skips = graph_layouts(graph)[0], []
    for a, b, cols, rows, attr in _edge_groups(graph, SKIP_EDGE):
        if layout[a] != layout[b] or len(rows) != layout[b] or len(torch.unique(rows)) != len(rows):
            raise GraphConversionError(f"skip edges from layer {a} to layer {b} are not one identity edge per neuron "
                                       f"of two layers of equal width (layout {layout})")
        if not torch.equal(rows, cols):
            raise GraphConversionError(f"skip edges from layer {a} to layer {b} do not join neuron j to neuron j")
        identity = torch.zeros_like(attr)
        identity[:, 0] = 1
        if not torch.equal(attr, identity):
            raise GraphConversionError(f"skip edges from layer {a} to layer {b} hold features other than the "
                                       "identity [1, 0, ..., 0]")
        skips.append((a, b))
    return tuple(skips)


def _check_indices(graph: Graph, sizes: Tensor) -> None:
    """``node_layer``, ``node_index`` and ``edge_index`` inside the ranges of the layout ``sizes``."""
    N, num_layers = graph.num_nodes, len(sizes)
    for name, index, size in (("edge_index", graph.edge_index, N), ("node_layer", graph.node_layer, num_layers)):
        bad = (index < 0) | (index >= size)
        if bool(bad.any()):
            raise GraphConversionError(f"{name} holds {int(index[bad][0])}, outside [0, {size})")
    bad = (graph.node_index < 0) | (graph.node_index >= sizes[graph.node_layer])
    if bool(bad.any()):
        node = int(bad.nonzero()[0])
        l = int(graph.node_layer[node])
        raise GraphConversionError(
            f"node {node}: node_index {int(graph.node_index[node])} is outside layer {l}'s {int(sizes[l])} neurons"
        )


def check_finite(graph: Graph) -> None:
    """Refuse NaN or infinite weights (``edge_attr``) and biases (``x`` of non-input nodes), as
    ``mlp_to_graph`` does.

    Args:
        graph: a ``Data`` or a ``Batch``; a :class:`~neuralgraph.graph.schema.GraphConversionError` names
            the first layer with a non-finite value.
    """
    for name, values, layer in (("edge_attr", graph.edge_attr, graph.edge_layer + 1), ("x", graph.x, graph.node_layer)):
        bad = ~torch.isfinite(values).flatten(1).all(1) & (layer > 0)
        if bool(bad.any()):
            kind = "weight" if name == "edge_attr" else "bias"
            raise GraphConversionError(f"layer {int(layer[bad][0])}: {kind} ({name}) contains NaN or infinite values")


def _raise_edge_count_error(graph: Graph, layout: Layout, B: int) -> None:
    """Name the first layer whose edges do not match ``layout`` (slow path, errors only)."""
    src, dst = graph.edge_index
    for l in range(1, len(layout)):
        mask = graph.edge_layer == l - 1
        expected, found = B * layout[l] * layout[l - 1], int(mask.sum())
        if found != expected:
            raise GraphConversionError(
                f"layer {l}: expected {expected} edges ({B} x {layout[l]} x {layout[l - 1]}), found {found}"
            )
        if not bool(((graph.node_layer[src[mask]] == l - 1) & (graph.node_layer[dst[mask]] == l)).all()):
            raise GraphConversionError(f"layer {l}: some edges do not join layer {l - 1} to layer {l}")
    raise GraphConversionError(f"graph has {graph.num_edges} edges; layouts {layout} x {B} need {B * sum(a * b for a, b in zip(layout, layout[1:]))}")


def graph_to_mlp(graph: Graph) -> tuple[list[Tensor], list[Tensor]]:
    """Exact (bitwise) inverse of :func:`mlp_to_graph`.

    Returns per-layer weights ``[d_out, d_in]`` and biases ``[d_out]`` for a ``Data``, or
    ``[B, d_out, d_in]`` and ``[B, d_out]`` for a ``Batch`` of one layout. Input neurons
    carry no bias and are skipped: the bias of layer ``l`` is read from the nodes of layer
    ``l``, never from node 0. NaN or infinite values, indices outside the layout and missing or
    duplicate neurons or weights raise :class:`GraphConversionError`.

    Args:
        graph: an MLP's graph (``F = 1``, weight edges only), or a ``Batch`` of one layout.

    Returns:
        ``(weights, biases)``, one tensor per layer each.
    """
    if graph.edge_attr.dim() != 2 or graph.edge_attr.shape[1] != 1:
        raise GraphConversionError(
            f"edge_attr has {graph.edge_attr.shape[-1]} features per edge: not an MLP graph "
            "(use graph_to_module with a template for convolutional graphs)"
        )
    kind = getattr(graph, "edge_kind", None)
    if kind is not None and bool((kind != WEIGHT_EDGE).any()):
        raise GraphConversionError("graph has residual skip or shortcut edges (edge_kind): not a plain MLP; use "
                                   "graph_to_module with a template, which rebuilds them")
    check_finite(graph)
    weights, biases = graph_to_blocks(graph)
    weights = [w.squeeze(-1) for w in weights]
    if not isinstance(graph, Batch):
        return [w[0] for w in weights], [b[0] for b in biases]
    return weights, biases
