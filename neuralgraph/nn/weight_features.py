r"""Features computed from the weights by running the network: probe activations and gradients.

For an MLP with layout ``(d_0, ..., d_L)`` and activation :math:`\sigma`, evaluated at points
:math:`x_1, \dots, x_P`:

.. math::
    a_0 = x_p, \qquad z_l = W_l a_{l-1} + b_l, \qquad a_l = \sigma(z_l)\ (0 < l < L), \qquad a_L = z_L.

* **Probe features** (Neural Graphs' ``num_probe_features``): every neuron's value
  :math:`a_l(x_p)` at the ``P`` probe points, a ``P``-vector per node.
* **Gradient features** (GradMetaNet): the gradient of :math:`F = \sum_k f_k(x_p)` (the
  output itself for a scalar INR) is, per point, :math:`\partial F / \partial W_l = \delta_l
  a_{l-1}^\top` and :math:`\partial F / \partial b_l = \delta_l`, with the backprop signal

  .. math::
      \delta_L = \mathbf{1}, \qquad \delta_l = \sigma'(z_l) \odot W_{l+1}^\top \delta_{l+1}.

  One batched forward and one batched backward give all ``B x P`` rank-one factors at once,
  with no autograd loop over networks or points; the result is differentiable in the weights.

Both are equivariant by construction: permuting the hidden neurons permutes
:math:`a_l, \delta_l` the same way. With an odd :math:`\sigma` (``sine``, ``tanh``) flipping
the sign of neuron ``i`` flips :math:`a_{l,i}` and :math:`\delta_{l,i}` (:math:`\sigma'` is
even), so a weight's gradient flips like the weight. With ``relu`` a positive rescaling by
``q_i`` multiplies :math:`a_{l,i}` by ``q_i`` and :math:`\delta_{l,i}` by ``1 / q_i``.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter

from neuralgraph.graph import Activation, Graph, GraphConversionError, Layout, common_layout
from neuralgraph.graph.blocks import GraphFacts, WeightBlocks, batch_mlps, graph_facts, node_graph_index
from neuralgraph.graph.scaling import scaling_invariant

ACTIVATIONS = (Activation.SINE.value, Activation.TANH.value, Activation.RELU.value)  # the ones _forward runs


def check_activation(activation: str, option: str = "activation") -> None:
    """ValueError naming ``option`` unless ``activation`` is one the traces implement.

    Args:
        activation: ``"sine"``, ``"tanh"`` or ``"relu"``.
        option: the argument that gave it, named in the error.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"{option}={activation!r}: expected one of {ACTIVATIONS}")


def _forward(z: Tensor, activation: str, w0: float) -> tuple[Tensor, Tensor]:
    """``sigma(z)`` and ``sigma'(z)``."""
    if activation == Activation.SINE:
        return torch.sin(w0 * z), w0 * torch.cos(w0 * z)
    if activation == Activation.TANH:
        a = torch.tanh(z)
        return a, 1 - a * a
    return torch.relu(z), (z > 0).to(z.dtype)


class MLPTrace(NamedTuple):
    """Per layer ``l = 0..L`` the values ``a_l`` ``[B, P, d_l]`` and backprop signals ``delta_l``.

    ``deltas[0]`` is the signal at the inputs (``W_1^T delta_1``), kept for completeness.

    Attributes:
        activations: ``activations[l]`` ``[B, P, d_l]``, the values ``a_l`` (``a_0``: the points).
        deltas: ``deltas[l]`` ``[B, P, d_l]``, the signals ``delta_l`` of the summed output.
    """

    activations: list[Tensor]
    deltas: list[Tensor]


def trace_mlp(weights: Sequence[Tensor], biases: Sequence[Tensor], points: Tensor,
              activation: str = "sine", w0: float = 30.0) -> MLPTrace:
    """Forward and backward pass of ``B`` MLPs at ``P`` points each.

    Args:
        weights: per layer ``[B, d_l, d_{l-1}]`` (``nn.Linear`` convention).
        biases: per layer ``[B, d_l]``.
        points: ``[P, d_0]`` shared by all networks, or ``[B, P, d_0]``.
        activation: ``"sine"`` (``sin(w0 z)``, SIREN), ``"tanh"`` or ``"relu"``; the last layer
            is linear.
        w0: SIREN's frequency, for ``"sine"``.

    Returns:
        The :class:`MLPTrace` of the summed output.
    """
    check_activation(activation)
    if weights[0].dim() != 3:
        raise ValueError(f"trace_mlp: weights[0] has shape {tuple(weights[0].shape)}, expected [B, d_1, d_0]")
    B, d0 = weights[0].shape[0], weights[0].shape[-1]
    shape = tuple(points.shape)
    if points.dim() == 2:
        points = points.expand(B, *points.shape)
    if points.dim() != 3 or points.shape[0] != B or points.shape[-1] != d0:
        raise ValueError(f"trace_mlp: points {shape} do not match [P, {d0}] or [{B}, P, {d0}]")
    activations, slopes = [points.to(weights[0].dtype)], []
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        z = torch.baddbmm(b.unsqueeze(1), activations[-1], w.transpose(1, 2))
        if l < len(weights):
            a, slope = _forward(z, activation, w0)
            activations.append(a)
            slopes.append(slope)
        else:
            activations.append(z)
    delta = torch.ones_like(activations[-1])
    deltas = [delta]
    for l in range(len(weights) - 1, -1, -1):
        delta = torch.bmm(delta, weights[l])  # W_{l+1}^T delta, row-vector form
        if l > 0:
            delta = delta * slopes[l - 1]
        deltas.append(delta)
    return MLPTrace(activations, deltas[::-1])


def _layer_offsets(layout: Sequence[int], device) -> Tensor:
    """The first column of each node layer, filled in on ``device`` number by number: a tensor copied from
    the host would make the host wait for the device."""
    offsets = [0]
    for width in layout[:-1]:
        offsets.append(offsets[-1] + width)
    return torch.stack([torch.full((), offset, dtype=torch.long, device=device) for offset in offsets])


def _node_rows(graph: Graph, layout: Layout) -> Tensor:
    """For each node, its column in ``cat(per-layer [B, P, d_l])`` of its network of ``layout``."""
    return _layer_offsets(layout, graph.x.device)[graph.node_layer] + graph.node_index


def _graph_trace(graph: Graph, points: Tensor, activation: str, w0: float,
                 blocks: Optional[WeightBlocks] = None) -> tuple[Tensor, Tensor]:
    """Values and backprop signals of every node at the points: two ``[N, P]`` tensors. The networks are
    the batch's ``blocks`` when it carries them, else decoded from ``graph``."""
    if graph.edge_attr.dim() != 2 or graph.edge_attr.shape[1] != 1:
        raise GraphConversionError(
            f"probe and gradient features need MLP graphs; edge_attr has {graph.edge_attr.shape[-1]} features per edge"
        )
    weights, biases = batch_mlps(graph, blocks)
    trace = trace_mlp(weights, biases, points, activation, w0)
    values = torch.cat(trace.activations, dim=2)  # [B, P, N_per_graph]
    deltas = torch.cat(trace.deltas, dim=2)
    layout = (weights[0].shape[2], *(w.shape[1] for w in weights))
    rows, graphs = _node_rows(graph, layout), node_graph_index(graph)
    return values[graphs, :, rows], deltas[graphs, :, rows]


def probe_features(graph: Graph, points: Tensor, activation: str = "sine", w0: float = 30.0,
                   blocks: Optional[WeightBlocks] = None) -> Tensor:
    """``[N, P]``: each neuron's value ``a_l(x_p)`` at the probe points (inputs: the points); ``blocks``: the
    batch's weights, when it carries them.

    Args:
        graph: MLP parameter graphs (a ``Data`` or a ``Batch``).
        points: ``[P, d_0]`` probe inputs.
        activation: the networks' activation (:func:`trace_mlp`).
        w0: SIREN's frequency, for ``"sine"``.
        blocks: the batch's :class:`~neuralgraph.graph.blocks.WeightBlocks`, if it carries them.

    Returns:
        ``[N, P]``.
    """
    return _graph_trace(graph, points, activation, w0, blocks)[0]


class GradientFeatures(NamedTuple):
    """Per-point gradients of the summed output, aligned with the graph.

    ``edge``: ``[E, P]``, the gradient w.r.t. each weight, :math:`\\delta_i(x_p) a_j(x_p)` for the
    edge ``j -> i``. ``node``: ``[N, P]``, the gradient w.r.t. each bias, :math:`\\delta_i(x_p)`
    (input neurons: the gradient w.r.t. the input coordinate).

    Attributes:
        edge: ``[E, P]``, per-point gradients of the weights.
        node: ``[N, P]``, per-point gradients of the biases.
    """

    edge: Tensor
    node: Tensor


def gradient_features(graph: Graph, points: Tensor, activation: str = "sine", w0: float = 30.0) -> GradientFeatures:
    """Closed-form per-example gradients of every network of ``graph`` at ``points``.

    Args:
        graph: MLP parameter graphs (a ``Data`` or a ``Batch``).
        points: ``[P, d_0]`` points.
        activation: the networks' activation (:func:`trace_mlp`).
        w0: SIREN's frequency, for ``"sine"``.

    Returns:
        The :class:`GradientFeatures`, aligned with the graph's edges and nodes.
    """
    values, deltas = _graph_trace(graph, points, activation, w0)
    src, dst = graph.edge_index
    return GradientFeatures(deltas[dst] * values[src], deltas)


class ProbePoints(nn.Module):
    """``P`` probe inputs in ``[-1, 1]^{d_0}``, drawn uniformly, learned or fixed.

    Neural Graphs learns its probe inputs (initialised the same way); ``learn=False`` keeps
    them as a buffer, e.g. the points of a fixed gradient data set.

    Args:
        num_points: ``P``.
        in_features: ``d_0``, the networks' input width.
        learn: a parameter (``True``) or a buffer.
    """

    def __init__(self, num_points: int, in_features: int = 2, learn: bool = True):
        super().__init__()
        if num_points < 1 or in_features < 1:
            raise ValueError(f"ProbePoints: num_points={num_points} and in_features={in_features} must be >= 1")
        points = torch.empty(num_points, in_features)
        if learn:
            self.points = nn.Parameter(points)
        else:
            self.register_buffer("points", points)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.points.uniform_(-1.0, 1.0)

    def forward(self, graph: Graph) -> Tensor:
        d0 = common_layout(graph)[0]
        if d0 != self.points.shape[1]:
            raise ValueError(f"ProbePoints has {self.points.shape[1]}-dimensional points but the networks have {d0} inputs")
        return self.points


def _group_rms(values: Tensor, group: Tensor, count: int, eps: float = 1e-12) -> Tensor:
    """``values`` ``[M, P]`` divided by the root mean square over the rows of its ``group`` (ids below ``count``)."""
    mean_square = scatter(values.pow(2).mean(1), group, 0, count, "mean")
    return values / mean_square.clamp_min(eps).sqrt()[group, None]


class PointSetPool(nn.Module):
    r"""A set of ``P`` per-point scalars (with context scalars) pooled into ``hidden_dim`` channels.

    Per element, ``g_p`` is the value at point ``p`` and ``c_p`` context values at the same point
    (e.g. the backprop signal and activation of the edge's endpoints). With ``H`` heads

    .. math::
        \alpha_{p,h} = \operatorname{softmax}_p\big(A\,\kappa([g_p, c_p]) + a\big)_h, \qquad
        y = W \big[\textstyle\sum_p \alpha_{p,1} g_p, \dots, \sum_p \alpha_{p,H} g_p\big]

    where :math:`\kappa` is the identity, or ``|.|`` under the sign group (then ``W`` has no bias
    and ``y`` flips with ``g``). The softmax over points makes ``y`` invariant to reordering the
    points. Like GradMetaNet++ the pooling weights are attention computed from the points
    themselves; here one linear score per head keeps memory at ``O(E P H)``.

    Args:
        context: context scalars per point and element (``c_p``).
        hidden_dim: width of the output ``y``.
        heads: attention heads ``H``.
        scaling: ``None``, or ``"sign"`` for a metanetwork equivariant to sign flips.
    """

    def __init__(self, context: int, hidden_dim: int, heads: int = 8, scaling: Optional[str] = None):
        super().__init__()
        self.scaling = scaling
        self.score = nn.Linear(1 + context, heads)
        self.out = nn.Linear(heads, hidden_dim, bias=scaling is None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.score.reset_parameters()
        self.out.reset_parameters()

    def forward(self, values: Tensor, context: Tensor) -> Tensor:
        """``values`` ``[M, P]``, ``context`` ``[M, P, c]`` -> ``[M, hidden_dim]``."""
        scores = self.score(scaling_invariant(torch.cat([values.unsqueeze(-1), context], -1), self.scaling))
        weights = scores.softmax(dim=1)  # [M, P, H]
        return self.out(torch.einsum("mph,mp->mh", weights, values))


class WeightFeatureLift(nn.Module):
    """Probe and gradient features of the networks in a graph, lifted to ``hidden_dim`` channels.

    Args:
        hidden_dim: width of the returned node and edge terms.
        probe_features: ``m`` learned probe points; every node gets ``Linear(m, d)`` of its values
            there (Neural Graphs' probe features; no bias under a scaling group).
        gradient_features: ``P`` fixed points; every edge gets the attention-pooled set of its
            per-point gradients ``delta_i a_j`` (context: ``delta_i``, ``a_j``), every node the
            pooled set of its ``delta_i`` (context: ``a_i``), see :class:`PointSetPool`. Gradients are
            divided by their root mean square per network and layer first (SIREN signals grow by
            ``w0`` per layer).
        network_activation: the activation of the hidden layers of the networks read, which they are run
            with (see :func:`trace_mlp`); ``None`` is refused (the error says where it comes from).
        w0: SIREN's frequency of those networks; needed for ``network_activation="sine"``.
        in_features: input width ``d_0`` of the networks (2 for image INRs).
        scaling: ``None``, or ``"sign"``/``"scale"`` for a metanetwork equivariant to that group.
    """

    def __init__(self, hidden_dim: int, probe_features: int = 0, gradient_features: int = 0, *,
                 network_activation: Optional[str], w0: Optional[float] = None, in_features: int = 2,
                 scaling: Optional[str] = None):
        super().__init__()
        if network_activation is None:
            raise ValueError(f"probe_features={probe_features} and gradient_features={gradient_features} run the "
                             "networks read, but network_activation (their activation) is not given: the data's "
                             "GraphSpec gives it (build_metanet(name, spec=spec)), or give network_activation")
        check_activation(network_activation, "network_activation")
        if network_activation == Activation.SINE and w0 is None:
            raise ValueError("network_activation='sine' needs w0, SIREN's frequency of the networks read: the data's "
                             "GraphSpec gives it with its SIREN convention (build_metanet(name, spec=spec)), or give w0")
        if probe_features < 0 or gradient_features < 0:
            raise ValueError(f"probe_features={probe_features} and gradient_features={gradient_features} must be >= 0")
        if gradient_features and scaling == "scale":
            raise ValueError("gradient_features under scaling='scale': a gradient rescales by 1/q where its weight "
                             "rescales by q, so the pooled gradients would break the group; use scaling='sign' or None")
        self.network_activation, self.w0, self.scaling = network_activation, w0, scaling
        self.probe_points = ProbePoints(probe_features, in_features) if probe_features else None
        self.probe_lift = nn.Linear(probe_features, hidden_dim, bias=scaling is None) if probe_features else None
        self.gradient_points = ProbePoints(gradient_features, in_features, learn=False) if gradient_features else None
        self.edge_gradients = PointSetPool(2, hidden_dim, scaling=scaling) if gradient_features else None
        self.node_gradients = PointSetPool(1, hidden_dim, scaling=scaling) if gradient_features else None

    def reset_parameters(self) -> None:
        for module in (self.probe_points, self.probe_lift, self.gradient_points, self.edge_gradients,
                       self.node_gradients):
            if module is not None:
                module.reset_parameters()

    def forward(self, graph: Graph, blocks: Optional[WeightBlocks] = None,
                facts: Optional[GraphFacts] = None) -> tuple[Optional[Tensor], Optional[Tensor]]:
        """Terms to add to the node ``[N, d]`` and edge ``[E, d]`` features (``None``: no such feature);
        ``blocks``: the batch's weights, when it carries them (else they are decoded from ``graph``);
        ``facts``: its :class:`~neuralgraph.graph.blocks.GraphFacts` (else read from ``graph``)."""
        node = edge = None
        if self.probe_points is not None:
            node = self.probe_lift(probe_features(graph, self.probe_points(graph), self.network_activation, self.w0, blocks))
        if self.gradient_points is not None:
            values, deltas = _graph_trace(graph, self.gradient_points(graph), self.network_activation, self.w0, blocks)
            src, dst = graph.edge_index
            graphs = node_graph_index(graph)
            facts = graph_facts(graph) if facts is None else facts
            num_layers = len(facts.node_counts)
            groups = facts.num_graphs * num_layers
            grads = _group_rms(deltas[dst] * values[src], graphs[dst] * num_layers + graph.edge_layer, groups)
            deltas = _group_rms(deltas, graphs * num_layers + graph.node_layer, groups)
            edge = self.edge_gradients(grads, torch.stack([deltas[dst], values[src]], -1))
            lifted = self.node_gradients(deltas, values.unsqueeze(-1))
            node = lifted if node is None else node + lifted
        return node, edge


__all__ = [
    "PointSetPool",
    "WeightFeatureLift",
    "ACTIVATIONS",
    "GradientFeatures",
    "MLPTrace",
    "ProbePoints",
    "gradient_features",
    "probe_features",
    "trace_mlp",
]
