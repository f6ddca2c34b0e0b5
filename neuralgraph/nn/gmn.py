"""Graph Metanetwork (GMN, Lim et al. 2024): bidirectional edge-updating message passing."""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor, nn

from neuralgraph.nn.base import EdgeUpdate, Metanet, MetanetLayer, ResidualNorm, node_rows
from neuralgraph.nn.paths import Ends, MessageMap, Received, Reduced, Terms, check_edge_chunk, on_blocks, on_rows
from neuralgraph.nn.registry import register_metanet


class GMNLayer(MetanetLayer, MessageMap):
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

    The edge update and both messages of a set of edges are one per-edge map (:meth:`edge_map`, a
    :class:`~neuralgraph.nn.paths.MessageMap`): the edges' new features, the forward messages to
    their targets and the backward messages to their sources, from the node terms of
    :meth:`node_terms`; the means are the messages' sums over the degrees (:meth:`receive`).
    ``forward`` runs it on the rows of ``edge_index`` (:func:`~neuralgraph.nn.paths.on_rows`), callable
    like a PyG operator on any graph; ``forward_dense`` on the ``[B, d_{l+1}, d_l, d]`` blocks of a
    batch of one layout (:func:`~neuralgraph.nn.paths.on_blocks`), where node terms are broadcast over
    the blocks and the sums are sums over their ``d_l`` and ``d_{l+1}`` axes. With ``edge_chunk`` both
    run it over chunks of edges (rows of ``edge_index``; tiles of the blocks), each recomputed in
    backward: no ``[E, d]`` intermediate is kept, only the new edge features.

    Args:
        hidden_dim (int): width ``d`` of node and edge features.
        dropout (float, optional): dropout probability on the node and edge updates. (default: ``0.0``)
        edge_chunk (int, optional): the most edges evaluated at once. (default: ``None``, all)

    Shapes:
        ``forward``: ``x`` ``[N, d]``, ``edge_index`` ``[2, E]``, ``edge_attr`` ``[E, d]`` -> ``([N, d], [E, d])``.
        ``forward_dense``: ``nodes[k]`` ``[B, d_k, d]``, ``edges[l]`` ``[B, d_{l+1}, d_l, d]`` -> alike.
    """

    target_reductions = (("sum",),)
    source_reductions = (("sum",),)

    def __init__(self, hidden_dim: int, dropout: float = 0.0, edge_chunk: Optional[int] = None):
        super().__init__()
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
        edge_attr, received = on_rows(self, x, edge_index, edge_attr, chunk=self.edge_chunk)
        return self.node_update(x, received), edge_attr

    def forward_dense(self, nodes: Sequence[Tensor], edges: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """Input neurons have no ``f`` and output neurons no ``b`` (zero, as the mean over no edges)."""
        x, widths = node_rows(nodes)
        edges, received = on_blocks(self, x, widths, edges, chunk=self.edge_chunk)
        return list(self.node_update(x, received).split(widths, dim=1)), edges

    def node_terms(self, x: Tensor) -> tuple[Terms, Terms]:
        """The edge update's terms (term 0, read by its map), then ``W_f x`` (sent forward by a source) and
        ``W_b x`` (sent backward by a target)."""
        (source,), (target,) = self.edge_mlp.node_terms(x)
        return (source, self.forward_node(x)), (target, self.backward_node(x))

    def edge_map(self, edge: Tensor, ends: Ends) -> tuple[Tensor, Reduced, Reduced]:
        """The new features ``e'`` of ``edge``, the forward message ``SiLU(W_f x_j + U_f e')`` to each target and the
        backward message ``SiLU(W_b x_i + U_b e')`` to each source."""
        updated, _, _ = self.edge_mlp.edge_map(edge, ends)
        forward = nn.functional.silu(self.forward_edge(updated) + ends.source(1))
        backward = nn.functional.silu(self.backward_edge(updated) + ends.target(1))
        return updated, (forward,), (backward,)

    def receive(self, incoming: Optional[Received], outgoing: Optional[Received]) -> Tensor:
        """``[f, b]``: the means of the forward and of the backward messages."""
        return torch.cat([incoming.values[0] / incoming.count, outgoing.values[0] / outgoing.count], dim=-1)

    def node_update(self, x: Tensor, received: Tensor) -> Tensor:
        """``x'`` from ``x`` and its means ``[f, b]`` (rows of any leading shape)."""
        hidden = nn.functional.silu(self.node_lin(torch.cat([x, received], dim=-1)))
        return self.residual(x, self.out(hidden))


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
            ``max_layers``, ``max_node_types``, ``probe_features``, ``gradient_features``, ``network_activation``,
            ``w0``, ``node_activations``, ``skip_edges`` (the encoder's) and the memory options ``checkpoint``, ``edge_chunk``,
            ``edge_dtype``.
    """

    chunked = True
    reference_config = {"hidden_dim": 128, "num_layers": 4, "dropout": 0.0}

    def __init__(self, hidden_dim: int = 128, num_layers: int = 4, dropout: float = 0.0, **options):
        super().__init__(hidden_dim, num_layers, dropout, **options)
        self.layers.extend(GMNLayer(hidden_dim, dropout, self.edge_chunk) for _ in range(num_layers))
