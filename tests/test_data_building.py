"""Data is made only where asked: a mistyped ``--data.root`` is one line (exit 2) and creates nothing.

``fit`` fits missing INRs only for the embedded subset or with ``--data.build true``;
``validate``/``test``/``predict`` never build. The zoo data modules never train a zoo.
"""
from pathlib import Path

import pytest
import torch

from neuralgraph.cli import main

ROOT = Path(__file__).resolve().parents[1]
DILATION = ROOT / "configs" / "benchmarks" / "dilation" / "gmn_k4.yaml"


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_fit_refuses_a_missing_full_mnist_root_in_one_line_and_creates_nothing(workdir, capsys):
    missing = workdir / "no" / "such" / "dir"
    code, err = run_cli(["fit", "--config", DILATION, "--data.root", missing], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("neuralgraph fit: error: data.root: no such folder") and str(missing) in err
    assert f"neuralgraph make-inrs --out {missing} --source full" in err and "--data.build true" in err
    assert listing(workdir) == []


@pytest.mark.parametrize("verb", ["test", "validate", "predict"])
def test_reading_verbs_never_build_even_the_embedded_subset(workdir, capsys, verb):
    checkpoint = workdir / "model.ckpt"
    torch.save({"neuralgraph_task": {"task": "InrEditing"}, "hyper_parameters": {}}, checkpoint)
    missing = workdir / "typo"
    code, err = run_cli([verb, "--config", DILATION, "--data.root", missing, "--data.source", "embedded",
                         "--ckpt_path", checkpoint], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"data.root: no such folder {missing}; this command never fits INRs" in err
    assert listing(workdir) == ["model.ckpt"]

    code, err = run_cli([verb, "--config", DILATION, "--data.root", missing, "--data.build", "true",
                         "--ckpt_path", checkpoint], capsys)
    assert code == 2 and f"--data.build true: `{verb}` never builds data" in err
    assert listing(workdir) == ["model.ckpt"]


def test_the_data_module_names_the_unfinished_split_and_the_command_that_makes_it(tiny_inrs, tmp_path):
    from neuralgraph.training.datamodule import MnistInrDataModule

    # a folder holding train/val/test of the embedded subset: complete, so nothing is built or refused
    MnistInrDataModule(root=str(tiny_inrs), source="embedded", build=False).prepare_data()
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=r"data.root: .*empty holds no complete 'train' split; fitting 5 full-MNIST "
                                         r"INRs takes hours.*make-inrs --out .*empty --source full --limit 5`"):
        MnistInrDataModule(root=str(empty), limit_train=5).prepare_data()
    with pytest.raises(ValueError, match="this command never fits INRs"):
        MnistInrDataModule(root=str(empty), source="embedded", build=False).prepare_data()
    assert listing(tmp_path) == ["empty"]


@pytest.mark.parametrize("module", ["CnnZooDataModule", "TransformerZooDataModule"])
def test_zoo_data_modules_never_train_a_zoo(tmp_path, module):
    from neuralgraph.training.cnn_zoo_datamodule import CnnZooDataModule
    from neuralgraph.training.transformer_zoo_datamodule import TransformerZooDataModule

    data = {"CnnZooDataModule": CnnZooDataModule, "TransformerZooDataModule": TransformerZooDataModule}[module]
    with pytest.raises(ValueError, match="no manifest; is .*missing a dataset made by `neuralgraph make-"):
        data(root=str(tmp_path / "missing")).spec
    assert listing(tmp_path) == []
