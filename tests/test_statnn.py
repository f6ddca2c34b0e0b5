"""StatNN (``neuralgraph.nn.statnn``): the features are the published weight statistics, invariant to every
neuron permutation (input and output included) and to nothing the statistics see; it trains through the task."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Batch

from neuralgraph.data.cnn_zoo import ZooNetwork, weight_statistics
from neuralgraph.graph import mlp_to_graph, module_to_graph, permute_mlp
from neuralgraph.nn import BASELINES, METANETS, InvariantReadout, build_metanet
from neuralgraph.nn.statnn import StatNN, group_statistics

TOLERANCE = 1e-10


def zoo_networks(count: int, seed: int) -> list[ZooNetwork]:
    torch.manual_seed(seed)
    networks = [ZooNetwork(activation=("relu", "tanh")[k % 2]).double() for k in range(count)]
    for network in networks:
        for parameter in network.parameters():
            torch.nn.init.normal_(parameter)
    return networks


def test_registered_as_a_baseline_apart_from_the_metanetworks():
    assert BASELINES["statnn"] is StatNN and "statnn" not in METANETS
    assert isinstance(build_metanet("statnn", weight_layers=2), StatNN)


def test_features_are_the_published_statistics_of_the_zoo_networks():
    """Per layer, the statistics of the kernels (not of their zero padding: a classifier weight is 1 feature of 9)."""
    networks = zoo_networks(4, 0)
    batch = Batch.from_data_list([module_to_graph(n) for n in networks])
    model = build_metanet("statnn", hidden_dim=8, layer_features=[9, 9, 9, 1], edge_features=9).double()
    layers = ("conv1", "conv2", "conv3", "linear")
    expected = weight_statistics([torch.stack([getattr(n, l).weight.detach() for n in networks]) for l in layers],
                                 [torch.stack([getattr(n, l).bias.detach() for n in networks]) for l in layers])
    torch.testing.assert_close(model.encoder.statistics(batch), expected, rtol=0, atol=1e-12)
    padded = build_metanet("statnn", hidden_dim=8, weight_layers=4, edge_features=9).double()
    assert (padded.encoder.statistics(batch) - expected).abs().max() > 1e-3  # the padding would enter


def test_group_statistics_match_torch_on_unequal_groups():
    values, group = torch.randn(23, dtype=torch.float64), torch.tensor([2] * 7 + [0] * 11 + [1] * 5)
    got = group_statistics(values, group, 3)
    for g in range(3):
        v = values[group == g]
        expected = torch.cat([v.mean()[None], v.var()[None], torch.quantile(v, torch.tensor(
            [0.0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64))])
        torch.testing.assert_close(got[g], expected, rtol=0, atol=1e-12)


layouts = st.tuples(st.integers(2, 5), st.integers(2, 5)).map(lambda hidden: (3, *hidden, 2))


@settings(max_examples=5, deadline=None)
@given(layout=layouts, seed=st.integers(0, 2**16))
def test_invariant_to_every_neuron_permutation(layout, seed):
    """The NP group: hidden, input and output neurons permuted; the prediction is unchanged."""
    generator = torch.Generator().manual_seed(seed)
    weights = [torch.randn(2, o, i, generator=generator, dtype=torch.float64) for i, o in zip(layout, layout[1:])]
    biases = [torch.randn(2, o, generator=generator, dtype=torch.float64) for o in layout[1:]]
    perms = [torch.randperm(d, generator=generator) for d in layout]
    torch.manual_seed(0)
    model = build_metanet("statnn", hidden_dim=8, weight_layers=3).double().eval()
    readout = InvariantReadout(8, 3).double().eval()

    def predict(ws, bs):
        graph = mlp_to_graph(ws, bs)
        with torch.no_grad():
            return readout(graph, *model(graph))

    torch.testing.assert_close(predict(*permute_mlp(weights, biases, perms)), predict(weights, biases),
                               rtol=0, atol=TOLERANCE)
    changed = [w.clone() for w in weights]
    changed[1][:, 0, 0] += 1.0  # one weight moves: the statistics (and so the prediction) see it
    assert (predict(changed, biases) - predict(weights, biases)).abs().max() > 1e-8


def test_standardisation_from_training_graphs_and_refusals():
    batch = Batch.from_data_list([module_to_graph(n) for n in zoo_networks(6, 1)])
    model = build_metanet("statnn", hidden_dim=8, layer_features=[9, 9, 9, 1], edge_features=9).double()
    model.encoder.set_input_statistics(batch)
    standardised = model.encoder(batch)
    torch.testing.assert_close(standardised.mean(0), torch.zeros(56, dtype=torch.float64), rtol=0, atol=1e-9)
    torch.testing.assert_close(standardised.std(0), torch.ones(56, dtype=torch.float64), rtol=0, atol=1e-9)
    assert "encoder.mean" in model.state_dict() and "encoder.std" in model.state_dict()  # checkpoints carry them
    with pytest.raises(ValueError, match="layer_features.*weight_layers"):
        build_metanet("statnn")
    with pytest.raises(ValueError, match=r"layer_features=\[9, 9, 9, 1\]: each must be in 1..edge_features \(1\)"):
        build_metanet("statnn", layer_features=[9, 9, 9, 1])
    with pytest.raises(ValueError, match="weight_layers=3 but layer_features has 4 entries"):
        build_metanet("statnn", layer_features=[9, 9, 9, 1], weight_layers=3, edge_features=9)
    shallow = build_metanet("statnn", weight_layers=2, edge_features=9)
    with pytest.raises(ValueError, match="built for networks of 2 weight layers, but a graph has 4"):
        shallow(batch)  # the depth is checked before anything is computed


def test_general_statistics_equal_the_chain_statistics_on_chains():
    networks = zoo_networks(3, 1)
    batch = Batch.from_data_list([module_to_graph(n) for n in networks])
    chain = build_metanet("statnn", hidden_dim=8, layer_features=[9, 9, 9, 1], edge_features=9).double()
    general = build_metanet("statnn", hidden_dim=8, weight_layers=4, edge_features=9, general=True).double()
    torch.testing.assert_close(general.encoder.statistics(batch), chain.encoder.statistics(batch), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="general=True reads each edge group's own width; leave layer_features unset"):
        build_metanet("statnn", layer_features=[9, 9, 9, 1], edge_features=9, general=True)


def test_general_statistics_of_mixed_depths_are_each_networks_own_with_zeros_after_its_depth():
    torch.manual_seed(0)
    shallow = mlp_to_graph([torch.randn(4, 2), torch.randn(1, 4)], [torch.randn(4), torch.randn(1)])
    deep = mlp_to_graph([torch.randn(5, 2), torch.randn(3, 5), torch.randn(1, 3)], [torch.randn(5), torch.randn(3),
                                                                                    torch.randn(1)])
    encoder = build_metanet("statnn", weight_layers=3, general=True).encoder
    both = encoder.statistics(Batch.from_data_list([shallow, deep]))
    torch.testing.assert_close(both[0], encoder.statistics(Batch.from_data_list([shallow]))[0])
    torch.testing.assert_close(both[1], encoder.statistics(Batch.from_data_list([deep]))[0])
    assert bool((both[0, 28:] == 0).all()) and bool((both[1, 28:] != 0).any())
    with pytest.raises(ValueError, match="built for networks of at most 2 weight layers, but a graph has 3"):
        build_metanet("statnn", weight_layers=2, general=True).encoder.statistics(Batch.from_data_list([deep]))


def test_statnn_reads_transformer_graphs_invariantly():
    from test_elements import ViT, images, permuted_vit, randomized

    from neuralgraph.graph import GraphSpec

    module = randomized(ViT(dim=12, depth=2, heads=3, mlp_dim=5), seed=3)
    graph = module_to_graph(module, example_input=images())
    spec = GraphSpec.of(graph)
    model = build_metanet("statnn", spec=spec, hidden_dim=8).double()
    assert model.encoder.general and model.encoder.weight_layers == len(graph.layout) - 1
    permuted = module_to_graph(permuted_vit(module, seed=4)[0], example_input=images())
    features = model.encoder.statistics(graph)
    torch.testing.assert_close(model.encoder.statistics(permuted), features, rtol=TOLERANCE, atol=TOLERANCE)
    patch_slot = 1  # edges into node layer 2: the 7x7 patch convolution (49 features) and the positions (1)
    expected = torch.cat([module.patch.weight.flatten(), module.position.flatten()]).detach()
    torch.testing.assert_close(features[0, 14 * patch_slot:14 * patch_slot + 2],
                               torch.stack([expected.mean(), expected.var()]))


def test_general_statistics_read_each_edge_group_to_its_own_width():
    """The batch's facts give each (edge layer, edge kind) pair's real width (the ViT's patch kernel 49, its
    positions 1), and padding every edge with more zero columns changes no statistic."""
    from test_elements import ViT, images, randomized

    from neuralgraph.graph import WEIGHT_EDGE, graph_facts
    from neuralgraph.graph.schema import POSITION_EDGE

    module = randomized(ViT(dim=12, depth=2, heads=3, mlp_dim=5), seed=3)
    graph = module_to_graph(module, example_input=images())
    facts = graph_facts(graph)
    kinds = facts.max_edge_kind + 1
    patch_layer = 1  # edges into node layer 2
    assert facts.edge_group_features[patch_layer * kinds + WEIGHT_EDGE] == module.patch.weight[0].numel()
    assert facts.edge_group_features[patch_layer * kinds + POSITION_EDGE] == 1
    assert sum(facts.edge_group_counts) == graph.num_edges
    encoder = build_metanet("statnn", weight_layers=len(graph.layout) - 1, general=True).double().encoder
    padded = graph.clone()
    padded.edge_attr = torch.cat([graph.edge_attr, graph.edge_attr.new_zeros(graph.num_edges, 30)], dim=1)
    assert graph_facts(padded).edge_group_features == facts.edge_group_features
    torch.testing.assert_close(encoder.statistics(padded), encoder.statistics(graph), rtol=0, atol=0)
    index_only = facts._replace(edge_group_counts=None, edge_group_features=None)  # read again from the graph
    torch.testing.assert_close(encoder.statistics(graph, facts=index_only), encoder.statistics(graph), rtol=0, atol=0)
