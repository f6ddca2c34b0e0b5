"""The dense path of the weight-space layers (``LayerIndex.widths``) computes what the general path does.

A canonical one-layout batch is read as per-layer blocks ``[B, d_out, d_in, C]``
(:func:`~neuralgraph.nn.encoder.uniform_widths`); every other batch takes the index path. Both
must give the same features and gradients (float64, 1e-10), and the selection must never take
the dense path on a batch it does not describe.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Batch

from neuralgraph.data.inr_dataset import InrDataset
from neuralgraph.graph import mlp_to_graph
from neuralgraph.nn import build_metanet
from neuralgraph.nn.encoder import graph_context, uniform_widths

WEIGHT_SPACE = ("dws", "nfn_hnp", "nfn_np")
TOLERANCE = 1e-10


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


@pytest.mark.parametrize("name", WEIGHT_SPACE)
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
    """Features and parameter gradients agree at 1e-10, with unused input/output slots (``spare``) too."""
    layout = (inputs, *widths, outputs)
    graph = random_graph(layout, batch_size, seed)
    assert graph_context(graph, with_layer_index=True).layers.widths == layout
    metanet = model(name, layout, inputs + spare, outputs + spare)
    dense = features_and_gradients(metanet, graph, True)
    general = features_and_gradients(metanet, graph, False)
    assert len(dense) == len(general)
    for a, b in zip(dense, general):
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
