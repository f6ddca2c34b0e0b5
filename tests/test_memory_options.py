"""``checkpoint`` and ``edge_chunk`` change what a metanetwork keeps for backward, never what it computes.

Every strategy of ``neuralgraph.nn.paths`` (edge rows, row chunks, dense blocks, tiles) runs a per-edge map
alike, including parts no layer reads yet (a source or target term alone on blocks with reverse edges).

float64, small graphs: MLP batches (dense blocks, and forced onto the general path), a conv graph,
a residual network's graph with skip edges (general path only). Outputs and every parameter's
gradient with the options equal those without at ``1e-10``; ``edge_chunk=7`` cuts every graph here
into many chunks, tiles of part of a row and of several rows, and ``20`` into tiles of several graphs.
``edge_dtype`` is the one option that changes values: by its rounding of the kept edge states.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_geometric.data import Batch

from neuralgraph.graph import GraphSpec, mlp_to_graph, module_to_graph
from neuralgraph.nn import METANETS, build_metanet, paths
from neuralgraph.nn.base import EdgeUpdate, node_rows
from neuralgraph.nn.context import block_rows, edge_blocks, node_blocks, reverse_edge_partner
from neuralgraph.nn.gmn import GMNLayer
from neuralgraph.nn.paths import EdgeTiles, MessageMap

TOLERANCE = 1e-10
CHUNKED = ("gmn", "ng_gnn")
OPTIONS = [{"checkpoint": True}, {"edge_chunk": 7}, {"checkpoint": True, "edge_chunk": 7}, {"edge_chunk": 20}]


def mlp_batch(layout, batch_size, seed):
    generator = torch.Generator().manual_seed(seed)
    weights = [torch.randn(batch_size, o, i, generator=generator, dtype=torch.float64) for i, o in zip(layout, layout[1:])]
    biases = [torch.randn(batch_size, o, generator=generator, dtype=torch.float64) for o in layout[1:]]
    return mlp_to_graph(weights, biases)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(2, 4), nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.c(h + torch.relu(self.b(h)))


def conv_graph():
    torch.manual_seed(3)
    cnn = nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(4, 3)).double()
    return Batch.from_data_list([module_to_graph(cnn)] * 2)


def skip_graph():
    torch.manual_seed(4)
    return Batch.from_data_list([module_to_graph(Residual().double()) for _ in range(2)])


GRAPHS = {
    "mlp": (lambda: mlp_batch((2, 5, 4, 3), 3, 0), {}, None),
    "mlp_general": (lambda: mlp_batch((3, 6, 2, 1), 2, 1), {}, False),
    "conv": (conv_graph, {"edge_features": 9}, None),
    "skip": (skip_graph, {"skip_edges": True}, None),
}


def outputs_and_gradients(name, graph, encoder_options, dense, options):
    torch.manual_seed(0)
    metanet = build_metanet(name, spec=GraphSpec.of(graph), hidden_dim=8, num_layers=2, **encoder_options,
                            **options).double()
    metanet.encoder.dense = dense
    node, edge = metanet(graph)
    generator = torch.Generator().manual_seed(5)
    loss = ((node * torch.randn(node.shape, generator=generator, dtype=node.dtype)).sum()
            + (edge * torch.randn(edge.shape, generator=generator, dtype=edge.dtype)).square().sum())
    loss.backward()
    return node, edge, {key: parameter.grad for key, parameter in metanet.named_parameters()}


@pytest.mark.parametrize("graph_name", sorted(GRAPHS))
@pytest.mark.parametrize("options", OPTIONS, ids=lambda options: "-".join(f"{k}={v}" for k, v in options.items()))
@pytest.mark.parametrize("name", CHUNKED)
def test_options_give_the_same_outputs_and_gradients(name, options, graph_name):
    build, encoder_options, dense = GRAPHS[graph_name]
    graph = build()
    node, edge, gradients = outputs_and_gradients(name, graph, encoder_options, dense, {})
    node_with, edge_with, gradients_with = outputs_and_gradients(name, graph, encoder_options, dense, options)
    torch.testing.assert_close(node_with, node, rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(edge_with, edge, rtol=0, atol=TOLERANCE)
    assert gradients_with.keys() == gradients.keys()
    for key, gradient in gradients.items():
        assert gradient is not None and gradient.abs().sum() > 0, f"{name}: {key} got no gradient"
        torch.testing.assert_close(gradients_with[key], gradient, rtol=0, atol=TOLERANCE, msg=f"{name}: {key}")


@pytest.mark.parametrize("name", sorted(METANETS))
def test_every_architecture_takes_both_options(name):
    graph = mlp_batch((2, 5, 4, 1), 2, 2)
    node, edge, gradients = outputs_and_gradients(name, graph, {"max_layers": 3}, None, {})
    node_with, edge_with, gradients_with = outputs_and_gradients(name, graph, {"max_layers": 3}, None,
                                                                 {"checkpoint": True, "edge_chunk": 7})
    torch.testing.assert_close((node_with, edge_with), (node, edge), rtol=0, atol=TOLERANCE)
    for key, gradient in gradients.items():
        torch.testing.assert_close(gradients_with[key], gradient, rtol=0, atol=TOLERANCE, msg=f"{name}: {key}")


@pytest.mark.parametrize("name", CHUNKED)
def test_checkpoint_replays_dropout(name):
    """Recomputed layers draw the dropout masks of the first run: training mode, dropout 0.5, same gradients."""
    graph = mlp_batch((2, 5, 4, 1), 2, 3)
    results = []
    for checkpoint in (False, True):
        torch.manual_seed(0)
        metanet = build_metanet(name, spec=GraphSpec.of(graph), hidden_dim=8, num_layers=2, dropout=0.5,
                                checkpoint=checkpoint).double().train()
        node, edge = metanet(graph)
        (node.square().sum() + edge.square().sum()).backward()
        results.append([node, edge] + [parameter.grad for parameter in metanet.parameters()])
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("graph_name", sorted(GRAPHS))
@pytest.mark.parametrize("name", CHUNKED)
def test_edge_dtype_rounds_only_the_kept_edge_states(name, graph_name):
    """A float64 model keeping its edge states in float32: outputs and gradients move by float32 rounding (a few
    eps of the O(1) normalised features, relative for gradients), not more and not less; the edges come out float64."""
    build, encoder_options, dense = GRAPHS[graph_name]
    graph = build()
    node, edge, gradients = outputs_and_gradients(name, graph, encoder_options, dense, {})
    node_with, edge_with, gradients_with = outputs_and_gradients(
        name, graph, encoder_options, dense, {"edge_chunk": 7, "edge_dtype": torch.float32})
    assert edge_with.dtype == torch.float64
    bound = 16 * torch.finfo(torch.float32).eps
    errors = [(node_with - node).abs().max() / node.abs().max(), (edge_with - edge).abs().max() / edge.abs().max()]
    errors += [(gradients_with[key] - gradient).abs().max() / gradient.abs().max() for key, gradient in gradients.items()]
    worst = float(max(errors))
    assert 0 < worst < bound, f"{name}: relative change {worst:.2e} (float32 rounding: below {bound:.2e}, above 0)"


def test_rows_of_blocks_in_another_dtype_convert_values_and_gradients():
    """``block_rows(blocks, dtype)``: the rows of ``block_rows(blocks)`` converted, the gradient split back and
    converted to the blocks' dtype, exactly."""
    generator = torch.Generator().manual_seed(7)
    blocks = [torch.randn(2, *shape, 3, generator=generator).requires_grad_() for shape in ((4, 2), (5, 4), (1, 5))]
    rows = block_rows(blocks, torch.float64)
    assert rows.dtype == torch.float64 and torch.equal(rows, block_rows(blocks).double())
    weight = torch.randn(rows.shape, generator=generator, dtype=torch.float64)
    gradients = torch.autograd.grad((rows * weight).sum(), blocks)
    expected = torch.autograd.grad((block_rows(blocks) * weight.float()).sum(), blocks)
    for gradient, reference in zip(gradients, expected):
        assert gradient.dtype == torch.float32 and torch.equal(gradient, reference)


@pytest.mark.parametrize("name", CHUNKED)
def test_bfloat16_edge_states_train_a_float32_model(name):
    graph = mlp_batch((2, 5, 4, 3), 2, 6)
    graph.x, graph.edge_attr = graph.x.float(), graph.edge_attr.float()
    results = []
    for options in ({}, {"edge_chunk": 7, "edge_dtype": torch.bfloat16}):
        torch.manual_seed(0)
        metanet = build_metanet(name, spec=GraphSpec.of(graph), hidden_dim=8, num_layers=2, **options)
        node, edge = metanet(graph)
        (node.square().sum() + edge.square().sum()).backward()
        results.append((node, edge, [parameter.grad for parameter in metanet.parameters()]))
    (node, edge, gradients), (node_with, edge_with, gradients_with) = results
    assert edge_with.dtype == torch.float32
    bound = 16 * torch.finfo(torch.bfloat16).eps
    torch.testing.assert_close(node_with, node, rtol=0, atol=bound * float(node.abs().max()))
    torch.testing.assert_close(edge_with, edge, rtol=0, atol=bound * float(edge.abs().max()))
    scale = max(float(gradient.abs().max()) for gradient in gradients)  # some are near zero: the error is on this scale
    for gradient, gradient_with in zip(gradients, gradients_with):
        torch.testing.assert_close(gradient_with, gradient, rtol=0, atol=bound * scale)


@pytest.mark.parametrize("name,options,named", [
    ("gmn", {"edge_dtype": torch.bfloat16}, "given: None"),
    ("nft", {"edge_dtype": torch.bfloat16, "edge_chunk": 7}, "this is NFT"),
    ("gmn", {"edge_dtype": torch.int8, "edge_chunk": 7}, "torch.int8"),
    ("ng_gnn", {"edge_dtype": "bfloat16", "edge_chunk": 7, "degree_histogram": [0, 2, 1]}, "'bfloat16'"),
])
def test_an_invalid_edge_dtype_is_named(name, options, named):
    with pytest.raises(ValueError, match=r"^edge_dtype=.*expected a floating torch.dtype, with edge_chunk") as error:
        build_metanet(name, **options)
    assert named in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("edge_chunk", [0, -3, 2.5, True])
def test_an_invalid_edge_chunk_is_named(edge_chunk):
    for build in (lambda: build_metanet("gmn", edge_chunk=edge_chunk), lambda: build_metanet("dws", edge_chunk=edge_chunk),
                  lambda: GMNLayer(8, edge_chunk=edge_chunk), lambda: EdgeUpdate(8, edge_chunk=edge_chunk)):
        with pytest.raises(ValueError, match=rf"^edge_chunk={edge_chunk!r}: expected a positive number") as error:
            build()
        assert "\n" not in str(error.value)


@pytest.mark.parametrize("grid,chunk", [((3, 5, 4), 7), ((3, 5, 4), 1), ((3, 5, 4), 13), ((3, 5, 4), 100), ((1, 2, 9), 4)])
def test_tiles_cover_the_grid_once_within_the_chunk(grid, chunk):
    tiles = EdgeTiles(grid, chunk)
    block = torch.arange(grid[0] * grid[1] * grid[2], dtype=torch.float64).view(*grid, 1)
    covered = torch.zeros(grid)
    for (graphs, rows, columns), tile in zip(tiles.slices(), tiles.split(block)):
        assert tile.numel() <= chunk
        assert torch.equal(tile, block[graphs, rows, columns])
        covered[graphs, rows, columns] += 1
    assert bool((covered == 1).all())
    assert torch.equal(tiles.cat(tiles.split(block)), block)


class EveryTerm(nn.Module, MessageMap):
    """A per-edge map that reads every kind of term (source and target terms alone and summed, the opposite edge)
    and sends messages both ways, read by every reduction."""

    target_reductions = (("sum", "amin"), ("sum_of_squares",))
    source_reductions = (("amax",),)

    def __init__(self, width, reverse):
        super().__init__()
        self.reverse = reverse
        self.source, self.target = nn.Linear(width, 2 * width), nn.Linear(width, 2 * width)
        self.edge = nn.Linear(width, width)

    def node_terms(self, x):
        return self.source(x).chunk(2, -1), self.target(x).chunk(2, -1)

    def edge_map(self, edge, ends):
        new = torch.tanh(self.edge(edge) + ends.pair(0))
        if self.reverse:
            new = new + ends.opposite(torch.sin)
        return new, (new * ends.source(1), (new - ends.target(1)).cos()), (new * ends.target(1),)

    def receive(self, incoming, outgoing):
        return torch.cat([incoming.values[0] / incoming.count, *incoming.values[1:],
                          outgoing.values[0] * outgoing.count], dim=-1)


@pytest.mark.parametrize("reverse", [False, True])
def test_every_strategy_runs_a_map_alike(reverse):
    """A map on all edge rows, on chunks of rows, on dense blocks and on tiles: the same new edges, the same features
    received (nodes without messages included) and the same gradients."""
    layout, width = (2, 5, 4, 3), 6
    graph = mlp_batch(layout, 3, 8)
    generator = torch.Generator().manual_seed(9)
    directions, edge_index, opposite = 1, graph.edge_index, None
    if reverse:
        directions, opposite = 2, reverse_edge_partner(graph.num_edges)
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    x = torch.randn(graph.num_nodes, width, generator=generator, dtype=torch.float64, requires_grad=True)
    edge_attr = torch.randn(edge_index.shape[1], width, generator=generator, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(0)
    edge_map = EveryTerm(width, reverse).double()

    def on_blocks(chunk):
        nodes, widths = node_rows(node_blocks(x, layout))
        new, received = paths.on_blocks(edge_map, nodes, widths, edge_blocks(edge_attr, layout, directions), reverse,
                                        chunk)
        rows = [block_rows(new)] if not reverse else [block_rows([block[d] for block in new]) for d in (0, 1)]
        return torch.cat(rows), received.flatten(0, 1)

    runs = {"rows": lambda: paths.on_rows(edge_map, x, edge_index, edge_attr, opposite),
            "chunks": lambda: paths.on_rows(edge_map, x, edge_index, edge_attr, opposite, chunk=7),
            "blocks": lambda: on_blocks(None), "tiles": lambda: on_blocks(7), "tiles of graphs": lambda: on_blocks(40)}
    results = {}
    for name, run in runs.items():
        new, received = run()
        weights = torch.Generator().manual_seed(10)
        loss = ((new * torch.randn(new.shape, generator=weights, dtype=new.dtype)).sum()
                + (received * torch.randn(received.shape, generator=weights, dtype=received.dtype)).sum())
        tensors = [x, edge_attr, *edge_map.parameters()]
        results[name] = [new, received, *torch.autograd.grad(loss, tensors)]
    assert results["rows"][1].shape == (graph.num_nodes, 4 * width)
    for name, result in results.items():
        for a, b in zip(result, results["rows"], strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=TOLERANCE, msg=name)
