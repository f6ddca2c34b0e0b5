"""The encoder: per-layer input standardisation, per-graph edge embeddings, the graph context it is given."""
import pytest
import torch

from neuralgraph.graph import GraphSpec, mlp_to_graph, permute_mlp, random_hidden_permutation
from neuralgraph.nn import InvariantReadout, build_metanet


def scaled_mlps(layout=(2, 6, 5, 1), batch=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    scales = [0.06, 0.016, 0.12]
    weights = [s * torch.randn(batch, o, i, generator=gen, dtype=torch.float64) + 0.3
               for s, i, o in zip(scales, layout, layout[1:])]
    biases = [s * torch.randn(batch, o, generator=gen, dtype=torch.float64) for s, o in zip(scales, layout[1:])]
    return weights, biases


def test_statistics_standardise_each_layer():
    weights, biases = scaled_mlps()
    graph = mlp_to_graph(weights, biases)
    model = build_metanet("gmn", hidden_dim=4, num_layers=1).double()
    model.encoder.set_input_statistics(graph)
    enc = model.encoder
    for l, w in enumerate(weights):
        torch.testing.assert_close(enc.edge_mean[l], w.mean())
        torch.testing.assert_close(enc.edge_std[l], w.std(unbiased=False))
    for l, b in enumerate(biases, start=1):
        torch.testing.assert_close(enc.node_mean[l], b.mean())
    # input neurons carry constant zero biases: left as they are
    assert enc.node_mean[0] == 0 and enc.node_std[0] == 1
    assert bool((enc.edge_std[len(weights):] == 1).all())


def test_standardised_model_stays_permutation_invariant():
    weights, biases = scaled_mlps(seed=1)
    model = build_metanet("gmn", hidden_dim=8, num_layers=2).double()
    model.encoder.set_input_statistics(mlp_to_graph(weights, biases))
    readout = InvariantReadout(8, 3).double()
    perms = random_hidden_permutation((2, 6, 5, 1), torch.Generator().manual_seed(2))
    before = readout(g := mlp_to_graph(weights, biases), *model(g))
    after = readout(h := mlp_to_graph(*permute_mlp(weights, biases, perms)), *model(h))
    torch.testing.assert_close(before, after, rtol=0, atol=1e-10)


def test_per_graph_edge_embeddings_equal_the_gathered_rows():
    """On a canonical batch the edge embeddings of one graph are broadcast over the batch; the general
    path (dense=False) gathers one per row: same features and gradients."""
    weights, biases = scaled_mlps(seed=3)
    graph = mlp_to_graph(weights, biases)
    model = build_metanet("dws", hidden_dim=6, num_layers=1, max_layers=3).double()
    results = []
    for dense in (None, False):
        model.encoder.dense = dense
        model.zero_grad()
        node, edge, context = model.encoder(graph)
        assert (context.widths is None) == (dense is False)
        (node.sin().sum() + edge.cos().sum()).backward()
        results.append([node, edge] + [p.grad.clone() for p in model.encoder.parameters() if p.grad is not None])
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_a_given_context_is_used_and_one_built_without_reverse_edges_refused():
    """The metanet encodes with the context it is handed (built once per batch for it and its heads)."""
    weights, biases = scaled_mlps(seed=4)
    graph = mlp_to_graph(weights, biases)
    model = build_metanet("ng_gnn", spec=GraphSpec.of(graph), hidden_dim=4, num_layers=1).double()
    context = model.context(graph)
    assert context.reverse is not None and context.widths == (2, 6, 5, 1)
    torch.testing.assert_close(model(graph, context), model(graph), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"^GraphEncoder\(reverse_edges=True, layer_index=False\) got a context built "
                                         r"without them; build it with this encoder's context\(graph\)$"):
        model(graph, build_metanet("gmn", hidden_dim=4, num_layers=1).context(graph))
