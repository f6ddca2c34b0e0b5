"""CNN zoo: the trainer's forward is each network's, storage resumes and is sha-checked, the
entries convert to parameter graphs, and GeneralizationPrediction fits through the CLI."""
import json

import pytest
import torch

from neuralgraph.cli import main
from neuralgraph.data.cnn_zoo import (
    ACTIVATIONS,
    CnnZooDataset,
    DatasetError,
    ZooNetwork,
    ZooSettings,
    make_cnn_zoo,
    weight_statistics,
    zoo_graph,
)
from neuralgraph.data.zoo_trainer import ConvStack
from neuralgraph.graph import module_to_graph

TINY = ZooSettings(networks=8, shard_size=4, checkpoint_epochs=(1, 2), train_size=64, test_size=32, batch_size=32,
                   source="embedded")


@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo")
    make_cnn_zoo(root, TINY, progress=False)
    return root


def entry_module(dataset: CnnZooDataset, i: int) -> ZooNetwork:
    net = ZooNetwork(TINY.channels, ACTIVATIONS[int(dataset.tensors["activation"][i])])
    net.load_state_dict({k: dataset.tensors[k][i] for k in net.state_dict()})
    return net


def test_splits_partition_the_networks(tiny_zoo):
    data = {s: CnnZooDataset(tiny_zoo, s) for s in ("train", "val", "test")}
    networks = {s: set(d.tensors["network"].tolist()) for s, d in data.items()}
    assert networks["train"] | networks["val"] | networks["test"] == set(range(TINY.networks))
    assert sum(len(n) for n in networks.values()) == TINY.networks
    assert sum(len(d) for d in data.values()) == TINY.networks * len(TINY.checkpoint_epochs)
    for d in data.values():
        assert ((d.accuracy >= 0) & (d.accuracy <= 1)).all()


def test_the_trainers_forward_is_each_network_alone(tiny_zoo):
    dataset = CnnZooDataset(tiny_zoo, "train")
    # float64: patches + matrix product against conv2d is an exact identity. A sum of at most 145 terms
    # rounds by at most 145 u (u = 1.1e-16) times its terms' magnitudes (logits reach 20): below 1e-11
    # over four layers in any order, far below assert_close's float64 rtol and atol of 1e-7
    x = torch.randn(5, 1, 28, 28, dtype=torch.float64)
    names = list(ZooNetwork().state_dict())
    activations = [ACTIVATIONS[int(a)] for a in dataset.tensors["activation"]]
    stack = ConvStack({k: dataset.tensors[k].double() for k in names}, activations, [0.0] * len(dataset), tile=2)
    inputs = stack.prepare(x)
    assert len(set(activations)) > 1
    for i in range(len(dataset)):
        torch.testing.assert_close(stack.logits(i, inputs), entry_module(dataset, i).double()(x))


def test_entries_are_the_graphs_of_their_modules(tiny_zoo):
    dataset = CnnZooDataset(tiny_zoo, "val")
    batch = dataset.batch(range(len(dataset)))
    for i, graph in enumerate(batch.graph.to_data_list()):
        expected = module_to_graph(entry_module(dataset, i))
        for key in ("edge_attr", "x", "edge_index", "activation"):
            assert torch.equal(graph[key], expected[key]), key
    assert torch.equal(batch.graph.x, zoo_graph(dataset.weights, dataset.biases, dataset.tensors["activation"]).x)


def test_a_mixed_activation_zoo_is_one_dataset_whose_graphs_name_their_activation(tiny_zoo):
    """Every entry's hidden neurons carry its network's activation; a metanetwork with
    node_activations=True reads them, so networks that differ only in activation encode apart."""
    from neuralgraph.graph import Activation
    from neuralgraph.nn import build_metanet

    dataset = CnnZooDataset(tiny_zoo, "train")
    graph = dataset.batch(range(len(dataset))).graph
    hidden = (graph.node_layer > 0) & (graph.node_layer < 4)
    names = [list(Activation)[int(c)] for c in graph.activation[hidden]]
    assert names == [ACTIVATIONS[int(a)] for a in dataset.tensors["activation"][graph.batch[hidden]]]
    assert len(set(names)) > 1 and bool((graph.activation[~hidden] == 0).all())
    torch.manual_seed(0)
    metanet = build_metanet("gmn", hidden_dim=8, num_layers=1, edge_features=9, node_activations=True).eval()
    relabelled = graph.clone()
    relabelled.activation = torch.where(hidden, (graph.activation % 3) + 1, graph.activation)  # another activation
    assert not torch.allclose(metanet(graph)[0], metanet(relabelled)[0])
    del relabelled.activation
    with pytest.raises(ValueError, match="graph has no field activation"):
        metanet(relabelled)


def test_resume_retrains_a_lost_shard_bitwise(tiny_zoo, tmp_path):
    for path in tiny_zoo.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    lost = manifest["shards"].pop()
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / lost["file"]).unlink()
    resumed = make_cnn_zoo(tmp_path, TINY, progress=False)
    assert resumed["shards"][-1] == lost
    assert (tmp_path / lost["file"]).read_bytes() == (tiny_zoo / lost["file"]).read_bytes()


def test_refusals(tiny_zoo, tmp_path):
    for path in tiny_zoo.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    with pytest.raises(DatasetError, match="networks is 8 in the manifest, but this run uses 9"):
        make_cnn_zoo(tmp_path, ZooSettings(**{**TINY.to_dict(), "networks": 9, "checkpoint_epochs": (1, 2)}),
                     progress=False)
    shard = tmp_path / "zoo-00001.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1] + b"\0")
    with pytest.raises(DatasetError, match="zoo-00001.safetensors: sha256 differs"):
        CnnZooDataset(tmp_path, "train")
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["shards"].pop()
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match="4 of 8 networks trained"):
        CnnZooDataset(tmp_path, "train")
    with pytest.raises(ValueError, match=r"checkpoint_epochs=\(2, 1\): expected increasing"):
        ZooSettings(checkpoint_epochs=(2, 1))


def test_weight_statistics_by_hand():
    w = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]])
    b = torch.tensor([[0.0, 2.0]])
    expected = torch.tensor([[2.5, 5 / 3, 1, 1.75, 2.5, 3.25, 4, 1, 2, 0, 0.5, 1, 1.5, 2]])
    torch.testing.assert_close(weight_statistics([w], [b]), expected)


def test_make_cnn_zoo_cli_one_line_errors(tmp_path, capsys):
    assert main(["make-cnn-zoo", "--out", str(tmp_path / "z"), "--epochs", "3", "1", "--source", "embedded"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("neuralgraph make-cnn-zoo: error:") and "checkpoint_epochs=(3, 1)" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("config,options", [
    ("gmn", []),
    ("gmn", ["--model.init_args.metanet_config", "{hidden_dim: 8, num_layers: 1, edge_features: 9, node_activations: true}"]),
])
def test_generalization_prediction_fits(tiny_zoo, tmp_path, config, options):
    from neuralgraph.training.cli import run_lightning_cli

    config_path = f"configs/examples/generalization_prediction/cnn_zoo_{config}.yaml"
    cli = run_lightning_cli(["fit", "--config", config_path, "--data.init_args.root",
                             str(tiny_zoo), "--trainer.max_epochs", "1", "--trainer.default_root_dir", str(tmp_path),
                             "--trainer.enable_progress_bar", "false", "--trainer.logger", "false", *options])
    if options:
        assert cli.model.metanet.encoder.activation_embedding is not None
    metrics = cli.trainer.callback_metrics
    assert {"test/kendall_tau", "test/r2", "test/loss"} <= metrics.keys()
    assert torch.isfinite(metrics["test/loss"])


def test_the_zoo_data_module_spec_gives_kernel_edges_and_activation_embeddings(tiny_zoo):
    from neuralgraph.nn import build_metanet
    from neuralgraph.training.cnn_zoo_datamodule import CnnZooDataModule

    data = CnnZooDataModule(root=str(tiny_zoo))
    spec = data.spec
    assert spec.edge_features == 9 and len(spec.layouts) == 1 and not spec.skip_edges
    graph = data.batch("train", range(data.size("train"))).graph
    activations = set(graph.activation[graph.node_layer == 1].tolist())
    assert spec.varying_activations == (len(activations) > 1)
    metanet = build_metanet("ng_gnn", spec=spec, hidden_dim=8, num_layers=1)
    assert metanet.encoder.activation_embedding is not None or not spec.varying_activations
    node, edge = metanet(graph)
    assert edge.shape == (graph.num_edges, 8)
