r"""Linear layers on weight space equivariant to neuron permutations: fold, NP layer, unfold.

Shared by :mod:`~neuralgraph.nn.dws`, :mod:`~neuralgraph.nn.nfn_hnp` and :mod:`~neuralgraph.nn.nfn_np`.
A linear map on weight space that commutes with a group of neuron permutations is a sum of
terms, one per orbit of the group on pairs of coordinates (see
:mod:`neuralgraph.theory.equivariant_space`). When every layer of the network is a permuted set
(NFN's NP group), the terms are few (:class:`NPLinear`): the edge itself, the states of its end
neurons, the row and column means of the weight matrices, and per-graph means of every layer.

The hidden-neuron group leaves the input and output neurons in place, so a term may depend on
their positions arbitrarily. :func:`fold` turns them into channels, as DWS does: the edges of
``W_1`` become a ``d_0 C``-channel state of their hidden target (its row of ``W_1``), those of
``W_L`` a ``d_L C``-channel state of their hidden source (its column of ``W_L``), and the input
and output neurons a ``(d_0 + d_L) C``-channel state of the graph. What remains is the NP layer
on the hidden layers ``1..L-1`` with wider states; :func:`unfold` gives back one row per node
and edge. Input/output positions are ``node_index`` slots, so graphs may have fewer than
``max_inputs``/``max_outputs`` of them (the missing slots stay zero).

**Means, not sums.** Every pool is a mean (as NFN offers), so the scale of a term does not
grow with the width of a layer, and one model reads networks of varying widths. For a fixed
layout a mean is a sum times a constant, so the spanned space is the same.

**Parameters per layer.** Each node layer, edge layer and the graph state have their own maps:
a model is built for one depth (``num_weight_layers``), and every graph must have exactly it.
The index sets the general path reads (nodes and edges by layer) are built once per batch with
the graph context (:class:`~neuralgraph.nn.context.LayerIndex`).

**Two paths.** The general path (``forward``: :func:`fold`, index scatters and gathers,
:func:`unfold`) serves any batch. When the batch is one layout stored canonically
(``GraphContext.widths``), node layer ``k`` is a view ``[B, d_k, C]`` and edge layer ``l`` a view
``[B, d_{l+1}, d_l, C]`` of the feature rows: :class:`WeightSpaceMetanet` folds them into dense
blocks once (:func:`dense_fold`, reshapes), runs every layer's ``forward_dense`` on them (edge
means over an axis, per-node terms broadcast instead of gathered) and unfolds once
(:func:`dense_unfold`). Both compute the same function.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, NamedTuple, Optional, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch_geometric.utils import scatter

from neuralgraph.graph.spec import GraphSpec
from neuralgraph.nn.base import Metanet, MetanetLayer
from neuralgraph.nn.context import GraphContext, LayerIndex, check_dense_rows

PARAMETERISATIONS = ("terms", "blocks")
Term = tuple[str, int]  # (kind: "edge" or "node", width)


class WeightSpace(NamedTuple):
    """Features of a batch of networks, layer by layer.

    General path: rows ordered as in a :class:`LayerIndex`. Dense path: ``nodes[k]`` is
    ``[B, d_k, width_k]`` and ``edges[l]`` is ``[B, d_{l+1}, d_l, C]``.

    Attributes:
        nodes: ``nodes[k]`` ``[n_k, width_k]``, the states of node layer ``k``.
        edges: ``edges[l]`` ``[m_l, C]``, the edges between node layers ``l`` and ``l + 1``.
        graph: ``[B, width]`` per-graph state, or ``None``.
    """

    nodes: list[Tensor]  # nodes[k]: [n_k, width_k], the states of node layer k
    edges: list[Tensor]  # edges[l]: [m_l, C], the edges between node layers l and l + 1
    graph: Optional[Tensor]  # [B, width] per-graph state, or None


def to_slots(values: Tensor, site: Tensor, slot: Tensor, num_sites: int, num_slots: int) -> Tensor:
    """Place row ``k`` of ``values`` in slot ``slot[k]`` of ``site[k]``: ``[num_sites, num_slots * C]``.

    Turns a set of fixed (unpermuted) neurons into channels; every (site, slot) pair must occur
    at most once, so the scatter sum only places values.

    Args:
        values: ``[K, C]`` rows to place.
        site: ``[K]`` the site (row of the result) of each row.
        slot: ``[K]`` its slot within the site.
        num_sites: rows of the result.
        num_slots: slots per site.

    Returns:
        ``[num_sites, num_slots * C]``, zero where no row was placed.
    """
    placed = scatter(values, site * num_slots + slot, 0, num_sites * num_slots, "sum")
    return placed.view(num_sites, num_slots * values.shape[1])


def from_slots(folded: Tensor, site: Tensor, slot: Tensor, channels: int) -> Tensor:
    """Inverse of :func:`to_slots`: row ``k`` is slot ``slot[k]`` of ``folded[site[k]]``.

    Args:
        folded: ``[num_sites, num_slots * C]``.
        site: ``[K]`` the site of each row to read.
        slot: ``[K]`` its slot.
        channels: ``C``.

    Returns:
        ``[K, C]``.
    """
    return folded.view(folded.shape[0], -1, channels)[site, slot]


def restrict(index: LayerIndex, first: int, last: int) -> LayerIndex:
    """``index`` for node layers ``first..last`` and the edge layers between them.

    Args:
        index: a batch's layer index.
        first: the first node layer kept.
        last: the last node layer kept.

    Returns:
        The restricted :class:`~neuralgraph.nn.context.LayerIndex`.
    """
    nodes, edges = slice(first, last + 1), slice(first, last)
    return LayerIndex(index.nodes[nodes], index.node_graph[nodes], index.position[nodes], index.edges[edges],
                      index.source_row[edges], index.target_row[edges], index.edge_graph[edges], index.depths,
                      index.widths[nodes])


def check_fixed(inputs: int, outputs: int, fixed: tuple[int, int]) -> None:
    """Graphs with ``inputs``/``outputs`` neurons fit the positions ``fixed = (max_inputs, max_outputs)``.

    Args:
        inputs: the most input neurons of a graph of the batch.
        outputs: the most output neurons.
        fixed: ``(max_inputs, max_outputs)``; a ValueError names the one exceeded.
    """
    for name, count, limit in (("input", inputs, fixed[0]), ("output", outputs, fixed[1])):
        if count > limit:
            raise ValueError(f"a graph has {count} {name} neurons but the layer keeps "
                             f"max_{name}s={limit} positions apart; raise max_{name}s")


def fold(x: Tensor, edge_attr: Tensor, index: LayerIndex, num_graphs: int,
         fixed: Optional[tuple[int, int]]) -> WeightSpace:
    """Graph features as a :class:`WeightSpace` whose every layer is permuted.

    ``fixed = (max_inputs, max_outputs)`` (hidden-neuron group): inputs and outputs folded into
    channels, the space covers hidden layers ``1..L-1``. ``None`` (NP group): layers ``0..L`` as
    they are.

    Args:
        x: node features ``[N, C]``.
        edge_attr: edge features ``[E, C]``.
        index: the batch's :class:`~neuralgraph.nn.context.LayerIndex`.
        num_graphs: graphs in the batch.
        fixed: ``(max_inputs, max_outputs)``, or ``None``.

    Returns:
        The folded :class:`WeightSpace`.
    """
    L = len(index.edges)
    if fixed is None:
        return WeightSpace([x[ids] for ids in index.nodes], [edge_attr[ids] for ids in index.edges], None)
    max_inputs, max_outputs = fixed
    check_fixed(index.widths[0], index.widths[L], fixed)
    first, last = 0, L - 1
    rows = to_slots(edge_attr[index.edges[first]], index.target_row[first], index.position[0][index.source_row[first]],
                    len(index.nodes[1]), max_inputs)
    cols = to_slots(edge_attr[index.edges[last]], index.source_row[last], index.position[L][index.target_row[last]],
                    len(index.nodes[L - 1]), max_outputs)
    nodes = [x[ids] for ids in index.nodes[1:L]]
    nodes[0] = torch.cat([nodes[0], rows], dim=1)
    nodes[-1] = torch.cat([nodes[-1], cols], dim=1)
    graph = torch.cat([to_slots(x[index.nodes[0]], index.node_graph[0], index.position[0], num_graphs, max_inputs),
                       to_slots(x[index.nodes[L]], index.node_graph[L], index.position[L], num_graphs, max_outputs)], 1)
    return WeightSpace(nodes, [edge_attr[ids] for ids in index.edges[1:L - 1]], graph)


def unfold(space: WeightSpace, index: LayerIndex, fixed: Optional[tuple[int, int]], channels: int, num_nodes: int,
           num_edges: int) -> tuple[Tensor, Tensor]:
    """Inverse of :func:`fold`: node features ``[num_nodes, C]`` and edge features ``[num_edges, C]``.

    Args:
        space: a folded :class:`WeightSpace`.
        index: the batch's :class:`~neuralgraph.nn.context.LayerIndex`.
        fixed: the ``fixed`` it was folded with.
        channels: ``C``.
        num_nodes: ``N``.
        num_edges: ``E``.

    Returns:
        ``(x [N, C], edge_attr [E, C])``.
    """
    C, L = channels, len(index.edges)
    permuted = range(L + 1) if fixed is None else range(1, L)
    x = space.nodes[0].new_empty(num_nodes, C)
    edge_attr = space.nodes[0].new_empty(num_edges, C)
    for k, state in zip(permuted, space.nodes):
        x[index.nodes[k]] = state[:, :C]
    for l, edges in zip(permuted, space.edges):
        edge_attr[index.edges[l]] = edges
    if fixed is not None:
        max_inputs, max_outputs = fixed
        first, last = 0, L - 1
        edge_attr[index.edges[first]] = from_slots(space.nodes[0][:, C : C + max_inputs * C], index.target_row[first],
                                                   index.position[0][index.source_row[first]], C)
        edge_attr[index.edges[last]] = from_slots(space.nodes[-1][:, -max_outputs * C :], index.source_row[last],
                                                  index.position[L][index.target_row[last]], C)
        x[index.nodes[0]] = from_slots(space.graph[:, : max_inputs * C], index.node_graph[0], index.position[0], C)
        x[index.nodes[L]] = from_slots(space.graph[:, max_inputs * C :], index.node_graph[L], index.position[L], C)
    return x, edge_attr


def dense_fold(x: Tensor, edge_attr: Tensor, widths: Sequence[int], fixed: Optional[tuple[int, int]]) -> WeightSpace:
    """:func:`fold` of a canonical one-layout batch with node-layer ``widths``: dense blocks, views where possible.

    Slot ``p`` of a folded input/output neuron holds channels ``[p C, (p + 1) C)``, as in
    :func:`to_slots`; slots past the graph's neurons are zero.

    Args:
        x: node rows ``[B N, C]``.
        edge_attr: edge rows ``[B E, C]``.
        widths: the layout ``(d_0, ..., d_L)``.
        fixed: ``(max_inputs, max_outputs)``, or ``None``.

    Returns:
        The folded :class:`WeightSpace` of dense blocks.
    """
    C, L = x.shape[1], len(widths) - 1
    sizes = [d_in * d_out for d_in, d_out in zip(widths, widths[1:])]
    B = x.shape[0] // sum(widths)
    nodes = list(x.reshape(B, -1, C).split(list(widths), dim=1))
    edges = [block.unflatten(1, (d_out, d_in)) for block, d_in, d_out
             in zip(edge_attr.reshape(B, -1, C).split(sizes, dim=1), widths, widths[1:])]
    if fixed is None:
        return WeightSpace(nodes, edges, None)
    (max_inputs, max_outputs), (d_0, d_L) = fixed, (widths[0], widths[L])
    check_fixed(d_0, d_L, fixed)
    rows = F.pad(edges[0].flatten(2), (0, (max_inputs - d_0) * C))  # [B, d_1, max_inputs C]
    cols = F.pad(edges[L - 1].transpose(1, 2).flatten(2), (0, (max_outputs - d_L) * C))  # [B, d_{L-1}, max_outputs C]
    hidden = nodes[1:L]
    hidden[0] = torch.cat([hidden[0], rows], dim=2)
    hidden[-1] = torch.cat([hidden[-1], cols], dim=2)
    graph = torch.cat([F.pad(nodes[0].flatten(1), (0, (max_inputs - d_0) * C)),
                       F.pad(nodes[L].flatten(1), (0, (max_outputs - d_L) * C))], dim=1)
    return WeightSpace(hidden, edges[1 : L - 1], graph)


def zero_channels(state: Tensor, start: int, stop: int) -> Tensor:
    """``state`` with channels ``[start, stop)`` set to zero (a copy; ``state`` itself when the range is empty).

    Args:
        state: ``[..., width]``.
        start: first channel zeroed.
        stop: channel after the last one zeroed.

    Returns:
        ``[..., width]``.
    """
    if stop <= start:
        return state
    return torch.cat([state[..., :start], state.new_zeros(*state.shape[:-1], stop - start), state[..., stop:]], dim=-1)


def dense_refold(space: WeightSpace, widths: Sequence[int], fixed: Optional[tuple[int, int]],
                 channels: int) -> WeightSpace:
    """``dense_fold(*dense_unfold(space))`` without unfolding: the folded input/output slots past the
    graphs' neurons (which a layer's output fills) set back to zero, every other tensor as it is.

    Args:
        space: a dense folded :class:`WeightSpace`, a layer's output.
        widths: the layout ``(d_0, ..., d_L)``.
        fixed: ``(max_inputs, max_outputs)``, or ``None`` (then ``space`` is returned).
        channels: ``C``.

    Returns:
        The :class:`WeightSpace` with the empty slots zero.
    """
    if fixed is None:
        return space
    C, (max_inputs, max_outputs), (d_0, d_L) = channels, fixed, (widths[0], widths[-1])
    nodes = list(space.nodes)
    nodes[0] = zero_channels(nodes[0], (1 + d_0) * C, (1 + max_inputs) * C)
    width = nodes[-1].shape[-1]
    nodes[-1] = zero_channels(nodes[-1], width - (max_outputs - d_L) * C, width)
    graph = zero_channels(zero_channels(space.graph, d_0 * C, max_inputs * C),
                          (max_inputs + d_L) * C, (max_inputs + max_outputs) * C)
    return WeightSpace(nodes, space.edges, graph)


def dense_unfold(space: WeightSpace, widths: Sequence[int], fixed: Optional[tuple[int, int]],
                 channels: int) -> tuple[Tensor, Tensor]:
    """Inverse of :func:`dense_fold`: node features ``[B N, C]`` and edge features ``[B E, C]``.

    Args:
        space: a dense folded :class:`WeightSpace`.
        widths: the layout ``(d_0, ..., d_L)``.
        fixed: the ``fixed`` it was folded with.
        channels: ``C``.

    Returns:
        ``(x [B N, C], edge_attr [B E, C])``.
    """
    C, L = channels, len(widths) - 1
    nodes = [state[..., :C] for state in space.nodes]
    edges = list(space.edges)
    if fixed is not None:
        (max_inputs, max_outputs), (d_0, d_L) = fixed, (widths[0], widths[L])
        B = space.graph.shape[0]
        first = space.nodes[0][..., C : C + d_0 * C].unflatten(2, (d_0, C))
        last = space.nodes[-1][..., -max_outputs * C :][..., : d_L * C]
        nodes = [space.graph[:, : d_0 * C].view(B, d_0, C), *nodes,
                 space.graph[:, max_inputs * C : (max_inputs + d_L) * C].view(B, d_L, C)]
        edges = [first, *edges, last.unflatten(2, (d_L, C)).transpose(1, 2)]
    x = torch.cat(nodes, dim=1).flatten(0, 1)
    edge_attr = torch.cat([block.flatten(1, 2) for block in edges], dim=1).flatten(0, 1)
    return x, edge_attr


class TermMixer(nn.Module):
    r"""Linear map from a site's pooled terms to its output: :math:`y = s \sum_g (A_g t_g + c_g)`.

    ``sources`` names where the terms live: ``"self"`` (rows of the site), ``"target"`` /
    ``"source"`` (rows of the edge's end nodes, mapped per node then gathered per edge, so the
    cost is per node), ``"graph"`` (per graph, broadcast). The terms of one source and group
    ``g`` are concatenated and mapped by one matrix :math:`A_g`.

    * ``parameterisation="terms"`` (NFN): one group, i.e. one matrix per pooled term, and one
      bias; initialised uniformly with bound :math:`1/\sqrt{\text{fan-in of all terms}}`.
    * ``parameterisation="blocks"`` (DWS): the terms read from edges and from nodes form two
      blocks (DWS's weight-to-* and bias-to-* blocks), each with its own matrices and bias,
      initialised as DWS (Xavier normal times :math:`\sqrt{2\,\text{fan-in}/\text{fan-out}}`, tiny
      bias); the sum is normalised by ``scale = 1 / (number of parameter matrices)``.

    Args:
        sources: per source (``"self"``, ``"target"``, ``"source"``, ``"graph"``), its terms in order,
            each ``(kind, width)`` with kind ``"edge"`` or ``"node"`` (the input it pools).
        out_width: width of the output.
        parameterisation: ``"terms"`` or ``"blocks"``.
        scale: the factor ``s`` of the sum.
    """

    def __init__(self, sources: dict[str, list[Term]], out_width: int, parameterisation: str, scale: float = 1.0):
        super().__init__()
        if parameterisation not in PARAMETERISATIONS:
            raise ValueError(f"parameterisation={parameterisation!r}: expected one of {PARAMETERISATIONS}")
        self.parameterisation = parameterisation
        self.scale = scale
        self.fan_in = sum(width for terms in sources.values() for _, width in terms)
        groups = ("edge", "node") if parameterisation == "blocks" else ("all",)
        # per source, the runs (group, first, last column) of its groups' matrices in the order of its terms
        self.runs: dict[str, list[tuple[str, int, int]]] = {}
        self.maps = nn.ModuleDict()
        for source, terms in sources.items():
            used = dict.fromkeys(groups, 0)
            runs = self.runs[source] = []
            for kind, width in terms:
                group = "all" if parameterisation == "terms" else kind
                if runs and runs[-1][0] == group:
                    runs[-1] = (group, runs[-1][1], runs[-1][2] + width)
                else:
                    runs.append((group, used[group], used[group] + width))
                used[group] += width
            for group, width in used.items():
                if width:
                    self.maps[f"{source}_{group}"] = nn.Linear(width, out_width, bias=False)
        self.bias = nn.ParameterDict({group: nn.Parameter(torch.empty(out_width)) for group in groups})
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in self.maps.values():
            if self.parameterisation == "terms":
                bound = 1.0 / math.sqrt(self.fan_in)
                nn.init.uniform_(lin.weight, -bound, bound)
            else:
                gain = math.sqrt(2.0 * lin.in_features / lin.out_features)
                nn.init.xavier_normal_(lin.weight, gain=gain)
        for bias in self.bias.values():
            bound = 1.0 / math.sqrt(self.fan_in) if self.parameterisation == "terms" else 1e-4
            nn.init.uniform_(bias, -bound, bound)

    def forward(self, inputs: dict[str, tuple[Tensor, Optional[Tensor]]]) -> Tensor:
        """``inputs[source] = (terms [..., width], index)``: row ``index[k]`` feeds output row ``k``.

        ``index=None``: the terms are used as they are and broadcast against each other (the
        dense path passes ``[B, d_out, 1, w]``, ``[B, 1, d_in, w]``, ...). Each source costs one
        matmul (the groups' matrices are assembled into one, the scale folded in). The other
        parts are summed from the smallest up, so each broadcast is paid once at the output's
        size, and the ungathered source with the most rows (the site's own terms) is added by
        its matmul (``addmm``): one output-sized tensor fewer.
        """
        weights = {}
        for source, runs in self.runs.items():
            blocks = [self.maps[f"{source}_{group}"].weight[:, first:last] for group, first, last in runs]
            weight = blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=1)
            weights[source] = weight if self.scale == 1.0 else self.scale * weight
        largest = max((source for source in weights if inputs[source][1] is None),
                      key=lambda source: inputs[source][0].numel() // inputs[source][0].shape[-1])
        parts = [self.scale * sum(self.bias.values())]
        for source, weight in weights.items():
            terms, index = inputs[source]
            if source != largest:
                mapped = F.linear(terms, weight)
                parts.append(mapped if index is None else mapped[index])
        terms, rest = inputs[largest][0], sum(sorted(parts, key=Tensor.numel))
        shape = torch.broadcast_shapes(rest.shape, (*terms.shape[:-1], rest.shape[-1]))
        return torch.addmm(rest.expand(shape).reshape(-1, shape[-1]), terms.reshape(-1, terms.shape[-1]),
                           weights[largest].t()).view(shape)


class NPLinear(nn.Module):
    r"""Linear layer equivariant to the permutations of every layer's neurons (NFN's NP group).

    On a :class:`WeightSpace` with node layers ``k = 0..K`` (state :math:`x_i` of width
    ``w_k``), edge layers ``l = 0..K-1`` (:math:`e_{ij}`, ``C`` channels, from layer ``l`` to
    ``l + 1``) and an optional graph state :math:`g`; with :math:`\bar e_{i\cdot}` /
    :math:`\bar e_{\cdot i}` the means of the edges into / out of neuron :math:`i`,
    :math:`t_i = [x_i, \bar e_{i\cdot}, \bar e_{\cdot i}]` and :math:`G` the per-graph means of
    every node and edge layer, concatenated with :math:`g`:

    .. math::
        x_i' &= A_k t_i + B_k G + c_k \quad\text{(neuron of layer } k)\\
        e_{ij}' &= A_l e_{ij} + T_l t_i + S_l t_j + B_l G + c_l
        \quad\text{(edge } j \to i \text{ of layer } l)\\
        g' &= B_g G + c_g

    Every orbit basis matrix of the commutant is a combination of these terms, so with one
    channel the layer spans the full space of equivariant linear maps
    (``tests/test_equivariant_space.py`` checks the rank).

    Args:
        node_parts: per node layer, the ``(kind, width)`` parts of its state (kinds matter for
            ``parameterisation="blocks"``).
        channels: ``C``, the width of edge features.
        graph_parts: the parts of the graph state (empty: none).
        parameterisation: ``"terms"`` (NFN) or ``"blocks"`` (DWS), see :class:`TermMixer`.
        scale: factor on every output (DWS: ``1 / (2L)``).
    """

    def __init__(self, node_parts: Sequence[Sequence[Term]], channels: int, graph_parts: Sequence[Term],
                 parameterisation: str, scale: float = 1.0):
        super().__init__()
        self.node_parts = [list(parts) for parts in node_parts]
        self.channels = channels
        self.num_edge_layers = len(node_parts) - 1
        pooled = ([part for parts in self.node_parts for part in parts] + [("edge", channels)] * self.num_edge_layers
                  + list(graph_parts))
        self.node_mixers = nn.ModuleList(
            TermMixer({"self": self.neuron_terms(k), "graph": pooled}, sum(width for _, width in parts),
                      parameterisation, scale)
            for k, parts in enumerate(self.node_parts)
        )
        self.edge_mixers = nn.ModuleList(
            TermMixer({"self": [("edge", channels)], "target": self.neuron_terms(l + 1),
                       "source": self.neuron_terms(l), "graph": pooled}, channels, parameterisation, scale)
            for l in range(self.num_edge_layers)
        )
        graph_width = sum(width for _, width in graph_parts)
        self.graph_mixer = TermMixer({"graph": pooled}, graph_width, parameterisation, scale) if graph_width else None

    def neuron_terms(self, k: int) -> list[Term]:
        """Terms read at a neuron of layer ``k``: its state parts, then its incoming/outgoing edge means."""
        incoming = [("edge", self.channels)] if k > 0 else []
        outgoing = [("edge", self.channels)] if k < self.num_edge_layers else []
        return self.node_parts[k] + incoming + outgoing

    def reset_parameters(self) -> None:
        for mixer in [*self.node_mixers, *self.edge_mixers, self.graph_mixer]:
            if mixer is not None:
                mixer.reset_parameters()

    def forward(self, space: WeightSpace, index: LayerIndex, num_graphs: int) -> WeightSpace:
        """The general path: ``space`` in rows, ``index`` covering exactly its layers; means are scatters."""
        K = self.num_edge_layers
        terms = []
        for k, state in enumerate(space.nodes):
            rows = state.shape[0]
            incoming = [scatter(space.edges[k - 1], index.target_row[k - 1], 0, rows, "mean")] if k > 0 else []
            outgoing = [scatter(space.edges[k], index.source_row[k], 0, rows, "mean")] if k < K else []
            terms.append(torch.cat([state, *incoming, *outgoing], dim=1))
        pooled = torch.cat(
            [scatter(state, graph, 0, num_graphs, "mean") for state, graph in zip(space.nodes, index.node_graph)]
            + [scatter(edges, graph, 0, num_graphs, "mean") for edges, graph in zip(space.edges, index.edge_graph)]
            + ([] if space.graph is None else [space.graph]),
            dim=1,
        )
        nodes = [mixer({"self": (terms[k], None), "graph": (pooled, index.node_graph[k])})
                 for k, mixer in enumerate(self.node_mixers)]
        edges = [
            mixer({"self": (space.edges[l], None), "target": (terms[l + 1], index.target_row[l]),
                   "source": (terms[l], index.source_row[l]), "graph": (pooled, index.edge_graph[l])})
            for l, mixer in enumerate(self.edge_mixers)
        ]
        return WeightSpace(nodes, edges, self.graph_state(pooled))

    def forward_dense(self, space: WeightSpace) -> WeightSpace:
        """The dense path: ``space`` in blocks (see :class:`WeightSpace`); means over the axes of the
        ``[B, d_{l+1}, d_l, C]`` edge blocks, terms broadcast."""
        incoming = [edges.mean(2) for edges in space.edges]
        outgoing = [edges.mean(1) for edges in space.edges]
        terms = [torch.cat([state, *incoming[k - 1 : k], *outgoing[k : k + 1]], dim=2)
                 for k, state in enumerate(space.nodes)]
        # a layer's mean is the mean of its column means: its backward reads the small [B, d_l, C] blocks
        pooled = torch.cat([state.mean(1) for state in space.nodes] + [column.mean(1) for column in outgoing]
                           + ([] if space.graph is None else [space.graph]), dim=1)
        nodes = [mixer({"self": (terms[k], None), "graph": (pooled[:, None], None)})
                 for k, mixer in enumerate(self.node_mixers)]
        edges = [mixer({"self": (space.edges[l], None), "target": (terms[l + 1][:, :, None], None),
                        "source": (terms[l][:, None], None), "graph": (pooled[:, None, None], None)})
                 for l, mixer in enumerate(self.edge_mixers)]
        return WeightSpace(nodes, edges, self.graph_state(pooled))

    def graph_state(self, pooled: Tensor) -> Optional[Tensor]:
        """The new graph state from the pooled terms ``[B, width]`` (``None`` without one)."""
        return None if self.graph_mixer is None else self.graph_mixer({"graph": (pooled, None)})


class EquivariantLinear(MetanetLayer):
    r"""Linear layer on the parameter graph equivariant to neuron permutations: fold, NP layer, unfold.

    ``symmetry="np"``: :class:`NPLinear` on layers ``0..L``. ``symmetry="hidden"``: input and
    output neurons folded into channels (:func:`fold`), :class:`NPLinear` on the hidden layers
    ``1..L-1``, then :func:`unfold`. ``activation`` applies ReLU and dropout to the output, as
    between the layers of DWS and NFN. ``forward`` runs on feature rows with the batch's
    :class:`~neuralgraph.nn.context.LayerIndex`; ``forward_dense`` on the folded blocks of a
    batch of one layout, which :meth:`WeightSpaceMetanet.dense_stack` folds once for all layers.

    Args:
        channels (int): width ``C`` of node and edge features (in and out).
        num_weight_layers (int): depth ``L`` of the networks read (every graph must have it).
        symmetry (str): ``"hidden"`` or ``"np"``.
        parameterisation (str): ``"terms"`` (NFN) or ``"blocks"`` (DWS), see :class:`TermMixer`.
        max_inputs, max_outputs (int, optional): input/output positions kept apart (``"hidden"`` only).
            (default: ``0``)
        activation (bool, optional): apply ReLU (and dropout) after the linear map. (default: ``True``)
        dropout (float, optional): dropout probability after the activation. (default: ``0.0``)

    Shapes:
        ``forward``: ``x`` ``[N, C]``, ``edge_index`` ``[2, E]``, ``edge_attr`` ``[E, C]``, ``layers`` the
        :class:`~neuralgraph.nn.context.LayerIndex` of the batch -> ``([N, C], [E, C])``.
        ``forward_dense``: a folded :class:`WeightSpace` of blocks and the node-layer ``widths`` -> alike.
    """

    context = ("layers", "num_graphs")

    def __init__(
        self,
        channels: int,
        num_weight_layers: int,
        symmetry: str,
        parameterisation: str,
        max_inputs: int = 0,
        max_outputs: int = 0,
        activation: bool = True,
        dropout: float = 0.0,
    ):
        super().__init__()
        L, C = num_weight_layers, channels
        if symmetry == "hidden":
            if L < 2 or max_inputs < 1 or max_outputs < 1:
                raise ValueError(
                    f"symmetry='hidden' needs num_weight_layers >= 2 (a hidden layer to permute), got {L}, "
                    f"and max_inputs, max_outputs >= 1, got {max_inputs}, {max_outputs}"
                )
            self.fixed: Optional[tuple[int, int]] = (max_inputs, max_outputs)
            node_parts = [[("node", C)] for _ in range(L - 1)]
            node_parts[0].append(("edge", max_inputs * C))
            node_parts[-1].append(("edge", max_outputs * C))
            graph_parts = [("node", (max_inputs + max_outputs) * C)]
        elif symmetry == "np":
            if L < 1 or max_inputs or max_outputs:
                raise ValueError(
                    f"symmetry='np' needs num_weight_layers >= 1, got {L}, and permutes inputs and outputs, "
                    f"so max_inputs/max_outputs must be 0, got {max_inputs}, {max_outputs}"
                )
            self.fixed = None
            node_parts, graph_parts = [[("node", C)] for _ in range(L + 1)], []
        else:
            raise ValueError(f"symmetry={symmetry!r}: expected 'hidden' or 'np'")
        self.channels = channels
        self.num_weight_layers = L
        self.symmetry = symmetry
        self.activation = activation
        self.dropout = nn.Dropout(dropout)
        scale = 1.0 / (2 * L) if parameterisation == "blocks" else 1.0
        self.np_linear = NPLinear(node_parts, C, graph_parts, parameterisation, scale)

    def reset_parameters(self) -> None:
        self.np_linear.reset_parameters()

    def check_layers(self, layers: Optional[LayerIndex]) -> None:
        """ValueError unless ``layers`` is given and every graph has ``num_weight_layers`` weight layers."""
        if layers is None:
            raise ValueError("EquivariantLinear needs layers=LayerIndex (encoder option layer_index=True, "
                             "or neuralgraph.nn.context.layer_index)")
        if layers.depths != (self.num_weight_layers,):
            raise ValueError(
                f"graph layouts have {list(layers.depths)} weight layers but the layer was built for "
                f"num_weight_layers={self.num_weight_layers} (its parameters are per layer)"
            )

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, *, layers: Optional[LayerIndex],
                num_graphs: int) -> tuple[Tensor, Tensor]:
        """``layers``: the nodes and edges of ``(x, edge_index, edge_attr)`` grouped by layer."""
        self.check_layers(layers)
        L = self.num_weight_layers
        permuted = layers if self.fixed is None else restrict(layers, 1, L - 1)
        space = self.np_linear(fold(x, edge_attr, layers, num_graphs, self.fixed), permuted, num_graphs)
        x, edge_attr = unfold(space, layers, self.fixed, self.channels, x.shape[0], edge_attr.shape[0])
        if self.activation:
            x, edge_attr = self.dropout(torch.relu(x)), self.dropout(torch.relu(edge_attr))
        return x, edge_attr

    def forward_dense(self, space: WeightSpace, widths: Sequence[int]) -> WeightSpace:
        """The layer on the folded dense blocks of a canonical batch of node-layer ``widths`` (:func:`dense_fold`),
        its output folded again (:func:`dense_refold`): what ``forward`` computes, without unfolding to rows.
        ReLU and dropout act on every block (an unfolded element is one folded element)."""
        space = dense_refold(self.np_linear.forward_dense(space), widths, self.fixed, self.channels)
        if not self.activation:
            return space
        nodes, edges = ([self.dropout(torch.relu(t)) for t in part] for part in (space.nodes, space.edges))
        return WeightSpace(nodes, edges, None if space.graph is None else self.dropout(torch.relu(space.graph)))


class WeightSpaceMetanet(Metanet):
    """Encoder, then ``num_layers`` :class:`EquivariantLinear` layers with ReLU between.

    Subclasses set ``symmetry`` and ``parameterisation``. The last layer has no activation, so
    the heads read its linear output. ``num_weight_layers`` is the depth of the networks read
    (default 3, the project's INRs): the per-layer parameters are sized for it and every graph
    must have exactly it; ``max_layers`` sizes the encoder's embeddings, as for every metanet.
    ``max_inputs``/``max_outputs`` are the input/output positions a ``"hidden"`` model keeps
    apart (default 2 and 1, the project's INRs); an ``"np"`` model permutes them and takes neither.

    Args:
        hidden_dim: channels of every weight and bias (node and edge features).
        num_layers: number of :class:`~neuralgraph.nn.equivariant_linear.EquivariantLinear` layers
            (ReLU between them, none after the last).
        dropout: dropout probability after each activation.
        num_weight_layers: depth ``L`` of the networks read; every graph must have exactly ``L``
            weight layers, and the layers' per-layer parameters are sized for it. (default: ``3``,
            the project's INRs; ``build_metanet(..., spec=spec)`` fills it in)
        max_inputs: input positions a ``"hidden"`` model tells apart (default ``2``); an ``"np"``
            model permutes inputs and takes ``0``.
        max_outputs: output positions a ``"hidden"`` model tells apart (default ``1``); ``0`` for
            ``"np"``.
        **encoder_options: keyword-only, passed on to :class:`~neuralgraph.nn.base.Metanet`, which
            documents each: ``edge_features``, ``positional``, ``fourier_features``, ``fourier_scale``,
            ``max_layers``, ``max_node_types``, ``probe_features``, ``gradient_features``, ``network_activation``,
            ``w0``, ``node_activations``, ``skip_edges`` (the encoder's) and ``checkpoint``;
            ``edge_chunk`` is accepted and has no effect (the layers run whole), ``edge_dtype`` is refused.
    """

    uses_layer_index = True
    parameterisation: ClassVar[str] = "terms"
    reads_general_graphs = False  # chains of layers of one depth (spec_arguments refuses others)

    def __init__(
        self,
        hidden_dim: int = 32,
        num_layers: int = 4,
        dropout: float = 0.0,
        *,
        num_weight_layers: int = 3,
        max_inputs: Optional[int] = None,
        max_outputs: Optional[int] = None,
        **encoder_options,
    ):
        super().__init__(hidden_dim, num_layers, dropout, **encoder_options)
        if num_weight_layers > self.encoder.max_layers:
            raise ValueError(f"num_weight_layers={num_weight_layers} exceeds max_layers={self.encoder.max_layers}, "
                             f"the layers the encoder embeds; raise max_layers")
        self.num_weight_layers = num_weight_layers
        defaults = (2, 1) if self.symmetry == "hidden" else (0, 0)
        max_inputs = defaults[0] if max_inputs is None else max_inputs
        max_outputs = defaults[1] if max_outputs is None else max_outputs
        self.layers.extend(
            EquivariantLinear(
                hidden_dim,
                num_weight_layers,
                self.symmetry,
                self.parameterisation,
                max_inputs,
                max_outputs,
                activation=i < num_layers - 1,
                dropout=dropout,
            )
            for i in range(num_layers)
        )

    @classmethod
    def spec_arguments(cls, spec: GraphSpec) -> dict[str, Any]:
        """Besides the base's: the depth of the networks read and, for ``"hidden"``, the input and
        output widths it keeps apart. Graphs with skip edges or of several depths are refused."""
        if spec.skip_edges:
            raise ValueError(f"{cls.name}: reads chains of layers only (DWS/NFN weight spaces); the data's graphs "
                             "have skip or shortcut edges: use gmn, ng_gnn, ng_t or nft")
        if len(set(spec.depths)) != 1:
            raise ValueError(f"{cls.name}: every network must have one depth; the data's layouts have "
                             f"{sorted(set(spec.depths))} weight layers")
        arguments = {**super().spec_arguments(spec), "num_weight_layers": spec.depths[0]}
        if cls.symmetry == "hidden":
            arguments["max_inputs"] = max(layout[0] for layout in spec.layouts)
            arguments["max_outputs"] = max(layout[-1] for layout in spec.layouts)
        return arguments

    def dense_stack(self, node: Tensor, edge: Tensor, context: GraphContext) -> tuple[Tensor, Tensor]:
        """The layers on the dense blocks of a canonical batch: folded once (:func:`dense_fold`), every layer's
        ``forward_dense``, unfolded once (:func:`dense_unfold`)."""
        widths, first = context.widths, self.layers[0]
        if len(widths) - 1 != self.num_weight_layers:
            raise ValueError(f"graph layouts have {[len(widths) - 1]} weight layers but the layer was built for "
                             f"num_weight_layers={self.num_weight_layers} (its parameters are per layer)")
        check_dense_rows(type(self).__name__, node, edge, widths)
        space = dense_fold(node, edge, widths, first.fixed)
        for layer in self.layers:
            space = layer.forward_dense(space, widths)
        return dense_unfold(space, widths, first.fixed, self.hidden_dim)
