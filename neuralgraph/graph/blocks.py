"""What a batch of parameter graphs carries besides the graph, and the order its graph is stored in.

* Canonical storage: graph after graph, each with the same layout, nodes ordered by (layer,
  position) and edges by (layer, target position, source position), as
  :func:`~neuralgraph.graph.schema.layout_structure` lays out one graph and ``blocks_to_graph``
  a batch of one layout (:func:`canonical_layout` is that order on a device).
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
* :class:`MetanetBatch`: what every task reads of a batch (``InrBatch``, ``ZooBatch``): the graph,
  its :class:`WeightBlocks` and :class:`GraphFacts`, the examples' positions and count.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional, Protocol, Sequence

import torch
from torch import Tensor
from torch_geometric.data import Batch
from torch_geometric.utils import scatter

from neuralgraph.graph.decode import graph_to_mlp
from neuralgraph.graph.schema import WEIGHT_EDGE, Graph, GraphConversionError, Layout, layout_structure


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


class WeightBlocks(NamedTuple):
    """Weights and biases of a batch of ``B`` networks of one layout, layer by layer.

    A batch builder that holds them keeps them next to the graph it builds from them (the
    ``blocks`` field of ``InrBatch`` and ``ZooBatch``); that graph is stored canonically (module
    docstring), which :func:`~neuralgraph.nn.context.graph_context` takes on trust after checking the
    counts.

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
def canonical_layout(sizes: Layout, device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``node_layer``, ``node_index``, ``edge_layer`` and ``edge_index`` (``[2, e]``) of one graph of node-layer
    widths ``sizes`` stored canonically: those of :func:`~neuralgraph.graph.schema.layout_structure`, copied to
    ``device`` once per layout and device (read only), since every batch of a dataset has the same.

    Args:
        sizes: node-layer widths ``(d_0, ..., d_L)``.
        device: where the tensors live.

    Returns:
        ``(node_layer [n], node_index [n], edge_layer [e], edge_index [2, e])``.
    """
    structure = layout_structure(tuple(sizes))
    return tuple(structure[key].to(device, copy=True) for key in ("node_layer", "node_index", "edge_layer",
                                                                    "edge_index"))


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
    """What the index fields of a graph or batch hold, as Python numbers, read once per batch on the CPU
    (and, where the builder passes ``edge_attr``, how many of its columns each edge group fills).

    The batch builders (``InrDataset.batch``, ``CnnZooDataset.batch``, ``TransformerZooDataset.batch``) read
    them where they build the batch (:func:`graph_facts`), and :func:`~neuralgraph.nn.context.graph_context`
    hands them to the metanet, its layers and its heads: the encoder checks its embeddings' ranges against
    them, layers size their per-layer and per-group tensors with them. So a forward step on any device reads
    no value back from its tensors and creates none of data-dependent size. A batch that comes without them
    (built by hand) gets them from :func:`~neuralgraph.nn.context.graph_context`: one read of its index
    fields per batch.

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
        edge_group_counts: edges per (edge layer, edge kind) pair, at ``layer * kinds + kind`` (``kinds``:
            ``max_edge_kind + 1``, 1 without an ``edge_kind`` field); ``None`` when read without ``edge_attr``.
        edge_group_features: per such pair, its last ``edge_attr`` column holding a nonzero value, plus one (0:
            none): the pair's real feature width under the padding to the widest kernel (StatNN reads only
            those columns); ``None`` when read without ``edge_attr``.
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
    edge_group_counts: Optional[tuple[int, ...]] = None  # edges per (edge layer, edge kind) (None: no edge_attr read)
    edge_group_features: Optional[tuple[int, ...]] = None  # per (edge layer, edge kind), last nonzero column + 1


def _largest(values: Optional[Tensor], empty: int = -1) -> Optional[int]:
    return None if values is None else int(values.max()) if values.numel() else empty


def index_facts(node_layer: Tensor, node_index: Tensor, edge_index: Tensor, edge_layer: Tensor, batch: Tensor,
                num_graphs: int, node_type: Optional[Tensor] = None, edge_kind: Optional[Tensor] = None,
                activation: Optional[Tensor] = None, layout: Optional[tuple[int, ...]] = None,
                detect_layout: bool = True, edge_attr: Optional[Tensor] = None) -> GraphFacts:
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
        edge_attr: ``edge_attr`` ``[E, F]``, to read each (edge layer, edge kind) pair's count and real width;
            ``None``: leave them ``None``.

    Returns:
        The batch's :class:`GraphFacts`.
    """
    node_layer, node_index, edge_index, edge_layer, batch, node_type, edge_kind, activation = (
        None if t is None else t.detach().cpu()
        for t in (node_layer, node_index, edge_index, edge_layer, batch, node_type, edge_kind, activation))
    group_counts = group_features = None
    if edge_attr is not None:
        kinds = 1 if edge_kind is None else _largest(edge_kind) + 1
        key = edge_layer * kinds + (0 if edge_kind is None else edge_kind.long())  # (edge layer, edge kind)
        n = _largest(key) + 1
        attr = edge_attr.detach().cpu()
        last = torch.where(attr != 0, torch.arange(attr.shape[1]), -1).max(1).values  # [E], -1: all zero
        group_counts = tuple(torch.bincount(key, minlength=n).tolist())
        group_features = tuple((key.new_full((n,), -1).scatter_reduce_(0, key, last, "amax") + 1).tolist())
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
        forward_edges=bool((node_layer[dst] > node_layer[src]).all()), widths=layout,
        edge_group_counts=group_counts, edge_group_features=group_features)


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
                       detect_layout, graph.edge_attr)


class MetanetBatch(Protocol):
    """What every task reads of a batch: the parameter graphs, the weights they were built from, what their
    index fields hold, and the examples' positions. ``InrBatch`` and ``ZooBatch`` have these fields (and each
    the targets of its tasks: images and labels, accuracies); a task that reads only these takes any of them.

    Attributes:
        graph: the parameter graphs of the batch's ``B`` networks.
        blocks: their :class:`WeightBlocks`, or ``None`` (a batch built by hand, a general parameter graph).
        facts: the graph's :class:`GraphFacts`, read where the batch was built, or ``None`` (read at the step).
        index: ``[B]`` position of each network in its split.
        size: ``B``.
    """

    @property
    def graph(self) -> Batch: ...

    @property
    def blocks(self) -> Optional[WeightBlocks]: ...

    @property
    def facts(self) -> Optional[GraphFacts]: ...

    @property
    def index(self) -> Tensor: ...

    @property
    def size(self) -> int: ...
