"""Neural Graphs relational transformer (NG-T, Kofinas et al. 2024): sparse attention over neighbours."""
from __future__ import annotations

import math

from torch import Tensor, nn
from torch_geometric.utils import scatter, softmax

from neuralgraph.nn.base import EdgeUpdate, FeedForward, FiLM, Metanet, MetanetLayer, ResidualNorm, check_heads
from neuralgraph.nn.registry import register_metanet


class RelationalAttentionLayer(MetanetLayer):
    r"""Relational transformer layer on the parameter graph with reverse edges (``k``: ``j -> i``).

    Per head ``h`` (width :math:`d_h`), edge features enter queries and keys and modulate values:

    .. math::
        q_k &= W_q x_i + U_q e_k, \quad k_k = W_k x_j + U_k e_k, \quad
        v_k = \gamma(e_k) \odot W_v x_j + \beta(e_k) \\
        \alpha_k &= \operatorname{softmax}_{k' \to i}\big(q_{k'}^{(h)} \cdot k_{k'}^{(h)} / \sqrt{d_h}\big) \\
        x_i' &= \mathrm{LN}\big(x_i + \mathrm{Dropout}(W_o \textstyle\sum_{k \to i} \alpha_k v_k)\big), \quad
        x_i'' = \mathrm{LN}\big(x_i' + \mathrm{Dropout}(\mathrm{FFN}(x_i'))\big) \\
        e_k' &= \mathrm{EdgeUpdate}(e_k, e_{\bar k}, x_j'', x_i'')

    The softmax runs per destination node over its incoming edges (PyG ``utils.softmax``), so
    memory is linear in the number of edges. (`Kofinas et al., 2024 <https://arxiv.org/abs/2403.12143>`_.)

    Args:
        hidden_dim: width ``d`` of node and edge features, a multiple of ``num_heads``.
        num_heads: attention heads.
        dropout: dropout probability on the attention weights and the updates.

    Shapes:
        ``x`` ``[N, d]``, ``edge_index`` ``[2, 2E]`` (every edge and its opposite),
        ``edge_attr`` ``[2E, d]``, ``reverse`` ``[2E]`` -> ``([N, d], [2E, d])``.
    """

    context = ("reverse",)

    def __init__(self, hidden_dim: int, num_heads: int = 4, dropout: float = 0.0):
        super().__init__()
        check_heads(hidden_dim, num_heads)
        self.num_heads = num_heads
        self.query_node = nn.Linear(hidden_dim, hidden_dim)
        self.query_edge = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.key_node = nn.Linear(hidden_dim, hidden_dim)
        self.key_edge = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.value_node = nn.Linear(hidden_dim, hidden_dim)
        self.value_film = FiLM(hidden_dim)
        self.attention_out = nn.Linear(hidden_dim, hidden_dim)
        self.attention_residual = ResidualNorm(hidden_dim, dropout)
        self.attention_dropout = nn.Dropout(dropout)
        self.feedforward = FeedForward(hidden_dim, dropout)
        self.edge_mlp = EdgeUpdate(hidden_dim, dropout, with_reverse=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.query_node, self.query_edge, self.key_node, self.key_edge, self.value_node, self.attention_out):
            lin.reset_parameters()
        self.value_film.reset_parameters()
        self.attention_residual.reset_parameters()
        self.feedforward.reset_parameters()
        self.edge_mlp.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, *, reverse: Tensor) -> tuple[Tensor, Tensor]:
        """``edge_index`` holds every edge and its opposite; ``reverse[k]`` is the index of ``k``'s opposite."""
        src, dst = edge_index
        num_nodes, hidden_dim = x.shape
        heads, head_dim = self.num_heads, hidden_dim // self.num_heads
        query = (self.query_node(x)[dst] + self.query_edge(edge_attr)).view(-1, heads, head_dim)
        key = (self.key_node(x)[src] + self.key_edge(edge_attr)).view(-1, heads, head_dim)
        value = self.value_film(self.value_node(x)[src], edge_attr).view(-1, heads, head_dim)
        score = (query * key).sum(-1) / math.sqrt(head_dim)  # [2E, heads]
        alpha = self.attention_dropout(softmax(score, dst, num_nodes=num_nodes))
        attended = scatter(alpha.unsqueeze(-1) * value, dst, 0, num_nodes, "sum").view(num_nodes, hidden_dim)
        x = self.attention_residual(x, self.attention_out(attended))
        x = self.feedforward(x)
        return x, self.edge_mlp(x, edge_index, edge_attr, reverse)


@register_metanet("ng_t")
class NGT(Metanet):
    """Neural Graphs transformer: :class:`RelationalAttentionLayer` s with reverse edges."""

    uses_reverse_edges = True
    hidden_dim_multiple_of = "num_heads"

    def __init__(
        self, hidden_dim: int = 64, num_layers: int = 4, dropout: float = 0.0, num_heads: int = 4, **encoder_options
    ):
        super().__init__(hidden_dim, num_layers, dropout, **encoder_options)
        self.layers.extend(RelationalAttentionLayer(hidden_dim, num_heads, dropout) for _ in range(num_layers))
