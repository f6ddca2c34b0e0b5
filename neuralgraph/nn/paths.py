"""How a layer's per-edge map runs: on edge rows, on chunks of rows, on dense blocks, on tiles of blocks.

A layer that updates edges or sends messages along them writes that computation once, as an
:class:`EdgeMap`: :meth:`~EdgeMap.node_terms` projects every node once into the terms its edges read
as their source and as their target, and :meth:`~EdgeMap.edge_map` takes the features of a set of
edges and their endpoints' terms (an :class:`Ends`) and returns the edges' new features and the
messages they send to their targets and to their sources. A :class:`MessageMap` also says what a
node makes of the messages it receives, reduced (:meth:`~MessageMap.receive`). Four strategies run
any map written so, with the same math:

* :func:`edge_rows`: every row of ``edge_index`` at once; endpoint terms gathered
  (:class:`RowEnds`), messages scattered to their nodes;
* :func:`row_chunks`: chunks of at most ``chunk`` rows, each recomputed in backward
  (:func:`recomputed`), reduced to per-node sums (minima, maxima) per chunk;
* :func:`dense_blocks`: the per-layer blocks ``[B, d_{l+1}, d_l, C]`` of a batch of one layout
  (``[2, B, ...]`` with reverse edges); endpoint terms broadcast (:class:`BlockEnds`), messages
  reduced over a block axis;
* :func:`dense_tiles`: tiles of at most ``chunk`` edges of those blocks (:class:`EdgeTiles`), each
  recomputed in backward, their reductions placed into their node layers.

:func:`on_rows` (a layer's ``forward``) and :func:`on_blocks` (its ``forward_dense``) choose by
``chunk``, the layer's ``edge_chunk``. Every strategy computes in the nodes' dtype and returns new
edge features in the edges' own (``Metanet``'s ``edge_dtype``).
"""
from __future__ import annotations

import abc
import itertools
import math
from typing import Callable, ClassVar, NamedTuple, Optional, Sequence, Union

import torch
import torch.utils.checkpoint
from torch import Tensor, nn
from torch_geometric.utils import degree, scatter

#: The reductions by which a node reads the messages it receives, by name, each with the operation that
#: combines two partial reductions and the value of a reduction over no message.
REDUCTIONS: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], float]] = {
    "sum": (torch.add, 0.0), "sum_of_squares": (torch.add, 0.0), "amin": (torch.minimum, math.inf),
    "amax": (torch.maximum, -math.inf)}

Terms = Sequence[Tensor]
#: Per message output of an edge map, its reductions over each node's messages, in the order the map names them.
Reduced = tuple[Tensor, ...]


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


class Ends(abc.ABC):
    """The endpoint terms of a set of edges, placed at the edges, and their opposite edges' features.

    ``node_terms`` of an :class:`EdgeMap` gives per node a tuple of source terms and a tuple of target
    terms; here, term ``term`` of every edge's source (:meth:`source`), of its target (:meth:`target`),
    or their sum (:meth:`pair`), each broadcastable against the edge features, and, with reverse edges,
    the opposite edges' features (:meth:`opposite`), all in the dtype the map computes in.
    """

    @abc.abstractmethod
    def source(self, term: int) -> Tensor:
        """Source term ``term`` of each edge ``j -> i`` (of ``j``)."""

    @abc.abstractmethod
    def target(self, term: int) -> Tensor:
        """Target term ``term`` of each edge ``j -> i`` (of ``i``)."""

    @abc.abstractmethod
    def pair(self, term: int) -> Tensor:
        """Source term ``term`` plus target term ``term`` of each edge (where a map only sums them: cheaper than
        :meth:`source` and :meth:`target` apart on blocks with reverse edges)."""

    @abc.abstractmethod
    def opposite(self, transform: Callable[[Tensor], Tensor]) -> Tensor:
        """``transform`` of the features of each edge's opposite (the reverse of a forward edge, and back), shaped
        as the edges'. ``transform`` acts on each edge alone (e.g. a linear map): a block applies it to its own
        edges and swaps its halves after, rows apply it to the gathered opposites."""


class RowEnds(Ends):
    """The endpoint terms of edge rows, gathered by ``edge_index`` (``[E, C]`` each).

    Args:
        sources: per term, the source terms of every node ``[N, C]``.
        targets: per term, the target terms of every node ``[N, C]``.
        edge_index: ``[2, E]``, the edges' sources and targets.
        opposite: ``[E, d]``, the features of each edge's opposite (``None`` without reverse edges).
    """

    def __init__(self, sources: Terms, targets: Terms, edge_index: Tensor, opposite: Optional[Tensor] = None):
        self.sources, self.targets, self.edge_index, self.opposites = sources, targets, edge_index, opposite

    def source(self, term: int) -> Tensor:
        return self.sources[term].index_select(0, self.edge_index[0])

    def target(self, term: int) -> Tensor:
        return self.targets[term].index_select(0, self.edge_index[1])

    def pair(self, term: int) -> Tensor:
        return self.target(term) + self.source(term)

    def opposite(self, transform: Callable[[Tensor], Tensor]) -> Tensor:
        return transform(self.opposites)


class BlockEnds(Ends):
    """The endpoint terms of a dense block of edges between node layers ``l`` (columns) and ``l + 1`` (rows), or
    of a tile of one, broadcast over it (nothing gathered).

    A block is ``[B, d_{l+1}, d_l, C]``: edge ``j -> i`` at row ``i``, column ``j``. With reverse edges it is
    ``[2, B, d_{l+1}, d_l, C]``, the reverse edges ``i -> j`` at the place of their forward edge, so that
    a forward edge's source lies on the column axis and a reverse edge's on the row axis.

    Args:
        sources: per term, per node layer ``k``, the nodes' source terms ``[B, d_k, C]``.
        targets: per term, per node layer ``k``, the nodes' target terms ``[B, d_k, C]``.
        l: the weight layer of the block.
        reverse: whether the block holds the reverse edges too.
        edge: the block's edge features, whose two halves are each other's opposites.
    """

    def __init__(self, sources: Sequence[Terms], targets: Sequence[Terms], l: int, reverse: bool, edge: Tensor):
        self.sources, self.targets, self.l, self.reverse, self.edge = sources, targets, l, reverse, edge

    def source(self, term: int) -> Tensor:
        terms, l = self.sources[term], self.l
        if not self.reverse:
            return terms[l][:, None]
        # forward edges leave the columns, reverse edges the rows: the two halves broadcast differently
        return torch.stack(torch.broadcast_tensors(terms[l][:, None], terms[l + 1][:, :, None]))

    def target(self, term: int) -> Tensor:
        terms, l = self.targets[term], self.l
        if not self.reverse:
            return terms[l + 1][:, :, None]
        return torch.stack(torch.broadcast_tensors(terms[l + 1][:, :, None], terms[l][:, None]))

    def pair(self, term: int) -> Tensor:
        return endpoint_sums(self.sources[term], self.targets[term], self.l, self.reverse)

    def opposite(self, transform: Callable[[Tensor], Tensor]) -> Tensor:
        return transform(self.edge).flip(0)


class Received(NamedTuple):
    """The messages that each node receives, reduced, and how many there are.

    Attributes:
        values: per message output of the map, each of its reductions (:data:`REDUCTIONS`) over the node's
            messages, in the order the map names them, ``[N, C]`` on rows, ``[B, d_k, C]`` for node layer ``k``
            of blocks; 0 for a node that receives none.
        count: the number of messages of each node, at least 1: a ``[N, 1]`` tensor on rows, a number per node
            layer on blocks.
    """

    values: Reduced
    count: Union[int, Tensor]


class EdgeMap(abc.ABC):
    """A computation on edges, written once, that the strategies of this module run.

    Subclasses (with ``nn.Module``) define :meth:`node_terms` and :meth:`edge_map`, and name in
    ``target_reductions`` and ``source_reductions``, per message output of :meth:`edge_map`, the
    reductions a node reads of it (keys of :data:`REDUCTIONS`).
    """

    #: Per message to the edges' targets, the reductions of it that each node reads.
    target_reductions: ClassVar[tuple[tuple[str, ...], ...]] = ()
    #: Per message to the edges' sources, the reductions of it that each node reads.
    source_reductions: ClassVar[tuple[tuple[str, ...], ...]] = ()

    @abc.abstractmethod
    def node_terms(self, x: Tensor) -> tuple[Terms, Terms]:
        """Per node (rows ``[..., N, d]`` of any leading shape) the terms that its edges read: those read where it
        is the source, those read where it is the target."""

    @abc.abstractmethod
    def edge_map(self, edge: Tensor, ends: Ends) -> tuple[Optional[Tensor], Reduced, Reduced]:
        """The new features of edges ``edge`` (``None``: the edges are left as they are) and their messages to their
        targets and to their sources (each shaped as ``edge``), from their endpoints' terms ``ends``."""


class MessageMap(EdgeMap):
    """An :class:`EdgeMap` that sends messages, and what a node makes of those it receives."""

    @abc.abstractmethod
    def receive(self, incoming: Optional[Received], outgoing: Optional[Received]) -> Tensor:
        """Per node, the features it takes from the messages of the edges into it (``incoming``) and out of it
        (``outgoing``); ``None`` for a direction that sends no message."""


def endpoint_sums(source: Terms, target: Terms, l: int, with_reverse: bool = False) -> Tensor:
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


def tile_terms(terms: Terms, l: int, graphs: slice, rows: slice, columns: slice) -> tuple[Tensor, Tensor]:
    """The per-node terms of the sources and targets of a tile of edge layer ``l`` (from ``terms[k]`` ``[B, d_k, C]``),
    as node layers 0 and 1 of :class:`BlockEnds` (and :func:`endpoint_sums`).

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


def on_rows(edge_map: EdgeMap, x: Tensor, edge_index: Tensor, edge_attr: Tensor, reverse: Optional[Tensor] = None,
            chunk: Optional[int] = None) -> tuple[Optional[Tensor], Optional[Tensor]]:
    """``edge_map`` on the edge rows of a graph: :func:`edge_rows`, or :func:`row_chunks` with ``chunk``.

    Args:
        edge_map: the layer (or building block) whose map runs.
        x: node features ``[N, d]``.
        edge_index: ``[2, E]``.
        edge_attr: edge features ``[E, d]``.
        reverse: ``[E]``, the row of each edge's opposite, for a map that reads :meth:`Ends.opposite`.
        chunk: the most rows evaluated at once (``None``: all).

    Returns:
        The new edge features ``[E, d]`` (``None`` for a map that leaves them) and, for a :class:`MessageMap`,
        what each node receives ``[N, C]`` (:meth:`MessageMap.receive`; else ``None``).
    """
    if chunk is None:
        return edge_rows(edge_map, x, edge_index, edge_attr, reverse)
    return row_chunks(edge_map, x, edge_index, edge_attr, chunk, reverse)


def on_blocks(edge_map: EdgeMap, x: Tensor, widths: Sequence[int], edges: Sequence[Tensor], reverse: bool = False,
              chunk: Optional[int] = None) -> tuple[Optional[list[Tensor]], Optional[Tensor]]:
    """``edge_map`` on the per-layer blocks of a batch of one layout: :func:`dense_blocks`, or :func:`dense_tiles`
    with ``chunk``.

    Args:
        edge_map: the layer (or building block) whose map runs.
        x: node features ``[B, N, d]``, node layer after node layer (``node_rows``).
        widths: the node layers' widths ``d_k``, which split ``x``.
        edges: per weight layer ``l``, ``[B, d_{l+1}, d_l, d]`` (``[2, B, ...]`` with ``reverse``).
        reverse: whether the blocks hold the reverse edges too.
        chunk: the most edges evaluated at once, a tile with reverse edges holding each edge with its
            reverse (``None``: whole blocks).

    Returns:
        The new edge blocks (``None`` for a map that leaves them) and, for a :class:`MessageMap`, what each
        node receives ``[B, N, C]`` (else ``None``).
    """
    if chunk is None:
        return dense_blocks(edge_map, x, widths, edges, reverse)
    return dense_tiles(edge_map, x, widths, edges, chunk, reverse)


def edge_rows(edge_map: EdgeMap, x: Tensor, edge_index: Tensor, edge_attr: Tensor,
              reverse: Optional[Tensor] = None) -> tuple[Optional[Tensor], Optional[Tensor]]:
    """``edge_map`` on every edge row at once: endpoint terms gathered, messages scattered to their nodes.

    Args:
        edge_map: the map.
        x: node features ``[N, d]``.
        edge_index: ``[2, E]``.
        edge_attr: edge features ``[E, d]``.
        reverse: ``[E]``, the row of each edge's opposite (for a map that reads it).

    Returns:
        As :func:`on_rows`.
    """
    sources, targets = edge_map.node_terms(x)
    opposite = None if reverse is None else edge_attr[reverse]
    edge, incoming, outgoing = _map_rows(edge_map, x.dtype, x.shape[0], edge_index, edge_attr, opposite, sources,
                                         targets)
    return edge, _receive_rows(edge_map, incoming, outgoing, edge_index, x)


def row_chunks(edge_map: EdgeMap, x: Tensor, edge_index: Tensor, edge_attr: Tensor, chunk: int,
               reverse: Optional[Tensor] = None) -> tuple[Optional[Tensor], Optional[Tensor]]:
    """``edge_map`` on chunks of at most ``chunk`` edge rows, each recomputed in backward and reduced at once to
    its messages' reductions per node, which combine over the chunks: no ``[E, d]`` intermediate of the map is
    kept, only the new edge features.

    Args:
        edge_map: the map.
        x: node features ``[N, d]``.
        edge_index: ``[2, E]``.
        edge_attr: edge features ``[E, d]``.
        chunk: the most rows of a chunk.
        reverse: ``[E]``, the row of each edge's opposite (for a map that reads it).

    Returns:
        As :func:`on_rows`.
    """
    sources, targets = edge_map.node_terms(x)
    opposites = None if reverse is None else edge_attr[reverse]  # gathered once: its gradient is scattered once
    chunks = zip(edge_index.split(chunk, dim=1), edge_attr.split(chunk),
                 itertools.repeat(None) if opposites is None else opposites.split(chunk))
    parts = [recomputed(_map_rows, edge_map, x.dtype, x.shape[0], index, edge, opposite, sources, targets)
             for index, edge, opposite in chunks]
    edges = None if parts[0][0] is None else torch.cat([part[0] for part in parts])
    incoming, outgoing = (_combined([part[side] for part in parts], _names(reductions))
                          for side, reductions in ((1, edge_map.target_reductions), (2, edge_map.source_reductions)))
    return edges, _receive_rows(edge_map, incoming, outgoing, edge_index, x)


def dense_blocks(edge_map: EdgeMap, x: Tensor, widths: Sequence[int], edges: Sequence[Tensor],
                 reverse: bool = False) -> tuple[Optional[list[Tensor]], Optional[Tensor]]:
    """``edge_map`` on whole blocks: endpoint terms broadcast over each (:class:`BlockEnds`), messages reduced over
    its row or column axis into the node layers on the other.

    Args:
        edge_map: the map.
        x: node features ``[B, N, d]``.
        widths: the node layers' widths.
        edges: per weight layer, ``[B, d_{l+1}, d_l, d]`` (``[2, B, ...]`` with ``reverse``).
        reverse: whether the blocks hold the reverse edges too.

    Returns:
        As :func:`on_blocks`.
    """
    sources, targets = _layer_terms(edge_map, x, widths)
    inbox, updated = _Inbox(edge_map, len(widths), reverse), []
    for l, edge in enumerate(edges):
        new, *parts = _map_block(edge_map, x.dtype, reverse, edge, sources, targets, l)
        updated.append(new)
        inbox.add(l, parts)
        inbox.count(l, *edge.shape[-3:-1])
    return (None if updated[0] is None else updated), inbox.receive(x, widths)


def dense_tiles(edge_map: EdgeMap, x: Tensor, widths: Sequence[int], edges: Sequence[Tensor], chunk: int,
                reverse: bool = False) -> tuple[Optional[list[Tensor]], Optional[Tensor]]:
    """``edge_map`` on tiles of at most ``chunk`` edges of the blocks (:class:`EdgeTiles`; with reverse edges a tile
    holds each edge with its reverse, so half as many places), each recomputed in backward and reduced at once,
    its reductions placed into their node layers and combined over the tiles.

    Args:
        edge_map: the map.
        x: node features ``[B, N, d]``.
        widths: the node layers' widths.
        edges: per weight layer, ``[B, d_{l+1}, d_l, d]`` (``[2, B, ...]`` with ``reverse``).
        chunk: the most edges of a tile.
        reverse: whether the blocks hold the reverse edges too.

    Returns:
        As :func:`on_blocks`.
    """
    sources, targets = _layer_terms(edge_map, x, widths)
    inbox, updated, dim = _Inbox(edge_map, len(widths), reverse), [], int(reverse)
    for l, edge in enumerate(edges):
        tiles, parts = EdgeTiles(edge.shape[dim:dim + 3], max(1, chunk // (dim + 1)), dim), []
        for (graphs, rows, columns), tile in zip(tiles.slices(), tiles.split(edge)):
            new, *reduced = recomputed(_map_block, edge_map, x.dtype, reverse, tile,
                                       [tile_terms(term, l, graphs, rows, columns) for term in sources],
                                       [tile_terms(term, l, graphs, rows, columns) for term in targets], 0)
            parts.append(new)
            inbox.add(l, reduced, (tiles, graphs, rows, columns))
        updated.append(None if parts[0] is None else tiles.cat(parts))
        inbox.count(l, *edge.shape[-3:-1])
    return (None if updated[0] is None else updated), inbox.receive(x, widths)


def _map_rows(edge_map: EdgeMap, dtype: torch.dtype, num_nodes: int, edge_index: Tensor, edge: Tensor,
              opposite: Optional[Tensor], sources: Terms, targets: Terms) -> tuple[Optional[Tensor], Reduced, Reduced]:
    """The map on edge rows ``edge``, computed in ``dtype``: their new features in ``edge``'s dtype and their
    messages reduced per target and per source ``[num_nodes, C]``."""
    computed = edge.to(dtype)
    ends = RowEnds(sources, targets, edge_index, None if opposite is None else opposite.to(dtype))
    new, to_target, to_source = edge_map.edge_map(computed, ends)
    incoming = tuple(_scatter(values, edge_index[1], name, num_nodes)
                     for values, names in zip(to_target, edge_map.target_reductions) for name in names)
    outgoing = tuple(_scatter(values, edge_index[0], name, num_nodes)
                     for values, names in zip(to_source, edge_map.source_reductions) for name in names)
    return (None if new is None else new.to(edge.dtype)), incoming, outgoing


def _scatter(values: Tensor, index: Tensor, name: str, num_nodes: int) -> Tensor:
    """``values`` ``[E, C]`` reduced by ``name`` per node of ``index``; the value over no message where none arrives."""
    if name in ("sum", "sum_of_squares"):
        return scatter(values if name == "sum" else values.square(), index, 0, num_nodes)
    size = (num_nodes, values.shape[1])
    return values.new_full(size, REDUCTIONS[name][1]).scatter_reduce(0, index[:, None].expand_as(values), values, name)


def _names(reductions: Sequence[Sequence[str]]) -> list[str]:
    """The reductions of every message, one after the other: the order of :attr:`Received.values`."""
    return [name for names in reductions for name in names]


def _reduce(block: Tensor, name: str, axis: int) -> Tensor:
    """``block`` reduced by ``name`` over ``axis``."""
    return block.square().sum(axis) if name == "sum_of_squares" else getattr(block, name)(axis)


def _combined(parts: Sequence[Reduced], reductions: Sequence[str]) -> Reduced:
    """The reductions of the union of message sets whose reductions are ``parts``."""
    combined = parts[0]
    for part in parts[1:]:
        combined = tuple(REDUCTIONS[name][0](a, b) for name, a, b in zip(reductions, combined, part))
    return combined


def _receive_rows(edge_map: EdgeMap, incoming: Reduced, outgoing: Reduced, edge_index: Tensor,
                  x: Tensor) -> Optional[Tensor]:
    """What the nodes make of their reduced messages (:meth:`MessageMap.receive`), counted along ``edge_index``;
    a node that receives none has 0 for every reduction (as PyG's aggregations)."""
    if not isinstance(edge_map, MessageMap):
        return None

    def received(values: Reduced, reductions: Sequence[Sequence[str]], index: Tensor) -> Optional[Received]:
        if not reductions:
            return None
        count = degree(index, x.shape[0], x.dtype)[:, None]
        values = tuple(value if REDUCTIONS[name][1] == 0 else value.masked_fill(count == 0, 0.0)
                       for value, name in zip(values, _names(reductions)))
        return Received(values, count.clamp(min=1))

    return edge_map.receive(received(incoming, edge_map.target_reductions, edge_index[1]),
                            received(outgoing, edge_map.source_reductions, edge_index[0]))


def _layer_terms(edge_map: EdgeMap, x: Tensor, widths: Sequence[int]) -> tuple[list[Terms], list[Terms]]:
    """``edge_map``'s node terms of ``x`` ``[B, N, d]``, each split into its node layers."""
    sources, targets = edge_map.node_terms(x)
    return ([term.split(list(widths), dim=1) for term in sources],
            [term.split(list(widths), dim=1) for term in targets])


def _map_block(edge_map: EdgeMap, dtype: torch.dtype, reverse: bool, edge: Tensor, sources: Sequence[Terms],
               targets: Sequence[Terms], l: int) -> tuple[Optional[Tensor], Reduced, Reduced, Reduced, Reduced]:
    """The map on a block or tile of edge layer ``l``, computed in ``dtype``: its new features in ``edge``'s dtype
    and its messages reduced, to the node layer on its rows (``l + 1``) and on its columns (``l``): the incoming
    messages of the rows, of the columns, then the outgoing messages of the rows, of the columns ``[b, n, C]``."""
    computed = edge.to(dtype)
    new, to_target, to_source = edge_map.edge_map(computed, BlockEnds(sources, targets, l, reverse, computed))
    new = None if new is None else new.to(edge.dtype)

    def reduced(messages: Sequence[Tensor], reductions: Sequence[Sequence[str]], axis: int) -> Reduced:
        return tuple(_reduce(message, name, axis) for message, names in zip(messages, reductions) for name in names)

    into, out_of = edge_map.target_reductions, edge_map.source_reductions
    if not reverse:  # an edge's target is on the rows (its messages reduce over the columns, axis 2), its source not
        return new, reduced(to_target, into, 2), (), (), reduced(to_source, out_of, 1)
    # forward edges (half 0) as without reverse edges; a reverse edge's target is on the columns, its source on the
    # rows. Each message is split into its halves once, so that backward joins their gradients once.
    to_target, to_source = (list(zip(*(message.unbind(0) for message in messages))) or [(), ()]
                            for messages in (to_target, to_source))
    return (new, reduced(to_target[0], into, 2), reduced(to_target[1], into, 1), reduced(to_source[1], out_of, 2),
            reduced(to_source[0], out_of, 1))


class _Inbox:
    """Per node layer, the reductions of the messages received so far along the edges into it (side 0) and out of
    it (side 1), and how many messages each of its nodes receives.

    Args:
        edge_map: the map whose messages these are.
        layers: the number of node layers.
        reverse: whether the blocks hold the reverse edges too.
    """

    def __init__(self, edge_map: EdgeMap, layers: int, reverse: bool):
        self.edge_map, self.reverse = edge_map, reverse
        self.reductions = (_names(edge_map.target_reductions), _names(edge_map.source_reductions))
        self.values: list[list[Optional[Reduced]]] = [[None] * layers, [None] * layers]
        self.counts = [[0] * layers, [0] * layers]

    def add(self, l: int, parts: Sequence[Reduced],
            tile: Optional[tuple[EdgeTiles, slice, slice, slice]] = None) -> None:
        """The reductions ``parts`` of a block of edge layer ``l`` (:func:`_map_block`'s), or of a tile of one,
        ``tile`` = ``(tiles, graphs, rows, columns)``, placed into their node layers."""
        for (side, k, axis), part in zip(((0, l + 1, 1), (0, l, 2), (1, l + 1, 1), (1, l, 2)), parts):
            if not part:
                continue
            reductions = self.reductions[side]
            if tile is not None:
                tiles, graphs, *positions = tile
                part = tuple(tiles.place(value, graphs, positions[axis - 1], axis, REDUCTIONS[name][1])
                             for value, name in zip(part, reductions))
            known = self.values[side][k]
            self.values[side][k] = part if known is None else _combined([known, part], reductions)

    def count(self, l: int, rows: int, columns: int) -> None:
        """The messages that a block of edge layer ``l``, of ``rows`` x ``columns`` edges, sends to each node: to
        the rows along the forward edges into them and the reverse edges out of them, one per column; to the
        columns along the others, one per row."""
        for side, reductions in enumerate(self.reductions):
            if reductions:
                self.counts[side][l + 1] += columns if self.reverse or side == 0 else 0
                self.counts[side][l] += rows if self.reverse or side == 1 else 0

    def receive(self, x: Tensor, widths: Sequence[int]) -> Optional[Tensor]:
        """What the nodes make of their messages (:meth:`MessageMap.receive`, node layer by node layer) ``[B, N, C]``;
        a node layer that receives none has 0 for every reduction."""
        if not isinstance(self.edge_map, MessageMap):
            return None
        received = [[None] * len(widths), [None] * len(widths)]
        for side, reductions in enumerate(self.reductions):
            if not reductions:
                continue
            like = next(values for values in self.values[side] if values is not None)
            for k, (values, count) in enumerate(zip(self.values[side], self.counts[side])):
                if values is None:
                    values = tuple(value.new_zeros(x.shape[0], widths[k], value.shape[-1]) for value in like)
                received[side][k] = Received(values, max(count, 1))
        return torch.cat([self.edge_map.receive(incoming, outgoing) for incoming, outgoing in zip(*received)], dim=1)
