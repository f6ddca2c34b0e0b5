"""Probe and gradient features: exact against autograd, equivariant to permutations and sign flips."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neuralgraph.graph import GraphConversionError, mlp_to_graph, module_to_graph, permute_mlp, random_hidden_permutations
from neuralgraph.graph.scaling import random_hidden_scalings, rescale_mlp
from neuralgraph.nn.weight_features import ProbePoints, gradient_features, probe_features

TOLERANCE = 1e-10
RELATIVE = 1e-12  # sine signals grow by w0 = 30 per layer: values reach 1e3
LAYOUTS = st.sampled_from([(2, 5, 1), (2, 4, 3, 1), (3, 4, 4, 2), (2, 3, 4, 5, 1)])


def random_mlps(layout, batch_size, seed, scale=0.3):
    g = torch.Generator().manual_seed(seed)
    weights = [scale * torch.randn(batch_size, o, i, generator=g, dtype=torch.float64) for i, o in zip(layout, layout[1:])]
    biases = [scale * torch.randn(batch_size, o, generator=g, dtype=torch.float64) for o in layout[1:]]
    return weights, biases


def points_for(layout, count, seed):
    return torch.rand(count, layout[0], generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2 - 1


def functional_mlp(weights, biases, x, activation, w0):
    h = x
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        h = h @ w.T + b
        if l < len(weights):
            h = {"sine": lambda z: torch.sin(w0 * z), "tanh": torch.tanh, "relu": torch.relu}[activation](h)
    return h


@settings(max_examples=15, deadline=None)
@given(layout=LAYOUTS, activation=st.sampled_from(["sine", "tanh", "relu"]), seed=st.integers(0, 10_000))
def test_gradients_match_autograd(layout, activation, seed):
    """Per network and point, edge/node features equal d(sum of outputs)/dW and d/db from autograd."""
    weights, biases = random_mlps(layout, 3, seed)
    points = points_for(layout, 4, seed)
    graph = mlp_to_graph(weights, biases)
    features = gradient_features(graph, points, activation, w0=3.0)
    expected_edge, expected_node = [], []
    for b in range(3):
        params = [t[b].clone().requires_grad_() for t in weights + biases]
        per_point_edge, per_point_node = [], []
        for p in range(len(points)):
            out = functional_mlp(params[: len(weights)], params[len(weights):], points[p], activation, 3.0).sum()
            grads = torch.autograd.grad(out, params)
            per_point_edge.append(torch.cat([g.flatten() for g in grads[: len(weights)]]))
            per_point_node.append(torch.cat([torch.zeros(layout[0], dtype=torch.float64)] + [g for g in grads[len(weights):]]))
        expected_edge.append(torch.stack(per_point_edge, 1))
        expected_node.append(torch.stack(per_point_node, 1))
    torch.testing.assert_close(features.edge, torch.cat(expected_edge), rtol=0, atol=TOLERANCE)
    hidden_and_output = graph.node_layer > 0
    torch.testing.assert_close(features.node[hidden_and_output], torch.cat(expected_node)[hidden_and_output],
                               rtol=0, atol=TOLERANCE)


def test_input_signal_is_input_gradient():
    """The input nodes' signal is the gradient of the output w.r.t. the input coordinates."""
    weights, biases = random_mlps((2, 6, 1), 1, 0)
    x = points_for((2, 6, 1), 1, 1)[0].requires_grad_()
    out = functional_mlp([w[0] for w in weights], [b[0] for b in biases], x, "sine", 30.0).sum()
    (expected,) = torch.autograd.grad(out, x)
    node = gradient_features(mlp_to_graph(weights, biases), x.detach()[None], "sine").node
    torch.testing.assert_close(node[:2, 0], expected, rtol=0, atol=TOLERANCE)


def test_probe_features_are_the_forward_pass():
    weights, biases = random_mlps((2, 4, 3, 1), 2, 1)
    points = points_for((2, 4, 3, 1), 5, 2)
    probes = probe_features(mlp_to_graph(weights, biases), points, "tanh")  # [2 * 10, 5]
    hidden = torch.tanh(points @ weights[0][1].T + biases[0][1])
    torch.testing.assert_close(probes[10:12].T, points, rtol=0, atol=0)
    torch.testing.assert_close(probes[12:16].T, hidden, rtol=0, atol=TOLERANCE)
    out = functional_mlp([w[1] for w in weights], [b[1] for b in biases], points, "tanh", 30.0)
    torch.testing.assert_close(probes[19], out[:, 0], rtol=0, atol=TOLERANCE)


def relabelling(layout, batch_size, perms, signs):
    """Where node and edge rows of a permuted, sign-flipped batch come from, and their sign.

    Node ``n`` of the transformed graph is node ``node_source[n]`` of the original, times
    ``node_sign[n]``; likewise for edges (an edge ``j -> i`` is multiplied by ``s_i s_j``).
    """
    full_perms = [torch.arange(layout[0]).expand(batch_size, -1), *perms, torch.arange(layout[-1]).expand(batch_size, -1)]
    ones = lambda d: torch.ones(batch_size, d, dtype=torch.float64)
    full_signs = [ones(layout[0]), *[q.gather(1, p) for q, p in zip(signs, perms)], ones(layout[-1])]
    N, E = sum(layout), sum(a * b for a, b in zip(layout, layout[1:]))
    node_offsets = torch.tensor([0, *layout]).cumsum(0)
    node_source = torch.cat([node_offsets[l] + p for l, p in enumerate(full_perms)], 1) + N * torch.arange(batch_size)[:, None]
    node_sign = torch.cat(full_signs, 1)
    edge_source, edge_sign, offset = [], [], 0
    for l in range(1, len(layout)):
        rows, cols = full_perms[l], full_perms[l - 1]
        edge_source.append(offset + rows[:, :, None] * layout[l - 1] + cols[:, None, :])
        edge_sign.append(full_signs[l][:, :, None] * full_signs[l - 1][:, None, :])
        offset += layout[l] * layout[l - 1]
    edge_source = torch.cat([e.flatten(1) for e in edge_source], 1) + E * torch.arange(batch_size)[:, None]
    return node_source.flatten(), node_sign.flatten(), edge_source.flatten(), torch.cat([e.flatten(1) for e in edge_sign], 1).flatten()


@settings(max_examples=10, deadline=None)
@given(layout=LAYOUTS, activation=st.sampled_from(["sine", "tanh"]), seed=st.integers(0, 10_000))
def test_permutation_and_sign_equivariance(layout, activation, seed):
    """Permuting and sign-flipping hidden neurons permutes and flips every feature with them."""
    weights, biases = random_mlps(layout, 2, seed)
    points = points_for(layout, 3, seed)
    g = torch.Generator().manual_seed(seed)
    perms = random_hidden_permutations(layout, 2, g)
    signs = random_hidden_scalings(layout, "sign", 2, g)
    graph = mlp_to_graph(weights, biases)
    moved = mlp_to_graph(*permute_mlp(*rescale_mlp(weights, biases, signs), perms))
    node_source, node_sign, edge_source, edge_sign = relabelling(layout, 2, perms, signs)
    before, after = gradient_features(graph, points, activation), gradient_features(moved, points, activation)
    torch.testing.assert_close(after.edge, before.edge[edge_source] * edge_sign[:, None], rtol=RELATIVE, atol=TOLERANCE)
    torch.testing.assert_close(after.node, before.node[node_source] * node_sign[:, None], rtol=RELATIVE, atol=TOLERANCE)
    torch.testing.assert_close(probe_features(moved, points, activation),
                               probe_features(graph, points, activation)[node_source] * node_sign[:, None],
                               rtol=RELATIVE, atol=TOLERANCE)


def test_relu_rescaling_scales_activations_and_inverts_signals():
    layout = (2, 5, 4, 1)
    weights, biases = random_mlps(layout, 2, 3)
    points = points_for(layout, 3, 4)
    scales = random_hidden_scalings(layout, "scale", 2, torch.Generator().manual_seed(5))
    ident = [torch.arange(d).expand(2, -1) for d in layout[1:-1]]
    node_source, node_scale, _, _ = relabelling(layout, 2, ident, scales)
    graph, moved = mlp_to_graph(weights, biases), mlp_to_graph(*rescale_mlp(weights, biases, scales))
    torch.testing.assert_close(probe_features(moved, points, "relu"),
                               probe_features(graph, points, "relu") * node_scale[:, None], rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(gradient_features(moved, points, "relu").node,
                               gradient_features(graph, points, "relu").node / node_scale[:, None], rtol=0, atol=TOLERANCE)


def test_errors_name_the_problem():
    weights, biases = random_mlps((2, 3, 1), 2, 0)
    graph = mlp_to_graph(weights, biases)
    with pytest.raises(ValueError, match="activation='gelu'"):
        probe_features(graph, points_for((2, 3, 1), 2, 0), "gelu")
    with pytest.raises(ValueError, match=r"points \(2, 3\) do not match"):
        probe_features(graph, torch.zeros(2, 3, dtype=torch.float64))
    conv = module_to_graph(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(), torch.nn.Conv2d(2, 1, 3)))
    with pytest.raises(GraphConversionError, match="need MLP graphs"):
        gradient_features(conv, torch.zeros(1, 1))
    with pytest.raises(ValueError, match="ProbePoints has 3-dimensional points but the networks have 2 inputs"):
        ProbePoints(4, 3)(graph)


def test_probe_points_learned_or_fixed():
    learned, fixed = ProbePoints(8, 2), ProbePoints(8, 2, learn=False)
    assert [n for n, _ in learned.named_parameters()] == ["points"] and not list(fixed.parameters())
    assert float(learned.points.detach().abs().max()) <= 1.0
    weights, biases = random_mlps((2, 3, 1), 2, 0)
    graph = mlp_to_graph([w.float() for w in weights], [b.float() for b in biases])
    probe_features(graph, learned(graph)).sum().backward()
    assert learned.points.grad is not None and bool(learned.points.grad.abs().sum() > 0)
