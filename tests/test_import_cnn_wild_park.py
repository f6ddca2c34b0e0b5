"""``neuralgraph import-dataset cnn-wild-park``: neural-graphs' CNN Wild Park, read as its loader reads it.

The source is a small folder written in the Wild Park's layout by ``tests/source_formats.py``
(``write_cnn_wild_park``): runs of different depths, kernels 3/5/7, residuals between equal and
unequal widths and several activations. What the import yields is checked against an independent
float64 forward of neural-graphs' ``CNN`` (``park_forward``), not against the package's modules.
"""
from __future__ import annotations

import hashlib
import json

import pytest
import torch

from neuralgraph.cli import main
from neuralgraph.data.cnn_zoo import CnnZooDataset
from neuralgraph.data.formats import SourceError
from neuralgraph.data.formats.cnn_wild_park import EDGE_FEATURES, WildParkNetwork
from neuralgraph.data.importing import import_dataset
from neuralgraph.graph import GraphSpec, graph_to_module, module_to_graph
from source_formats import park_config, park_forward, save_json, write_cnn_wild_park

CONFIGS = [
    park_config([3, 4, 8], [3, 5], [-1, -1], ["relu", "tanh"]),
    park_config([3, 8, 4, 8], [7, 3, 5], [-1, -1, 0], ["tanh", "relu", "relu"]),  # a skip of equal widths
    park_config([3, 4, 8, 4, 4], [5, 3, 7, 3], [-1, -1, 0, 1], ["relu", "gelu", "tanh", "relu"]),  # skip, partial add
    park_config([3, 4, 4, 8, 8, 4], [3, 3, 5, 7, 3], [-1, -1, 0, 1, 2],
                ["sigmoid", "none", "leaky_relu", "relu", "tanh"]),  # three partial adds
]
SPLIT_OF_RUN = ["train", "train", "train", "train", "train", "val", "test", "test"]


def folder_hashes(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def park(tmp_path_factory):
    """The source folder, its split table and ``{relative path: (config, state)}``; eight runs, two
    checkpoints each."""
    root = tmp_path_factory.mktemp("park")
    networks = write_cnn_wild_park(root, [CONFIGS[n % len(CONFIGS)] for n in range(len(SPLIT_OF_RUN))], SPLIT_OF_RUN)
    return root, json.loads((root / "cnn_park_splits.json").read_text()), networks


def copy_source(park, tmp_path):
    """A copy of the source folder that a test may damage."""
    root, table, _ = park
    copy = tmp_path / "park"
    for path in table["train"]["path"] + table["val"]["path"] + table["test"]["path"]:
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        (copy / path).write_bytes((root / path).read_bytes())
    (copy / "cnn_park_splits.json").write_text(json.dumps(table))
    return copy


def test_imported_networks_compute_the_source_logits_and_keep_its_split(park, tmp_path):
    root, table, networks = park
    import_dataset("cnn-wild-park", root, tmp_path / "out", shard_size=3, progress=False)
    images = torch.randn(2, 3, 9, 9, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for split, listed in table.items():
        data = CnnZooDataset(tmp_path / "out", split)
        assert len(data) == len(listed["path"])
        assert data.accuracy.tolist() == torch.tensor(listed["score"], dtype=torch.float32).tolist()
        assert data.tensors["epoch"].tolist() == listed["step"]
        for k, path in enumerate(listed["path"]):
            config, state = networks[path]
            architecture = data.networks.architecture(k)
            assert [list(getattr(architecture, key)) for key in ("channels", "kernel_size", "residual", "activation")] \
                == [config[key] for key in ("channels", "kernel_size", "residual", "activation")]
            graph = data.batch([k]).graph
            assert graph.edge_attr.shape[1] == EDGE_FEATURES
            module = graph_to_module(graph, WildParkNetwork(architecture)).double()
            with torch.no_grad():
                logits, reference = module(images), park_forward(state, config, images)
            # both in float64 from the same float32 weights: only the order of the float64 sums
            # differs, each of at most 7 * 7 * 8 products (a few hundred units of 2**-53 relative)
            tolerance = 1e3 * torch.finfo(torch.float64).eps * float(reference.abs().max())
            torch.testing.assert_close(logits, reference, rtol=0, atol=tolerance)


def test_the_imported_graph_is_the_graph_module_to_graph_reads(park, tmp_path):
    """Residuals as skips (equal widths) or shortcuts holding the shared-channel 1x1 kernel (unequal
    widths), activations per layer: the graph the fx walk of ``WildParkNetwork`` records."""
    root, table, networks = park
    import_dataset("cnn-wild-park", root, tmp_path / "out", progress=False)
    data = CnnZooDataset(tmp_path / "out", "train")
    kinds = set()
    for k, path in enumerate(table["train"]["path"]):
        config, state = networks[path]
        source = WildParkNetwork(data.networks.architecture(k))
        source.load_state_dict(state, strict=False)  # the shortcuts keep their shared-channel kernels
        expected, graph = module_to_graph(source), data.networks.graph(k)
        width = expected.edge_attr.shape[1]
        assert torch.equal(graph.edge_attr[:, :width], expected.edge_attr)
        assert not graph.edge_attr[:, width:].any()
        for field in ("x", "edge_index", "activation", "node_layer", "edge_layer"):
            assert torch.equal(graph[field], expected[field]), field
        assert torch.equal(graph.edge_kind, expected.edge_kind) if "edge_kind" in expected else "edge_kind" not in graph
        kinds |= set(graph.edge_kind.tolist()) if "edge_kind" in graph else {0}
    assert kinds == {0, 1, 2}  # weights, skips and shortcuts all occur


def test_a_batch_holds_networks_of_mixed_layouts(park, tmp_path):
    root, _, _ = park
    import_dataset("cnn-wild-park", root, tmp_path / "out", progress=False)
    data = CnnZooDataset(tmp_path / "out", "train")
    batch = data.batch(range(len(data)))
    spec = GraphSpec.of(batch.graph)
    assert batch.blocks is None and batch.graph.num_graphs == len(data)
    assert len(spec.layouts) == len(CONFIGS) and spec.edge_features == EDGE_FEATURES
    assert spec.skip_edges and spec.varying_activations


def test_the_import_is_byte_identical_on_rerun_and_resumes_a_killed_run(park, tmp_path):
    root, _, _ = park
    out = tmp_path / "out"
    import_dataset("cnn-wild-park", root, out, shard_size=3, progress=False)
    first = folder_hashes(out)
    import_dataset("cnn-wild-park", root, out, shard_size=3, progress=False)
    assert folder_hashes(out) == first
    # a kill after writing a shard but before recording it: the record and the rename are lost
    manifest = json.loads((out / "manifest.json").read_text())
    lost = manifest["splits"]["train"]["shards"].pop()
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / lost["file"]).rename(out / (lost["file"] + ".tmp"))
    import_dataset("cnn-wild-park", root, out, shard_size=3, progress=False)
    assert folder_hashes(out) == first
    with pytest.raises(ValueError, match="shard_size"):
        import_dataset("cnn-wild-park", root, out, shard_size=2, progress=False)


class Unpicklable:
    """Any class: a weights-only load must refuse to build it."""


def _set_nan(checkpoint):
    checkpoint["model"]["layers.0.weight"][0, 0, 1, 1] = float("nan")


@pytest.mark.parametrize("damage,message", [
    (lambda c: c.update({"extra": Unpicklable()}), r"refused: holds a [\w.]*Unpicklable object, which a weights-only load refuses"),
    (lambda c: c["model"].pop("layers.1.bias"), r"key 'model.layers.1.bias' is missing"),
    (lambda c: c["model"].update({"fc.weight": torch.zeros(10, 5)}),
     r"key 'model.fc.weight' has shape \(10, 5\), its config gives \(10, \d+\)"),
    (_set_nan, r"key 'model.layers.0.weight' has non-finite values"),
    (lambda c: c["config"].pop("residual"), r"key 'config.residual' is missing"),
    (lambda c: c["config"]["activation"].__setitem__(0, "swish"), r"key 'config.activation\[0\]' is 'swish'"),
    (lambda c: c.pop("model"), r"key 'model' is missing"),
    (lambda c: c["last_result"].update({"test/acc": 0.99}), r"key 'last_result.test/acc' is 0.99, but .*json gives"),
])
def test_a_bad_checkpoint_is_named_with_its_key_and_nothing_is_half_written(park, tmp_path, damage, message):
    src = copy_source(park, tmp_path)
    victim = src / park[1]["train"]["path"][-1]
    checkpoint = torch.load(victim, weights_only=True)
    damage(checkpoint)
    torch.save(checkpoint, victim)
    with pytest.raises(SourceError, match=message) as error:
        import_dataset("cnn-wild-park", src, tmp_path / "out", shard_size=100, progress=False)
    assert str(error.value).startswith(f"{victim}: ") and "\n" not in str(error.value)
    assert not list((tmp_path / "out").glob("*.tmp")) and not list((tmp_path / "out").glob("*.safetensors"))


def test_a_bad_checkpoint_is_one_line_and_exit_2_from_the_command(park, tmp_path, capsys):
    src = copy_source(park, tmp_path)
    victim = src / park[1]["val"]["path"][0]
    checkpoint = torch.load(victim, weights_only=True)
    checkpoint["model"]["fc.bias"] = torch.zeros(3)
    torch.save(checkpoint, victim)
    code = main(["import-dataset", "cnn-wild-park", str(src), "--out", str(tmp_path / "out")])
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar of the shards before it
    assert code == 2
    assert last.startswith(f"neuralgraph import-dataset: error: {victim}: key 'model.fc.bias' has shape (3,)")


def test_a_split_file_naming_an_absent_file_is_one_line_and_exit_2(park, tmp_path, capsys):
    root, table, _ = park
    broken = json.loads(json.dumps(table))
    broken["test"]["path"][1] = "cifar10_zooV2/NN_tune_trainable_99999/checkpoint_000010/checkpoint.pt"
    splits = save_json(tmp_path / "splits.json", broken)
    code = main(["import-dataset", "cnn-wild-park", str(root), "--out", str(tmp_path / "out"), "--splits", str(splits)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert f"splits.json: lists {broken['test']['path'][1]} ('test.path[1]'), which is not a file" in err
    assert not (tmp_path / "out").exists()


def test_an_imported_park_trains_generalization_prediction_with_neuralgraph_fit(park, tmp_path):
    from neuralgraph.training.cli import run_lightning_cli

    root, _, _ = park
    import_dataset("cnn-wild-park", root, tmp_path / "park", progress=False)
    cli = run_lightning_cli([
        "fit", "--model", "neuralgraph.training.tasks.GeneralizationPrediction", "--model.metanet", "ng_gnn",
        "--model.metanet_config", '{"hidden_dim": 8, "num_layers": 1}', "--data",
        "neuralgraph.training.cnn_zoo_datamodule.CnnZooDataModule", "--data.root", str(tmp_path / "park"),
        "--data.batch_size", "4", "--trainer.max_epochs", "1", "--trainer.default_root_dir", str(tmp_path / "run"),
        "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false"])
    spec = cli.model.graph_spec
    assert spec.skip_edges and spec.varying_activations and len(spec.layouts) > 1
    assert torch.isfinite(cli.trainer.callback_metrics["test/kendall_tau"])
