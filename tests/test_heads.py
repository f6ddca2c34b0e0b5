"""WeightDecoder indexing, InvariantReadout, merge_ensemble exactness and match_budget."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch_geometric.data import Batch

from neuralgraph.graph import GraphConversionError, ParameterGraph, mlp_to_graph, module_to_graph
from neuralgraph.nn import InvariantReadout, WeightDecoder, build_metanet, match_budget, merge_ensemble
from neuralgraph.nn.budget import model_parameters

TOLERANCE = 1e-10


def random_mlps(layout, batch_size, seed, scale=1.0):
    generator = torch.Generator().manual_seed(seed)
    weights = [scale * torch.randn(batch_size, o, i, generator=generator, dtype=torch.float64)
               for i, o in zip(layout, layout[1:])]
    biases = [scale * torch.randn(batch_size, o, generator=generator, dtype=torch.float64) for o in layout[1:]]
    return weights, biases


def relabel_nodes(graph: ParameterGraph, order: torch.Tensor) -> ParameterGraph:
    """The same graph with node ``order[n]`` stored at row ``n``."""
    new_id = torch.empty_like(order)
    new_id[order] = torch.arange(len(order))
    fields = {k: graph[k][order] for k in ("x", "node_layer", "node_index", "node_type")}
    return ParameterGraph(edge_index=new_id[graph.edge_index], edge_attr=graph.edge_attr,
                          edge_layer=graph.edge_layer, layout=graph.layout, **fields)


def decoder_and_features(graph, k=3, hidden=6, seed=0):
    torch.manual_seed(seed)
    decoder = WeightDecoder(hidden, k, max_layers=4, init_scale=0.3).double()
    node = torch.randn(graph.num_nodes, hidden, dtype=torch.float64)
    edge = torch.randn(graph.num_edges, hidden, dtype=torch.float64)
    return decoder, node, edge


def test_decoder_formula_and_shapes():
    """w_i = w + s_l dw_i and b_i = b + s_l db_i, read from the neurons of layer l."""
    layout = (3, 4, 2)
    weights, biases = random_mlps(layout, 2, 0)
    graph = mlp_to_graph(weights, biases)
    decoder, node, edge = decoder_and_features(graph)
    with torch.no_grad():
        decoder.scale.copy_(torch.tensor([0.3, -0.7, 0.0, 0.0], dtype=torch.float64))
        new_weights, new_biases = decoder(graph, node, edge)
        delta_w, delta_b = decoder.edge_head(edge), decoder.node_head(node)
    assert [tuple(w.shape) for w in new_weights] == [(2, 3, 4, 3), (2, 3, 2, 4)]
    assert [tuple(b.shape) for b in new_biases] == [(2, 3, 4), (2, 3, 2)]
    nodes_per_graph, edges_per_graph = sum(layout), 3 * 4 + 4 * 2
    for g in range(2):
        edge_offset, node_offset = g * edges_per_graph, g * nodes_per_graph
        dw1 = delta_w[edge_offset : edge_offset + 12].view(4, 3, 3).permute(2, 0, 1)
        dw2 = delta_w[edge_offset + 12 : edge_offset + 20].view(2, 4, 3).permute(2, 0, 1)
        torch.testing.assert_close(new_weights[0][g], weights[0][g] + 0.3 * dw1, rtol=0, atol=TOLERANCE)
        torch.testing.assert_close(new_weights[1][g], weights[1][g] - 0.7 * dw2, rtol=0, atol=TOLERANCE)
        db1 = delta_b[node_offset + 3 : node_offset + 7].T
        db2 = delta_b[node_offset + 7 : node_offset + 9].T
        torch.testing.assert_close(new_biases[0][g], biases[0][g] + 0.3 * db1, rtol=0, atol=TOLERANCE)
        torch.testing.assert_close(new_biases[1][g], biases[1][g] - 0.7 * db2, rtol=0, atol=TOLERANCE)


def test_decoder_skips_input_neurons():
    """Input neurons have no bias: their features never reach the decoded networks."""
    graph = mlp_to_graph(*random_mlps((3, 5, 1), 2, 1))
    decoder, node, edge = decoder_and_features(graph)
    poisoned = node.clone()
    poisoned[graph.node_layer == 0] = float("nan")
    with torch.no_grad():
        expected, actual = decoder(graph, node, edge), decoder(graph, poisoned, edge)
    for a, e in zip(actual[0] + actual[1], expected[0] + expected[1]):
        assert torch.equal(a, e)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), layout=st.lists(st.integers(1, 4), min_size=2, max_size=4).map(tuple))
def test_decoder_reads_by_index_not_storage_order(seed, layout):
    weights, biases = random_mlps(layout, 1, seed)
    graph = mlp_to_graph([w[0] for w in weights], [b[0] for b in biases])
    decoder, node, edge = decoder_and_features(graph, seed=seed)
    order = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        expected = decoder(graph, node, edge)
        actual = decoder(relabel_nodes(graph, order), node[order], edge)
    # the same rows in another order may take another BLAS kernel path: equal up to rounding
    for a, e in zip(actual[0] + actual[1], expected[0] + expected[1]):
        torch.testing.assert_close(a, e, rtol=0, atol=1e-12)


def test_decoder_with_zero_scale_returns_the_input_networks():
    weights, biases = random_mlps((2, 4, 4, 1), 3, 2)
    graph = mlp_to_graph(weights, biases)
    decoder, node, edge = decoder_and_features(graph, k=2)
    nn.init.zeros_(decoder.scale)
    new_weights, new_biases = decoder(graph, node, edge)
    for new, old in zip(new_weights + new_biases, weights + biases):
        assert torch.equal(new, old.unsqueeze(1).expand_as(new))


def test_decoder_errors():
    graphs = [mlp_to_graph([torch.randn(3, 2), torch.randn(1, 3)], [torch.randn(3), torch.randn(1)]),
              mlp_to_graph([torch.randn(4, 2), torch.randn(1, 4)], [torch.randn(4), torch.randn(1)])]
    mixed = Batch.from_data_list(graphs)
    decoder = WeightDecoder(4, 2)
    with pytest.raises(GraphConversionError, match="mixes layouts"):
        decoder(mixed, torch.zeros(mixed.num_nodes, 4), torch.zeros(mixed.num_edges, 4))
    conv = module_to_graph(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2, 1)))
    with pytest.raises(GraphConversionError, match="features per edge"):
        decoder(conv, torch.zeros(conv.num_nodes, 4), torch.zeros(conv.num_edges, 4))
    with pytest.raises(ValueError, match="k=0"):
        WeightDecoder(4, 0)


def test_readout_pools_each_layer():
    """With a linear MLP the readout sees exactly the per-layer means, zero for absent layers."""
    graph = Batch.from_data_list([mlp_to_graph([torch.randn(3, 2), torch.randn(1, 3)], [torch.randn(3), torch.randn(1)])])
    readout = InvariantReadout(2, 4, max_layers=3).double()
    captured = []
    readout.mlp[0].register_forward_hook(lambda module, args, out: captured.append(args[0]))
    node = torch.randn(graph.num_nodes, 2, dtype=torch.float64)
    edge = torch.randn(graph.num_edges, 2, dtype=torch.float64)
    readout(graph, node, edge)
    zero = torch.zeros(2, dtype=torch.float64)
    expected = torch.cat([node[:2].mean(0), node[2:5].mean(0), node[5:].mean(0), zero,
                          edge[:6].mean(0), edge[6:].mean(0), zero])
    torch.testing.assert_close(captured[0][0], expected)
    with pytest.raises(ValueError, match="edge_layer"):
        InvariantReadout(2, 4, max_layers=1)(graph, node, edge)


def mlp_forward(weights, biases, inputs, activation, output_offset=0.0):
    """Batched forward of ``[B, d_out, d_in]`` layers on ``[P, d_0]`` inputs: ``[B, P, d_L]``."""
    h = inputs.unsqueeze(0)
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        h = h @ w.transpose(1, 2) + b.unsqueeze(1)
        if l < len(weights):
            h = activation(h)
    return h + output_offset


ACTIVATIONS = {"siren": lambda h: torch.sin(30.0 * h), "relu": torch.relu, "tanh": torch.tanh}


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**16), k=st.integers(1, 5),
       layout=st.lists(st.integers(1, 6), min_size=2, max_size=5).map(tuple))
def test_merged_network_is_the_average(activation, seed, k, layout):
    B = 2
    weights, biases = random_mlps(layout, B * k, seed, scale=0.3)
    members_w = [w.view(B, k, *w.shape[1:]) for w in weights]
    members_b = [b.view(B, k, -1) for b in biases]
    merged_w, merged_b = merge_ensemble(members_w, members_b)
    hidden = [k * d for d in layout[1:-1]]
    expected_shapes = list(zip([*hidden, layout[-1]], [layout[0], *hidden]))
    assert [tuple(w.shape[1:]) for w in merged_w] == expected_shapes
    inputs = torch.rand(50, layout[0], generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2 - 1
    act = ACTIVATIONS[activation]
    members = mlp_forward(weights, biases, inputs, act, output_offset=0.5).view(B, k, 50, -1).mean(1)
    merged = mlp_forward(merged_w, merged_b, inputs, act, output_offset=0.5)
    torch.testing.assert_close(merged, members, rtol=0, atol=TOLERANCE)


def test_merge_errors():
    with pytest.raises(GraphConversionError, match="layer 2"):
        merge_ensemble([torch.zeros(1, 2, 3, 2), torch.zeros(1, 2, 1, 3)], [torch.zeros(1, 2, 3), torch.zeros(1, 2, 3)])
    with pytest.raises(GraphConversionError, match="differs from layer 1"):
        merge_ensemble([torch.zeros(1, 2, 3, 2), torch.zeros(1, 3, 1, 3)], [torch.zeros(1, 2, 3), torch.zeros(1, 3, 1)])


@pytest.mark.parametrize("width_multiple", [1, 8])
@pytest.mark.parametrize("name, cfg", [("gmn", {"hidden_dim": 32, "num_layers": 2}),
                                       ("ng_t", {"hidden_dim": 32, "num_layers": 2, "num_heads": 4}),
                                       ("ng_t", {"hidden_dim": 36, "num_layers": 2, "num_heads": 6})])
def test_match_budget_finds_the_largest_width(name, cfg, width_multiple):
    match = match_budget(name, cfg, k=4, width_multiple=width_multiple)
    reference, _ = model_parameters(name, cfg, 1)
    assert match.reference_params == reference
    assert match.params <= reference
    width = match.config["hidden_dim"]
    step = math.lcm(width_multiple, cfg.get("num_heads", 1))  # 24 for 6 heads in steps of 8
    assert width % step == 0 and width < cfg["hidden_dim"]
    assert model_parameters(name, {**cfg, "hidden_dim": width}, 4)[0] == match.params
    assert model_parameters(name, {**cfg, "hidden_dim": width + step}, 4)[0] > reference
    metanet = build_metanet(name, **match.config)
    assert metanet.hidden_dim == width


def test_match_budget_fewer_outputs_grow_the_width():
    match = match_budget("gmn", {"hidden_dim": 8, "num_layers": 1}, k=1, reference_k=64, width_multiple=1)
    assert match.config["hidden_dim"] > 8 and match.params <= match.reference_params
    assert match_budget("gmn", {"hidden_dim": 8, "num_layers": 1}, k=1, reference_k=64).config["hidden_dim"] == 8


def test_match_budget_falls_back_to_exact_widths_below_the_first_multiple_of_8():
    cfg = {"hidden_dim": 8, "num_layers": 1}
    assert model_parameters("gmn", cfg, 4)[0] > model_parameters("gmn", cfg, 1)[0]  # 8 is over the k=4 budget
    assert match_budget("gmn", cfg, k=4) == match_budget("gmn", cfg, k=4, width_multiple=1)
    assert 0 < match_budget("gmn", cfg, k=4).config["hidden_dim"] < 8


def test_match_budget_impossible():
    with pytest.raises(ValueError, match="even at hidden_dim=1"):
        match_budget("gmn", {"hidden_dim": 2, "num_layers": 1}, k=10_000)


def copy_members(source: WeightDecoder, target: WeightDecoder) -> None:
    """``target`` (coupled) gets ``source``'s (independent) parameters: its deltas' diagonal are source's deltas."""
    k = source.k
    diagonal = torch.arange(k) * (k + 1)
    with torch.no_grad():
        target.node_head.load_state_dict(source.node_head.state_dict())
        target.edge_head[0].load_state_dict(source.edge_head[0].state_dict())
        target.edge_head[2].weight[diagonal] = source.edge_head[2].weight
        target.edge_head[2].bias[diagonal] = source.edge_head[2].bias
        target.scale.copy_(source.scale)


def test_coupled_decoder_starts_as_the_merged_oce_network():
    """Cross-copy scales start at zero: the wide network is exactly merge_ensemble of the k members."""
    graph = mlp_to_graph(*random_mlps((2, 4, 3, 3, 1), 2, 3))
    independent, node, edge = decoder_and_features(graph, k=3)
    coupled = WeightDecoder(6, 3, max_layers=4, members="coupled").double()
    copy_members(independent, coupled)
    with torch.no_grad():
        wide_w, wide_b = coupled(graph, node, edge)
        merged_w, merged_b = merge_ensemble(*independent(graph, node, edge))
    assert [tuple(w.shape) for w in wide_w] == [(2, 1, 12, 2), (2, 1, 9, 12), (2, 1, 9, 9), (2, 1, 1, 9)]
    for wide, merged in zip(wide_w + wide_b, merged_w + merged_b):
        torch.testing.assert_close(wide[:, 0], merged, rtol=0, atol=TOLERANCE)


def test_coupled_decoder_cross_blocks():
    """W[(m, i), (m', j)] = c_l dw_ij^(m m') off the diagonal blocks of hidden layers, and only there."""
    graph = mlp_to_graph(*random_mlps((2, 4, 3, 1), 1, 4))
    k = 3
    torch.manual_seed(1)
    coupled = WeightDecoder(6, k, max_layers=4, members="coupled").double()
    node = torch.randn(graph.num_nodes, 6, dtype=torch.float64)
    edge = torch.randn(graph.num_edges, 6, dtype=torch.float64)
    with torch.no_grad():
        coupled.cross_scale.copy_(torch.tensor([0.0, 0.7, 0.0, 0.0], dtype=torch.float64))
        wide_w, _ = coupled(graph, node, edge)
        nn.init.zeros_(coupled.cross_scale)
        start_w, _ = coupled(graph, node, edge)
        delta = coupled.deltas(node, edge)[0].view(-1, k, k)
    blocks = delta[graph.edge_layer == 1].view(3, 4, k, k)  # mlp_to_graph stores edge (i, j) of layer 2 at 4 i + j
    change = (wide_w[1] - start_w[1])[0, 0].view(k, 3, k, 4)  # [(m, i), (m', j)]
    for m in range(k):
        for n in range(k):
            expected = torch.zeros(3, 4, dtype=torch.float64) if m == n else 0.7 * blocks[:, :, m, n]
            torch.testing.assert_close(change[m, :, n], expected, rtol=0, atol=TOLERANCE)
    for layer in (0, 2):
        assert torch.equal(wide_w[layer], start_w[layer])


@pytest.mark.parametrize("name, group", [("gmn", None), ("scalegmn", "sign"), ("scalegmn", "scale")])
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**16), hidden=st.tuples(st.integers(2, 5), st.integers(2, 5)))
def test_coupled_decoder_is_equivariant(name, group, seed, hidden, device):
    """Permuting (and, for ScaleGMN, rescaling) the input's hidden neuron i moves every copy (m, i) of
    the wide output alike: permutation p sends (m, i) to (m, p(i)), scaling q_i multiplies (m, i)."""
    from neuralgraph.graph import permute_mlp, random_hidden_permutations
    from neuralgraph.graph.scaling import random_hidden_scalings, rescale_mlp

    layout, k = (2, *hidden, 1), 3
    torch.manual_seed(seed)
    options = {"scaling": group, "network_activation": "relu" if group == "scale" else "sine"} if group else {}
    metanet = build_metanet(name, hidden_dim=8, num_layers=2, max_layers=3, **options).double().eval().to(device)
    coupled = WeightDecoder(8, k, max_layers=3, init_scale=0.5, scaling=metanet.scaling, members="coupled").double()
    nn.init.constant_(coupled.cross_scale, 0.5)
    coupled.to(device)
    generator = torch.Generator().manual_seed(seed)
    weights, biases = random_mlps(layout, 2, seed)
    perms = random_hidden_permutations(layout, 2, generator)
    scalings = random_hidden_scalings(layout, group, 2, generator) if group else [None] * len(perms)

    def decode(w, b):
        graph = mlp_to_graph(w, b).to(device)
        with torch.no_grad():
            wide_w, wide_b = coupled(graph, *metanet(graph))
        return [x[:, 0].cpu() for x in wide_w], [x[:, 0].cpu() for x in wide_b]

    copies = [torch.cat([m * p.shape[1] + p for m in range(k)], dim=1) for p in perms]
    wide_scalings = [None if q is None else q.repeat(1, k) for q in scalings]
    expected = permute_mlp(*rescale_mlp(*decode(weights, biases), wide_scalings), copies)
    actual = decode(*permute_mlp(*rescale_mlp(weights, biases, scalings), perms))
    for a, e in zip(actual[0] + actual[1], expected[0] + expected[1]):
        torch.testing.assert_close(a, e, rtol=0, atol=TOLERANCE)


def test_tied_decoder_repeats_the_k1_decoder():
    """k identical members, each the network of a k = 1 decoder with the same parameters."""
    graph = mlp_to_graph(*random_mlps((2, 4, 3, 1), 2, 5))
    single, node, edge = decoder_and_features(graph, k=1)
    tied = WeightDecoder(6, 4, max_layers=4, members="tied").double()
    tied.load_state_dict(single.state_dict())
    with torch.no_grad():
        expected, actual = single(graph, node, edge), tied(graph, node, edge)
    for a, e in zip(actual[0] + actual[1], expected[0] + expected[1]):
        assert a.shape[1] == 4 and torch.equal(a, e.expand_as(a))


def test_decoder_members_parameter_counts():
    def count(k, members):
        return sum(p.numel() for p in WeightDecoder(6, k, max_layers=4, members=members).parameters())

    assert count(8, "tied") == count(1, "independent")
    assert count(8, "coupled") == count(8, "independent") + (8 * 8 - 8) * (6 + 1) + 4
    assert count(1, "coupled") == count(1, "independent")
    assert model_parameters("gmn", {"hidden_dim": 8, "num_layers": 1}, 4, members="coupled")[0] > model_parameters(
        "gmn", {"hidden_dim": 8, "num_layers": 1}, 4)[0]
    def width(members, width_multiple):
        return match_budget("gmn", {"hidden_dim": 32, "num_layers": 2}, k=8, members=members,
                            width_multiple=width_multiple).config["hidden_dim"]

    assert width("coupled", 1) < width("independent", 1)
    assert width("coupled", 8) <= width("independent", 8)
    with pytest.raises(ValueError, match=r"^WeightDecoder members='shared': choose one of independent, coupled, tied$"):
        WeightDecoder(6, 2, members="shared")


@pytest.mark.parametrize("members", ["independent", "coupled", "tied"])
@pytest.mark.parametrize("scaling", [None, "sign"])
def test_heads_read_the_batch_weights_as_they_read_the_graph(members, scaling, device):
    """Given a context holding the batch's WeightBlocks, the decoder adds its deltas to those blocks and the
    readout pools with the context's graph index: what both compute from the graph alone, gradients included."""
    from neuralgraph.graph import WeightBlocks
    from neuralgraph.nn.context import graph_context

    layout = (2, 5, 4, 1)
    weights, biases = ([t.to(device) for t in ts] for ts in random_mlps(layout, 3, 7))
    graph = mlp_to_graph(weights, biases)
    context = graph_context(graph, blocks=WeightBlocks.of_mlps(weights, biases))
    torch.manual_seed(0)
    decoder = WeightDecoder(6, 3, max_layers=4, init_scale=0.3, scaling=scaling, members=members).double()
    readout = InvariantReadout(6, 2, max_layers=4, scaling=scaling).double()
    if decoder.cross_scale is not None:  # zero at initialisation: let the cross-copy blocks count
        with torch.no_grad():
            decoder.cross_scale.fill_(0.2)
    decoder, readout = decoder.to(device), readout.to(device)
    node = torch.randn(graph.num_nodes, 6, dtype=torch.float64).to(device)
    edge = torch.randn(graph.num_edges, 6, dtype=torch.float64).to(device)
    results = []
    for passed in (context, None):
        decoder.zero_grad()
        readout.zero_grad()
        new_weights, new_biases = decoder(graph, node, edge, passed)
        pooled = readout(graph, node, edge, passed)
        (sum(t.sin().sum() for t in new_weights + new_biases) + pooled.cos().sum()).backward()
        results.append(new_weights + new_biases + [pooled]
                       + [p.grad for p in [*decoder.parameters(), *readout.parameters()] if p.grad is not None])
    assert len(results[0]) == len(results[1])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=0, atol=TOLERANCE)
