"""DWS, HNP-NFN and NP-NFN layers span exactly the space of equivariant linear maps.

The commutant dimension of each group is computed two independent ways (linear system and
orbit counting); the Jacobians of one layer (1 channel in and out, no activation) over random
parameter draws must span a space of exactly that dimension and each must commute with the group.
"""
from __future__ import annotations

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Batch

from neuralgraph.graph import mlp_to_graph, permute_mlp
from neuralgraph.nn import build_metanet, metanet_class
from neuralgraph.nn.context import graph_context
from neuralgraph.nn.encoder import EncodedGraph
from neuralgraph.nn.equivariant_linear import fold, unfold
from neuralgraph.theory.equivariant_space import (
    commutant_dimension,
    commutes,
    coordinate_permutation,
    flatten_parameters,
    linear_map_matrix,
    orbit_count,
    parameter_count,
    span_rank,
    unflatten_parameters,
)

POOLED = ("dws", "nfn_hnp", "nfn_np")
# Found by both methods below; NP (2,3,3,1) and hidden (3,4,2) also agree with the hand count
# prod_{shared layers} (2 if permuted else d^2) * prod_{other fixed layers} d over block pairs.
DIMENSIONS = {((2, 3, 3, 1), "hidden"): 75, ((2, 3, 3, 1), "np"): 57, ((3, 4, 2), "hidden"): 100, ((3, 4, 2), "np"): 32}


@pytest.mark.parametrize("layout, group", sorted(DIMENSIONS))
def test_commutant_dimension_two_ways(layout, group):
    assert commutant_dimension(layout, group) == orbit_count(layout, group) == DIMENSIONS[layout, group]


def test_unknown_group_is_rejected():
    with pytest.raises(ValueError, match="unknown group 'all'"):
        commutant_dimension((2, 3, 1), "all")


@settings(max_examples=20, deadline=None)
@given(
    layout=st.lists(st.integers(1, 4), min_size=2, max_size=4).map(tuple),
    batch=st.lists(st.integers(1, 3), max_size=2).map(tuple),
    seed=st.integers(0, 2**16),
)
def test_unflatten_inverts_flatten_on_batches(layout, batch, seed):
    """Exact round trip on ``[..., n]``; a batch entry is the network flattened alone."""
    vectors = torch.randn(*batch, parameter_count(layout), generator=torch.Generator().manual_seed(seed))
    weights, biases = unflatten_parameters(vectors, layout)
    assert [w.shape for w in weights] == [(*batch, d_out, d_in) for d_in, d_out in zip(layout[:-1], layout[1:])]
    assert torch.equal(flatten_parameters(weights, biases), vectors)
    if batch:
        first = (0,) * len(batch)
        assert torch.equal(flatten_parameters([w[first] for w in weights], [b[first] for b in biases]), vectors[first])


def test_vector_of_the_wrong_size_is_rejected():
    with pytest.raises(ValueError, match=r"shape \(2, 12\) does not fit layout \(2, 3, 1\): expected \[..., 13\]"):
        unflatten_parameters(torch.zeros(2, 12), (2, 3, 1))


def one_channel_layer(name: str, layout):
    """The first layer of the registered model, built with 1 channel and no activation."""
    cls = metanet_class(name)
    fixed = {"max_inputs": layout[0], "max_outputs": layout[-1]} if cls.symmetry == "hidden" else {}
    model = build_metanet(name, hidden_dim=1, num_layers=1, num_weight_layers=len(layout) - 1, **fixed)
    return model.layers[0].double()


@functools.lru_cache(maxsize=4)
def encoded_batch(layout, vectors_key: bytes) -> EncodedGraph:
    """The graphs of a batch of weight-space vectors, built once per layout (draws reuse them)."""
    vectors = torch.frombuffer(bytearray(vectors_key), dtype=torch.float64).view(-1, parameter_count(layout))
    weights, biases = zip(*[unflatten_parameters(v, layout) for v in vectors])
    graph = mlp_to_graph([torch.stack(w) for w in zip(*weights)], [torch.stack(b) for b in zip(*biases)])
    return EncodedGraph(graph.x, graph.edge_attr, graph_context(graph, with_layer_index=True))


def layer_matrix(layer, layout) -> torch.Tensor:
    """Matrix of the layer's linear part on weight space, from one forward over a batch."""

    def apply(vectors):
        encoded = encoded_batch(layout, vectors.numpy().tobytes())
        context = encoded.context
        node, edge = layer(encoded.node, context.edge_index, encoded.edge, **layer.context_arguments(context))
        B = len(vectors)
        return torch.cat([edge.view(B, -1), node.view(B, -1)[:, layout[0] :]], dim=1)

    return linear_map_matrix(apply, layout)


@pytest.mark.parametrize("layout", [(2, 3, 3, 1), (3, 4, 2)])
@pytest.mark.parametrize("name", POOLED)
def test_layer_spans_the_commutant(name, layout):
    group = metanet_class(name).symmetry
    dimension = DIMENSIONS[layout, group]
    layer = one_channel_layer(name, layout)
    matrices = []
    for seed in range(dimension + 4):
        torch.manual_seed(seed)
        layer.reset_parameters()
        matrices.append(layer_matrix(layer, layout))
    assert all(commutes(m, layout, group) for m in matrices)
    assert span_rank(matrices) == dimension
    if group == "hidden":  # strictly larger than the NP space: it sees input positions
        assert not commutes(matrices[0], layout, "np")


def random_mlp(layout, generator):
    weights = [torch.randn(d_out, d_in, generator=generator, dtype=torch.float64) for d_in, d_out in zip(layout[:-1], layout[1:])]
    return weights, [torch.randn(d_out, generator=generator, dtype=torch.float64) for d_out in layout[1:]]


def row_permutations(layout, perms):
    """Graph row maps (nodes, edges) of the neuron permutations ``perms`` (one per layer)."""
    offsets = torch.tensor((0,) + layout).cumsum(0)
    nodes = torch.cat([offsets[k] + (torch.arange(d) if p is None else p) for k, (d, p) in enumerate(zip(layout, perms))])
    num_weights = sum(a * b for a, b in zip(layout[:-1], layout[1:]))
    return nodes, coordinate_permutation(layout, perms)[:num_weights]


@settings(max_examples=6, deadline=None)
@given(
    name=st.sampled_from(POOLED),
    hidden=st.lists(st.lists(st.integers(1, 4), min_size=2, max_size=2), min_size=2, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_model_is_equivariant_on_mixed_widths(name, hidden, seed):
    """float64: permuting the neurons of one graph in a batch of different widths permutes its outputs."""
    cls = metanet_class(name)
    generator = torch.Generator().manual_seed(seed)
    io = (2, 1) if cls.symmetry == "hidden" else (3, 2)
    layouts = [(io[0], *widths, io[1]) for widths in hidden]
    torch.manual_seed(seed)
    model = build_metanet(name, hidden_dim=4, num_layers=2, max_layers=3).double().eval()
    mlps = [random_mlp(layout, generator) for layout in layouts]
    layout = layouts[0]
    permuted = [k for k in range(len(layout)) if cls.symmetry == "np" or 0 < k < len(layout) - 1]
    perms = [torch.randperm(d, generator=generator) if k in permuted else None for k, d in enumerate(layout)]
    graphs = [mlp_to_graph(*mlp) for mlp in mlps]
    node, edge = model(Batch.from_data_list(graphs))
    node_p, edge_p = model(Batch.from_data_list([mlp_to_graph(*permute_mlp(*mlps[0], perms))] + graphs[1:]))
    node_rows, edge_rows = row_permutations(layout, perms)
    n0, e0 = graphs[0].num_nodes, graphs[0].num_edges
    torch.testing.assert_close(node_p[:n0], node[:n0][node_rows])
    torch.testing.assert_close(edge_p[:e0], edge[:e0][edge_rows])
    torch.testing.assert_close(node_p[n0:], node[n0:])
    torch.testing.assert_close(edge_p[e0:], edge[e0:])


def test_hidden_models_distinguish_input_neurons():
    """Swapping two input neurons changes a dws/nfn_hnp output beyond the permutation."""
    generator = torch.Generator().manual_seed(0)
    layout = (2, 3, 3, 1)
    mlp = random_mlp(layout, generator)
    perms = [torch.tensor([1, 0]), None, None, None]
    node_rows, edge_rows = row_permutations(layout, perms)
    for name in ("dws", "nfn_hnp"):
        torch.manual_seed(0)
        model = build_metanet(name, hidden_dim=4, num_layers=2).double()
        node, edge = model(mlp_to_graph(*mlp))
        _, edge_p = model(mlp_to_graph(*permute_mlp(*mlp, perms)))
        assert not torch.allclose(edge_p, edge[edge_rows])


def test_depth_mismatch_names_the_argument():
    model = build_metanet("nfn_hnp", hidden_dim=4, num_layers=1, max_layers=3).double()
    graph = mlp_to_graph(*random_mlp((2, 3, 1), torch.Generator().manual_seed(0)))
    with pytest.raises(ValueError, match=r"\[2\] weight layers .* num_weight_layers=3"):
        model(graph)


def test_too_many_inputs_names_the_argument():
    model = build_metanet("dws", hidden_dim=4, num_layers=1, num_weight_layers=2, max_inputs=2).double()
    graph = mlp_to_graph(*random_mlp((3, 4, 1), torch.Generator().manual_seed(0)))
    with pytest.raises(ValueError, match="3 input neurons .* max_inputs=2"):
        model(graph)


def test_np_model_rejects_fixed_positions():
    with pytest.raises(ValueError, match="max_inputs/max_outputs must be 0"):
        build_metanet("nfn_np", hidden_dim=4, num_layers=1, max_inputs=2)


def test_weight_space_errors_name_the_argument():
    with pytest.raises(ValueError, match="num_weight_layers=4 exceeds max_layers=3"):
        build_metanet("dws", num_weight_layers=4, max_layers=3)
    layer = build_metanet("nfn_np", hidden_dim=2, num_layers=1).layers[0]
    with pytest.raises(ValueError, match="needs layers=LayerIndex"):
        layer(torch.zeros(3, 2), torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, 2), layers=None, num_graphs=1)


@settings(max_examples=10, deadline=None)
@given(
    hidden=st.lists(st.lists(st.integers(1, 4), min_size=1, max_size=3), min_size=1, max_size=3),
    fixed=st.sampled_from([None, (3, 2)]),
    seed=st.integers(0, 2**16),
)
def test_unfold_inverts_fold(hidden, fixed, seed):
    """fold -> unfold gives back every node and edge feature exactly, in a batch of several widths."""
    depth = len(hidden[0]) + 1
    layouts = [(3, *widths[: depth - 1], 2) for widths in hidden if len(widths) >= depth - 1]
    generator = torch.Generator().manual_seed(seed)
    graph = Batch.from_data_list([mlp_to_graph(*random_mlp(layout, generator)) for layout in layouts])
    x = torch.randn(graph.num_nodes, 2, generator=generator, dtype=torch.float64)
    edge_attr = torch.randn(graph.num_edges, 2, generator=generator, dtype=torch.float64)
    index = graph_context(graph, with_layer_index=True).layers
    space = fold(x, edge_attr, index, len(layouts), fixed)
    x_back, edge_back = unfold(space, index, fixed, 2, graph.num_nodes, graph.num_edges)
    assert torch.equal(x_back, x) and torch.equal(edge_back, edge_attr)
