"""Neural Graphs relational transformer (NG-T, Kofinas et al. 2024): sparse attention over neighbours."""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor, nn
from torch_geometric.utils import scatter, softmax

from neuralgraph.nn.base import (EdgeUpdate, FeedForward, FiLM, Metanet, MetanetLayer, ResidualNorm, check_heads,
                                 node_rows)
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

    Node terms :math:`W_{q,k,v} x` are projected once per node. ``forward``: they are gathered per
    edge and the softmax runs per destination node over its incoming edges (PyG
    ``utils.softmax``), so memory is linear in the number of edges. ``forward_dense``, on the edge
    blocks of a batch of one layout: node terms broadcast over the forward and reverse edges of
    weight layer ``l``, and the softmax of a neuron of layer ``k`` is a dense softmax over its row
    of forward block ``k - 1`` (its sources) and its column of reverse block ``k`` (the neurons it
    feeds); nothing gathered or scattered.
    (`Kofinas et al., 2024 <https://arxiv.org/abs/2403.12143>`_.)

    Args:
        hidden_dim (int): width ``d`` of node and edge features, a multiple of ``num_heads``.
        num_heads (int, optional): attention heads. (default: ``4``)
        dropout (float, optional): dropout probability on the attention weights and the updates. (default: ``0.0``)

    Shapes:
        ``forward``: ``x`` ``[N, d]``, ``edge_index`` ``[2, 2E]`` (every edge and its opposite),
        ``edge_attr`` ``[2E, d]``, ``reverse`` ``[2E]`` -> ``([N, d], [2E, d])``.
        ``forward_dense``: ``nodes[k]`` ``[B, d_k, d]``, ``edges[l]`` ``[2, B, d_{l+1}, d_l, d]`` -> alike.
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
        (src, dst), num_nodes = edge_index, x.shape[0]
        score, value = self.messages(self.query_node(x)[dst], self.key_node(x)[src], self.value_node(x)[src], edge_attr)
        weighted = self.weighted(softmax(score, dst, num_nodes=num_nodes), value).flatten(1)
        x = self.node_update(x, scatter(weighted, dst, 0, num_nodes, "sum"))
        return x, self.edge_mlp(x, edge_index, edge_attr, reverse)

    def messages(self, query: Tensor, key: Tensor, value: Tensor, edge_attr: Tensor) -> tuple[Tensor, Tensor]:
        """Scores ``[..., heads]`` and values ``[..., d]`` of edges ``edge_attr [..., d]`` from the node terms
        of their target (``query``) and source (``key``, ``value``)."""
        head_dim = edge_attr.shape[-1] // self.num_heads
        query = query + self.query_edge(edge_attr)
        key = key + self.key_edge(edge_attr)
        score = (query * key).unflatten(-1, (self.num_heads, head_dim)).sum(-1) / math.sqrt(head_dim)
        return score, self.value_film(value, edge_attr)

    def weighted(self, alpha: Tensor, value: Tensor) -> Tensor:
        """``alpha [..., heads]`` (after dropout) times ``value [..., d]``, head by head -> ``[..., heads, d_h]``."""
        return self.attention_dropout(alpha).unsqueeze(-1) * value.unflatten(-1, (self.num_heads, -1))

    def node_update(self, x: Tensor, attended: Tensor) -> Tensor:
        """``x''`` from ``x`` and its attended values (rows of any leading shape)."""
        return self.feedforward(self.attention_residual(x, self.attention_out(attended)))

    def forward_dense(self, nodes: Sequence[Tensor], edges: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """Attention over the blocks: in block ``l`` the forward edges ``j -> i`` have their target on axis 1,
        the reverse edges ``i -> j`` on axis 2."""
        x, widths = node_rows(nodes)
        query, key, value = (term.split(widths, dim=1) for term in (self.query_node(x), self.key_node(x),
                                                                    self.value_node(x)))
        forward = [self.messages(query[l + 1][:, :, None], key[l][:, None], value[l][:, None], edge[0])
                   for l, edge in enumerate(edges)]
        backward = [self.messages(query[l][:, None], key[l + 1][:, :, None], value[l + 1][:, :, None], edge[1])
                    for l, edge in enumerate(edges)]
        L, attended = len(edges), []
        for k in range(L + 1):  # neuron k's edges: its row of forward block k - 1, its column of reverse block k
            scores = ([forward[k - 1][0]] if k > 0 else []) + ([backward[k][0].transpose(1, 2)] if k < L else [])
            alpha = torch.softmax(torch.cat(scores, 2), 2).split([score.shape[2] for score in scores], 2)
            total = self.weighted(alpha[0], forward[k - 1][1]).sum(2) if k > 0 else 0
            if k < L:
                total = total + self.weighted(alpha[-1].transpose(1, 2), backward[k][1]).sum(1)
            attended.append(total.flatten(-2))
        nodes = self.node_update(x, torch.cat(attended, dim=1)).split(widths, dim=1)
        return list(nodes), self.edge_mlp.forward_dense(nodes, edges)


@register_metanet("ng_t")
class NGT(Metanet):
    """Neural Graphs transformer: :class:`RelationalAttentionLayer` s with reverse edges.

    Args:
        hidden_dim: width of node and edge features, a multiple of ``num_heads``.
        num_layers: number of :class:`RelationalAttentionLayer` s.
        dropout: dropout probability on the attention, feed-forward and edge updates.
        num_heads: attention heads of each layer; each attends with ``hidden_dim // num_heads``
            channels.
        **encoder_options: keyword-only, passed on to :class:`~neuralgraph.nn.base.Metanet`, which
            documents each: ``edge_features``, ``positional``, ``fourier_features``, ``fourier_scale``,
            ``max_layers``, ``max_node_types``, ``probe_features``, ``gradient_features``, ``network_activation``,
            ``w0``, ``node_activations``, ``skip_edges`` (the encoder's) and ``checkpoint``;
            ``edge_chunk`` is accepted and has no effect (the layers run whole), ``edge_dtype`` is refused.
    """

    uses_reverse_edges = True
    hidden_dim_multiple_of = "num_heads"
    # two heads: the width moves in steps of 2, fine enough to land within 5% of a budget (4: none does)
    budget_options = {"num_heads": 2}
    slow = True  # about 1 min an epoch on one thread on the generalization zoo

    def __init__(
        self, hidden_dim: int = 64, num_layers: int = 4, dropout: float = 0.0, num_heads: int = 4, **encoder_options
    ):
        super().__init__(hidden_dim, num_layers, dropout, **encoder_options)
        self.layers.extend(RelationalAttentionLayer(hidden_dim, num_heads, dropout) for _ in range(num_layers))
