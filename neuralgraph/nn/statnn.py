r"""StatNN (Unterthiner et al., 2020; the baseline of NFN's Small CNN Zoo table): an MLP on weight statistics.

Per weight layer ``l`` of each network, the mean, variance and 0/25/50/75/100% quantiles of its
weights and of its biases (14 numbers per layer, the features of
:func:`neuralgraph.data.cnn_zoo.weight_statistics`), standardised with the training set's mean and
std, go through an MLP. The statistics are invariant to every permutation of the neurons of every
layer, input and output neurons included (``symmetry = "np"``), and to nothing else.

It is a baseline, not a message-passing metanetwork: it is registered in
:data:`neuralgraph.nn.registry.BASELINES` (``metanet: statnn`` in a config), so that it trains
through the same task, data module and ``neuralgraph fit`` path as the metanetworks, while suites
and benchmarks over :data:`~neuralgraph.nn.METANETS` do not include it. Its output is the MLP's
``hidden_dim`` vector per network, given to every node and edge of the network, so that the task's
:class:`~neuralgraph.nn.heads.InvariantReadout` (which pools per layer) reads it unchanged.

Standardisation: the task's ``normalize_inputs`` callback
(:class:`~neuralgraph.training.callbacks.InputStatistics`) hands the training graphs to
``encoder.set_input_statistics`` before a fit; the mean and std of the statistics become buffers, so
checkpoints carry them. Without it the statistics go in unscaled.

Zero-padded edge features: a graph pads every edge's features to the widest kernel (a CNN's
classifier weights are 1 feature of 9). ``layer_features`` gives the number of real features of
each weight layer (``[9, 9, 9, 1]`` for the Small CNN Zoo), so that padding never enters a
statistic; ``None`` reads all of them (MLPs, ``F = 1``).

Graphs beyond a chain (``general=True``, set from the data's ``GraphSpec`` when its graphs have
skip, normalisation or attention edges: ResNets, transformers, zoos of several depths): node
layer ``l + 1``'s slot holds the statistics of every parameter edge into it (weights, shortcuts,
a norm's ``gamma``, query/key/value/output projections, positional embeddings; not the skip,
member and pair edges, which hold the structure) and of its biases. Each edge group of one kind
reads its features up to the last column that is nonzero in that network's group (a kernel's
own width; a positional embedding's one feature beside a 7x7 convolution's 49). A network with
fewer node layers than ``weight_layers`` has zeros in the missing slots, as has a slot without
edges (a transformer's token positions, its heads), so networks of mixed depths are one input.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter

from neuralgraph.graph import STRUCTURAL_EDGE_KINDS, Graph
from neuralgraph.graph.blocks import GraphFacts, WeightBlocks, graph_facts, node_graph_index, num_graphs
from neuralgraph.graph.spec import GraphSpec
from neuralgraph.nn.base import Metanet
from neuralgraph.nn.context import GraphContext, graph_context
from neuralgraph.nn.encoder import MAX_LAYERS
from neuralgraph.nn.registry import register_baseline

QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)
STATISTICS = 2 + len(QUANTILES)  # mean, variance, quantiles


def group_statistics(values: Tensor, group: Tensor, groups: int, allow_empty: bool = False) -> Tensor:
    """``[groups, 7]``: mean, unbiased variance and the 0/25/50/75/100% quantiles (linear interpolation,
    as ``torch.quantile``) of the ``values`` of each group; every group must have a value, or, with
    ``allow_empty``, an empty group's statistics are 0 (and nothing is read back from the values' device).

    Args:
        values: ``[n]`` values.
        group: ``[n]`` the group of each value.
        groups: number of groups.
        allow_empty: let groups without values be (zero statistics).

    Returns:
        ``[groups, 7]``.
    """
    count = torch.zeros(groups, dtype=torch.long, device=group.device).index_add_(0, group, torch.ones_like(group))
    empty = count == 0
    if not allow_empty and bool(empty.any()):
        raise ValueError(f"StatNN: group {int(empty.nonzero()[0])} has no value")
    if values.numel() == 0:
        return values.new_zeros(groups, STATISTICS)
    n = count.clamp(min=1).to(values.dtype)
    mean = scatter(values, group, 0, groups, "sum") / n
    var = scatter((values - mean[group]).square(), group, 0, groups, "sum") / (n - 1).clamp(min=1)
    order = torch.argsort(values, stable=True)
    order = order[torch.argsort(group[order], stable=True)]  # by group, then by value
    ordered = values[order]
    start = torch.cumsum(count, 0) - count
    quantiles = []
    for q in QUANTILES:
        position = q * (n - 1)
        low = position.floor()
        high = torch.minimum(low + 1, n - 1)
        last = len(ordered) - 1  # an empty group's indices point anywhere; its row is zeroed below
        below, above = ordered[(start + low.long()).clamp(max=last)], ordered[(start + high.long()).clamp(max=last)]
        quantiles.append(below + (position - low) * (above - below))
    return torch.stack([mean, var, *quantiles], dim=1).masked_fill(empty[:, None], 0.0)


def graph_statistics(graph: Graph, layer_features: Optional[Sequence[int]], weight_layers: int) -> Tensor:
    """``[B, 14 * weight_layers]``: per weight layer, the statistics of its weights, then of its biases.

    Weights are the first ``layer_features[l]`` features of the weight edges into layer ``l + 1``
    (skip and shortcut edges are not weights of a layer); biases are ``x[:, 0]`` of layer ``l + 1``'s
    neurons. Errors name the field: a graph of another depth, a layer without edges.

    Args:
        graph: parameter graphs of chains (a ``Data`` or a ``Batch``).
        layer_features: real edge features per weight layer, or ``None`` for all of ``edge_attr``.
        weight_layers: the networks' depth.

    Returns:
        ``[B, 14 * weight_layers]``.
    """
    B = num_graphs(graph)
    node_graph = node_graph_index(graph)
    depth = scatter(graph.node_layer, node_graph, 0, B, "max")
    if bool((depth != weight_layers).any()):
        raise ValueError(f"StatNN: built for networks of {weight_layers} weight layers, but a graph has "
                         f"{int(depth[depth != weight_layers][0])}")
    edge_graph = node_graph[graph.edge_index[1]]
    weight_edge = (torch.ones_like(graph.edge_layer, dtype=torch.bool) if getattr(graph, "edge_kind", None) is None
                   else graph.edge_kind == 0)
    features = []
    for l in range(weight_layers):
        width = graph.edge_attr.shape[1] if layer_features is None else layer_features[l]
        if width > graph.edge_attr.shape[1]:
            raise ValueError(f"StatNN: layer_features[{l}]={width}, but the graphs' edge_attr has "
                             f"{graph.edge_attr.shape[1]} features")
        edges = (graph.edge_layer == l) & weight_edge
        weights = graph.edge_attr[edges, :width]
        features.append(group_statistics(weights.flatten(), edge_graph[edges].repeat_interleave(width), B))
        nodes = graph.node_layer == l + 1
        features.append(group_statistics(graph.x[nodes, 0], node_graph[nodes], B))
    return torch.cat(features, dim=1)


def block_statistics(blocks: WeightBlocks, layer_features: Optional[Sequence[int]], weight_layers: int) -> Tensor:
    """:func:`graph_statistics` of a batch that carries its :class:`~neuralgraph.graph.blocks.WeightBlocks`: each
    layer's weights and biases are one ``[B, n]`` row per network, so the statistics are row reductions and a
    sort, of sizes known from the blocks' shapes (nothing read back from their device).

    Args:
        blocks: the batch's weights and biases.
        layer_features: real edge features per weight layer, or ``None`` for all.
        weight_layers: the networks' depth.

    Returns:
        ``[B, 14 * weight_layers]``.
    """
    if len(blocks.weights) != weight_layers:
        raise ValueError(f"StatNN: built for networks of {weight_layers} weight layers, but a graph has "
                         f"{len(blocks.weights)}")
    features = []
    for l, (weight, bias) in enumerate(zip(blocks.weights, blocks.biases)):
        width = weight.shape[-1] if layer_features is None else layer_features[l]
        if width > weight.shape[-1]:
            raise ValueError(f"StatNN: layer_features[{l}]={width}, but the graphs' edge_attr has "
                             f"{weight.shape[-1]} features")
        for values in (weight[..., :width].flatten(1), bias):
            n = values.shape[1]
            mean = values.mean(1)
            var = (values - mean[:, None]).square().sum(1) / max(n - 1, 1)
            ordered = values.sort(1).values
            quantiles = []
            for q in QUANTILES:
                position = q * (n - 1)
                low = int(position)
                below, above = ordered[:, low], ordered[:, min(low + 1, n - 1)]
                quantiles.append(below + (position - low) * (above - below))
            features.append(torch.stack([mean, var, *quantiles], dim=1))
    return torch.cat(features, dim=1)


def general_graph_statistics(graph: Graph, weight_layers: int, facts: Optional[GraphFacts] = None) -> Tensor:
    """``[B, 14 * weight_layers]`` for graphs beyond a chain (module docstring): per node layer
    ``l + 1``, the statistics of its parameter edges (each group of one kind to its last nonzero
    feature) and of its biases; zeros where a network has no such layer or it has no edges.

    The edges are taken by (edge layer, edge kind), each such group's ``edge_attr`` columns up to the
    batch's widest in it (``facts.edge_group_features``), so the padding to the widest kernel is not
    sorted (a ViT's 7x7 patch kernel pads every other edge's 1 feature to 49); the values outside every
    statistic (a network's own padding, input neurons) go to one extra group, left out at the end. Every
    tensor has a size the batch's ``facts`` (:class:`~neuralgraph.graph.blocks.GraphFacts`, read here when
    not given or read without ``edge_attr``) give: nothing is read back.

    Args:
        graph: general parameter graphs (a ``Data`` or a ``Batch``).
        weight_layers: the largest depth the model reads.
        facts: the batch's graph facts, if its builder read them.

    Returns:
        ``[B, 14 * weight_layers]``.
    """
    if facts is None or facts.edge_group_features is None:
        facts = graph_facts(graph, detect_layout=False)
    B = num_graphs(graph)
    node_graph = node_graph_index(graph)
    depth = max(facts.depths, default=0)
    if depth > weight_layers:
        raise ValueError(f"StatNN: built for networks of at most {weight_layers} weight layers, but a graph has "
                         f"{depth}")
    kind = getattr(graph, "edge_kind", None)
    kind = torch.zeros_like(graph.edge_layer) if kind is None else kind
    outside = B * weight_layers  # the extra group
    slot = node_graph[graph.edge_index[1]] * weight_layers + graph.edge_layer  # (graph, layer) of each edge
    kinds = 1 if facts.max_edge_kind is None else facts.max_edge_kind + 1
    values, slots = [], []
    by_group = torch.argsort(graph.edge_layer * kinds + kind, stable=True).split(list(facts.edge_group_counts))
    for key, (edges, features) in enumerate(zip(by_group, facts.edge_group_features)):
        if key % kinds in STRUCTURAL_EDGE_KINDS or not features or not len(edges):
            continue
        attr, edge_slot = graph.edge_attr[edges, :features], slot[edges]
        columns = torch.arange(features, device=attr.device)
        last = torch.where(attr != 0, columns, -1).amax(1)
        width = scatter(last, edge_slot, 0, outside, "max") + 1  # each network's own width in this group
        values.append(attr.flatten())
        slots.append(torch.where(columns < width[edge_slot][:, None], edge_slot[:, None], outside).flatten())
    edge_values = torch.cat(values) if values else graph.edge_attr.new_zeros(0)
    edge_slots = torch.cat(slots) if slots else slot.new_zeros(0)
    weights = group_statistics(edge_values, edge_slots, outside + 1, allow_empty=True)[:outside]
    hidden = graph.node_layer > 0
    node_slot = torch.where(hidden, node_graph * weight_layers + graph.node_layer - 1, outside)
    biases = group_statistics(graph.x[:, 0], node_slot, outside + 1, allow_empty=True)[:outside]
    return torch.cat([weights.view(B, weight_layers, -1), biases.view(B, weight_layers, -1)], dim=2).flatten(1)


class StatisticsInput(nn.Module):
    """StatNN's input: the weight statistics of each graph, standardised with stored training statistics.

    Stands where a metanetwork's :class:`~neuralgraph.nn.encoder.GraphEncoder` stands, so that the
    task's ``normalize_inputs`` callback (``encoder.set_input_statistics``) standardises it.

    Args:
        layer_features: real edge features per weight layer, or ``None`` for every feature.
        weight_layers: the networks' depth (the largest, with ``general``).
        general: read general parameter graphs (:func:`general_graph_statistics`).
    """

    def __init__(self, layer_features: Optional[Sequence[int]], weight_layers: int, general: bool = False):
        super().__init__()
        self.layer_features = None if layer_features is None else tuple(layer_features)
        self.weight_layers = weight_layers
        self.general = general
        size = 2 * STATISTICS * weight_layers
        self.register_buffer("mean", torch.zeros(size))
        self.register_buffer("std", torch.ones(size))

    @property
    def size(self) -> int:
        return self.mean.numel()

    def statistics(self, graph: Graph, blocks: Optional[WeightBlocks] = None,
                   facts: Optional[GraphFacts] = None) -> Tensor:
        """``[B, 14 * weight_layers]``: from the batch's ``blocks`` when it carries them (a chain), else from the
        graph (with its ``facts``, :class:`~neuralgraph.graph.blocks.GraphFacts`, when given)."""
        if self.general:
            return general_graph_statistics(graph, self.weight_layers, facts)
        if blocks is not None:
            return block_statistics(blocks, self.layer_features, self.weight_layers)
        return graph_statistics(graph, self.layer_features, self.weight_layers)

    @torch.no_grad()
    def set_input_statistics(self, graph: Graph) -> None:
        """Standardise with the mean and std of the statistics of the (training) networks of ``graph``."""
        values = self.statistics(graph)
        if values.shape[0] < 2:
            raise ValueError(f"StatNN: standardising needs at least 2 training networks, got {values.shape[0]}")
        self.mean.copy_(values.mean(0))
        self.std.copy_(values.std(0).clamp(min=1e-12))

    def forward(self, graph: Graph, blocks: Optional[WeightBlocks] = None, facts: Optional[GraphFacts] = None) -> Tensor:
        return (self.statistics(graph, blocks, facts) - self.mean) / self.std


@register_baseline("statnn")
class StatNN(Metanet):
    """MLP on per-layer weight and bias statistics (module docstring).

    Args:
        hidden_dim: width of the MLP's hidden layers and of its output (the features handed to the head).
        num_layers: the MLP's layers (at least 1): ``num_layers`` linear layers, each followed by ReLU
            (and dropout, if any).
        dropout: dropout after each ReLU.
        layer_features: real edge features of each weight layer (``[9, 9, 9, 1]`` for the Small CNN
            Zoo's three 3x3 convolutions and classifier); its length is the networks' depth.
        weight_layers: the networks' number of weight layers when ``layer_features`` is not given.
        edge_features: the graphs' edge feature width (given by the data's GraphSpec); at least every
            ``layer_features`` entry.
        general: read graphs beyond a chain (module docstring); ``weight_layers`` is then the
            largest depth, and ``layer_features`` is not used (each edge group's width is read).
    """

    symmetry = "np"

    def __init__(self, hidden_dim: int = 64, num_layers: int = 2, dropout: float = 0.0, *,
                 layer_features: Optional[Sequence[int]] = None, weight_layers: Optional[int] = None,
                 edge_features: int = 1, general: bool = False):
        if num_layers < 1:
            raise ValueError(f"StatNN: num_layers={num_layers}: the MLP needs at least 1 layer")
        if layer_features is None and weight_layers is None:
            raise ValueError("StatNN: give layer_features (real edge features per weight layer) or weight_layers")
        if layer_features is not None:
            layer_features = [int(f) for f in layer_features]
            if weight_layers is not None and weight_layers != len(layer_features):
                raise ValueError(f"StatNN: weight_layers={weight_layers} but layer_features has "
                                 f"{len(layer_features)} entries")
            bad = [f for f in layer_features if not 1 <= f <= edge_features]
            if bad:
                raise ValueError(f"StatNN: layer_features={layer_features}: each must be in 1..edge_features "
                                 f"({edge_features})")
            weight_layers = len(layer_features)
        if weight_layers < 1:
            raise ValueError(f"StatNN: weight_layers={weight_layers}: expected at least 1")
        if general and layer_features is not None:
            raise ValueError("StatNN: general=True reads each edge group's own width; leave layer_features unset")
        # the task's readout pools every layer of these networks (their features are all the same)
        super().__init__(hidden_dim, num_layers, dropout, edge_features=edge_features,
                         max_layers=max(MAX_LAYERS, weight_layers))
        self.encoder = StatisticsInput(layer_features, weight_layers, general)  # no graph encoder: statistics in
        sizes = [self.encoder.size] + [hidden_dim] * num_layers
        mlp: list[nn.Module] = []
        for d_in, d_out in zip(sizes, sizes[1:]):
            mlp += [nn.Linear(d_in, d_out), nn.ReLU()] + ([nn.Dropout(dropout)] if dropout else [])
        self.mlp = nn.Sequential(*mlp)

    def reset_parameters(self) -> None:
        for module in self.mlp:
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def context(self, graph: Graph, blocks: Optional[WeightBlocks] = None,
                facts: Optional[GraphFacts] = None) -> GraphContext:
        return graph_context(graph, dense=False, blocks=blocks, facts=facts)

    def forward(self, graph: Graph, context: Optional[GraphContext] = None) -> tuple[Tensor, Tensor]:
        """The MLP's ``[B, hidden_dim]`` output, as the features of every node ``[N, hidden_dim]`` and
        every edge ``[E, hidden_dim]`` of its network."""
        context = self.context(graph) if context is None else context
        h = self.mlp(self.encoder(graph, context.blocks, context.facts))
        return h[context.batch], h[context.batch[graph.edge_index[1]]]

    @classmethod
    def spec_arguments(cls, spec: GraphSpec) -> dict[str, Any]:
        """The edge feature width; for graphs with skip, normalisation or attention edges, or of
        several depths, ``general`` and the largest depth."""
        if spec.skip_edges or len(set(spec.depths)) > 1:
            return {"edge_features": spec.edge_features, "general": True, "weight_layers": max(spec.depths)}
        return {"edge_features": spec.edge_features}

    def __repr__(self) -> str:
        return (f"StatNN(hidden_dim={self.hidden_dim}, num_layers={self.num_layers}, dropout={self.dropout}, "
                f"layer_features={self.encoder.layer_features}, weight_layers={self.encoder.weight_layers}, "
                f"general={self.encoder.general})")
