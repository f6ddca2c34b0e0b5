"""The parameter graph: exact round trips, permutation symmetry, errors on bad input."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch_geometric.data import Batch

from neuralgraph.graph import (
    GraphConversionError,
    graph_to_mlp,
    graph_to_module,
    mlp_to_graph,
    module_to_graph,
    num_node_types,
    permute_mlp,
    random_hidden_permutation,
    random_hidden_permutations,
)


def random_mlp(layout, batch=None, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    weights = [torch.randn(*lead, layout[l + 1], layout[l], generator=gen, dtype=dtype) for l in range(len(layout) - 1)]
    biases = [torch.randn(*lead, layout[l + 1], generator=gen, dtype=dtype) for l in range(len(layout) - 1)]
    return weights, biases


def mlp_forward(weights, biases, inputs):
    h = inputs
    for l, (w, b) in enumerate(zip(weights, biases)):
        h = h @ w.T + b
        if l < len(weights) - 1:
            h = torch.tanh(h)
    return h


layouts = st.lists(st.integers(1, 64), min_size=2, max_size=7).map(tuple)


@settings(max_examples=40, deadline=None)
@given(layout=layouts, batch=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_round_trip_is_bitwise_exact(layout, batch, seed):
    weights, biases = random_mlp(layout, batch, seed)
    graph = mlp_to_graph(weights, biases)
    assert graph.num_graphs == batch and graph.num_nodes == batch * sum(layout)
    back_w, back_b = graph_to_mlp(graph)
    for a, b in zip(weights + biases, back_w + back_b):
        assert a.dtype == b.dtype and torch.equal(a, b)
    # one network at a time gives the same graphs as the batched path
    single = mlp_to_graph([w[-1] for w in weights], [b[-1] for b in biases])
    w1, b1 = graph_to_mlp(single)
    assert all(torch.equal(a[-1], b) for a, b in zip(weights + biases, w1 + b1))


@settings(max_examples=15, deadline=None)
@given(layout=st.lists(st.integers(1, 8), min_size=2, max_size=5).map(tuple), batch=st.integers(1, 4))
def test_batched_path_equals_from_data_list(layout, batch):
    weights, biases = random_mlp(layout, batch)
    fast = mlp_to_graph(weights, biases)
    slow = Batch.from_data_list(
        [mlp_to_graph([w[i] for w in weights], [b[i] for b in biases]) for i in range(batch)]
    )
    for key in slow.keys():
        a, b = fast[key], slow[key]
        assert (torch.equal(a, b) if torch.is_tensor(a) else a == b), key
    for i in range(batch):
        ex_fast, ex_slow = fast.get_example(i), slow.get_example(i)
        assert all(torch.equal(ex_fast[k], ex_slow[k]) for k in ex_slow.keys() if torch.is_tensor(ex_slow[k]))


def test_graph_fields_follow_the_convention():
    layout = (2, 3, 3, 1)
    weights, biases = random_mlp(layout)
    g = mlp_to_graph(weights, biases)
    assert g.layout == layout
    assert g.node_layer.tolist() == [0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert g.node_index.tolist() == [0, 1, 0, 1, 2, 0, 1, 2, 0]
    assert g.node_type.tolist() == [0, 1, 2, 2, 2, 3, 3, 3, 4]
    assert num_node_types(layout) == 5
    assert torch.equal(g.x[:2], torch.zeros(2, 1))  # input neurons carry no bias
    assert torch.equal(g.x[2:5, 0], biases[0])
    # edge (j in layer 0) -> (i in layer 1) carries W_1[i, j]
    src, dst = g.edge_index
    for e in range(g.num_edges):
        l = int(g.edge_layer[e])
        i, j = int(g.node_index[dst[e]]), int(g.node_index[src[e]])
        assert g.node_layer[src[e]] == l and g.node_layer[dst[e]] == l + 1
        assert g.edge_attr[e, 0] == weights[l][i, j]


def test_mixed_layouts_batch_and_decode_one_by_one():
    graphs = [mlp_to_graph(*random_mlp(layout, seed=i)) for i, layout in enumerate([(2, 4, 1), (3, 5, 5, 2), (2, 4, 1)])]
    batch = Batch.from_data_list(graphs)
    assert batch.layout == [(2, 4, 1), (3, 5, 5, 2), (2, 4, 1)]
    with pytest.raises(GraphConversionError, match="mixes layouts"):
        graph_to_mlp(batch)
    for original, example in zip(graphs, batch.to_data_list()):
        for a, b in zip(sum(graph_to_mlp(original), []), sum(graph_to_mlp(example), [])):
            assert torch.equal(a, b)


def test_decoding_does_not_depend_on_storage_order():
    weights, biases = random_mlp((3, 4, 2), batch=2)
    g = mlp_to_graph(weights, biases)
    order = torch.randperm(g.num_edges, generator=torch.Generator().manual_seed(1))
    g.edge_index, g.edge_attr, g.edge_layer = g.edge_index[:, order], g.edge_attr[order], g.edge_layer[order]
    back_w, back_b = graph_to_mlp(g)
    assert all(torch.equal(a, b) for a, b in zip(weights + biases, back_w + back_b))


def canonical_edges(graph):
    """Relabel hidden neurons by sorting their (distinct) biases; return the sorted edge list."""
    label = graph.node_index.clone()
    hidden_layers = range(1, len(graph.layout) - 1)
    for l in hidden_layers:
        mask = (graph.node_layer == l).nonzero().squeeze(1)
        ranks = torch.argsort(torch.argsort(graph.x[mask, 0]))
        label[mask] = ranks
    nodes = sorted(zip(graph.node_layer.tolist(), label.tolist(), graph.x[:, 0].tolist()))
    src, dst = graph.edge_index
    edges = sorted(
        zip(
            graph.node_layer[src].tolist(), label[src].tolist(), label[dst].tolist(), graph.edge_attr[:, 0].tolist()
        )
    )
    return nodes, edges


@settings(max_examples=25, deadline=None)
@given(layout=st.lists(st.integers(1, 12), min_size=3, max_size=6).map(tuple), seed=st.integers(0, 2**16))
def test_hidden_permutation_keeps_function_and_graph_up_to_relabelling(layout, seed):
    weights, biases = random_mlp(layout, seed=seed, dtype=torch.float64)
    perms = random_hidden_permutation(layout, torch.Generator().manual_seed(seed))
    pw, pb = permute_mlp(weights, biases, perms)
    inputs = torch.randn(16, layout[0], dtype=torch.float64)
    torch.testing.assert_close(mlp_forward(pw, pb, inputs), mlp_forward(weights, biases, inputs), rtol=0, atol=1e-12)
    assert canonical_edges(mlp_to_graph(pw, pb)) == canonical_edges(mlp_to_graph(weights, biases))
    if any(not torch.equal(p, torch.arange(len(p))) for p in perms):
        assert any(not torch.equal(a, b) for a, b in zip(pw, weights))


def test_input_permutation_changes_the_function():
    weights, biases = random_mlp((3, 5, 2), dtype=torch.float64)
    pw, pb = permute_mlp(weights, biases, [torch.tensor([1, 0, 2]), None, None])
    inputs = torch.randn(8, 3, dtype=torch.float64)
    assert not torch.allclose(mlp_forward(pw, pb, inputs), mlp_forward(weights, biases, inputs))


@pytest.mark.parametrize(
    "make",
    [
        lambda: nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)),
        lambda: nn.Sequential(nn.Linear(3, 8, bias=False), nn.SiLU(), nn.Dropout(0.0), nn.Linear(8, 2)),
    ],
)
def test_module_round_trip_gives_identical_outputs(make):
    torch.manual_seed(0)
    module, template = make(), make()
    graph = module_to_graph(module)
    rebuilt = graph_to_module(graph, template)
    inputs = torch.randn(10, 3)
    assert torch.equal(rebuilt(inputs), module(inputs))
    assert "Tanh()" in graph.architecture or "SiLU()" in graph.architecture
    state = graph_to_module(module_to_graph(module.state_dict()), template.state_dict())
    assert state.keys() == module.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in module.state_dict().items())


def small_cnn(pool: bool):
    head = [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 5)] if pool else [nn.Flatten(), nn.Linear(6 * 4 * 4, 5)]
    return nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(), *head, nn.ReLU(), nn.Linear(5, 3)
    )


@pytest.mark.parametrize("pool", [True, False])
def test_cnn_round_trip(pool):
    torch.manual_seed(0)
    cnn = small_cnn(pool)
    graph = module_to_graph(cnn)
    assert graph.layout == (1, 4, 6, 5, 3)
    assert graph.edge_attr.shape == (4 + 24 + 30 + 15, 9 if pool else 16)
    rebuilt = graph_to_module(graph, small_cnn(pool))
    images = torch.randn(2, 1, 6, 6)
    assert torch.equal(rebuilt(images), cnn(images))
    # a 3x3 kernel sits, flattened row-major, in the first 9 features of its edge
    assert torch.equal(graph.edge_attr[0, :9], cnn[0].weight[0, 0].flatten())
    assert bool((graph.edge_attr[: 4 + 24, 9:] == 0).all())


def test_bad_inputs_name_the_layer():
    w, b = random_mlp((2, 3, 1))
    with pytest.raises(GraphConversionError, match="layer 2: weight expects 4 inputs but layer 1 has 3 outputs"):
        mlp_to_graph([w[0], torch.randn(1, 4)], b)
    with pytest.raises(GraphConversionError, match="layer 2: bias is missing"):
        mlp_to_graph(w, [b[0], None])
    with pytest.raises(GraphConversionError, match="layer 1: bias has shape"):
        mlp_to_graph(w, [torch.zeros(4), b[1]])
    with pytest.raises(GraphConversionError, match="layer 1: weight contains NaN"):
        mlp_to_graph([w[0].clone().fill_(float("nan")), w[1]], b)
    with pytest.raises(GraphConversionError, match="layer 2: bias contains NaN or infinite"):
        mlp_to_graph(w, [b[0], torch.tensor([float("inf")])])
    with pytest.raises(GraphConversionError, match="got 2 weight tensors but 1 bias"):
        mlp_to_graph(w, b[:1])
    with pytest.raises(GraphConversionError, match="layer 2: dtype torch.float64"):
        mlp_to_graph([w[0], w[1].double()], [b[0], b[1].double()])
    with pytest.raises(GraphConversionError, match="layer 1: weight"):
        mlp_to_graph([torch.randn(3)], [torch.randn(3)])


def test_unsupported_layer_and_bad_state_dicts_are_named():
    with pytest.raises(GraphConversionError, match=r"Sequential is in training mode: BatchNorm is folded"):
        module_to_graph(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Linear(3, 1)))
    with pytest.raises(GraphConversionError, match="unexpected key '1.running_mean'"):
        module_to_graph(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)).state_dict())
    with pytest.raises(GraphConversionError, match="has 0.bias but no 0.weight"):
        module_to_graph({"0.bias": torch.zeros(3)})
    with pytest.raises(GraphConversionError, match="'0.weight' has shape"):
        module_to_graph({"0.weight": torch.zeros(3, 2, 2)})
    with pytest.raises(GraphConversionError, match="groups=2"):
        module_to_graph(nn.Sequential(nn.Conv2d(2, 4, 3, groups=2)))
    with pytest.raises(GraphConversionError, match=r"layer '2' \(Linear\) cannot run on inputs of shape \(2, 3\)"):
        module_to_graph(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(10, 1)))


def test_graph_to_module_rejects_a_mismatching_template():
    graph = module_to_graph(nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)))
    with pytest.raises(GraphConversionError, match="graph has 2 layers but the template has 3"):
        graph_to_module(graph, nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 3), nn.Linear(3, 1)))
    with pytest.raises(GraphConversionError, match=r"layer '0': template has \(4, 2\)"):
        graph_to_module(graph, nn.Sequential(nn.Linear(2, 4), nn.Linear(4, 1)))
    batch = Batch.from_data_list([graph, graph])
    with pytest.raises(GraphConversionError, match="single graph"):
        graph_to_module(batch, nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1)))


def test_permute_mlp_rejects_bad_permutations():
    w, b = random_mlp((2, 3, 1))
    with pytest.raises(GraphConversionError, match="got 2 permutations for 2 layers"):
        permute_mlp(w, b, [torch.arange(3), torch.arange(3)])
    with pytest.raises(GraphConversionError, match="layer 1: permutation is not a permutation of its 3 neurons"):
        permute_mlp(w, b, [torch.tensor([0, 0, 1])])


def test_per_network_permutations_match_one_at_a_time():
    layout, batch = (3, 5, 4, 2), 6
    weights, biases = random_mlp(layout, batch)
    perms = random_hidden_permutations(layout, batch, torch.Generator().manual_seed(3))
    pw, pb = permute_mlp(weights, biases, perms)
    for n in range(batch):
        one_w, one_b = permute_mlp([w[n] for w in weights], [b[n] for b in biases], [p[n] for p in perms])
        assert all(torch.equal(a[n], c) for a, c in zip(pw + pb, one_w + one_b))


def test_decoding_a_damaged_graph_names_the_layer():
    graph = mlp_to_graph(*random_mlp((2, 3, 2)))
    dropped = graph.clone()
    keep = torch.arange(graph.num_edges) != 7  # an edge of layer 2
    dropped.edge_index, dropped.edge_attr, dropped.edge_layer = (
        graph.edge_index[:, keep], graph.edge_attr[keep], graph.edge_layer[keep]
    )
    with pytest.raises(GraphConversionError, match=r"layer 2: expected 6 edges \(1 x 2 x 3\), found 5"):
        graph_to_mlp(dropped)
    duplicated = graph.clone()
    duplicated.edge_index = graph.edge_index.clone()
    duplicated.edge_index[0, 7] = duplicated.edge_index[0, 8]  # two edges onto one weight of layer 2
    with pytest.raises(GraphConversionError, match="layer 2: some weights have duplicate or missing edges"):
        graph_to_mlp(duplicated)
    conv_like = graph.clone()
    conv_like.edge_attr = torch.zeros(graph.num_edges, 4)
    with pytest.raises(GraphConversionError, match="4 features per edge: not an MLP graph"):
        graph_to_mlp(conv_like)


def test_graphs_of_one_layout_share_no_index_tensor():
    """Writing into one graph's index tensors leaves every later graph of that layout intact."""
    weights, biases = random_mlp((2, 3, 2))
    first = mlp_to_graph(weights, biases)
    first.node_index[2] = 1
    first.edge_index[0, 0] = 1
    first.node_layer[0], first.node_type[0], first.edge_layer[0] = 3, 4, 1
    second = mlp_to_graph(weights, biases)
    back_w, back_b = graph_to_mlp(second)
    assert all(torch.equal(a, b) for a, b in zip(weights + biases, back_w + back_b))
    with pytest.raises(GraphConversionError):
        graph_to_mlp(first)
    batched = mlp_to_graph([w.unsqueeze(0) for w in weights], [b.unsqueeze(0) for b in biases])
    batched.node_index[2] = 1
    again = graph_to_mlp(mlp_to_graph([w.unsqueeze(0) for w in weights], [b.unsqueeze(0) for b in biases]))
    assert all(torch.equal(a[0], b) for a, b in zip(sum(again, []), weights + biases))


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64])
def test_non_floating_weights_are_refused(dtype):
    w, b = random_mlp((2, 3, 1))
    with pytest.raises(GraphConversionError, match=f"layer 1: weight dtype {dtype} is not a real floating-point type"):
        mlp_to_graph([w[0].to(dtype), w[1].to(dtype)], [b[0].to(dtype), b[1].to(dtype)])


def test_empty_batches_and_layers_are_refused():
    w, b = random_mlp((2, 3, 1), batch=0)
    with pytest.raises(GraphConversionError, match="batch size 0; there are no networks to convert"):
        mlp_to_graph(w, b)
    with pytest.raises(GraphConversionError, match="layer 1: weight has 0 outputs and 2 inputs; every layer needs a neuron"):
        mlp_to_graph([torch.zeros(0, 2), torch.zeros(1, 0)], [torch.zeros(0), torch.zeros(1)])


def add_isolated_node(graph):
    """A second node at (layer 1, index 0) with no edges: its bias would overwrite the first's."""
    graph.x = torch.cat([graph.x, torch.ones(1, 1)])
    for field, value in (("node_layer", 1), ("node_index", 0), ("node_type", 2)):
        graph[field] = torch.cat([graph[field], torch.tensor([value])])


def test_decoding_refuses_non_finite_values_and_indices_out_of_range():
    graph = mlp_to_graph(*random_mlp((2, 3, 2)))
    cases = {
        "edge_attr": (lambda g: g.edge_attr.__setitem__((7, 0), float("nan")), r"layer 2: weight \(edge_attr\) contains NaN"),
        "x": (lambda g: g.x.__setitem__((3, 0), float("inf")), r"layer 1: bias \(x\) contains NaN or infinite"),
        "edge_index": (lambda g: g.edge_index.__setitem__((0, 0), 99), r"edge_index holds 99, outside \[0, 7\)"),
        "node_layer": (lambda g: g.node_layer.__setitem__(0, 5), r"node_layer holds 5, outside \[0, 3\)"),
        "node_index": (lambda g: g.node_index.__setitem__(2, 3), "node 2: node_index 3 is outside layer 1's 3 neurons"),
        "duplicate": (lambda g: g.node_index.__setitem__(2, 1), "layer 1: some weights have duplicate or missing edges"),
        "extra node": (add_isolated_node, r"graph has 8 nodes for 1 x 7 neurons .* or two nodes share a"),
    }
    for field, (damage, message) in cases.items():
        damaged = graph.clone()
        damage(damaged)
        with pytest.raises(GraphConversionError, match=message):
            graph_to_mlp(damaged)
    assert torch.isfinite(graph.x).all()  # clones were damaged, not the graph
    graph.x[0, 0] = float("nan")  # input neurons carry no bias: their x is never read
    graph_to_mlp(graph)


@settings(max_examples=10, deadline=None)
@given(layout=st.lists(st.integers(1, 5), min_size=3, max_size=5).map(tuple), batch=st.integers(1, 3),
       with_skip=st.booleans(), with_activations=st.booleans())
def test_public_batch_path_builds_the_fast_path_batch(layout, batch, with_skip, with_activations):
    from unittest import mock

    from neuralgraph.graph import batch as batching
    from neuralgraph.graph import build

    weights, biases = random_mlp(layout, batch)
    skips = [(1, 2)] if with_skip and layout[1] == layout[2] else []
    activations = torch.randint(0, 3, (batch, len(layout))) if with_activations else None

    def built(fast):
        with mock.patch.object(batching, "fast_batch_available", lambda: fast):
            return build.blocks_to_graph([w.unsqueeze(-1) for w in weights], biases, skips=skips,
                                         activations=activations)

    assert batching._same_batch(built(True), built(False))


def test_an_unverified_pyg_release_is_checked_once_and_falls_back_to_public_api(monkeypatch):
    from neuralgraph.graph import batch as batching

    monkeypatch.setattr(batching.torch_geometric, "__version__", "9.1.0")
    batching.fast_batch_available.cache_clear()
    try:
        assert batching.fast_batch_available()  # the internals still hold: checked, then used
        batching.fast_batch_available.cache_clear()

        def changed_internals(*args):
            raise AttributeError("'Batch' object has no attribute '_slice_dict'")

        monkeypatch.setattr(batching, "_fast_batch", changed_internals)
        with pytest.warns(UserWarning, match=r"torch_geometric 9.1.0: .*AttributeError.*using Batch.from_data_list"):
            assert not batching.fast_batch_available()
        weights, biases = random_mlp((2, 3, 1), 2)
        slow = Batch.from_data_list([mlp_to_graph([w[i] for w in weights], [b[i] for b in biases]) for i in range(2)])
        assert batching._same_batch(mlp_to_graph(weights, biases), slow)
    finally:
        batching.fast_batch_available.cache_clear()
