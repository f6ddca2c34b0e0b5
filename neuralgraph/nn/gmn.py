"""Graph Metanetwork (GMN, Lim et al. 2024): bidirectional edge-updating message passing."""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter

from neuralgraph.nn.base import EdgeUpdate, Metanet, MetanetLayer, ResidualNorm
from neuralgraph.nn.registry import register_metanet


class GMNLayer(MetanetLayer):
    r"""One GMN layer on the directed parameter graph (edge ``j -> i`` from layer ``l-1`` to ``l``).

    Edges first (see :class:`~neuralgraph.nn.base.EdgeUpdate`), then nodes from messages sent
    forward (by predecessors) and backward (by successors), averaged separately:

    .. math::
        e_{ij}' &= \mathrm{EdgeUpdate}(e_{ij}, x_j, x_i) \\
        f_i &= \operatorname{mean}_{j \to i} \mathrm{SiLU}(W_f x_j + U_f e_{ij}') \qquad
        b_j = \operatorname{mean}_{j \to i} \mathrm{SiLU}(W_b x_i + U_b e_{ij}') \\
        x_i' &= \mathrm{LN}\big(x_i + \mathrm{Dropout}(W_2\,\mathrm{SiLU}(W_x x_i + V_f f_i + V_b b_i))\big)

    Every operation is per node or per edge, or a mean over ``edge_index``: the layer is
    equivariant to any relabelling of the nodes, hence to hidden-neuron permutations.
    """

    def __init__(self, hidden_dim: int, dropout: float = 0.0):
        super().__init__()
        self.edge_update = EdgeUpdate(hidden_dim, dropout)
        self.forward_node = nn.Linear(hidden_dim, hidden_dim)
        self.forward_edge = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.backward_node = nn.Linear(hidden_dim, hidden_dim)
        self.backward_edge = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.update = nn.Linear(3 * hidden_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, hidden_dim)
        self.residual = ResidualNorm(hidden_dim, dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.edge_update.reset_parameters()
        for lin in (self.forward_node, self.forward_edge, self.backward_node, self.backward_edge, self.update, self.out):
            lin.reset_parameters()
        self.residual.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> tuple[Tensor, Tensor]:
        src, dst = edge_index
        num_nodes = x.shape[0]
        edge_attr = self.edge_update(x, edge_attr, edge_index)
        forward_msg = nn.functional.silu(self.forward_node(x)[src] + self.forward_edge(edge_attr))
        backward_msg = nn.functional.silu(self.backward_node(x)[dst] + self.backward_edge(edge_attr))
        forward_agg = scatter(forward_msg, dst, 0, num_nodes, "mean")
        backward_agg = scatter(backward_msg, src, 0, num_nodes, "mean")
        hidden = nn.functional.silu(self.update(torch.cat([x, forward_agg, backward_agg], dim=-1)))
        return self.residual(x, self.out(hidden)), edge_attr


@register_metanet("gmn")
class GMN(Metanet):
    """Graph Metanetwork: a stack of :class:`GMNLayer` s on the directed parameter graph."""

    def __init__(self, hidden_dim: int = 128, num_layers: int = 4, dropout: float = 0.0, **encoder_options):
        super().__init__(hidden_dim, num_layers, dropout, **encoder_options)
        self.layers.extend(GMNLayer(hidden_dim, dropout) for _ in range(num_layers))
