"""Symmetry, batching and gradient tests for every registered metanetwork, plus encoder/registry errors.

Parametrised over ``METANETS``, so an architecture joins the suite by registering itself. Some
architectures have per-layer parameters (DWS, NFN), so the suite stays in the family of INR
layouts ``(2, h_1, h_2, 1)`` that every architecture accepts with ``max_layers=3``; models are
built for the GraphSpec of the project's INR layout (``INR_SPEC``), as training builds them for
its data's.
"""
from __future__ import annotations

from functools import lru_cache

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch_geometric.data import Batch

from neuralgraph.graph import (GraphConversionError, GraphSpec, mlp_to_graph, module_to_graph, permute_mlp,
                               random_hidden_permutation)
from neuralgraph.nn import METANETS, GraphEncoder, InvariantReadout, Metanet, WeightDecoder, build_metanet, register_metanet
from neuralgraph.nn.encoder import EncoderOptions
from neuralgraph.nn.context import GraphContext, layer_index
from neuralgraph.nn.gmn import GMNLayer
from neuralgraph.nn.nft import NeuronAttentionLayer
from neuralgraph.nn.ng_gnn import NGGNNLayer
from neuralgraph.nn.ng_t import RelationalAttentionLayer

ARCHITECTURES = sorted(METANETS)
MAX_LAYERS = 3
K = 3
TOLERANCE = 1e-10


@lru_cache(maxsize=None)
def float64_model(name: str, device: torch.device = torch.device("cpu")) -> tuple[Metanet, InvariantReadout,
                                                                               WeightDecoder]:
    """A small metanet with both heads, in float64 and eval mode on ``device``, built once per architecture."""
    torch.manual_seed(0)
    metanet = build_metanet(name, spec=INR_SPEC, hidden_dim=16, num_layers=2, max_layers=MAX_LAYERS)
    readout = InvariantReadout(16, 5, max_layers=MAX_LAYERS)
    decoder = WeightDecoder(16, K, max_layers=MAX_LAYERS, init_scale=0.5)
    return tuple(m.double().eval().to(device) for m in (metanet, readout, decoder))


def random_mlps(layout, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    weights = [torch.randn(batch_size, o, i, generator=generator, dtype=torch.float64) for i, o in zip(layout, layout[1:])]
    biases = [torch.randn(batch_size, o, generator=generator, dtype=torch.float64) for o in layout[1:]]
    return weights, biases


#: The GraphSpec of networks of the project's INR layout (the data facts a model is built for).
INR_SPEC = GraphSpec.of(mlp_to_graph(*random_mlps((2, 32, 32, 1), 1, 0)))


def run_heads(name, weights, biases, device=torch.device("cpu")):
    """Readout and decoded networks of the MLPs on ``device``, back on the CPU."""
    metanet, readout, decoder = float64_model(name, device)
    graph = mlp_to_graph(weights, biases).to(device)
    with torch.no_grad():
        node, edge = metanet(graph)
        pooled, (new_weights, new_biases) = readout(graph, node, edge), decoder(graph, node, edge)
    return pooled.cpu(), ([w.cpu() for w in new_weights], [b.cpu() for b in new_biases])


def inverse(perm):
    return None if perm is None else torch.argsort(perm)


def assert_networks_close(actual, expected):
    for a, e in zip(actual[0] + actual[1], expected[0] + expected[1]):
        torch.testing.assert_close(a, e, rtol=0, atol=TOLERANCE)


layouts = st.tuples(st.integers(2, 5), st.integers(2, 5)).map(lambda hidden: (2, *hidden, 1))


@pytest.mark.parametrize("name", ARCHITECTURES)
@settings(max_examples=3, deadline=None)
@given(layout=layouts, seed=st.integers(0, 2**16))
def test_hidden_permutation_symmetry(name, layout, seed, device):
    """Readout is invariant, decoded networks are equivariant to hidden-neuron permutations."""
    weights, biases = random_mlps(layout, 2, seed)
    perms = random_hidden_permutation(layout, torch.Generator().manual_seed(seed))
    readout, decoded = run_heads(name, weights, biases, device)
    permuted_readout, permuted_decoded = run_heads(name, *permute_mlp(weights, biases, perms), device)
    torch.testing.assert_close(permuted_readout, readout, rtol=0, atol=TOLERANCE)
    assert_networks_close(permute_mlp(*permuted_decoded, [inverse(p) for p in perms]), decoded)


@pytest.mark.parametrize("name", ARCHITECTURES)
@settings(max_examples=3, deadline=None)
@given(layout=layouts, seed=st.integers(0, 2**16))
def test_input_output_permutations(name, layout, seed, device):
    """NP-group models are also symmetric under input/output permutations; the others see the swap."""
    weights, biases = random_mlps(layout, 2, seed)
    generator = torch.Generator().manual_seed(seed)
    perms = [torch.randperm(d, generator=generator) for d in layout]
    perms[0] = torch.tensor([1, 0])  # swap the two inputs
    readout, decoded = run_heads(name, weights, biases, device)
    permuted_readout, permuted_decoded = run_heads(name, *permute_mlp(weights, biases, perms), device)
    if METANETS[name].symmetry == "np":
        torch.testing.assert_close(permuted_readout, readout, rtol=0, atol=TOLERANCE)
        assert_networks_close(permute_mlp(*permuted_decoded, [inverse(p) for p in perms]), decoded)
    else:
        assert (permuted_readout - readout).abs().max() > 1e-6


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_mixed_layouts_match_single_graphs(name, device):
    """A batch mixing layouts gives each graph the features it gets alone."""
    metanet, readout, _ = float64_model(name, device)
    graphs = [mlp_to_graph(*[[t[0] for t in ts] for ts in random_mlps(layout, 1, seed)]).to(device)
              for seed, layout in enumerate([(2, 6, 3, 1), (2, 4, 5, 1), (2, 3, 3, 1)])]
    batch = Batch.from_data_list(graphs)
    with torch.no_grad():
        node, edge = metanet(batch)
        pooled = readout(batch, node, edge)
        for i, graph in enumerate(graphs):
            single_node, single_edge = metanet(graph)
            torch.testing.assert_close(node[batch.ptr[i] : batch.ptr[i + 1]], single_node, rtol=0, atol=TOLERANCE)
            edges = batch.batch[batch.edge_index[1]] == i
            torch.testing.assert_close(edge[edges], single_edge, rtol=0, atol=TOLERANCE)
            torch.testing.assert_close(pooled[i : i + 1], readout(graph, single_node, single_edge), rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_gradients_reach_every_parameter(name, device):
    torch.manual_seed(1)
    metanet = build_metanet(name, spec=INR_SPEC, hidden_dim=8, num_layers=2, max_layers=MAX_LAYERS).double().to(device)
    readout = InvariantReadout(8, 3, max_layers=MAX_LAYERS).double().to(device)
    decoder = WeightDecoder(8, 2, max_layers=MAX_LAYERS).double().to(device)
    graph = mlp_to_graph(*random_mlps((2, 5, 5, 1), 4, 0)).to(device)
    node, edge = metanet(graph)
    new_weights, new_biases = decoder(graph, node, edge)
    loss = readout(graph, node, edge).square().sum() + sum(t.square().sum() for t in new_weights + new_biases)
    loss.backward()
    for module in (metanet, readout, decoder):
        for param_name, param in module.named_parameters():
            assert param.grad is not None, f"{name}: {param_name} got no gradient"
            assert param.grad.abs().sum() > 0, f"{name}: {param_name} got an all-zero gradient"


@pytest.mark.parametrize("name", ["gmn", "ng_gnn", "ng_t", "nft"])
def test_conv_graph_runs(name):
    """A Conv2d-derived graph (3x3 kernels as 9 edge features) runs and keeps the graph's shapes."""
    torch.manual_seed(2)
    cnn = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10)
    )
    graph = Batch.from_data_list([module_to_graph(cnn)] * 2)
    metanet = build_metanet(name, spec=GraphSpec.of(graph), hidden_dim=8, num_layers=2)
    assert metanet.encoder.edge_features == 9
    node, edge = metanet(graph)
    assert node.shape == (graph.num_nodes, 8) and edge.shape == (graph.num_edges, 8)
    readout = InvariantReadout(8, 3)
    readout(graph, node, edge).sum().backward()
    assert metanet.encoder.edge_lift.linear.weight.grad.abs().sum() > 0


def test_encoder_reverse_edges_carry_both_directions():
    weights, biases = random_mlps((2, 3, 1), 1, 0)
    graph = mlp_to_graph(*[[t[0] for t in ts] for ts in (weights, biases)])
    encoder = GraphEncoder(4, reverse_edges=True).double()
    encoded = encoder(graph)
    E, context = graph.num_edges, encoded.context
    assert context.num_edges == E and encoded.edge.shape == (2 * E, 4)
    assert torch.equal(context.edge_index[:, context.reverse], context.edge_index.flip(0))
    lift = encoder.edge_lift.linear
    forward_rows = graph.edge_attr @ lift.weight[:, :1].T + lift.bias
    reverse_rows = graph.edge_attr @ lift.weight[:, 1:].T + lift.bias
    position = encoder.edge_position(graph.edge_layer)
    torch.testing.assert_close(encoded.edge[:E], forward_rows + position)
    torch.testing.assert_close(encoded.edge[E:], reverse_rows + position)


def test_encoder_errors_name_the_field():
    graph = mlp_to_graph([torch.randn(3, 2), torch.randn(1, 3)], [torch.randn(3), torch.randn(1)])
    with pytest.raises(ValueError, match="edge_attr"):
        GraphEncoder(4, EncoderOptions(edge_features=9))(graph)
    with pytest.raises(ValueError, match="node_type"):
        GraphEncoder(4, EncoderOptions(max_node_types=3))(graph)
    with pytest.raises(ValueError, match="edge_layer"):
        GraphEncoder(4, EncoderOptions(max_layers=1))(graph)
    with pytest.raises(ValueError, match="positional"):
        GraphEncoder(4, EncoderOptions(positional="absolute"))
    with pytest.raises(ValueError, match="network_activation"):
        GraphEncoder(4, EncoderOptions(probe_features=2))
    with pytest.raises(ValueError, match="w0"):
        GraphEncoder(4, EncoderOptions(probe_features=2, network_activation="sine"))


def test_np_symmetry_requires_layer_embeddings():
    class NPNet(Metanet):
        symmetry = "np"

    assert NPNet(4, 0).encoder.positional == "layer"
    with pytest.raises(ValueError, match="positional='layer'"):
        NPNet(4, 0, positional="neuron")


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_every_metanet_builds_with_defaults(name):
    """``build_metanet(name, spec=spec)`` needs no other arguments, and the model reads the project's INR layout."""
    metanet = build_metanet(name, spec=INR_SPEC)
    graph = mlp_to_graph(*[[t.float() for t in ts] for ts in random_mlps((2, 4, 4, 1), 2, 0)])
    node, edge = metanet(graph)
    assert node.shape == (graph.num_nodes, metanet.hidden_dim) and edge.shape == (graph.num_edges, metanet.hidden_dim)


def test_registry_errors():
    with pytest.raises(ValueError, match="known: .*'gmn'"):
        build_metanet("no_such_net")
    with pytest.raises(ValueError, match="^ng_gnn: degree_histogram .* is not given"):
        build_metanet("ng_gnn")  # a fact of the data: given by its GraphSpec, or by hand
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['activation'\]"):
        build_metanet("gmn", activation="sine")
    with pytest.raises(ValueError, match="already taken"):
        register_metanet("gmn")(type("OtherGMN", (Metanet,), {}))
    with pytest.raises(TypeError, match="not a Metanet"):
        register_metanet("linear")(nn.Linear)


def test_decoder_rejects_conv_graphs():
    cnn = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2, 1))
    with pytest.raises(GraphConversionError, match="features per edge"):
        graph = module_to_graph(cnn)
        WeightDecoder(4)(graph, torch.zeros(graph.num_nodes, 4), torch.zeros(graph.num_edges, 4))


def permute_edges(context: GraphContext, perm: torch.Tensor) -> GraphContext:
    """``context`` with its edges reordered by ``perm`` (edge ``k`` of the result is edge ``perm[k]``)."""
    inverse_perm = torch.argsort(perm)
    edge_index, edge_layer = context.edge_index[:, perm], context.edge_layer[perm]
    layers = context.layers and layer_index(
        context.node_layer, context.node_index, edge_index, edge_layer, context.batch, context.num_graphs
    )
    reverse = None if context.reverse is None else inverse_perm[context.reverse[perm]]
    return context._replace(edge_index=edge_index, edge_layer=edge_layer, reverse=reverse, layers=layers,
                            widths=None)  # reordered edges are no longer dense blocks


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_layer_outputs_follow_the_edge_order(name):
    """Shuffling the edges given to a layer (with their features, reverse index and layer index) shuffles its edge outputs."""
    metanet, _, _ = float64_model(name)
    graph = Batch.from_data_list([mlp_to_graph(*[[t[0] for t in ts] for ts in random_mlps(layout, 1, seed)])
                                  for seed, layout in enumerate([(2, 4, 3, 1), (2, 3, 5, 1)])])
    with torch.no_grad():
        node, edge, context = metanet.encoder(graph)
        layer = metanet.layers[0]
        perm = torch.randperm(edge.shape[0], generator=torch.Generator().manual_seed(0))
        shuffled = permute_edges(context, perm)
        node_out, edge_out = layer(node, context.edge_index, edge, **layer.context_arguments(context))
        node_p, edge_p = layer(node, shuffled.edge_index, edge[perm], **layer.context_arguments(shuffled))
    torch.testing.assert_close(node_p, node_out, rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(edge_p, edge_out[perm], rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_model_outputs_follow_the_edge_order_of_the_batch(name):
    """Storing a batch's edges in another order (edge fields along) permutes the edge outputs, nothing else."""
    metanet, readout, _ = float64_model(name)
    graph = mlp_to_graph(*random_mlps((2, 4, 3, 1), 3, 1))
    perm = torch.randperm(graph.num_edges, generator=torch.Generator().manual_seed(1))
    shuffled = graph.clone()
    shuffled.edge_index, shuffled.edge_attr, shuffled.edge_layer = graph.edge_index[:, perm], graph.edge_attr[perm], graph.edge_layer[perm]
    with torch.no_grad():
        node, edge = metanet(graph)
        node_p, edge_p = metanet(shuffled)
        torch.testing.assert_close(readout(shuffled, node_p, edge_p), readout(graph, node, edge), rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(node_p, node, rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(edge_p, edge[perm], rtol=0, atol=TOLERANCE)


def random_graph(num_nodes: int, num_edges: int, dim: int, seed: int):
    """A graph that is no parameter graph: random edges (no self loops), features, two layers."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(num_nodes, (num_edges,), generator=generator)
    dst = (src + torch.randint(1, num_nodes, (num_edges,), generator=generator)) % num_nodes
    x = torch.randn(num_nodes, dim, generator=generator, dtype=torch.float64)
    edge_attr = torch.randn(num_edges, dim, generator=generator, dtype=torch.float64)
    return x, torch.stack([src, dst]), edge_attr


@pytest.mark.parametrize("layer_class, kwargs", [(GMNLayer, {}), (NGGNNLayer, {"deg": torch.tensor([0, 4, 4, 2])}),
                                                 (RelationalAttentionLayer, {}), (NeuronAttentionLayer, {})])
def test_layer_is_a_drop_in_operator(layer_class, kwargs):
    """A layer runs on plain tensors of any graph, like a PyG operator, and is equivariant to node relabelling."""
    torch.manual_seed(0)
    layer = layer_class(hidden_dim=8, **kwargs).double().eval()
    x, edge_index, edge_attr = random_graph(10, 30, 8, seed=3)
    context = {"batch": torch.zeros(10, dtype=torch.long), "node_layer": torch.arange(10) % 2,
               "widths": None}  # plain tensors: the general path
    if "reverse" in layer.context:
        edge_index, edge_attr = torch.cat([edge_index, edge_index.flip(0)], 1), torch.cat([edge_attr, -edge_attr])
        context["reverse"] = (torch.arange(60) + 30) % 60
    arguments = {name: context[name] for name in layer.context}
    relabel = torch.randperm(10, generator=torch.Generator().manual_seed(4))  # node i becomes node relabel[i]
    inverse_relabel = torch.argsort(relabel)
    with torch.no_grad():
        node, edge = layer(x, edge_index, edge_attr, **arguments)
        moved = {name: value[inverse_relabel] if name in ("batch", "node_layer") else value for name, value in arguments.items()}
        node_r, edge_r = layer(x[inverse_relabel], relabel[edge_index], edge_attr, **moved)
    assert node.shape == x.shape and edge.shape == edge_attr.shape
    torch.testing.assert_close(node_r, node[inverse_relabel], rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(edge_r, edge, rtol=0, atol=TOLERANCE)
