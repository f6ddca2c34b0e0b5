"""Neural Graphs GNN (NG-GNN, Kofinas et al. 2024): PNA message passing with FiLM-modulated messages."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Union

import torch
from torch import Tensor, nn
from torch_geometric.nn.aggr import DegreeScalerAggregation

from neuralgraph.graph import Layout, mlp_to_graph
from neuralgraph.graph.spec import GraphSpec
from neuralgraph.nn.base import EdgeUpdate, FiLM, Metanet, MetanetLayer, ResidualNorm, node_rows
from neuralgraph.nn.paths import Ends, MessageMap, Received, Reduced, Terms, check_edge_chunk, on_blocks, on_rows
from neuralgraph.nn.registry import register_metanet

AGGREGATORS = ("mean", "min", "max", "std")
SCALERS = ("identity", "amplification", "attenuation")


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


class NGGNNLayer(MetanetLayer, MessageMap):
    r"""PNA layer of NG-GNN (`Kofinas et al., 2024 <https://arxiv.org/abs/2403.12143>`_) on the
    parameter graph with reverse edges (``k``: ``j -> i``, :math:`\bar k` its opposite).

    .. math::
        m_k &= \gamma(e_k) \odot (W_s x_j + W_t x_i) + \beta(e_k) \\
        a_i &= \big[\,s(\deg_i)\,\cdot\,\mathrm{agg}_{k \to i}\, m_k\,\big]_{
            \mathrm{agg} \in \{\mathrm{mean}, \min, \max, \mathrm{std}\},\
            s \in \{1, \mathrm{amp}, \mathrm{att}\}} \\
        x_i' &= \mathrm{LN}\big(x_i + \mathrm{Dropout}(W_2\,\mathrm{SiLU}(W_1 [x_i, a_i]))\big) \\
        e_k' &= \mathrm{EdgeUpdate}(e_k, e_{\bar k}, x_j', x_i')

    where :math:`[\gamma, \beta]` is the FiLM of the edge, and the aggregators and degree scalers
    are PNA's (``PNAConv``), with PyG's ``DegreeScalerAggregation`` normalising the scalers. The
    messages are a per-edge map (:meth:`edge_map`, a :class:`~neuralgraph.nn.paths.MessageMap`)
    whose outputs reduce per target node to sums, sums of squares, minima and maxima; the
    aggregators are those statistics combined with PyG's formulas (:meth:`receive`,
    :meth:`scaled_statistics`). ``forward`` runs the map on the rows of ``edge_index``
    (:func:`~neuralgraph.nn.paths.on_rows`), callable like a PyG operator on any graph;
    ``forward_dense`` on the edge blocks of a batch of one layout
    (:func:`~neuralgraph.nn.paths.on_blocks`): a node of layer ``k`` receives the forward edges of
    block ``k - 1`` (reduced over their ``d_{k-1}`` axis) and the reverse edges of block ``k`` (over
    their ``d_{k+1}`` axis), and the degree ``d_{k-1} + d_{k+1}`` makes the scalers constants per
    layer. PyG's aggregation modules reduce rows by index or by contiguous segments; a node's
    incoming messages are a row of one block and a column of the other, so using them would copy
    every message into per-node segments and scatter (a slowdown, docs/architectures.md), hence the
    statistics.

    With ``edge_chunk`` the messages run over chunks of edge rows (tiles of the blocks), each
    recomputed in backward and reduced at once to its statistics per node, which combine over the
    chunks; the edge update runs over chunks too (:class:`~neuralgraph.nn.base.EdgeUpdate`). No
    ``[E, d]`` intermediate is kept, only the new edge features (and, on the general path, the
    opposite edges' features while the edges update).

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
    target_reductions = (("sum", "sum_of_squares", "amin", "amax"),)

    def __init__(self, hidden_dim: int, deg: Tensor, dropout: float = 0.0, edge_chunk: Optional[int] = None):
        super().__init__()
        check_edge_chunk(edge_chunk)
        self.edge_chunk = edge_chunk
        self.aggr_module = DegreeScalerAggregation(list(AGGREGATORS), list(SCALERS), deg)
        self.source_lin = nn.Linear(hidden_dim, hidden_dim)
        self.target_lin = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.film = FiLM(hidden_dim)
        self.node_lin = nn.Linear((1 + len(AGGREGATORS) * len(SCALERS)) * hidden_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, hidden_dim)
        self.residual = ResidualNorm(hidden_dim, dropout)
        self.edge_mlp = EdgeUpdate(hidden_dim, dropout, with_reverse=True, edge_chunk=edge_chunk)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in (self.aggr_module, self.source_lin, self.target_lin, self.film, self.node_lin, self.out):
            module.reset_parameters()
        self.residual.reset_parameters()
        self.edge_mlp.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, *, reverse: Tensor) -> tuple[Tensor, Tensor]:
        """``edge_index`` holds every edge and its opposite; ``reverse[k]`` is the index of ``k``'s opposite."""
        _, aggregated = on_rows(self, x, edge_index, edge_attr, chunk=self.edge_chunk)
        x = self.node_update(x, aggregated)
        return x, self.edge_mlp(x, edge_index, edge_attr, reverse)

    def forward_dense(self, nodes: Sequence[Tensor], edges: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """The messages of each ``[2, B, d_{l+1}, d_l, d]`` block (forward, reverse), aggregated per node layer."""
        x, widths = node_rows(nodes)
        _, aggregated = on_blocks(self, x, widths, edges, reverse=True, chunk=self.edge_chunk)
        nodes = self.node_update(x, aggregated).split(widths, dim=1)
        return list(nodes), self.edge_mlp.forward_dense(nodes, edges)

    def node_terms(self, x: Tensor) -> tuple[Terms, Terms]:
        """``W_s x + b_s`` (as a source), ``W_t x`` (as a target)."""
        return (self.source_lin(x),), (self.target_lin(x),)

    def edge_map(self, edge: Tensor, ends: Ends) -> tuple[None, Reduced, Reduced]:
        """The messages ``m`` of ``edge`` to their targets, which nodes read as four statistics; the edges are
        updated after the nodes, by ``edge_mlp``."""
        channels = edge.shape[-1]
        weight, bias = self.film.lin.weight, self.film.lin.bias
        gamma = nn.functional.linear(edge, weight[:channels], bias[:channels])
        beta = nn.functional.linear(edge, weight[channels:], bias[channels:])
        messages = torch.addcmul(beta, gamma, ends.pair(0))
        return None, (messages,), ()

    def receive(self, incoming: Optional[Received], outgoing: Optional[Received]) -> Tensor:
        """``a``, from the statistics of the messages into each node."""
        return self.scaled_statistics(incoming.count, *incoming.values)

    def node_update(self, x: Tensor, aggregated: Tensor) -> Tensor:
        """``x'`` from ``x`` and ``a`` (rows of any leading shape)."""
        hidden = nn.functional.silu(self.node_lin(torch.cat([x, aggregated], dim=-1)))
        return self.residual(x, self.out(hidden))

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


@register_metanet("ng_gnn")
class NGGNN(Metanet):
    """Neural Graphs GNN: :class:`NGGNNLayer` s on the parameter graph with reverse edges.

    PNA's scalers are normalised by ``degree_histogram``, the training graphs' histogram of node
    degrees (``degree_histogram`` of :class:`~neuralgraph.graph.spec.GraphSpec`, which
    ``build_metanet("ng_gnn", spec=spec)`` passes); without a spec it must be given.

    ``checkpoint`` and ``edge_chunk`` (:class:`~neuralgraph.nn.base.Metanet`) bound the memory of a
    large graph: with both, a layer keeps its input (``2E x hidden_dim`` floats: every edge and
    its reverse) and one chunk's intermediates, for two more forward passes of the edge maps in backward.

    Args:
        hidden_dim: width of node and edge features.
        num_layers: number of :class:`NGGNNLayer` s.
        dropout: dropout probability on each layer's node and edge updates.
        degree_histogram: counts of nodes per degree in the training graphs (with reverse
            edges), ``GraphSpec.degree_histogram``; ``build_metanet(..., spec=spec)`` fills it in.
            Required: ``None`` is a ValueError naming it (:func:`layout_degree_histogram` gives the
            histogram of graphs of one layout).
        **options: keyword-only, passed on to :class:`~neuralgraph.nn.base.Metanet`, which documents
            each: ``edge_features``, ``positional``, ``fourier_features``, ``fourier_scale``,
            ``max_layers``, ``max_node_types``, ``probe_features``, ``gradient_features``, ``network_activation``,
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
        degree_histogram: Optional[Sequence[int]] = None,
        **options,
    ):
        if degree_histogram is None:
            raise ValueError("ng_gnn: degree_histogram (the node degrees PNA's scalers are normalised by) is not given: "
                             "the data's GraphSpec gives it (build_metanet('ng_gnn', spec=spec)), or give "
                             "degree_histogram (GraphSpec.degree_histogram, layout_degree_histogram(layout))")
        super().__init__(hidden_dim, num_layers, dropout, **options)
        # PNA reads its statistics on the CPU, on any device the model is built on
        deg = torch.tensor(list(degree_histogram), dtype=torch.long, device="cpu")
        if deg.dim() != 1 or len(deg) < 2 or bool((deg < 0).any()) or int(deg[1:].sum()) == 0:
            raise ValueError(f"ng_gnn degree_histogram={list(degree_histogram)[:8]}: expected counts of nodes per "
                             "degree with some node of degree >= 1")
        self.layers.extend(NGGNNLayer(hidden_dim, deg, dropout, self.edge_chunk) for _ in range(num_layers))

    @classmethod
    def spec_arguments(cls, spec: GraphSpec) -> dict:
        return {**super().spec_arguments(spec), "degree_histogram": list(spec.degree_histogram)}
