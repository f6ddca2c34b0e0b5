"""The dense path of every layer (``forward_dense``) computes what the general path (``forward``) does.

A batch of one layout stored canonically (``GraphContext.widths``: from the batch's
``WeightBlocks``, or :func:`~neuralgraph.graph.blocks.uniform_widths`) is read as per-layer blocks
``[B, d_out, d_in, C]``; every other batch takes the general path. Both must give the same
features and gradients (float64, 1e-10), the selection must never take the dense path on a batch
it does not describe, and a batch that carries its weights must give what its graph alone gives.
"""
from __future__ import annotations

import pytest
import torch
from conftest import sum_atol
from torch import nn
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Batch

from neuralgraph.data.cnn_zoo import zoo_blocks, zoo_graph
from neuralgraph.data.inr_dataset import InrBatch, InrDataset
from neuralgraph.graph import GraphSpec, graph_to_blocks, mlp_to_graph, module_to_graph
from neuralgraph.graph import blocks as blocks_module
from neuralgraph.graph.blocks import WeightBlocks, uniform_widths
from neuralgraph.nn import METANETS, build_metanet, paths
from neuralgraph.nn.context import graph_context
from neuralgraph.nn.ng_gnn import layout_degree_histogram
from neuralgraph.training import tasks

WEIGHT_SPACE = ("dws", "nfn_hnp", "nfn_np")
MESSAGE_PASSING = ("gmn", "ng_gnn")  # dense blocks from GraphContext.widths
ATTENTION = ("ng_t", "nft")  # as MESSAGE_PASSING, with their own attention over the blocks
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
    assert graph_context(graph, with_layer_index=True).widths == layout
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
    options = {"num_heads": 2} if name in ATTENTION else {}
    if name == "ng_gnn":  # PNA's degrees: of graphs of this layout (the baseline commit's NGGNN takes the layout)
        options = ({"degree_histogram": layout_degree_histogram(layout).tolist()} if nn_package is None
                   else {"degree_layout": layout})
    return build(name, hidden_dim=6, num_layers=3, max_layers=len(layout) - 1, **options).double()


@pytest.mark.parametrize("name, maps", [("gmn", 1), ("ng_gnn", 2)])
def test_message_passing_dense_path_does_not_propagate(name, maps, monkeypatch):
    """On a canonical batch every per-edge map of every layer runs on blocks (neuralgraph.nn.paths), none gathers or
    scatters along edge_index; with dense=False every one runs on edge rows."""
    calls = []
    for strategy in ("edge_rows", "row_chunks", "dense_blocks", "dense_tiles"):
        original = getattr(paths, strategy)
        monkeypatch.setattr(paths, strategy, lambda *args, _name=strategy, _original=original, **kwargs:
                            calls.append(_name) or _original(*args, **kwargs))
    layout = (2, 3, 1)
    metanet = message_passing_model(name, layout)
    graph = random_graph(layout, 2, 0)
    features_and_gradients(metanet, graph, None)
    assert calls == ["dense_blocks"] * maps * metanet.num_layers
    calls.clear()
    features_and_gradients(metanet, graph, False)
    assert calls == ["edge_rows"] * maps * metanet.num_layers


@pytest.mark.parametrize("name, metanet_name, edges", [("gmn", "GMN", 18), ("ng_gnn", "NGGNN", 36),
                                                        ("ng_t", "NGT", 36), ("nft", "NFT", 18)])
def test_widths_that_do_not_fit_the_rows_are_named(name, metanet_name, edges):
    """A context whose widths are of another layout fails with both sizes, not a reshape error."""
    metanet = message_passing_model(name, (2, 3, 1))
    graph = random_graph((2, 3, 1), 2, 0)
    context = metanet.context(graph)._replace(widths=(2, 3, 3, 1))
    with pytest.raises(ValueError, match=rf"^{metanet_name}: widths=\(2, 3, 3, 1\) describe graphs of 9 nodes and "
                                         rf"{edges} edge rows, but x has 12 rows and edge_attr {edges}$"):
        metanet(graph, context)


def test_blocks_that_do_not_describe_the_graph_are_named():
    graph = random_graph((2, 3, 1), 2, 0)
    weights = [torch.zeros(2, 4, 2), torch.zeros(2, 1, 4)]
    blocks = WeightBlocks.of_mlps(weights, [torch.zeros(2, 4), torch.zeros(2, 1)])
    with pytest.raises(ValueError, match=r"^blocks: 2 networks of layout \(2, 4, 1\) \(14 nodes, 24 edges\) do not "
                                         r"describe the graph's 2 graphs, 12 nodes and 18 edges$"):
        graph_context(graph, blocks=blocks)


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
    (tests/pinned_commit.py, loaded from git), on either path."""
    from pinned_commit import pinned_neuralgraph

    layout = (2, 5, 4, 1)
    graph = random_graph(layout, 3, 0)
    metanet = message_passing_model(name, layout)
    baseline = message_passing_model(name, layout, pinned_neuralgraph())
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
    metanet = build_metanet(name, spec=GraphSpec.of(graph), hidden_dim=6, num_layers=2, **heads).double()
    for a, b in zip(features_and_gradients(metanet, graph, True), features_and_gradients(metanet, graph, False),
                    strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=TOLERANCE)


def test_mixed_layouts_take_the_general_path():
    mixed = Batch.from_data_list([random_graph((2, 3, 1), 1, 0), random_graph((2, 4, 1), 1, 1)])
    assert graph_context(mixed, with_layer_index=True).widths is None
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
    assert context.widths is None
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


def check_blocks_describe(graph, blocks):
    """``blocks`` are the graph's own weights and layout, and the graph is stored canonically."""
    layout = blocks.layout
    assert uniform_widths(graph.node_layer, graph.node_index, graph.edge_index, graph.edge_layer, graph.batch,
                          graph.num_graphs) == layout
    weights, biases = graph_to_blocks(graph)
    for w, b, block, bias in zip(weights, biases, blocks.weights, blocks.biases, strict=True):
        assert torch.equal(w[..., :block.shape[-1]], block) and torch.equal(b, bias)


@pytest.mark.parametrize("permute", [False, True])
def test_dataset_batches_carry_their_weights_and_layout(tiny_inrs, permute, monkeypatch):
    """Training batches (InrDataset.batch, with or without permutation augmentation) carry the weights their
    canonical graph was built from; the context takes the layout from them, detecting nothing."""
    dataset = InrDataset(tiny_inrs, "train")
    batch = dataset.batch(list(range(5)), permute=permute)
    assert batch.blocks.layout == dataset.convention.layout
    check_blocks_describe(batch.graph, batch.blocks)
    monkeypatch.setattr(blocks_module, "uniform_widths", lambda *args: pytest.fail("layout detected"))
    assert build_metanet("gmn", hidden_dim=4, num_layers=1).context(batch.graph, batch.blocks).widths == batch.blocks.layout


def test_zoo_batches_carry_their_weights_and_layout():
    """CnnZooDataset.batch's blocks (zoo_blocks of the entries) describe the canonical graph zoo_graph builds."""
    generator = torch.Generator().manual_seed(0)
    layout = (1, 4, 4, 4, 10)
    weights = [torch.randn(3, o, i, *((3, 3) if l < 3 else ()), generator=generator)
               for l, (i, o) in enumerate(zip(layout, layout[1:]))]
    biases = [torch.randn(3, o, generator=generator) for o in layout[1:]]
    blocks = WeightBlocks.of(zoo_blocks(weights), biases)
    assert blocks.layout == layout
    check_blocks_describe(zoo_graph(weights, biases, torch.tensor([0, 1, 2])), blocks)


def with_blocks(batch):
    """``batch`` with the ``WeightBlocks`` its builder would have kept, read from its graph."""
    weights, biases = graph_to_blocks(batch.graph)
    if isinstance(batch, InrBatch):
        return batch._replace(blocks=WeightBlocks.of(weights, biases))
    return batch._replace(blocks=WeightBlocks.of(weights[:-1] + [weights[-1][..., :1]], biases))  # 3x3 convs, linear


@pytest.mark.parametrize("name", sorted(METANETS))
def test_batches_with_blocks_compute_what_their_graphs_alone_do(name):
    """Every task (tests/test_pinned_outputs.py's float64 batches): the same loss, outputs and gradients whether
    the batch carries its WeightBlocks (read by the context, the decoder and the targets) or not."""
    from test_pinned_outputs import METANET_CONFIG, TASKS, task_batch

    for task in TASKS:
        results = []
        for batch in (task_batch(task), with_blocks(task_batch(task))):
            torch.manual_seed(0)
            module = getattr(tasks, task)(metanet=name, metanet_config=dict(METANET_CONFIG),
                                          spec=GraphSpec.of(batch.graph).to_dict(), normalize_inputs=False,
                                          **TASKS[task]).double().eval()
            loss, outputs = module.loss_and_outputs(batch)
            loss.backward()
            results.append([loss, *outputs.values()] + [p.grad for p in module.parameters() if p.grad is not None])
        assert len(results[0]) == len(results[1]) > 2
        for a, b in zip(*results):
            torch.testing.assert_close(a, b, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("name", WEIGHT_SPACE)
@pytest.mark.parametrize("spare", [0, 2])
def test_folded_stack_equals_the_layers_one_by_one(name, spare):
    """WeightSpaceMetanet.dense_stack folds a canonical batch once for all layers (spare input/output slots set
    back to zero between them); calling the layers' forward one by one on its rows gives the same features and
    gradients."""
    layout = (2, 4, 3, 1)
    graph = random_graph(layout, 3, seed=5)
    metanet = model(name, layout, layout[0] + spare, layout[-1] + spare)
    folded = features_and_gradients(metanet, graph, None)
    metanet.zero_grad()
    node, edge, context = metanet.encoder(graph)
    assert context.widths == layout
    for layer in metanet.layers:
        node, edge = layer(node, context.edge_index, edge, **layer.context_arguments(context))
    (node.sin().sum() + edge.cos().sum()).backward()
    rows = [node, edge] + [p.grad.clone() for p in metanet.parameters() if p.grad is not None]
    assert len(folded) == len(rows)
    for a, b in zip(folded, rows):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


class Doubling(nn.Module):
    """A deterministic stand-in for dropout: where a dropout acts, both paths must multiply alike."""

    def forward(self, x):
        return 2 * x


@pytest.mark.parametrize("name", WEIGHT_SPACE + MESSAGE_PASSING + ATTENTION)
def test_dropout_acts_at_the_same_places_on_both_paths(name):
    """Every dropout of the dense path (on blocks, on the folded weight space) sits where the general path has
    it: with each replaced by a doubling, both give the same features."""
    layout = (2, 4, 3, 1)
    graph = random_graph(layout, 2, seed=6)
    metanet = (message_passing_model(name, layout) if name in MESSAGE_PASSING + ATTENTION
               else model(name, layout, 3, 2))
    for module in list(metanet.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Dropout):
                setattr(module, child_name, Doubling())
    assert any(isinstance(module, Doubling) for module in metanet.modules())
    outputs = []
    with torch.no_grad():
        for dense in (True, False):
            metanet.encoder.dense = dense
            outputs.append(metanet(graph))
    for a, b in zip(*outputs, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=TOLERANCE)
