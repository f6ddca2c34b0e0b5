"""Graph Metanetwork (GMN, Lim et al. 2024): bidirectional edge-updating message passing."""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import degree, scatter

from neuralgraph.nn.base import (EdgeTiles, EdgeUpdate, Metanet, MetanetLayer, ResidualNorm, check_edge_chunk, node_rows,
                                 recomputed, tile_terms)
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

    With ``edge_chunk`` the edge update and both messages of an edge are one function evaluated
    over chunks of edges (rows of ``edge_index``; tiles of the blocks, :class:`~neuralgraph.nn.base.EdgeTiles`),
    each recomputed in backward, which returns the chunk's new edges and its sums of messages per
    node; the means are those sums over the degrees. No ``[E, d]`` intermediate is kept, only the
    new edge features.

    Args:
        hidden_dim (int): width ``d`` of node and edge features.
        dropout (float, optional): dropout probability on the node and edge updates. (default: ``0.0``)
        edge_chunk (int, optional): the most edges evaluated at once. (default: ``None``, all)

    Shapes:
        ``forward``: ``x`` ``[N, d]``, ``edge_index`` ``[2, E]``, ``edge_attr`` ``[E, d]`` -> ``([N, d], [E, d])``.
        ``forward_dense``: ``nodes[k]`` ``[B, d_k, d]``, ``edges[l]`` ``[B, d_{l+1}, d_l, d]`` -> alike.
    """

    def __init__(self, hidden_dim: int, dropout: float = 0.0, edge_chunk: Optional[int] = None):
        super().__init__(aggr="mean")
        check_edge_chunk(edge_chunk)
        self.edge_chunk = edge_chunk
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
        if self.edge_chunk is not None:
            return self.forward_chunked(x, edge_index, edge_attr)
        edge_attr = self.edge_mlp(x, edge_index, edge_attr)
        forward_agg = self.propagate(edge_index, x=self.forward_node(x), edge=self.forward_edge(edge_attr))
        backward_agg = self.propagate(edge_index.flip(0), x=self.backward_node(x), edge=self.backward_edge(edge_attr))
        return self.node_update(x, forward_agg, backward_agg), edge_attr

    def forward_chunked(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> tuple[Tensor, Tensor]:
        """``forward`` over chunks of ``edge_chunk`` edges (:meth:`chunk`); the means from the chunks' sums."""
        terms = (self.edge_mlp.source_lin(x), self.edge_mlp.target_lin(x), self.forward_node(x), self.backward_node(x))
        edges, forward_sum, backward_sum = [], 0, 0
        for index, edge in zip(edge_index.split(self.edge_chunk, dim=1), edge_attr.split(self.edge_chunk)):
            edge, forward, backward = recomputed(self.chunk, index, edge, *terms)
            edges.append(edge)
            forward_sum, backward_sum = forward_sum + forward, backward_sum + backward
        source, target = edge_index
        forward_agg = forward_sum / degree(target, x.shape[0], x.dtype).clamp(min=1)[:, None]
        backward_agg = backward_sum / degree(source, x.shape[0], x.dtype).clamp(min=1)[:, None]
        return self.node_update(x, forward_agg, backward_agg), torch.cat(edges)

    def chunk(self, edge_index: Tensor, edge_attr: Tensor, source: Tensor, target: Tensor, senders: Tensor,
              receivers: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """New features of the edges ``edge_index`` and the sums of their forward and backward messages per node
        ``[N, d]``, from the nodes' terms (``W_s x``, ``W_t x`` of the edge update, ``W_f x``, ``W_b x``); computed in
        the nodes' dtype, the new features returned in the edges' own (``Metanet``'s ``edge_dtype``)."""
        updated = self.edge_mlp.update(source, target, edge_index, edge_attr.to(source.dtype))
        sources, targets = edge_index
        forward = scatter(self.message(senders[sources], self.forward_edge(updated)), targets, 0, len(senders))
        backward = scatter(self.message(receivers[targets], self.backward_edge(updated)), sources, 0, len(senders))
        return updated.to(edge_attr.dtype), forward, backward

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
        if self.edge_chunk is not None:
            return self.forward_dense_chunked(nodes, edges)
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

    def forward_dense_chunked(self, nodes: Sequence[Tensor], edges: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """``forward_dense`` over tiles of at most ``edge_chunk`` edges (:meth:`tile`); ``f`` and ``b`` from the
        tiles' sums."""
        x, widths = node_rows(nodes)
        source, target = self.edge_mlp.endpoint_terms(nodes)
        senders = self.forward_node(x).split(widths, dim=1)
        receivers = self.backward_node(x).split(widths, dim=1)
        forward, backward, updated = [x.new_zeros(nodes[0].shape)], [], []
        for l, edge in enumerate(edges):
            tiles, parts, forward_sum, backward_sum = EdgeTiles(edge.shape[:3], self.edge_chunk), [], 0, 0
            for (graphs, rows, columns), tile in zip(tiles.slices(), tiles.split(edge)):
                part, into, out_of = recomputed(
                    self.tile, tile, *tile_terms(source, l, graphs, rows, columns),
                    *tile_terms(target, l, graphs, rows, columns), senders[l][graphs, columns],
                    receivers[l + 1][graphs, rows])
                parts.append(part)
                forward_sum = forward_sum + tiles.place(into, graphs, rows, 1)
                backward_sum = backward_sum + tiles.place(out_of, graphs, columns, 2)
            updated.append(tiles.cat(parts))
            forward.append(forward_sum / edge.shape[2])
            backward.append(backward_sum / edge.shape[1])
        x = self.node_update(x, torch.cat(forward, dim=1), torch.cat(backward + [x.new_zeros(nodes[-1].shape)], dim=1))
        return list(x.split(widths, dim=1)), updated

    def tile(self, edge: Tensor, source_in: Tensor, source_out: Tensor, target_in: Tensor, target_out: Tensor,
             senders: Tensor, receivers: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """New features of a tile ``[b, r, c, d]`` and its sums of forward messages per row ``[b, r, d]`` and of
        backward messages per column ``[b, c, d]``, from its nodes' terms (:func:`~neuralgraph.nn.base.tile_terms`;
        ``senders`` ``W_f x`` of its sources, ``receivers`` ``W_b x`` of its targets); dtypes as in :meth:`chunk`."""
        updated = self.edge_mlp.tile_update(edge.to(senders.dtype), source_in, source_out, target_in, target_out)
        forward = nn.functional.silu(self.forward_edge(updated) + senders[:, None]).sum(2)
        backward = nn.functional.silu(self.backward_edge(updated) + receivers[:, :, None]).sum(1)
        return updated.to(edge.dtype), forward, backward


@register_metanet("gmn")
class GMN(Metanet):
    """Graph Metanetwork: a stack of :class:`GMNLayer` s on the directed parameter graph.

    ``checkpoint`` and ``edge_chunk`` (:class:`~neuralgraph.nn.base.Metanet`) bound the memory of a
    large graph: with both, a layer keeps its input (``E x hidden_dim`` floats of edges) and
    one chunk's intermediates, for two more forward passes of the edge maps in backward.

    Args:
        hidden_dim: width of node and edge features.
        num_layers: number of :class:`GMNLayer` s.
        dropout: dropout probability on each layer's node and edge updates.
        **options: keyword-only, passed on to :class:`~neuralgraph.nn.base.Metanet`, which documents
            each: ``edge_features``, ``positional``, ``fourier_features``, ``fourier_scale``,
            ``max_layers``, ``max_node_types``, ``probe_features``, ``gradient_features``, ``activation``,
            ``w0``, ``node_activations``, ``skip_edges`` (the encoder's) and the memory options ``checkpoint``, ``edge_chunk``,
            ``edge_dtype``.
    """

    chunked = True
    reference_config = {"hidden_dim": 128, "num_layers": 4, "dropout": 0.0}

    def __init__(self, hidden_dim: int = 128, num_layers: int = 4, dropout: float = 0.0, **options):
        super().__init__(hidden_dim, num_layers, dropout, **options)
        self.layers.extend(GMNLayer(hidden_dim, dropout, self.edge_chunk) for _ in range(num_layers))
