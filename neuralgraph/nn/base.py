"""The contract every metanetwork follows (:class:`Metanet`, :class:`MetanetLayer`) and the building blocks
several of them share (:class:`EdgeUpdate`, :class:`ResidualNorm`, :class:`FiLM`, :class:`FeedForward`).

A :class:`Metanet` owns a :class:`~neuralgraph.nn.encoder.GraphEncoder` and a stack of
:class:`MetanetLayer` s; ``forward(graph)`` returns node features ``[N, hidden_dim]`` and edge
features ``[E, hidden_dim]`` whose rows align with ``graph.x`` and ``graph.edge_attr``. Heads
(:mod:`neuralgraph.nn.heads`) turn those into a prediction or into new weights.

Every layer has the general implementation, on feature rows of any graph (``forward``), and
most also a dense one, on per-layer blocks of a batch of one layout (``forward_dense``): the same
math. :meth:`Metanet.forward` chooses once per batch, from its
:class:`~neuralgraph.nn.context.GraphContext`. A layer whose edges carry the work (an edge update,
messages) writes that work once, as a per-edge map (:class:`~neuralgraph.nn.paths.EdgeMap`), and
both of its implementations run it through the strategies of :mod:`neuralgraph.nn.paths`: on edge
rows or on dense blocks, whole or in chunks.

An architecture declares the permutation group it respects in ``symmetry``:

* ``"hidden"``: permutations of hidden neurons (the function-preserving symmetries). Input
  and output neurons get their own positional embeddings.
* ``"np"``: also permutations of input and output neurons (NFN's NP group); the encoder then
  only sees layer embeddings.

Two options trade compute for memory on large graphs (one network of millions of weights):
``Metanet(checkpoint=True)`` recomputes each layer in backward
(:func:`~neuralgraph.nn.paths.recomputed`), and layers built with ``edge_chunk`` (GMN's, NG-GNN's,
:class:`EdgeUpdate`) run their per-edge maps over chunks of edge rows or tiles of the dense blocks,
each recomputed in backward (:mod:`neuralgraph.nn.paths`).
"""
from __future__ import annotations

import abc
import dataclasses
import inspect
from typing import Any, Callable, ClassVar, Mapping, Optional, Sequence

import torch
from torch import Tensor, nn

from neuralgraph.graph import Graph
from neuralgraph.graph.blocks import GraphFacts, WeightBlocks
from neuralgraph.graph.spec import GraphSpec
from neuralgraph.nn.context import GraphContext, block_rows, check_dense_rows, edge_blocks, node_blocks
from neuralgraph.nn.encoder import MAX_LAYERS, EncoderOptions, GraphEncoder
from neuralgraph.nn.heads import InvariantReadout, WeightDecoder
from neuralgraph.nn.paths import EdgeMap, Ends, Reduced, Terms, check_edge_chunk, on_blocks, on_rows, recomputed

SYMMETRIES = ("hidden", "np")


def check_heads(hidden_dim: int, num_heads: int) -> None:
    """Attention splits ``hidden_dim`` channels evenly over ``num_heads`` heads.

    Args:
        hidden_dim: channels to split; a ValueError unless a multiple of ``num_heads``.
        num_heads: attention heads (at least 1).
    """
    if num_heads < 1 or hidden_dim % num_heads:
        raise ValueError(f"hidden_dim={hidden_dim} must be a positive multiple of num_heads={num_heads}")


class MetanetLayer(nn.Module, abc.ABC):
    """One layer of a metanetwork, in two implementations of the same math.

    * ``forward(x, edge_index, edge_attr, **context) -> (x, edge_attr)``, the general path, callable
      like a PyG operator on any graph: node features ``[N, d]``, edges ``[2, E]`` and edge
      features ``[E, d]`` in, updated node and edge features out. A layer that needs more of the
      graph's structure names the :class:`~neuralgraph.nn.context.GraphContext` fields it reads in
      ``context`` (e.g. ``("reverse",)``) and takes them as keyword arguments of the same names.
    * ``forward_dense``, the dense path, on the per-layer blocks of a batch of one layout stored
      canonically, which its :class:`Metanet` makes from the feature rows once before the layer
      stack and turns back into rows once after it (:meth:`Metanet.dense_stack`): for
      message-passing layers ``forward_dense(nodes, edges) -> (nodes, edges)`` with ``nodes[k]``
      ``[B, d_k, d]`` and ``edges[l]`` ``[B, d_{l+1}, d_l, d]`` (``[2, B, d_{l+1}, d_l, d]`` with
      reverse edges: forward, then reverse). ``None`` for a layer with the general path only.

    A layer whose work on edges (an edge update, messages) is a per-edge map writes that map once,
    as a :class:`~neuralgraph.nn.paths.EdgeMap`, and has both paths run it: ``forward`` through
    :func:`~neuralgraph.nn.paths.on_rows`, ``forward_dense`` through
    :func:`~neuralgraph.nn.paths.on_blocks` (as GMN's and NG-GNN's layers and :class:`EdgeUpdate`).
    """

    context: ClassVar[tuple[str, ...]] = ()
    forward_dense: ClassVar[Optional[Callable]] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        unknown = set(cls.context) - set(GraphContext._fields)
        if unknown:
            raise TypeError(f"{cls.__name__}.context names {sorted(unknown)}, not fields of GraphContext "
                            f"{GraphContext._fields}")

    def context_arguments(self, context: GraphContext) -> dict[str, Any]:
        """The keyword arguments ``forward`` reads from ``context``."""
        return {name: getattr(context, name) for name in self.context}

    def compile(self, *args, **kwargs) -> None:
        """``torch.compile`` both paths in place: ``forward`` as ``nn.Module.compile`` does (state-dict keys
        unchanged), ``forward_dense`` as an attribute of the instance."""
        super().compile(*args, **kwargs)
        if self.forward_dense is not None:
            self.forward_dense = torch.compile(self.forward_dense, *args, **kwargs)

    @abc.abstractmethod
    def reset_parameters(self) -> None:
        """Re-initialise every parameter of the layer."""

    @abc.abstractmethod
    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, **context) -> tuple[Tensor, Tensor]:
        """Return updated ``(x [N, d], edge_attr [E, d])``."""


def _encoder_parameters() -> list[inspect.Parameter]:
    """The fields of :class:`~neuralgraph.nn.encoder.EncoderOptions` as the keyword-only arguments that
    ``Metanet(**encoder_options)`` gathers into them."""
    return [inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=field.default, annotation=field.type)
            for field in dataclasses.fields(EncoderOptions)]


def _constructor_signature(cls: type) -> inspect.Signature:
    """The arguments ``cls(...)`` takes: its constructor's own, then, when the constructor takes ``**options``
    and passes them on to its base's (``super().__init__(hidden_dim, num_layers, dropout, **options)``, as
    every architecture does), the base's keyword-only arguments that it does not name itself; ``Metanet``'s
    ``**encoder_options`` are the encoder's options, listed one by one."""
    definer = next(c for c in cls.__mro__ if "__init__" in vars(c))
    own = inspect.signature(definer.__init__)
    parameters = list(own.parameters.values())[1:]  # without self
    if definer is Metanet:
        named = [p for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD]
        keywords = [p for p in parameters if p.kind is p.KEYWORD_ONLY]
        return own.replace(parameters=named + _encoder_parameters() + keywords)
    if not any(p.kind is p.VAR_KEYWORD for p in parameters):
        return own.replace(parameters=parameters)
    base = next(c for c in cls.__mro__[cls.__mro__.index(definer) + 1:] if "__init__" in vars(c))
    names = {p.name for p in parameters}
    forwarded = [p for p in _constructor_signature(base).parameters.values()
                 if p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) and p.name not in names]
    return own.replace(parameters=[p for p in parameters if p.kind is not p.VAR_KEYWORD] + forwarded)


class _ConstructorSignature:
    """``Metanet.__signature__``: on a class, :func:`_constructor_signature`, which ``inspect.signature``,
    ``help()`` and the API pages show; on an instance, absent (its signature is its ``forward``'s)."""

    def __get__(self, instance: Any, owner: type) -> inspect.Signature:
        if instance is not None:
            raise AttributeError("__signature__")
        return _constructor_signature(owner)


class Metanet(nn.Module):
    """Base of every architecture: encoder, then ``self.layers`` applied in order.

    Subclasses fill ``self.layers`` with :class:`MetanetLayer` s in their constructor (and
    override :meth:`dense_stack` when their dense blocks are not per-layer node and edge blocks,
    as the folded weight space of :class:`~neuralgraph.nn.equivariant_linear.WeightSpaceMetanet`).

    Every architecture takes the keyword arguments below after its own: its constructor's
    ``**options`` are passed on to this one, and its signature (``inspect.signature``, ``help()``)
    lists them, the encoder's options one by one.

    Args:
        hidden_dim: width of node and edge features.
        num_layers: number of layers.
        dropout: dropout probability inside the layers.
        **encoder_options: keyword-only, the encoder's options, the fields of
            :class:`~neuralgraph.nn.encoder.EncoderOptions` (which documents each), given flat as a
            config's ``metanet_config`` gives them and gathered into one ``EncoderOptions`` for the
            :class:`~neuralgraph.nn.encoder.GraphEncoder`: ``edge_features``, ``positional``,
            ``fourier_features``, ``fourier_scale``, ``max_layers``, ``max_node_types``,
            ``probe_features``, ``gradient_features``, ``network_activation``, ``w0``,
            ``node_activations``, ``skip_edges``. ``positional=None`` is ``"neuron"``, or ``"layer"``
            for ``symmetry = "np"``, which allows no other; ``max_layers`` also sizes the heads'
            per-layer tables (:meth:`decoder`, :meth:`readout`).
        checkpoint: recompute each layer of the stack in backward instead of keeping its
            intermediate tensors (:func:`~neuralgraph.nn.paths.recomputed`, on the dense and the general
            path): what stays between forward and backward is each layer's input, node and edge features
            (``E x hidden_dim`` floats per layer, twice that with reverse edges), for one more
            forward pass of every layer. Same outputs and gradients.
        edge_chunk: evaluate the per-edge maps of each layer (edge update, messages) over chunks
            of at most this many edge rows, each chunk recomputed in backward, so that the
            ``[E, hidden_dim]`` intermediates of a layer (``[E, 3 hidden_dim]`` of the edge
            MLP's inputs) never exist whole: on top of the layers' inputs, a layer holds one
            chunk's intermediates and ``[N, hidden_dim]`` sums per chunk, for one more forward
            pass of the per-edge maps (with ``checkpoint``, two). Taken by architectures whose
            layers pass it to the strategies that run their per-edge maps (``gmn``, ``ng_gnn``:
            row chunks and dense tiles, :mod:`neuralgraph.nn.paths`); the others run their layers
            whole. Same outputs and gradients up to float rounding (sums are taken chunk by
            chunk); in training mode dropout draws its masks per chunk.
        edge_dtype: with ``edge_chunk``, the dtype the edge features are kept in between layers
            (e.g. ``torch.bfloat16``): each chunk is cast to the model's dtype to be computed and
            its new features back, so the edge states kept for backward, and their gradients, take
            ``edge_dtype``'s bytes; node features and every computation keep the model's dtype.
            Outputs and gradients then differ by ``edge_dtype``'s rounding of the edge states.
            (default: ``None``, the model's dtype)
    """

    name: ClassVar[str] = ""  # set by register_metanet
    symmetry: ClassVar[str] = "hidden"
    # The encoder adds reverse edges (GraphContext.reverse pairs them) / groups layers (GraphContext.layers).
    uses_reverse_edges: ClassVar[bool] = False
    uses_layer_index: ClassVar[bool] = False
    # Scaling group ("sign"/"scale", neuralgraph.graph.scaling) the architecture is also equivariant to, if any.
    scaling: ClassVar[Optional[str]] = None
    # Layers whose per-edge maps run in chunks (neuralgraph.nn.paths), which edge_chunk and edge_dtype apply to.
    chunked: ClassVar[bool] = False
    # Constructor argument that hidden_dim must be a multiple of (e.g. "num_heads"), if any.
    hidden_dim_multiple_of: ClassVar[Optional[str]] = None
    # What the config grids and benchmark plans read of an architecture (scripts/generate_dilation.py,
    # neuralgraph.bench): declared here, beside the class, so that a registered architecture joins them all.
    #: The k = 1 configuration of the dilation grid (``configs/benchmarks/dilation/<name>_k<k>.yaml``).
    reference_config: ClassVar[Mapping[str, Any]] = {"hidden_dim": 64, "num_layers": 4, "dropout": 0.0}
    #: Options beside the width in the budget-matched benchmark protocols (e.g. fewer heads, so
    #: that the width moves in finer steps).
    budget_options: ClassVar[Mapping[str, Any]] = {}
    #: How far (relative) the nearest width's parameter count may be from a benchmark's budget:
    #: wider for layers whose count moves in coarse steps per unit of width.
    budget_tolerance: ClassVar[float] = 0.05
    #: Whether the architecture reads general parameter graphs (normalisations, attention, residual
    #: blocks; a transformer zoo); :meth:`spec_arguments` of one that does not refuses their spec.
    reads_general_graphs: ClassVar[bool] = True
    #: Much slower per epoch than the others, so benchmark plans run it last.
    slow: ClassVar[bool] = False
    # The constructor's arguments including those a subclass's **options forward here (help(GMN) lists them).
    __signature__ = _ConstructorSignature()

    def __init__(
        self,
        hidden_dim: int,
        num_layers: int,
        dropout: float = 0.0,
        *,
        checkpoint: bool = False,
        edge_chunk: Optional[int] = None,
        edge_dtype: Optional[torch.dtype] = None,
        **encoder_options,
    ):
        super().__init__()
        unknown = sorted(set(encoder_options) - {field.name for field in dataclasses.fields(EncoderOptions)})
        if unknown:
            raise TypeError(f"{type(self).__name__} got unexpected keyword arguments {unknown}; it takes "
                            + ", ".join(inspect.signature(type(self)).parameters))
        options = EncoderOptions(**encoder_options)
        check_edge_chunk(edge_chunk)
        if edge_dtype is not None and (not self.chunked or edge_chunk is None or not isinstance(edge_dtype, torch.dtype)
                                       or not edge_dtype.is_floating_point):
            raise ValueError(f"edge_dtype={edge_dtype!r}: expected a floating torch.dtype, with edge_chunk (given: "
                             f"{edge_chunk!r}), on an architecture with chunked layers (gmn, ng_gnn; this is "
                             f"{type(self).__name__})")
        if self.symmetry not in SYMMETRIES:
            raise ValueError(f"{type(self).__name__}.symmetry={self.symmetry!r}: expected one of {SYMMETRIES}")
        positional = options.positional
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
        self.checkpoint = checkpoint
        self.edge_chunk = edge_chunk
        self.edge_dtype = edge_dtype
        self.max_layers = options.max_layers  # the layers the encoder embeds and the heads pool
        self.encoder = GraphEncoder(hidden_dim, dataclasses.replace(options, positional=positional),
                                    reverse_edges=self.uses_reverse_edges, layer_index=self.uses_layer_index,
                                    scaling=self.scaling)
        self.layers = nn.ModuleList()

    def reset_parameters(self) -> None:
        self.encoder.reset_parameters()
        for layer in self.layers:
            layer.reset_parameters()

    def context(self, graph: Graph, blocks: Optional[WeightBlocks] = None,
                facts: Optional[GraphFacts] = None) -> GraphContext:
        """The :class:`~neuralgraph.nn.context.GraphContext` of ``graph`` for this metanet, built once per batch
        and handed to :meth:`forward` and the heads; ``blocks``: the batch's weights, when it carries them;
        ``facts``: its :class:`~neuralgraph.graph.blocks.GraphFacts`, when its builder read them (else read here)."""
        return self.encoder.context(graph, blocks, facts)

    def forward(self, graph: Graph, context: Optional[GraphContext] = None) -> tuple[Tensor, Tensor]:
        """Node features ``[N, hidden_dim]`` and edge features ``[E, hidden_dim]`` of ``graph``.

        The path is chosen here, once per batch: :meth:`dense_stack` when the context has ``widths``
        (a batch of one layout stored canonically) and every layer has ``forward_dense``, else
        :meth:`general_stack`. ``context``: :meth:`context`, built here when not given.
        """
        node, edge, context = self.encoder(graph, context)
        if self.edge_dtype is None or not self.layers:
            return self.stack(node, edge, context)
        node, edge = self.stack(node, edge.to(self.edge_dtype), context)
        return node, edge.to(node.dtype)

    def stack(self, node: Tensor, edge: Tensor, context: GraphContext) -> tuple[Tensor, Tensor]:
        """The layers on the encoded features, on the dense or the general path (:meth:`forward`)."""
        if context.widths is not None and self.layers and all(layer.forward_dense is not None for layer in self.layers):
            return self.dense_stack(node, edge, context)
        return self.general_stack(node, edge, context)

    def run_layer(self, function: Callable, *args, **kwargs):
        """A layer's ``forward`` or ``forward_dense`` on ``args``; with ``checkpoint``, recomputed in backward."""
        return recomputed(function, *args, **kwargs) if self.checkpoint else function(*args, **kwargs)

    def general_stack(self, node: Tensor, edge: Tensor, context: GraphContext) -> tuple[Tensor, Tensor]:
        """The layers' ``forward`` on feature rows, one after the other; the rows of the graph's own edges out."""
        for layer in self.layers:
            node, edge = self.run_layer(layer, node, context.edge_index, edge, **layer.context_arguments(context))
        return node, edge[: context.num_edges]

    def dense_stack(self, node: Tensor, edge: Tensor, context: GraphContext) -> tuple[Tensor, Tensor]:
        """The layers' ``forward_dense`` on per-layer blocks of a canonical batch (``context.widths``): rows to
        blocks once (:func:`~neuralgraph.nn.context.node_blocks`, :func:`~neuralgraph.nn.context.edge_blocks`),
        every layer, blocks to rows once; the rows of the graph's own edges out, in the nodes' dtype."""
        widths, directions = context.widths, 1 if context.reverse is None else 2
        check_dense_rows(type(self).__name__, node, edge, widths, directions)
        nodes, edges = node_blocks(node, widths), edge_blocks(edge, widths, directions)
        for layer in self.layers:
            nodes, edges = self.run_layer(layer.forward_dense, nodes, edges)
        if directions == 2:
            edges = [block[0] for block in edges]
        return block_rows(nodes), block_rows(edges, nodes[0].dtype)

    @classmethod
    def spec_arguments(cls, spec: GraphSpec) -> dict[str, Any]:
        """The constructor arguments that the data's ``spec`` determines (``build_metanet(name, spec=spec)``).

        Here: the edge feature width, the encoder's skip-edge and activation embeddings when
        the graphs carry skip edges or activations that differ between networks, and the
        activation (``network_activation``) and SIREN frequency (``w0``) of the networks read when
        the spec knows them (``GraphSpec.network_activation``, ``GraphSpec.w0``). Architectures
        add their own facts; one that cannot read such graphs raises ValueError saying why.
        """
        arguments: dict[str, Any] = {"edge_features": spec.edge_features}
        if max(spec.depths) > MAX_LAYERS:  # e.g. a transformer's graph: some 11 node layers per block
            arguments["max_layers"] = max(spec.depths)
        if spec.skip_edges:
            arguments["skip_edges"] = True
        if spec.varying_activations:
            arguments["node_activations"] = True
        if spec.network_activation is not None:
            arguments["network_activation"] = spec.network_activation
        if spec.w0 is not None:
            arguments["w0"] = spec.w0
        return arguments

    def decoder(self, k: int = 1, **options) -> WeightDecoder:
        """The :class:`~neuralgraph.nn.heads.WeightDecoder` of ``k`` output networks for these features.

        Its width and scaling group are this metanet's, so the head keeps every symmetry the
        metanet has (a decoder built by hand without ``scaling`` on ScaleGMN features is not
        sign-equivariant). ``options``: the decoder's ``max_layers``, ``init_scale``, ``members``.
        """
        return WeightDecoder(self.hidden_dim, k, scaling=self.scaling, **{"max_layers": self.max_layers, **options})

    def readout(self, out_dim: int, **options) -> InvariantReadout:
        """The :class:`~neuralgraph.nn.heads.InvariantReadout` to ``out_dim`` outputs for these features,
        with this metanet's width and scaling group. ``options``: ``max_layers``, ``mlp_dim``."""
        return InvariantReadout(self.hidden_dim, out_dim, scaling=self.scaling,
                                **{"max_layers": self.max_layers, **options})

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(hidden_dim={self.hidden_dim}, num_layers={self.num_layers}, "
            f"dropout={self.dropout}, symmetry={self.symmetry!r}, positional={self.encoder.positional!r}"
            + (", checkpoint=True" if self.checkpoint else "")
            + ("" if self.edge_chunk is None else f", edge_chunk={self.edge_chunk}")
            + ("" if self.edge_dtype is None else f", edge_dtype={self.edge_dtype}") + ")"
        )


class ResidualNorm(nn.Module):
    r"""Post-norm residual: :math:`h' = \mathrm{LayerNorm}(h + \mathrm{Dropout}(\Delta h))`.

    Args:
        hidden_dim: width of ``h`` (the LayerNorm's).
        dropout: dropout probability on the update :math:`\Delta h`.
    """

    def __init__(self, hidden_dim: int, dropout: float = 0.0):
        super().__init__()
        self.norm = nn.LayerNorm(hidden_dim)
        self.dropout = nn.Dropout(dropout)

    def reset_parameters(self) -> None:
        self.norm.reset_parameters()

    def forward(self, h: Tensor, delta: Tensor) -> Tensor:
        return self.norm(h + self.dropout(delta))


def node_rows(nodes: Sequence[Tensor]) -> tuple[Tensor, list[int]]:
    """Per-layer node blocks ``[B, d_k, C]`` as one ``[B, N, C]`` tensor (small: per-node maps run on it at once)
    and the widths that split it back.

    Args:
        nodes: per node layer ``k``, ``[B, d_k, C]``.

    Returns:
        ``([B, N, C], [d_0, d_1, ...])``.
    """
    return torch.cat(list(nodes), dim=1), [block.shape[1] for block in nodes]


def linear_add(x: Tensor, weight: Tensor, other: Tensor) -> Tensor:
    """``x W^T + other`` in one ``addmm`` over the rows of any leading shape (``other`` has the output's).

    Args:
        x: ``[..., d_in]``.
        weight: ``[d_out, d_in]``, as ``nn.Linear.weight``.
        other: ``[..., d_out]``, added to the product.

    Returns:
        ``[..., d_out]``, the shape of ``other``.
    """
    return torch.addmm(other.reshape(-1, other.shape[-1]), x.reshape(-1, x.shape[-1]), weight.t()).view(other.shape)


class EdgeUpdate(nn.Module, EdgeMap):
    r"""Edge update from the edge and both endpoints (and, optionally, the opposite edge).

    .. math::
        e_{ij}' = \mathrm{LN}\big(e_{ij} + \mathrm{Dropout}(W_2\,\mathrm{SiLU}(
            W_e e_{ij} + W_s x_j + W_t x_i\,[+\,W_r e_{ji}]))\big)

    for the edge ``j -> i``. The concatenation ``[e_ij, x_j, x_i]`` goes through one linear map,
    computed as a sum of per-part maps so that node terms are projected once per node (``W_s x + b_e``,
    ``W_t x``: :meth:`node_terms`), not once per edge. The update of a set of edges is written once
    (:meth:`edge_map`, a :class:`~neuralgraph.nn.paths.EdgeMap`); ``forward`` runs it on the rows of
    ``edge_index``, endpoint terms gathered, and ``forward_dense`` on the ``[B, d_{l+1}, d_l, d]`` edge
    blocks, endpoint terms broadcast and the opposite of a forward edge the reverse edge at the same
    place. With ``edge_chunk`` both run over chunks of edge rows (dense: tiles), each recomputed in
    backward (:func:`~neuralgraph.nn.paths.on_rows`, :func:`~neuralgraph.nn.paths.on_blocks`).

    Args:
        hidden_dim (int): width ``d`` of node and edge features.
        dropout (float, optional): dropout probability on the update. (default: ``0.0``)
        with_reverse (bool, optional): read the opposite edge :math:`e_{ji}`. (default: ``False``)
        edge_chunk (int, optional): the most edge rows updated at once (a dense tile with reverse
            edges holds each edge with its reverse). (default: ``None``, all)

    Shapes:
        ``forward``: ``x`` ``[N, d]``, ``edge_index`` ``[2, E]``, ``edge_attr`` ``[E, d]``, ``reverse``
        ``[E]`` -> ``[E, d]``. ``forward_dense``: ``nodes[k]`` ``[B, d_k, d]``, ``edges[l]``
        ``[B, d_{l+1}, d_l, d]`` (``[2, B, d_{l+1}, d_l, d]`` with reverse) -> ``edges`` alike.
    """

    def __init__(self, hidden_dim: int, dropout: float = 0.0, with_reverse: bool = False,
                 edge_chunk: Optional[int] = None):
        super().__init__()
        check_edge_chunk(edge_chunk)
        self.with_reverse = with_reverse
        self.edge_chunk = edge_chunk
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
        return on_rows(self, x, edge_index, edge_attr, reverse, self.edge_chunk)[0]

    def forward_dense(self, nodes: Sequence[Tensor], edges: Sequence[Tensor]) -> list[Tensor]:
        """The update of every edge block (forward, then reverse edges with ``with_reverse``)."""
        x, widths = node_rows(nodes)
        return on_blocks(self, x, widths, edges, self.with_reverse, self.edge_chunk)[0]

    def node_terms(self, x: Tensor) -> tuple[Terms, Terms]:
        """``W_s x + b_e`` (as a source; one linear map, so that it takes the projections' dtype under autocast),
        ``W_t x`` (as a target)."""
        return (nn.functional.linear(x, self.source_lin.weight, self.edge_lin.bias),), (self.target_lin(x),)

    def edge_map(self, edge: Tensor, ends: Ends) -> tuple[Tensor, Reduced, Reduced]:
        """The new features of ``edge``, from term 0 of ``ends`` (a layer that embeds this map puts the terms of
        :meth:`node_terms` first among its own); no messages."""
        hidden = linear_add(edge, self.edge_lin.weight, ends.pair(0))
        if self.with_reverse:
            hidden = hidden + ends.opposite(self.reverse_lin)
        return self.residual(edge, self.out_lin(nn.functional.silu(hidden))), (), ()


class FiLM(nn.Module):
    r"""Feature-wise modulation of ``h`` by a conditioning ``c``: :math:`\gamma(c) \odot h + \beta(c)`.

    ``[gamma, beta] = W c + b``; used to let edge features (the weights) scale and shift the
    messages that travel along them.

    Args:
        hidden_dim: width of ``h`` and of the condition ``c``.
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
    r"""Transformer feed-forward block: :math:`x' = \mathrm{LN}(x + \mathrm{Dropout}(W_2\,\mathrm{SiLU}(W_1 x)))`.

    Args:
        hidden_dim: width of ``x``.
        dropout: dropout probability on the block's output, before the residual.
        expansion: the hidden width is ``expansion * hidden_dim``.
    """

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
