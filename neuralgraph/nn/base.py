"""The base every metanetwork builds on, and the edge update several of them share.

A :class:`Metanet` owns a :class:`~neuralgraph.nn.encoder.GraphEncoder` and a stack of
:class:`MetanetLayer` s; ``forward(graph)`` returns node features ``[N, hidden_dim]`` and edge
features ``[E, hidden_dim]`` whose rows align with ``graph.x`` and ``graph.edge_attr``. Heads
(:mod:`neuralgraph.nn.heads`) turn those into a prediction or into new weights.

Every layer has the general implementation, on feature rows of any graph (``forward``), and
most also a dense one, on per-layer blocks of a batch of one layout (``forward_dense``): the same
math, as PyG keeps ``GCNConv`` and ``DenseGCNConv`` apart. :meth:`Metanet.forward` chooses once
per batch, from its :class:`~neuralgraph.nn.context.GraphContext`.

An architecture declares the permutation group it respects in ``symmetry``:

* ``"hidden"``: permutations of hidden neurons (the function-preserving symmetries). Input
  and output neurons get their own positional embeddings.
* ``"np"``: also permutations of input and output neurons (NFN's NP group); the encoder then
  only sees layer embeddings.

Two options trade compute for memory on large graphs (one network of millions of weights):
``Metanet(checkpoint=True)`` recomputes each layer in backward (:func:`recomputed`), and layers
built with ``edge_chunk`` (GMN's, NG-GNN's, :class:`EdgeUpdate`) evaluate their per-edge maps over
chunks of edges, each recomputed in backward, dense blocks cut into :class:`EdgeTiles`.
"""
from __future__ import annotations

import abc
import inspect
import itertools
from typing import Any, Callable, ClassVar, Mapping, Optional, Sequence

import torch
import torch.utils.checkpoint
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing

from neuralgraph.graph import Graph
from neuralgraph.graph.spec import GraphSpec
from neuralgraph.nn.context import (GraphContext, GraphFacts, WeightBlocks, block_rows, check_dense_rows,
                                    edge_blocks, node_blocks)
from neuralgraph.nn.encoder import MAX_LAYERS, MAX_NODE_TYPES, GraphEncoder
from neuralgraph.nn.heads import InvariantReadout, WeightDecoder

SYMMETRIES = ("hidden", "np")


def check_edge_chunk(edge_chunk: Optional[int]) -> None:
    """``edge_chunk`` is ``None`` (no chunks) or a positive number of edges.

    Args:
        edge_chunk: the value to check; anything else is a ValueError.
    """
    if edge_chunk is not None and (isinstance(edge_chunk, bool) or not isinstance(edge_chunk, int) or edge_chunk < 1):
        raise ValueError(f"edge_chunk={edge_chunk!r}: expected a positive number of edges per chunk, or None")


def recomputed(function: Callable, *args, **kwargs):
    """``function(*args, **kwargs)`` keeping none of its intermediate tensors for backward, which runs it again
    (``torch.utils.checkpoint``, non-reentrant: the RNG state and autocast of the first run are replayed, so
    dropout draws the same masks); a plain call when autograd does not record.

    Args:
        function: the computation; its tensor arguments are what backward keeps.
        *args: positional arguments of ``function``.
        **kwargs: keyword arguments of ``function``.

    Returns:
        What ``function`` returns.
    """
    if not torch.is_grad_enabled():
        return function(*args, **kwargs)
    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False, **kwargs)


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


def _constructor_signature(cls: type) -> inspect.Signature:
    """The arguments ``cls(...)`` takes: its constructor's own, then, when the constructor takes ``**options``
    and passes them on to its base's (``super().__init__(hidden_dim, num_layers, dropout, **options)``, as
    every architecture does), the base's keyword-only arguments that it does not name itself."""
    definer = next(c for c in cls.__mro__ if "__init__" in vars(c))
    own = inspect.signature(definer.__init__)
    parameters = list(own.parameters.values())[1:]  # without self
    if definer is Metanet or not any(p.kind is p.VAR_KEYWORD for p in parameters):
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
    lists them.

    Args:
        hidden_dim: width of node and edge features.
        num_layers: number of layers.
        dropout: dropout probability inside the layers.
        edge_features: ``F``, the width of ``graph.edge_attr`` (1 for MLPs, ``kh*kw`` for
            convolutions); given by the data's GraphSpec. Goes to the encoder
            (:class:`~neuralgraph.nn.encoder.GraphEncoder`), as do the options down to ``skip_edges``.
        positional: the encoder's positional embedding, ``"neuron"`` (one per input neuron, per
            output neuron and per hidden layer) or ``"layer"`` (one per layer). (default: ``None``,
            ``"neuron"``, or ``"layer"`` for ``symmetry = "np"``, which allows no other)
        fourier_features: random Fourier frequencies per lifted scalar (0: a linear lift).
        fourier_scale: standard deviation of those frequencies.
        max_layers: weight layers the encoder's embeddings and the heads' per-layer tables cover.
        max_node_types: ``node_type`` embeddings of ``positional="neuron"``.
        probe_features: learned probe points whose values at every neuron are node features
            (:class:`~neuralgraph.nn.weight_features.WeightFeatureLift`; 0: none).
        gradient_features: fixed points whose per-example gradients of every weight and bias are
            pooled into edge and node features (0: none).
        activation: the activation of the networks read (e.g. ``"sine"``, ``"relu"``), which probe
            and gradient features run them with and ScaleGMN takes its scaling group from.
        w0: SIREN's frequency ``w_0`` of those networks (``activation="sine"``).
        node_activations: embed the graphs' ``activation`` field into node features (networks of
            several activations in one dataset).
        skip_edges: embed the graphs' ``edge_kind`` field into edge features (residual skips and
            shortcuts); required for graphs that have such edges.
        checkpoint: recompute each layer of the stack in backward instead of keeping its
            intermediate tensors (:func:`recomputed`, on the dense and the general path): what stays
            between forward and backward is each layer's input, node and edge features
            (``E x hidden_dim`` floats per layer, twice that with reverse edges), for one more
            forward pass of every layer. Same outputs and gradients.
        edge_chunk: evaluate the per-edge maps of each layer (edge update, messages) over chunks
            of at most this many edge rows, each chunk recomputed in backward, so that the
            ``[E, hidden_dim]`` intermediates of a layer (``[E, 3 hidden_dim]`` of the edge
            MLP's inputs) never exist whole: on top of the layers' inputs, a layer holds one
            chunk's intermediates and ``[N, hidden_dim]`` sums per chunk, for one more forward
            pass of the per-edge maps (with ``checkpoint``, two). Taken by architectures whose
            layers have chunked implementations (``gmn``, ``ng_gnn``); the others run their
            layers whole. Same outputs and gradients up to float rounding (sums are taken chunk
            by chunk); in training mode dropout draws its masks per chunk.
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
    # Layers with chunked implementations, which edge_chunk and edge_dtype apply to.
    chunked: ClassVar[bool] = False
    # Constructor argument that hidden_dim must be a multiple of (e.g. "num_heads"), if any.
    hidden_dim_multiple_of: ClassVar[Optional[str]] = None
    # What the config grids and benchmark plans read of an architecture (scripts/generate_dilation.py,
    # neuralgraph.bench): declared here, beside the class, so that a registered architecture joins them all.
    #: The k = 1 configuration of the dilation grid (``configs/dilation/<name>_k<k>.yaml``).
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
        checkpoint: bool = False,
        edge_chunk: Optional[int] = None,
        edge_dtype: Optional[torch.dtype] = None,
    ):
        super().__init__()
        check_edge_chunk(edge_chunk)
        if edge_dtype is not None and (not self.chunked or edge_chunk is None or not isinstance(edge_dtype, torch.dtype)
                                       or not edge_dtype.is_floating_point):
            raise ValueError(f"edge_dtype={edge_dtype!r}: expected a floating torch.dtype, with edge_chunk (given: "
                             f"{edge_chunk!r}), on an architecture with chunked layers (gmn, ng_gnn; this is "
                             f"{type(self).__name__})")
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
        self.checkpoint = checkpoint
        self.edge_chunk = edge_chunk
        self.edge_dtype = edge_dtype
        self.max_layers = max_layers  # the layers the encoder embeds and the heads pool
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

    def context(self, graph: Graph, blocks: Optional[WeightBlocks] = None,
                facts: Optional[GraphFacts] = None) -> GraphContext:
        """The :class:`~neuralgraph.nn.context.GraphContext` of ``graph`` for this metanet, built once per batch
        and handed to :meth:`forward` and the heads; ``blocks``: the batch's weights, when it carries them;
        ``facts``: its :class:`~neuralgraph.nn.context.GraphFacts`, when its builder read them (else read here)."""
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

        Here: the edge feature width, and the encoder's skip-edge and activation embeddings when
        the graphs carry skip edges or activations that differ between networks. Architectures
        add their own facts; one that cannot read such graphs raises ValueError saying why.
        """
        arguments: dict[str, Any] = {"edge_features": spec.edge_features}
        if max(spec.depths) > MAX_LAYERS:  # e.g. a transformer's graph: some 11 node layers per block
            arguments["max_layers"] = max(spec.depths)
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


def endpoint_sums(source: Sequence[Tensor], target: Sequence[Tensor], l: int, with_reverse: bool = False) -> Tensor:
    """``s_j + t_i`` for every edge ``j -> i`` of weight layer ``l``, broadcast from per-layer node blocks
    ``source``/``target`` ``[B, d_k, C]`` (nothing gathered): ``[B, d_{l+1}, d_l, C]``; ``with_reverse``:
    ``[2, B, d_{l+1}, d_l, C]``, then the reverse edges ``i -> j`` at the place of their forward edge.

    Args:
        source: per node layer ``k``, the source terms ``s`` ``[B, d_k, C]``.
        target: per node layer ``k``, the target terms ``t`` ``[B, d_k, C]``.
        l: the weight layer, between node layers ``l`` and ``l + 1``.
        with_reverse: also the sums of the reverse edges.

    Returns:
        ``[B, d_{l+1}, d_l, C]``, or ``[2, B, d_{l+1}, d_l, C]`` with ``with_reverse``.
    """
    if not with_reverse:
        return target[l + 1][:, :, None] + source[l][:, None]
    # the node on the d_{l+1} axis is the target of a forward edge and the source of its reverse
    return torch.stack([target[l + 1], source[l + 1]])[:, :, :, None] + torch.stack([source[l], target[l]])[:, :, None]


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


class EdgeTiles:
    """The dense edge blocks' ``[B, d_{l+1}, d_l]`` grid of edges (graphs, rows = targets, columns = sources)
    cut into tiles of at most ``chunk`` edges: whole rows where they fit, then rows of several graphs.

    :meth:`split` cuts a block into tiles with one ``split`` per axis, so that backward joins their
    gradients with one concatenation per axis (narrowing a block per tile would allocate a
    block-sized gradient per tile); :meth:`cat` joins tiles back; :meth:`place` puts a tile's
    reduction over rows or columns into the ``[B, d_k, C]`` of its node layer.

    Args:
        grid: ``(B, d_{l+1}, d_l)``.
        chunk: the most edges of a tile (at least one edge).
        dim: the axis of ``B`` in the blocks (1 for the ``[2, B, ...]`` blocks with reverse edges).
    """

    def __init__(self, grid: Sequence[int], chunk: int, dim: int = 0):
        graphs, rows, columns = self.grid = tuple(int(n) for n in grid)
        tile_columns = min(columns, chunk)
        tile_rows = min(rows, max(1, chunk // tile_columns))
        tile_graphs = min(graphs, max(1, chunk // (tile_rows * tile_columns)))
        self.sizes = (tile_graphs, tile_rows, tile_columns)
        self.counts = tuple(-(-n // size) for n, size in zip(self.grid, self.sizes))
        self.dim = dim

    def slices(self) -> list[tuple[slice, slice, slice]]:
        """``(graphs, rows, columns)`` of every tile, in the order of :meth:`split`."""
        return [tuple(slice(i * size, min((i + 1) * size, n)) for i, size, n in zip(index, self.sizes, self.grid))
                for index in itertools.product(*(range(count) for count in self.counts))]

    def split(self, block: Tensor) -> list[Tensor]:
        """The tiles of ``block`` (views)."""
        d = self.dim
        return [tile for graphs in block.split(self.sizes[0], d) for rows in graphs.split(self.sizes[1], d + 1)
                for tile in rows.split(self.sizes[2], d + 2)]

    def cat(self, tiles: Sequence[Tensor]) -> Tensor:
        """The block of :meth:`split`'s tiles (one copy)."""
        def join(parts: Sequence[Tensor], axis: int) -> Tensor:
            return parts[0] if len(parts) == 1 else torch.cat(list(parts), axis)

        _, rows, columns = self.counts
        by_row = [join(tiles[i:i + columns], self.dim + 2) for i in range(0, len(tiles), columns)]
        by_graph = [join(by_row[i:i + rows], self.dim + 1) for i in range(0, len(by_row), rows)]
        return join(by_graph, self.dim)

    def place(self, part: Tensor, graphs: slice, positions: slice, axis: int, fill: float = 0.0) -> Tensor:
        """``part`` ``[g, n, C]`` of the tile's ``graphs`` and ``positions`` along grid ``axis`` (1: rows, the targets;
        2: columns, the sources) within ``[B, d, C]``, ``fill`` elsewhere."""
        size, graph_count = self.grid[axis], self.grid[0]
        return nn.functional.pad(part, (0, 0, positions.start, size - positions.stop, graphs.start,
                                        graph_count - graphs.stop), value=fill)


def tile_terms(terms: Sequence[Tensor], l: int, graphs: slice, rows: slice, columns: slice) -> tuple[Tensor, Tensor]:
    """The per-node terms of the sources and targets of a tile of edge layer ``l`` (from ``terms[k]`` ``[B, d_k, C]``),
    as node layers 0 and 1 of :func:`endpoint_sums`.

    Args:
        terms: per node layer ``k``, ``[B, d_k, C]``.
        l: the edge layer of the tile.
        graphs: the tile's graphs (``B`` axis).
        rows: the tile's targets, positions in node layer ``l + 1``.
        columns: the tile's sources, positions in node layer ``l``.

    Returns:
        ``(sources [g, c, C], targets [g, r, C])``.
    """
    return terms[l][graphs, columns], terms[l + 1][graphs, rows]


class EdgeUpdate(MessagePassing):
    r"""Edge update from the edge and both endpoints (and, optionally, the opposite edge).

    .. math::
        e_{ij}' = \mathrm{LN}\big(e_{ij} + \mathrm{Dropout}(W_2\,\mathrm{SiLU}(
            W_e e_{ij} + W_s x_j + W_t x_i\,[+\,W_r e_{ji}]))\big)

    for the edge ``j -> i``. The concatenation ``[e_ij, x_j, x_i]`` goes through one linear map,
    computed as a sum of per-part maps so that node terms are projected once per node, not
    once per edge. ``forward`` is a PyG ``edge_updater``; ``forward_dense`` broadcasts the endpoint
    terms over the ``[B, d_{l+1}, d_l, d]`` edge blocks instead of gathering them, and the opposite
    of a forward edge is the reverse edge at the same place. With ``edge_chunk`` both run over
    chunks of edge rows (dense: :class:`EdgeTiles`), each recomputed in backward (:func:`recomputed`).

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
        super().__init__(aggr=None)
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
        source, target = self.source_lin(x), self.target_lin(x)
        if self.edge_chunk is None:
            opposite = None if reverse is None else self.reverse_lin(edge_attr)[reverse]
            return self.update(source, target, edge_index, edge_attr, opposite)
        opposites = None if reverse is None else edge_attr[reverse]  # in the edges' dtype; W_r is applied per chunk
        chunks = zip(edge_index.split(self.edge_chunk, dim=1), edge_attr.split(self.edge_chunk),
                     itertools.repeat(None) if opposites is None else opposites.split(self.edge_chunk))
        return torch.cat([recomputed(self.chunk_update, source, target, index, edge, opposite_edges)
                          for index, edge, opposite_edges in chunks])

    def chunk_update(self, source: Tensor, target: Tensor, edge_index: Tensor, edge_attr: Tensor,
                     opposite_edges: Optional[Tensor]) -> Tensor:
        """:meth:`update` of a chunk of edges and, with reverse, their opposites' features, computed in the nodes'
        dtype and returned in the edges' own (``Metanet``'s ``edge_dtype``)."""
        opposite = None if opposite_edges is None else self.reverse_lin(opposite_edges.to(source.dtype))
        return self.update(source, target, edge_index, edge_attr.to(source.dtype), opposite).to(edge_attr.dtype)

    def update(self, source: Tensor, target: Tensor, edge_index: Tensor, edge_attr: Tensor,
               opposite: Optional[Tensor] = None) -> Tensor:
        """The update of the edges ``edge_index`` from the projected nodes ``W_s x`` (``source``), ``W_t x``
        (``target``) and, with reverse, their opposites' ``W_r e_ji`` (``opposite``)."""
        return self.edge_updater(edge_index, x=(source, target), edge_attr=edge_attr, opposite=opposite)

    def edge_update(self, x_j: Tensor, x_i: Tensor, edge_attr: Tensor, opposite: Optional[Tensor]) -> Tensor:
        hidden = self.edge_lin(edge_attr) + x_j + x_i
        if opposite is not None:
            hidden = hidden + opposite
        return self.residual(edge_attr, self.out_lin(nn.functional.silu(hidden)))

    def endpoint_terms(self, nodes: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        """Per node layer ``W_s x + b_e`` and ``W_t x`` ``[B, d_k, d]``, which :func:`endpoint_sums` broadcasts."""
        x, widths = node_rows(nodes)
        return (list((self.source_lin(x) + self.edge_lin.bias).split(widths, dim=1)),
                list(self.target_lin(x).split(widths, dim=1)))

    def block_update(self, edge: Tensor, ends: Tensor) -> Tensor:
        """The update of a block or tile of edges ``[(2,) b, r, c, d]`` whose :meth:`endpoint_terms` sum to ``ends``
        (same shape)."""
        hidden = linear_add(edge, self.edge_lin.weight, ends)
        if self.with_reverse:
            hidden = hidden + self.reverse_lin(edge).flip(0)
        return self.residual(edge, self.out_lin(nn.functional.silu(hidden)))

    def tile_update(self, edge: Tensor, source_in: Tensor, source_out: Tensor, target_in: Tensor,
                    target_out: Tensor) -> Tensor:
        """:meth:`block_update` of one tile from its sources' and targets' terms (:func:`tile_terms`), computed in
        their dtype and returned in the tile's own (``Metanet``'s ``edge_dtype``)."""
        ends = endpoint_sums((source_in, source_out), (target_in, target_out), 0, self.with_reverse)
        return self.block_update(edge.to(ends.dtype), ends).to(edge.dtype)

    def forward_dense(self, nodes: Sequence[Tensor], edges: Sequence[Tensor]) -> list[Tensor]:
        """The update of every edge block: ``W_s x_j + W_t x_i`` broadcast, not gathered."""
        source, target = self.endpoint_terms(nodes)
        if self.edge_chunk is None:
            return [self.block_update(edge, endpoint_sums(source, target, l, self.with_reverse))
                    for l, edge in enumerate(edges)]
        updated, dim = [], 1 if self.with_reverse else 0
        for l, edge in enumerate(edges):
            tiles = EdgeTiles(edge.shape[dim:dim + 3], max(1, self.edge_chunk // (dim + 1)), dim)
            updated.append(tiles.cat([
                recomputed(self.tile_update, tile, *tile_terms(source, l, *where), *tile_terms(target, l, *where))
                for where, tile in zip(tiles.slices(), tiles.split(edge))]))
        return updated


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
