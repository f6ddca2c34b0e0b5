"""Neural Functional Transformer (NFT, Zhou et al. 2023) on parameter graphs: attention among the
neurons of each layer, interleaved with exchanges along the weights between layers."""
from __future__ import annotations

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter, to_dense_batch

from neuralgraph.nn.base import EdgeUpdate, FeedForward, Metanet, MetanetLayer, ResidualNorm, check_heads
from neuralgraph.nn.registry import register_metanet


def layer_groups(node_layer: Tensor, batch: Tensor) -> Tensor:
    """Consecutive id of each node's ``(graph, layer)`` group."""
    key = batch * (int(node_layer.max()) + 1) + node_layer
    return torch.unique(key, return_inverse=True)[1]


class NeuronAttentionLayer(MetanetLayer):
    r"""One NFT layer: weights -> neurons, self-attention within each layer, neurons -> weights.

    .. math::
        x_i &\leftarrow \mathrm{LN}\big(x_i + \mathrm{Dropout}(W_2\,\mathrm{SiLU}(W_x x_i
              + U_{in} \operatorname{mean}_{j \to i} e_{ij} + U_{out} \operatorname{mean}_{i \to k} e_{ki}))\big) \\
        x_i &\leftarrow \mathrm{LN}\big(x_i + \mathrm{Dropout}(\mathrm{MHA}(x_i, \{x_j : j \in G(i)\}))\big),
              \quad x_i \leftarrow \mathrm{FFN}(x_i) \\
        e_{ij} &\leftarrow \mathrm{EdgeUpdate}(e_{ij}, x_j, x_i)

    :math:`G(i)` is the set of neurons in the same layer of the same graph. Attention runs on
    groups padded to the largest layer (``[groups, width, width]`` scores, never ``N x N``
    across the batch), with padding masked out. Hidden neurons of a layer share their
    positional embedding, so attention among them is equivariant to their permutations.
    (`Zhou et al., 2023 <https://arxiv.org/abs/2305.13546>`_.)

    Args:
        hidden_dim: width ``d`` of node and edge features, a multiple of ``num_heads``.
        num_heads: attention heads.
        dropout: dropout probability on the attention weights and the updates.

    Shapes:
        ``x`` ``[N, d]``, ``edge_index`` ``[2, E]``, ``edge_attr`` ``[E, d]``, ``node_layer``
        ``[N]``, ``batch`` ``[N]`` -> ``([N, d], [E, d])``.
    """

    context = ("node_layer", "batch")

    def __init__(self, hidden_dim: int, num_heads: int = 4, dropout: float = 0.0):
        super().__init__()
        check_heads(hidden_dim, num_heads)
        self.node_lin = nn.Linear(hidden_dim, hidden_dim)
        self.incoming_lin = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.outgoing_lin = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.exchange_out = nn.Linear(hidden_dim, hidden_dim)
        self.exchange_residual = ResidualNorm(hidden_dim, dropout)
        self.attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=dropout, batch_first=True)
        self.attention_residual = ResidualNorm(hidden_dim, dropout)
        self.feedforward = FeedForward(hidden_dim, dropout)
        self.edge_mlp = EdgeUpdate(hidden_dim, dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.node_lin, self.incoming_lin, self.outgoing_lin, self.exchange_out):
            lin.reset_parameters()
        self.attention._reset_parameters()
        for module in (self.exchange_residual, self.attention_residual, self.feedforward, self.edge_mlp):
            module.reset_parameters()

    def forward(
        self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, *, node_layer: Tensor, batch: Tensor
    ) -> tuple[Tensor, Tensor]:
        """``node_layer``/``batch``: layer and graph of each node (attention runs within each pair)."""
        src, dst = edge_index
        num_nodes = x.shape[0]
        incoming = scatter(edge_attr, dst, 0, num_nodes, "mean")
        outgoing = scatter(edge_attr, src, 0, num_nodes, "mean")
        hidden = self.node_lin(x) + self.incoming_lin(incoming) + self.outgoing_lin(outgoing)
        x = self.exchange_residual(x, self.exchange_out(nn.functional.silu(hidden)))

        groups = layer_groups(node_layer, batch)
        order = torch.argsort(groups, stable=True)
        dense, mask = to_dense_batch(x[order], groups[order])  # [G, width, d]
        attended, _ = self.attention(dense, dense, dense, key_padding_mask=~mask, need_weights=False)
        attended_nodes = torch.empty_like(x)
        attended_nodes[order] = attended[mask]
        x = self.feedforward(self.attention_residual(x, attended_nodes))
        return x, self.edge_mlp(x, edge_index, edge_attr)


@register_metanet("nft")
class NFT(Metanet):
    """Neural Functional Transformer: a stack of :class:`NeuronAttentionLayer` s."""

    hidden_dim_multiple_of = "num_heads"

    def __init__(
        self, hidden_dim: int = 64, num_layers: int = 4, dropout: float = 0.0, num_heads: int = 4, **encoder_options
    ):
        super().__init__(hidden_dim, num_layers, dropout, **encoder_options)
        self.layers.extend(NeuronAttentionLayer(hidden_dim, num_heads, dropout) for _ in range(num_layers))
