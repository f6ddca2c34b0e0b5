"""From a parameter graph to hidden node and edge features, the input of every metanetwork.

Each scalar (a neuron's bias, a weight, or the ``F`` features of a conv edge) is lifted to
``hidden_dim`` channels, linearly or through random Fourier features, and a learned positional
embedding is added:

* ``positional="neuron"`` (default): one embedding per ``node_type``, i.e. one for each input
  neuron, one for each output neuron and one shared by all neurons of a hidden layer. Hidden
  neurons stay interchangeable (the hidden-permutation group) while the order of inputs and
  outputs, which carries meaning, is visible.
* ``positional="layer"``: one embedding per layer only, for metanetworks equivariant to the
  larger NP group that also permutes input and output neurons.

Edges get one embedding per ``edge_layer`` in both cases.

With ``reverse_edges=True`` every edge ``j -> i`` is paired with a reverse edge ``i -> j`` and
the edge set becomes ``[forward edges, reverse edges]`` (``2E`` rows). Each row is lifted from
``[e_ij, e_ji]``, the features of the pair in its own direction and in the opposite direction,
where the missing direction is zero (a parameter graph has no edge both ways): the forward row
reads ``[w, 0]`` and the reverse row ``[0, w]``, so the direction is never lost.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch

from neuralgraph.graph.core import Graph

POSITIONAL_MODES = ("neuron", "layer")
MAX_LAYERS = 16
MAX_NODE_TYPES = 128


class EncodedGraph(NamedTuple):
    """Hidden features of a graph, and the structure that message passing runs on.

    ``edge_index``/``edge_layer`` have ``2E`` columns when the encoder adds reverse edges
    (forward edges first); ``num_edges`` is the original ``E``.
    """

    node: Tensor  # [N, hidden_dim]
    edge: Tensor  # [E or 2E, hidden_dim]
    edge_index: Tensor  # [2, E or 2E]
    edge_layer: Tensor  # [E or 2E]
    num_edges: int
    graph: Graph


def node_graph_index(graph: Graph) -> Tensor:
    """Index of the graph each node belongs to (zeros for a single ``Data``)."""
    if isinstance(graph, Batch):
        return graph.batch
    return torch.zeros(graph.num_nodes, dtype=torch.long, device=graph.x.device)


def num_graphs(graph: Graph) -> int:
    return graph.num_graphs if isinstance(graph, Batch) else 1


def check_index_range(name: str, index: Tensor, size: int, option: str) -> None:
    """Raise a ValueError naming ``name`` when ``index`` does not fit an embedding of ``size``."""
    if index.numel() and int(index.max()) >= size:
        raise ValueError(f"graph field {name} reaches {int(index.max())} but {option}={size}; raise {option}")


class ScalarLift(nn.Module):
    r"""Lifts ``F`` scalar features to ``hidden_dim`` channels.

    Linear: :math:`h = W v + b`. Fourier (``fourier_features = m > 0``): each scalar ``v_f`` is
    mapped to :math:`[\sin(2\pi B v_f), \cos(2\pi B v_f)]` with a fixed random
    :math:`B \in \mathbb{R}^m \sim \mathcal{N}(0, \sigma^2)`, then linearly to ``hidden_dim``;
    this lets the metanetwork resolve small differences between weights.
    """

    def __init__(self, in_features: int, hidden_dim: int, fourier_features: int = 0, fourier_scale: float = 10.0):
        super().__init__()
        self.in_features = in_features
        self.fourier_features = fourier_features
        self.fourier_scale = fourier_scale
        if fourier_features > 0:
            self.register_buffer("frequencies", torch.empty(fourier_features))
            self.linear = nn.Linear(2 * fourier_features * in_features, hidden_dim)
        else:
            self.linear = nn.Linear(in_features, hidden_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.fourier_features > 0:
            self.frequencies.normal_(0.0, self.fourier_scale)
        self.linear.reset_parameters()

    def forward(self, values: Tensor) -> Tensor:
        if self.fourier_features > 0:
            angles = 2 * math.pi * values.unsqueeze(-1) * self.frequencies  # [*, F, m]
            values = torch.cat([angles.sin(), angles.cos()], dim=-1).flatten(-2)
        return self.linear(values)


class GraphEncoder(nn.Module):
    """Lifts biases and weights to ``hidden_dim`` channels and adds positional embeddings.

    Args:
        hidden_dim: width of the returned node and edge features.
        edge_features: ``F``, the width of ``graph.edge_attr`` (1 for MLPs, ``kh*kw`` for convs).
        positional: ``"neuron"`` or ``"layer"`` (see the module docstring).
        reverse_edges: add a reverse edge per edge, lifted from ``[e_ij, e_ji]``.
        fourier_features: number of random Fourier frequencies per scalar (0: linear lift).
        fourier_scale: standard deviation of those frequencies.
        max_layers: number of weight layers the embeddings cover.
        max_node_types: number of ``node_type`` embeddings (``positional="neuron"``).
    """

    def __init__(
        self,
        hidden_dim: int,
        edge_features: int = 1,
        positional: str = "neuron",
        reverse_edges: bool = False,
        fourier_features: int = 0,
        fourier_scale: float = 10.0,
        max_layers: int = MAX_LAYERS,
        max_node_types: int = MAX_NODE_TYPES,
    ):
        super().__init__()
        if positional not in POSITIONAL_MODES:
            raise ValueError(f"positional={positional!r}: expected one of {POSITIONAL_MODES}")
        self.hidden_dim = hidden_dim
        self.edge_features = edge_features
        self.positional = positional
        self.reverse_edges = reverse_edges
        self.max_layers = max_layers
        self.max_node_types = max_node_types
        self.node_lift = ScalarLift(1, hidden_dim, fourier_features, fourier_scale)
        edge_in = 2 * edge_features if reverse_edges else edge_features
        self.edge_lift = ScalarLift(edge_in, hidden_dim, fourier_features, fourier_scale)
        num_positions = max_node_types if positional == "neuron" else max_layers + 1
        self.node_position = nn.Embedding(num_positions, hidden_dim)
        self.edge_position = nn.Embedding(max_layers, hidden_dim)
        # per-layer standardisation of the raw biases and weights (identity until set)
        self.register_buffer("node_mean", torch.zeros(max_layers + 1))
        self.register_buffer("node_std", torch.ones(max_layers + 1))
        self.register_buffer("edge_mean", torch.zeros(max_layers))
        self.register_buffer("edge_std", torch.ones(max_layers))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.node_lift.reset_parameters()
        self.edge_lift.reset_parameters()
        self.node_position.reset_parameters()
        self.edge_position.reset_parameters()

    @torch.no_grad()
    def set_input_statistics(self, graph: Graph, eps: float = 1e-8) -> None:
        """Standardise biases and weights layer by layer with the mean and std of ``graph``.

        Weights of different layers differ in scale by an order of magnitude (e.g. std 0.06,
        0.016, 0.12 in MNIST SIRENs); without this the lift sees mostly the positional
        embeddings. Per-layer statistics are invariant to every neuron permutation, so the
        encoder's symmetry is unchanged. Layers absent from ``graph`` (or constant, like the
        zero biases of input neurons) keep the identity.
        """
        check_index_range("edge_layer", graph.edge_layer, self.max_layers, "max_layers")
        for values, layer, mean, std in ((graph.x[:, 0], graph.node_layer, self.node_mean, self.node_std),
                                         (graph.edge_attr.flatten(1).mean(1), graph.edge_layer, self.edge_mean,
                                          self.edge_std)):
            count = torch.bincount(layer, minlength=len(mean)).to(values.dtype)
            total = torch.zeros_like(mean, dtype=values.dtype).index_add_(0, layer, values)
            squares = torch.zeros_like(total).index_add_(0, layer, values * values)
            layer_mean = total / count.clamp(min=1)
            layer_std = (squares / count.clamp(min=1) - layer_mean**2).clamp(min=0).sqrt()
            present = (count > 1) & (layer_std > eps)
            mean.copy_(torch.where(present, layer_mean, torch.zeros_like(layer_mean)).to(mean.dtype))
            std.copy_(torch.where(present, layer_std, torch.ones_like(layer_std)).to(std.dtype))

    def forward(self, graph: Graph) -> EncodedGraph:
        edge_attr = graph.edge_attr
        if edge_attr.dim() != 2 or edge_attr.shape[1] != self.edge_features:
            raise ValueError(
                f"graph field edge_attr has shape {tuple(edge_attr.shape)} but the encoder expects "
                f"[E, {self.edge_features}]; set edge_features={edge_attr.shape[-1]}"
            )
        if self.positional == "neuron":
            check_index_range("node_type", graph.node_type, self.max_node_types, "max_node_types")
            node_position = graph.node_type
        else:
            check_index_range("node_layer", graph.node_layer, self.max_layers + 1, "max_layers + 1")
            node_position = graph.node_layer
        check_index_range("edge_layer", graph.edge_layer, self.max_layers, "max_layers")
        x = (graph.x - self.node_mean[graph.node_layer, None]) / self.node_std[graph.node_layer, None]
        edge_attr = (edge_attr - self.edge_mean[graph.edge_layer, None]) / self.edge_std[graph.edge_layer, None]
        node = self.node_lift(x) + self.node_position(node_position)
        edge_index, edge_layer = graph.edge_index, graph.edge_layer
        if self.reverse_edges:
            zeros = torch.zeros_like(edge_attr)
            edge_attr = torch.cat([torch.cat([edge_attr, zeros], 1), torch.cat([zeros, edge_attr], 1)])
            edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
            edge_layer = torch.cat([edge_layer, edge_layer])
        edge = self.edge_lift(edge_attr) + self.edge_position(edge_layer)
        return EncodedGraph(node, edge, edge_index, edge_layer, graph.edge_index.shape[1], graph)


def reverse_edge_partner(num_edges: int, device: Optional[torch.device] = None) -> Tensor:
    """For the ``2E`` edges of a reverse-edge encoding, the index of each edge's opposite."""
    return (torch.arange(2 * num_edges, device=device) + num_edges) % (2 * num_edges)
