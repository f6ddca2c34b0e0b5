"""Graph Metanetwork (GMN, Lim et al. 2024): bidirectional edge-updating message passing."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from neuralgraph.nn.base import EdgeUpdate, Metanet, MetanetLayer, ResidualNorm, node_rows
from neuralgraph.nn.registry import register_metanet


class GMNLayer(MessagePassing, MetanetLayer):
    r"""One GMN layer (`Lim et al., 2024 <https://arxiv.org/abs/2312.04501>`_) on the directed
    parameter graph (edge ``j -> i`` from layer ``l-1`` to ``l``).

    Edges first (see :class:`~neuralgraph.nn.base.EdgeUpdate`), then nodes from messages sent
    forward (by predecessors) and backward (by successors), averaged separately:

    .. math::
        e_{ij}' &= \mathrm{EdgeUpdate}(e_{ij}, x_j, x_i) \\
        f_i &= \operatorname{mean}_{j \to i} \mathrm{SiLU}(W_f x_j + U_f e_{ij}') \qquad
        b_j = \operatorname{mean}_{j \to i} \mathrm{SiLU}(W_b x_i + U_b e_{ij}') \\
        x_i' &= \mathrm{LN}\big(x_i + \mathrm{Dropout}(W_2\,\mathrm{SiLU}(W_x x_i + V_f f_i + V_b b_i))\big)

    Every operation is per node or per edge, or a mean over ``edge_index``: the layer is
    equivariant to any relabelling of the nodes, hence to hidden-neuron permutations.
    ``forward`` is a PyG ``MessagePassing`` operator: one ``propagate`` along the edges, one
    against them. ``forward_dense`` runs on the ``[B, d_{l+1}, d_l, d]`` blocks of a batch of one
    layout: node terms are broadcast over them and the two means are means over their ``d_l`` and
    ``d_{l+1}`` axes.

    Args:
        hidden_dim (int): width ``d`` of node and edge features.
        dropout (float, optional): dropout probability on the node and edge updates. (default: ``0.0``)

    Shapes:
        ``forward``: ``x`` ``[N, d]``, ``edge_index`` ``[2, E]``, ``edge_attr`` ``[E, d]`` -> ``([N, d], [E, d])``.
        ``forward_dense``: ``nodes[k]`` ``[B, d_k, d]``, ``edges[l]`` ``[B, d_{l+1}, d_l, d]`` -> alike.
    """

    def __init__(self, hidden_dim: int, dropout: float = 0.0):
        super().__init__(aggr="mean")
        self.edge_mlp = EdgeUpdate(hidden_dim, dropout)
        self.forward_node = nn.Linear(hidden_dim, hidden_dim)
        self.forward_edge = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.backward_node = nn.Linear(hidden_dim, hidden_dim)
        self.backward_edge = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.node_lin = nn.Linear(3 * hidden_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, hidden_dim)
        self.residual = ResidualNorm(hidden_dim, dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.edge_mlp.reset_parameters()
        for lin in (self.forward_node, self.forward_edge, self.backward_node, self.backward_edge, self.node_lin, self.out):
            lin.reset_parameters()
        self.residual.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> tuple[Tensor, Tensor]:
        edge_attr = self.edge_mlp(x, edge_index, edge_attr)
        forward_agg = self.propagate(edge_index, x=self.forward_node(x), edge=self.forward_edge(edge_attr))
        backward_agg = self.propagate(edge_index.flip(0), x=self.backward_node(x), edge=self.backward_edge(edge_attr))
        return self.node_update(x, forward_agg, backward_agg), edge_attr

    def message(self, x_j: Tensor, edge: Tensor) -> Tensor:
        return nn.functional.silu(x_j + edge)

    def node_update(self, x: Tensor, forward_agg: Tensor, backward_agg: Tensor) -> Tensor:
        """``x'`` from ``x`` and its two means (rows of any leading shape)."""
        hidden = nn.functional.silu(self.node_lin(torch.cat([x, forward_agg, backward_agg], dim=-1)))
        return self.residual(x, self.out(hidden))

    def forward_dense(self, nodes: Sequence[Tensor], edges: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """``f`` and ``b`` are means over an axis of each edge block: sums divided afterwards, so the backward
        pass divides ``[B, d_k, d]`` means, not every edge. Input neurons have no ``f`` and output neurons
        no ``b`` (zero, as the mean over no edges)."""
        edges = self.edge_mlp.forward_dense(nodes, edges)
        x, widths = node_rows(nodes)
        sources = self.forward_node(x).split(widths, dim=1)
        targets = self.backward_node(x).split(widths, dim=1)
        forward = [x.new_zeros(nodes[0].shape)] + [
            nn.functional.silu(self.forward_edge(edge) + source[:, None]).sum(2) / edge.shape[2]
            for edge, source in zip(edges, sources)]
        backward = [nn.functional.silu(self.backward_edge(edge) + target[:, :, None]).sum(1) / edge.shape[1]
                    for edge, target in zip(edges, targets[1:])] + [x.new_zeros(nodes[-1].shape)]
        x = self.node_update(x, torch.cat(forward, dim=1), torch.cat(backward, dim=1))
        return list(x.split(widths, dim=1)), edges


@register_metanet("gmn")
class GMN(Metanet):
    """Graph Metanetwork: a stack of :class:`GMNLayer` s on the directed parameter graph."""

    def __init__(self, hidden_dim: int = 128, num_layers: int = 4, dropout: float = 0.0, **encoder_options):
        super().__init__(hidden_dim, num_layers, dropout, **encoder_options)
        self.layers.extend(GMNLayer(hidden_dim, dropout) for _ in range(num_layers))
