"""Neural Graphs GNN (NG-GNN, Kofinas et al. 2024): PNA message passing with FiLM-modulated messages."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.aggr import DegreeScalerAggregation
from torch_geometric.utils import degree

from neuralgraph.graph.core import Layout, mlp_to_graph
from neuralgraph.nn.base import EdgeUpdate, FiLM, Metanet, MetanetLayer, ResidualNorm
from neuralgraph.nn.registry import register_metanet

AGGREGATORS = ("mean", "min", "max", "std")
SCALERS = ("identity", "amplification", "attenuation")


def degree_histogram(layout: Layout) -> Tensor:
    """Histogram of node degrees in the parameter graph of ``layout`` with reverse edges.

    PNA's degree scalers normalise by the average log-degree of the training graphs; a
    representative layout fixes it.
    """
    weights = [torch.zeros(d_out, d_in) for d_in, d_out in zip(layout[:-1], layout[1:])]
    graph = mlp_to_graph(weights, [torch.zeros(d) for d in layout[1:]])
    deg = degree(graph.edge_index.flatten(), num_nodes=graph.num_nodes, dtype=torch.long)
    return torch.bincount(deg)


class NGGNNLayer(MessagePassing, MetanetLayer):
    r"""PNA layer of NG-GNN (`Kofinas et al., 2024 <https://arxiv.org/abs/2403.12143>`_) on the
    parameter graph with reverse edges (``k``: ``j -> i``, :math:`\bar k` its opposite).

    .. math::
        m_k &= \gamma(e_k) \odot (W_s x_j + W_t x_i) + \beta(e_k) \\
        a_i &= \big[\,s(\deg_i)\,\cdot\,\mathrm{agg}_{k \to i}\, m_k\,\big]_{
            \mathrm{agg} \in \{\mathrm{mean}, \min, \max, \mathrm{std}\},\
            s \in \{1, \mathrm{amp}, \mathrm{att}\}} \\
        x_i' &= \mathrm{LN}\big(x_i + \mathrm{Dropout}(W_2\,\mathrm{SiLU}(W_1 [x_i, a_i]))\big) \\
        e_k' &= \mathrm{EdgeUpdate}(e_k, e_{\bar k}, x_j', x_i')

    where :math:`[\gamma, \beta]` is the FiLM of the edge. A PyG ``MessagePassing`` operator
    whose aggregation is PyG's ``DegreeScalerAggregation``, as in ``PNAConv``.

    Args:
        hidden_dim: width ``d`` of node and edge features.
        deg: histogram of in-degrees of the training graphs (normalises the degree scalers).
        dropout: dropout probability on the node and edge updates.

    Shapes:
        ``x`` ``[N, d]``, ``edge_index`` ``[2, 2E]`` (every edge and its opposite),
        ``edge_attr`` ``[2E, d]``, ``reverse`` ``[2E]`` -> ``([N, d], [2E, d])``.
    """

    context = ("reverse",)

    def __init__(self, hidden_dim: int, deg: Tensor, dropout: float = 0.0):
        super().__init__(aggr=DegreeScalerAggregation(list(AGGREGATORS), list(SCALERS), deg))
        self.source_lin = nn.Linear(hidden_dim, hidden_dim)
        self.target_lin = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.film = FiLM(hidden_dim)
        self.node_lin = nn.Linear((1 + len(AGGREGATORS) * len(SCALERS)) * hidden_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, hidden_dim)
        self.residual = ResidualNorm(hidden_dim, dropout)
        self.edge_mlp = EdgeUpdate(hidden_dim, dropout, with_reverse=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        for module in (self.source_lin, self.target_lin, self.film, self.node_lin, self.out):
            module.reset_parameters()
        self.residual.reset_parameters()
        self.edge_mlp.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, *, reverse: Tensor) -> tuple[Tensor, Tensor]:
        """``edge_index`` holds every edge and its opposite; ``reverse[k]`` is the index of ``k``'s opposite."""
        aggregated = self.propagate(edge_index, x=(self.source_lin(x), self.target_lin(x)), edge_attr=edge_attr)
        hidden = nn.functional.silu(self.node_lin(torch.cat([x, aggregated], dim=-1)))
        x = self.residual(x, self.out(hidden))
        return x, self.edge_mlp(x, edge_index, edge_attr, reverse)

    def message(self, x_j: Tensor, x_i: Tensor, edge_attr: Tensor) -> Tensor:
        return self.film(x_j + x_i, edge_attr)


@register_metanet("ng_gnn")
class NGGNN(Metanet):
    """Neural Graphs GNN: :class:`NGGNNLayer` s on the parameter graph with reverse edges.

    ``degree_layout`` is the layout whose degree histogram normalises PNA's scalers.
    """

    uses_reverse_edges = True

    def __init__(
        self,
        hidden_dim: int = 64,
        num_layers: int = 4,
        dropout: float = 0.0,
        degree_layout: Sequence[int] = (2, 32, 32, 1),
        **encoder_options,
    ):
        super().__init__(hidden_dim, num_layers, dropout, **encoder_options)
        deg = degree_histogram(tuple(degree_layout))
        self.layers.extend(NGGNNLayer(hidden_dim, deg, dropout) for _ in range(num_layers))
