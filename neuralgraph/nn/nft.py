"""Neural Functional Transformer (NFT, Zhou et al. 2023) on parameter graphs: attention among the
neurons of each layer, interleaved with exchanges along the weights between layers."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch_geometric.utils import scatter, to_dense_batch

from neuralgraph.graph.blocks import GraphFacts
from neuralgraph.nn.base import EdgeUpdate, FeedForward, Metanet, MetanetLayer, ResidualNorm, check_heads, node_rows
from neuralgraph.nn.context import GraphContext
from neuralgraph.nn.registry import register_metanet


def layer_groups(node_layer: Tensor, batch: Tensor, facts: Optional[GraphFacts] = None) -> Tensor:
    """Consecutive id of each node's ``(graph, layer)`` group, in the order of ``(graph, layer)``.

    With the batch's ``facts`` (:class:`~neuralgraph.graph.blocks.GraphFacts`) the ids are the ranks of the
    occupied ``(graph, layer)`` slots, computed on the device without reading anything back; without them
    ``torch.unique`` finds the groups.

    Args:
        node_layer: ``[N]`` layer of each node.
        batch: ``[N]`` graph of each node.
        facts: the batch's graph facts, if its builder read them.

    Returns:
        ``[N]`` long.
    """
    if facts is None:
        key = batch * (int(node_layer.max()) + 1) + node_layer
        return torch.unique(key, return_inverse=True)[1]
    key = batch * len(facts.node_counts) + node_layer
    occupied = torch.zeros(facts.num_graphs * len(facts.node_counts), dtype=torch.long, device=key.device)
    occupied.index_fill_(0, key, 1)
    return (occupied.cumsum(0) - 1)[key]


def padded_groups(values: Tensor, groups: Tensor, facts: GraphFacts) -> tuple[Tensor, Tensor, Tensor]:
    """``values`` ``[N, C]`` of nodes sorted by group (``groups`` sorted, from :func:`layer_groups`) padded to
    ``[G, width, C]`` (``G = facts.layer_groups``, ``width = facts.largest_group``), the ``[G, width]`` mask of
    the real members and each row's place in the flattened ``[G * width]``: ``to_dense_batch`` with every size
    taken from ``facts``, nothing read back from the device.

    Args:
        values: ``[N, C]``.
        groups: ``[N]`` sorted group ids.
        facts: the batch's graph facts.

    Returns:
        ``(dense [G, width, C], mask [G, width], place [N])``.
    """
    count, width = facts.layer_groups, facts.largest_group
    sizes = torch.zeros(count, dtype=torch.long, device=groups.device).index_add_(0, groups, torch.ones_like(groups))
    place = groups * width + torch.arange(len(groups), device=groups.device) - (sizes.cumsum(0) - sizes)[groups]
    dense = values.new_zeros(count * width, values.shape[-1]).index_copy_(0, place, values)
    mask = torch.zeros(count * width, dtype=torch.bool, device=groups.device).index_fill_(0, place, True)
    return dense.view(count, width, -1), mask.view(count, width), place


class NeuronAttentionLayer(MetanetLayer):
    r"""One NFT layer: weights -> neurons, self-attention within each layer, neurons -> weights.

    .. math::
        x_i &\leftarrow \mathrm{LN}\big(x_i + \mathrm{Dropout}(W_2\,\mathrm{SiLU}(W_x x_i
              + U_{in} \operatorname{mean}_{j \to i} e_{ij} + U_{out} \operatorname{mean}_{i \to k} e_{ki}))\big) \\
        x_i &\leftarrow \mathrm{LN}\big(x_i + \mathrm{Dropout}(\mathrm{MHA}(x_i, \{x_j : j \in G(i)\}))\big),
              \quad x_i \leftarrow \mathrm{FFN}(x_i) \\
        e_{ij} &\leftarrow \mathrm{EdgeUpdate}(e_{ij}, x_j, x_i)

    :math:`G(i)` is the set of neurons in the same layer of the same graph. Queries, keys and
    values are projected once per neuron. ``forward``: attention runs on groups padded to the
    largest layer (``[groups, width, width]`` scores, never ``N x N`` across the batch), with
    padding masked out, and the edge means are scatters. ``forward_dense``, on a batch of one
    layout: the groups of layer ``k`` are its ``[B, d_k, d]`` block, unpadded, and the means
    reduce an axis of the ``[B, d_{l+1}, d_l, d]`` edge blocks. Hidden neurons of a layer share
    their positional embedding, so attention among them is equivariant to their permutations.
    (`Zhou et al., 2023 <https://arxiv.org/abs/2305.13546>`_.)

    Args:
        hidden_dim (int): width ``d`` of node and edge features, a multiple of ``num_heads``.
        num_heads (int, optional): attention heads. (default: ``4``)
        dropout (float, optional): dropout probability on the attention weights and the updates. (default: ``0.0``)

    Shapes:
        ``forward``: ``x`` ``[N, d]``, ``edge_index`` ``[2, E]``, ``edge_attr`` ``[E, d]``, ``node_layer``
        ``[N]``, ``batch`` ``[N]`` -> ``([N, d], [E, d])``.
        ``forward_dense``: ``nodes[k]`` ``[B, d_k, d]``, ``edges[l]`` ``[B, d_{l+1}, d_l, d]`` -> alike.
    """

    context = ("node_layer", "batch")

    def context_arguments(self, context: GraphContext) -> dict[str, Any]:
        """``node_layer``, ``batch`` and the batch's :class:`~neuralgraph.graph.blocks.GraphFacts`, which size
        the attention groups."""
        return {**super().context_arguments(context), "facts": context.facts}

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
        # nn.MultiheadAttention's own initialisation (its out_proj.weight keeps the Linear init)
        nn.init.xavier_uniform_(self.attention.in_proj_weight)
        nn.init.zeros_(self.attention.in_proj_bias)
        nn.init.zeros_(self.attention.out_proj.bias)
        for module in (self.exchange_residual, self.attention_residual, self.feedforward, self.edge_mlp):
            module.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, *, node_layer: Tensor,
                batch: Tensor, facts: Optional[GraphFacts] = None) -> tuple[Tensor, Tensor]:
        """``node_layer``/``batch``: layer and graph of each node (attention runs within each pair);
        ``facts``: the batch's :class:`~neuralgraph.graph.blocks.GraphFacts`, which size the groups (else the
        groups are found on the tensors, reading their sizes back)."""
        src, dst = edge_index
        incoming = scatter(edge_attr, dst, 0, x.shape[0], "mean")
        outgoing = scatter(edge_attr, src, 0, x.shape[0], "mean")
        x = self.exchange(x, incoming, outgoing)
        projected = self.projected(x)
        groups = layer_groups(node_layer, batch, facts)
        order = torch.argsort(groups, stable=True)
        if facts is None:
            dense, mask = to_dense_batch(projected[order], groups[order])
            rows = self.attend(dense, mask)[mask]
        else:
            dense, mask, place = padded_groups(projected[order], groups[order], facts)
            rows = self.attend(dense, mask).flatten(0, 1)[place]
        attended = torch.empty_like(rows)  # rows' dtype: bfloat16 under autocast, unlike x
        attended[order] = rows
        x = self.node_update(x, attended)
        return x, self.edge_mlp(x, edge_index, edge_attr)

    def exchange(self, x: Tensor, incoming: Tensor, outgoing: Tensor) -> Tensor:
        """Weights -> neurons: ``x`` updated from the means of its incoming and outgoing edges."""
        hidden = self.node_lin(x) + self.incoming_lin(incoming) + self.outgoing_lin(outgoing)
        return self.exchange_residual(x, self.exchange_out(nn.functional.silu(hidden)))

    def projected(self, x: Tensor) -> Tensor:
        """Queries, keys and values of ``self.attention``, ``[..., 3d]``, projected once per node."""
        return F.linear(x, self.attention.in_proj_weight, self.attention.in_proj_bias)

    def attend(self, group: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """Multi-head attention of ``self.attention`` within groups: ``[G, width, 3d]`` (projected) ->
        ``[G, width, d]``, before the output projection; ``mask`` ``[G, width]``: the real members."""
        heads, dropout = self.attention.num_heads, self.attention.dropout if self.training else 0.0
        query, key, value = (t.unflatten(-1, (heads, -1)).transpose(1, 2) for t in group.chunk(3, -1))
        mask = None if mask is None else mask[:, None, None, :]
        return F.scaled_dot_product_attention(query, key, value, mask, dropout).transpose(1, 2).flatten(2)

    def node_update(self, x: Tensor, attended: Tensor) -> Tensor:
        """``x`` after attention (``attended`` before the output projection) and the feed-forward block."""
        return self.feedforward(self.attention_residual(x, self.attention.out_proj(attended)))

    def forward_dense(self, nodes: Sequence[Tensor], edges: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """Edge means over the source / target axis of each block (inputs have no incoming edges, outputs no
        outgoing: zero, as the mean over no edges); attention within each node block, unpadded."""
        x, widths = node_rows(nodes)
        first, last = x.new_zeros(nodes[0].shape), x.new_zeros(nodes[-1].shape)
        incoming = torch.cat([first] + [block.sum(2) / block.shape[2] for block in edges], dim=1)
        outgoing = torch.cat([block.sum(1) / block.shape[1] for block in edges] + [last], dim=1)
        x = self.exchange(x, incoming, outgoing)
        attended = torch.cat([self.attend(group) for group in self.projected(x).split(widths, dim=1)], dim=1)
        nodes = self.node_update(x, attended).split(widths, dim=1)
        return list(nodes), self.edge_mlp.forward_dense(nodes, edges)


@register_metanet("nft")
class NFT(Metanet):
    """Neural Functional Transformer: a stack of :class:`NeuronAttentionLayer` s.

    Args:
        hidden_dim: width of node and edge features, a multiple of ``num_heads``.
        num_layers: number of :class:`NeuronAttentionLayer` s.
        dropout: dropout probability on the exchanges, the attention and the feed-forward block.
        num_heads: heads of the self-attention among the neurons of a layer; each attends with
            ``hidden_dim // num_heads`` channels.
        **encoder_options: keyword-only, passed on to :class:`~neuralgraph.nn.base.Metanet`, which
            documents each: ``edge_features``, ``positional``, ``fourier_features``, ``fourier_scale``,
            ``max_layers``, ``max_node_types``, ``probe_features``, ``gradient_features``, ``network_activation``,
            ``w0``, ``node_activations``, ``skip_edges`` (the encoder's) and ``checkpoint``;
            ``edge_chunk`` is accepted and has no effect (the layers run whole), ``edge_dtype`` is refused.
    """

    hidden_dim_multiple_of = "num_heads"
    budget_options = {"num_heads": 2}  # the width then moves in steps of 2

    def __init__(
        self, hidden_dim: int = 64, num_layers: int = 4, dropout: float = 0.0, num_heads: int = 4, **encoder_options
    ):
        super().__init__(hidden_dim, num_layers, dropout, **encoder_options)
        self.layers.extend(NeuronAttentionLayer(hidden_dim, num_heads, dropout) for _ in range(num_layers))
