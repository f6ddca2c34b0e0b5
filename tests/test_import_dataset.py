"""``neuralgraph import-dataset``: the released formats, read as their public loaders read them.

Sources are small folders written in each format by ``tests/source_formats.py``; what the
import yields is checked against independent forwards of each source's convention (DWSNets'
'xy' grid and +0.5 offset, NFN's 'ij' grid with no offset, Keras' 'valid' stride-2 CNN), not
against the package's own render.
"""
from __future__ import annotations

import hashlib
import json
import random

import numpy as np
import pytest
import torch

from neuralgraph.cli import main
from neuralgraph.data.cnn_zoo import CnnZooDataset, ZooNetwork
from neuralgraph.data.formats import SourceError, small_cnn_zoo
from neuralgraph.data.importing import import_dataset
from neuralgraph.graph import graph_to_module
from source_formats import keras_forward, write_small_cnn_zoo


def folder_hashes(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


# -- Small CNN Zoo -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def zoo_source(tmp_path_factory):
    root = tmp_path_factory.mktemp("zoo_source")
    return root, write_small_cnn_zoo(root, networks=24)


def nfn_rows(rows: int, order_file, steps) -> dict[str, list[int]]:
    """NFN's ZooDataset split, written out: order by the file read header-less, filter the step,
    second half test, first half shuffled by random.Random(0) and cut 80/20."""
    order = [int(line) for line in order_file.read_text().split()]
    keep = [r for r in order if steps[r % len(steps)] == 86]
    half = int(0.5 * len(keep))
    trainval = list(range(half))
    random.Random(0).shuffle(trainval)
    cut = int(0.8 * len(trainval))
    return {"train": [keep[i] for i in trainval[:cut]], "val": [keep[i] for i in trainval[cut:]],
            "test": keep[half:]}


def test_small_cnn_zoo_imports_nfns_split_and_keras_logits(zoo_source, tmp_path):
    src, params = zoo_source
    out = tmp_path / "zoo"
    import_dataset("small-cnn-zoo", src, out, splits_file=src / "zoo_split.csv", shard_size=3, progress=False)
    expected = nfn_rows(len(params), src / "zoo_split.csv", steps=(0, 86))
    images = np.random.default_rng(0).uniform(0, 1, (2, 28, 28, 1)).astype(np.float32)
    for split, rows in expected.items():
        data = CnnZooDataset(out, split)
        assert data.tensors["row"].tolist() == rows
        assert (data.tensors["epoch"] == 86).all()
        for k in (0, len(rows) - 1):
            layers, activation = params[rows[k]]
            graph = data.batch([k]).graph
            module = graph_to_module(graph, ZooNetwork(16, activation))
            with torch.no_grad():
                logits = module(torch.from_numpy(images).permute(0, 3, 1, 2)).double().numpy()
            reference = keras_forward(layers, images, activation)
            # float32 sums of at most 145 products of O(1) terms per layer
            np.testing.assert_allclose(logits, reference, rtol=0, atol=1e-4)


def test_the_order_files_first_line_is_data_as_nfn_reads_it_or_a_header(zoo_source):
    src, params = zoo_source
    every_step = (0, 86)
    as_nfn = small_cnn_zoo.scan(src, src / "zoo_split.csv", steps=every_step)
    skipped = small_cnn_zoo.scan(src, src / "zoo_split.csv", steps=every_step, order_header="header")
    rows = lambda source: np.concatenate([source.splits[s] for s in ("train", "val", "test")])
    assert sorted(rows(skipped).tolist()) == list(range(len(params)))
    assert sorted(rows(as_nfn).tolist()) == sorted([0, *range(len(params))])  # NFN sees row 0 twice
    assert isinstance(as_nfn.weights, np.memmap)  # never loaded whole


def test_split_by_network_keeps_each_networks_checkpoints_in_one_split(zoo_source, tmp_path):
    """With one step the split by network is NFN's row split; with every step, each network's rows
    land in one split, the networks split as NFN splits rows (second half test), and the CLI option
    is recorded in the import's settings."""
    src, params = zoo_source
    one = {"splits_file": src / "zoo_split.csv", "order_header": "header"}
    by_row, by_network = (small_cnn_zoo.scan(src, **one, split_by=unit) for unit in ("row", "network"))
    assert all(np.array_equal(by_row.splits[s], by_network.splits[s]) for s in ("train", "val", "test"))
    every = small_cnn_zoo.scan(src, steps=(0, 86), split_by="network")
    networks = {s: set(every.metrics["modeldir"][rows]) for s, rows in every.splits.items()}
    assert not (networks["train"] & networks["val"]) and not (networks["train"] | networks["val"]) & networks["test"]
    for split, rows in every.splits.items():
        assert len(rows) == 2 * len(networks[split]), split  # both checkpoints of each network
    order = list(dict.fromkeys(every.metrics["modeldir"].tolist()))
    assert networks["test"] == set(order[len(order) // 2:])
    with pytest.raises(SourceError, match="split_by='rows'"):
        small_cnn_zoo.scan(src, split_by="rows")
    out = tmp_path / "zoo"
    assert main(["import-dataset", "small-cnn-zoo", str(src), "--out", str(out), "--steps", "0", "86",
                 "--split-by", "network"]) == 0
    assert CnnZooDataset(out, "test").tensors["row"].tolist() == every.splits["test"].tolist()


def test_zoo_import_is_byte_identical_on_rerun_and_resumes_a_killed_run(zoo_source, tmp_path):
    src, _ = zoo_source
    out = tmp_path / "zoo"
    import_dataset("small-cnn-zoo", src, out, shard_size=2, progress=False)
    first = folder_hashes(out)
    import_dataset("small-cnn-zoo", src, out, shard_size=2, progress=False)
    assert folder_hashes(out) == first
    # a kill after writing a shard but before recording it: the record and the rename are lost
    manifest = json.loads((out / "manifest.json").read_text())
    lost = manifest["splits"]["train"]["shards"].pop()
    (out / "manifest.json").write_text(json.dumps(manifest))
    (out / lost["file"]).rename(out / (lost["file"] + ".tmp"))
    import_dataset("small-cnn-zoo", src, out, shard_size=2, progress=False)
    assert folder_hashes(out) == first


def test_zoo_activation_filter_keeps_those_networks(zoo_source, tmp_path):
    src, params = zoo_source
    import_dataset("small-cnn-zoo", src, tmp_path / "relu", activations=["relu"], progress=False)
    for split in ("train", "val", "test"):
        rows = CnnZooDataset(tmp_path / "relu", split).tensors["row"].tolist()
        assert rows and all(params[r][1] == "relu" for r in rows)


def test_zoo_errors_name_the_file_and_field(zoo_source, tmp_path):
    src, _ = zoo_source
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("weights.npy", "layout.csv", "metrics.csv.gz"):
        (bad / name).write_bytes((src / name).read_bytes())
    weights = np.load(bad / "weights.npy")
    weights[3, 7] = np.nan
    np.save(bad / "weights.npy", weights)
    with pytest.raises(SourceError, match=r"weights.npy: row 3 has non-finite values"):
        import_dataset("small-cnn-zoo", bad, tmp_path / "out", steps=(0, 86), progress=False)
    (bad / "layout.csv").write_text((src / "layout.csv").read_text().replace("bias:0", "beta:0", 1))
    with pytest.raises(SourceError, match=r"layout.csv: line 2: varname .* neither a kernel:0 nor a bias:0"):
        import_dataset("small-cnn-zoo", bad, tmp_path / "out2", progress=False)


def test_the_command_reports_a_bad_source_in_one_line(tmp_path, capsys):
    assert main(["import-dataset", "small-cnn-zoo", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("neuralgraph import-dataset: error:") and "weights.npy" in err and "\n" not in err


# -- INR sets ------------------------------------------------------------------------------------
from conftest import render_atol  # noqa: E402

from neuralgraph.data.inr_dataset import InrDataset  # noqa: E402
from neuralgraph.data.mnist import load_subset  # noqa: E402
from neuralgraph.inr import FitConfig, SirenConvention, fit_inrs, render  # noqa: E402
from source_formats import (  # noqa: E402
    dws_forward,
    dws_to_nfn,
    nfn_forward,
    save_json,
    write_dws_inrs,
    write_nfn_sirens,
)


@pytest.fixture(scope="module")
def fitted_digits():
    """INRs (DWS convention) of six embedded training digits and two test digits: (split, label, index, w, b)."""
    inrs = []
    for split, count in (("train", 6), ("test", 2)):
        digits = load_subset(split)
        images = torch.from_numpy(digits.images[:count]).float() / 255
        result = fit_inrs(images, list(range(count)), SirenConvention(init="siren"), FitConfig(steps=300, lr=1e-3))
        for n in range(count):
            inrs.append((split, int(digits.labels[n]), int(digits.indices[n]),
                         [w[n] for w in result.weights], [b[n] for b in result.biases]))
    return inrs


def dws_split_file(src, inrs, tmp_path):
    table = write_dws_inrs(src, inrs)
    table["val"] = {"path": table["train"]["path"][4:], "label": table["train"]["label"][4:]}
    table["train"] = {"path": table["train"]["path"][:4], "label": table["train"]["label"][:4]}
    return save_json(tmp_path / "mnist_splits.json", table)


def test_dws_inrs_import_renders_as_dwsnets_and_carries_its_digits(fitted_digits, tmp_path):
    src = tmp_path / "written_elsewhere"
    splits_file = dws_split_file(src, fitted_digits, tmp_path)
    moved = src.rename(tmp_path / "dws")  # the split file's absolute paths are now another machine's
    out = tmp_path / "out"
    import_dataset("dws-inrs", moved, out, splits_file=splits_file, images="embedded", shard_size=3, progress=False)
    expected = {"train": fitted_digits[:4], "val": fitted_digits[4:6], "test": fitted_digits[6:]}
    for split, inrs in expected.items():
        data = InrDataset(out, split)
        assert data.convention.grid == "xy" and data.convention.output_offset == 0.5
        assert data.labels.tolist() == [label for _, label, *_ in inrs]
        assert data.mnist_indices.tolist() == [index for _, _, index, *_ in inrs]
        digits = load_subset(inrs[0][0])
        position = {int(i): k for k, i in enumerate(digits.indices)}
        for n, (_, _, index, weights, biases) in enumerate(inrs):
            assert torch.equal(data.images[n], torch.from_numpy(digits.images[position[index]]).float() / 255)
            ours = render([w[n] for w in data.weights], [b[n] for b in data.biases], 28, data.convention)
            torch.testing.assert_close(ours.double(), dws_forward(weights, biases), rtol=0,
                                       atol=render_atol(weights, biases))
        assert (data.psnrs > 20).all()
    first = folder_hashes(out)
    import_dataset("dws-inrs", moved, out, splits_file=splits_file, images="embedded", shard_size=3, progress=False)
    assert folder_hashes(out) == first


def test_dws_inrs_without_a_split_file_split_by_their_folders(fitted_digits, tmp_path):
    write_dws_inrs(tmp_path / "dws", fitted_digits)
    import_dataset("dws-inrs", tmp_path / "dws", tmp_path / "out", images="none", progress=False)
    test = InrDataset(tmp_path / "out", "test")
    assert test.mnist_indices.tolist() == sorted(i for s, _, i, *_ in fitted_digits if s == "test")
    assert test.images is None and test.psnrs is None
    trained = [InrDataset(tmp_path / "out", s).mnist_indices.tolist() for s in ("train", "val")
               if s in json.loads((tmp_path / "out" / "manifest.json").read_text())["splits"]]
    assert sorted(sum(trained, [])) == sorted(i for s, _, i, *_ in fitted_digits if s == "train")


def test_fashion_mnist_files_carry_their_label(fitted_digits, tmp_path):
    table = write_dws_inrs(tmp_path / "fmnist", fitted_digits, fashion=True)
    splits = save_json(tmp_path / "fmnist_splits.json", {s: table[s]["path"] for s in ("train", "test")})
    import_dataset("dws-inrs", tmp_path / "fmnist", tmp_path / "out", splits_file=splits, images="none", progress=False)
    data = InrDataset(tmp_path / "out", "train")
    assert data.labels.tolist() == [label for s, label, *_ in fitted_digits if s == "train"]
    assert data.batch([0, 1]).image is None


def test_nfn_sirens_render_as_nfn_does_and_leave_augmented_folders_to_the_option(fitted_digits, tmp_path):
    converted = [(label, *dws_to_nfn(w, b)) for _, label, _, w, b in fitted_digits]
    write_nfn_sirens(tmp_path / "nfn", converted)
    write_nfn_sirens(tmp_path / "nfn", [(label, [2 * x for x in w], b) for label, w, b in converted[:5]],
                     prefix="randinit_smaller_aug0")
    out = tmp_path / "out"
    import_dataset("nfn-sirens", tmp_path / "nfn", out, images="none", split_points=(5, 6), progress=False)
    sizes = {s: len(InrDataset(out, s)) for s in ("train", "val", "test")}
    assert sizes == {"train": 5, "val": 1, "test": 2}  # the aug0 folder is not the base set
    for split, first in (("train", 0), ("val", 5), ("test", 6)):
        data = InrDataset(out, split)
        assert data.convention.grid == "ij" and data.convention.output_scale == 0.5
        for n in range(len(data)):
            label, weights, biases = converted[first + n]
            assert int(data.labels[n]) == label
            ours = render([w[n] for w in data.weights], [b[n] for b in data.biases], 28, data.convention)
            torch.testing.assert_close(ours.double(), nfn_forward(weights, biases), rtol=0,
                                       atol=render_atol(weights, biases))
            # the same image as the DWS INR it was converted from: the two conventions agree
            _, _, _, w_dws, b_dws = fitted_digits[first + n]
            torch.testing.assert_close(ours.double(), dws_forward(w_dws, b_dws), rtol=0, atol=4 * render_atol(w_dws, b_dws))
    augmented = tmp_path / "augmented"
    import_dataset("nfn-sirens", tmp_path / "nfn", augmented, images="none", split_points=(5, 6), augmented=1,
                   progress=False)
    train = InrDataset(augmented, "train")
    assert len(train) == 10 and torch.equal(train.weights[0][5:], 2 * train.weights[0][:5])


def test_a_wrong_convention_is_caught_by_the_digits_it_should_render(fitted_digits, tmp_path):
    transposed = [(s, label, i, *dws_to_nfn(w, b)) for s, label, i, w, b in fitted_digits]
    splits_file = dws_split_file(tmp_path / "dws", transposed, tmp_path)
    with pytest.raises(SourceError, match=r"median .* dB PSNR"):
        import_dataset("dws-inrs", tmp_path / "dws", tmp_path / "out", splits_file=splits_file, images="embedded",
                       progress=False)
    assert not (tmp_path / "out").exists()  # a failed first run leaves nothing behind
    # so the retry its message suggests goes through
    manifest = import_dataset("dws-inrs", tmp_path / "dws", tmp_path / "out", splits_file=splits_file, images="none",
                              progress=False)
    assert manifest["imported"]["images"] == "none"


class Unpicklable:
    """Any class: a weights-only load must refuse to build it."""


@pytest.mark.parametrize("damage,message", [
    (lambda s: s.pop("seq.2.bias"), r"key 'seq.2.bias' is missing"),
    (lambda s: s.update({"seq.1.weight": torch.zeros(32, 31)}), r"seq.1.weight has shape \(32, 31\)"),
    (lambda s: s["seq.0.bias"].__setitem__(3, float("nan")), r"key 'seq.0.bias' has non-finite values"),
    (lambda s: s.update({"extra": Unpicklable()}), r"refused: holds a [\w.]*Unpicklable object, which a weights-only load refuses"),
])
def test_a_bad_inr_file_is_named_with_its_key_and_nothing_is_half_written(fitted_digits, tmp_path, damage, message):
    splits_file = dws_split_file(tmp_path / "dws", fitted_digits, tmp_path)
    victim = sorted((tmp_path / "dws").glob("*/checkpoints/model_final.pth"))[-1]
    state = torch.load(victim, weights_only=True)
    damage(state)
    torch.save(state, victim)
    with pytest.raises(SourceError, match=message) as error:
        import_dataset("dws-inrs", tmp_path / "dws", tmp_path / "out", splits_file=splits_file, images="none",
                       shard_size=100, progress=False)
    assert str(victim) in str(error.value)
    assert "\x1b" not in str(error.value) and "weights_only=False" not in str(error.value)
    assert not (tmp_path / "out").exists()


def test_a_split_file_naming_an_absent_file_is_one_line_and_exit_2(fitted_digits, tmp_path, capsys):
    table = write_dws_inrs(tmp_path / "dws", fitted_digits)
    table["train"]["path"][0] = "/nowhere/mnist_png_training_9_99999/checkpoints/model_final.pth"
    splits = save_json(tmp_path / "splits.json", table)
    code = main(["import-dataset", "dws-inrs", str(tmp_path / "dws"), "--out", str(tmp_path / "out"), "--splits",
                 str(splits), "--images", "none"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "splits.json: lists /nowhere/mnist_png_training_9_99999" in err


@pytest.mark.parametrize("fmt", ["dws-inrs", "nfn-sirens"])
def test_an_imported_inr_set_trains_with_neuralgraph_fit(fitted_digits, tmp_path, fmt):
    from neuralgraph.training.cli import run_lightning_cli

    if fmt == "dws-inrs":
        options = {"splits_file": dws_split_file(tmp_path / "src", fitted_digits, tmp_path)}
    else:
        write_nfn_sirens(tmp_path / "src", [(label, *dws_to_nfn(w, b)) for _, label, _, w, b in fitted_digits])
        options = {"split_points": (4, 6)}
    import_dataset(fmt, tmp_path / "src", tmp_path / "data", images="none", progress=False, **options)
    cli = run_lightning_cli([
        "fit", "--model", "neuralgraph.training.tasks.InrClassification", "--model.metanet", "gmn",
        "--model.metanet_config", '{"hidden_dim": 8, "num_layers": 1}', "--data.root", str(tmp_path / "data"),
        "--data.batch_size", "4", "--trainer.max_epochs", "1", "--trainer.default_root_dir", str(tmp_path / "run"),
        "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false"])
    assert torch.isfinite(cli.trainer.callback_metrics["test/accuracy"])
    assert cli.model.graph_spec.convention["grid"] == ("xy" if fmt == "dws-inrs" else "ij")


def test_an_imported_zoo_trains_generalization_prediction_with_neuralgraph_fit(zoo_source, tmp_path):
    from neuralgraph.training.cli import run_lightning_cli

    src, _ = zoo_source
    import_dataset("small-cnn-zoo", src, tmp_path / "zoo", steps=(0, 86), progress=False)
    cli = run_lightning_cli([
        "fit", "--model", "neuralgraph.training.tasks.GeneralizationPrediction", "--model.metanet", "ng_gnn",
        "--model.metanet_config", '{"hidden_dim": 8, "num_layers": 1}', "--data",
        "neuralgraph.training.cnn_zoo_datamodule.CnnZooDataModule", "--data.root", str(tmp_path / "zoo"),
        "--data.batch_size", "8", "--trainer.max_epochs", "1", "--trainer.default_root_dir", str(tmp_path / "run"),
        "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
        "--trainer.enable_model_summary", "false"])
    assert torch.isfinite(cli.trainer.callback_metrics["test/kendall_tau"])


def test_the_dilation_benchmarks_data_module_reads_an_imported_folder_as_it_is(fitted_digits, tmp_path):
    """benchmarks/dilation.py passes preset=dws-released and --data.root: an imported set is used, never refitted."""
    from neuralgraph.training.datamodule import MnistInrDataModule

    splits_file = dws_split_file(tmp_path / "dws", fitted_digits, tmp_path)
    import_dataset("dws-inrs", tmp_path / "dws", tmp_path / "out", splits_file=splits_file, images="embedded",
                   progress=False)
    data = MnistInrDataModule(root=str(tmp_path / "out"), preset="dws-released", batch_size=2)
    spec = data.spec
    assert spec.convention["grid"] == "xy" and data.batch("val", [0, 1]).image.shape == (2, 28, 28)
