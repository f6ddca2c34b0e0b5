"""What a parameter graph holds: one node per neuron, one edge per weight (or per kernel).

A network with layer widths ``layout = (d_0, d_1, ..., d_L)`` becomes a directed graph with
``N = sum(d_l)`` nodes, ordered layer by layer, and one edge from neuron ``j`` of layer
``l-1`` to neuron ``i`` of layer ``l`` for every weight ``W_l[i, j]``. Edges of one layer are
ordered row-major over ``(i, j)``, so that ``edge_attr`` of layer ``l`` is ``W_l.flatten()``.

Per graph, a PyG ``Data`` holds:

==============  ============  ==============================================================
field           shape         meaning
==============  ============  ==============================================================
``x``           ``[N, 1]``    bias of the neuron (0 for input neurons, which have none)
``edge_index``  ``[2, E]``    ``(source in layer l-1, target in layer l)``
``edge_attr``   ``[E, F]``    the weight (``F = 1`` for MLPs; kernels/flatten blocks padded)
``node_layer``  ``[N]``       layer ``l`` of the neuron, ``0`` for inputs
``node_index``  ``[N]``       position of the neuron within its layer
``edge_layer``  ``[E]``       ``l - 1`` for an edge into layer ``l`` (index of the weight)
``node_type``   ``[N]``       positional type: input ``j`` -> ``j``; hidden layer ``l`` ->
                              ``d_0 + l - 1``; output ``i`` -> ``d_0 + L - 1 + i``
``layout``      tuple         ``(d_0, ..., d_L)``
==============  ============  ==============================================================

Two optional fields describe networks beyond a chain of layers with one activation:

================  =======  ==================================================================
``activation``    ``[N]``  the activation applied to the neuron's layer (the code of an
                           :class:`Activation`; ``identity`` where there is none)
``edge_kind``     ``[E]``  :data:`WEIGHT_EDGE` (0) for a weight, :data:`SKIP_EDGE` (1) for a
                           residual connection: an identity edge from neuron ``j`` of layer
                           ``a`` to neuron ``j`` of layer ``b > a`` (``edge_layer = b - 1``,
                           features ``[1, 0, ..., 0]``), :data:`SHORTCUT_EDGE` (2) for a
                           weight of a projection shortcut from layer ``a`` to layer ``b``
                           (every pair of neurons, ``edge_layer = b - 1``); stored after the
                           weight edges, skips first
================  =======  ==================================================================

Input and output neurons each get their own type because their order carries meaning; hidden
neurons of a layer share one type because they may be permuted freely.
"""
from __future__ import annotations

import enum
from functools import lru_cache
from typing import Optional, Sequence, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

#: Layer widths ``(d_0, d_1, ..., d_L)`` of a network, inputs first.
Layout = tuple[int, ...]
#: A parameter graph (``Data``) or a batch of them (``Batch``).
Graph = Union[Data, Batch]
Skips = tuple[tuple[int, int], ...]
Shortcut = tuple[int, int, Tensor]  # (a, b, block [(B,) d_b, d_a, f]): a projection from node layer a to b

NODE_FIELDS = ("x", "node_layer", "node_index", "node_type")
EDGE_FIELDS = ("edge_attr", "edge_layer")
#: Edge kinds, by code (only ever appended). A chain's weights, residual skips and projection
#: shortcuts; then the elements of :mod:`neuralgraph.graph.convert.elements`: a normalisation's
#: ``gamma`` (one edge per feature into the normalised layer), membership of a neuron in its
#: group node (attention head, GroupNorm group), the query/key/value projections, the
#: attention's output projection, the query -> key pairing of one head dimension and a
#: positional embedding (from ordered token-position nodes into the channels they are added to).
EDGE_KINDS = ("weight", "skip", "shortcut", "layer_norm", "rms_norm", "group_norm", "member",
              "query", "key", "value", "attention_output", "pair", "position")
#: The code of each edge kind, its position in :data:`EDGE_KINDS` (``graph.edge_kind`` holds codes).
(WEIGHT_EDGE, SKIP_EDGE, SHORTCUT_EDGE, LAYER_NORM_EDGE, RMS_NORM_EDGE, GROUP_NORM_EDGE, MEMBER_EDGE,
 QUERY_EDGE, KEY_EDGE, VALUE_EDGE, ATTENTION_OUTPUT_EDGE, PAIR_EDGE, POSITION_EDGE) = range(len(EDGE_KINDS))
#: Kinds a chain of layers has (``graph_to_blocks`` reads such graphs); any other kind makes a
#: general parameter graph, read by message passing only.
CHAIN_EDGE_KINDS = (WEIGHT_EDGE, SKIP_EDGE, SHORTCUT_EDGE)
#: Kinds whose features the structure fixes (ones, not parameters), which are skips, group membership and
#: query-key pairs.
STRUCTURAL_EDGE_KINDS = (SKIP_EDGE, MEMBER_EDGE, PAIR_EDGE)
#: Groups of hidden-neuron rescalings ``q`` an activation can commute with (:mod:`neuralgraph.graph.scaling`).
SCALING_GROUPS = ("sign", "scale")


class GraphConversionError(ValueError):
    """A network or graph that cannot be converted; the message names the layer or key."""


class Activation(str, enum.Enum):
    """The activations a graph records in its ``activation`` node field, with their scaling groups.

    A member's code in the field is its position, so members are only ever appended: codes
    stored in graphs and checkpoints keep their meaning. ``scaling`` is the group of rescalings
    ``q`` with ``sigma(q z) = q sigma(z)``: ``"sign"`` (``q = +-1``) for odd activations,
    ``"scale"`` (``q > 0``) for positively homogeneous ones, None for the others. Settings
    such as LeakyReLU's slope or a SIREN's ``w0`` are not part of the code; ``graph.architecture``
    keeps them.
    """

    scaling: Optional[str]

    def __new__(cls, name: str, scaling: Optional[str] = None) -> "Activation":
        member = str.__new__(cls, name)
        member._value_, member.scaling = name, scaling
        return member

    def __str__(self) -> str:
        return self.value

    IDENTITY = "identity"
    RELU = "relu", "scale"
    TANH = "tanh", "sign"
    SIGMOID = "sigmoid"
    GELU = "gelu"
    SINE = "sine", "sign"
    SILU = "silu"
    LEAKY_RELU = "leaky_relu", "scale"
    ELU = "elu"
    SOFTPLUS = "softplus"

    @property
    def code(self) -> int:
        """The member's value in the ``activation`` node field."""
        return type(self)._member_names_.index(self.name)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """Every member's name, in code order."""
        return tuple(member.value for member in cls)


def activation_codes(names: Sequence[str]) -> Tensor:
    """Codes of activation names (one per node layer); an unknown name raises.

    Args:
        names: :class:`Activation` values, e.g. ``["identity", "relu", "identity"]``.

    Returns:
        ``[len(names)]`` long.
    """
    unknown = [name for name in names if name not in Activation.names()]
    if unknown:
        raise GraphConversionError(f"activation {unknown[0]!r} is not in the vocabulary {Activation.names()}")
    return torch.tensor([Activation(name).code for name in names], dtype=torch.long)


class ParameterGraph(Data):
    """``Data`` whose ``node_index`` is a position within a layer, not a node id.

    PyG offsets every attribute whose name contains ``index`` by the node count when batching;
    ``node_index`` must stay as it is.
    """

    def __inc__(self, key, value, *args, **kwargs):
        if key == "node_index":
            return 0
        return super().__inc__(key, value, *args, **kwargs)

    def __cat_dim__(self, key, value, *args, **kwargs):
        if key == "node_index":
            return 0
        return super().__cat_dim__(key, value, *args, **kwargs)


def num_node_types(layout: Layout) -> int:
    """Number of distinct ``node_type`` values of ``layout``.

    Args:
        layout: the layer widths.

    Returns:
        ``d_0 + (L - 1) + d_L``, one type per input, per hidden layer and per output.
    """
    return layout[0] + len(layout) - 2 + layout[-1]


@lru_cache(maxsize=64)
def layout_structure(layout: Layout, skips: Skips = (), shortcuts: Skips = ()) -> dict[str, Tensor]:
    """The index fields every graph of ``layout`` shares, as the tables above define them (cached, CPU).

    Never handed out as they are: a graph gets its own copy (or a tensor computed from
    these), so writing into one graph's ``node_index`` cannot change later graphs.

    Args:
        layout: the layer widths.
        skips: residual skips ``(a, b)``.
        shortcuts: projection shortcut pairs ``(a, b)``.

    Returns:
        ``node_layer``, ``node_index``, ``node_type``, ``edge_index``, ``edge_layer`` and, with skips
        or shortcuts, ``edge_kind``, by name.
    """
    sizes = torch.tensor(layout)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)])
    num_layers = len(layout) - 1
    node_layer = torch.repeat_interleave(torch.arange(len(layout)), sizes)
    node_index = torch.cat([torch.arange(d) for d in layout])
    d0, dL = layout[0], layout[-1]
    node_type = torch.cat(
        [torch.arange(d0)]
        + [torch.full((d,), d0 + l - 1) for l, d in enumerate(layout[1:-1], start=1)]
        + [d0 + num_layers - 1 + torch.arange(dL)]
    )
    src, dst, edge_layer, edge_kind = [], [], [], []

    def connect(a: int, b: int, kind: int, identity: bool = False) -> None:
        """Edges from node layer ``a`` into ``b``: row-major over ``(i, j)``, or ``j -> j``."""
        d_in, d_out = layout[a], layout[b]
        i = torch.arange(d_out) if identity else torch.arange(d_out).repeat_interleave(d_in)
        j = torch.arange(d_in) if identity else torch.arange(d_in).repeat(d_out)
        src.append(offsets[a] + j)
        dst.append(offsets[b] + i)
        edge_layer.append(torch.full((len(i),), b - 1))
        edge_kind.append(torch.full((len(i),), kind))

    for l in range(1, len(layout)):
        connect(l - 1, l, WEIGHT_EDGE)
    for a, b in skips:
        connect(a, b, SKIP_EDGE, identity=True)
    for a, b in shortcuts:
        connect(a, b, SHORTCUT_EDGE)
    structure = {
        "edge_index": torch.stack([torch.cat(src), torch.cat(dst)]),
        "node_layer": node_layer,
        "node_index": node_index,
        "node_type": node_type,
        "edge_layer": torch.cat(edge_layer),
    }
    if skips or shortcuts:
        structure["edge_kind"] = torch.cat(edge_kind)
    return structure
