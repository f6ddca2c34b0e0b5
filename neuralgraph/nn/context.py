"""What layers and heads read about a batch besides its features, built once per batch.

The batch's own facts live with its graph (:mod:`neuralgraph.graph.blocks`): its
:class:`~neuralgraph.graph.blocks.WeightBlocks`, the canonical storage order, and its
:class:`~neuralgraph.graph.blocks.GraphFacts`, read by the batch builders. From them and the graph:

* :class:`GraphContext` (:func:`graph_context`): the edges layers run on, reverse-edge pairing,
  layer and graph of every node, the dense layout (``widths``) and the batch's
  :class:`~neuralgraph.graph.blocks.WeightBlocks`. ``Metanet.context`` builds it; the metanet and
  its heads share it.
* :class:`LayerIndex`: nodes and edges grouped by layer, for layers with per-layer parameters
  on the general path.
* :func:`node_blocks`, :func:`edge_blocks`, :func:`block_rows`: feature rows of a canonical
  batch as per-layer dense blocks ``[B, d_k, C]`` / ``[B, d_{l+1}, d_l, C]`` and back. With
  reverse edges the rows are ``[forward edges, reverse edges]``.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import torch
from torch import Tensor
from torch_geometric.utils import scatter

from neuralgraph.graph import Graph
from neuralgraph.graph.blocks import (GraphFacts, WeightBlocks, check_blocks, graph_facts, index_facts,
                                      node_graph_index, num_graphs)


def reverse_edge_partner(num_edges: int, device: Optional[torch.device] = None) -> Tensor:
    """For ``[forward edges, reverse edges]`` (``2E`` rows), the index of each edge's opposite.

    Args:
        num_edges: ``E``, the forward edges.
        device: where the index is made.

    Returns:
        ``[2E]`` long, ``k + E`` for a forward edge ``k`` and ``k - E`` for a reverse one.
    """
    return (torch.arange(2 * num_edges, device=device) + num_edges) % (2 * num_edges)


def context_facts(graph: Graph, context: Optional["GraphContext"]) -> GraphFacts:
    """The :class:`~neuralgraph.graph.blocks.GraphFacts` of ``graph``: its ``context``'s, else read from the
    graph (a context built by hand).

    Args:
        graph: the graph or batch.
        context: its :class:`GraphContext`, or ``None``.

    Returns:
        Its :class:`~neuralgraph.graph.blocks.GraphFacts`.
    """
    facts = None if context is None else context.facts
    return graph_facts(graph) if facts is None else facts


def check_dense(dense: Optional[bool], widths: Optional[tuple[int, ...]]) -> Optional[tuple[int, ...]]:
    """The widths layers read dense blocks with: ``widths`` (a canonical one-layout batch's, or ``None``);
    ``dense=False`` ``None`` (the general path only), ``True`` the widths or an error.

    Args:
        dense: ``None`` (dense blocks when the batch allows them), ``False`` or ``True``.
        widths: the batch's canonical layout, or ``None``.

    Returns:
        The widths, or ``None`` for the general path.
    """
    if dense is False:
        return None
    if dense and widths is None:
        raise ValueError("dense=True but the batch is not one layout stored canonically (graph by graph, nodes by "
                         "layer and position, edges row-major); use dense=None to fall back to the general path")
    return widths


class LayerIndex(NamedTuple):
    """Nodes and edges of a batch grouped by layer, for layers that keep parameters per layer.

    Built once per batch by :func:`layer_index`; ``k`` runs over node layers ``0..L`` and ``l``
    over weight layers ``0..L-1`` (edge layer ``l`` joins node layers ``l`` and ``l + 1``).

    Attributes:
        nodes: ``nodes[k]``, ids of the nodes of layer ``k``.
        node_graph: ``node_graph[k]``, the graph of each of them.
        position: ``position[k]``, their ``node_index`` (position within their graph's layer).
        edges: ``edges[l]``, ids of the edges of layer ``l``.
        source_row: ``source_row[l]``, the row of each edge's source in ``nodes[l]``.
        target_row: ``target_row[l]``, the row of each edge's target in ``nodes[l + 1]``.
        edge_graph: ``edge_graph[l]``, the graph of each edge of layer ``l``.
        depths: the distinct numbers of weight layers of the graphs in the batch.
        widths: ``widths[k]``, the most neurons a graph has in layer ``k`` (its largest ``node_index`` + 1).
    """

    nodes: tuple[Tensor, ...]  # nodes[k]: ids of the nodes of layer k
    node_graph: tuple[Tensor, ...]  # node_graph[k]: graph of each of them
    position: tuple[Tensor, ...]  # position[k]: their node_index (position within their graph's layer)
    edges: tuple[Tensor, ...]  # edges[l]: ids of the edges of layer l
    source_row: tuple[Tensor, ...]  # source_row[l]: row of each edge's source in nodes[l]
    target_row: tuple[Tensor, ...]  # target_row[l]: row of each edge's target in nodes[l + 1]
    edge_graph: tuple[Tensor, ...]  # edge_graph[l]: graph of each edge of layer l
    depths: tuple[int, ...]  # the distinct numbers of weight layers of the graphs in the batch
    widths: tuple[int, ...]  # widths[k]: the most neurons a graph has in layer k (its largest node_index + 1)


def layer_index(node_layer: Tensor, node_index: Tensor, edge_index: Tensor, edge_layer: Tensor, batch: Tensor,
                num_graphs: int, facts: Optional[GraphFacts] = None) -> LayerIndex:
    """Group the nodes and edges of a batch by layer (a stable sort, no per-layer search); the layers' sizes are
    the batch's ``facts`` (:class:`~neuralgraph.graph.blocks.GraphFacts`, read from the index fields when not given).

    Args:
        node_layer: ``node_layer`` ``[N]``.
        node_index: ``node_index`` ``[N]``.
        edge_index: ``edge_index`` ``[2, E]``.
        edge_layer: ``edge_layer`` ``[E]``.
        batch: graph of each node ``[N]``.
        num_graphs: graphs in the batch.
        facts: the batch's :class:`~neuralgraph.graph.blocks.GraphFacts`, if read already.

    Returns:
        The batch's :class:`LayerIndex`.
    """
    if facts is None:
        facts = index_facts(node_layer, node_index, edge_index, edge_layer, batch, num_graphs)
    node_order = torch.argsort(node_layer, stable=True)
    nodes = node_order.split(list(facts.node_counts))
    row_in_layer = torch.empty_like(node_layer)
    for ids in nodes:
        row_in_layer[ids] = torch.arange(len(ids), device=ids.device)
    edge_order = torch.argsort(edge_layer, stable=True)
    edges = edge_order.split(list(facts.edge_counts))
    src, dst = edge_index
    return LayerIndex(
        nodes=nodes,
        node_graph=tuple(batch[ids] for ids in nodes),
        position=tuple(node_index[ids] for ids in nodes),
        edges=edges,
        source_row=tuple(row_in_layer[src[ids]] for ids in edges),
        target_row=tuple(row_in_layer[dst[ids]] for ids in edges),
        edge_graph=tuple(batch[dst[ids]] for ids in edges),
        depths=facts.depths,
        widths=facts.layer_widths,
    )


class GraphContext(NamedTuple):
    """The structure every layer and head of a metanetwork reads, built once per batch.

    Layers on the general path take these fields as named tensors (each lists the ones it needs in
    ``MetanetLayer.context``). With reverse edges, ``edge_index``/``edge_layer`` have ``2E``
    columns, the reverse edges after the forward ones, and ``reverse[k]`` is the index of edge
    ``k``'s opposite.

    ``widths`` says the batch is one layout ``(d_0, ..., d_L)`` stored canonically
    (:mod:`neuralgraph.graph.blocks`), from its :class:`~neuralgraph.graph.blocks.WeightBlocks` or
    detected (:func:`~neuralgraph.graph.blocks.uniform_widths`): the metanet
    then runs its layers on dense per-layer blocks (``Metanet.forward``). ``blocks`` are the
    batch's :class:`~neuralgraph.graph.blocks.WeightBlocks` when it carries them; heads read its weights from them.

    Attributes:
        edge_index: ``[2, E or 2E]``.
        edge_layer: ``[E or 2E]``.
        node_layer: ``[N]``.
        node_index: ``[N]``, position of each neuron within its layer.
        batch: ``[N]``, graph of each node.
        num_graphs: graphs in the batch.
        num_edges: ``E``, the edges of the graph (the first ``E`` rows of edge features).
        reverse: ``[2E]``, the opposite of each edge (``reverse_edges=True``), else ``None``.
        layers: nodes and edges grouped by layer (``layer_index=True``), else ``None``.
        hidden: ``[N]`` bool, hidden neurons (neither inputs nor their network's outputs).
        widths: node-layer widths of a canonical one-layout batch, else ``None``.
        blocks: the batch's weights and biases, when it carries them.
        facts: what the batch's index fields hold (sizes, ranges), read on the CPU.
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
    facts: Optional[GraphFacts] = None  # what the batch's index fields hold (sizes, ranges), read on the CPU


def graph_context(graph: Graph, reverse_edges: bool = False, with_layer_index: bool = False,
                  dense: Optional[bool] = None, blocks: Optional[WeightBlocks] = None,
                  facts: Optional[GraphFacts] = None) -> GraphContext:
    """The :class:`GraphContext` of ``graph``: reverse edges appended and/or layers indexed on request.

    ``dense`` as in :func:`check_dense`; ``blocks``: the :class:`~neuralgraph.graph.blocks.WeightBlocks` the
    batch carries (its layout is then taken, not detected); ``facts``: the
    :class:`~neuralgraph.graph.blocks.GraphFacts` its builder read (else read here from the graph's index
    fields: the one time a step reads them back from a device).

    Args:
        graph: the graph or batch.
        reverse_edges: append a reverse edge per edge.
        with_layer_index: group nodes and edges by layer (:class:`LayerIndex`).
        dense: as in :func:`check_dense`.
        blocks: the batch's :class:`~neuralgraph.graph.blocks.WeightBlocks`, if it carries them.
        facts: the batch's :class:`~neuralgraph.graph.blocks.GraphFacts`, if its builder read them.

    Returns:
        The batch's :class:`GraphContext`.
    """
    batch, count = node_graph_index(graph), num_graphs(graph)
    edge_index, edge_layer = graph.edge_index, graph.edge_layer
    num_edges = edge_index.shape[1]
    if blocks is not None:
        check_blocks(blocks, graph.num_nodes, num_edges, count)
    if facts is None:
        facts = graph_facts(graph, None if blocks is None else blocks.layout, detect_layout=dense is not False)
    widths = check_dense(dense, facts.widths if blocks is None else blocks.layout)
    layers = (layer_index(graph.node_layer, graph.node_index, edge_index, edge_layer, batch, count, facts)
              if with_layer_index else None)
    reverse = None
    if reverse_edges:
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
        edge_layer = torch.cat([edge_layer, edge_layer])
        reverse = reverse_edge_partner(num_edges, edge_index.device)
    hidden = (graph.node_layer > 0) & (graph.node_layer < scatter(graph.node_layer, batch, 0, count, "max")[batch])
    return GraphContext(edge_index, edge_layer, graph.node_layer, graph.node_index, batch, count, num_edges, reverse,
                        layers, hidden, widths, blocks, facts)


def check_dense_rows(owner: str, x: Tensor, edge_attr: Tensor, widths: Sequence[int], directions: int = 1) -> None:
    """ValueError naming ``owner`` unless ``x``/``edge_attr`` have the rows of whole graphs of layout ``widths``
    (``directions = 2``: each edge and its reverse).

    Args:
        owner: the name the error starts with.
        x: node rows ``[N, C]``.
        edge_attr: edge rows ``[E, C]`` (``[2E, C]`` with reverse edges).
        widths: the layout ``(d_0, ..., d_L)``.
        directions: 1, or 2 with reverse edges.
    """
    nodes, edges = sum(widths), directions * sum(a * b for a, b in zip(widths, widths[1:]))
    graphs = x.shape[0] // nodes
    if x.shape[0] != graphs * nodes or edge_attr.shape[0] != graphs * edges:
        raise ValueError(f"{owner}: widths={tuple(widths)} describe graphs of {nodes} nodes and {edges} edge rows, "
                         f"but x has {x.shape[0]} rows and edge_attr {edge_attr.shape[0]}")


def node_blocks(x: Tensor, widths: Sequence[int]) -> list[Tensor]:
    """Node rows ``[B N, C]`` of a canonical batch as ``[B, d_k, C]`` per node layer (views of contiguous rows).

    Args:
        x: node rows ``[B N, C]``.
        widths: the layout ``(d_0, ..., d_L)``.

    Returns:
        Per node layer ``k``, ``[B, d_k, C]``.
    """
    return list(x.reshape(-1, sum(widths), x.shape[-1]).split(list(widths), dim=1))


def edge_blocks(edge: Tensor, widths: Sequence[int], directions: int = 1) -> list[Tensor]:
    """Edge rows of a canonical batch per weight layer (views of contiguous rows): ``[B, d_{l+1}, d_l, C]``
    (row = target neuron, column = source neuron); with ``directions=2`` (rows ``[forward edges, reverse
    edges]``) ``[2, B, d_{l+1}, d_l, C]``, the reverse of edge ``j -> i`` where that edge is.

    Args:
        edge: edge rows ``[B E, C]`` (``[2 B E, C]`` with reverse edges).
        widths: the layout ``(d_0, ..., d_L)``.
        directions: 1, or 2 with reverse edges.

    Returns:
        Per weight layer, the block described above.
    """
    sizes = [d_in * d_out for d_in, d_out in zip(widths, widths[1:])]
    parts = edge.reshape(directions, -1, sum(sizes), edge.shape[-1]).split(sizes, dim=2)
    blocks = [part.unflatten(2, (d_out, d_in)) for part, d_in, d_out in zip(parts, widths, widths[1:])]
    return [block[0] for block in blocks] if directions == 1 else blocks


def block_rows(blocks: Sequence[Tensor], dtype: Optional[torch.dtype] = None) -> Tensor:
    """Inverse of :func:`node_blocks` / :func:`edge_blocks` (one direction): per-layer blocks ``[B, ..., C]``
    to rows (one copy), in ``dtype`` when given: converted as they are copied, so that the rows never exist
    in the blocks' dtype as well (the edges of ``Metanet(edge_dtype=...)``).

    Args:
        blocks: per-layer node or edge blocks ``[B, ..., C]``.
        dtype: the rows' dtype (default: the blocks').

    Returns:
        Rows ``[B n, C]``, graph by graph.
    """
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
