r"""ScaleGMN (Kalogeropoulos et al. 2024): a graph metanetwork equivariant to neuron scalings too.

Besides permutations, an activation adds a scaling group (:mod:`neuralgraph.graph.scaling`):
hidden neuron ``i`` carries ``q_i`` (``+-1`` for ``sin``/``tanh``, ``q_i > 0`` for ReLU), its node
features transform as :math:`h_i \mapsto q_i h_i` and the features of the edge ``j -> i`` (and of
its reverse) as :math:`e_{ij} \mapsto (q_i / q_j)\, e_{ij}`; input and output neurons have ``q = 1``.
Every function below keeps that:

* invariants :math:`\kappa(v)`: ``|v|`` (sign), ``v / ||v||`` (scale), per feature vector;
* equivariant maps: linear maps without bias (they commute with a scalar), and products
  :math:`(W v) \odot \psi(\kappa(\cdot))` of such a map with an MLP of invariants;
* the node features of input and output neurons, which no group element acts on, also get an
  ordinary MLP update;
* normalisation: an RMS norm without bias under the sign group (odd, so it commutes with
  ``-1``); none under the scale group (every norm of ``q v`` is ``q`` times that of ``v``).

``scalegmn_b`` also sends messages backward, from a neuron to its predecessors, over the
encoder's reverse edges.
"""
from __future__ import annotations

from typing import Any, ClassVar, Optional

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter

from neuralgraph.graph import Activation
from neuralgraph.graph.scaling import check_group, scaling_invariant
from neuralgraph.nn.base import Metanet, MetanetLayer
from neuralgraph.nn.context import GraphContext
from neuralgraph.nn.registry import register_metanet
from neuralgraph.nn.weight_features import check_activation


def normed_mlp(in_dim: int, hidden_dim: int) -> nn.Sequential:
    """Linear, LayerNorm, SiLU, Linear: for invariants, or for the unscaled input/output neurons.

    Args:
        in_dim: input width.
        hidden_dim: hidden and output width.

    Returns:
        The ``nn.Sequential``.
    """
    return nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.LayerNorm(hidden_dim), nn.SiLU(),
                         nn.Linear(hidden_dim, hidden_dim))


class EquivariantNorm(nn.Module):
    """RMS norm with a learned gain under the sign group (odd); identity under the scale group.

    Args:
        hidden_dim: width of the features.
        scaling: ``"sign"`` or ``"scale"``.
    """

    def __init__(self, hidden_dim: int, scaling: str):
        super().__init__()
        self.norm = nn.RMSNorm(hidden_dim) if scaling == "sign" else nn.Identity()

    def reset_parameters(self) -> None:
        if isinstance(self.norm, nn.RMSNorm):
            self.norm.reset_parameters()

    def forward(self, v: Tensor) -> Tensor:
        return self.norm(v)


class EdgeGate(nn.Module):
    r"""Invariant gate of an edge ``src -> dst``: an MLP of :math:`[\kappa(e), \kappa(h_\text{src}), \kappa(h_\text{dst})]`.

    .. math::
        \phi = W_2\,\mathrm{SiLU}\big(\mathrm{LN}(W_e \kappa(e) + W_s \kappa(h_\text{src}) + W_t \kappa(h_\text{dst}) + c)\big)

    The first layer is split by part, so node terms are projected once per node, not per edge.

    Args:
        hidden_dim: width of node and edge features and of the gate.
        scaling: the group whose invariants :math:`\kappa` the gate reads (``"sign"``: ``|.|``).
    """

    def __init__(self, hidden_dim: int, scaling: str):
        super().__init__()
        self.scaling = scaling
        self.edge_lin = nn.Linear(hidden_dim, hidden_dim)
        self.source_lin = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.target_lin = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.norm = nn.LayerNorm(hidden_dim)
        self.out = nn.Linear(hidden_dim, hidden_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in (self.edge_lin, self.source_lin, self.target_lin, self.norm, self.out):
            module.reset_parameters()

    def forward(self, x: Tensor, edge_attr: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        node = scaling_invariant(x, self.scaling)
        hidden = (self.edge_lin(scaling_invariant(edge_attr, self.scaling)) + self.source_lin(node)[src]
                  + self.target_lin(node)[dst])
        return self.out(nn.functional.silu(self.norm(hidden)))


class ScaleMessage(nn.Module):
    r"""Message along an edge ``src -> dst``, equivariant like the receiver ``dst``.

    .. math::
        m = (A e) \odot (B h_\text{src}) \odot \phi([\kappa(e), \kappa(h_\text{src}), \kappa(h_\text{dst})])

    ``e`` scales by ``q_dst / q_src`` along a forward edge, so ``e h_src`` scales by ``q_dst``. A
    backward edge under the scale group carries ``q_src / q_dst`` instead; its message is then
    :math:`(B h_\text{dst}) \odot \phi(\cdot)`, the receiver's own features gated by invariants.

    Args:
        hidden_dim: width of node and edge features.
        scaling: ``"sign"`` or ``"scale"``.
        uses_edge: multiply by :math:`A e` (``False``: the backward message under the scale group).
    """

    def __init__(self, hidden_dim: int, scaling: str, uses_edge: bool = True):
        super().__init__()
        self.scaling = scaling
        self.edge_lin = nn.Linear(hidden_dim, hidden_dim, bias=False) if uses_edge else None
        self.node_lin = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.gate = EdgeGate(hidden_dim, scaling)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in (self.edge_lin, self.node_lin, self.gate):
            if module is not None:
                module.reset_parameters()

    def forward(self, x: Tensor, edge_attr: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        gate = self.gate(x, edge_attr, src, dst)
        if self.edge_lin is None:
            return self.node_lin(x)[dst] * gate
        return self.edge_lin(edge_attr) * self.node_lin(x)[src] * gate


class ScaleGMNLayer(MetanetLayer):
    r"""One ScaleGMN layer: messages, then nodes, then edges, each equivariant to the scaling group.

    .. math::
        M_i^{\to} &= \operatorname{mean}_{j \to i} m^{\to}(e_{ij}, h_j, h_i), \qquad
        M_j^{\leftarrow} = \operatorname{mean}_{j \to i} m^{\leftarrow}(e_{ji}^{\text{rev}}, h_i, h_j)
            \ (\text{bidirectional}) \\
        v_i &= [h_i, M_i^{\to}, M_i^{\leftarrow}], \qquad
        h_i' = N\big(h_i + \mathrm{Dropout}((W v_i) \odot \psi(\kappa(v_i)))
            + [i\ \text{in/out}]\,\mathrm{MLP}(v_i)\big) \\
        e_{ij}' &= N\big(e_{ij} + \mathrm{Dropout}((U e_{ij}) \odot
            \chi([\kappa(e_{ij}), \kappa(h_j'), \kappa(h_i')]))\big)

    with :math:`\kappa` applied to each part of :math:`v_i` separately, :math:`m` a
    :class:`ScaleMessage` and ``N`` an :class:`EquivariantNorm`. General path only
    (``forward_dense`` is ``None``): a ScaleGMN runs on feature rows for every batch.

    Args:
        hidden_dim: width of node and edge features.
        scaling: ``"sign"`` or ``"scale"``.
        bidirectional: also the backward messages :math:`M^{\leftarrow}` (over reverse edges).
        dropout: dropout probability on the node and edge updates.
    """

    context = ("hidden", "node_layer")

    def context_arguments(self, context: GraphContext) -> dict[str, Any]:
        """``hidden``, ``node_layer`` and, where the batch's :class:`~neuralgraph.graph.blocks.GraphFacts` are
        known (the metanet checks with them that every edge of the graphs goes forward), ``num_edges``."""
        arguments = super().context_arguments(context)
        if context.facts is not None:
            arguments["num_edges"] = context.num_edges
        return arguments

    def __init__(self, hidden_dim: int, scaling: str = "sign", bidirectional: bool = False, dropout: float = 0.0):
        super().__init__()
        check_group(scaling)
        self.scaling, self.bidirectional = scaling, bidirectional
        parts = 3 if bidirectional else 2
        self.forward_message = ScaleMessage(hidden_dim, scaling)
        self.backward_message = ScaleMessage(hidden_dim, scaling, uses_edge=scaling == "sign") if bidirectional else None
        self.node_lin = nn.Linear(parts * hidden_dim, hidden_dim, bias=False)
        self.node_gate = normed_mlp(parts * hidden_dim, hidden_dim)
        self.io_update = normed_mlp(parts * hidden_dim, hidden_dim)
        self.edge_lin = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.edge_gate = EdgeGate(hidden_dim, scaling)
        self.node_norm = EquivariantNorm(hidden_dim, scaling)
        self.edge_norm = EquivariantNorm(hidden_dim, scaling)
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in (self.forward_message, self.backward_message, self.node_lin, *self.node_gate, *self.io_update,
                       self.edge_lin, self.edge_gate, self.node_norm, self.edge_norm):
            if module is not None and hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, *, hidden: Tensor,
                node_layer: Tensor, num_edges: Optional[int] = None) -> tuple[Tensor, Tensor]:
        """``hidden``: ``[N]`` bool, the hidden neurons; ``node_layer``: tells forward edges (to a
        later layer) from reverse ones, whatever their order; ``num_edges``: how many edges go forward,
        as the metanet knows it (its graph's edges, each with its reverse when bidirectional; it checks
        that they all go forward once per batch, :meth:`ScaleGMN.stack`); without it the edges are counted
        here, reading the count back from their device."""
        src, dst = edge_index
        num_nodes = x.shape[0]
        forward = node_layer[dst] > node_layer[src]
        if num_edges is None:
            if not self.bidirectional and not bool(forward.all()):
                raise ValueError("ScaleGMNLayer(bidirectional=False) got reverse edges; use bidirectional=True")
            if self.bidirectional and len(src) and bool(forward.all()):
                raise ValueError("ScaleGMNLayer(bidirectional=True) needs the encoder's reverse edges "
                                 "(uses_reverse_edges)")
            forward_rows = forward.nonzero().flatten()
            backward_rows = (~forward).nonzero().flatten()
        elif self.bidirectional:  # the forward edges first, each group in its own order (as a mask selects)
            order = torch.argsort((~forward).to(torch.uint8), stable=True)
            forward_rows, backward_rows = order[:num_edges], order[num_edges:]
        else:
            forward_rows = backward_rows = None  # every edge goes forward

        def select(rows: Optional[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
            return (edge_attr, src, dst) if rows is None else (edge_attr[rows], src[rows], dst[rows])

        forward_edges, forward_src, forward_dst = select(forward_rows)
        parts = [x, scatter(self.forward_message(x, forward_edges, forward_src, forward_dst), forward_dst, 0,
                            num_nodes, "mean")]
        if self.backward_message is not None:
            back_edges, back_src, back_dst = select(backward_rows)
            parts.append(scatter(self.backward_message(x, back_edges, back_src, back_dst), back_dst, 0,
                                 num_nodes, "mean"))
        v = torch.cat(parts, dim=-1)
        gate = self.node_gate(torch.cat([scaling_invariant(p, self.scaling) for p in parts], dim=-1))
        io_term = torch.where(hidden.unsqueeze(-1), 0.0, self.io_update(v))
        x = self.node_norm(x + self.dropout(self.node_lin(v) * gate) + io_term)
        gate = self.edge_gate(x, edge_attr, src, dst)
        edge_attr = self.edge_norm(edge_attr + self.dropout(self.edge_lin(edge_attr) * gate))
        return x, edge_attr


@register_metanet("scalegmn")
class ScaleGMN(Metanet):
    """ScaleGMN: :class:`ScaleGMNLayer` s on the parameter graph, equivariant to permutations and to
    the scaling group of ``network_activation`` (the encoder option naming the activation of the
    networks read, which the data's GraphSpec gives): ``"sign"`` for sine and tanh, ``"scale"`` for
    ReLU.

    The group is a class attribute, ``scaling``: this class and :class:`ScaleGMNB` are the sign
    variants, :class:`PositiveScaleGMN` and :class:`PositiveScaleGMNB` the scale variants, and
    constructing a registered class returns the variant of ``network_activation`` (without one, of
    ``scaling``; without either, the class's own). ``scaling``, when given with it, must be its
    group. The encoder lifts hidden neurons' biases and every weight multiplicatively (see
    :class:`~neuralgraph.nn.encoder.GraphEncoder`'s ``scaling``) and the heads must be built with
    the same group: :meth:`~neuralgraph.nn.base.Metanet.decoder` and ``readout`` build them so.

    Args:
        hidden_dim: width of node and edge features.
        num_layers: number of :class:`ScaleGMNLayer` s.
        dropout: dropout probability inside the layers.
        scaling: the scaling group, ``"sign"`` or ``"scale"``, checked against ``network_activation``'s;
            ``None`` (default) takes ``network_activation``'s, or the class's without it.
        **encoder_options: keyword-only, passed on to :class:`~neuralgraph.nn.base.Metanet`, which
            documents each: ``edge_features``, ``positional``, ``fourier_features``, ``fourier_scale``,
            ``max_layers``, ``max_node_types``, ``probe_features``, ``gradient_features``, ``network_activation``,
            ``w0``, ``node_activations``, ``skip_edges`` (the encoder's) and ``checkpoint``;
            ``edge_chunk`` is accepted and has no effect (the layers run whole), ``edge_dtype`` is refused.
    """

    scaling: ClassVar[str] = "sign"
    reads_general_graphs = False  # every edge must go to a later layer

    def __new__(cls, hidden_dim: int = 128, num_layers: int = 10, dropout: float = 0.0,
                scaling: Optional[str] = None, **encoder_options):
        return super().__new__(SCALE_VARIANTS.get(cls, cls) if cls.group_of(scaling, encoder_options) == "scale"
                               else cls)

    def __init__(self, hidden_dim: int = 128, num_layers: int = 10, dropout: float = 0.0,
                 scaling: Optional[str] = None, **encoder_options):
        group = self.group_of(scaling, encoder_options)
        if group != self.scaling:
            raise ValueError(f"{type(self).__name__} is equivariant to the {self.scaling!r} group but the networks "
                             f"read have {group!r}; build it by its registry name")
        super().__init__(hidden_dim, num_layers, dropout, **encoder_options)
        self.layers.extend(ScaleGMNLayer(hidden_dim, self.scaling, self.uses_reverse_edges, dropout)
                           for _ in range(num_layers))

    @classmethod
    def group_of(cls, scaling: Optional[str], encoder_options: dict) -> str:
        """The scaling group the model is built for: ``network_activation``'s (``scaling``, when given, must be
        it), else ``scaling``, else the class's; ValueError for an activation without a group the traces run.

        Args:
            scaling: the constructor's ``scaling``.
            encoder_options: the constructor's encoder options.

        Returns:
            ``"sign"`` or ``"scale"``.
        """
        if scaling is not None:
            check_group(scaling)
        activation = encoder_options.get("network_activation")
        if activation is None:
            return cls.scaling if scaling is None else scaling
        check_activation(activation, "network_activation")
        group = Activation(activation).scaling
        if scaling is not None and scaling != group:
            raise ValueError(f"scaling={scaling!r} but network_activation={activation!r} has the group {group!r}; "
                             "pass the activation of the networks read")
        return group

    def stack(self, node: Tensor, edge: Tensor, context: GraphContext) -> tuple[Tensor, Tensor]:
        """The layers, once the batch's :class:`~neuralgraph.graph.blocks.GraphFacts` say that every edge of its
        graphs goes to a later layer: the layers then take the first ``num_edges`` of the encoder's edge rows
        as the forward edges without counting them."""
        if context.facts is not None and not context.facts.forward_edges:
            raise ValueError(f"{type(self).__name__} reads parameter graphs whose every edge goes to a later layer; "
                             "this graph has an edge to the same or an earlier layer")
        return super().stack(node, edge, context)


@register_metanet("scalegmn_b")
class ScaleGMNB(ScaleGMN):
    """ScaleGMN-B: :class:`ScaleGMN` that also sends messages backward, over the encoder's reverse edges.

    Args:
        hidden_dim: width of node and edge features.
        num_layers: number of :class:`ScaleGMNLayer` s.
        dropout: dropout probability inside the layers.
        scaling: the scaling group, ``"sign"`` or ``"scale"``, checked against ``network_activation``'s;
            ``None`` (default) takes ``network_activation``'s, or the class's without it.
        **encoder_options: keyword-only, passed on to :class:`~neuralgraph.nn.base.Metanet`, which
            documents each: ``edge_features``, ``positional``, ``fourier_features``, ``fourier_scale``,
            ``max_layers``, ``max_node_types``, ``probe_features``, ``gradient_features``, ``network_activation``,
            ``w0``, ``node_activations``, ``skip_edges`` (the encoder's) and ``checkpoint``;
            ``edge_chunk`` is accepted and has no effect (the layers run whole), ``edge_dtype`` is refused.
    """

    uses_reverse_edges = True


class PositiveScaleGMN(ScaleGMN):
    """:class:`ScaleGMN` for ReLU networks: equivariant to positive rescalings of hidden neurons."""

    scaling = "scale"


class PositiveScaleGMNB(ScaleGMNB):
    """:class:`ScaleGMNB` for ReLU networks: equivariant to positive rescalings of hidden neurons."""

    scaling = "scale"


# the scale variant of each sign variant, which its constructor returns for a ReLU ``network_activation``
SCALE_VARIANTS: dict[type[ScaleGMN], type[ScaleGMN]] = {ScaleGMN: PositiveScaleGMN, ScaleGMNB: PositiveScaleGMNB}
