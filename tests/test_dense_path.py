"""The dense path of the weight-space layers (``LayerIndex.widths``) computes what the general path does.

A canonical one-layout batch is read as per-layer blocks ``[B, d_out, d_in, C]``
(:func:`~neuralgraph.nn.encoder.uniform_widths`); every other batch takes the index path. Both
must give the same features and gradients (float64, 1e-10), and the selection must never take
the dense path on a batch it does not describe.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from conftest import sum_atol
from torch import nn
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Batch
from torch_geometric.nn import MessagePassing

from neuralgraph.data.inr_dataset import InrDataset
from neuralgraph.graph import mlp_to_graph, module_to_graph
from neuralgraph.nn import build_metanet
from neuralgraph.nn.encoder import graph_context, uniform_widths

WEIGHT_SPACE = ("dws", "nfn_hnp", "nfn_np")
MESSAGE_PASSING = ("gmn", "ng_gnn")  # dense blocks from GraphContext.widths
ATTENTION = ("ng_t", "nft")  # as MESSAGE_PASSING, with their own attention over the blocks
TOLERANCE = 1e-10
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def random_graph(layout, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    weights = [torch.randn(batch_size, o, i, generator=generator, dtype=torch.float64) for i, o in zip(layout, layout[1:])]
    biases = [torch.randn(batch_size, o, generator=generator, dtype=torch.float64) for o in layout[1:]]
    return mlp_to_graph(weights, biases)


def model(name, layout, max_inputs, max_outputs):
    torch.manual_seed(0)
    fixed = {} if name == "nfn_np" else {"max_inputs": max_inputs, "max_outputs": max_outputs}
    return build_metanet(name, hidden_dim=6, num_layers=3, max_layers=len(layout) - 1,
                         num_weight_layers=len(layout) - 1, **fixed).double()


def features_and_gradients(metanet, graph, dense):
    metanet.encoder.dense = dense
    metanet.zero_grad()
    node, edge = metanet(graph)
    (node.sin().sum() + edge.cos().sum()).backward()
    return [node, edge] + [p.grad.clone() for p in metanet.parameters() if p.grad is not None]


@pytest.mark.parametrize("name", WEIGHT_SPACE + MESSAGE_PASSING + ATTENTION)
@settings(max_examples=6, deadline=None)
@given(
    widths=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    inputs=st.integers(1, 3),
    outputs=st.integers(1, 2),
    spare=st.integers(0, 2),
    batch_size=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_dense_equals_general_path(name, widths, inputs, outputs, spare, batch_size, seed):
    """Features and parameter gradients agree at 1e-10, with unused input/output slots (``spare``) too;
    message-passing layers reduce blocks over an axis where the general path scatters."""
    layout = (inputs, *widths, outputs)
    graph = random_graph(layout, batch_size, seed)
    assert graph_context(graph, with_layer_index=True).layers.widths == layout
    metanet = (message_passing_model(name, layout) if name in MESSAGE_PASSING + ATTENTION
               else model(name, layout, inputs + spare, outputs + spare))
    dense = features_and_gradients(metanet, graph, True)
    general = features_and_gradients(metanet, graph, False)
    assert len(dense) == len(general) == 2 + sum(p.requires_grad for p in metanet.parameters())
    for a, b in zip(dense, general):
        torch.testing.assert_close(a, b, rtol=0, atol=TOLERANCE)


def message_passing_model(name, layout, nn_package=None):
    torch.manual_seed(0)
    build = build_metanet if nn_package is None else nn_package.build_metanet
    heads = {"num_heads": 2} if name in ATTENTION else {}
    return build(name, hidden_dim=6, num_layers=3, max_layers=len(layout) - 1, **heads).double()


@pytest.mark.parametrize("name", MESSAGE_PASSING)
def test_message_passing_dense_path_does_not_propagate(name):
    """On a canonical batch no layer gathers or scatters along edge_index; with dense=False every layer does."""
    layout = (2, 3, 1)
    metanet = message_passing_model(name, layout)
    calls = []
    for module in metanet.modules():
        if isinstance(module, MessagePassing):
            for method in ("propagate", "edge_updater"):
                original = getattr(module, method)
                setattr(module, method, lambda *args, _original=original, **kwargs: calls.append(_original) or
                        _original(*args, **kwargs))
    graph = random_graph(layout, 2, 0)
    features_and_gradients(metanet, graph, None)
    assert calls == []
    features_and_gradients(metanet, graph, False)
    assert len(calls) >= 2 * metanet.num_layers


@pytest.mark.parametrize("name, layer_name, edges", [("gmn", "EdgeUpdate", 18), ("ng_gnn", "NGGNNLayer", 36)])
def test_widths_that_do_not_fit_the_rows_are_named(name, layer_name, edges):
    """A layer called with widths of another layout fails with both sizes, not a reshape error."""
    metanet = message_passing_model(name, (2, 3, 1))
    node, edge, context = metanet.encoder(random_graph((2, 3, 1), 2, 0))
    layer = metanet.layers[0]
    arguments = layer.context_arguments(context._replace(widths=(2, 3, 3, 1)))
    with pytest.raises(ValueError, match=rf"{layer_name}: widths=\(2, 3, 3, 1\) describe graphs of 9 nodes and "
                                         rf"{edges} edge rows, but x has 12 rows"):
        layer(node, context.edge_index, edge, **arguments)


@pytest.mark.parametrize("name", MESSAGE_PASSING + ATTENTION)
def test_message_passing_float32_dense_equals_general_path(name):
    """Float32 features within 1e-5 (70 u of features up to 2.2); gradients, sums over every edge, within sum_atol."""
    layout = (2, 16, 16, 1)
    graph = random_graph(layout, 4, 0)
    graph.x, graph.edge_attr = graph.x.float(), graph.edge_attr.float()
    metanet = message_passing_model(name, layout).float()
    dense, general = features_and_gradients(metanet, graph, True), features_and_gradients(metanet, graph, False)
    for a, b in zip(dense[:2], general[:2]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    for a, b in zip(dense[2:], general[2:]):
        torch.testing.assert_close(a, b, rtol=0, atol=sum_atol(graph.num_edges, b))


@pytest.mark.parametrize("name", MESSAGE_PASSING + ATTENTION)
def test_message_passing_equals_the_baseline_commit(name):
    """Fixed-seed float64 features and gradients equal those of the code before the dense path
    (benchmarks/metanet_speed.py's pinned commit, loaded from git), on either path."""
    sys.path.insert(0, str(BENCHMARKS))
    import metanet_speed

    layout = (2, 5, 4, 1)
    graph = random_graph(layout, 3, 0)
    metanet = message_passing_model(name, layout)
    baseline = message_passing_model(name, layout, metanet_speed.pinned_neuralgraph())
    baseline.load_state_dict(metanet.state_dict())
    reference = features_and_gradients(baseline, graph, None)
    for dense in (True, False):
        for a, b in zip(features_and_gradients(metanet, graph, dense), reference, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("name", MESSAGE_PASSING + ATTENTION)
def test_conv_graphs_of_one_layout_are_dense_blocks_too(name):
    """3x3 kernels as 9 features per edge: the blocks hold feature vectors, and both paths agree."""
    torch.manual_seed(2)
    cnn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(4, 10)).double()
    graph = Batch.from_data_list([module_to_graph(cnn)] * 2)
    assert graph_context(graph).widths == (1, 4, 4, 10)
    torch.manual_seed(0)
    heads = {"num_heads": 2} if name in ATTENTION else {}
    metanet = build_metanet(name, hidden_dim=6, num_layers=2, edge_features=9, **heads).double()
    for a, b in zip(features_and_gradients(metanet, graph, True), features_and_gradients(metanet, graph, False),
                    strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=TOLERANCE)


def test_mixed_layouts_take_the_general_path():
    mixed = Batch.from_data_list([random_graph((2, 3, 1), 1, 0), random_graph((2, 4, 1), 1, 1)])
    assert graph_context(mixed, with_layer_index=True).layers.widths is None
    with pytest.raises(ValueError, match="dense=True but the batch is not one layout stored canonically"):
        graph_context(mixed, with_layer_index=True, dense=True)


def test_relabelled_nodes_take_the_general_path_with_the_same_result():
    """Reordered node ids are the same graphs, but no longer dense blocks: the index path serves them."""
    graph = random_graph((2, 3, 3, 1), 2, 0)
    n = graph.num_nodes // 2
    order = torch.cat([torch.randperm(n, generator=torch.Generator().manual_seed(1)) + b * n for b in range(2)])
    relabelled = graph.clone()
    relabelled.x, relabelled.node_layer, relabelled.node_index, relabelled.node_type = (
        graph.x[order], graph.node_layer[order], graph.node_index[order], graph.node_type[order])
    relabelled.edge_index = torch.argsort(order)[graph.edge_index]
    context = graph_context(relabelled, with_layer_index=True)
    assert context.layers.widths is None
    metanet = model("dws", (2, 3, 3, 1), 2, 1)
    with torch.no_grad():
        node, edge = metanet(graph)
        node_relabelled, edge_relabelled = metanet(relabelled)
    torch.testing.assert_close(node_relabelled, node[order], rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(edge_relabelled, edge, rtol=0, atol=TOLERANCE)


def test_reordered_edges_are_not_dense():
    graph = random_graph((2, 3, 1), 2, 0)
    flipped = graph.edge_index.flip(1)
    assert uniform_widths(graph.node_layer, graph.node_index, graph.edge_index, graph.edge_layer, graph.batch, 2) == (2, 3, 1)
    assert uniform_widths(graph.node_layer, graph.node_index, flipped, graph.edge_layer.flip(0), graph.batch, 2) is None
    no_edges = torch.empty(2, 0, dtype=torch.long)
    assert uniform_widths(graph.node_layer, graph.node_index, no_edges, no_edges[0], graph.batch, 2) is None


def test_too_many_inputs_named_on_the_dense_path():
    graph = random_graph((3, 2, 1), 2, 0)
    metanet = model("dws", (3, 2, 1), 2, 1)
    with pytest.raises(ValueError, match="a graph has 3 input neurons but the layer keeps max_inputs=2"):
        metanet(graph)


@pytest.mark.parametrize("permute", [False, True])
def test_dataset_batches_take_the_dense_path(tiny_inrs, permute):
    """Training batches (InrDataset.batch, with or without permutation augmentation) are canonical."""
    dataset = InrDataset(tiny_inrs, "train")
    graph = dataset.batch(list(range(5)), permute=permute).graph
    assert graph_context(graph, with_layer_index=True).layers.widths == dataset.convention.layout


@pytest.mark.parametrize("name, rows, message", [
    ("ng_t", 18, r"RelationalAttentionLayer: widths=\(2, 3, 1\) describe graphs of 6 nodes and 18 edge rows, but x has 12 "
                 r"rows and edge_attr 18"),
    ("nft", 9, r"NeuronAttentionLayer: widths=\(2, 3, 1\) describe graphs of 6 nodes and 9 edge rows, but x has 12 rows "
               r"and edge_attr 9")])
def test_attention_dense_path_names_rows_that_do_not_fit(name, rows, message):
    """NG-T's dense path needs every edge and its opposite; both need whole graphs of the layout."""
    layout = (2, 3, 1)
    metanet = message_passing_model(name, layout)
    node, edge, context = metanet.encoder(random_graph(layout, 2, 0))
    layer = metanet.layers[0]
    with pytest.raises(ValueError, match=message):
        layer(node, context.edge_index, edge[:rows], **layer.context_arguments(context))


@pytest.mark.parametrize("name", WEIGHT_SPACE)
@pytest.mark.parametrize("spare", [0, 2])
def test_folded_stack_equals_the_layers_one_by_one(name, spare):
    """WeightSpaceMetanet.forward folds a canonical batch once for all layers (spare input/output slots set
    back to zero between them); calling the layers one by one on rows, as compiled layers or dropout do,
    gives the same features and gradients."""
    layout = (2, 4, 3, 1)
    graph = random_graph(layout, 3, seed=5)
    metanet = model(name, layout, layout[0] + spare, layout[-1] + spare)
    folded = features_and_gradients(metanet, graph, None)

    def one_by_one(graph):
        node, edge, context = metanet.encoder(graph)
        for layer in metanet.layers:
            node, edge = layer(node, context.edge_index, edge, **layer.context_arguments(context))
        return node, edge

    metanet.zero_grad()
    node, edge = one_by_one(graph)
    (node.sin().sum() + edge.cos().sum()).backward()
    rows = [node, edge] + [p.grad.clone() for p in metanet.parameters() if p.grad is not None]
    assert len(folded) == len(rows)
    for a, b in zip(folded, rows):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_dropout_in_training_runs_the_layers_on_rows():
    """Dropout masks are drawn on rows, as before the folded stack: same seed, same output as one by one."""
    layout = (2, 4, 3, 1)
    graph = random_graph(layout, 2, seed=6)
    torch.manual_seed(0)
    metanet = build_metanet("dws", hidden_dim=6, num_layers=3, dropout=0.5, max_layers=3).double().train()
    torch.manual_seed(1)
    node, edge = metanet(graph)
    torch.manual_seed(1)
    node0, edge0, context = metanet.encoder(graph)
    for layer in metanet.layers:
        node0, edge0 = layer(node0, context.edge_index, edge0, **layer.context_arguments(context))
    torch.testing.assert_close((node, edge), (node0, edge0), rtol=0, atol=0)
