"""Transformer zoo: hyperparameters are per-seed, batched training is per-network exact, storage
resumes byte for byte and is sha-checked, entries rebuild their ViTs, and they convert to parameter
graphs that GeneralizationPrediction fits through the CLI."""
import json
import math

import pytest
import torch

from neuralgraph.cli import main
from neuralgraph.data import transformer_zoo
from neuralgraph.data.cnn_zoo import _mnist, network_seed
from neuralgraph.data.shards import DatasetError
from neuralgraph.data.transformer_zoo import (
    OPTIMIZERS,
    SGD_MOMENTUM,
    TransformerZooDataset,
    TransformerZooSettings,
    ZooViT,
    architecture,
    initial_parameters,
    make_transformer_zoo,
    optimizer_rule,
    sample_hyperparameters,
)
from neuralgraph.data.zoo_trainer import VitArchitecture, VitStack, op_threads
from neuralgraph.graph import module_to_graph

TINY = TransformerZooSettings(networks=6, shard_size=3, checkpoint_epochs=(1, 2), train_size=64, test_size=32,
                              batch_size=32, source="embedded")


@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory):
    root = tmp_path_factory.mktemp("transformer_zoo")
    make_transformer_zoo(root, TINY, progress=False)
    return root


def copy_folder(source, target):
    for path in source.iterdir():
        (target / path.name).write_bytes(path.read_bytes())


def test_hyperparameters_are_a_function_of_the_seed():
    hypers = [sample_hyperparameters(network_seed(0, i)) for i in range(300)]
    assert hypers == [sample_hyperparameters(network_seed(0, i)) for i in range(300)]
    assert hypers[0] != sample_hyperparameters(network_seed(1, 0))
    for key, values in (("depth", {1, 2}), ("heads", {2, 3, 4}), ("mlp_dim", {24, 48}), ("activation", {0, 1}),
                        ("optimizer", {0, 1, 2})):
        assert {h[key] for h in hypers} == values, key
    for h in hypers:
        low, high = (1e-3, 1e-1) if OPTIMIZERS[h["optimizer"]] == "sgd" else (1e-4, 1e-2)
        assert low <= h["lr"] <= high and 1e-6 <= h["weight_decay"] <= 1e-1
        assert 0.3 <= h["init_scale"] <= 3 and 0.1 <= h["train_fraction"] <= 1
    initial = initial_parameters(hypers[0], network_seed(0, 0))
    assert all(torch.equal(v, initial_parameters(hypers[0], network_seed(0, 0))[k]) for k, v in initial.items())
    assert initial.keys() == ZooViT(**architecture(hypers[0])).state_dict().keys()


def test_batched_steps_are_each_network_trained_alone():
    """Three steps of networks of six architectures and all three optimizers, batched (the
    trainer's VitStack: one product per layer over the networks of an architecture), against each
    network as a plain ZooViT with its own torch.optim optimizer, in float64. Each network steps on
    its own images, as many as it has, and some sit a step out.

    Attention's key bias adds ``q . b_k`` to every score of a query's row, which softmax ignores: its
    gradient is zero but for rounding, which differs between the batched and the plain products,
    and Adam scales any gradient to a step of up to about ``3 lr`` ((1 - beta1) / sqrt(1 - beta2)).
    So it is compared within that bound, everything else within float64 rounding (1e-10 relative).
    """
    hypers = [sample_hyperparameters(network_seed(0, i)) for i in range(9)]
    order = sorted(range(9), key=lambda i: tuple(architecture(hypers[i]).values()))
    hypers = [hypers[i] for i in order]
    initial = [{k: v.double() for k, v in initial_parameters(h, i).items()} for i, h in enumerate(hypers)]
    assert len({tuple(architecture(h).values()) for h in hypers}) >= 6
    assert {h["optimizer"] for h in hypers} == {0, 1, 2}
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(24, 1, 28, 28, generator=generator, dtype=torch.float64)
    labels = torch.randint(10, (24,), generator=generator)
    sizes = [8, 5, 8, 3, 8, 6, 7, 8, 4]
    steps = [[(i, torch.randperm(24, generator=generator)[:size]) for i, size in enumerate(sizes) if (s + i) % 4]
             for s in range(3)]
    stack = VitStack(initial, [VitArchitecture(**architecture(h)) for h in hypers])
    stack.optimizer([optimizer_rule(h) for h in hypers], [h["lr"] for h in hypers],
                    [h["weight_decay"] for h in hypers])
    inputs = stack.prepare(images)
    for batch in steps:
        stack.step(batch, inputs, labels)
    trained = stack.state()
    kinds = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
             "sgd": lambda p, **kw: torch.optim.SGD(p, momentum=SGD_MOMENTUM, **kw)}
    models = []
    for i, h in enumerate(hypers):
        model = ZooViT(**architecture(h)).double()
        model.load_state_dict(initial[i])
        optimizer = kinds[OPTIMIZERS[h["optimizer"]]](model.parameters(), lr=h["lr"], weight_decay=h["weight_decay"])
        for batch in steps:
            for j, index in batch:
                if j == i:
                    optimizer.zero_grad()
                    torch.nn.functional.cross_entropy(model(images[index]), labels[index]).backward()
                    optimizer.step()
        for key, value in model.state_dict().items():
            batched = trained[i][key]
            if key.endswith("attention.in_proj_bias"):  # the key bias: rounding noise, normalised by Adam
                keys = slice(value.shape[0] // 3, 2 * value.shape[0] // 3)
                assert float((batched[keys] - value[keys]).abs().max()) <= 4 * len(steps) * h["lr"]
                batched, value = batched.clone(), value.clone()
                batched[keys] = value[keys] = 0
            torch.testing.assert_close(batched, value, rtol=1e-10, atol=1e-12, msg=lambda m: f"network {i} {key}: {m}")
        models.append(model)
    accuracy, loss = stack.evaluate(inputs, labels)
    for i, model in enumerate(models):
        model.load_state_dict(trained[i])
        with torch.no_grad():
            logits = model(images)
        torch.testing.assert_close(loss[i], torch.nn.functional.cross_entropy(logits, labels), rtol=1e-10, atol=1e-12)
        assert float(accuracy[i]) == float((logits.argmax(1) == labels).double().mean())


def test_an_interrupted_zoo_resumes_byte_identically(tiny_zoo, tmp_path, monkeypatch):
    train_shard = transformer_zoo.train_shard

    def killed_at_the_second_shard(first, *args, **kwargs):
        if first > 0:
            raise KeyboardInterrupt
        return train_shard(first, *args, **kwargs)

    monkeypatch.setattr(transformer_zoo, "train_shard", killed_at_the_second_shard)
    with pytest.raises(KeyboardInterrupt):
        make_transformer_zoo(tmp_path, TINY, progress=False)
    assert len(json.loads((tmp_path / "manifest.json").read_text())["shards"]) == 1
    monkeypatch.undo()
    make_transformer_zoo(tmp_path, TINY, progress=False)
    written = sorted(p.name for p in tiny_zoo.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == written
    for name in written:
        assert (tmp_path / name).read_bytes() == (tiny_zoo / name).read_bytes(), name


def test_the_manifest_checks_every_shard_and_setting(tiny_zoo, tmp_path):
    copy_folder(tiny_zoo, tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["architecture"] == {"dim": 24, "patch": 7, "classes": 10, "image_size": 28}
    assert [s["networks"] for s in manifest["shards"]] == [3, 3]
    with pytest.raises(DatasetError, match="networks is 6 in the manifest, but this run uses 7"):
        make_transformer_zoo(tmp_path, TransformerZooSettings(**{**TINY.to_dict(), "networks": 7,
                                                                 "checkpoint_epochs": (1, 2)}), progress=False)
    shard = tmp_path / "zoo-00001.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1] + b"\0")
    with pytest.raises(DatasetError, match="zoo-00001.safetensors: sha256 differs"):
        TransformerZooDataset(tmp_path, "train")
    with pytest.raises(DatasetError, match="zoo-00001.safetensors: sha256 differs"):
        make_transformer_zoo(tmp_path, TINY, progress=False)
    manifest["shards"].pop()
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match="3 of 6 networks trained .* make-transformer-zoo"):
        TransformerZooDataset(tmp_path, "train")


def test_a_folder_it_does_not_own_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["make-transformer-zoo", "--out", str(tmp_path), "--networks", "2", "--source", "embedded"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("neuralgraph make-transformer-zoo: error:") and "notes.txt" in err and err.count("\n") == 1
    assert main(["make-transformer-zoo", "--out", str(tmp_path / "z"), "--epochs", "2", "1"]) == 2
    err = capsys.readouterr().err
    assert "checkpoint_epochs=(2, 1)" in err and err.count("\n") == 1


def test_entries_rebuild_their_networks(tiny_zoo):
    data = {s: TransformerZooDataset(tiny_zoo, s) for s in ("train", "val", "test")}
    networks = {s: set(d.tensors["network"].tolist()) for s, d in data.items()}
    assert set.union(*networks.values()) == set(range(TINY.networks))
    assert sum(len(n) for n in networks.values()) == TINY.networks
    assert sum(len(d) for d in data.values()) == TINY.networks * len(TINY.checkpoint_epochs)
    images, labels = _mnist("test", TINY.test_size, "embedded", None)
    train = data["train"]
    assert {int(d) for d in train.tensors["depth"]} == {1, 2}
    for i in range(len(train)):
        model = train.module(i)
        hyper = {k: train.tensors[k][i].item() for k in ("depth", "heads", "mlp_dim", "activation")}
        assert train.settings(i) == architecture(hyper)
        with torch.no_grad():
            logits = model(images)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        torch.testing.assert_close(loss, train.tensors["test_loss"][i], rtol=1e-5, atol=1e-6)
        accuracy = (logits.argmax(1) == labels).float().mean()
        assert abs(float(accuracy - train.accuracy[i])) <= 1 / TINY.test_size  # a near tie may round either way


def test_entries_are_the_graphs_of_their_modules(tiny_zoo):
    """Needs module_to_graph to read ZooViT (LayerNorm, MultiheadAttention, the positional embedding);
    the graph does not depend on the probe images."""
    dataset = TransformerZooDataset(tiny_zoo, "train")
    batch = dataset.batch(range(len(dataset)))
    assert batch.blocks is None and torch.equal(batch.accuracy, dataset.accuracy)
    graphs = batch.graph.to_data_list()
    assert len(graphs) == len(dataset)
    probe = torch.rand(3, 1, 28, 28)
    depths = dataset.tensors["depth"].tolist()
    for i in {depths.index(1), depths.index(2), len(dataset) - 1}:
        graph, expected = graphs[i], module_to_graph(dataset.module(i).eval(), example_input=probe)
        for key in ("x", "edge_index", "edge_attr"):
            assert torch.equal(graph[key], expected[key]), key


@pytest.mark.slow
def test_generalization_prediction_fits(tiny_zoo, tmp_path):
    """Needs module_to_graph to read ZooViT. The data module's spec sees both depths (two layouts)."""
    from neuralgraph.training.cli import run_lightning_cli
    from neuralgraph.training.transformer_zoo_datamodule import TransformerZooDataModule

    assert len(TransformerZooDataModule(root=str(tiny_zoo)).spec.layouts) >= 2
    cli = run_lightning_cli(["fit", "--config", "configs/benchmarks/transformer_zoo/gmn.yaml", "--data.init_args.root",
                             str(tiny_zoo), "--trainer.max_epochs", "1", "--trainer.default_root_dir", str(tmp_path),
                             "--trainer.enable_progress_bar", "false", "--trainer.logger", "false",
                             "--model.init_args.metanet_config", "{hidden_dim: 8, num_layers: 1}"])
    metrics = cli.trainer.callback_metrics
    assert {"test/kendall_tau", "test/r2", "test/loss"} <= metrics.keys()
    assert torch.isfinite(metrics["test/loss"])


# -- the Small Transformer Zoo's recipe (--recipe small-transformer-zoo) --

STZ = "small-transformer-zoo"
TINY_STZ = TransformerZooSettings(networks=4, shard_size=2, checkpoint_epochs=(1, 2), train_size=128, test_size=48,
                                  batch_size=32, source="embedded", recipe=STZ)


@pytest.fixture(scope="module")
def tiny_stz(tmp_path_factory):
    root = tmp_path_factory.mktemp("small_transformer_zoo")
    make_transformer_zoo(root, TINY_STZ, progress=False)
    return root


def test_the_recipes_hyperparameters_are_its_grid():
    """Transformer-NFN's MNIST sweep: optimizer, learning rate and init std per optimizer family, L2,
    training fraction and dropout from their lists; embed 32, 2 heads, 2 blocks, MLP 64, ReLU."""
    hypers = [sample_hyperparameters(network_seed(0, i), STZ) for i in range(400)]
    assert hypers == [sample_hyperparameters(network_seed(0, i), STZ) for i in range(400)]
    assert {h["optimizer"] for h in hypers} == {0, 1, 2, 3}
    for h in hypers:
        family = "sgd" if transformer_zoo.STZ_OPTIMIZERS[h["optimizer"]].startswith("sgd") else "adam"
        assert h["lr"] in transformer_zoo.STZ_LR[family] and h["init_std"] in transformer_zoo.STZ_INIT_STD[family]
        assert h["weight_decay"] in transformer_zoo.STZ_L2 and h["train_fraction"] in transformer_zoo.STZ_TRAIN_FRACTIONS
        assert h["dropout"] in transformer_zoo.STZ_DROPOUT
    for key, grid in (("weight_decay", transformer_zoo.STZ_L2), ("dropout", transformer_zoo.STZ_DROPOUT),
                      ("train_fraction", transformer_zoo.STZ_TRAIN_FRACTIONS)):
        assert {h[key] for h in hypers} == set(grid), key
    assert architecture(hypers[0], STZ) == {"dim": 32, "patch": 7, "classes": 10, "image_size": 28, "depth": 2,
                                            "heads": 2, "mlp_dim": 64, "activation": "relu"}
    rules = {type(optimizer_rule(h, STZ)).__name__ + str(getattr(optimizer_rule(h, STZ), "momentum", "")) for h in hypers}
    assert rules == {"SGD0.0", "SGD0.9", "Adam", "RMSprop"}


def test_the_recipes_initialisation():
    """Kernels and weight matrices truncated normal of the network's std; biases zero; LayerNorms one
    and zero; the positional embedding the sinusoidal table."""
    hyper = {**sample_hyperparameters(network_seed(0, 0), STZ), "init_std": 0.3}
    state = initial_parameters(hyper, 7, STZ)
    assert state.keys() == ZooViT(**architecture(hyper, STZ)).state_dict().keys()
    matrices = torch.cat([v.flatten() for k, v in state.items() if v.dim() >= 2 and k != "position"])
    assert abs(float(matrices.std()) - 0.3) < 0.01 and float(matrices.abs().max()) <= 2
    for key, value in state.items():
        if key.endswith("bias"):
            assert not value.any(), key
        elif ".norm" in f".{key}":
            assert torch.equal(value, torch.ones_like(value)), key
    position = state["position"][0]
    assert torch.allclose(position[3, 0::2], torch.sin(3 * torch.exp(torch.arange(0, 32, 2) * -math.log(1e4) / 32)))
    assert torch.equal(state["patch.weight"], initial_parameters(hyper, 7, STZ)["patch.weight"])


def test_the_schedule_is_the_recipes_schedulers():
    """warmup_cosine over 100 epochs is the recipe's LinearLR warmup (10 epochs) then CosineAnnealingLR
    to 1e-5, stepped once per epoch as its solver steps them."""
    from neuralgraph.data.transformer_zoo import warmup_cosine

    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=0.03)
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1 / 10, end_factor=1.0, total_iters=9)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=90, eta_min=1e-5)
    for epoch in range(100):
        assert warmup_cosine(0.03, epoch + 1, 100) == pytest.approx(optimizer.param_groups[0]["lr"], rel=1e-9), epoch
        optimizer.step()
        (warmup if epoch < 10 else cosine).step()
    assert warmup_cosine(0.03, 1, 6) == 0.03 and warmup_cosine(0.03, 6, 6) == pytest.approx(1e-5 + (0.03 - 1e-5) * (
        1 + math.cos(math.pi * 4 / 5)) / 2)


def test_networks_with_dropout_and_the_schedule_train_as_alone():
    """A shard of the recipe's networks (dropout, four optimizers, the schedule, dropped last batches)
    against each network trained alone: the same weights, bit for bit (each network's masks, order
    and images come from its own streams; one thread)."""
    settings = TransformerZooSettings(networks=5, shard_size=5, checkpoint_epochs=(1, 2), train_size=160,
                                      test_size=32, batch_size=32, source="embedded", recipe=STZ)
    train, test = _mnist("train", 160, "embedded", None), _mnist("test", 32, "embedded", None)
    hypers = [sample_hyperparameters(network_seed(0, i), STZ) for i in range(5)]
    assert sum(h["dropout"] > 0 for h in hypers) >= 3
    with op_threads(1):
        together = transformer_zoo.train_networks(range(5), settings, train, test)
        for i in range(5):
            alone = transformer_zoo.train_networks([i], settings, train, test)
            for key in transformer_zoo.stored_shapes(STZ):
                both = together[key].view(2, 5, *together[key].shape[1:])[:, i]
                assert torch.equal(both, alone[key]), (i, key)


def test_dropout_masks_drop_at_the_networks_rate():
    from neuralgraph.data.zoo_trainer import VitArchitecture, VitStack

    hyper = sample_hyperparameters(network_seed(0, 0), STZ)
    arch = VitArchitecture(**architecture(hyper, STZ))
    states = [initial_parameters(hyper, 0, STZ)] * 3
    stack = VitStack(states, [arch] * 3, dropout=[0.0, 0.1, 0.2], bit_seeds=[1, 2, 3])
    group = stack.groups[0][2]
    keep = stack._keep(group, [0, 1, 2], [64, 64, 40], 64)
    assert keep.shape == (3, 5, 64 * 16, 32)
    assert bool((keep[0] == 1).all())
    for j, rate in ((1, 0.1), (2, 0.2)):
        kept = keep[j].view(5, 64, 16, 32)[:, :40]
        assert kept.unique().tolist() == [0.0, torch.tensor(1 / (1 - rate)).item()]  # float32's 1 / (1 - rate)
        assert abs(float((kept == 0).double().mean()) - rate) < 0.01
    assert stack._keep(group, [0], [64], 64) is None


def test_a_tiny_recipe_zoo_rebuilds_its_networks(tiny_stz):
    manifest = json.loads((tiny_stz / "manifest.json").read_text())
    assert manifest["recipe"] == STZ and manifest["architecture"]["dim"] == 32
    assert manifest["choices"]["optimizer"] == list(transformer_zoo.STZ_OPTIMIZERS)
    data = TransformerZooDataset(tiny_stz, "train")
    images, labels = _mnist("test", TINY_STZ.test_size, "embedded", None)
    for i in range(len(data)):
        with torch.no_grad():
            logits = data.module(i).eval()(images)
        torch.testing.assert_close(torch.nn.functional.cross_entropy(logits, labels), data.tensors["test_loss"][i],
                                   rtol=1e-5, atol=1e-6)
    graphs = data.graphs
    assert len(graphs) == len(data) and graphs[0].edge_attr.shape[1] == 49
    with pytest.raises(ValueError, match="recipe='vit'"):
        TransformerZooSettings(recipe="vit")
    with pytest.raises(ValueError, match="batch_size=200: larger than the smallest training subset"):
        TransformerZooSettings(train_size=256, batch_size=200, recipe=STZ)


def test_the_manifest_and_zoo_report_give_the_accuracy_per_checkpoint_epoch(tiny_stz, tmp_path, capsys):
    """A finished sharded zoo records its test accuracy per checkpoint epoch, and zoo-report reads its shards."""
    data = {split: TransformerZooDataset(tiny_stz, split) for split in ("train", "val", "test")}
    accuracy = torch.cat([d.accuracy for d in data.values()]).double()
    epochs = torch.cat([d.tensors["epoch"] for d in data.values()])
    summary = json.loads((tiny_stz / "manifest.json").read_text())["accuracy"]
    assert list(summary) == ["1", "2"]
    for epoch, row in summary.items():
        values = accuracy[epochs == int(epoch)]
        assert row["networks"] == TINY_STZ.networks and row["diverged"] == 0
        assert row["min"] == round(float(values.min()), 4) and row["max"] == round(float(values.max()), 4)
        assert row["median"] == round(float(torch.quantile(values, 0.5)), 4)
    png = tmp_path / "accuracy.png"
    assert main(["zoo-report", str(tiny_stz), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| epoch | networks |") and f"| 2 | {TINY_STZ.networks} | 0 |" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
