"""Morphology edits, the make-inrs dataset (splits, resume after SIGKILL, bad input) and InrDataset."""
import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.ndimage
import torch
from conftest import render_atol
from hypothesis import given, settings
from hypothesis import strategies as st

from neuralgraph.data import DatasetError, GenerationSettings, InrDataset, make_inrs, split_digits
from neuralgraph.data.generate import VAL_SIZE, val_indices
from neuralgraph.graph import graph_to_mlp
from neuralgraph.inr import FitConfig, SirenConvention, render
from neuralgraph.morphology import EDITS, dilation, erosion, gradient

SMALL = GenerationSettings(fit=FitConfig(steps=6), source="embedded", shard_size=2)
CLI = [sys.executable, "-m", "neuralgraph.cli", "make-inrs", "--source", "embedded", "--split", "train",
       "--limit", "5", "--shard-size", "2", "--steps", "15", "--threads", "1"]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(1, 12), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_morphology_equals_scipy(batch, height, width, seed):
    images = torch.rand(batch, height, width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    for ours, theirs in ((dilation, scipy.ndimage.grey_dilation), (erosion, scipy.ndimage.grey_erosion)):
        expected = np.stack([theirs(im, size=(3, 3), mode="nearest") for im in images.numpy()])
        assert np.array_equal(ours(images).numpy(), expected)
    assert torch.equal(gradient(images), dilation(images) - erosion(images))
    assert set(EDITS) == {"dilation", "erosion", "gradient"}


def test_morphology_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"\[B, H, W\]"):
        dilation(torch.rand(28, 28))
    with pytest.raises(ValueError, match="odd"):
        dilation(torch.rand(1, 28, 28), size=2)


def test_splits_partition_mnist_and_limit_takes_prefixes():
    val = val_indices(0)
    assert len(val) == VAL_SIZE and len(np.unique(val)) == VAL_SIZE
    train, valid = split_digits("train", "embedded", 0), split_digits("val", "embedded", 0)
    assert not set(train.indices) & set(valid.indices) and set(valid.indices) <= set(val)
    assert len(train) + len(valid) == 2000
    assert np.array_equal(split_digits("train", "embedded", 0, limit=7).indices, train.indices[:7])


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("inrs")
    make_inrs(root, ("train", "test"), limit=3, settings=SMALL, progress=False)
    return root


def test_dataset_items_and_its_one_batch_path(small_dataset):
    data = InrDataset(small_dataset, "train", convention=SMALL.convention)
    assert len(data) == 3 and data.weights[1].shape == (3, 32, 32)
    item = data[1]
    digits = split_digits("train", "embedded", 0, limit=3)
    assert torch.equal(item["image"], torch.from_numpy(digits.images[1]).float() / 255)
    assert item["label"] == digits.labels[1] and item["mnist_index"] == digits.indices[1]
    batch = data.batch([2, 0])
    weights, biases = graph_to_mlp(batch.graph)
    assert all(torch.equal(a, b[[2, 0]]) for a, b in zip(weights + biases, data.weights + data.biases))
    assert batch.index.tolist() == [2, 0] and batch.size == 2
    assert torch.equal(batch.image, data.images[[2, 0]]) and torch.equal(batch.label, data.labels[[2, 0]])

    # augmentation permutes hidden neurons: other weights, the same functions, images and labels
    torch.manual_seed(0)
    permuted = data.batch([2, 0], permute=True)
    permuted_weights, permuted_biases = graph_to_mlp(permuted.graph)
    assert not torch.equal(permuted_weights[1], weights[1])
    torch.testing.assert_close(render(permuted_weights, permuted_biases), render(weights, biases), rtol=0,
                               atol=render_atol(weights, biases))
    assert torch.equal(permuted.image, batch.image) and torch.equal(permuted.label, batch.label)


def test_the_batch_types_are_metanet_batches():
    """``InrBatch`` and ``ZooBatch`` have every field of the protocol the tasks type their batches against."""
    from neuralgraph.data.cnn_zoo import ZooBatch
    from neuralgraph.data.inr_dataset import InrBatch
    from neuralgraph.graph import MetanetBatch

    fields = {name for name, value in vars(MetanetBatch).items() if isinstance(value, property)}
    assert fields == {"graph", "blocks", "facts", "index", "size"}
    for batch_type in (InrBatch, ZooBatch):
        assert fields <= set(dir(batch_type)), batch_type.__name__


def test_small_dataset_is_a_prefix_of_a_larger_one(small_dataset, tmp_path):
    make_inrs(tmp_path, ("train",), limit=5, settings=SMALL, progress=False)
    small, large = InrDataset(small_dataset, "train"), InrDataset(tmp_path, "train")
    for a, b in zip(small.weights + small.biases + [small.psnrs], large.weights + large.biases + [large.psnrs]):
        assert torch.equal(a, b[:3])


def files_of(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


@pytest.mark.slow
def test_killed_run_resumes_to_identical_bytes(tmp_path):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    subprocess.run(CLI + ["--out", str(reference)], check=True, capture_output=True)
    process = subprocess.Popen(CLI + ["--out", str(resumed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (resumed / "train-00000.safetensors").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert (resumed / "train-00000.safetensors").exists() and not (resumed / "train-00002.safetensors").exists()
    subprocess.run(CLI + ["--out", str(resumed)], check=True, capture_output=True)
    assert files_of(resumed) == files_of(reference)


def corrupt_copy(source: Path, target: Path) -> Path:
    target.mkdir()
    for name, data in files_of(source).items():
        (target / name).write_bytes(data)
    return target


def test_sha_mismatch_is_reported_by_name(small_dataset, tmp_path):
    root = corrupt_copy(small_dataset, tmp_path / "d")
    shard = root / "train-00001.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="train-00001.safetensors: sha256"):
        InrDataset(root, "train")
    with pytest.raises(DatasetError, match="train-00001.safetensors: sha256"):
        make_inrs(root, ("train",), limit=3, settings=SMALL, progress=False)


def test_truncated_shard_is_reported_by_name(small_dataset, tmp_path):
    root = corrupt_copy(small_dataset, tmp_path / "d")
    shard = root / "test-00000.safetensors"
    shard.write_bytes(shard.read_bytes()[:100])
    manifest = json.loads((root / "manifest.json").read_text())
    for record in manifest["splits"]["test"]["shards"]:
        if record["file"] == shard.name:
            record["sha256"] = __import__("hashlib").sha256(shard.read_bytes()).hexdigest()
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match="test-00000.safetensors: not a readable safetensors"):
        InrDataset(root, "test")


def test_other_convention_is_refused(small_dataset, tmp_path):
    other = SirenConvention(init="siren")
    with pytest.raises(DatasetError, match="manifest.json: init is 'dws'.*'siren'"):
        InrDataset(small_dataset, "train", convention=other)
    root = corrupt_copy(small_dataset, tmp_path / "d")
    with pytest.raises(DatasetError, match="manifest.json: layout"):
        make_inrs(root, ("train",), limit=3, progress=False,
                  settings=GenerationSettings(SirenConvention(layout=(2, 16, 1)), SMALL.fit, source="embedded",
                                              shard_size=2))
    with pytest.raises(DatasetError, match="limit 3"):
        make_inrs(root, ("train",), limit=4, settings=SMALL, progress=False)


def test_missing_manifest_split_or_shard(small_dataset, tmp_path):
    with pytest.raises(DatasetError, match="no manifest"):
        InrDataset(tmp_path, "train")
    with pytest.raises(DatasetError, match="no split 'val'"):
        InrDataset(small_dataset, "val")
    root = corrupt_copy(small_dataset, tmp_path / "d")
    os.remove(root / "train-00000.safetensors")
    with pytest.raises(DatasetError, match="train-00000.safetensors: shard listed in the manifest is missing"):
        InrDataset(root, "train")


def test_presets_set_the_recipe_and_a_named_preset_checks_the_folder(small_dataset, tmp_path):
    from neuralgraph.inr import DEFAULT_PRESET, PRESETS
    from neuralgraph.training.datamodule import MnistInrDataModule

    run = subprocess.run(CLI + ["--out", str(tmp_path / "a")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    fit = json.loads((tmp_path / "a" / "manifest.json").read_text())["fit"]
    assert fit["lr"] == PRESETS[DEFAULT_PRESET].fit.lr and fit["steps"] == 15  # --steps overrides the preset
    released = PRESETS["dws-released"].fit.steps
    with pytest.raises(DatasetError, match=f"manifest.json: steps is 6 in the manifest, but this run uses {released}"):
        MnistInrDataModule(root=str(small_dataset), source="embedded", preset="dws-released").prepare_data()
    with pytest.raises(ValueError, match="INR preset 'dws': expected one of"):
        MnistInrDataModule(root=str(tmp_path / "b"), preset="dws").prepare_data()


def test_a_folder_without_a_manifest_is_never_written_into(small_dataset, tmp_path):
    from neuralgraph.training.datamodule import MnistInrDataModule

    root = corrupt_copy(small_dataset, tmp_path / "d")
    os.remove(root / "manifest.json")
    before = files_of(root)
    with pytest.raises(DatasetError, match=r"d: holds 4 files \(test-00000.safetensors, .*\) but no manifest.json; "
                                           r"refusing to write into it"):
        make_inrs(root, ("train",), limit=3, settings=SMALL, progress=False)
    with pytest.raises(DatasetError, match="but no manifest.json; refusing"):  # `fit` builds missing splits
        MnistInrDataModule(root=str(root), source="embedded").prepare_data()
    assert files_of(root) == before


def test_a_shard_the_manifest_does_not_list_is_never_overwritten(small_dataset, tmp_path):
    root = corrupt_copy(small_dataset, tmp_path / "d")
    (root / "val-00000.safetensors").write_bytes(b"someone else's shard")
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"].pop()  # train-00001 is on disk but no longer listed
    (root / "manifest.json").write_text(json.dumps(manifest))
    before = files_of(root)
    for split, name in (("train", "train-00001"), ("val", "val-00000")):
        with pytest.raises(DatasetError, match=rf"{name}.safetensors: not listed in .*manifest.json; refusing to "
                                               "overwrite it"):
            make_inrs(root, (split,), limit=3, settings=SMALL, progress=False)
    assert files_of(root) == before  # the manifest too: nothing is written before every shard is checked


def test_a_kill_between_recording_and_renaming_a_shard_is_finished(small_dataset, tmp_path):
    root = corrupt_copy(small_dataset, tmp_path / "d")
    before = files_of(root)
    os.rename(root / "train-00001.safetensors", root / "train-00001.safetensors.tmp")
    with pytest.raises(DatasetError, match="train-00001.safetensors: shard listed in the manifest is missing "
                                           r"\(an interrupted make-inrs: rerun it to finish\)"):
        InrDataset(root, "train")
    make_inrs(root, ("train",), limit=3, settings=SMALL, progress=False)
    assert files_of(root) == before


def test_files_are_written_with_the_umask(tmp_path):
    previous = os.umask(0o027)
    try:
        make_inrs(tmp_path / "d", ("train",), limit=1, settings=SMALL, progress=False)
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "d").iterdir()}
    assert modes == {"manifest.json": 0o640, "train-00000.safetensors": 0o640}


def test_a_nan_in_a_shard_with_a_valid_sha256_is_reported_with_file_and_index(small_dataset, tmp_path, capsys):
    from safetensors.torch import load_file, save

    from neuralgraph.cli import main

    root = corrupt_copy(small_dataset, tmp_path / "d")
    shard = root / "train-00001.safetensors"  # INRs 2 (and 3 with limit 4) of split train
    tensors = load_file(str(shard))
    tensors["layer2.weight"][0, 3, 4] = float("nan")
    shard.write_bytes(save(tensors))
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"][1]["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    (root / "manifest.json").write_text(json.dumps(manifest))
    mnist_index = int(tensors["mnist_index"][0])
    message = (f"{shard}: INR 0 of the shard (index 2 of split 'train', MNIST index {mnist_index}) has non-finite "
               "values in layer2.weight")
    with pytest.raises(DatasetError, match=re.escape(message)):
        InrDataset(root, "train")
    for command in ("inr-stats", "audit-gp"):
        assert main([command, str(root)]) == 2
        assert capsys.readouterr().err == f"neuralgraph {command}: error: {message}\n"
