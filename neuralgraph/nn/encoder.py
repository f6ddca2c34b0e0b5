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

Edges get one embedding per ``edge_layer`` in both cases. Two optional embeddings read fields
that ``module_to_graph`` and ``make-cnn-zoo`` graphs carry (:mod:`neuralgraph.graph.schema`):
``node_activations=True`` adds one per ``activation`` to the node embedding, so networks of
different activations are one dataset; ``skip_edges=True`` adds one per ``edge_kind`` to the
edge embedding, so residual skips and shortcuts are told from the chain's weights. A graph
with such edges is refused without it, and it is refused with per-layer tables
(``layer_index``), probe or gradient features and scaling groups, which all assume edges only
between consecutive layers.

With ``reverse_edges=True`` every edge ``j -> i`` is paired with a reverse edge ``i -> j`` and
the edge set becomes ``[forward edges, reverse edges]`` (``2E`` rows). Each row is lifted from
``[e_ij, e_ji]``, the features of the pair in its own direction and in the opposite direction,
where the missing direction is zero (a parameter graph has no edge both ways): the forward row
reads ``[w, 0]`` and the reverse row ``[0, w]``, so the direction is never lost.

With ``scaling="sign"`` or ``"scale"`` (metanetworks equivariant to neuron sign flips or
positive rescalings, :mod:`neuralgraph.graph.scaling`) every lift is linear without bias and
standardisation only divides; hidden neurons' embeddings multiply their lifted bias
(``lift(b) * p``, which scales with the neuron) and edge embeddings multiply the lifted weight,
while input and output neurons, which no scaling acts on, keep the sum ``lift(b) + p``.

``probe_features``/``gradient_features`` add the values of every neuron at probe points and the
per-example gradients of every weight and bias, computed from the weights by running the
networks (:class:`~neuralgraph.nn.weight_features.WeightFeatureLift`); any architecture can use them.

Alongside the features the encoder returns the :class:`~neuralgraph.nn.context.GraphContext` of
the batch (:meth:`GraphEncoder.context`, built once per batch, or given): the edges the layers run
on, with reverse edges on request, and what the dense path and the heads read.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn

from neuralgraph.graph import EDGE_KINDS, WEIGHT_EDGE, Activation, Graph
from neuralgraph.graph.blocks import GraphFacts, WeightBlocks
from neuralgraph.graph.scaling import check_group
from neuralgraph.nn.context import GraphContext, context_facts, graph_context
from neuralgraph.nn.weight_features import WeightFeatureLift

POSITIONAL_MODES = ("neuron", "layer")
MAX_LAYERS = 16
MAX_NODE_TYPES = 128


class EncodedGraph(NamedTuple):
    """Hidden node and edge features of a graph, and the :class:`~neuralgraph.nn.context.GraphContext` of its batch.

    Attributes:
        node: ``[N, hidden_dim]``.
        edge: ``[E or 2E, hidden_dim]`` (``2E`` with reverse edges).
        context: the batch's structure.
    """

    node: Tensor  # [N, hidden_dim]
    edge: Tensor  # [E or 2E, hidden_dim]
    context: GraphContext


def check_index_range(name: str, largest: int, size: int, option: str) -> None:
    """Raise a ValueError naming ``name`` when a field whose largest index is ``largest`` (a Python number: the
    batch's :class:`~neuralgraph.graph.blocks.GraphFacts`, read on the CPU) does not fit an embedding of ``size``.

    Args:
        name: the graph field.
        largest: its largest value.
        size: rows of the embedding.
        option: the constructor option that sets ``size``.
    """
    if largest >= size:
        raise ValueError(f"graph field {name} reaches {largest} but {option}={size}; raise {option}")


class ScalarLift(nn.Module):
    r"""Lifts ``F`` scalar features to ``hidden_dim`` channels.

    Linear: :math:`h = W v + b`. Fourier (``fourier_features = m > 0``): each scalar ``v_f`` is
    mapped to :math:`[\sin(2\pi B v_f), \cos(2\pi B v_f)]` with a fixed random
    :math:`B \in \mathbb{R}^m \sim \mathcal{N}(0, \sigma^2)`, then linearly to ``hidden_dim``;
    this lets the metanetwork resolve small differences between weights.

    Args:
        in_features: ``F``, scalars per element.
        hidden_dim: output channels.
        fourier_features: ``m``, random frequencies per scalar (0: the linear lift).
        fourier_scale: :math:`\sigma`, their standard deviation.
        bias: whether the final linear map has a bias (not under a scaling group).
    """

    def __init__(self, in_features: int, hidden_dim: int, fourier_features: int = 0, fourier_scale: float = 10.0,
                 bias: bool = True):
        super().__init__()
        self.in_features = in_features
        self.fourier_features = fourier_features
        self.fourier_scale = fourier_scale
        if fourier_features > 0:
            self.register_buffer("frequencies", torch.empty(fourier_features))
            self.linear = nn.Linear(2 * fourier_features * in_features, hidden_dim, bias=bias)
        else:
            self.linear = nn.Linear(in_features, hidden_dim, bias=bias)
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


@dataclass(frozen=True)
class EncoderOptions:
    """What a :class:`GraphEncoder` lifts and embeds, besides its width and what the architecture fixes.

    Every architecture takes these as keyword arguments beside its own, flat, as a config's
    ``metanet_config`` gives them (``build_metanet("gmn", hidden_dim=64, probe_features=16)``);
    :class:`~neuralgraph.nn.base.Metanet` gathers them into one ``EncoderOptions`` for its encoder, and
    its signature (``inspect.signature``, ``help()``) lists them from the fields below. Those that are
    facts of the data (``edge_features``, ``max_layers`` beyond 16 layers, ``network_activation``,
    ``w0``, ``node_activations``, ``skip_edges``) the data's GraphSpec gives
    (``build_metanet(name, spec=spec)``, ``Metanet.spec_arguments``).

    Attributes:
        edge_features: ``F``, the width of ``graph.edge_attr`` (1 for MLPs, ``kh*kw`` for convolutions).
        positional: the positional embedding, ``"neuron"`` (one per input neuron, per output neuron and
            per hidden layer) or ``"layer"`` (one per layer), see the module docstring; ``None``:
            ``"neuron"``, or ``"layer"`` for a metanet of ``symmetry = "np"``, which allows no other.
        fourier_features: random Fourier frequencies per lifted scalar (0: a linear lift).
        fourier_scale: standard deviation of those frequencies.
        max_layers: weight layers the embeddings (and the metanet's heads' per-layer tables) cover.
        max_node_types: ``node_type`` embeddings of ``positional="neuron"``.
        probe_features: learned probe points whose values at every neuron are node features
            (:class:`~neuralgraph.nn.weight_features.WeightFeatureLift`; 0: none).
        gradient_features: fixed points whose per-example gradients of every weight and bias are
            pooled into edge and node features (0: none).
        network_activation: the activation of the hidden layers of the networks read (``"sine"``,
            ``"tanh"``, ``"relu"``), which probe and gradient features run them with and ScaleGMN takes
            its scaling group from (``GraphSpec.network_activation``); needed by those features.
        w0: SIREN's frequency ``w_0`` of those networks, from the SIREN convention of INR data
            (``GraphSpec.w0``); needed by those features when ``network_activation="sine"``.
        node_activations: embed the graphs' ``activation`` field (each neuron's activation, the
            ``GraphSpec.activations`` of every network) into node features: networks of several
            activations in one dataset.
        skip_edges: embed the graphs' ``edge_kind`` field into edge features (residual skips and
            shortcuts); required for graphs that have such edges.
    """

    edge_features: int = 1
    positional: Optional[str] = None
    fourier_features: int = 0
    fourier_scale: float = 10.0
    max_layers: int = MAX_LAYERS
    max_node_types: int = MAX_NODE_TYPES
    probe_features: int = 0
    gradient_features: int = 0
    network_activation: Optional[str] = None
    w0: Optional[float] = None
    node_activations: bool = False
    skip_edges: bool = False


class GraphEncoder(nn.Module):
    """Lifts biases and weights to ``hidden_dim`` channels and adds positional embeddings.

    Args:
        hidden_dim: width of the returned node and edge features.
        options: what it lifts and embeds (:class:`EncoderOptions`; default: its defaults).
        reverse_edges: add a reverse edge per edge, lifted from ``[e_ij, e_ji]``.
        layer_index: group nodes and edges by layer in the context
            (:class:`~neuralgraph.nn.context.LayerIndex`).
        dense: let the metanet run its layers on dense per-layer blocks of a batch of one layout
            stored canonically (``GraphContext.widths``): ``None`` when the batch allows it,
            ``False`` never (the general path), ``True`` always (error otherwise). An attribute,
            so tests and benchmarks may switch it on a built model.
        scaling: ``None``, ``"sign"`` or ``"scale"``: keep the encoding equivariant to that group.
    """

    def __init__(
        self,
        hidden_dim: int,
        options: Optional[EncoderOptions] = None,
        *,
        reverse_edges: bool = False,
        layer_index: bool = False,
        dense: Optional[bool] = None,
        scaling: Optional[str] = None,
    ):
        super().__init__()
        options = EncoderOptions() if options is None else options
        positional = "neuron" if options.positional is None else options.positional
        weight_features = options.probe_features or options.gradient_features
        if options.skip_edges and (layer_index or scaling or weight_features):
            raise ValueError("skip_edges=True with per-layer tables (layer_index), a scaling group or probe/gradient "
                             "features: they assume edges only between consecutive layers")
        if positional not in POSITIONAL_MODES:
            raise ValueError(f"positional={positional!r}: expected one of {POSITIONAL_MODES}")
        if scaling is not None:
            check_group(scaling)
            if options.fourier_features:
                raise ValueError(f"fourier_features={options.fourier_features} with scaling={scaling!r}: Fourier "
                                 "features of a weight do not scale with it; use the linear lift (fourier_features=0)")
        self.scaling = scaling
        self.hidden_dim = hidden_dim
        self.edge_features = options.edge_features
        self.positional = positional
        self.reverse_edges = reverse_edges
        self.layer_index = layer_index
        self.dense = dense
        self.max_layers = options.max_layers
        self.max_node_types = options.max_node_types
        fourier = {"fourier_features": options.fourier_features, "fourier_scale": options.fourier_scale,
                   "bias": scaling is None}
        self.node_lift = ScalarLift(1, hidden_dim, **fourier)
        edge_in = 2 * options.edge_features if reverse_edges else options.edge_features
        self.edge_lift = ScalarLift(edge_in, hidden_dim, **fourier)
        self.weight_features = (
            WeightFeatureLift(hidden_dim, options.probe_features, options.gradient_features,
                              network_activation=options.network_activation, w0=options.w0, scaling=scaling)
            if weight_features else None
        )
        num_positions = options.max_node_types if positional == "neuron" else options.max_layers + 1
        self.node_position = nn.Embedding(num_positions, hidden_dim)
        self.edge_position = nn.Embedding(options.max_layers, hidden_dim)
        self.activation_embedding = nn.Embedding(len(Activation), hidden_dim) if options.node_activations else None
        self.edge_kind_embedding = nn.Embedding(len(EDGE_KINDS), hidden_dim) if options.skip_edges else None
        # per-layer standardisation of the raw biases and weights (identity until set)
        self.register_buffer("node_mean", torch.zeros(options.max_layers + 1))
        self.register_buffer("node_std", torch.ones(options.max_layers + 1))
        self.register_buffer("edge_mean", torch.zeros(options.max_layers))
        self.register_buffer("edge_std", torch.ones(options.max_layers))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.node_lift.reset_parameters()
        self.edge_lift.reset_parameters()
        self.node_position.reset_parameters()
        self.edge_position.reset_parameters()
        for embedding in (self.weight_features, self.activation_embedding, self.edge_kind_embedding):
            if embedding is not None:
                embedding.reset_parameters()

    @torch.no_grad()
    def set_input_statistics(self, graph: Graph, eps: float = 1e-8) -> None:
        """Standardise biases and weights layer by layer with the mean and std of ``graph``.

        Weights of different layers differ in scale by an order of magnitude (e.g. std 0.06,
        0.016, 0.12 in MNIST SIRENs); without this the lift sees mostly the positional
        embeddings. Per-layer statistics are invariant to every neuron permutation, so the
        encoder's symmetry is unchanged. Layers absent from ``graph`` (or constant, like the
        zero biases of input neurons) keep the identity. Residual skip edges (``edge_kind``) are
        no weights and not counted.
        """
        check_index_range("edge_layer", int(graph.edge_layer.max()) if graph.num_edges else -1, self.max_layers,
                          "max_layers")
        weight = getattr(graph, "edge_kind", torch.zeros_like(graph.edge_layer)) == WEIGHT_EDGE
        for values, layer, mean, std in ((graph.x[:, 0], graph.node_layer, self.node_mean, self.node_std),
                                         (graph.edge_attr[weight].flatten(1).mean(1), graph.edge_layer[weight],
                                          self.edge_mean, self.edge_std)):
            count = torch.bincount(layer, minlength=len(mean)).to(values.dtype)
            total = torch.zeros_like(mean, dtype=values.dtype).index_add_(0, layer, values)
            squares = torch.zeros_like(total).index_add_(0, layer, values * values)
            layer_mean = total / count.clamp(min=1)
            layer_std = (squares / count.clamp(min=1) - layer_mean**2).clamp(min=0).sqrt()
            present = (count > 1) & (layer_std > eps)
            mean.copy_(torch.where(present, layer_mean, torch.zeros_like(layer_mean)).to(mean.dtype))
            std.copy_(torch.where(present, layer_std, torch.ones_like(layer_std)).to(std.dtype))

    def context(self, graph: Graph, blocks: Optional[WeightBlocks] = None,
                facts: Optional[GraphFacts] = None) -> GraphContext:
        """The :class:`~neuralgraph.nn.context.GraphContext` of ``graph`` with this encoder's reverse
        edges, layer index and ``dense`` setting; ``blocks``: the batch's weights, when it carries them;
        ``facts``: its :class:`~neuralgraph.graph.blocks.GraphFacts`, when its builder read them."""
        return graph_context(graph, self.reverse_edges, self.layer_index, self.dense, blocks, facts)

    def forward(self, graph: Graph, context: Optional[GraphContext] = None) -> EncodedGraph:
        """Node and edge features of ``graph``; ``context``: its :meth:`context`, built here when not given.

        The index fields are checked against the embeddings' sizes with the batch's
        :class:`~neuralgraph.graph.blocks.GraphFacts` (``context.facts``), numbers read on the CPU: nothing
        is read back from the graph's device."""
        edge_attr = graph.edge_attr
        if edge_attr.dim() != 2 or edge_attr.shape[1] != self.edge_features:
            raise ValueError(
                f"graph field edge_attr has shape {tuple(edge_attr.shape)} but the encoder expects "
                f"[E, {self.edge_features}]; set edge_features={edge_attr.shape[-1]}"
            )
        if context is None:
            context = self.context(graph)
        elif self.reverse_edges != (context.reverse is not None) or (self.layer_index and context.layers is None):
            raise ValueError(f"GraphEncoder(reverse_edges={self.reverse_edges}, layer_index={self.layer_index}) got a "
                             "context built without them; build it with this encoder's context(graph)")
        facts = context_facts(graph, context)
        if self.positional == "neuron":
            check_index_range("node_type", facts.max_node_type, self.max_node_types, "max_node_types")
            node_position = graph.node_type
        else:
            check_index_range("node_layer", len(facts.node_counts) - 1, self.max_layers + 1, "max_layers + 1")
            node_position = graph.node_layer
        check_index_range("edge_layer", facts.max_edge_layer, self.max_layers, "max_layers")
        x = graph.x
        if self.scaling is None:  # a shift would not commute with the scaling group
            x = x - self.node_mean[graph.node_layer, None]
            edge_attr = edge_attr - self.edge_mean[graph.edge_layer, None]
        x = x / self.node_std[graph.node_layer, None]
        edge_attr = edge_attr / self.edge_std[graph.edge_layer, None]
        if self.reverse_edges:
            zeros = torch.zeros_like(edge_attr)
            edge_attr = torch.cat([torch.cat([edge_attr, zeros], 1), torch.cat([zeros, edge_attr], 1)])
        node, edge = self.node_lift(x), self.edge_lift(edge_attr)
        # a canonical batch repeats one graph's edge layers: embed those once, broadcast over the graphs
        per_graph = context.widths is not None and not self.reverse_edges and self.edge_kind_embedding is None
        edge_layer = context.edge_layer[: context.num_edges // context.num_graphs] if per_graph else context.edge_layer
        node_position, edge_position = self.node_position(node_position), self.edge_position(edge_layer)
        node_position, edge_position = self._structure_embeddings(graph, facts, node_position, edge_position)
        rows = edge.shape
        if per_graph:
            edge = edge.view(context.num_graphs, -1, rows[-1])
        if self.scaling is None:
            node, edge = node + node_position, edge + edge_position
        else:
            node = torch.where(context.hidden.unsqueeze(-1), node * node_position, node + node_position)
            edge = edge * edge_position
        edge = edge.view(rows)
        if self.weight_features is not None:
            node_term, edge_term = self.weight_features(graph, context.blocks, facts)
            if node_term is not None:
                node = node + node_term
            if edge_term is not None:
                edge = edge + (torch.cat([edge_term, edge_term]) if self.reverse_edges else edge_term)
        return EncodedGraph(node, edge, context)

    def _structure_embeddings(self, graph: Graph, facts: GraphFacts, node_position: Tensor,
                              edge_position: Tensor) -> tuple[Tensor, Tensor]:
        """Positional embeddings plus those of ``activation`` and ``edge_kind`` (see the module docstring);
        ``facts``: the batch's :class:`~neuralgraph.graph.blocks.GraphFacts`, which the fields are checked with."""
        kind = getattr(graph, "edge_kind", None)
        if self.edge_kind_embedding is None:
            if facts.skip_edges:
                raise ValueError("graph field edge_kind marks residual skip or shortcut edges, which this encoder cannot "
                                 "tell from weights; build the metanet with skip_edges=True")
        else:
            kind = torch.zeros_like(graph.edge_layer) if kind is None else kind
            check_index_range("edge_kind", facts.max_edge_kind or 0, len(EDGE_KINDS), "len(EDGE_KINDS)")
            edge_position = edge_position + self.edge_kind_embedding(torch.cat([kind, kind]) if self.reverse_edges else kind)
        if self.activation_embedding is not None:
            activation = getattr(graph, "activation", None)
            if activation is None:
                raise ValueError("graph has no field activation (module_to_graph and make-cnn-zoo graphs carry it); "
                                 "build the metanet with node_activations=False")
            check_index_range("activation", facts.max_activation, len(Activation), "len(Activation)")
            node_position = node_position + self.activation_embedding(activation)
        return node_position, edge_position

