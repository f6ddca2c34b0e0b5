"""What layers and heads read about a batch besides its features, built once per batch.

* :class:`WeightBlocks`: the per-layer weights and biases of a batch of networks of one layout,
  which the batch builders (``InrDataset.batch``, ``CnnZooDataset.batch``) carry next to the
  parameter graph they build from them. The graph of such a batch is stored canonically, so its
  layout is known without looking at the graph, and heads and targets read the weights without
  decoding it.
* :func:`uniform_widths`: the same layout detected from the index fields of a graph that comes
  without :class:`WeightBlocks` (a batch built by hand), once per batch.
* :class:`GraphContext` (:func:`graph_context`): the edges layers run on, reverse-edge pairing,
  layer and graph of every node, the dense layout (``widths``) and the batch's
  :class:`WeightBlocks`. ``Metanet.context`` builds it; the metanet and its heads share it.
* :class:`LayerIndex`: nodes and edges grouped by layer, for layers with per-layer parameters
  on the general path.
* :func:`node_blocks`, :func:`edge_blocks`, :func:`block_rows`: feature rows of a canonical
  batch as per-layer dense blocks ``[B, d_k, C]`` / ``[B, d_{l+1}, d_l, C]`` and back.

Canonical storage: graph after graph, each with the same layout, nodes ordered by (layer,
position) and edges by (layer, target position, source position), as ``blocks_to_graph`` lays a
batch of one layout out. With reverse edges the rows are ``[forward edges, reverse edges]``.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Sequence

import torch
from torch import Tensor
from torch_geometric.data import Batch
from torch_geometric.utils import scatter

from neuralgraph.graph import Graph, GraphConversionError, graph_to_mlp


def node_graph_index(graph: Graph) -> Tensor:
    """Index of the graph each node belongs to (zeros for a single ``Data``)."""
    if isinstance(graph, Batch):
        return graph.batch
    return torch.zeros(graph.num_nodes, dtype=torch.long, device=graph.x.device)


def num_graphs(graph: Graph) -> int:
    return graph.num_graphs if isinstance(graph, Batch) else 1


def reverse_edge_partner(num_edges: int, device: Optional[torch.device] = None) -> Tensor:
    """For ``[forward edges, reverse edges]`` (``2E`` rows), the index of each edge's opposite."""
    return (torch.arange(2 * num_edges, device=device) + num_edges) % (2 * num_edges)


class WeightBlocks(NamedTuple):
    """Weights and biases of a batch of ``B`` networks of one layout, layer by layer.

    A batch builder that holds them keeps them next to the graph it builds from them (the
    ``blocks`` field of ``InrBatch`` and ``ZooBatch``); that graph is stored canonically (module
    docstring), which :func:`graph_context` takes on trust after checking the counts.
    """

    layout: tuple[int, ...]  # (d_0, ..., d_L)
    weights: tuple[Tensor, ...]  # weights[l]: [B, d_{l+1}, d_l, f_l], the f_l features of each edge (1: linear, kh*kw: conv)
    biases: tuple[Tensor, ...]  # biases[l]: [B, d_{l+1}]

    @classmethod
    def of(cls, weights: Sequence[Tensor], biases: Sequence[Tensor]) -> WeightBlocks:
        """From per-layer edge-feature blocks ``[B, d_out, d_in, f]`` (as ``blocks_to_graph`` takes a batch) and
        biases ``[B, d_out]``."""
        layout = (int(weights[0].shape[2]), *(int(w.shape[1]) for w in weights))
        return cls(layout, tuple(weights), tuple(biases))

    @classmethod
    def of_mlps(cls, weights: Sequence[Tensor], biases: Sequence[Tensor]) -> WeightBlocks:
        """From MLP weights ``[B, d_out, d_in]`` (``nn.Linear`` convention, as ``mlp_to_graph`` takes a batch)."""
        return cls.of([w.unsqueeze(-1) for w in weights], biases)

    def mlps(self) -> tuple[list[Tensor], list[Tensor]]:
        """Weights ``[B, d_out, d_in]`` and biases ``[B, d_out]``; MLPs only (one feature per edge)."""
        for l, w in enumerate(self.weights, start=1):
            if w.shape[-1] != 1:
                raise GraphConversionError(f"WeightBlocks: layer {l} has {w.shape[-1]} features per edge, not an MLP")
        return [w.squeeze(-1) for w in self.weights], list(self.biases)


def batch_mlps(graph: Graph, blocks: Optional[WeightBlocks] = None) -> tuple[list[Tensor], list[Tensor]]:
    """Weights ``[B, d_out, d_in]`` and biases ``[B, d_out]`` of the MLPs of ``graph``: the batch's
    ``blocks`` when it carries them, else decoded from the graph (``graph_to_mlp``)."""
    if blocks is not None:
        return blocks.mlps()
    weights, biases = graph_to_mlp(graph)
    if weights[0].dim() == 2:  # a single Data
        weights, biases = [w.unsqueeze(0) for w in weights], [b.unsqueeze(0) for b in biases]
    return weights, biases


def check_blocks(blocks: WeightBlocks, num_nodes: int, num_edges: int, count: int) -> None:
    """ValueError unless ``blocks`` describe ``count`` graphs of ``num_nodes`` nodes and ``num_edges`` edges in all."""
    layout, B = blocks.layout, blocks.weights[0].shape[0]
    nodes, edges = B * sum(layout), B * sum(a * b for a, b in zip(layout, layout[1:]))
    if (B, nodes, edges) != (count, num_nodes, num_edges) or len(blocks.biases) != len(layout) - 1:
        raise ValueError(f"blocks: {B} networks of layout {layout} ({nodes} nodes, {edges} edges) do not describe "
                         f"the graph's {count} graphs, {num_nodes} nodes and {num_edges} edges")


@functools.lru_cache(maxsize=32)
def canonical_layout(sizes: tuple[int, ...], device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``node_layer``, ``node_index``, ``edge_layer`` and ``edge_index`` (``[2, e]``) of one graph of node-layer
    widths ``sizes`` stored canonically; built once per layout and device (read only), since every batch of a
    dataset has the same."""
    widths = torch.tensor(sizes, device=device)
    layer = torch.repeat_interleave(torch.arange(len(sizes), device=device), widths)
    position = torch.cat([torch.arange(d, device=device) for d in sizes])
    offset = [0, *torch.tensor(sizes).cumsum(0).tolist()]
    source = torch.cat([offset[l] + torch.arange(d_in, device=device).repeat(d_out)
                        for l, (d_in, d_out) in enumerate(zip(sizes, sizes[1:]))])
    target = torch.cat([offset[l + 1] + torch.arange(d_out, device=device).repeat_interleave(d_in)
                        for l, (d_in, d_out) in enumerate(zip(sizes, sizes[1:]))])
    edge_layers = torch.repeat_interleave(torch.arange(len(sizes) - 1, device=device), widths[:-1] * widths[1:])
    return layer, position, edge_layers, torch.stack([source, target])


def uniform_widths(node_layer: Tensor, node_index: Tensor, edge_index: Tensor, edge_layer: Tensor, batch: Tensor,
                   num_graphs: int) -> Optional[tuple[int, ...]]:
    """The node-layer widths ``(d_0, ..., d_L)`` every graph of the batch shares, if it is stored canonically.

    Edge layer ``l`` of such a batch is a ``[B, d_{l+1}, d_l]`` block of consecutive rows, which layers
    read as a dense tensor. ``None`` for any other batch (mixed layouts, relabelled nodes or edges,
    graphs without edges). One comparison per node and edge: for graphs without :class:`WeightBlocks`.
    """
    N, E = node_layer.numel(), edge_layer.numel()
    if num_graphs < 1 or N == 0 or E == 0 or N % num_graphs or E % num_graphs:
        return None
    n, e = N // num_graphs, E // num_graphs
    sizes = tuple(torch.bincount(node_layer[:n]).tolist())
    if sum(d_in * d_out for d_in, d_out in zip(sizes, sizes[1:])) != e:
        return None
    layer, position, edge_layers, ends = canonical_layout(sizes, node_layer.device)
    shift = torch.arange(num_graphs, device=node_layer.device)[:, None]
    canonical = (
        bool((batch.view(num_graphs, n) == shift).all())
        and bool((node_layer.view(num_graphs, n) == layer).all())
        and bool((node_index.view(num_graphs, n) == position).all())
        and bool((edge_layer.view(num_graphs, e) == edge_layers).all())
        and bool((edge_index.view(2, num_graphs, e) == ends[:, None] + shift * n).all())
    )
    return sizes if canonical else None


def dense_widths(node_layer: Tensor, node_index: Tensor, edge_index: Tensor, edge_layer: Tensor, batch: Tensor,
                 num_graphs: int, dense: Optional[bool] = None,
                 layout: Optional[tuple[int, ...]] = None) -> Optional[tuple[int, ...]]:
    """The widths layers read dense blocks with: ``layout`` where the batch's :class:`WeightBlocks` give it, else
    :func:`uniform_widths`; ``dense=False`` ``None`` (the general path only), ``True`` the widths or an error."""
    if dense is False:
        return None
    widths = layout if layout is not None else uniform_widths(node_layer, node_index, edge_index, edge_layer, batch,
                                                               num_graphs)
    if dense and widths is None:
        raise ValueError("dense=True but the batch is not one layout stored canonically (graph by graph, nodes by "
                         "layer and position, edges row-major); use dense=None to fall back to the general path")
    return widths


class LayerIndex(NamedTuple):
    """Nodes and edges of a batch grouped by layer, for layers that keep parameters per layer.

    Built once per batch by :func:`layer_index`; ``k`` runs over node layers ``0..L`` and ``l``
    over weight layers ``0..L-1`` (edge layer ``l`` joins node layers ``l`` and ``l + 1``).
    """

    nodes: tuple[Tensor, ...]  # nodes[k]: ids of the nodes of layer k
    node_graph: tuple[Tensor, ...]  # node_graph[k]: graph of each of them
    position: tuple[Tensor, ...]  # position[k]: their node_index (position within their graph's layer)
    edges: tuple[Tensor, ...]  # edges[l]: ids of the edges of layer l
    source_row: tuple[Tensor, ...]  # source_row[l]: row of each edge's source in nodes[l]
    target_row: tuple[Tensor, ...]  # target_row[l]: row of each edge's target in nodes[l + 1]
    edge_graph: tuple[Tensor, ...]  # edge_graph[l]: graph of each edge of layer l
    depths: tuple[int, ...]  # the distinct numbers of weight layers of the graphs in the batch


def layer_index(node_layer: Tensor, node_index: Tensor, edge_index: Tensor, edge_layer: Tensor, batch: Tensor,
                num_graphs: int) -> LayerIndex:
    """Group the nodes and edges of a batch by layer (a stable sort, no per-layer search)."""
    num_node_layers = int(node_layer.max()) + 1 if node_layer.numel() else 0
    node_order = torch.argsort(node_layer, stable=True)
    node_counts = torch.bincount(node_layer, minlength=num_node_layers).tolist()
    nodes = node_order.split(node_counts)
    row_in_layer = torch.empty_like(node_layer)
    for ids in nodes:
        row_in_layer[ids] = torch.arange(len(ids), device=ids.device)
    edge_order = torch.argsort(edge_layer, stable=True)
    edges = edge_order.split(torch.bincount(edge_layer, minlength=max(num_node_layers - 1, 0)).tolist())
    src, dst = edge_index
    depth = scatter(node_layer, batch, 0, num_graphs, "max")
    return LayerIndex(
        nodes=nodes,
        node_graph=tuple(batch[ids] for ids in nodes),
        position=tuple(node_index[ids] for ids in nodes),
        edges=edges,
        source_row=tuple(row_in_layer[src[ids]] for ids in edges),
        target_row=tuple(row_in_layer[dst[ids]] for ids in edges),
        edge_graph=tuple(batch[dst[ids]] for ids in edges),
        depths=tuple(torch.unique(depth).tolist()),
    )


class GraphContext(NamedTuple):
    """The structure every layer and head of a metanetwork reads, built once per batch.

    Layers on the general path take these fields as named tensors (each lists the ones it needs in
    ``MetanetLayer.context``). With reverse edges, ``edge_index``/``edge_layer`` have ``2E``
    columns, the reverse edges after the forward ones, and ``reverse[k]`` is the index of edge
    ``k``'s opposite.

    ``widths`` says the batch is one layout ``(d_0, ..., d_L)`` stored canonically (module
    docstring), from its :class:`WeightBlocks` or detected (:func:`uniform_widths`): the metanet
    then runs its layers on dense per-layer blocks (``Metanet.forward``). ``blocks`` are the
    batch's :class:`WeightBlocks` when it carries them; heads read its weights from them.
    """

    edge_index: Tensor  # [2, E or 2E]
    edge_layer: Tensor  # [E or 2E]
    node_layer: Tensor  # [N]
    node_index: Tensor  # [N] position of each neuron within its layer
    batch: Tensor  # [N] graph of each node
    num_graphs: int
    num_edges: int  # E, the edges of the graph (the first E rows of edge features)
    reverse: Optional[Tensor] = None  # [2E] opposite of each edge (reverse_edges=True)
    layers: Optional[LayerIndex] = None  # nodes/edges grouped by layer (layer_index=True)
    hidden: Optional[Tensor] = None  # [N] bool: hidden neuron (neither input nor its network's output)
    widths: Optional[tuple[int, ...]] = None  # node-layer widths of a canonical one-layout batch, else None
    blocks: Optional[WeightBlocks] = None  # the batch's weights and biases, when it carries them


def graph_context(graph: Graph, reverse_edges: bool = False, with_layer_index: bool = False,
                  dense: Optional[bool] = None, blocks: Optional[WeightBlocks] = None) -> GraphContext:
    """The :class:`GraphContext` of ``graph``: reverse edges appended and/or layers indexed on request.

    ``dense`` as in :func:`dense_widths`; ``blocks``: the :class:`WeightBlocks` the batch carries (its
    layout is then taken, not detected).
    """
    batch, count = node_graph_index(graph), num_graphs(graph)
    edge_index, edge_layer = graph.edge_index, graph.edge_layer
    num_edges = edge_index.shape[1]
    if blocks is not None:
        check_blocks(blocks, graph.num_nodes, num_edges, count)
    widths = dense_widths(graph.node_layer, graph.node_index, edge_index, edge_layer, batch, count, dense,
                          None if blocks is None else blocks.layout)
    layers = (layer_index(graph.node_layer, graph.node_index, edge_index, edge_layer, batch, count)
              if with_layer_index else None)
    reverse = None
    if reverse_edges:
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
        edge_layer = torch.cat([edge_layer, edge_layer])
        reverse = reverse_edge_partner(num_edges, edge_index.device)
    hidden = (graph.node_layer > 0) & (graph.node_layer < scatter(graph.node_layer, batch, 0, count, "max")[batch])
    return GraphContext(edge_index, edge_layer, graph.node_layer, graph.node_index, batch, count, num_edges, reverse,
                        layers, hidden, widths, blocks)


def check_dense_rows(owner: str, x: Tensor, edge_attr: Tensor, widths: Sequence[int], directions: int = 1) -> None:
    """ValueError naming ``owner`` unless ``x``/``edge_attr`` have the rows of whole graphs of layout ``widths``
    (``directions = 2``: each edge and its reverse)."""
    nodes, edges = sum(widths), directions * sum(a * b for a, b in zip(widths, widths[1:]))
    graphs = x.shape[0] // nodes
    if x.shape[0] != graphs * nodes or edge_attr.shape[0] != graphs * edges:
        raise ValueError(f"{owner}: widths={tuple(widths)} describe graphs of {nodes} nodes and {edges} edge rows, "
                         f"but x has {x.shape[0]} rows and edge_attr {edge_attr.shape[0]}")


def node_blocks(x: Tensor, widths: Sequence[int]) -> list[Tensor]:
    """Node rows ``[B N, C]`` of a canonical batch as ``[B, d_k, C]`` per node layer (views of contiguous rows)."""
    return list(x.reshape(-1, sum(widths), x.shape[-1]).split(list(widths), dim=1))


def edge_blocks(edge: Tensor, widths: Sequence[int], directions: int = 1) -> list[Tensor]:
    """Edge rows of a canonical batch per weight layer (views of contiguous rows): ``[B, d_{l+1}, d_l, C]``
    (row = target neuron, column = source neuron); with ``directions=2`` (rows ``[forward edges, reverse
    edges]``) ``[2, B, d_{l+1}, d_l, C]``, the reverse of edge ``j -> i`` where that edge is."""
    sizes = [d_in * d_out for d_in, d_out in zip(widths, widths[1:])]
    parts = edge.reshape(directions, -1, sum(sizes), edge.shape[-1]).split(sizes, dim=2)
    blocks = [part.unflatten(2, (d_out, d_in)) for part, d_in, d_out in zip(parts, widths, widths[1:])]
    return [block[0] for block in blocks] if directions == 1 else blocks


def block_rows(blocks: Sequence[Tensor], dtype: Optional[torch.dtype] = None) -> Tensor:
    """Inverse of :func:`node_blocks` / :func:`edge_blocks` (one direction): per-layer blocks ``[B, ..., C]``
    to rows (one copy), in ``dtype`` when given: converted as they are copied, so that the rows never exist
    in the blocks' dtype as well (the edges of ``Metanet(edge_dtype=...)``)."""
    if dtype is not None and dtype != blocks[0].dtype:
        return RowsOfBlocks.apply(dtype, *blocks)
    return torch.cat([block.flatten(1, -2) for block in blocks], dim=1).flatten(0, 1)


class RowsOfBlocks(torch.autograd.Function):
    """:func:`block_rows` into another dtype: one ``torch.cat`` into the output; backward splits the gradient
    back into the blocks' shapes and dtype."""

    @staticmethod
    def forward(ctx, dtype: torch.dtype, *blocks: Tensor) -> Tensor:
        parts = [block.flatten(1, -2) for block in blocks]
        ctx.shapes, ctx.sizes = [block.shape for block in blocks], [part.shape[1] for part in parts]
        ctx.block_dtype = blocks[0].dtype
        rows = blocks[0].new_empty((parts[0].shape[0], sum(ctx.sizes), parts[0].shape[-1]), dtype=dtype)
        return torch.cat(parts, dim=1, out=rows).flatten(0, 1)

    @staticmethod
    def backward(ctx, grad: Tensor):
        parts = grad.view(ctx.shapes[0][0], sum(ctx.sizes), -1).split(ctx.sizes, dim=1)
        return (None, *[part.reshape(shape).to(ctx.block_dtype) for part, shape in zip(parts, ctx.shapes)])
