r"""Heads on a metanetwork's node and edge features: a vector per graph, or new networks.

* :class:`InvariantReadout` pools per layer and maps to ``out_dim`` (for functionals such as
  predicting a network's accuracy or an INR's class): invariant to whatever permutations the
  metanetwork is equivariant to.
* :class:`WeightDecoder` predicts ``k`` weight and bias deltas per edge and neuron, and
  returns ``k`` edited networks per input (Output Capacity Expansion): equivariant. Its
  ``members`` option gives the OCE ablation's variants: one wide network decoded directly
  (``"coupled"``) and ``k`` identical members (``"tied"``).

Both take ``scaling`` (``None``, ``"sign"``, ``"scale"``), the scaling group of the metanetwork
they read (``metanet.scaling``): the readout then pools invariants :math:`\kappa` of hidden
neurons' and edges' features, and the decoder's deltas are linear in the features times a
function of their invariants, so they scale like the weights they are added to.

Both read the batch's :class:`~neuralgraph.nn.context.GraphContext`, the one the metanet ran on
(``metanet.context(graph, blocks)``, handed on by the tasks), or build it from the graph when
called without one.
"""
from __future__ import annotations

import copy
from typing import Optional

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter

from neuralgraph.graph import Graph, GraphConversionError, common_layout, graph_to_blocks
from neuralgraph.graph.blocks import WeightBlocks
from neuralgraph.graph.scaling import check_group, scaling_invariant
from neuralgraph.nn.context import GraphContext, context_facts, edge_blocks, graph_context, node_blocks
from neuralgraph.nn.encoder import MAX_LAYERS, check_index_range
from neuralgraph.nn.ensemble import merge_ensemble


def two_layer_mlp(in_dim: int, hidden_dim: int, out_dim: int) -> nn.Sequential:
    """``Linear, SiLU, Linear``.

    Args:
        in_dim: input width.
        hidden_dim: hidden width.
        out_dim: output width.

    Returns:
        The ``nn.Sequential``.
    """
    return nn.Sequential(nn.Linear(in_dim, hidden_dim), nn.SiLU(), nn.Linear(hidden_dim, out_dim))


def reset_mlp(mlp: nn.Sequential) -> None:
    """Re-initialise every ``nn.Linear`` of ``mlp``.

    Args:
        mlp: an ``nn.Sequential``.
    """
    for module in mlp:
        if isinstance(module, nn.Linear):
            module.reset_parameters()


class InvariantReadout(nn.Module):
    r"""Per-graph vector from node and edge features, pooled layer by layer.

    .. math::
        y = \mathrm{MLP}\big([\,\operatorname{mean}_{l(i)=0} x_i, \dots, \operatorname{mean}_{l(i)=L} x_i,\
            \operatorname{mean}_{l(e)=0} e, \dots, \operatorname{mean}_{l(e)=L-1} e\,]\big)

    Slots of layers a graph does not have (shallower networks in a mixed batch) are zero.
    Pooling whole layers makes the output invariant to permutations of the neurons within any
    layer, while the per-layer slots keep depth information. With ``scaling``, hidden neurons'
    and all edges' features are replaced by their invariants :math:`\kappa(\cdot)` before pooling.

    Args:
        hidden_dim: width of the node and edge features read.
        out_dim: width of the output ``y``.
        max_layers: weight layers pooled (``2 max_layers + 1`` slots).
        mlp_dim: hidden width of the MLP (default: ``hidden_dim``).
        scaling: ``None``, ``"sign"`` or ``"scale"``: the group of the features read.
    """

    def __init__(self, hidden_dim: int, out_dim: int, max_layers: int = MAX_LAYERS, mlp_dim: int | None = None,
                 scaling: Optional[str] = None):
        super().__init__()
        if scaling is not None:
            check_group(scaling)
        self.scaling = scaling
        self.hidden_dim = hidden_dim
        self.max_layers = max_layers
        pooled_dim = (2 * max_layers + 1) * hidden_dim
        self.mlp = two_layer_mlp(pooled_dim, mlp_dim or hidden_dim, out_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_mlp(self.mlp)

    def forward(self, graph: Graph, node_features: Tensor, edge_features: Tensor,
                context: Optional[GraphContext] = None) -> Tensor:
        """``[B, out_dim]`` for a batch of ``B`` graphs; ``context``: the batch's, built here when not given."""
        context = graph_context(graph, dense=False) if context is None else context
        check_index_range("edge_layer", context_facts(graph, context).max_edge_layer, self.max_layers, "max_layers")
        B, node_graph = context.num_graphs, context.batch
        if self.scaling is not None:
            hidden = context.hidden.unsqueeze(-1)
            node_features = torch.where(hidden, scaling_invariant(node_features, self.scaling), node_features)
            edge_features = scaling_invariant(edge_features, self.scaling)
        node_slot = node_graph * (self.max_layers + 1) + graph.node_layer
        edge_slot = node_graph[graph.edge_index[1]] * self.max_layers + graph.edge_layer
        nodes = scatter(node_features, node_slot, 0, B * (self.max_layers + 1), "mean")
        edges = scatter(edge_features, edge_slot, 0, B * self.max_layers, "mean")
        pooled = torch.cat([nodes.view(B, -1), edges.view(B, -1)], dim=1)
        return self.mlp(pooled)


# How the k output networks of a WeightDecoder relate (see its docstring).
MEMBERS = ("independent", "coupled", "tied")


class WeightDecoder(nn.Module):
    r"""``k`` edited networks per input graph: :math:`w^{(m)} = w + s_l\,\Delta w^{(m)}`, :math:`b^{(m)} = b + s_l\,\Delta b^{(m)}`.

    :math:`\Delta w \in \mathbb{R}^{E \times k}` comes from an MLP on each edge's features,
    :math:`\Delta b \in \mathbb{R}^{N \times k}` from an MLP on each non-input neuron's features
    (input neurons have no bias and are skipped), and :math:`s_l` is a learnable scale per
    weight layer, initialised small (``1e-2``) so that training starts from the input network.

    With ``scaling`` the heads are equivariant: :math:`\Delta w = (U e) \odot \mathrm{MLP}(\kappa(e))`
    with ``U`` linear without bias, and likewise for :math:`\Delta b`.

    ``members`` says how the ``k`` outputs relate (the variants of the OCE ablation):

    * ``"independent"`` (Output Capacity Expansion): ``k`` deltas per edge and neuron, ``k`` networks
      returned (``[B, k, ...]``), averaged by the task; :func:`~neuralgraph.nn.ensemble.merge_ensemble`
      turns them into one network of hidden width :math:`k h` with block-diagonal hidden layers.
    * ``"coupled"``: one network of hidden width :math:`k h` decoded directly (``[B, 1, ...]``), hidden
      neuron :math:`(m, i)` being copy ``m`` of neuron ``i``. The edge head emits a :math:`k \times k`
      matrix per edge; its diagonal gives the first layer's rows, the diagonal blocks of hidden layers
      and the output layer's columns exactly as in the merged OCE network, and its off-diagonal entries
      the cross-copy weights of hidden layers, which OCE fixes at zero:

      .. math::
          W_l[(m, i), (m', j)] = \delta_{mm'}\,\big(w_{ij} + s_l\,\Delta w_{ij}^{(m m)}\big)
              + (1 - \delta_{mm'})\,c_l\,\Delta w_{ij}^{(m m')}

      with :math:`c_l` a per-layer scale initialised at zero, so that training starts from the merged
      OCE network of the same deltas. Its function class contains that of OCE, with no averaging
      constraint; hidden permutations of the input permute every copy alike (equivariant).
    * ``"tied"``: one delta per edge and neuron replicated to all ``k`` members (a control: the
      average of ``k`` identical networks is a ``k = 1`` decoder's network, at ``k = 1``'s parameters).

    At ``k = 1`` the three are the same decoder. The input networks are the batch's
    :class:`~neuralgraph.graph.blocks.WeightBlocks` where its context has them, else read back from the
    graph by ``node_layer``/``node_index`` (:func:`~neuralgraph.graph.decode.graph_to_blocks`), never by
    storage order. Decoding needs one layout per batch, and MLP graphs (one feature per edge).

    Args:
        hidden_dim: width of the node and edge features read.
        k: output networks (``members`` says how they relate).
        max_layers: weight layers with a scale :math:`s_l`.
        init_scale: initial value of every :math:`s_l`.
        scaling: ``None``, ``"sign"`` or ``"scale"``: the group of the features read.
        members: ``"independent"``, ``"coupled"`` or ``"tied"`` (above).
    """

    def __init__(self, hidden_dim: int, k: int = 1, max_layers: int = MAX_LAYERS, init_scale: float = 1e-2,
                 scaling: Optional[str] = None, members: str = "independent"):
        super().__init__()
        if k < 1:
            raise ValueError(f"k={k}: a WeightDecoder predicts at least one network")
        if members not in MEMBERS:
            raise ValueError(f"WeightDecoder members={members!r}: choose one of {', '.join(MEMBERS)}")
        if scaling is not None:
            check_group(scaling)
        self.scaling = scaling
        self.k = k
        self.members = members
        # deltas per edge and per neuron
        edge_outputs = {"independent": k, "coupled": k * k, "tied": 1}[members]
        node_outputs = 1 if members == "tied" else k
        self.edge_lin = nn.Linear(hidden_dim, edge_outputs, bias=False) if scaling else None
        self.node_lin = nn.Linear(hidden_dim, node_outputs, bias=False) if scaling else None
        self.max_layers = max_layers
        self.init_scale = init_scale
        self.edge_head = two_layer_mlp(hidden_dim, hidden_dim, edge_outputs)
        self.node_head = two_layer_mlp(hidden_dim, hidden_dim, node_outputs)
        self.scale = nn.Parameter(torch.empty(max_layers))
        self.cross_scale = nn.Parameter(torch.empty(max_layers)) if members == "coupled" and k > 1 else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_mlp(self.edge_head)
        reset_mlp(self.node_head)
        if self.scaling is not None:
            self.edge_lin.reset_parameters()
            self.node_lin.reset_parameters()
        nn.init.constant_(self.scale, self.init_scale)
        if self.cross_scale is not None:
            nn.init.zeros_(self.cross_scale)

    def deltas(self, node_features: Tensor, edge_features: Tensor) -> tuple[Tensor, Tensor]:
        """Weight and bias deltas before the per-layer scale: ``[E, k]`` and ``[N, k]``
        (``[E, k * k]`` per edge with ``members="coupled"``, entry ``m k + m'`` for copies ``(m, m')``)."""
        if self.scaling is None:
            edge, node = self.edge_head(edge_features), self.node_head(node_features)
        else:
            edge = self.edge_lin(edge_features) * self.edge_head(scaling_invariant(edge_features, self.scaling))
            node = self.node_lin(node_features) * self.node_head(scaling_invariant(node_features, self.scaling))
        if self.members == "tied":
            return edge.expand(-1, self.k), node.expand(-1, self.k)
        return edge, node

    def forward(self, graph: Graph, node_features: Tensor, edge_features: Tensor,
                context: Optional[GraphContext] = None) -> tuple[list[Tensor], list[Tensor]]:
        """Per layer, weights ``[B, k, d_out, d_in]`` and biases ``[B, k, d_out]``; with
        ``members="coupled"``, one network of hidden width ``k h``: ``[B, 1, d_out', d_in']``, ``[B, 1, d_out']``.

        ``context``: the batch's, built here when not given. Where it holds the batch's
        :class:`~neuralgraph.graph.blocks.WeightBlocks`, the deltas are added to those blocks (views of
        the delta rows of the canonical batch); otherwise every network is decoded from the graph."""
        if graph.edge_attr.shape[-1] != 1:
            raise GraphConversionError(
                f"WeightDecoder decodes MLP graphs; edge_attr has {graph.edge_attr.shape[-1]} features per edge"
            )
        context = graph_context(graph, dense=False) if context is None else context
        check_index_range("edge_layer", context_facts(graph, context).max_edge_layer, self.max_layers, "max_layers")
        edge_delta, node_delta = self.deltas(node_features, edge_features)
        coupled = self.cross_scale is not None
        if coupled:
            edge_delta = edge_delta.view(-1, self.k, self.k)
            cross_delta, edge_delta = edge_delta, edge_delta.diagonal(dim1=1, dim2=2)
        if context.blocks is not None:
            weights, biases = self.edit_blocks(context.blocks, edge_delta, node_delta)
        else:
            weights, biases = self.edit_graph(graph, context, edge_delta, node_delta)
        if not coupled:
            return weights, biases
        off_diagonal = 1 - torch.eye(self.k, dtype=cross_delta.dtype, device=cross_delta.device)
        if context.blocks is not None:
            cross = [self.cross_scale[l] * block.unflatten(-1, (self.k, self.k)) * off_diagonal for l, block
                     in enumerate(edge_blocks(cross_delta.flatten(1), context.blocks.layout))]
        else:
            cross = self.edge_blocks(graph, self.cross_scale[graph.edge_layer].view(-1, 1, 1) * cross_delta * off_diagonal)
        return self.couple(weights, biases, cross)

    def edit_blocks(self, blocks: WeightBlocks, edge_delta: Tensor, node_delta: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """The ``k`` edited networks from the batch's blocks and the delta rows ``[E, k]``/``[N, k]`` of its
        canonical graph, viewed as blocks."""
        layout = blocks.layout
        weights = [(w + self.scale[l] * delta).permute(0, 3, 1, 2)
                   for l, (w, delta) in enumerate(zip(blocks.weights, edge_blocks(edge_delta, layout)))]
        biases = [(b.unsqueeze(-1) + self.scale[l] * delta).transpose(1, 2)
                  for l, (b, delta) in enumerate(zip(blocks.biases, node_blocks(node_delta, layout)[1:]))]
        return weights, biases

    def edit_graph(self, graph: Graph, context: GraphContext, edge_delta: Tensor,
                   node_delta: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """The ``k`` edited networks, every weight and bias read back from ``graph`` by its neuron indices."""
        layout = common_layout(graph)
        edge_values = graph.edge_attr + self.scale[graph.edge_layer].unsqueeze(-1) * edge_delta
        node_scale = self.scale[(graph.node_layer - 1).clamp(min=0)].unsqueeze(-1)
        node_values = graph.x + node_scale * node_delta  # rows of input neurons unused
        weights = [w.permute(0, 3, 1, 2) for w in self.edge_blocks(graph, edge_values)]  # [B, k, d_out, d_in]
        biases = []
        for l, d_out in enumerate(layout[1:], start=1):
            in_layer = graph.node_layer == l
            b = node_values.new_zeros(context.num_graphs, d_out, self.k)
            b[context.batch[in_layer], graph.node_index[in_layer]] = node_values[in_layer]
            biases.append(b.transpose(1, 2))
        return weights, biases

    @staticmethod
    def edge_blocks(graph: Graph, edge_values: Tensor) -> list[Tensor]:
        """Per layer ``[B, d_out, d_in, *F]`` of per-edge values ``[E, *F]``, read by neuron index."""
        edited = copy.copy(graph)
        edited.edge_attr = edge_values.flatten(1)
        blocks, _ = graph_to_blocks(edited)
        return [w.unflatten(-1, edge_values.shape[1:]) for w in blocks]

    def couple(self, weights: list[Tensor], biases: list[Tensor],
               cross: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """The merged OCE network of ``weights``/``biases`` plus the cross-copy blocks ``cross`` (per layer
        ``[B, d_out, d_in, k, k]``, scaled) of its hidden layers."""
        k = self.k
        merged_w, merged_b = merge_ensemble(weights, biases)
        for l in range(1, len(merged_w) - 1):  # hidden-to-hidden layers
            B, d_out, d_in = cross[l].shape[:3]
            merged_w[l] = merged_w[l] + cross[l].permute(0, 3, 1, 4, 2).reshape(B, k * d_out, k * d_in)
        return [w.unsqueeze(1) for w in merged_w], [b.unsqueeze(1) for b in merged_b]
