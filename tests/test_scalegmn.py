"""ScaleGMN and weight features under sign flips / positive rescalings with permutations (float64, 1e-10)."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neuralgraph.graph import GraphSpec, mlp_to_graph, permute_mlp, random_hidden_permutations
from neuralgraph.graph.scaling import random_hidden_scalings, rescale_mlp
from neuralgraph.inr import DWS_MNIST
from neuralgraph.nn import InvariantReadout, build_metanet
from neuralgraph.nn.scalegmn import ScaleGMNLayer

TOLERANCE = 1e-10
K = 2
# (architecture, scaling, activation of the networks read, encoder feature options)
CASES = [
    ("scalegmn", "sign", "sine", {}),
    ("scalegmn_b", "sign", "sine", {}),
    ("scalegmn_b", "sign", "sine", {"probe_features": 5, "gradient_features": 6}),
    ("scalegmn", "sign", "tanh", {"probe_features": 3}),
    ("scalegmn", "scale", "relu", {}),
    ("scalegmn_b", "scale", "relu", {"probe_features": 4}),
]


def random_mlps(layout, batch_size, generator):
    weights = [torch.randn(batch_size, o, i, generator=generator, dtype=torch.float64) for i, o in zip(layout, layout[1:])]
    biases = [torch.randn(batch_size, o, generator=generator, dtype=torch.float64) for o in layout[1:]]
    return weights, biases


def model(name, scaling, activation, options, hidden_dim=8):
    torch.manual_seed(0)
    group = {} if scaling is None else {"scaling": scaling}
    metanet = build_metanet(name, hidden_dim=hidden_dim, num_layers=2, network_activation=activation, w0=3.0, **group,
                            **options)
    readout, decoder = metanet.readout(3), metanet.decoder(K, init_scale=0.5)
    return [m.double().eval() for m in (metanet, readout, decoder)]


def outputs(modules, weights, biases):
    metanet, readout, decoder = modules
    graph = mlp_to_graph(weights, biases)
    with torch.no_grad():
        node, edge = metanet(graph)
        return readout(graph, node, edge), decoder(graph, node, edge)


def transform_outputs(networks, scalings, perms):
    """Apply each input network's scalings and permutation to its ``K`` decoded networks."""
    weights, biases = networks
    B = weights[0].shape[0]
    flat = ([w.flatten(0, 1) for w in weights], [b.flatten(0, 1) for b in biases])
    moved = permute_mlp(*rescale_mlp(*flat, [q.repeat_interleave(K, 0) for q in scalings]),
                        [p.repeat_interleave(K, 0) for p in perms])
    return [w.unflatten(0, (B, K)) for w in moved[0]], [b.unflatten(0, (B, K)) for b in moved[1]]


@pytest.mark.parametrize("name,scaling,activation,options", CASES)
@settings(max_examples=4, deadline=None)
@given(layout=st.sampled_from([(2, 5, 1), (2, 4, 3, 1), (2, 3, 4, 3, 1)]), seed=st.integers(0, 10_000))
def test_readout_invariant_and_decoder_equivariant(name, scaling, activation, options, layout, seed):
    """Random scalings and permutations together: same readout, decoded networks transformed alike."""
    modules = model(name, scaling, activation, options)
    g = torch.Generator().manual_seed(seed)
    weights, biases = random_mlps(layout, 3, g)
    scalings, perms = random_hidden_scalings(layout, scaling, 3, g), random_hidden_permutations(layout, 3, g)
    readout, decoded = outputs(modules, weights, biases)
    readout_moved, decoded_moved = outputs(modules, *permute_mlp(*rescale_mlp(weights, biases, scalings), perms))
    torch.testing.assert_close(readout_moved, readout, rtol=0, atol=TOLERANCE)
    expected = transform_outputs(decoded, scalings, perms)
    for actual, wanted in zip(decoded_moved[0] + decoded_moved[1], expected[0] + expected[1]):
        torch.testing.assert_close(actual, wanted, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("name,options", [("gmn", {}), ("gmn", {"gradient_features": 4})])
def test_gmn_is_not_sign_invariant(name, options):
    """Control: an architecture without the scaling group sees sign flips."""
    modules = model(name, None, "sine", options)
    g = torch.Generator().manual_seed(0)
    weights, biases = random_mlps((2, 5, 4, 1), 2, g)
    flipped = rescale_mlp(weights, biases, random_hidden_scalings((2, 5, 4, 1), "sign", 2, g))
    assert float((outputs(modules, weights, biases)[0] - outputs(modules, *flipped)[0]).abs().max()) > 1e-3


@pytest.mark.parametrize("name", ["gmn", "ng_gnn", "ng_t", "nft", "dws"])
def test_weight_features_keep_permutation_equivariance(name):
    """Probe and gradient features on architectures without a scaling group: permutations still commute."""
    g = torch.Generator().manual_seed(1)
    weights, biases = random_mlps((2, 4, 3, 1), 2, g)
    perms = random_hidden_permutations((2, 4, 3, 1), 2, g)
    graphs = [mlp_to_graph(weights, biases), mlp_to_graph(*permute_mlp(weights, biases, perms))]
    spec = GraphSpec.of(graphs[0], convention=DWS_MNIST.to_dict())  # SIRENs: sine, the convention's w0
    torch.manual_seed(0)
    metanet = build_metanet(name, spec=spec, hidden_dim=8, num_layers=1, max_layers=3, probe_features=4,
                            gradient_features=5).double().eval()
    readout = InvariantReadout(8, 3, max_layers=3).double()
    with torch.no_grad():
        before, after = (readout(graph, *metanet(graph)) for graph in graphs)
    torch.testing.assert_close(after, before, rtol=0, atol=TOLERANCE)


def test_features_reach_the_output_and_train():
    """Gradients flow into the probe points and the gradient-set pooling."""
    metanet = build_metanet("scalegmn_b", hidden_dim=8, num_layers=1, probe_features=3, gradient_features=4,
                            network_activation="sine", w0=30.0)
    weights, biases = random_mlps((2, 4, 1), 2, torch.Generator().manual_seed(0))
    graph = mlp_to_graph([w.float() for w in weights], [b.float() for b in biases])
    node, edge = metanet(graph)
    (node.square().sum() + edge.square().sum()).backward()
    lift = metanet.encoder.weight_features
    assert bool(lift.probe_points.points.grad.abs().sum() > 0)
    assert bool(lift.edge_gradients.score.weight.grad.abs().sum() > 0)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="fourier_features=8 with scaling='sign'"):
        build_metanet("scalegmn", hidden_dim=8, num_layers=1, fourier_features=8)
    with pytest.raises(ValueError, match="gradient_features under scaling='scale'"):
        build_metanet("scalegmn", hidden_dim=8, num_layers=1, network_activation="relu", gradient_features=4)
    with pytest.raises(ValueError, match="scaling='sign' but network_activation='relu' has the group 'scale'"):
        build_metanet("scalegmn", hidden_dim=8, num_layers=1, scaling="sign", network_activation="relu")
    with pytest.raises(ValueError, match="group='rotation'"):
        build_metanet("scalegmn", hidden_dim=8, num_layers=1, scaling="rotation")
    with pytest.raises(ValueError, match="^network_activation='gelu'"):
        build_metanet("gmn", hidden_dim=8, num_layers=1, probe_features=2, network_activation="gelu")
    layer = ScaleGMNLayer(4, "sign", bidirectional=True)
    edge_index = torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match="needs the encoder's reverse edges"):
        layer(torch.randn(2, 4), edge_index, torch.randn(1, 4), hidden=torch.tensor([False, True]),
              node_layer=torch.tensor([0, 1]))
