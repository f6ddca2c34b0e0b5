"""Probing baselines (``neuralgraph.nn.probegen``): the responses are the probed networks' own outputs, so the
features are invariant to their hidden permutations; both baselines train through the tasks and ``neuralgraph
fit``; ``flops_per_prediction`` counts what a prediction costs, for them and for every registered architecture."""
from __future__ import annotations

import copy

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from neuralgraph.data.cnn_zoo import (ACTIVATIONS, LAYERS, CnnZooDataset, ZooBatch, ZooNetwork, ZooSettings,
                                      make_cnn_zoo, zoo_blocks, zoo_graph)
from neuralgraph.data.inr_dataset import InrBatch, InrDataset
from neuralgraph.data.transformer_zoo import ZooViT
from neuralgraph.graph import (GraphSpec, WeightBlocks, batch_graphs, blocks_to_graph, mlp_to_graph, module_to_graph,
                               permute_mlp, random_hidden_permutations)
from neuralgraph.inr import DWS_MNIST, grid_coordinates, render
from neuralgraph.nn import BASELINES, METANETS, build_metanet
from neuralgraph.nn.flops import flops_per_prediction
from neuralgraph.nn.probegen import ProbeGen, VanillaProbe
from neuralgraph.training import tasks

TOLERANCE = 1e-10  # float64 rounding of the few hundred operations behind each response
SIREN = (2, 16, 16, 1)
TINY_ZOO = ZooSettings(networks=8, shard_size=4, checkpoint_epochs=(1, 2), train_size=64, test_size=32, batch_size=32,
                       source="embedded")
SMALL = {"hidden_dim": 16, "num_layers": 2, "num_probes": 6}


@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    make_cnn_zoo(root, TINY_ZOO, progress=False)
    return root


def random_sirens(count: int, seed: int, layout=SIREN) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """SIRENs in float64 at DWS's initial scales (sine layers ``U(+-sqrt(6 / fan_in) / 30)``), biases nonzero."""
    generator = torch.Generator().manual_seed(seed)
    weights, biases = [], []
    for l, (d_in, d_out) in enumerate(zip(layout, layout[1:])):
        bound = (6 / d_in) ** 0.5 / (30 if l < len(layout) - 2 else 1)
        weights.append((2 * torch.rand(count, d_out, d_in, generator=generator, dtype=torch.float64) - 1) * bound)
        biases.append(0.1 * torch.randn(count, d_out, generator=generator, dtype=torch.float64))
    return weights, biases


def siren_model(name: str, **config):
    spec = GraphSpec.of(mlp_to_graph(*random_sirens(2, 0)), convention=DWS_MNIST.to_dict())
    torch.manual_seed(0)
    return build_metanet(name, spec=spec, **{**SMALL, **config}).double().eval()


def features(model, graph, blocks=None) -> torch.Tensor:
    """The classifier's features of each network ``[B, hidden_dim]``, read back from the node rows."""
    context = model.context(graph, blocks)
    node, _ = model(graph, context)
    first = torch.searchsorted(context.batch, torch.arange(context.num_graphs))
    return node[first]


def zoo_networks(activations, seed: int) -> list[ZooNetwork]:
    torch.manual_seed(seed)
    networks = [ZooNetwork(activation=ACTIVATIONS[a]).double().eval() for a in activations]
    for network in networks:
        for parameter in network.parameters():
            torch.nn.init.normal_(parameter, std=0.5)
    return networks


def permute_zoo_network(network: ZooNetwork, generator: torch.Generator) -> ZooNetwork:
    """The same function with the channels of the three convolutions permuted."""
    permuted = copy.deepcopy(network)
    previous = None
    with torch.no_grad():
        for name in LAYERS:
            layer = getattr(permuted, name)
            if previous is not None:
                layer.weight.copy_(layer.weight[:, previous])
            if name != "linear":
                order = torch.randperm(layer.out_channels, generator=generator)
                layer.weight.copy_(layer.weight[order])
                layer.bias.copy_(layer.bias[order])
                previous = order
    return permuted


def zoo_batch(networks, activations) -> ZooBatch:
    """The networks as CnnZooDataset.batch makes a batch: graphs from their weights, with the WeightBlocks."""
    weights = [torch.stack([getattr(n, l).weight.detach() for n in networks]) for l in LAYERS]
    biases = [torch.stack([getattr(n, l).bias.detach() for n in networks]) for l in LAYERS]
    graph = zoo_graph(weights, biases, torch.tensor(activations))
    return ZooBatch(graph, torch.zeros(len(networks), dtype=torch.float64), torch.arange(len(networks)),
                    WeightBlocks.of(zoo_blocks(weights), biases))


def permute_vit(network: ZooViT, generator: torch.Generator) -> ZooViT:
    """The same function with every block's attention heads and MLP units permuted."""
    permuted = copy.deepcopy(network)
    with torch.no_grad():
        for block in permuted.blocks:
            first, last = block.mlp[0], block.mlp[2]
            units = torch.randperm(first.out_features, generator=generator)
            first.weight.copy_(first.weight[units])
            first.bias.copy_(first.bias[units])
            last.weight.copy_(last.weight[:, units])
            attention = block.attention
            width, dim = attention.head_dim, attention.embed_dim
            heads = torch.randperm(attention.num_heads, generator=generator)
            rows = (heads[:, None] * width + torch.arange(width)).flatten()
            projections = torch.cat([rows + k * dim for k in range(3)])  # query, key, value
            attention.in_proj_weight.copy_(attention.in_proj_weight[projections])
            attention.in_proj_bias.copy_(attention.in_proj_bias[projections])
            attention.out_proj.weight.copy_(attention.out_proj.weight[:, rows])
    return permuted


def test_registered_as_baselines_apart_from_the_metanetworks():
    assert BASELINES["probegen"] is ProbeGen and BASELINES["probe"] is VanillaProbe
    assert "probegen" not in METANETS and "probe" not in METANETS
    assert isinstance(siren_model("probegen").encoder.probes.layers[0], torch.nn.Linear)


def test_siren_responses_are_the_inrs_values():
    """At the pixel coordinates, the responses are the INRs' images as ``render`` draws them."""
    weights, biases = random_sirens(3, 1)
    model = siren_model("probe")
    coordinates = grid_coordinates(28, 28, DWS_MNIST, dtype=torch.float64)
    for blocks in (None, WeightBlocks.of_mlps(weights, biases)):
        responses = model.encoder.responses(mlp_to_graph(weights, biases), blocks, coordinates)
        torch.testing.assert_close(responses.view(3, 28, 28), render(weights, biases, 28, DWS_MNIST),
                                   rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("name", ["probegen", "probe"])
def test_invariant_to_hidden_permutations_of_the_inrs(name):
    weights, biases = random_sirens(4, 2)
    permuted = permute_mlp(weights, biases, random_hidden_permutations(SIREN, 4, torch.Generator().manual_seed(3)))
    assert not torch.equal(permuted[0][0], weights[0])
    model = siren_model(name)
    expected = features(model, mlp_to_graph(weights, biases))
    for w, b in (permuted, (weights, biases)):
        for blocks in (None, WeightBlocks.of_mlps(w, b)):
            torch.testing.assert_close(features(model, mlp_to_graph(w, b), blocks), expected, rtol=0, atol=TOLERANCE)
    changed = [w.clone() for w in weights]
    changed[1][0, 0, 0] += 0.1  # another function: the features see it
    assert (features(model, mlp_to_graph(changed, biases))[0] - expected[0]).abs().max() > 1e-6


@pytest.mark.parametrize("name", ["probegen", "probe"])
def test_invariant_to_channel_permutations_of_zoo_cnns(name):
    """The probes go through the ZooNetwork each graph rebuilds, from the batch's blocks or from its graph (a
    graph that records its architecture), and its channels' order does not matter."""
    activations = [0, 1, 2, 1]
    networks = zoo_networks(activations, 0)
    generator = torch.Generator().manual_seed(4)
    permuted = [permute_zoo_network(n, generator) for n in networks]
    torch.manual_seed(0)
    model = build_metanet(name, spec=GraphSpec.of(zoo_batch(networks, activations).graph), network="cnn_zoo",
                          **SMALL).double().eval()
    probes = model.probes()
    with torch.no_grad():
        direct = torch.stack([n(probes) for n in networks])
    expected = features(model, zoo_batch(networks, activations).graph)
    for group in (networks, permuted):
        batch = zoo_batch(group, activations)
        traced = batch_graphs([module_to_graph(n) for n in group])
        # from the blocks; from the graph, by its activations; from the graph, by its recorded architecture
        for graph, blocks in ((batch.graph, batch.blocks), (batch.graph, None), (traced, None)):
            torch.testing.assert_close(model.encoder.responses(graph, blocks, probes), direct, rtol=0, atol=TOLERANCE)
            torch.testing.assert_close(features(model, graph, blocks), expected, rtol=0, atol=TOLERANCE)
    assert not torch.equal(zoo_batch(permuted, activations).graph.edge_attr,
                           zoo_batch(networks, activations).graph.edge_attr)


def test_invariant_to_head_and_unit_permutations_of_zoo_vits():
    """Graphs of two architectures in one batch: each goes through the ZooViT its recorded architecture names."""
    torch.manual_seed(0)
    networks = [ZooViT(depth=1, heads=2, mlp_dim=24).double().eval(),
                ZooViT(depth=2, heads=3, mlp_dim=48, activation="silu").double().eval()]
    generator = torch.Generator().manual_seed(5)
    permuted = [permute_vit(n, generator) for n in networks]
    example = torch.randn(2, 1, 28, 28, dtype=torch.float64)
    graphs = batch_graphs([module_to_graph(n, example_input=example) for n in networks])
    permuted_graphs = batch_graphs([module_to_graph(n, example_input=example) for n in permuted])
    assert not torch.equal(graphs.edge_attr, permuted_graphs.edge_attr)
    torch.manual_seed(0)
    model = build_metanet("probegen", spec=GraphSpec.of(graphs), network="transformer_zoo",
                          **SMALL).double().eval()
    probes = model.probes()
    with torch.no_grad():
        direct = torch.stack([n(probes) for n in networks])
    torch.testing.assert_close(model.encoder.responses(graphs, None, probes), direct, rtol=0, atol=1e-9)
    torch.testing.assert_close(features(model, permuted_graphs), features(model, graphs), rtol=0, atol=1e-9)


def test_a_training_step_through_the_tasks_moves_the_generator(tiny_inrs, tiny_zoo):
    """InrClassification on INRs and GeneralizationPrediction on a CNN zoo: the loss reaches the latent codes,
    the generator and the classifier, and an optimizer step changes the probes."""
    inrs = InrDataset(tiny_inrs, "train")
    inr_batch = inrs.batch(range(8))
    zoo = CnnZooDataset(tiny_zoo, "train")
    zoo_batch_ = zoo.batch(range(len(zoo)))
    cases = [(tasks.InrClassification, inr_batch, GraphSpec.of(inr_batch.graph, convention=inrs.convention.to_dict()),
              {}),
             (tasks.GeneralizationPrediction, zoo_batch_, GraphSpec.of(zoo_batch_.graph), {"network": "cnn_zoo"})]
    for task_class, batch, spec, config in cases:
        torch.manual_seed(0)
        task = task_class(metanet="probegen", metanet_config={**SMALL, **config}, spec=spec.to_dict(),
                          normalize_inputs=False, lr=3e-4, weight_decay=0.0)
        optimizer = task.configure_optimizers()["optimizer"]
        before = task.metanet.probes().detach().clone()
        loss, _ = task.loss_and_outputs(batch)
        assert torch.isfinite(loss)
        loss.backward()
        generator = task.metanet.encoder.probes
        for parameter in (generator.latent, generator.layers[0].weight, task.metanet.mlp[0].weight,
                          task.readout.lin.weight):
            assert parameter.grad is not None and parameter.grad.abs().max() > 0
        optimizer.step()
        assert (task.metanet.probes() - before).abs().max() > 0


@pytest.mark.parametrize("name", ["probegen", "probe"])
def test_tasks_read_one_row_per_network_as_the_node_rows_give_it(name, tiny_inrs):
    """The tasks' prediction from ``network_features`` (no node or edge rows written) equals the readout on
    the rows ``forward`` returns, in float64."""
    inrs = InrDataset(tiny_inrs, "train")
    batch = inrs.batch(range(8))
    spec = GraphSpec.of(batch.graph, convention=inrs.convention.to_dict())
    torch.manual_seed(0)
    task = tasks.InrClassification(metanet=name, metanet_config=SMALL, spec=spec.to_dict(),
                                   normalize_inputs=False).double()
    graph = batch.graph.clone()
    graph.x, graph.edge_attr = graph.x.double(), graph.edge_attr.double()
    blocks = WeightBlocks.of([w.double() for w in batch.blocks.weights], [b.double() for b in batch.blocks.biases])
    batch = batch._replace(graph=graph, blocks=blocks)
    node, edge, context = task.features(batch.graph, batch.blocks, batch.facts)
    assert edge.shape[0] == batch.graph.num_edges
    torch.testing.assert_close(task.network_prediction(batch), task.readout(batch.graph, node, edge, context),
                               rtol=0, atol=1e-12)


def test_probes_kept_for_evaluation_follow_their_parameters():
    model = siren_model("probegen")
    encoder = model.encoder
    with torch.no_grad():
        kept = encoder.current_probes()
        assert encoder.current_probes() is kept  # eval mode, no autograd: made once
        encoder.probes.latent.add_(0.5)  # in place, as an optimizer step or load_state_dict writes
        moved = encoder.current_probes()
        assert not torch.equal(moved, kept) and torch.equal(moved, encoder.probes())
        torch.testing.assert_close(model.float().encoder.current_probes(), moved.float())  # another dtype
    model.double().train()
    assert encoder.current_probes().requires_grad and encoder.kept is None  # training: made at every call


def fit(config: str, tmp_path, *options):
    from neuralgraph.training.cli import run_lightning_cli

    return run_lightning_cli(["fit", "--config", f"configs/{config}", *options, "--trainer.fast_dev_run", "true",
                              "--test_after_fit", "false",
                              "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false",
                              "--trainer.logger", "false", "--model.init_args.metanet_config.num_probes", "8"])


@pytest.mark.parametrize("config", ["examples/inr_classification/probegen.yaml", "examples/inr_classification/probe.yaml"])
def test_the_inr_configs_fit(config, tiny_inrs, tmp_path):
    cli = fit(config, tmp_path, "--data.root", str(tiny_inrs), "--data.batch_size", "8",
              "--data.preset", "null")
    assert cli.model.metanet.network == "siren"
    assert torch.isfinite(cli.trainer.callback_metrics["train/loss"])


@pytest.mark.parametrize("config", ["examples/generalization_prediction/small_cnn_zoo_probegen.yaml",
                                    "examples/generalization_prediction/small_cnn_zoo_probe.yaml"])
def test_the_cnn_zoo_configs_fit(config, tiny_zoo, tmp_path):
    cli = fit(config, tmp_path, "--data.init_args.root", str(tiny_zoo), "--data.init_args.batch_size", "4")
    assert cli.model.metanet.network == "cnn_zoo"
    assert torch.isfinite(cli.trainer.callback_metrics["train/loss"])


def count(function) -> int:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        function()
    return counter.get_total_flops()


def mlp_flops(inputs: int, hidden: int, layers: int, outputs: int) -> int:
    """The classifier's ``layers`` linear layers and the readout's, 2 FLOPs per multiply-add."""
    return 2 * (inputs * hidden + (layers - 1) * hidden * hidden + hidden * outputs)


def test_flops_per_prediction_counts_probes_responses_and_classifier():
    weights, biases = random_sirens(4, 6)
    batch = InrBatch(mlp_to_graph(weights, biases), None, torch.zeros(4, dtype=torch.long), torch.arange(4),
                     WeightBlocks.of_mlps(weights, biases))
    P, H, L = SMALL["num_probes"], SMALL["hidden_dim"], SMALL["num_layers"]
    siren = 2 * P * sum(a * b for a, b in zip(SIREN, SIREN[1:]))  # each probe through each INR's matmuls
    vanilla = siren_model("probe")
    assert flops_per_prediction(vanilla, batch, out_dim=10) == siren + mlp_flops(P, H, L, 10)
    generated = siren_model("probegen")  # in eval mode its probes are made once: a prediction does not run them
    assert flops_per_prediction(generated, batch, out_dim=10) == siren + mlp_flops(P, H, L, 10)
    assert count(lambda: generated.encoder(batch.graph, batch.blocks)) == 4 * siren  # kept probes, 4 INRs
    generated.train()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:  # training: made at every forward
        generated.encoder(batch.graph, batch.blocks)
    assert counter.get_total_flops() == 4 * siren + 2 * P * (32 * 32 + 32 * 2)  # latent 32 -> 32 -> 2
    flops_per_prediction(generated, batch)
    assert generated.training  # the mode is restored

    activations = [0, 1, 2]
    zoo = zoo_batch(zoo_networks(activations, 7), activations)
    torch.manual_seed(0)
    model = build_metanet("probegen", spec=GraphSpec.of(zoo.graph), network="cnn_zoo", **SMALL).double().eval()
    probes = model.probes().detach()
    network = ZooNetwork().double().eval()
    expected = count(lambda: network(probes)) + mlp_flops(10 * P, H, L, 1)
    assert flops_per_prediction(model, zoo) == expected  # vmap's batched convolutions count what each network costs


def test_flops_per_prediction_for_every_registered_architecture():
    """Every metanetwork and baseline on an INR batch; a task counts its metanetwork and readout."""
    weights, biases = random_sirens(3, 8)
    batch = InrBatch(mlp_to_graph(weights, biases), None, torch.zeros(3, dtype=torch.long), torch.arange(3),
                     WeightBlocks.of_mlps(weights, biases))
    spec = GraphSpec.of(batch.graph, convention=DWS_MNIST.to_dict())
    required = {"statnn": {"weight_layers": 3}}
    for name in sorted({**METANETS, **BASELINES}):
        torch.manual_seed(0)
        model = build_metanet(name, spec=spec, hidden_dim=16, num_layers=2, **required.get(name, {})).double()
        assert flops_per_prediction(model, batch) > 0, name
    for name in ("gmn", "statnn", "probegen"):
        torch.manual_seed(0)
        task = tasks.InrClassification(metanet=name, metanet_config={"hidden_dim": 16, "num_layers": 2,
                                                                      **required.get(name, {})},
                                       spec=spec.to_dict(), normalize_inputs=False).double()
        assert flops_per_prediction(task, batch) == flops_per_prediction(task.metanet, batch, out_dim=10), name


def test_refusals_are_one_line():
    activations = [0, 1]
    zoo = zoo_batch(zoo_networks(activations, 9), activations)
    zoo_spec = GraphSpec.of(zoo.graph)
    inr_spec = GraphSpec.of(mlp_to_graph(*random_sirens(2, 0)), convention=DWS_MNIST.to_dict())
    bare = blocks_to_graph(list(zoo.blocks.weights), list(zoo.blocks.biases))  # no architecture, no activations
    model = build_metanet("probe", spec=zoo_spec, network="cnn_zoo", **SMALL).double()
    failures = [
        (ValueError, "network", lambda: build_metanet("probegen", spec=zoo_spec)),
        (ValueError, "network", lambda: build_metanet("probegen", spec=inr_spec, network="cnn_zoo")),
        (ValueError, "records neither its architecture nor its activations", lambda: model.encoder(bare)),
        (ValueError, "normalize_inputs", lambda: model.encoder.set_input_statistics(zoo.graph)),
        (ValueError, "28x28", lambda: build_metanet("probe", network="transformer_zoo", image_size=32)),
        (ValueError, "image_size", lambda: build_metanet("probegen", image_size=28)),
        (ValueError, "generator_layers", lambda: build_metanet("probegen", network="cnn_zoo", generator_layers=4)),
        (TypeError, "options", lambda: model.readout(1, max_layers=4)),
    ]
    for error, words, call in failures:
        with pytest.raises(error) as info:
            call()
        assert words in str(info.value) and "\n" not in str(info.value), str(info.value)
