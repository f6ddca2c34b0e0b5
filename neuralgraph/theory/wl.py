"""1-WL colour refinement on parameter graphs, with exact weights and biases as colours.

This bounds what message-passing metanetworks can distinguish: two parameter graphs with
the same 1-WL colour histogram get the same invariant output from any model whose layers
aggregate multisets of (edge feature, neighbour state) over in- and out-edges.

Refinement:

* initial colour of a node: ``(node_type, bias)``; ``node_type`` gives input and output
  neurons their position and hidden neurons their layer;
* each round a node's new colour is ``(old colour, multiset of (edge weights, source colour)
  over in-edges, multiset of (edge weights, target colour) over out-edges)``;
* rounds stop when no colour class splits.

Values are compared exactly (Python floats of the stored tensors). Colours are numbered by
the sorted order of their signatures, so they are a function of the graphs only, never of the
node order. Graphs are comparable only when refined together (one call on a ``Batch``).

On parameter graphs 1-WL equivalence implies equal functions: nodes of one colour receive
the same bias and the same multiset of (weight, input colour), hence compute the same
activation, layer by layer. The gap it leaves is in weight space: equivalent networks need
not be related by any hidden permutation (see ``docs/theory.md``).
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Batch

from neuralgraph.graph import Graph, ParameterGraph


def _relabel(signatures: list) -> list[int]:
    """Colour ids: the rank of each signature among the distinct ones (order-independent)."""
    palette = {sig: k for k, sig in enumerate(sorted(set(signatures)))}
    return [palette[sig] for sig in signatures]


def wl_colors(graph: Graph) -> Tensor:
    """Stable 1-WL colours ``[N]`` of every node of ``graph`` (all graphs of a ``Batch`` share ids).

    Args:
        graph: a ``ParameterGraph`` or a ``Batch``.

    Returns:
        ``[N]`` long colour ids.
    """
    num_nodes = graph.num_nodes
    src, dst = graph.edge_index.tolist()
    edge_weights = [tuple(row) for row in graph.edge_attr.tolist()]
    colours = _relabel(list(zip(graph.node_type.tolist(), graph.x[:, 0].tolist())))
    num_colours = len(set(colours))
    while True:
        incoming = [[] for _ in range(num_nodes)]
        outgoing = [[] for _ in range(num_nodes)]
        for s, t, w in zip(src, dst, edge_weights):
            incoming[t].append((w, colours[s]))
            outgoing[s].append((w, colours[t]))
        colours = _relabel(
            [(c, tuple(sorted(i)), tuple(sorted(o))) for c, i, o in zip(colours, incoming, outgoing)]
        )
        refined = len(set(colours))
        if refined == num_colours:
            return torch.tensor(colours, dtype=torch.long)
        num_colours = refined


def wl_equivalent(first: ParameterGraph, second: ParameterGraph) -> bool:
    """Whether 1-WL cannot tell the two parameter graphs apart (equal stable colour histograms).

    Args:
        first: a parameter graph.
        second: another.

    Returns:
        ``True`` when their colour histograms are equal.
    """
    pair = Batch.from_data_list([first, second])
    colours = wl_colors(pair)
    size = int(colours.max()) + 1
    histograms = [torch.bincount(colours[pair.batch == g], minlength=size) for g in (0, 1)]
    return bool(torch.equal(*histograms))


def cycle_pair(width: int = 4, dtype: torch.dtype = torch.float64) -> list[tuple[list[Tensor], list[Tensor]]]:
    """Two MLPs of layout ``(2, width, width, 1)`` that 1-WL cannot tell apart but no hidden
    permutation relates (``width`` even, at least 4).

    Hidden biases are equal within each layer and the rows of ``W_1`` are equal, so all
    neurons of a hidden layer start with one colour. ``W_2`` has two entries ``1/2`` per row
    and column in both networks: its support is one ``2 * width``-cycle of the bipartite
    graph between the two hidden layers (``(I + C) / 2`` with ``C`` the cyclic shift; rank
    ``width - 1``) in the first, ``width / 2`` four-cycles (blocks of ones; rank
    ``width / 2``) in the second. Every neuron sees the same multiset of (weight, colour), so
    refinement never splits a layer; permutations preserve rank, so none maps one to the other.
    Returns ``[(weights, biases), (weights, biases)]``.

    Args:
        width: the hidden width, even and at least 4.
        dtype: the tensors' dtype.

    Returns:
        The two networks.
    """
    if width < 4 or width % 2:
        raise ValueError(f"width={width}: the cycle pair needs an even hidden width of at least 4")
    eye = torch.eye(width, dtype=dtype)
    long_cycle = (eye + eye.roll(1, dims=1)) / 2
    short_cycles = torch.block_diag(*[torch.full((2, 2), 0.5, dtype=dtype)] * (width // 2))
    first = torch.tensor([[0.7, -0.3]], dtype=dtype).expand(width, 2)
    last = torch.full((1, width), 0.4, dtype=dtype)
    biases = [torch.full((width,), 0.1, dtype=dtype), torch.full((width,), -0.2, dtype=dtype), torch.tensor([0.05], dtype=dtype)]
    return [([first.clone(), middle, last.clone()], [b.clone() for b in biases]) for middle in (long_cycle, short_cycles)]
