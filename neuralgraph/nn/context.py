"""What layers and heads read about a batch besides its features, built once per batch.

* :class:`WeightBlocks`: the per-layer weights and biases of a batch of networks of one layout,
  which the batch builders (``InrDataset.batch``, ``CnnZooDataset.batch``) carry next to the
  parameter graph they build from them. The graph of such a batch is stored canonically, so its
  layout is known without looking at the graph, and heads and targets read the weights without
  decoding it.
* :func:`uniform_widths`: the same layout detected from the index fields of a graph that comes
  without :class:`WeightBlocks` (a batch built by hand), once per batch.
* :class:`GraphFacts` (:func:`graph_facts`): what the batch's index fields hold (layer sizes, the
  largest index of each field, the layout), read once per batch on the CPU by the batch builders,
  so that a step on any device neither reads a value back nor makes a tensor of data-dependent size.
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

from neuralgraph.graph import WEIGHT_EDGE, Graph, GraphConversionError, graph_to_mlp


def node_graph_index(graph: Graph) -> Tensor:
    """Index of the graph each node belongs to (zeros for a single ``Data``).

    Args:
        graph: a ``Data`` or a ``Batch``.

    Returns:
        ``[N]`` long.
    """
    if isinstance(graph, Batch):
        return graph.batch
    return torch.zeros(graph.num_nodes, dtype=torch.long, device=graph.x.device)


def num_graphs(graph: Graph) -> int:
    """The number of graphs in ``graph``: a ``Batch``'s ``num_graphs``, 1 for a single ``Data``.

    Args:
        graph: a ``Data`` or a ``Batch``.

    Returns:
        The count.
    """
    return graph.num_graphs if isinstance(graph, Batch) else 1


def reverse_edge_partner(num_edges: int, device: Optional[torch.device] = None) -> Tensor:
    """For ``[forward edges, reverse edges]`` (``2E`` rows), the index of each edge's opposite.

    Args:
        num_edges: ``E``, the forward edges.
        device: where the index is made.

    Returns:
        ``[2E]`` long, ``k + E`` for a forward edge ``k`` and ``k - E`` for a reverse one.
    """
    return (torch.arange(2 * num_edges, device=device) + num_edges) % (2 * num_edges)


class WeightBlocks(NamedTuple):
    """Weights and biases of a batch of ``B`` networks of one layout, layer by layer.

    A batch builder that holds them keeps them next to the graph it builds from them (the
    ``blocks`` field of ``InrBatch`` and ``ZooBatch``); that graph is stored canonically (module
    docstring), which :func:`graph_context` takes on trust after checking the counts.

    Attributes:
        layout: ``(d_0, ..., d_L)``.
        weights: ``weights[l]`` ``[B, d_{l+1}, d_l, f_l]``, the ``f_l`` features of each edge (1: linear,
            ``kh*kw``: convolution).
        biases: ``biases[l]`` ``[B, d_{l+1}]``.
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
    ``blocks`` when it carries them, else decoded from the graph (``graph_to_mlp``).

    Args:
        graph: MLP parameter graphs (a ``Data`` or a ``Batch`` of one layout).
        blocks: the batch's :class:`WeightBlocks`, if it carries them.

    Returns:
        ``(weights, biases)``, per layer.
    """
    if blocks is not None:
        return blocks.mlps()
    weights, biases = graph_to_mlp(graph)
    if weights[0].dim() == 2:  # a single Data
        weights, biases = [w.unsqueeze(0) for w in weights], [b.unsqueeze(0) for b in biases]
    return weights, biases


def check_blocks(blocks: WeightBlocks, num_nodes: int, num_edges: int, count: int) -> None:
    """ValueError unless ``blocks`` describe ``count`` graphs of ``num_nodes`` nodes and ``num_edges`` edges in all.

    Args:
        blocks: the batch's weights and biases.
        num_nodes: the graph's node count.
        num_edges: the graph's edge count.
        count: the graph's number of graphs.
    """
    layout, B = blocks.layout, blocks.weights[0].shape[0]
    nodes, edges = B * sum(layout), B * sum(a * b for a, b in zip(layout, layout[1:]))
    if (B, nodes, edges) != (count, num_nodes, num_edges) or len(blocks.biases) != len(layout) - 1:
        raise ValueError(f"blocks: {B} networks of layout {layout} ({nodes} nodes, {edges} edges) do not describe "
                         f"the graph's {count} graphs, {num_nodes} nodes and {num_edges} edges")


@functools.lru_cache(maxsize=32)
def canonical_layout(sizes: tuple[int, ...], device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``node_layer``, ``node_index``, ``edge_layer`` and ``edge_index`` (``[2, e]``) of one graph of node-layer
    widths ``sizes`` stored canonically; built once per layout and device (read only), since every batch of a
    dataset has the same.

    Args:
        sizes: node-layer widths ``(d_0, ..., d_L)``.
        device: where the tensors live.

    Returns:
        ``(node_layer [n], node_index [n], edge_layer [e], edge_index [2, e])``.
    """
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

    Args:
        node_layer: the batch's ``node_layer`` ``[N]``.
        node_index: its ``node_index`` ``[N]``.
        edge_index: its ``edge_index`` ``[2, E]``.
        edge_layer: its ``edge_layer`` ``[E]``.
        batch: graph of each node ``[N]``.
        num_graphs: graphs in the batch.

    Returns:
        ``(d_0, ..., d_L)``, or ``None``.
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


class GraphFacts(NamedTuple):
    """What the index fields of a graph or batch hold, as Python numbers, read once per batch on the CPU.

    The batch builders (``InrDataset.batch``, ``CnnZooDataset.batch``, ``TransformerZooDataset.batch``) read
    them where they build the batch (:func:`graph_facts`), and :func:`graph_context` hands them to the
    metanet, its layers and its heads: the encoder checks its embeddings' ranges against them, layers size
    their per-layer and per-group tensors with them. So a forward step on any device reads no value back
    from its tensors and creates none of data-dependent size. A batch that comes without them (built by
    hand) gets them from :func:`graph_context`: one read of its index fields per batch.

    Attributes:
        num_graphs: graphs in the batch.
        node_counts: nodes per node layer ``0..K``, ``K`` the deepest node layer of the batch.
        edge_counts: edges per edge layer ``0..max(K - 1, deepest edge layer)``.
        layer_widths: per node layer, the largest ``node_index`` there plus one (0: no node).
        depths: the distinct numbers of weight layers of the graphs (deepest node layer), sorted.
        layer_groups: the (graph, node layer) pairs that have nodes.
        largest_group: the most nodes of one (graph, node layer) pair.
        max_node_type: the largest ``node_type`` (-1: no node).
        max_edge_layer: the largest ``edge_layer`` (-1: no edge).
        max_edge_kind: the largest ``edge_kind`` (-1: no edge; ``None``: no ``edge_kind`` field).
        max_activation: the largest activation code (``None``: no ``activation`` field).
        skip_edges: some ``edge_kind`` is not ``WEIGHT_EDGE`` (a residual skip, a shortcut, ...).
        forward_edges: every edge goes to a later node layer than its source's.
        widths: the layout of a one-layout batch stored canonically, else ``None``.
    """

    num_graphs: int
    node_counts: tuple[int, ...]  # nodes per node layer 0..K, K the deepest node layer of the batch
    edge_counts: tuple[int, ...]  # edges per edge layer 0..max(K - 1, deepest edge layer)
    layer_widths: tuple[int, ...]  # per node layer, the largest node_index there plus one (0: no node)
    depths: tuple[int, ...]  # the distinct numbers of weight layers of the graphs (deepest node layer), sorted
    layer_groups: int  # the (graph, node layer) pairs that have nodes
    largest_group: int  # the most nodes of one (graph, node layer) pair
    max_node_type: int  # the largest node_type (-1: no node)
    max_edge_layer: int  # the largest edge_layer (-1: no edge)
    max_edge_kind: Optional[int]  # the largest edge_kind (-1: no edge; None: no edge_kind field)
    max_activation: Optional[int]  # the largest activation code (None: no activation field)
    skip_edges: bool  # some edge_kind is not WEIGHT_EDGE (a residual skip, a shortcut, ...)
    forward_edges: bool  # every edge goes to a later node layer than its source's
    widths: Optional[tuple[int, ...]]  # the layout of a one-layout batch stored canonically, else None


def _largest(values: Optional[Tensor], empty: int = -1) -> Optional[int]:
    return None if values is None else int(values.max()) if values.numel() else empty


def index_facts(node_layer: Tensor, node_index: Tensor, edge_index: Tensor, edge_layer: Tensor, batch: Tensor,
                num_graphs: int, node_type: Optional[Tensor] = None, edge_kind: Optional[Tensor] = None,
                activation: Optional[Tensor] = None, layout: Optional[tuple[int, ...]] = None,
                detect_layout: bool = True) -> GraphFacts:
    """The :class:`GraphFacts` of these index fields (moved to the CPU first, the one read of a device's
    tensors); ``layout``: the batch's, when its :class:`WeightBlocks` give it (then taken, not detected).

    Args:
        node_layer: ``node_layer`` ``[N]``.
        node_index: ``node_index`` ``[N]``.
        edge_index: ``edge_index`` ``[2, E]``.
        edge_layer: ``edge_layer`` ``[E]``.
        batch: graph of each node ``[N]``.
        num_graphs: graphs in the batch.
        node_type: ``node_type`` ``[N]``, if the graphs have it.
        edge_kind: ``edge_kind`` ``[E]``, if the graphs have it.
        activation: ``activation`` ``[N]``, if the graphs have it.
        layout: the batch's layout from its :class:`WeightBlocks`, if any.
        detect_layout: without ``layout``, detect it (:func:`uniform_widths`); ``False``: leave ``widths``
            ``None`` (a context for the general path only).

    Returns:
        The batch's :class:`GraphFacts`.
    """
    node_layer, node_index, edge_index, edge_layer, batch, node_type, edge_kind, activation = (
        None if t is None else t.detach().cpu()
        for t in (node_layer, node_index, edge_index, edge_layer, batch, node_type, edge_kind, activation))
    K = _largest(node_layer) + 1
    node_counts = torch.bincount(node_layer, minlength=K).tolist()
    edge_counts = torch.bincount(edge_layer, minlength=max(K - 1, 0)).tolist()
    layer_widths = torch.zeros(K, dtype=torch.long).scatter_reduce_(0, node_layer, node_index + 1, "amax").tolist()
    depths = torch.unique(scatter(node_layer, batch, 0, num_graphs, "max")).tolist() if num_graphs else []
    groups = torch.bincount(batch * K + node_layer, minlength=num_graphs * K)
    kind = None if edge_kind is None else edge_kind.long()
    src, dst = edge_index
    if layout is None and detect_layout:
        layout = uniform_widths(node_layer, node_index, edge_index, edge_layer, batch, num_graphs)
    return GraphFacts(
        num_graphs=num_graphs, node_counts=tuple(node_counts), edge_counts=tuple(edge_counts),
        layer_widths=tuple(layer_widths), depths=tuple(depths), layer_groups=int((groups > 0).sum()),
        largest_group=_largest(groups, 0), max_node_type=_largest(node_type), max_edge_layer=_largest(edge_layer),
        max_edge_kind=_largest(kind), max_activation=_largest(activation),
        skip_edges=kind is not None and bool((kind != WEIGHT_EDGE).any()),
        forward_edges=bool((node_layer[dst] > node_layer[src]).all()), widths=layout)


def graph_facts(graph: Graph, layout: Optional[tuple[int, ...]] = None, detect_layout: bool = True) -> GraphFacts:
    """The :class:`GraphFacts` of ``graph`` (a ``ParameterGraph`` or a ``Batch``), for its batch builder to
    carry beside it; ``layout``: the batch's, when its :class:`WeightBlocks` give it.

    Args:
        graph: the graph or batch.
        layout: the batch's layout from its :class:`WeightBlocks`, if any.
        detect_layout: as :func:`index_facts`.

    Returns:
        Its :class:`GraphFacts`.
    """
    return index_facts(graph.node_layer, graph.node_index, graph.edge_index, graph.edge_layer,
                       node_graph_index(graph), num_graphs(graph), getattr(graph, "node_type", None),
                       getattr(graph, "edge_kind", None), getattr(graph, "activation", None), layout,
                       detect_layout)


def context_facts(graph: Graph, context: Optional["GraphContext"]) -> GraphFacts:
    """The :class:`GraphFacts` of ``graph``: its ``context``'s, else read from the graph (a context built by hand).

    Args:
        graph: the graph or batch.
        context: its :class:`GraphContext`, or ``None``.

    Returns:
        Its :class:`GraphFacts`.
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


def dense_widths(node_layer: Tensor, node_index: Tensor, edge_index: Tensor, edge_layer: Tensor, batch: Tensor,
                 num_graphs: int, dense: Optional[bool] = None,
                 layout: Optional[tuple[int, ...]] = None) -> Optional[tuple[int, ...]]:
    """The widths layers read dense blocks with: ``layout`` where the batch's :class:`WeightBlocks` give it, else
    :func:`uniform_widths`; ``dense=False`` ``None`` (the general path only), ``True`` the widths or an error.

    Args:
        node_layer: ``node_layer`` ``[N]``.
        node_index: ``node_index`` ``[N]``.
        edge_index: ``edge_index`` ``[2, E]``.
        edge_layer: ``edge_layer`` ``[E]``.
        batch: graph of each node ``[N]``.
        num_graphs: graphs in the batch.
        dense: as in :func:`check_dense`.
        layout: the layout the batch's :class:`WeightBlocks` give, if any.

    Returns:
        The widths, or ``None`` for the general path.
    """
    if dense is False:
        return None
    return check_dense(dense, layout if layout is not None else uniform_widths(node_layer, node_index, edge_index,
                                                                               edge_layer, batch, num_graphs))


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
    the batch's ``facts`` (:class:`GraphFacts`, read from the index fields when not given).

    Args:
        node_layer: ``node_layer`` ``[N]``.
        node_index: ``node_index`` ``[N]``.
        edge_index: ``edge_index`` ``[2, E]``.
        edge_layer: ``edge_layer`` ``[E]``.
        batch: graph of each node ``[N]``.
        num_graphs: graphs in the batch.
        facts: the batch's :class:`GraphFacts`, if read already.

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

    ``widths`` says the batch is one layout ``(d_0, ..., d_L)`` stored canonically (module
    docstring), from its :class:`WeightBlocks` or detected (:func:`uniform_widths`): the metanet
    then runs its layers on dense per-layer blocks (``Metanet.forward``). ``blocks`` are the
    batch's :class:`WeightBlocks` when it carries them; heads read its weights from them.

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

    ``dense`` as in :func:`dense_widths`; ``blocks``: the :class:`WeightBlocks` the batch carries (its
    layout is then taken, not detected); ``facts``: the :class:`GraphFacts` its builder read (else read
    here from the graph's index fields: the one time a step reads them back from a device).

    Args:
        graph: the graph or batch.
        reverse_edges: append a reverse edge per edge.
        with_layer_index: group nodes and edges by layer (:class:`LayerIndex`).
        dense: as in :func:`check_dense`.
        blocks: the batch's :class:`WeightBlocks`, if it carries them.
        facts: the batch's :class:`GraphFacts`, if its builder read them.

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
