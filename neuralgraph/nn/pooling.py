r"""Pooled quantities of a parameter graph and the linear equivariant layer built from them.

Shared by :mod:`~neuralgraph.nn.dws`, :mod:`~neuralgraph.nn.nfn_hnp` and :mod:`~neuralgraph.nn.nfn_np`.
A linear map on weight space that commutes with a group of neuron permutations is a sum of
terms, one per orbit of the group on pairs of coordinates (see
:mod:`neuralgraph.theory.equivariant_space`). On the graph, every such term reads one of these
pooled quantities, all computed with :func:`neuralgraph.scatter.scatter` over graph indices:

* the edge itself ``e_ij``, the state ``x_i`` of a neuron (its bias channels);
* per neuron: the mean of its incoming edges (row pool of ``W_l``) and of its outgoing edges
  (column pool of ``W_{l+1}``), read at both ends of an edge;
* per graph and layer: the mean of every node layer and of every edge layer (global pools).

**Permuted layers.** For the NP group every layer ``0..L`` is a permuted set and the terms
above are the whole basis. For the hidden-neuron group the input and output neurons are *not*
permuted, so a term may depend on their positions arbitrarily: each input neuron ``j`` and
output neuron ``i`` is folded into channels, as DWS does. The edges of ``W_1`` become a
``d_0 C``-channel state of their hidden target (its row of ``W_1``), those of ``W_L`` a
``d_L C``-channel state of their hidden source (its column of ``W_L``), and the input and
output neurons a ``(d_0 + d_L) C``-channel state of the graph. What remains is the NP case on
the hidden layers ``1..L-1`` only, with wider states; unfolding the outputs gives back one
feature row per node and edge. Input/output positions are ``node_index`` slots, so graphs
may have fewer than ``max_inputs``/``max_outputs`` of them (the missing slots stay zero).

**Means, not sums.** Every pool is a mean (as NFN offers), so the scale of a term does not
grow with the width of a layer, and one model can read networks of varying widths. For a
fixed layout a mean is a sum times a constant, so the spanned space is the same.

**Parameters per layer.** Each node layer, edge layer and the graph state have their own maps:
the model is built for one depth (``num_weight_layers``), every graph must have exactly it.
"""
from __future__ import annotations

import math
from typing import ClassVar, NamedTuple, Optional

import torch
from torch import Tensor, nn

from neuralgraph.nn.base import Metanet, MetanetLayer
from neuralgraph.scatter import scatter

PARAMETERISATIONS = ("terms", "blocks")
Term = tuple[str, int]  # (kind: "edge" or "node", width)


def fold(values: Tensor, site: Tensor, position: Tensor, num_sites: int, num_positions: int) -> Tensor:
    """Place row ``k`` of ``values`` in slot ``position[k]`` of ``site[k]``: ``[num_sites, num_positions * C]``.

    Turns a set of fixed (unpermuted) neurons into channels; every (site, position) pair must
    occur at most once, so the scatter sum only places values.
    """
    placed = scatter(values, site * num_positions + position, 0, num_sites * num_positions, "sum")
    return placed.view(num_sites, num_positions * values.shape[1])


def unfold(folded: Tensor, site: Tensor, position: Tensor, channels: int) -> Tensor:
    """Inverse of :func:`fold`: row ``k`` is slot ``position[k]`` of ``folded[site[k]]``."""
    return folded.view(folded.shape[0], -1, channels)[site, position]


class GraphIndex(NamedTuple):
    """Index sets of a batch that every pool uses, computed once per forward."""

    node_graph: Tensor  # [N] graph of each node
    nodes: list[Tensor]  # nodes[k]: ids of the nodes in layer k (k = 0..L)
    edges: list[Tensor]  # edges[l]: ids of the edges with edge_layer == l (l = 0..L-1)
    row_in_layer: Tensor  # [N] position of each node in nodes[its layer]
    num_graphs: int


def graph_index(node_layer: Tensor, edge_layer: Tensor, batch: Tensor, count: int, num_weight_layers: int) -> GraphIndex:
    """Node and edge ids per layer; error when a graph's depth is not ``num_weight_layers``."""
    depths = torch.unique(scatter(node_layer, batch, 0, count, "max")).tolist()
    if depths != [num_weight_layers]:
        raise ValueError(
            f"graph layouts have {depths} weight layers but the layer was built for "
            f"num_weight_layers={num_weight_layers} (its parameters are per layer)"
        )
    nodes = [(node_layer == k).nonzero().squeeze(1) for k in range(num_weight_layers + 1)]
    row_in_layer = torch.empty_like(node_layer)
    for ids in nodes:
        row_in_layer[ids] = torch.arange(len(ids), device=ids.device)
    return GraphIndex(
        node_graph=batch,
        nodes=nodes,
        edges=[(edge_layer == l).nonzero().squeeze(1) for l in range(num_weight_layers)],
        row_in_layer=row_in_layer,
        num_graphs=count,
    )


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
    """

    def __init__(self, sources: dict[str, list[Term]], out_width: int, parameterisation: str, scale: float = 1.0):
        super().__init__()
        if parameterisation not in PARAMETERISATIONS:
            raise ValueError(f"parameterisation={parameterisation!r}: expected one of {PARAMETERISATIONS}")
        self.parameterisation = parameterisation
        self.scale = scale
        self.fan_in = sum(width for terms in sources.values() for _, width in terms)
        groups = ("edge", "node") if parameterisation == "blocks" else ("all",)
        self.columns: dict[str, dict[str, Tensor]] = {}
        self.maps = nn.ModuleDict()
        for source, terms in sources.items():
            kinds = [kind for kind, width in terms for _ in range(width)]
            for group in groups:
                cols = [c for c, kind in enumerate(kinds) if group in ("all", kind)]
                if cols:
                    self.columns.setdefault(source, {})[group] = torch.tensor(cols)
                    self.maps[f"{source}_{group}"] = nn.Linear(len(cols), out_width, bias=False)
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
        """``inputs[source] = (terms [rows, width], index)``: row ``index[k]`` feeds output row ``k``."""
        out = sum(self.bias.values())
        for source, by_group in self.columns.items():
            terms, index = inputs[source]
            for group, cols in by_group.items():
                mapped = self.maps[f"{source}_{group}"](terms if len(cols) == terms.shape[1] else terms[:, cols.to(terms.device)])
                out = out + (mapped if index is None else mapped[index])
        return self.scale * out


class PooledEquivariantLinear(MetanetLayer):
    r"""Linear layer equivariant to neuron permutations, emulated on the graph with pooled terms.

    For a permuted layer structure (all layers for ``symmetry="np"``, the hidden layers after
    folding the fixed neurons for ``"hidden"``; see the module docstring), with :math:`x_i` the
    state of neuron :math:`i`, :math:`\bar e_{i\cdot}` / :math:`\bar e_{\cdot i}` the means of
    its incoming / outgoing edges and :math:`G` the per-graph means of every layer:

    .. math::
        x_i' &= A_k [x_i, \bar e_{i\cdot}, \bar e_{\cdot i}] + B_k G + c_k
        \quad\text{(neuron of layer } k)\\
        e_{ij}' &= A_l e_{ij} + T_l [x_i, \bar e_{i\cdot}, \bar e_{\cdot i}]
            + S_l [x_j, \bar e_{j\cdot}, \bar e_{\cdot j}] + B_l G + c_l
        \quad\text{(edge of layer } l)

    (and, for ``"hidden"``, the folded input/output neurons :math:`g' = B_g G + c_g`). Every
    orbit basis matrix of the commutant is a combination of these terms, so one layer with one
    channel spans the full space of equivariant linear maps
    (``tests/test_equivariant_space.py`` checks the rank). ``activation`` applies ReLU and
    dropout to the output, as between the layers of DWS and NFN.

    Args:
        channels: width ``C`` of node and edge features (in and out).
        num_weight_layers: depth ``L`` of the networks read (every graph must have it).
        symmetry: ``"hidden"`` or ``"np"``.
        parameterisation: ``"terms"`` (NFN) or ``"blocks"`` (DWS), see :class:`TermMixer`.
        max_inputs, max_outputs: input/output positions kept apart (``"hidden"`` only).
        activation: apply ReLU (and dropout) after the linear map.
        dropout: dropout probability after the activation.
    """

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
        if symmetry not in ("hidden", "np"):
            raise ValueError(f"symmetry={symmetry!r}: expected 'hidden' or 'np'")
        L = num_weight_layers
        if symmetry == "hidden" and (L < 2 or max_inputs < 1 or max_outputs < 1):
            raise ValueError(
                f"symmetry='hidden' needs num_weight_layers >= 2 (a hidden layer to permute), got {L}, "
                f"and max_inputs, max_outputs >= 1, got {max_inputs}, {max_outputs}"
            )
        if symmetry == "np" and (L < 1 or max_inputs or max_outputs):
            raise ValueError(
                f"symmetry='np' needs num_weight_layers >= 1, got {L}, and permutes inputs and outputs, "
                f"so max_inputs/max_outputs must be 0, got {max_inputs}, {max_outputs}"
            )
        self.channels = channels
        self.num_weight_layers = L
        self.symmetry = symmetry
        self.max_inputs = max_inputs
        self.max_outputs = max_outputs
        self.activation = activation
        self.dropout = nn.Dropout(dropout)
        C = channels
        first, last = (0, L) if symmetry == "np" else (1, L - 1)
        self.node_layers = list(range(first, last + 1))
        self.edge_layers = list(range(first, last))  # edge_layer l joins node layers l and l + 1
        self.node_parts: dict[int, list[Term]] = {
            k: [("node", C)]
            + ([("edge", max_inputs * C)] if symmetry == "hidden" and k == 1 else [])
            + ([("edge", max_outputs * C)] if symmetry == "hidden" and k == L - 1 else [])
            for k in self.node_layers
        }
        self.graph_parts: list[Term] = [("node", (max_inputs + max_outputs) * C)] if symmetry == "hidden" else []
        pooled_graph = (
            [part for k in self.node_layers for part in self.node_parts[k]]
            + [("edge", C)] * len(self.edge_layers)
            + self.graph_parts
        )
        scale = 1.0 / (2 * L) if parameterisation == "blocks" else 1.0
        self.node_mixers = nn.ModuleDict(
            {
                str(k): TermMixer(
                    {"self": self.neuron_terms(k), "graph": pooled_graph},
                    sum(width for _, width in self.node_parts[k]),
                    parameterisation,
                    scale,
                )
                for k in self.node_layers
            }
        )
        self.edge_mixers = nn.ModuleDict(
            {
                str(l): TermMixer(
                    {
                        "self": [("edge", C)],
                        "target": self.neuron_terms(l + 1),
                        "source": self.neuron_terms(l),
                        "graph": pooled_graph,
                    },
                    C,
                    parameterisation,
                    scale,
                )
                for l in self.edge_layers
            }
        )
        self.graph_mixer = (
            TermMixer({"graph": pooled_graph}, self.graph_parts[0][1], parameterisation, scale)
            if self.graph_parts
            else None
        )

    def neuron_terms(self, k: int) -> list[Term]:
        """Terms read at a neuron of layer ``k``: its state parts, then its incoming/outgoing edge means."""
        incoming = [("edge", self.channels)] if k - 1 in self.edge_layers else []
        outgoing = [("edge", self.channels)] if k in self.edge_layers else []
        return self.node_parts[k] + incoming + outgoing

    def reset_parameters(self) -> None:
        for mixer in [*self.node_mixers.values(), *self.edge_mixers.values(), self.graph_mixer]:
            if mixer is not None:
                mixer.reset_parameters()

    context = ("node_layer", "node_index", "edge_layer", "batch", "num_graphs")

    def forward(self, node: Tensor, edge_index: Tensor, edge: Tensor, *, node_layer: Tensor, node_index: Tensor,
                edge_layer: Tensor, batch: Tensor, num_graphs: int) -> tuple[Tensor, Tensor]:
        C, L = self.channels, self.num_weight_layers
        index = graph_index(node_layer, edge_layer, batch, num_graphs, L)
        src, dst = edge_index
        position = node_index
        N, B = node.shape[0], index.num_graphs

        # States of the permuted neurons (parts per layer) and of the graph (folded fixed neurons).
        states = {k: [node[index.nodes[k]]] for k in self.node_layers}
        graph_state = []
        if self.symmetry == "hidden":
            for name, nodes, limit in (("input", index.nodes[0], self.max_inputs), ("output", index.nodes[L], self.max_outputs)):
                if nodes.numel() and int(position[nodes].max()) >= limit:
                    raise ValueError(
                        f"a graph has {int(position[nodes].max()) + 1} {name} neurons but the layer keeps "
                        f"max_{name}s={limit} positions apart; raise max_{name}s"
                    )
            first, last = index.edges[0], index.edges[L - 1]
            rows = fold(edge[first], dst[first], position[src[first]], N, self.max_inputs)
            cols = fold(edge[last], src[last], position[dst[last]], N, self.max_outputs)
            states[1].append(rows[index.nodes[1]])
            states[L - 1].append(cols[index.nodes[L - 1]])
            graph_state = [
                torch.cat(
                    [
                        fold(node[index.nodes[0]], index.node_graph[index.nodes[0]], position[index.nodes[0]], B, self.max_inputs),
                        fold(node[index.nodes[L]], index.node_graph[index.nodes[L]], position[index.nodes[L]], B, self.max_outputs),
                    ],
                    dim=1,
                )
            ]

        # Row and column means of the permuted edge layers, per neuron.
        permuted_edges = torch.cat([index.edges[l] for l in self.edge_layers]) if self.edge_layers else src[:0]
        incoming = scatter(edge[permuted_edges], dst[permuted_edges], 0, N, "mean")
        outgoing = scatter(edge[permuted_edges], src[permuted_edges], 0, N, "mean")

        def neuron_terms(k: int) -> Tensor:
            nodes = index.nodes[k]
            means = ([incoming[nodes]] if k - 1 in self.edge_layers else []) + ([outgoing[nodes]] if k in self.edge_layers else [])
            return torch.cat(states[k] + means, dim=1)

        # Global pools: per graph, the mean of every part of every permuted layer.
        def graph_mean(values: Tensor, rows: Tensor) -> Tensor:
            return scatter(values, index.node_graph[rows], 0, B, "mean")

        pooled = torch.cat(
            [graph_mean(part, index.nodes[k]) for k in self.node_layers for part in states[k]]
            + [graph_mean(edge[index.edges[l]], dst[index.edges[l]]) for l in self.edge_layers]
            + graph_state,
            dim=1,
        )

        terms = {k: neuron_terms(k) for k in self.node_layers}
        node_out = node.new_zeros(N, C)
        edge_out = edge.new_zeros(edge.shape[0], C)
        for k in self.node_layers:
            nodes = index.nodes[k]
            out = self.node_mixers[str(k)]({"self": (terms[k], None), "graph": (pooled, index.node_graph[nodes])})
            node_out[nodes] = out[:, :C]
            row = index.row_in_layer
            if self.symmetry == "hidden" and k == 1:
                first = index.edges[0]
                edge_out[first] = unfold(out[:, C : C + self.max_inputs * C], row[dst[first]], position[src[first]], C)
            if self.symmetry == "hidden" and k == L - 1:
                last = index.edges[L - 1]
                edge_out[last] = unfold(out[:, -self.max_outputs * C :], row[src[last]], position[dst[last]], C)
        for l in self.edge_layers:
            edges, row = index.edges[l], index.row_in_layer
            edge_out[edges] = self.edge_mixers[str(l)](
                {
                    "self": (edge[edges], None),
                    "target": (terms[l + 1], row[dst[edges]]),
                    "source": (terms[l], row[src[edges]]),
                    "graph": (pooled, index.node_graph[dst[edges]]),
                }
            )
        if self.graph_mixer is not None:
            out = self.graph_mixer({"graph": (pooled, None)})
            for nodes, offset, limit in ((index.nodes[0], 0, self.max_inputs), (index.nodes[L], self.max_inputs * C, self.max_outputs)):
                node_out[nodes] = unfold(out[:, offset : offset + limit * C], index.node_graph[nodes], position[nodes], C)
        if self.activation:
            node_out, edge_out = self.dropout(torch.relu(node_out)), self.dropout(torch.relu(edge_out))
        return node_out, edge_out


class PooledMetanet(Metanet):
    """Encoder, then ``num_layers`` :class:`PooledEquivariantLinear` layers with ReLU between.

    Subclasses set ``symmetry`` and ``parameterisation``. The last layer has no activation, so
    the heads read its linear output. ``max_layers`` is the depth of the networks read: it sizes
    both the encoder's edge-layer embeddings and the per-layer parameters, and every graph must
    have exactly this many weight layers. ``max_inputs``/``max_outputs`` are the input/output
    positions a ``"hidden"`` model keeps apart (default 2 and 1, the project's INRs); an
    ``"np"`` model permutes them and takes neither.
    """

    parameterisation: ClassVar[str] = "terms"

    def __init__(
        self,
        hidden_dim: int = 32,
        num_layers: int = 4,
        dropout: float = 0.0,
        *,
        max_layers: int = 3,
        max_inputs: Optional[int] = None,
        max_outputs: Optional[int] = None,
        **encoder_options,
    ):
        super().__init__(hidden_dim, num_layers, dropout, max_layers=max_layers, **encoder_options)
        defaults = (2, 1) if self.symmetry == "hidden" else (0, 0)
        max_inputs = defaults[0] if max_inputs is None else max_inputs
        max_outputs = defaults[1] if max_outputs is None else max_outputs
        self.layers.extend(
            PooledEquivariantLinear(
                hidden_dim,
                max_layers,
                self.symmetry,
                self.parameterisation,
                max_inputs,
                max_outputs,
                activation=i < num_layers - 1,
                dropout=dropout,
            )
            for i in range(num_layers)
        )
