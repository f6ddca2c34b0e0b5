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
from typing import Any, ClassVar, Optional

from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from neuralgraph.graph.core import Graph
from neuralgraph.nn.encoder import MAX_LAYERS, MAX_NODE_TYPES, GraphContext, GraphEncoder

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
        max_node_types, probe_features, gradient_features, activation, w0: options of
            :class:`~neuralgraph.nn.encoder.GraphEncoder`.
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


class EdgeUpdate(MessagePassing):
    r"""Edge update from the edge and both endpoints (and, optionally, the opposite edge).

    .. math::
        e_{ij}' = \mathrm{LN}\big(e_{ij} + \mathrm{Dropout}(W_2\,\mathrm{SiLU}(
            W_e e_{ij} + W_s x_j + W_t x_i\,[+\,W_r e_{ji}]))\big)

    for the edge ``j -> i``. The concatenation ``[e_ij, x_j, x_i]`` goes through one linear map,
    computed as a sum of per-part maps so that node terms are projected once per node, not
    once per edge. A PyG ``edge_updater``.

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

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, reverse: Optional[Tensor] = None) -> Tensor:
        """``reverse[k]`` is the index of edge ``k``'s opposite (needed iff ``with_reverse``)."""
        if self.with_reverse != (reverse is not None):
            raise ValueError(f"EdgeUpdate(with_reverse={self.with_reverse}) needs reverse {'' if self.with_reverse else 'not '}given")
        opposite = None if reverse is None else self.reverse_lin(edge_attr)[reverse]
        return self.edge_updater(edge_index, x=(self.source_lin(x), self.target_lin(x)), edge_attr=edge_attr,
                                 opposite=opposite)

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
