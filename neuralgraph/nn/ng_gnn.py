"""Neural Graphs GNN (NG-GNN, Kofinas et al. 2024): PNA message passing with FiLM-modulated messages."""
from __future__ import annotations

import math
from functools import reduce
from typing import Iterable, Optional, Sequence, Union

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.aggr import DegreeScalerAggregation
from torch_geometric.utils import degree, scatter

from neuralgraph.graph import Layout, mlp_to_graph
from neuralgraph.graph.spec import GraphSpec
from neuralgraph.nn.base import (EdgeTiles, EdgeUpdate, FiLM, Metanet, MetanetLayer, ResidualNorm, check_edge_chunk,
                                 endpoint_sums, node_rows, recomputed, tile_terms)
from neuralgraph.nn.registry import register_metanet

AGGREGATORS = ("mean", "min", "max", "std")
SCALERS = ("identity", "amplification", "attenuation")
#: How the statistics of a node's messages (sum, sum of squares, minimum, maximum) combine over chunks of
#: edges, and their value over no edges.
STATISTICS = ((torch.add, 0.0), (torch.add, 0.0), (torch.minimum, math.inf), (torch.maximum, -math.inf))


def layout_degree_histogram(layout: Layout) -> Tensor:
    """Histogram of node degrees in the parameter graph of ``layout`` with reverse edges.

    PNA's degree scalers normalise by the average log-degree of the training graphs; a
    representative layout fixes it (:attr:`GraphSpec.degree_histogram` of one such graph).

    Args:
        layout: the layer widths.

    Returns:
        ``[max degree + 1]`` long, on the CPU.
    """
    with torch.device("cpu"):  # a fact about the layout, whatever device the model is built on
        weights = [torch.zeros(d_out, d_in) for d_in, d_out in zip(layout[:-1], layout[1:])]
        graph = mlp_to_graph(weights, [torch.zeros(d) for d in layout[1:]])
    return torch.tensor(GraphSpec.of(graph).degree_histogram, device="cpu")


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

    where :math:`[\gamma, \beta]` is the FiLM of the edge. ``forward`` is a PyG ``MessagePassing``
    operator whose aggregation is PyG's ``DegreeScalerAggregation``, as in ``PNAConv``.
    ``forward_dense`` runs on the edge blocks of a batch of one layout: a node of layer ``k``
    receives the forward edges of block ``k - 1`` (reduced over their ``d_{k-1}`` axis) and the
    reverse edges of block ``k`` (over their ``d_{k+1}`` axis), so every aggregator is two block
    reductions combined, and the degree ``d_{k-1} + d_{k+1}`` makes the scalers constants per
    layer. PyG's aggregation modules reduce rows by index or by contiguous segments; a node's
    incoming messages are a row of one block and a column of the other, so using them would
    copy every message into per-node segments and scatter (a slowdown, docs/architectures.md),
    hence the block reductions, with PyG's formulas (:meth:`scaled_aggregators`).

    With ``edge_chunk`` the messages are evaluated over chunks of edge rows (tiles of the blocks,
    :class:`~neuralgraph.nn.base.EdgeTiles`), each recomputed in backward and reduced at once to
    its sums, sums of squares, minima and maxima per node (:meth:`message_statistics`), which
    combine into the aggregators; the edge update runs over chunks too
    (:class:`~neuralgraph.nn.base.EdgeUpdate`). No ``[E, d]`` intermediate is kept, only the new
    edge features (and, on the general path, the opposite edges' ``W_r e_ji`` while the edges update).

    Args:
        hidden_dim (int): width ``d`` of node and edge features.
        deg (Tensor): histogram of in-degrees of the training graphs (normalises the degree scalers).
        dropout (float, optional): dropout probability on the node and edge updates. (default: ``0.0``)
        edge_chunk (int, optional): the most edge rows evaluated at once (a dense tile holds each edge
            with its reverse). (default: ``None``, all)

    Shapes:
        ``forward``: ``x`` ``[N, d]``, ``edge_index`` ``[2, 2E]`` (every edge and its opposite),
        ``edge_attr`` ``[2E, d]``, ``reverse`` ``[2E]`` -> ``([N, d], [2E, d])``.
        ``forward_dense``: ``nodes[k]`` ``[B, d_k, d]``, ``edges[l]`` ``[2, B, d_{l+1}, d_l, d]`` -> alike.
    """

    context = ("reverse",)

    def __init__(self, hidden_dim: int, deg: Tensor, dropout: float = 0.0, edge_chunk: Optional[int] = None):
        super().__init__(aggr=DegreeScalerAggregation(list(AGGREGATORS), list(SCALERS), deg))
        check_edge_chunk(edge_chunk)
        self.edge_chunk = edge_chunk
        self.source_lin = nn.Linear(hidden_dim, hidden_dim)
        self.target_lin = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.film = FiLM(hidden_dim)
        self.node_lin = nn.Linear((1 + len(AGGREGATORS) * len(SCALERS)) * hidden_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, hidden_dim)
        self.residual = ResidualNorm(hidden_dim, dropout)
        self.edge_mlp = EdgeUpdate(hidden_dim, dropout, with_reverse=True, edge_chunk=edge_chunk)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        for module in (self.source_lin, self.target_lin, self.film, self.node_lin, self.out):
            module.reset_parameters()
        self.residual.reset_parameters()
        self.edge_mlp.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, *, reverse: Tensor) -> tuple[Tensor, Tensor]:
        """``edge_index`` holds every edge and its opposite; ``reverse[k]`` is the index of ``k``'s opposite."""
        source, target = self.source_lin(x), self.target_lin(x)
        if self.edge_chunk is None:
            aggregated = self.propagate(edge_index, x=(source, target), edge_attr=edge_attr)
        else:
            chunks = zip(edge_index.split(self.edge_chunk, dim=1), edge_attr.split(self.edge_chunk))
            statistics = combine_statistics(recomputed(self.message_statistics, index, edge, source, target)
                                            for index, edge in chunks)
            count = degree(edge_index[1], x.shape[0], x.dtype)[:, None]
            minimum, maximum = (value.masked_fill(count == 0, 0.0) for value in statistics[2:])  # PyG: 0 without edges
            aggregated = self.scaled_statistics(count.clamp(min=1), statistics[0], statistics[1], minimum, maximum)
        x = self.node_update(x, aggregated)
        return x, self.edge_mlp(x, edge_index, edge_attr, reverse)

    def message_statistics(self, edge_index: Tensor, edge_attr: Tensor, source: Tensor,
                           target: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Sums, sums of squares, minima and maxima ``[N, d]`` of the messages of the edges ``edge_index`` per target
        node (minima ``inf``, maxima ``-inf`` where none arrives), from the nodes' ``W_s x``, ``W_t x``."""
        sources, targets = edge_index
        messages = self.message(source[sources], target[targets], edge_attr.to(source.dtype))
        index, size = targets[:, None].expand_as(messages), (source.shape[0], messages.shape[1])
        return (scatter(messages, targets, 0, size[0]), scatter(messages.square(), targets, 0, size[0]),
                messages.new_full(size, math.inf).scatter_reduce(0, index, messages, "amin"),
                messages.new_full(size, -math.inf).scatter_reduce(0, index, messages, "amax"))

    def message(self, x_j: Tensor, x_i: Tensor, edge_attr: Tensor) -> Tensor:
        return self.film(x_j + x_i, edge_attr)

    def node_update(self, x: Tensor, aggregated: Tensor) -> Tensor:
        """``x'`` from ``x`` and ``a`` (rows of any leading shape)."""
        hidden = nn.functional.silu(self.node_lin(torch.cat([x, aggregated], dim=-1)))
        return self.residual(x, self.out(hidden))

    def forward_dense(self, nodes: Sequence[Tensor], edges: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """The messages of each ``[2, B, d_{l+1}, d_l, d]`` block (forward, reverse), aggregated per node layer."""
        x, widths = node_rows(nodes)
        source, target = self.source_lin(x).split(widths, dim=1), self.target_lin(x).split(widths, dim=1)
        if self.edge_chunk is not None:
            aggregated = self.tiled_aggregators(edges, source, target)
        else:
            incoming = [[] for _ in widths]  # incoming[k]: (messages, axis of their sources) into node layer k
            for l, edge in enumerate(edges):
                forward, reverse = self.block_messages(edge, endpoint_sums(source, target, l, with_reverse=True))
                incoming[l + 1].append((forward, 2))
                incoming[l].append((reverse, 1))
            aggregated = [self.scaled_aggregators(parts) for parts in incoming]
        x = self.node_update(x, torch.cat(aggregated, dim=1))
        nodes = x.split(widths, dim=1)
        return list(nodes), self.edge_mlp.forward_dense(nodes, edges)

    def block_messages(self, edge: Tensor, ends: Tensor) -> Tensor:
        """The messages ``[2, b, r, c, d]`` of a block or tile of edges and their reverses whose endpoints' ``W_s x_j +
        W_t x_i`` are ``ends``."""
        channels = edge.shape[-1]
        weight, bias = self.film.lin.weight, self.film.lin.bias
        gamma = nn.functional.linear(edge, weight[:channels], bias[:channels])
        beta = nn.functional.linear(edge, weight[channels:], bias[channels:])
        return torch.addcmul(beta, gamma, ends)

    def tile_statistics(self, edge: Tensor, source_in: Tensor, source_out: Tensor, target_in: Tensor,
                        target_out: Tensor) -> tuple[Tensor, ...]:
        """Sums, sums of squares, minima and maxima of a tile's forward messages per row ``[b, r, d]`` (into its
        targets), then of its reverse messages per column ``[b, c, d]`` (into its sources)."""
        ends = endpoint_sums((source_in, source_out), (target_in, target_out), 0, with_reverse=True)
        forward, reverse = self.block_messages(edge.to(ends.dtype), ends)
        return (forward.sum(2), forward.square().sum(2), forward.amin(2), forward.amax(2),
                reverse.sum(1), reverse.square().sum(1), reverse.amin(1), reverse.amax(1))

    def tiled_aggregators(self, edges: Sequence[Tensor], source: Sequence[Tensor],
                          target: Sequence[Tensor]) -> list[Tensor]:
        """The scaled aggregators ``[B, d_k, 12 d]`` of every node layer from the statistics of tiles of at most
        ``edge_chunk`` edge rows (:meth:`tile_statistics`)."""
        statistics, counts = [None] * (len(edges) + 1), [0] * (len(edges) + 1)
        for l, edge in enumerate(edges):
            tiles = EdgeTiles(edge.shape[1:4], max(1, self.edge_chunk // 2), dim=1)
            counts[l + 1] += edge.shape[3]
            counts[l] += edge.shape[2]
            for (graphs, rows, columns), tile in zip(tiles.slices(), tiles.split(edge)):
                parts = recomputed(self.tile_statistics, tile, *tile_terms(source, l, graphs, rows, columns),
                                   *tile_terms(target, l, graphs, rows, columns))
                for k, positions, axis, values in ((l + 1, rows, 1, parts[:4]), (l, columns, 2, parts[4:])):
                    placed = [tiles.place(value, graphs, positions, axis, fill)
                              for value, (_, fill) in zip(values, STATISTICS)]
                    statistics[k] = combine_statistics([placed] if statistics[k] is None else [statistics[k], placed])
        return [self.scaled_statistics(float(count), *values) for count, values in zip(counts, statistics)]

    def scaled_aggregators(self, messages: list[tuple[Tensor, int]]) -> Tensor:
        """``[B, d_k, 12 d]``: the 4 aggregators of one node layer's incoming blocks, times each of the 3 degree
        scalers (``messages``: ``(block, axis of the block's sources)`` pairs)."""
        return self.scaled_statistics(
            float(sum(block.shape[axis] for block, axis in messages)), sum(block.sum(axis) for block, axis in messages),
            sum(block.square().sum(axis) for block, axis in messages),
            reduce(torch.minimum, [block.amin(axis) for block, axis in messages]),
            reduce(torch.maximum, [block.amax(axis) for block, axis in messages]))

    def scaled_statistics(self, count: Union[float, Tensor], total: Tensor, squares: Tensor, minimum: Tensor,
                          maximum: Tensor) -> Tensor:
        """The 4 aggregators times each of the 3 degree scalers ``[..., 12 d]`` from the statistics of each node's
        ``count`` messages (at least 1; a number for a whole node layer, or a tensor that broadcasts). PyG's
        formulas, as ``DegreeScalerAggregation`` of its fused aggregations computes them: mean as sum over count,
        std from the mean of squares (clamped at 1e-5), scalers from the degree and ``avg_deg_log``."""
        mean = total / count
        variance = squares / count - mean * mean
        std = variance.clamp(min=1e-5).sqrt()
        values = {"mean": mean, "min": minimum, "max": maximum, "std": std.masked_fill(std <= math.sqrt(1e-5), 0.0)}
        out = torch.cat([values[name] for name in AGGREGATORS], dim=-1)
        # a number is filled in on the device (copying it from the host would wait for the device)
        degree = count.to(out.dtype) if isinstance(count, Tensor) else out.new_full((), count)
        average = self.aggr_module.avg_deg_log
        scale = {"identity": None, "amplification": torch.log(degree + 1) / average,
                 "attenuation": average / torch.log(degree + 1)}
        return torch.cat([out if scale[name] is None else out * scale[name] for name in SCALERS], dim=-1)


def combine_statistics(parts: Iterable[Sequence[Tensor]]) -> tuple[Tensor, ...]:
    """The statistics (:data:`STATISTICS`) of the union of the message sets whose statistics are ``parts``.

    Args:
        parts: per message set, its statistics in the order of :data:`STATISTICS`.

    Returns:
        The statistics of the union.
    """
    combined = None
    for part in parts:
        combined = tuple(part) if combined is None else tuple(
            op(a, b) for (op, _), a, b in zip(STATISTICS, combined, part))
    return combined


@register_metanet("ng_gnn")
class NGGNN(Metanet):
    """Neural Graphs GNN: :class:`NGGNNLayer` s on the parameter graph with reverse edges.

    PNA's scalers are normalised by ``degree_histogram``, the training graphs' histogram of node
    degrees (``degree_histogram`` of :class:`~neuralgraph.graph.spec.GraphSpec`, which
    ``build_metanet("ng_gnn", spec=spec)`` passes); without it, by that of ``degree_layout``.

    ``checkpoint`` and ``edge_chunk`` (:class:`~neuralgraph.nn.base.Metanet`) bound the memory of a
    large graph: with both, a layer keeps its input (``2E x hidden_dim`` floats: every edge and
    its reverse) and one chunk's intermediates, for two more forward passes of the edge maps in backward.

    Args:
        hidden_dim: width of node and edge features.
        num_layers: number of :class:`NGGNNLayer` s.
        dropout: dropout probability on each layer's node and edge updates.
        degree_layout: the layout whose parameter graph's degree histogram normalises PNA's
            scalers when ``degree_histogram`` is not given (:func:`layout_degree_histogram`).
        degree_histogram: counts of nodes per degree in the training graphs (with reverse
            edges), ``GraphSpec.degree_histogram``; ``build_metanet(..., spec=spec)`` fills it in.
        **options: keyword-only, passed on to :class:`~neuralgraph.nn.base.Metanet`, which documents
            each: ``edge_features``, ``positional``, ``fourier_features``, ``fourier_scale``,
            ``max_layers``, ``max_node_types``, ``probe_features``, ``gradient_features``, ``activation``,
            ``w0``, ``node_activations``, ``skip_edges`` (the encoder's) and the memory options ``checkpoint``, ``edge_chunk``,
            ``edge_dtype``.
    """

    chunked = True
    uses_reverse_edges = True
    slow = True  # about 1 min an epoch on one thread on the generalization zoo

    def __init__(
        self,
        hidden_dim: int = 64,
        num_layers: int = 4,
        dropout: float = 0.0,
        degree_layout: Sequence[int] = (2, 32, 32, 1),
        degree_histogram: Optional[Sequence[int]] = None,
        **options,
    ):
        super().__init__(hidden_dim, num_layers, dropout, **options)
        if degree_histogram is not None:  # PNA reads its statistics on the CPU, on any device the model is built on
            deg = torch.tensor(list(degree_histogram), dtype=torch.long, device="cpu")
            if deg.dim() != 1 or len(deg) < 2 or bool((deg < 0).any()) or int(deg[1:].sum()) == 0:
                raise ValueError(f"ng_gnn degree_histogram={list(degree_histogram)[:8]}: expected counts of nodes per "
                                 "degree with some node of degree >= 1")
        else:
            deg = layout_degree_histogram(tuple(degree_layout))
        self.layers.extend(NGGNNLayer(hidden_dim, deg, dropout, self.edge_chunk) for _ in range(num_layers))

    @classmethod
    def spec_arguments(cls, spec: GraphSpec) -> dict:
        return {**super().spec_arguments(spec), "degree_histogram": list(spec.degree_histogram)}
