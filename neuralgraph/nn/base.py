"""The base every metanetwork builds on, and the edge update several of them share.

A :class:`Metanet` owns a :class:`~neuralgraph.nn.encoder.GraphEncoder` and a stack of
:class:`MetanetLayer` s; ``forward(graph)`` returns node features ``[N, hidden_dim]`` and edge
features ``[E, hidden_dim]`` whose rows align with ``graph.x`` and ``graph.edge_attr``. Heads
(:mod:`neuralgraph.nn.heads`) turn those into a prediction or into new weights.

An architecture declares the permutation group it respects in ``symmetry``:

* ``"hidden"``: permutations of hidden neurons (the function-preserving symmetries). Input
  and output neurons get their own positional embeddings.
* ``"np"``: also permutations of input and output neurons (NFN's NP group); the encoder then
  only sees layer embeddings.
"""
from __future__ import annotations

import abc
from typing import Any, ClassVar, Optional, Sequence

import torch
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from neuralgraph.graph.core import Graph
from neuralgraph.graph.spec import GraphSpec
from neuralgraph.nn.encoder import MAX_LAYERS, MAX_NODE_TYPES, GraphContext, GraphEncoder
from neuralgraph.nn.heads import InvariantReadout, WeightDecoder

SYMMETRIES = ("hidden", "np")


def check_heads(hidden_dim: int, num_heads: int) -> None:
    """Attention splits ``hidden_dim`` channels evenly over ``num_heads`` heads."""
    if num_heads < 1 or hidden_dim % num_heads:
        raise ValueError(f"hidden_dim={hidden_dim} must be a positive multiple of num_heads={num_heads}")


class MetanetLayer(nn.Module, abc.ABC):
    """One layer of a metanetwork, callable like a PyG operator.

    ``layer(x, edge_index, edge_attr, **context) -> (x, edge_attr)``: node features ``[N, d]``,
    edges ``[2, E]`` and edge features ``[E, d]`` in, updated node and edge features out. A
    layer that needs more of the graph's structure names the :class:`GraphContext` fields it
    reads in ``context`` (e.g. ``("reverse",)``) and takes them as keyword arguments of the same
    names, so it runs on explicit tensors outside a :class:`Metanet` too.
    """

    context: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        unknown = set(cls.context) - set(GraphContext._fields)
        if unknown:
            raise TypeError(f"{cls.__name__}.context names {sorted(unknown)}, not fields of GraphContext "
                            f"{GraphContext._fields}")

    def context_arguments(self, context: GraphContext) -> dict[str, Any]:
        """The keyword arguments this layer reads from ``context``."""
        return {name: getattr(context, name) for name in self.context}

    @abc.abstractmethod
    def reset_parameters(self) -> None:
        """Re-initialise every parameter of the layer."""

    @abc.abstractmethod
    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, **context) -> tuple[Tensor, Tensor]:
        """Return updated ``(x [N, d], edge_attr [E, d])``."""


class Metanet(nn.Module):
    """Base of every architecture: encoder, then ``self.layers`` applied in order.

    Subclasses fill ``self.layers`` with :class:`MetanetLayer` s in their constructor (or
    override :meth:`forward` when their layers do not run on the graph one by one).

    Args:
        hidden_dim: width of node and edge features.
        num_layers: number of layers.
        dropout: dropout probability inside the layers.
        edge_features, positional, fourier_features, fourier_scale, max_layers,
        max_node_types, probe_features, gradient_features, activation, w0, node_activations,
        skip_edges: options of :class:`~neuralgraph.nn.encoder.GraphEncoder`.
            ``positional`` defaults to ``"neuron"``, or ``"layer"`` for ``symmetry = "np"``.
    """

    name: ClassVar[str] = ""  # set by register_metanet
    symmetry: ClassVar[str] = "hidden"
    # The encoder adds reverse edges (GraphContext.reverse pairs them) / groups layers (GraphContext.layers).
    uses_reverse_edges: ClassVar[bool] = False
    uses_layer_index: ClassVar[bool] = False
    # Scaling group ("sign"/"scale", neuralgraph.graph.scaling) the architecture is also equivariant to, if any.
    scaling: ClassVar[Optional[str]] = None
    # Constructor argument that hidden_dim must be a multiple of (e.g. "num_heads"), if any.
    hidden_dim_multiple_of: ClassVar[Optional[str]] = None

    def __init__(
        self,
        hidden_dim: int,
        num_layers: int,
        dropout: float = 0.0,
        *,
        edge_features: int = 1,
        positional: Optional[str] = None,
        fourier_features: int = 0,
        fourier_scale: float = 10.0,
        max_layers: int = MAX_LAYERS,
        max_node_types: int = MAX_NODE_TYPES,
        probe_features: int = 0,
        gradient_features: int = 0,
        activation: str = "sine",
        w0: float = 30.0,
        node_activations: bool = False,
        skip_edges: bool = False,
    ):
        super().__init__()
        if self.symmetry not in SYMMETRIES:
            raise ValueError(f"{type(self).__name__}.symmetry={self.symmetry!r}: expected one of {SYMMETRIES}")
        if positional is None:
            positional = "layer" if self.symmetry == "np" else "neuron"
        if self.symmetry == "np" and positional != "layer":
            raise ValueError(
                f"{type(self).__name__} is equivariant to input/output permutations (symmetry='np'): "
                f"positional={positional!r} would break that; use positional='layer'"
            )
        if hidden_dim < 1 or num_layers < 0:
            raise ValueError(f"hidden_dim={hidden_dim} must be >= 1 and num_layers={num_layers} >= 0")
        self.hidden_dim = hidden_dim
        self.num_layers = num_layers
        self.dropout = dropout
        self.encoder = GraphEncoder(
            hidden_dim,
            edge_features=edge_features,
            positional=positional,
            reverse_edges=self.uses_reverse_edges,
            layer_index=self.uses_layer_index,
            fourier_features=fourier_features,
            fourier_scale=fourier_scale,
            max_layers=max_layers,
            max_node_types=max_node_types,
            scaling=self.scaling,
            probe_features=probe_features,
            gradient_features=gradient_features,
            activation=activation,
            w0=w0,
            node_activations=node_activations,
            skip_edges=skip_edges,
        )
        self.layers = nn.ModuleList()

    def reset_parameters(self) -> None:
        self.encoder.reset_parameters()
        for layer in self.layers:
            layer.reset_parameters()

    def forward(self, graph: Graph) -> tuple[Tensor, Tensor]:
        """Node features ``[N, hidden_dim]`` and edge features ``[E, hidden_dim]`` of ``graph``."""
        node, edge, context = self.encoder(graph)
        for layer in self.layers:
            node, edge = layer(node, context.edge_index, edge, **layer.context_arguments(context))
        return node, edge[: context.num_edges]

    @classmethod
    def spec_arguments(cls, spec: GraphSpec) -> dict[str, Any]:
        """The constructor arguments that the data's ``spec`` determines (``build_metanet(name, spec=spec)``).

        Here: the edge feature width, and the encoder's skip-edge and activation embeddings when
        the graphs carry skip edges or activations that differ between networks. Architectures
        add their own facts; one that cannot read such graphs raises ValueError saying why.
        """
        arguments: dict[str, Any] = {"edge_features": spec.edge_features}
        if spec.skip_edges:
            arguments["skip_edges"] = True
        if spec.varying_activations:
            arguments["node_activations"] = True
        return arguments

    def decoder(self, k: int = 1, **options) -> WeightDecoder:
        """The :class:`~neuralgraph.nn.heads.WeightDecoder` of ``k`` output networks for these features.

        Its width and scaling group are this metanet's, so the head keeps every symmetry the
        metanet has (a decoder built by hand without ``scaling`` on ScaleGMN features is not
        sign-equivariant). ``options``: the decoder's ``max_layers``, ``init_scale``, ``members``.
        """
        return WeightDecoder(self.hidden_dim, k, scaling=self.scaling, **options)

    def readout(self, out_dim: int, **options) -> InvariantReadout:
        """The :class:`~neuralgraph.nn.heads.InvariantReadout` to ``out_dim`` outputs for these features,
        with this metanet's width and scaling group. ``options``: ``max_layers``, ``mlp_dim``."""
        return InvariantReadout(self.hidden_dim, out_dim, scaling=self.scaling, **options)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(hidden_dim={self.hidden_dim}, num_layers={self.num_layers}, "
            f"dropout={self.dropout}, symmetry={self.symmetry!r}, positional={self.encoder.positional!r})"
        )


class ResidualNorm(nn.Module):
    r"""Post-norm residual: :math:`h' = \mathrm{LayerNorm}(h + \mathrm{Dropout}(\Delta h))`."""

    def __init__(self, hidden_dim: int, dropout: float = 0.0):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_dim)
        self.dropout = nn.Dropout(dropout)

    def reset_parameters(self) -> None:
        self.norm.reset_parameters()

    def forward(self, h: Tensor, delta: Tensor) -> Tensor:
        return self.norm(h + self.dropout(delta))


def node_blocks(x: Tensor, widths: Sequence[int]) -> list[Tensor]:
    """Node rows ``[B N, C]`` of a canonical batch (``GraphContext.widths``) as views ``[B, d_k, C]`` per layer."""
    return list(x.view(-1, sum(widths), x.shape[-1]).split(list(widths), dim=1))


def edge_blocks(edge: Tensor, widths: Sequence[int]) -> list[Tensor]:
    """Edge rows ``[B E, C]`` of a canonical batch as views ``[B, d_{l+1}, d_l, C]`` per weight layer
    (row = target neuron, column = source neuron)."""
    sizes = [d_in * d_out for d_in, d_out in zip(widths, widths[1:])]
    parts = edge.view(-1, sum(sizes), edge.shape[-1]).split(sizes, dim=1)
    return [part.unflatten(1, (d_out, d_in)) for part, d_in, d_out in zip(parts, widths, widths[1:])]


def block_rows(blocks: Sequence[Tensor]) -> Tensor:
    """Inverse of :func:`node_blocks` / :func:`edge_blocks`: per-layer blocks ``[B, ..., C]`` to rows (one copy)."""
    return torch.cat([block.flatten(1, -2) for block in blocks], dim=1).flatten(0, 1)


def check_dense_rows(layer: nn.Module, x: Tensor, edge_attr: Tensor, widths: Sequence[int], directions: int = 1) -> None:
    """ValueError naming ``layer`` unless ``x``/``edge_attr`` have the rows of whole graphs of layout ``widths``
    (``directions = 2``: each edge and its reverse)."""
    nodes, edges = sum(widths), directions * sum(a * b for a, b in zip(widths, widths[1:]))
    graphs = x.shape[0] // nodes
    if x.shape[0] != graphs * nodes or edge_attr.shape[0] != graphs * edges:
        raise ValueError(f"{type(layer).__name__}: widths={tuple(widths)} describe graphs of {nodes} nodes and {edges} "
                         f"edge rows, but x has {x.shape[0]} rows and edge_attr {edge_attr.shape[0]}")


def endpoint_sums(source: Tensor, target: Tensor, widths: Sequence[int], with_reverse: bool = False) -> list[Tensor]:
    """``s_j + t_i`` for every edge ``j -> i`` of a canonical batch, per weight layer: ``[B, d_{l+1}, d_l, C]``
    blocks broadcast from node rows ``source``/``target`` ``[B N, C]``, nothing gathered.

    ``with_reverse``: ``[2B, d_{l+1}, d_l, C]``, the reverse edges (``l + 1 -> l``) after the forward
    ones as :class:`~neuralgraph.nn.encoder.GraphContext` orders its rows; one broadcast per layer.
    """
    s, t = node_blocks(source, widths), node_blocks(target, widths)
    if not with_reverse:
        return [s[l][:, None] + t[l + 1][:, :, None] for l in range(len(widths) - 1)]
    # the node on the d_{l+1} axis is the target of a forward edge and the source of its reverse
    return [(torch.stack([t[l + 1], s[l + 1]])[:, :, :, None] + torch.stack([s[l], t[l]])[:, :, None]).flatten(0, 1)
            for l in range(len(widths) - 1)]


def opposite_rows(edge: Tensor) -> Tensor:
    """Rows ``[forward, reverse]`` swapped: row ``k`` of the result is the opposite of edge ``k`` (a copy, no index)."""
    forward, reverse = edge.chunk(2)
    return torch.cat([reverse, forward])


class EdgeUpdate(MessagePassing):
    r"""Edge update from the edge and both endpoints (and, optionally, the opposite edge).

    .. math::
        e_{ij}' = \mathrm{LN}\big(e_{ij} + \mathrm{Dropout}(W_2\,\mathrm{SiLU}(
            W_e e_{ij} + W_s x_j + W_t x_i\,[+\,W_r e_{ji}]))\big)

    for the edge ``j -> i``. The concatenation ``[e_ij, x_j, x_i]`` goes through one linear map,
    computed as a sum of per-part maps so that node terms are projected once per node, not
    once per edge. A PyG ``edge_updater``; on a canonical one-layout batch (``widths``, see
    :class:`~neuralgraph.nn.encoder.GraphContext`) the endpoint terms are broadcast over the
    ``[B, d_{l+1}, d_l, C]`` edge blocks instead of gathered, and the opposite edge of row ``k``
    is row ``k \pm E``.

    Args:
        hidden_dim: width of node and edge features.
        dropout: dropout probability on the update.
        with_reverse: read the opposite edge :math:`e_{ji}` (``reverse`` must then be given).

    Shapes:
        ``x`` ``[N, d]``, ``edge_index`` ``[2, E]``, ``edge_attr`` ``[E, d]``, ``reverse`` ``[E]``
        -> ``[E, d]``.
    """

    def __init__(self, hidden_dim: int, dropout: float = 0.0, with_reverse: bool = False):
        super().__init__(aggr=None)
        self.with_reverse = with_reverse
        self.edge_lin = nn.Linear(hidden_dim, hidden_dim)
        self.source_lin = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.target_lin = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.reverse_lin = nn.Linear(hidden_dim, hidden_dim, bias=False) if with_reverse else None
        self.out_lin = nn.Linear(hidden_dim, hidden_dim)
        self.residual = ResidualNorm(hidden_dim, dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.edge_lin, self.source_lin, self.target_lin, self.reverse_lin, self.out_lin):
            if lin is not None:
                lin.reset_parameters()
        self.residual.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, reverse: Optional[Tensor] = None,
                widths: Optional[Sequence[int]] = None) -> Tensor:
        """``reverse[k]`` is the index of edge ``k``'s opposite (needed iff ``with_reverse``);
        ``widths`` (``GraphContext.widths``) selects the dense path."""
        if self.with_reverse != (reverse is not None):
            raise ValueError(f"EdgeUpdate(with_reverse={self.with_reverse}) needs reverse {'' if self.with_reverse else 'not '}given")
        if widths is not None:
            return self.dense_update(x, edge_attr, widths)
        opposite = None if reverse is None else self.reverse_lin(edge_attr)[reverse]
        return self.edge_updater(edge_index, x=(self.source_lin(x), self.target_lin(x)), edge_attr=edge_attr,
                                 opposite=opposite)

    def dense_update(self, x: Tensor, edge_attr: Tensor, widths: Sequence[int]) -> Tensor:
        """The update on ``[B, d_{l+1}, d_l, C]`` blocks: ``W_s x_j + W_t x_i`` broadcast, not gathered."""
        check_dense_rows(self, x, edge_attr, widths, 2 if self.with_reverse else 1)
        terms = block_rows(endpoint_sums(self.source_lin(x) + self.edge_lin.bias, self.target_lin(x), widths,
                                         self.with_reverse))
        hidden = torch.addmm(terms, edge_attr, self.edge_lin.weight.t())
        if self.with_reverse:
            hidden = hidden + opposite_rows(self.reverse_lin(edge_attr))
        return self.residual(edge_attr, self.out_lin(nn.functional.silu(hidden)))

    def edge_update(self, x_j: Tensor, x_i: Tensor, edge_attr: Tensor, opposite: Optional[Tensor]) -> Tensor:
        hidden = self.edge_lin(edge_attr) + x_j + x_i
        if opposite is not None:
            hidden = hidden + opposite
        return self.residual(edge_attr, self.out_lin(nn.functional.silu(hidden)))


class FiLM(nn.Module):
    r"""Feature-wise modulation of ``h`` by a conditioning ``c``: :math:`\gamma(c) \odot h + \beta(c)`.

    ``[gamma, beta] = W c + b``; used to let edge features (the weights) scale and shift the
    messages that travel along them.
    """

    def __init__(self, hidden_dim: int):
        super().__init__()
        self.lin = nn.Linear(hidden_dim, 2 * hidden_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()

    def forward(self, h: Tensor, condition: Tensor) -> Tensor:
        gamma, beta = self.lin(condition).chunk(2, dim=-1)
        return gamma * h + beta


class FeedForward(nn.Module):
    r"""Transformer feed-forward block: :math:`x' = \mathrm{LN}(x + \mathrm{Dropout}(W_2\,\mathrm{SiLU}(W_1 x)))`."""

    def __init__(self, hidden_dim: int, dropout: float = 0.0, expansion: int = 2):
        super().__init__()
        self.lin1 = nn.Linear(hidden_dim, expansion * hidden_dim)
        self.lin2 = nn.Linear(expansion * hidden_dim, hidden_dim)
        self.residual = ResidualNorm(hidden_dim, dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin1.reset_parameters()
        self.lin2.reset_parameters()
        self.residual.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        return self.residual(x, self.lin2(nn.functional.silu(self.lin1(x))))
