"""``GraphSpec``: the facts about a set of parameter graphs that a metanetwork is built for.

A metanetwork's shapes and normalisations depend on the data it reads: the edge feature width
(1 for an MLP, 9 for 3x3 kernels), the depth of the networks (the per-layer parameters of DWS
and NFN), the input and output widths a ``"hidden"`` model keeps apart, whether graphs carry
skip edges or per-network activations, and PNA's degree histogram. ``GraphSpec.of(graphs)``
reads them from graphs (a data module's training split), and ``build_metanet(name, spec=spec)``
turns them into the architecture's constructor arguments (``Metanet.spec_arguments``), so no
config restates a data fact. It serialises to a plain dict (``to_dict``/``from_dict``).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional

import torch
from torch_geometric.utils import degree

from neuralgraph.graph.decode import graph_layouts
from neuralgraph.graph.schema import WEIGHT_EDGE, Activation, Graph, Layout


@dataclass(frozen=True)
class GraphSpec:
    """What a metanetwork must know about the graphs it reads.

    Attributes:
        layouts: the distinct layouts, in order of first appearance.
        node_features, edge_features: widths of ``x`` and ``edge_attr``.
        activations: per node layer, the activation name (an :class:`~neuralgraph.graph.schema.Activation` value)
            when the graphs record one and all share it; ``None`` otherwise.
        varying_activations: the graphs record activations that differ between graphs (a
            metanet then embeds them: ``node_activations``).
        skip_edges: some graph has residual or shortcut edges (``edge_kind`` other than weight).
        degree_histogram: ``histogram[d]`` nodes of degree ``d``, counting both edge directions
            (PNA's ``deg``, as ``PNAConv.get_degree_histogram`` computes it on reverse-edge graphs),
            divided by the counts' greatest common divisor: PNA's scalers read only the
            distribution, and so the spec of a one-layout set does not depend on how many of its
            graphs were read.
        convention: the SIREN convention of INR data (``SirenConvention.to_dict()``), if any.

    Two facts are read from these: :attr:`network_activation` (the activation of the hidden layers) and
    :attr:`w0` (SIREN's frequency), which probe and gradient features run the networks with.
    """

    layouts: tuple[Layout, ...]
    node_features: int
    edge_features: int
    activations: Optional[tuple[str, ...]]
    varying_activations: bool
    skip_edges: bool
    degree_histogram: tuple[int, ...]
    convention: Optional[dict[str, Any]] = None

    @classmethod
    def of(cls, graph: Graph, convention: Optional[dict[str, Any]] = None) -> "GraphSpec":
        """The spec of ``graph`` (a ``ParameterGraph`` or a ``Batch`` of them)."""
        layouts = tuple(dict.fromkeys(graph_layouts(graph)))
        activations, varying = None, False
        if getattr(graph, "activation", None) is not None:
            per_graph = _activation_names(graph)
            varying = len(per_graph) > 1
            activations = None if varying else per_graph[0]
        edge_kind = getattr(graph, "edge_kind", None)
        deg = degree(graph.edge_index.flatten(), num_nodes=graph.num_nodes, dtype=torch.long)
        return cls(
            layouts=layouts,
            node_features=int(graph.x.shape[1]),
            edge_features=int(graph.edge_attr.shape[1]),
            activations=activations,
            varying_activations=varying,
            skip_edges=bool(edge_kind is not None and (edge_kind != WEIGHT_EDGE).any()),
            degree_histogram=_reduced(torch.bincount(deg).tolist()),
            convention=convention,
        )

    @property
    def depths(self) -> tuple[int, ...]:
        """Weight layers of each layout."""
        return tuple(len(layout) - 1 for layout in self.layouts)

    @property
    def network_activation(self) -> Optional[str]:
        """The activation of the networks' hidden layers, when one holds for every network (``"sine"`` for INR
        data, a SIREN convention, else the one activation besides ``identity`` that :attr:`activations`
        records); ``None`` when the graphs record none, several, or activations that differ between networks.
        Probe and gradient features run the networks with it (the metanet option ``network_activation``)."""
        if self.convention is not None:
            return Activation.SINE.value
        hidden = set(self.activations or ()) - {Activation.IDENTITY.value}
        return hidden.pop() if len(hidden) == 1 else None

    @property
    def w0(self) -> Optional[float]:
        """SIREN's frequency ``w_0`` of INR data, from its convention; ``None`` for other data."""
        return None if self.convention is None else self.convention.get("w0")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["layouts"] = [list(layout) for layout in self.layouts]
        for key in ("activations", "degree_histogram"):
            data[key] = None if data[key] is None else list(data[key])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GraphSpec":
        fields = set(cls.__dataclass_fields__)
        unknown, missing = set(data) - fields, {f for f in fields if f != "convention"} - set(data)
        if unknown or missing:
            raise ValueError(f"GraphSpec: unknown fields {sorted(unknown)}, missing fields {sorted(missing)}")
        return cls(**{**data, "layouts": tuple(tuple(layout) for layout in data["layouts"]),
                      "activations": None if data["activations"] is None else tuple(data["activations"]),
                      "degree_histogram": tuple(data["degree_histogram"])})


def _reduced(counts: list[int]) -> tuple[int, ...]:
    divisor = math.gcd(*counts) or 1
    return tuple(count // divisor for count in counts)


def _activation_names(graph: Graph) -> list[tuple[str, ...]]:
    """The distinct per-graph tuples of node-layer activation names (a layer has one activation)."""
    batch = getattr(graph, "batch", None)
    batch = torch.zeros_like(graph.node_layer) if batch is None else batch
    num_layers = int(graph.node_layer.max()) + 1
    codes = torch.full((int(batch.max()) + 1, num_layers), -1, dtype=torch.long, device=graph.node_layer.device)
    codes[batch, graph.node_layer] = graph.activation.long()
    return [tuple(list(Activation)[c].value for c in row if c >= 0) for row in torch.unique(codes, dim=0).tolist()]
