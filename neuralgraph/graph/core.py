"""Parameter graphs: one node per neuron, one edge per weight (or per kernel).

A network with layer widths ``layout = (d_0, d_1, ..., d_L)`` becomes a directed graph with
``N = sum(d_l)`` nodes, ordered layer by layer, and one edge from neuron ``j`` of layer
``l-1`` to neuron ``i`` of layer ``l`` for every weight ``W_l[i, j]``. Edges of one layer are
ordered row-major over ``(i, j)``, so that ``edge_attr`` of layer ``l`` is ``W_l.flatten()``.

Per graph, a PyG ``Data`` holds:

=============  ============  ==============================================================
field          shape         meaning
=============  ============  ==============================================================
``x``          ``[N, 1]``    bias of the neuron (0 for input neurons, which have none)
``edge_index`` ``[2, E]``    ``(source in layer l-1, target in layer l)``
``edge_attr``  ``[E, F]``    the weight (``F = 1`` for MLPs; kernels/flatten blocks padded)
``node_layer`` ``[N]``       layer ``l`` of the neuron, ``0`` for inputs
``node_index`` ``[N]``       position of the neuron within its layer
``edge_layer`` ``[E]``       ``l - 1`` for an edge into layer ``l`` (index of the weight)
``node_type``  ``[N]``       positional type: input ``j`` -> ``j``; hidden layer ``l`` ->
                             ``d_0 + l - 1``; output ``i`` -> ``d_0 + L - 1 + i``
``layout``     tuple         ``(d_0, ..., d_L)``
=============  ============  ==============================================================

Two optional fields describe networks beyond a chain of layers with one activation:

================  =======  ==================================================================
``activation``    ``[N]``  the activation applied to the neuron's layer (an index into
                           :data:`ACTIVATIONS`; ``identity`` where there is none)
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

import copy
import warnings
from functools import lru_cache
from typing import Optional, Sequence, Union

import torch
import torch_geometric
from torch import Tensor
from torch_geometric.data import Batch, Data

Layout = tuple[int, ...]
Graph = Union[Data, Batch]

NODE_FIELDS = ("x", "node_layer", "node_index", "node_type")
EDGE_FIELDS = ("edge_attr", "edge_layer")
Skips = tuple[tuple[int, int], ...]
Shortcut = tuple[int, int, Tensor]  # (a, b, block [(B,) d_b, d_a, f]): a projection from node layer a to b

#: Vocabulary of the ``activation`` node field: the code of an activation is its position.
#: Settings such as LeakyReLU's slope are not part of the code; ``graph.architecture`` keeps them.
ACTIVATIONS = ("identity", "relu", "tanh", "sigmoid", "gelu", "sin", "silu", "leaky_relu", "elu", "softplus")
EDGE_KINDS = ("weight", "skip", "shortcut")
WEIGHT_EDGE, SKIP_EDGE, SHORTCUT_EDGE = range(len(EDGE_KINDS))


class GraphConversionError(ValueError):
    """A network or graph that cannot be converted; the message names the layer or key."""


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


def activation_codes(names: Sequence[str]) -> Tensor:
    """Codes of activation names in :data:`ACTIVATIONS` (one per node layer); an unknown name raises."""
    unknown = [name for name in names if name not in ACTIVATIONS]
    if unknown:
        raise GraphConversionError(f"activation {unknown[0]!r} is not in the vocabulary {ACTIVATIONS}")
    return torch.tensor([ACTIVATIONS.index(name) for name in names], dtype=torch.long)


@lru_cache(maxsize=64)
def _structure(layout: Layout, skips: Skips = (), shortcuts: Skips = ()) -> dict[str, Tensor]:
    """Index tensors of every graph of ``layout`` (cached, CPU).

    Never handed out as they are: a graph gets its own copy (or a tensor computed from
    these), so writing into one graph's ``node_index`` cannot change later graphs.
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


def num_node_types(layout: Layout) -> int:
    """Number of distinct ``node_type`` values of ``layout``."""
    return layout[0] + len(layout) - 2 + layout[-1]


def _check_blocks(weights: Sequence[Tensor], biases: Sequence[Optional[Tensor]]) -> tuple[Layout, Optional[int]]:
    """Validate edge-feature blocks ``[(B,) d_out, d_in, f]``; return the layout and batch size."""
    if len(weights) == 0:
        raise GraphConversionError("no layers given: expected at least one weight matrix")
    if len(biases) != len(weights):
        raise GraphConversionError(f"got {len(weights)} weight tensors but {len(biases)} bias tensors")
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        for name, t in (("weight", w), ("bias", b)):
            if t is not None and not isinstance(t, Tensor):
                raise GraphConversionError(f"layer {l}: {name} is {type(t).__name__}, expected a tensor")
    batched = weights[0].dim() == 4
    batch_size = weights[0].shape[0] if batched else None
    if batch_size == 0:
        raise GraphConversionError("layer 1: weight has batch size 0; there are no networks to convert")
    layout = [weights[0].shape[-2]]
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        if not w.is_floating_point():
            raise GraphConversionError(f"layer {l}: weight dtype {w.dtype} is not a real floating-point type")
        if w.dim() != (4 if batched else 3):
            raise GraphConversionError(
                f"layer {l}: weight has {w.dim() - 1} dims, expected {'[B, d_out, d_in]' if batched else '[d_out, d_in]'}"
                " like layer 1"
            )
        if batched and w.shape[0] != batch_size:
            raise GraphConversionError(f"layer {l}: batch size {w.shape[0]} differs from layer 1's {batch_size}")
        d_out, d_in = w.shape[-3], w.shape[-2]
        if d_out == 0 or d_in == 0:
            raise GraphConversionError(f"layer {l}: weight has {d_out} outputs and {d_in} inputs; every layer needs a neuron")
        if d_in != layout[-1]:
            raise GraphConversionError(
                f"layer {l}: weight expects {d_in} inputs but layer {l - 1} has {layout[-1]} outputs"
            )
        if b is None:
            raise GraphConversionError(f"layer {l}: bias is missing (pass zeros for a bias-free layer)")
        expected = (batch_size, d_out) if batched else (d_out,)
        if tuple(b.shape) != expected:
            raise GraphConversionError(f"layer {l}: bias has shape {tuple(b.shape)}, expected {expected}")
        if b.dtype != w.dtype:
            raise GraphConversionError(f"layer {l}: bias dtype {b.dtype} differs from weight dtype {w.dtype}")
        if w.dtype != weights[0].dtype:
            raise GraphConversionError(f"layer {l}: dtype {w.dtype} differs from layer 1's {weights[0].dtype}")
        for name, t in (("weight", w), ("bias", b)):
            if not torch.isfinite(t).all():
                raise GraphConversionError(f"layer {l}: {name} contains NaN or infinite values")
        layout.append(d_out)
    return tuple(int(d) for d in layout), batch_size


def _check_skips(skips: Sequence[tuple[int, int]], layout: Layout) -> Skips:
    """Residual skips as node-layer pairs ``(a, b)``: ``a < b``, equal widths, each at most once."""
    checked = []
    for a, b in skips:
        a, b = int(a), int(b)
        if not 0 <= a < b < len(layout):
            raise GraphConversionError(f"skip ({a}, {b}): expected node layers 0 <= a < b <= {len(layout) - 1}")
        if layout[a] != layout[b]:
            raise GraphConversionError(
                f"skip ({a}, {b}): an identity skip joins layers of equal width, not {layout[a]} and {layout[b]}"
            )
        if (a, b) in checked:
            raise GraphConversionError(f"skip ({a}, {b}) is given twice")
        checked.append((a, b))
    return tuple(checked)


def _node_activations(activations: Tensor, layout: Layout, batch_size: Optional[int]) -> Tensor:
    """The ``activation`` node field from per-layer codes ``[L + 1]`` (or ``[B, L + 1]`` for a batch)."""
    expected = (len(layout),) if batch_size is None else (batch_size, len(layout))
    if not isinstance(activations, Tensor) or activations.dtype != torch.long or tuple(activations.shape) != expected:
        shown = tuple(activations.shape) if isinstance(activations, Tensor) else type(activations).__name__
        raise GraphConversionError(f"activations {shown}: expected a long tensor {expected} of codes, one per node layer")
    if bool(((activations < 0) | (activations >= len(ACTIVATIONS))).any()):
        raise GraphConversionError(f"activations hold a code outside [0, {len(ACTIVATIONS)}) (vocabulary {ACTIVATIONS})")
    sizes = torch.tensor(layout, device=activations.device)
    return activations.repeat_interleave(sizes, dim=-1).reshape(-1)


def _check_shortcuts(shortcuts: Sequence[Shortcut], layout: Layout, skips: Skips, ref: Tensor,
                     batch_size: Optional[int]) -> tuple[Skips, list[Tensor]]:
    """Projection shortcuts ``(a, b, block)``: ``a < b``, blocks ``[(B,) d_b, d_a, f]`` like the weights."""
    pairs, blocks = [], []
    for a, b, block in shortcuts:
        a, b = int(a), int(b)
        name = f"shortcut ({a}, {b})"
        if not 0 <= a < b < len(layout):
            raise GraphConversionError(f"{name}: expected node layers 0 <= a < b <= {len(layout) - 1}")
        if (a, b) in pairs or (a, b) in skips:
            raise GraphConversionError(f"{name}: layers {a} and {b} are joined by a skip or shortcut already")
        expected = (layout[b], layout[a]) if batch_size is None else (batch_size, layout[b], layout[a])
        if not isinstance(block, Tensor) or block.dim() != len(expected) + 1 or tuple(block.shape[:-1]) != expected:
            shown = tuple(block.shape) if isinstance(block, Tensor) else type(block).__name__
            raise GraphConversionError(f"{name}: block {shown}, expected {expected + ('f',)}")
        if block.dtype != ref.dtype:
            raise GraphConversionError(f"{name}: dtype {block.dtype} differs from layer 1's {ref.dtype}")
        if not bool(torch.isfinite(block).all()):
            raise GraphConversionError(f"{name}: weight contains NaN or infinite values")
        pairs.append((a, b))
        blocks.append(block)
    return tuple(pairs), blocks


def blocks_to_graph(weights: Sequence[Tensor], biases: Sequence[Tensor], skips: Sequence[tuple[int, int]] = (),
                    activations: Optional[Tensor] = None, shortcuts: Sequence[Shortcut] = ()) -> Graph:
    """Build the graph of one network (or a batch of one layout) from edge-feature blocks.

    ``weights[l]`` is ``[(B,) d_out, d_in, f_l]``: the ``f_l`` features of each edge (1 for a
    linear layer, ``kh * kw`` for a convolution). Features are zero-padded to ``F = max f_l``.
    This is the one constructor behind :func:`mlp_to_graph` and ``module_to_graph``.

    ``skips``: residual connections as node-layer pairs ``(a, b)``, each adding layer ``a``'s
    values to layer ``b``'s; they become identity edges and the ``edge_kind`` field.
    ``activations``: codes (:func:`activation_codes`) ``[L + 1]``, or ``[B, L + 1]`` for a
    batch, of each node layer's activation; they become the ``activation`` field.
    ``shortcuts``: projection shortcuts ``(a, b, block)`` adding a layer of weights ``block``
    ``[(B,) d_b, d_a, f]`` on layer ``a``'s values to layer ``b``'s; their edges follow the skips.
    A shortcut's bias acts on layer ``b``'s neurons: it belongs in ``biases[b - 1]``.
    """
    layout, batch_size = _check_blocks(weights, biases)
    skips = _check_skips(skips, layout)
    shortcut_pairs, shortcut_blocks = _check_shortcuts(shortcuts, layout, skips, weights[0], batch_size)
    activation = None if activations is None else _node_activations(activations, layout, batch_size)
    single = batch_size is None
    if single:
        weights = [w.unsqueeze(0) for w in weights]
        biases = [b.unsqueeze(0) for b in biases]
        shortcut_blocks = [w.unsqueeze(0) for w in shortcut_blocks]
        batch_size = 1
    B = batch_size
    ref = weights[0]
    width = max(w.shape[-1] for w in weights + shortcut_blocks)
    padded = [torch.nn.functional.pad(w, (0, width - w.shape[-1])).reshape(B, -1, width)
              for w in weights + shortcut_blocks]
    num_skip_edges = sum(layout[b] for _, b in skips)
    identity = ref.new_zeros(B, num_skip_edges, width)
    identity[..., 0] = 1
    blocks = padded[:len(weights)] + [identity] + padded[len(weights):]
    edge_attr = torch.cat(blocks, dim=1).reshape(-1, width)
    x = torch.cat([ref.new_zeros(B, layout[0])] + list(biases), dim=1).reshape(-1, 1)
    struct = _structure(layout, skips, shortcut_pairs)
    if activation is not None:
        struct = {**struct, "activation": activation}
    if single:
        struct = {k: v.to(ref.device, copy=True) for k, v in struct.items()}
        return ParameterGraph(x=x, edge_attr=edge_attr, layout=layout, **struct)
    return _batch_of_one_layout(x, edge_attr, struct, layout, B)


def _fast_batch(x: Tensor, edge_attr: Tensor, struct: dict[str, Tensor], layout: Layout, B: int) -> Batch:
    """Assemble a ``Batch`` of ``B`` graphs of one layout with a few tensor ops (19-24x faster than
    ``Batch.from_data_list``).

    ``struct`` holds one graph's index fields, or, for ``activation``, the whole batch's.
    The slicing bookkeeping (``_slice_dict``/``_inc_dict``, PyG internals) is filled exactly as
    ``Batch.from_data_list`` would, so ``to_data_list``, ``get_example`` and indexing work;
    :func:`_batch_of_one_layout` uses it only where that was verified.
    """
    device = x.device
    N, E = len(struct["node_layer"]), struct["edge_index"].shape[1]
    struct = {k: v.to(device) for k, v in struct.items()}  # read only: every field below is a new tensor
    graph_ids = torch.arange(B, device=device)
    edge_index = (struct["edge_index"].unsqueeze(1) + (graph_ids * N).view(1, B, 1)).reshape(2, -1)
    node_fields = NODE_FIELDS + (("activation",) if "activation" in struct else ())
    edge_fields = EDGE_FIELDS + (("edge_kind",) if "edge_kind" in struct else ())
    repeated = [k for k in node_fields + edge_fields if k not in ("x", "edge_attr", "activation")]
    batch = Batch(
        _base_cls=ParameterGraph,
        x=x,
        edge_index=edge_index,
        edge_attr=edge_attr,
        layout=[layout] * B,
        batch=graph_ids.repeat_interleave(N),
        ptr=torch.arange(B + 1, device=device) * N,
        **{k: struct[k].repeat(B) for k in repeated},
        **({"activation": struct["activation"]} if "activation" in struct else {}),
    )
    node_slices = torch.arange(B + 1) * N
    edge_slices = torch.arange(B + 1) * E
    zeros = torch.zeros(B, dtype=torch.long)
    batch._slice_dict = {
        **{k: node_slices for k in node_fields},
        **{k: edge_slices for k in edge_fields + ("edge_index",)},
        "layout": torch.arange(B + 1),
    }
    batch._inc_dict = {
        **{k: zeros for k in node_fields + edge_fields},
        "edge_index": torch.arange(B) * N,
        "layout": None,
    }
    batch._num_graphs = B
    return batch


# PyG releases whose Batch internals _fast_batch fills were verified (tests/test_graph.py compares
# it with Batch.from_data_list); another release is checked once at first use.
FAST_BATCH_VERIFIED = ((2, 5), (2, 9))


def _public_batch(x: Tensor, edge_attr: Tensor, struct: dict[str, Tensor], layout: Layout, B: int) -> Batch:
    """The same ``Batch`` as :func:`_fast_batch`, through ``Batch.from_data_list`` (public API only)."""
    N, E = len(struct["node_layer"]), struct["edge_index"].shape[1]
    device = x.device
    per_graph = {k: v.to(device) for k, v in struct.items() if k != "activation"}
    graphs = []
    for i in range(B):
        fields = dict(per_graph)
        if "activation" in struct:
            fields["activation"] = struct["activation"][i * N:(i + 1) * N].to(device)
        graphs.append(ParameterGraph(x=x[i * N:(i + 1) * N], edge_attr=edge_attr[i * E:(i + 1) * E], layout=layout,
                                     **fields))
    return Batch.from_data_list(graphs)


def _same_batch(a: Batch, b: Batch) -> bool:
    if sorted(a.keys()) != sorted(b.keys()) or a.num_graphs != b.num_graphs:
        return False
    for key in b.keys():
        if torch.is_tensor(b[key]) != torch.is_tensor(a[key]):
            return False
        if not (torch.equal(a[key], b[key]) if torch.is_tensor(b[key]) else a[key] == b[key]):
            return False
    return all(torch.equal(x[k], y[k]) if torch.is_tensor(y[k]) else x[k] == y[k]
               for x, y in zip(a.to_data_list(), b.to_data_list()) for k in y.keys())


@lru_cache(maxsize=None)
def fast_batch_available() -> bool:
    """Whether :func:`_fast_batch` may be used with the installed PyG: on a verified release, or
    on another one where it builds, once, the same two-graph batch as ``Batch.from_data_list``
    (else a warning, and the public path from then on)."""
    version = tuple(int(part) for part in torch_geometric.__version__.split(".")[:2] if part.isdigit())
    low, high = FAST_BATCH_VERIFIED
    if low <= version < high:
        return True
    layout = (2, 2, 1)
    struct = _structure(layout, (), ())
    x = torch.arange(10, dtype=torch.float32).view(-1, 1)
    edge_attr = torch.arange(12, dtype=torch.float32).view(-1, 1)
    try:
        same = _same_batch(_fast_batch(x, edge_attr, struct, layout, 2), _public_batch(x, edge_attr, struct, layout, 2))
    except (AttributeError, KeyError, RuntimeError, TypeError) as err:
        same, reason = False, f"{type(err).__name__}: {err}"
    else:
        reason = "it differs from Batch.from_data_list"
    if not same:
        warnings.warn(f"torch_geometric {torch_geometric.__version__}: the batched graph builder's Batch "
                      f"internals do not hold ({reason}); using Batch.from_data_list (slower)")
    return same


def _batch_of_one_layout(x: Tensor, edge_attr: Tensor, struct: dict[str, Tensor], layout: Layout, B: int) -> Batch:
    """A ``Batch`` of ``B`` graphs of one layout: :func:`_fast_batch` where :func:`fast_batch_available`,
    else :func:`_public_batch`."""
    return (_fast_batch if fast_batch_available() else _public_batch)(x, edge_attr, struct, layout, B)


def mlp_to_graph(weights: Sequence[Tensor], biases: Sequence[Tensor]) -> Graph:
    """Parameter graph of an MLP given in ``nn.Linear`` convention.

    Args:
        weights: per layer ``[d_out, d_in]``, or ``[B, d_out, d_in]`` for a batch of ``B``
            networks of one layout.
        biases: per layer ``[d_out]`` (or ``[B, d_out]``); every layer needs one.

    Returns:
        a ``Data`` for one network, a ``Batch`` of ``B`` graphs for batched input (built with
        a few tensor ops, no Python loop over networks). Mixed layouts are batched with
        ``Batch.from_data_list`` on single graphs.
    """
    for l, w in enumerate(weights, start=1):
        if not isinstance(w, Tensor) or w.dim() not in (2, 3):
            shape = tuple(w.shape) if isinstance(w, Tensor) else type(w).__name__
            raise GraphConversionError(f"layer {l}: weight {shape} is not [d_out, d_in] or [B, d_out, d_in]")
    return blocks_to_graph([w.unsqueeze(-1) for w in weights], biases)


def graph_layouts(graph: Graph) -> list[Layout]:
    """Layouts of the graphs in ``graph`` (one entry for a ``Data``)."""
    layout = graph.layout
    if isinstance(graph, Batch):
        return [tuple(l) for l in layout]
    return [tuple(layout)]


def _with_weight_edge_kind(graph: Data) -> Data:
    """A shallow copy of a plain network's graph with its ``edge_kind`` field: every edge a weight."""
    plain = copy.copy(graph)
    plain.edge_kind = torch.full((graph.num_edges,), WEIGHT_EDGE, dtype=torch.long, device=graph.edge_index.device)
    return plain


def batch_graphs(graphs: Sequence[Data]) -> Batch:
    """``Batch.from_data_list`` for graphs of residual and plain networks together.

    A plain network's graph has no ``edge_kind`` field (all its edges are weights), so it gets
    the exact all-:data:`WEIGHT_EDGE` field when another graph of the list carries one. The
    ``activation`` field cannot be inferred: graphs with and without it are refused, naming the
    first graph without it.
    """
    graphs = list(graphs)
    if not graphs:
        raise GraphConversionError("batch_graphs: no graphs to batch")
    if any(getattr(g, "edge_kind", None) is not None for g in graphs):
        graphs = [g if getattr(g, "edge_kind", None) is not None else _with_weight_edge_kind(g) for g in graphs]
    with_activation = [getattr(g, "activation", None) is not None for g in graphs]
    if any(with_activation) and not all(with_activation):
        raise GraphConversionError(f"graph {with_activation.index(False)} has no activation field while graph "
                                   f"{with_activation.index(True)} has one: record activations for all or none")
    return Batch.from_data_list(graphs)


def common_layout(graph: Graph) -> Layout:
    """The single layout shared by every graph in ``graph``; error on a mixed batch."""
    layouts = graph_layouts(graph)
    distinct = sorted(set(layouts))
    if len(distinct) != 1:
        raise GraphConversionError(
            f"batch mixes layouts {distinct}; convert each graph of batch.to_data_list() separately"
        )
    return distinct[0]


def graph_to_blocks(graph: Graph) -> tuple[list[Tensor], list[Tensor]]:
    """Inverse of :func:`blocks_to_graph`: per layer ``[B, d_out, d_in, F]`` and ``[B, d_out]``.

    Works from ``node_layer``/``node_index``/``edge_index`` rather than the storage order, so
    a graph whose nodes or edges were relabelled still decodes to the right matrices: each edge
    is scattered to its slot in the flattened parameter vector of its network. Residual skip and
    shortcut edges (``edge_kind``) are left out (:func:`graph_skips`, :func:`graph_shortcuts`).
    """
    layout = common_layout(graph)
    graph = _weight_edges(graph)
    B = graph.num_graphs if isinstance(graph, Batch) else 1
    device = graph.x.device
    sizes = torch.tensor(layout, device=device)
    fan_in, fan_out = sizes[:-1], sizes[1:]
    weight_sizes = (fan_in * fan_out).tolist()
    weight_offset = torch.cat([sizes.new_zeros(1), (fan_in * fan_out).cumsum(0)[:-1]])
    node_offset = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    P, N = sum(weight_sizes), int(sizes.sum())
    _check_indices(graph, sizes)
    node_graph = graph.batch if isinstance(graph, Batch) else torch.zeros(graph.num_nodes, dtype=torch.long, device=device)
    src, dst = graph.edge_index
    layer = graph.edge_layer
    if graph.num_edges != B * P or not bool(
        ((graph.node_layer[src] == layer) & (graph.node_layer[dst] == layer + 1)).all()
    ):
        _raise_edge_count_error(graph, layout, B)
    slot = node_graph[dst] * P + weight_offset[layer] + graph.node_index[dst] * fan_in[layer] + graph.node_index[src]
    hit = torch.zeros(B * P, dtype=torch.bool, device=device)
    hit[slot] = True
    if not bool(hit.all()):
        missing = int((~hit).nonzero()[0]) % P
        l = int((torch.tensor(weight_sizes).cumsum(0) <= missing).sum()) + 1
        raise GraphConversionError(f"layer {l}: some weights have duplicate or missing edges")
    flat = graph.edge_attr.new_empty(B * P, graph.edge_attr.shape[1])
    flat[slot] = graph.edge_attr
    flat = flat.view(B, P, -1)
    node_slot = node_graph * N + node_offset[graph.node_layer] + graph.node_index
    node_hit = torch.zeros(B * N, dtype=torch.bool, device=device)
    node_hit[node_slot] = True
    if graph.num_nodes != B * N or not bool(node_hit.all()):
        raise GraphConversionError(
            f"graph has {graph.num_nodes} nodes for {B} x {N} neurons of layout {layout}, or two nodes share a "
            "(node_layer, node_index) position"
        )
    node_values = graph.x.new_empty(B * N)
    node_values[node_slot] = graph.x[:, 0]
    node_values = node_values.view(B, N)
    weights = [
        block.reshape(B, d_out, d_in, -1)
        for block, d_in, d_out in zip(flat.split(weight_sizes, dim=1), layout[:-1], layout[1:])
    ]
    biases = list(node_values[:, layout[0]:].split(layout[1:], dim=1))
    return weights, biases


def _weight_edges(graph: Graph) -> Graph:
    """``graph`` itself, or a shallow copy keeping only the weight edges when it has skip or shortcut edges."""
    kind = getattr(graph, "edge_kind", None)
    if kind is None or not bool((kind != WEIGHT_EDGE).any()):
        return graph
    keep = kind == WEIGHT_EDGE
    weights = copy.copy(graph)
    weights.edge_index, weights.edge_attr = graph.edge_index[:, keep], graph.edge_attr[keep]
    weights.edge_layer, weights.edge_kind = graph.edge_layer[keep], kind[keep]
    return weights


def _edge_groups(graph: Graph, code: int) -> list[tuple[int, int, Tensor, Tensor, Tensor]]:
    """The edges of kind ``code`` of a single graph, grouped by the node layers ``(a, b)`` they join:
    ``(a, b, source node_index, target node_index, features)`` per group, ``a < b`` and
    ``edge_layer = b - 1`` checked."""
    kind = getattr(graph, "edge_kind", None)
    if kind is None:
        return []
    bad = (kind < 0) | (kind >= len(EDGE_KINDS))
    if bool(bad.any()):
        raise GraphConversionError(f"edge_kind holds {int(kind[bad][0])}: expected one of "
                                   + ", ".join(f"{c} ({name})" for c, name in enumerate(EDGE_KINDS)))
    mine = kind == code
    (src, dst), edge_layer, attr = graph.edge_index[:, mine], graph.edge_layer[mine], graph.edge_attr[mine]
    a, b = graph.node_layer[src], graph.node_layer[dst]
    groups = []
    for pa, pb in sorted(set(zip(a.tolist(), b.tolist()))):
        pair = (a == pa) & (b == pb)
        if pa >= pb:
            raise GraphConversionError(f"{EDGE_KINDS[code]} edges from layer {pa} to layer {pb} do not go forward")
        if not bool((edge_layer[pair] == pb - 1).all()):
            raise GraphConversionError(f"{EDGE_KINDS[code]} edges into layer {pb} have an edge_layer other than {pb - 1}")
        groups.append((pa, pb, graph.node_index[src[pair]], graph.node_index[dst[pair]], attr[pair]))
    return groups


def graph_shortcuts(graph: Graph) -> dict[tuple[int, int], Tensor]:
    """The projection shortcuts of a single graph: ``{(a, b): block [d_b, d_a, F]}`` from its
    shortcut edges (``edge_kind`` 2), each pair of neurons of the two layers exactly once."""
    layout, blocks = graph_layouts(graph)[0], {}
    for a, b, cols, rows, attr in _edge_groups(graph, SHORTCUT_EDGE):
        slot = rows * layout[a] + cols
        if len(slot) != layout[a] * layout[b] or len(torch.unique(slot)) != len(slot):
            raise GraphConversionError(f"shortcut edges from layer {a} to layer {b} are not one edge per pair of "
                                       f"their neurons (layout {layout})")
        block = attr.new_empty(layout[b] * layout[a], attr.shape[1])
        block[slot] = attr
        blocks[(a, b)] = block.view(layout[b], layout[a], -1)
    return blocks


def graph_skips(graph: Graph) -> Skips:
    """The residual skips ``(a, b)`` of a single graph, from its skip edges (``edge_kind`` 1).

    Each must be complete (neuron ``j`` of layer ``a`` to neuron ``j`` of layer ``b``, for every
    ``j``, ``edge_layer = b - 1``) and hold the identity, features ``[1, 0, ..., 0]``.
    """
    layout, skips = graph_layouts(graph)[0], []
    for a, b, cols, rows, attr in _edge_groups(graph, SKIP_EDGE):
        if layout[a] != layout[b] or len(rows) != layout[b] or len(torch.unique(rows)) != len(rows):
            raise GraphConversionError(f"skip edges from layer {a} to layer {b} are not one identity edge per neuron "
                                       f"of two layers of equal width (layout {layout})")
        if not torch.equal(rows, cols):
            raise GraphConversionError(f"skip edges from layer {a} to layer {b} do not join neuron j to neuron j")
        identity = torch.zeros_like(attr)
        identity[:, 0] = 1
        if not torch.equal(attr, identity):
            raise GraphConversionError(f"skip edges from layer {a} to layer {b} hold features other than the "
                                       "identity [1, 0, ..., 0]")
        skips.append((a, b))
    return tuple(skips)


def _check_indices(graph: Graph, sizes: Tensor) -> None:
    """``node_layer``, ``node_index`` and ``edge_index`` inside the ranges of the layout ``sizes``."""
    N, num_layers = graph.num_nodes, len(sizes)
    for name, index, size in (("edge_index", graph.edge_index, N), ("node_layer", graph.node_layer, num_layers)):
        bad = (index < 0) | (index >= size)
        if bool(bad.any()):
            raise GraphConversionError(f"{name} holds {int(index[bad][0])}, outside [0, {size})")
    bad = (graph.node_index < 0) | (graph.node_index >= sizes[graph.node_layer])
    if bool(bad.any()):
        node = int(bad.nonzero()[0])
        l = int(graph.node_layer[node])
        raise GraphConversionError(
            f"node {node}: node_index {int(graph.node_index[node])} is outside layer {l}'s {int(sizes[l])} neurons"
        )


def check_finite(graph: Graph) -> None:
    """Refuse NaN or infinite weights (``edge_attr``) and biases (``x`` of non-input nodes), as
    ``mlp_to_graph`` does."""
    for name, values, layer in (("edge_attr", graph.edge_attr, graph.edge_layer + 1), ("x", graph.x, graph.node_layer)):
        bad = ~torch.isfinite(values).flatten(1).all(1) & (layer > 0)
        if bool(bad.any()):
            kind = "weight" if name == "edge_attr" else "bias"
            raise GraphConversionError(f"layer {int(layer[bad][0])}: {kind} ({name}) contains NaN or infinite values")


def _raise_edge_count_error(graph: Graph, layout: Layout, B: int) -> None:
    """Name the first layer whose edges do not match ``layout`` (slow path, errors only)."""
    src, dst = graph.edge_index
    for l in range(1, len(layout)):
        mask = graph.edge_layer == l - 1
        expected, found = B * layout[l] * layout[l - 1], int(mask.sum())
        if found != expected:
            raise GraphConversionError(
                f"layer {l}: expected {expected} edges ({B} x {layout[l]} x {layout[l - 1]}), found {found}"
            )
        if not bool(((graph.node_layer[src[mask]] == l - 1) & (graph.node_layer[dst[mask]] == l)).all()):
            raise GraphConversionError(f"layer {l}: some edges do not join layer {l - 1} to layer {l}")
    raise GraphConversionError(f"graph has {graph.num_edges} edges; layouts {layout} x {B} need {B * sum(a * b for a, b in zip(layout, layout[1:]))}")


def graph_to_mlp(graph: Graph) -> tuple[list[Tensor], list[Tensor]]:
    """Exact (bitwise) inverse of :func:`mlp_to_graph`.

    Returns per-layer weights ``[d_out, d_in]`` and biases ``[d_out]`` for a ``Data``, or
    ``[B, d_out, d_in]`` and ``[B, d_out]`` for a ``Batch`` of one layout. Input neurons
    carry no bias and are skipped: the bias of layer ``l`` is read from the nodes of layer
    ``l``, never from node 0. NaN or infinite values, indices outside the layout and missing or
    duplicate neurons or weights raise :class:`GraphConversionError`.
    """
    if graph.edge_attr.dim() != 2 or graph.edge_attr.shape[1] != 1:
        raise GraphConversionError(
            f"edge_attr has {graph.edge_attr.shape[-1]} features per edge: not an MLP graph "
            "(use graph_to_module with a template for convolutional graphs)"
        )
    kind = getattr(graph, "edge_kind", None)
    if kind is not None and bool((kind != WEIGHT_EDGE).any()):
        raise GraphConversionError("graph has residual skip or shortcut edges (edge_kind): not a plain MLP; use "
                                   "graph_to_module with a template, which rebuilds them")
    check_finite(graph)
    weights, biases = graph_to_blocks(graph)
    weights = [w.squeeze(-1) for w in weights]
    if not isinstance(graph, Batch):
        return [w[0] for w in weights], [b[0] for b in biases]
    return weights, biases
