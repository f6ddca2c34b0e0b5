"""General parameter graphs: modules with elements beyond a chain (normalisations, attention, positions).

A chain of layers is stored by :func:`~neuralgraph.graph.build.blocks_to_graph` (weight edges
between consecutive node layers first, then skips, then shortcuts). A module whose walk found
elements (:mod:`~neuralgraph.graph.convert.elements`) or a positional embedding is stored here
with the same fields and one more freedom: an edge of any kind may join any earlier node layer
to a later one (``edge_layer = b - 1`` for an edge into node layer ``b``, as for skips).

Node layers are ordered as the walk made them, except that position layers follow the input
layer (they are inputs: one-hot token positions). ``node_type`` gives each neuron of an ordered
layer (the input, the output, token positions) its own type and every other layer one type, so
hidden neurons, heads and groups stay interchangeable within their layer. Edges are stored piece
by piece in the walk's order (each group row-major, or one per neuron), then the skips, then the
shortcuts. :class:`GeneralLayout` records where each piece's rows are, which is how
``graph_to_module`` reads them back (the template's graph must have the same structure).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor, nn

from neuralgraph.graph.convert.elements import SOURCE, EdgeGroup, ElementConverter
from neuralgraph.graph.convert.registry import layer_block, layer_weight
from neuralgraph.graph.convert.trace import POSITION, Chain, Piece
from neuralgraph.graph.decode import check_finite
from neuralgraph.graph.schema import (
    POSITION_EDGE,
    SHORTCUT_EDGE,
    SKIP_EDGE,
    STRUCTURAL_EDGE_KINDS,
    WEIGHT_EDGE,
    GraphConversionError,
    ParameterGraph,
    activation_codes,
)

ORDERED_ROLES = ("input", "output", "position")


@dataclass
class _Group:
    kind: int
    source: int  # node layer (walk order)
    target: int
    rows: Tensor  # [edges, f]
    source_index: Tensor
    target_index: Tensor
    shape: tuple[int, ...]  # the features' shape as the piece gives them
    slice: Optional[slice] = None  # its rows in edge_attr, once stored


@dataclass
class GeneralLayout:
    """Where each piece's parameters are in a general graph: its node layers and its edge rows.

    Attributes:
        order: walk levels in storage order.
        pieces: each piece with the rows of its edge groups.
        skips: rows of each residual skip.
        shortcuts: each projection shortcut ``(layer, converter, a, b)`` with its rows.
        structural: rows whose features the structure fixes.
    """

    order: list[int]  # walk levels in storage order
    pieces: list[tuple[Piece, list[slice]]] = field(default_factory=list)
    skips: list[slice] = field(default_factory=list)
    shortcuts: list[tuple[tuple[str, object, int, int], slice]] = field(default_factory=list)
    structural: list[slice] = field(default_factory=list)  # rows whose features the structure fixes


def _layer_block(name: str, module: nn.Module, converter, in_neurons: Optional[int]) -> tuple[Tensor, Tensor]:
    return layer_block(name, *converter.parameters(module), converter, in_neurons)


def general_graph(module: nn.Module, chain: Chain) -> tuple[ParameterGraph, GeneralLayout]:
    """The parameter graph of ``module`` whose walk is ``chain`` (``chain.general``), and its layout.

    Args:
        module: the module walked.
        chain: its walk (:func:`~neuralgraph.graph.convert.trace.trace_chain`).

    Returns:
        ``(graph, layout)``.
    """
    widths = list(chain.widths)
    biases: dict[int, Tensor] = {}
    groups: list[list[_Group]] = []
    ref: Optional[Tensor] = None
    for piece in chain.pieces:
        converter = piece.converter
        if isinstance(converter, ElementConverter):
            element = converter.element(module.get_submodule(piece.name))
            for level, width, bias in zip(piece.levels, element.widths, element.biases):
                widths[level], biases[level] = width, bias
            located = [_locate(g, piece, widths) for g in element.groups]
        elif converter == POSITION:
            param = module.get_parameter(piece.name).detach()
            (tokens,), channels = [widths[l] for l in piece.levels], widths[piece.source]
            block = param.reshape(tokens, channels).T.unsqueeze(-1)
            located = [_locate(EdgeGroup(POSITION_EDGE, 0, SOURCE, "full", block), piece, widths)]
        else:
            in_neurons = None if piece.source == 0 else widths[piece.source]
            block, bias = _layer_block(piece.name, module.get_submodule(piece.name), converter, in_neurons)
            if piece.source == 0:
                widths[0] = block.shape[1]
            (level,) = piece.levels
            widths[level], biases[level] = block.shape[0], bias
            located = [_locate(EdgeGroup(WEIGHT_EDGE, SOURCE, 0, "full", block), piece, widths)]
        ref = located[0].rows if ref is None else ref
        groups.append(located)
    skip_groups = [_Group(SKIP_EDGE, a, b, ref.new_ones(widths[a], 1), torch.arange(widths[a]), torch.arange(widths[a]),
                          (widths[a], 1)) for a, b in chain.skips]
    shortcut_groups = []
    for name, converter, a, b in chain.shortcuts:
        block, bias = _layer_block(name, module.get_submodule(name), converter, widths[a])
        biases[b] = biases[b] + bias
        d_out, d_in = block.shape[:2]
        shortcut_groups.append(_Group(SHORTCUT_EDGE, a, b, block.reshape(d_out * d_in, -1),
                                      torch.arange(d_in).repeat(d_out), torch.arange(d_out).repeat_interleave(d_in),
                                      tuple(block.shape)))
    order = [0] + [l for l, role in enumerate(chain.roles) if role == "position"] \
        + [l for l, role in enumerate(chain.roles) if l and role != "position"]
    rank = {level: i for i, level in enumerate(order)}
    layout = GeneralLayout(order)
    flat = [g for gs in groups for g in gs] + skip_groups + shortcut_groups
    width = max(g.rows.shape[1] for g in flat)
    start, rows = 0, []
    for g in flat:
        stop = start + g.rows.shape[0]
        rows.append(torch.nn.functional.pad(g.rows, (0, width - g.rows.shape[1])))
        g.slice = slice(start, stop)
        start = stop
    for piece, located in zip(chain.pieces, groups):
        layout.pieces.append((piece, [g.slice for g in located]))
        layout.structural.extend(g.slice for g in located if g.kind in STRUCTURAL_EDGE_KINDS)
    layout.skips = [g.slice for g in skip_groups]
    layout.structural.extend(layout.skips)
    layout.shortcuts = [(s, g.slice) for s, g in zip(chain.shortcuts, shortcut_groups)]
    sizes = torch.tensor([widths[l] for l in order])
    offsets = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    edge_index = torch.stack([
        torch.cat([offsets[rank[g.source]] + g.source_index for g in flat]),
        torch.cat([offsets[rank[g.target]] + g.target_index for g in flat]),
    ])
    node_type, next_type = [], 0
    for l in order:
        ordered = chain.roles[l] in ORDERED_ROLES
        node_type.append(next_type + (torch.arange(widths[l]) if ordered else torch.zeros(widths[l], dtype=torch.long)))
        next_type += widths[l] if ordered else 1
    x = torch.cat([biases.get(l, ref.new_zeros(widths[l])).to(ref.dtype) for l in order]).unsqueeze(-1)
    device = ref.device
    graph = ParameterGraph(
        x=x,
        edge_index=edge_index.to(device),
        edge_attr=torch.cat(rows),
        node_layer=torch.repeat_interleave(torch.arange(len(order)), sizes).to(device),
        node_index=torch.cat([torch.arange(widths[l]) for l in order]).to(device),
        node_type=torch.cat(node_type).to(device),
        edge_layer=torch.cat([torch.full((g.rows.shape[0],), rank[g.target] - 1) for g in flat]).to(device),
        edge_kind=torch.cat([torch.full((g.rows.shape[0],), g.kind) for g in flat]).to(device),
        activation=activation_codes([chain.activations[l] for l in order]).repeat_interleave(sizes).to(device),
        layout=tuple(int(w) for w in sizes),
    )
    return graph, layout


def _locate(group: EdgeGroup, piece: Piece, widths: list[int]) -> _Group:
    source = piece.source if group.source == SOURCE else piece.levels[group.source]
    target = piece.source if group.target == SOURCE else piece.levels[group.target]
    source_index, target_index = group.endpoints(widths[source], widths[target])
    return _Group(group.kind, source, target, group.rows(), source_index, target_index, tuple(group.features.shape))


def load_general(graph, result: nn.Module, chain: Chain) -> nn.Module:
    """Write a general graph's parameters into ``result`` (a copy of the template walked as ``chain``).

    Args:
        graph: a general parameter graph of the template's architecture.
        result: the module written into.
        chain: the template's walk.

    Returns:
        ``result``.
    """
    expected, layout = general_graph(result, chain)
    for name in ("layout", "node_layer", "edge_index", "edge_kind", "edge_layer"):
        mine, theirs = getattr(graph, name, None), getattr(expected, name)
        if name == "layout":
            same = mine is not None and tuple(mine) == tuple(theirs)
        else:
            same = mine is not None and mine.shape == theirs.shape and bool((mine.cpu() == theirs.cpu()).all())
        if not same:
            raise GraphConversionError(f"graph field {name} differs from the template's graph: another architecture "
                                       "(or a graph whose edges were reordered)")
    check_finite(graph)
    attr, x = graph.edge_attr.to(expected.edge_attr.dtype), graph.x[:, 0].to(expected.x.dtype)
    for rows in layout.structural:
        if not torch.equal(attr[rows], expected.edge_attr[rows]):
            raise GraphConversionError("the graph's skip, pair or member edges differ from the template's: they "
                                       "hold the structure, not parameters")
    sizes = torch.tensor(graph.layout)
    offsets = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])
    rank = {level: i for i, level in enumerate(layout.order)}

    def biases(level: int) -> Tensor:
        return x[offsets[rank[level]]:offsets[rank[level] + 1]]

    def features(rows: slice, shape: tuple[int, ...], name: str) -> Tensor:
        block = attr[rows]
        if bool((block[:, shape[-1]:] != 0).any()):
            raise GraphConversionError(f"layer {name!r}: edge features beyond its {shape[-1]} are nonzero")
        return block[:, :shape[-1]].reshape(shape)

    for piece, slices in layout.pieces:
        converter = piece.converter
        if isinstance(converter, ElementConverter):
            sub = result.get_submodule(piece.name)
            shapes = [tuple(g.features.shape) for g in converter.element(sub).groups]
            try:
                converter.load(sub, [biases(l) for l in piece.levels],
                               [features(rows, shape, piece.name) for rows, shape in zip(slices, shapes)])
            except GraphConversionError as err:
                raise GraphConversionError(f"layer {piece.name!r} ({type(sub).__name__}): {err}") from None
        elif converter == POSITION:
            param = result.get_parameter(piece.name)
            (tokens,), channels = [graph.layout[rank[l]] for l in piece.levels], graph.layout[rank[piece.source]]
            with torch.no_grad():
                param.copy_(features(slices[0], (channels, tokens, 1), piece.name)[..., 0].T.reshape(param.shape))
        else:
            sub = result.get_submodule(piece.name)
            weight, bias = converter.parameters(sub)
            (level,) = piece.levels
            d_out, d_in = graph.layout[rank[level]], graph.layout[rank[piece.source]]
            block = attr[slices[0]].reshape(d_out, d_in, -1)
            new = layer_weight(piece.name, weight, bias, converter, block, None if piece.source == 0 else d_in)
            _write(piece.name, weight, bias, new, biases(level))
    for (name, converter, a, b), rows in layout.shortcuts:
        sub = result.get_submodule(name)
        weight, bias = converter.parameters(sub)
        block = attr[rows].reshape(graph.layout[rank[b]], graph.layout[rank[a]], -1)
        new = layer_weight(name, weight, bias, converter, block, graph.layout[rank[a]])
        _write(name, weight, bias, new, None if bias is None else torch.zeros_like(bias))
    return result


def _write(name: str, weight: Tensor, bias: Optional[Tensor], new_weight: Tensor, new_bias: Optional[Tensor]) -> None:
    if bias is None and new_bias is not None and bool((new_bias != 0).any()):
        raise GraphConversionError(f"layer {name!r}: template has no bias but the graph's biases are nonzero")
    with torch.no_grad():
        weight.copy_(new_weight)
        if bias is not None:
            bias.copy_(new_bias)
