"""``make-cnn-zoo --preset small-cnn-zoo``: the Small CNN Zoo's recipe, written in its file format.

A tiny zoo (the embedded MNIST subset, few networks, small sizes) is written, imported with
``import-dataset small-cnn-zoo``, and checked against a forward written here in the released
zoo's own conventions (TensorFlow kernel layouts read by ``layout.csv``'s columns, Keras' CNN:
``tests/source_formats.keras_forward``), never with the preset's batched forward.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from neuralgraph.cli import main
from neuralgraph.data import small_cnn_zoo_preset as preset
from neuralgraph.data.cnn_zoo import CnnZooDataset, ZooNetwork, network_seed
from neuralgraph.data.mnist import load_digits
from source_formats import keras_forward

TINY = ["--networks", "3", "--shard-size", "2", "--epochs", "0", "1", "2", "--train-size", "200",
        "--test-size", "60", "--batch-size", "8", "--source", "embedded", "--threads", "1"]


def make(out: Path, *extra: str) -> int:
    return main(["make-cnn-zoo", "--preset", preset.PRESET, "--out", str(out), *TINY, *extra])


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}


def read_metrics(root: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(gzip.decompress((root / "metrics.csv.gz").read_bytes()).decode())))


def tf_layers(root: Path, row: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(kernel, bias)`` per layer of one ``weights.npy`` row, by ``layout.csv``'s columns and shapes."""
    parts = {}
    for entry in csv.DictReader((root / "layout.csv").read_text().splitlines()):
        shape = tuple(int(d) for d in entry["shape"].strip("()").split(",") if d.strip())
        parts[entry["varname"]] = row[int(entry["start_idx"]):int(entry["end_idx"])].reshape(shape)
    names = sorted({name.rsplit("/", 1)[0] for name in parts}, key=lambda n: list(parts).index(f"{n}/bias:0"))
    return [(parts[f"{n}/kernel:0"], parts[f"{n}/bias:0"]) for n in names]


def scaled_test_images(count: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` embedded MNIST test images in [-1, 1], NHWC (the zoo's preprocessing)."""
    digits = load_digits("test", "embedded")
    return (digits.images[:count].astype(np.float64) / 255 * 2 - 1)[..., None], digits.labels[:count].astype(np.int64)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("preset")
    assert make(root / "zoo") == 0
    assert main(["import-dataset", preset.PRESET, str(root / "zoo"), "--out", str(root / "imported"),
                 "--steps", "0", "1", "2"]) == 0
    return root / "zoo", root / "imported"


def test_written_zoo_is_the_released_format_and_its_metrics_are_its_weights(zoo):
    src, _ = zoo
    weights = np.load(src / "weights.npy")
    metrics = read_metrics(src)
    assert weights.dtype == np.float32 and weights.shape == (9, 4970) and len(metrics) == 9
    assert [(int(r["modeldir"][-5:]), int(r["step"])) for r in metrics] == [(n, s) for n in range(3) for s in (0, 1, 2)]
    images, labels = scaled_test_images(60)
    for row, record in zip(weights, metrics):
        layers = tf_layers(src, row)
        assert [k.shape for k, _ in layers] == [(3, 3, 1, 16), (3, 3, 16, 16), (3, 3, 16, 16), (16, 10)]
        logits = keras_forward(layers, images, record["config.activation"])
        accuracy = float((logits.argmax(1) == labels).mean())
        assert abs(accuracy - float(record["test_accuracy"])) <= 1 / 60 + 1e-9  # a near-tie may flip one image
        shifted = logits - logits.max(1, keepdims=True)
        cross_entropy = float(np.mean(np.log(np.exp(shifted).sum(1)) - shifted[np.arange(60), labels]))
        penalty = float(record["config.l2reg"]) * sum(float((k.astype(np.float64) ** 2).sum()) for k, _ in layers)
        assert float(record["test_loss"]) == pytest.approx(cross_entropy + penalty, rel=1e-4, abs=1e-5)
        assert 0 <= float(record["train_accuracy"]) <= 1
        if record["step"] == "0":  # the initialisation: zero biases, the w_init of the recorded hyperparameters
            assert all(not b.any() for _, b in layers)
            seed = int(record["config.random_seed"])
            start = preset.initial_parameters(preset.sample_hyperparameters(seed), seed)
            np.testing.assert_array_equal(row, preset.tf_row(start).numpy())
        else:
            assert any(b.any() for _, b in layers)  # trained


def test_imported_networks_compute_the_written_networks_logits(zoo):
    src, imported = zoo
    weights, metrics = np.load(src / "weights.npy"), read_metrics(src)
    images, _ = scaled_test_images(20)
    seen = 0
    for split in ("train", "val", "test"):
        data = CnnZooDataset(imported, split)
        for k, row in enumerate(data.tensors["row"].tolist()):
            activation = metrics[row]["config.activation"]
            network = ZooNetwork(activation=activation)
            network.load_state_dict({f"{name}.{kind}": (data.weights if kind == "weight" else data.biases)[j][k]
                                     for j, name in enumerate(("conv1", "conv2", "conv3", "linear"))
                                     for kind in ("weight", "bias")})
            with torch.no_grad():
                ours = network(torch.from_numpy(images).float().permute(0, 3, 1, 2)).double().numpy()
            np.testing.assert_allclose(ours, keras_forward(tf_layers(src, weights[row]), images, activation),
                                       atol=1e-4)
            assert float(data.accuracy[k]) == pytest.approx(float(metrics[row]["test_accuracy"]))
            seen += 1
    assert seen == 9


def test_interrupted_run_resumes_byte_identical_and_reruns_are_identical(tmp_path, monkeypatch, zoo):
    src, _ = zoo
    train_shard, calls = preset.train_shard, []

    def killed_after_first(*args, **kwargs):
        calls.append(args[0])
        if len(calls) > 1:
            raise KeyboardInterrupt  # killed while training the second part
        return train_shard(*args, **kwargs)

    monkeypatch.setattr(preset, "train_shard", killed_after_first)
    with pytest.raises(KeyboardInterrupt):
        make(tmp_path / "zoo")
    assert sorted(p.name for p in (tmp_path / "zoo").iterdir()) == ["manifest.json", "part-00000.safetensors"]
    monkeypatch.setattr(preset, "train_shard", train_shard)
    assert make(tmp_path / "zoo") == 0
    assert folder_bytes(tmp_path / "zoo") == folder_bytes(src)  # resumed = written at once, byte for byte
    before = folder_bytes(tmp_path / "zoo")
    assert make(tmp_path / "zoo") == 0  # a finished zoo: verified, nothing rewritten
    assert folder_bytes(tmp_path / "zoo") == before


def test_hyperparameters_are_deterministic_and_within_the_distribution():
    draws = [preset.sample_hyperparameters(network_seed(0, n)) for n in range(3000)]
    assert draws[:50] == [preset.sample_hyperparameters(network_seed(0, n)) for n in range(50)]
    assert draws[0] != preset.sample_hyperparameters(network_seed(1, 0))
    for key, choices in (("activation", preset.ACTIVATIONS), ("w_init", preset.W_INITS),
                         ("optimizer", preset.OPTIMIZERS), ("train_fraction", preset.TRAIN_FRACTIONS)):
        counts = {c: sum(d[key] == c for d in draws) for c in choices}
        assert set(d[key] for d in draws) == set(choices)
        assert min(counts.values()) > 0.7 * len(draws) / len(choices), (key, counts)  # uniform over the choices
    for key, (low, high) in preset.RANGES.items():
        values = np.array([d[key] for d in draws])
        assert low <= values.min() and values.max() <= high, key
        if key == "dropout":  # uniform
            assert abs(np.mean(values < (low + high) / 2) - 0.5) < 0.05
        else:  # log-uniform: half below the geometric midpoint
            assert abs(np.mean(values < math.sqrt(low * high)) - 0.5) < 0.05, key


@pytest.mark.parametrize("w_init", ["glorot_normal", "glorot_uniform", "he_normal", "orthogonal",
                                    "RandomNormal", "TruncatedNormal"])
def test_initialisation_has_keras_scale(w_init):
    hyper = {**preset.sample_hyperparameters(0), "w_init": w_init, "init_std": 0.05}
    weights = torch.cat([preset.initial_parameters(hyper, seed)["conv2.weight"].flatten() for seed in range(8)])
    fan_in = fan_out = 16 * 9
    expected = {"glorot_normal": math.sqrt(2 / (fan_in + fan_out)), "glorot_uniform": math.sqrt(2 / (fan_in + fan_out)),
                "he_normal": math.sqrt(2 / fan_in), "orthogonal": math.sqrt(1 / fan_in),  # orthonormal rows of 144
                "RandomNormal": 0.05, "TruncatedNormal": 0.05 * 0.8796256610342398}[w_init]
    assert float(weights.std()) == pytest.approx(expected, rel=0.05)
    if w_init in ("glorot_normal", "he_normal", "TruncatedNormal"):  # truncated at two standard deviations
        assert float(weights.abs().max()) <= 2 * expected / 0.8796256610342398 + 1e-6
    assert not any(preset.initial_parameters(hyper, 0)[f"{n}.bias"].any() for n in ("conv1", "conv2", "conv3", "linear"))


def one_line_error(capsys, argv: list[str], *needles: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def test_refusals_are_one_line(tmp_path, capsys, zoo):
    src, _ = zoo
    out = str(tmp_path / "zoo")
    base = ["make-cnn-zoo", "--preset", preset.PRESET, "--out", out, *TINY]
    one_line_error(capsys, base + ["--channels", "8"], "--channels 8")
    one_line_error(capsys, base + ["--worker-index", "0", "--num-workers", "2"], "--worker-index", "--num-workers")
    one_line_error(capsys, base + ["--merge"], "--merge")
    one_line_error(capsys, base + ["--batch-size", "32"], "PresetSettings.batch_size=32", "20 images")
    one_line_error(capsys, base + ["--train-size", "5000"], "PresetSettings.train_size=5000", "2000 images")
    one_line_error(capsys, base + ["--epochs", "2", "1"], "PresetSettings.checkpoint_epochs")
    # a folder of other settings, a changed part, a recorded file that went missing
    copy = tmp_path / "copy"
    copy.mkdir()
    for name, data in folder_bytes(src).items():
        (copy / name).write_bytes(data)
    again = ["make-cnn-zoo", "--preset", preset.PRESET, "--out", str(copy), *TINY]
    one_line_error(capsys, again[:-2] + ["--test-size", "50"], "manifest.json", "test_size")
    part = copy / "part-00001.safetensors"
    part.write_bytes(part.read_bytes()[:-1] + b" ")
    one_line_error(capsys, again, "part-00001.safetensors", "sha256")
    part.write_bytes((src / "part-00001.safetensors").read_bytes())
    (copy / "weights.npy").unlink()
    one_line_error(capsys, again, "weights.npy", "missing")
    manifest = json.loads((src / "manifest.json").read_text())
    assert manifest["preset"] == preset.PRESET and manifest["checkpoint_epochs"] == [0, 1, 2]


def test_the_manifest_and_zoo_report_give_the_accuracy_per_checkpoint_epoch(zoo, tmp_path, capsys):
    import json

    from neuralgraph.data.zoo_report import QUANTILES

    root, _ = zoo
    rows = read_metrics(root)
    summary = json.loads((root / "manifest.json").read_text())["accuracy"]
    assert list(summary) == ["0", "1", "2"]
    for epoch, stats in summary.items():
        accuracy = np.array([float(r["test_accuracy"]) for r in rows if int(float(r["step"])) == int(epoch)])
        assert stats["networks"] == 3 and stats["diverged"] == 0
        expected = np.quantile(accuracy, (0.0, *QUANTILES, 1.0)).round(4)
        assert [stats[k] for k in ("min", "q1", "median", "q3", "max")] == expected.tolist()

    png, table = tmp_path / "hist.png", tmp_path / "table.md"
    assert main(["zoo-report", str(root), "--png", str(png), "--markdown", str(table)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = table.read_text().splitlines()
    assert lines[0].startswith("| epoch | networks |") and len(lines) == 2 + 3 and lines[2].startswith("| 0 | 3 | 0 |")
    assert table.read_text() in capsys.readouterr().out
    assert main(["zoo-report", str(root), "--png", str(png)]) == 2  # an existing file needs --force
    assert "exists; pass --force" in capsys.readouterr().err
    assert main(["zoo-report", str(tmp_path)]) == 2
    assert "metrics.csv.gz: no such file" in capsys.readouterr().err
