"""Batches of parameter graphs: the fast builder for many graphs of one layout, and :func:`batch_graphs`.

:func:`batch_of_one_layout` fills PyG's ``Batch`` bookkeeping with a few tensor ops; on a PyG
release where that was not verified it is compared, once, with the public ``Batch.from_data_list``
path, which it falls back to when they differ.
"""
from __future__ import annotations

import copy
import warnings
from functools import lru_cache
from typing import Sequence

import torch
import torch_geometric
from torch import Tensor
from torch_geometric.data import Batch, Data

from neuralgraph.graph.schema import (
    EDGE_FIELDS,
    NODE_FIELDS,
    WEIGHT_EDGE,
    GraphConversionError,
    Layout,
    ParameterGraph,
    layout_structure,
)


def _fast_batch(x: Tensor, edge_attr: Tensor, struct: dict[str, Tensor], layout: Layout, B: int) -> Batch:
    """Assemble a ``Batch`` of ``B`` graphs of one layout with a few tensor ops, in place of
    ``Batch.from_data_list``'s per-graph loop (docs/benchmarks.md, "Speed", has the times).

    ``struct`` holds one graph's index fields, or, for ``activation``, the whole batch's.
    The slicing bookkeeping (``_slice_dict``/``_inc_dict``, PyG internals) is filled exactly as
    ``Batch.from_data_list`` would, so ``to_data_list``, ``get_example`` and indexing work;
    :func:`batch_of_one_layout` uses it only where that was verified.
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
    (else a warning, and the public path from then on).

    Returns:
        Whether the fast builder is used (cached for the process).
    """
    version = tuple(int(part) for part in torch_geometric.__version__.split(".")[:2] if part.isdigit())
    low, high = FAST_BATCH_VERIFIED
    if low <= version < high:
        return True
    layout = (2, 2, 1)
    struct = layout_structure(layout, (), ())
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


def batch_of_one_layout(x: Tensor, edge_attr: Tensor, struct: dict[str, Tensor], layout: Layout, B: int) -> Batch:
    """A ``Batch`` of ``B`` graphs of one layout: :func:`_fast_batch` where :func:`fast_batch_available`,
    else :func:`_public_batch`.

    Args:
        x: node features of all graphs, graph by graph, ``[B n, 1]``.
        edge_attr: edge features of all graphs, graph by graph, ``[B e, F]``.
        struct: the layout's shared index fields (:func:`~neuralgraph.graph.schema.layout_structure`).
        layout: the graphs' layout.
        B: the number of graphs.

    Returns:
        The ``Batch``.
    """
    return (_fast_batch if fast_batch_available() else _public_batch)(x, edge_attr, struct, layout, B)


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

    Args:
        graphs: parameter graphs (``Data``), of any layouts.

    Returns:
        The ``Batch``.
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
