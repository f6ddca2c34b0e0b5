"""Training through the LightningCLI path: every task, resumption after a kill, DDP, checkpoints, edit."""
import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
import torch
from conftest import render_atol
from safetensors.torch import load_file

from neuralgraph.graph import graph_to_blocks, mlp_to_graph, permute_mlp, random_hidden_permutation
from neuralgraph.training.cli import run_lightning_cli
from neuralgraph.training.datamodule import EpochSeededSampler
from neuralgraph.training.tasks import magnitude_prune_mask

TINY_MODEL = '{"hidden_dim": 8, "num_layers": 1}'
# TINY_MODEL's width as the budget: the task picks hidden_dim
BUDGET_MATCHED = ("--model.metanet_config", '{"num_layers": 1}', "--model.reference_hidden_dim", "8")


def fit_args(root, out, task="InrEditing", metanet="gmn", epochs=1, extra=()):
    return ["fit", "--model", f"neuralgraph.training.tasks.{task}", "--model.metanet", metanet,
            "--model.metanet_config", TINY_MODEL, "--data.root", str(root), "--data.batch_size", "8",
            "--data.limit_train", "32", "--data.limit_val", "16", "--data.limit_test", "16",
            "--trainer.max_epochs", str(epochs), "--trainer.default_root_dir", str(out),
            "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(out),
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false", *extra]


def cli_subprocess(args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "neuralgraph.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kwargs)


@pytest.mark.parametrize("task,metric", [
    ("InrEditing", "test/mse"),
    ("InrClassification", "test/accuracy"),
    ("WeightStatisticRegression", "test/r2"),
    ("EquivariantWeightPrediction", "test/accuracy"),
])
def test_each_task_fits_and_tests_at_the_best_checkpoint(tiny_inrs, tmp_path, task, metric, monkeypatch, device):
    monkeypatch.chdir((tmp_path / "cwd").mkdir() or tmp_path / "cwd")
    cli = run_lightning_cli(fit_args(tiny_inrs, tmp_path / "run", task, extra=("--trainer.accelerator", device.type)))
    assert not any((tmp_path / "cwd").iterdir())  # everything under the run's folder, nothing in the working dir
    metrics = cli.trainer.callback_metrics
    assert torch.isfinite(metrics[metric]) and torch.isfinite(cli.trainer.checkpoint_callback.best_model_score)
    assert cli.trainer.checkpoint_callback.best_model_path.endswith(".ckpt")
    encoder = cli.model.metanet.encoder  # statistics of the training INRs, set before the fit (InputStatistics)
    assert not torch.equal(encoder.edge_std, torch.ones_like(encoder.edge_std))
    if task == "InrEditing":
        assert (Path(cli.trainer.log_dir) / "editing_test.png").stat().st_size > 0
        assert (Path(cli.trainer.log_dir) / "editing_val.png").stat().st_size > 0


def test_oce_budget_matching_keeps_parameters_within_the_k1_budget(tiny_inrs, tmp_path):
    reference = run_lightning_cli(fit_args(tiny_inrs, tmp_path / "k1", extra=["--test_after_fit", "false"]))
    oce = run_lightning_cli(fit_args(tiny_inrs, tmp_path / "k4", extra=[
        "--model.k", "4", *BUDGET_MATCHED, "--test_after_fit", "false"]))
    count = lambda task: sum(p.numel() for p in task.parameters() if p.requires_grad)  # noqa: E731
    assert count(oce.model) <= count(reference.model)
    assert oce.model.decoder.k == 4 and oce.model.metanet.hidden_dim < reference.model.metanet.hidden_dim
    # the checkpoint stores the matched width; testing it with the config that asked for the match searches no more
    checkpoint = torch.load(oce.trainer.checkpoint_callback.best_model_path, weights_only=True)
    assert checkpoint["hyper_parameters"]["metanet_config"]["hidden_dim"] == oce.model.metanet.hidden_dim
    test_args = fit_args(tiny_inrs, tmp_path / "k4", extra=["--model.k", "4", *BUDGET_MATCHED, "--ckpt_path",
                                                           oce.trainer.checkpoint_callback.best_model_path])
    test_args[0] = "test"
    with mock.patch("neuralgraph.training.tasks.match_budget", side_effect=AssertionError("searched again")):
        tested = run_lightning_cli(test_args)
    assert tested.model.metanet.hidden_dim == oce.model.metanet.hidden_dim


def test_a_matched_width_is_stored_and_loads_without_a_search(tmp_path):
    import lightning

    from neuralgraph.training.tasks import InrEditing

    matched = InrEditing(metanet="gmn", metanet_config={"num_layers": 1}, reference_hidden_dim=64, k=8)
    assert matched.hparams.metanet_config == {"num_layers": 1, "hidden_dim": 56}
    assert InrEditing(metanet="gmn", metanet_config={"num_layers": 1}, reference_hidden_dim=64).metanet.hidden_dim == 64
    path = tmp_path / "matched.ckpt"
    torch.save({"state_dict": matched.state_dict(), "hyper_parameters": dict(matched.hparams),
                "pytorch-lightning_version": lightning.__version__,
                "neuralgraph_task": {"task": "InrEditing", "metanet": "gmn"}}, path)
    with mock.patch("neuralgraph.training.tasks.match_budget", side_effect=AssertionError("searched again")):
        loaded = InrEditing.load_from_checkpoint(path)
    assert loaded.metanet.hidden_dim == 56
    with pytest.raises(ValueError, match=r"^InrEditing reference_hidden_dim=64 with match_budget=True: give "):
        InrEditing(metanet="gmn", metanet_config={"num_layers": 1}, reference_hidden_dim=64, k=8, match_budget=True)


def logged(metrics_csv: Path, key: str) -> dict[int, float]:
    """``{epoch: value}`` of one column of a CSVLogger file."""
    with open(metrics_csv) as f:
        return {int(row["epoch"]): float(row[key]) for row in csv.DictReader(f) if row.get(key)}


def first_loadable_checkpoint(path: Path, process, timeout: float = 600) -> bool:
    """Wait until ``path`` holds a complete checkpoint (or the process ends)."""
    deadline = time.time() + timeout
    while process.poll() is None and time.time() < deadline:
        if path.exists():
            try:
                torch.load(path, weights_only=True)
                return True
            except Exception:  # still being written
                pass
        time.sleep(0.02)
    return False


def entry_point(*args: str, **kwargs) -> subprocess.Popen:
    """The installed ``neuralgraph`` command, as a user runs it."""
    command = Path(sys.executable).with_name("neuralgraph")
    assert command.is_file(), f"{command}: the entry point is not installed"
    return subprocess.Popen([str(command), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **kwargs)


def tiny_config(path: Path, root: Path, out: Path, epochs: int) -> Path:
    """A YAML config of a tiny InrEditing fit (what `fit_args` sets), logging CSV under ``out``."""
    path.write_text(f"""
model:
  class_path: neuralgraph.training.tasks.InrEditing
  init_args: {{metanet: gmn, metanet_config: {TINY_MODEL}}}
data: {{root: {root}, batch_size: 8, limit_train: 32, limit_val: 16, limit_test: 16}}
trainer:
  max_epochs: {epochs}
  default_root_dir: {out}
  logger: {{class_path: lightning.pytorch.loggers.CSVLogger, init_args: {{save_dir: {out}}}}}
  enable_progress_bar: false
  enable_model_summary: false
""")
    return path


KILL_TEST_EPOCHS = 10


@pytest.fixture(scope="module")
def uninterrupted_fit(tiny_inrs, tmp_path_factory) -> Path:
    """metrics.csv of a tiny fit run to the end, the reference of the kill-and-resume tests."""
    out = tmp_path_factory.mktemp("straight")
    run = entry_point("fit", "--config", str(tiny_config(out / "fit.yaml", tiny_inrs, out, KILL_TEST_EPOCHS)))
    assert run.wait(timeout=600) == 0, run.stdout.read()
    return out / "lightning_logs" / "version_0" / "metrics.csv"


def kill_after_first_checkpoint(config: Path, out: Path) -> int:
    """Start ``neuralgraph fit --config config``, SIGKILL it once ``last.ckpt`` is complete; its epoch."""
    victim = entry_point("fit", "--config", str(config), start_new_session=True)
    last = out / "checkpoints" / "last.ckpt"
    assert first_loadable_checkpoint(last, victim), "the run ended before writing a checkpoint"
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    saved_epoch = torch.load(last, weights_only=True)["epoch"]
    assert saved_epoch < KILL_TEST_EPOCHS - 1, "kill came too late to test resumption"
    return saved_epoch


def assert_resumed_like_uninterrupted(reference: Path, resumed: Path, saved_epoch: int) -> None:
    ref_val, res_val = logged(reference, "val/loss"), logged(resumed, "val/loss")
    assert sorted(res_val) == list(range(saved_epoch + 1, KILL_TEST_EPOCHS))  # the epochs continue
    assert [ref_val[e] for e in sorted(res_val)] == pytest.approx([res_val[e] for e in sorted(res_val)], rel=1e-6)
    ref_test, res_test = logged(reference, "test/mse"), logged(resumed, "test/mse")
    assert len(res_test) == 1 and list(ref_test.values()) == pytest.approx(list(res_test.values()), rel=1e-6)


def test_the_documented_command_resumes_a_killed_fit(tiny_inrs, tmp_path, uninterrupted_fit):
    """`neuralgraph fit --config C` killed, then `neuralgraph fit --config C --ckpt_path last` (docs/training.md)."""
    config = tiny_config(tmp_path / "fit.yaml", tiny_inrs, tmp_path, KILL_TEST_EPOCHS)
    saved_epoch = kill_after_first_checkpoint(config, tmp_path)
    resumed = entry_point("fit", "--config", str(config), "--ckpt_path", "last")
    output = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, output
    assert f"resuming from {tmp_path / 'checkpoints' / 'last.ckpt'}" in output
    assert_resumed_like_uninterrupted(uninterrupted_fit, tmp_path / "lightning_logs" / "version_1" / "metrics.csv",
                                      saved_epoch)


def test_a_killed_fit_resumes_from_an_explicit_checkpoint(tiny_inrs, tmp_path, uninterrupted_fit):
    config = tiny_config(tmp_path / "fit.yaml", tiny_inrs, tmp_path, KILL_TEST_EPOCHS)
    saved_epoch = kill_after_first_checkpoint(config, tmp_path)
    last = tmp_path / "checkpoints" / "last.ckpt"
    resumed = cli_subprocess(fit_args(tiny_inrs, tmp_path, epochs=KILL_TEST_EPOCHS, extra=["--ckpt_path", str(last)]))
    assert resumed.wait(timeout=600) == 0, resumed.stdout.read()
    assert_resumed_like_uninterrupted(uninterrupted_fit, tmp_path / "lightning_logs" / "version_1" / "metrics.csv",
                                      saved_epoch)


def test_validate_and_test_refuse_to_run_without_a_checkpoint(tiny_inrs, tmp_path, capsys):
    from neuralgraph.cli import main

    config = tiny_config(tmp_path / "fit.yaml", tiny_inrs, tmp_path, 1)
    message = "`{}` needs --ckpt_path: a checkpoint file, or 'last' for the newest last*.ckpt in " \
              f"{tmp_path.resolve() / 'checkpoints'}"
    run = entry_point("test", "--config", str(config))  # all the process prints: no warning, no traceback
    assert run.communicate(timeout=300)[0] == f"neuralgraph test: error: {message.format('test')}\n"
    assert run.returncode == 2
    assert main(["validate", "--config", str(config)]) == 2
    assert capsys.readouterr().err == f"neuralgraph validate: error: {message.format('validate')}\n"
    assert main(["test", "--config", str(config), "--ckpt_path", "last"]) == 2
    assert capsys.readouterr().err == f"neuralgraph test: error: --ckpt_path last: no last*.ckpt in " \
                                      f"{tmp_path.resolve() / 'checkpoints'}\n"


def test_ddp_on_two_cpu_processes(tiny_inrs, tmp_path):
    run = cli_subprocess(fit_args(tiny_inrs, tmp_path, extra=[
        "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu"]))
    output = run.communicate(timeout=600)[0]
    assert run.returncode == 0, output
    assert logged(next(tmp_path.glob("**/metrics.csv")), "test/mse")


def test_a_checkpoint_of_another_architecture_is_refused(tiny_inrs, tmp_path):
    gmn = run_lightning_cli(fit_args(tiny_inrs, tmp_path / "gmn", extra=["--test_after_fit", "false"]))
    checkpoint = gmn.trainer.checkpoint_callback.best_model_path
    test_args = fit_args(tiny_inrs, tmp_path / "ng", metanet="ng_gnn")
    test_args[0] = "test"
    with pytest.raises(ValueError, match="checkpoint has metanet='gmn', but the configuration asks for metanet='ng_gnn'"):
        run_lightning_cli(test_args + ["--ckpt_path", checkpoint])
    wider = fit_args(tiny_inrs, tmp_path / "wide")
    wider[wider.index(TINY_MODEL)] = '{"hidden_dim": 16, "num_layers": 1}'
    wider[0] = "test"
    with pytest.raises(ValueError, match="checkpoint has metanet_config="):
        run_lightning_cli(wider + ["--ckpt_path", checkpoint])
    classifier = fit_args(tiny_inrs, tmp_path / "cls", task="InrClassification")
    classifier[0] = "test"
    with pytest.raises(ValueError, match="holds a InrEditing checkpoint, but the configuration builds InrClassification"):
        run_lightning_cli(classifier + ["--ckpt_path", checkpoint])
    # the same check guards direct loading (LightningModule.load_from_checkpoint, `neuralgraph edit`)
    from neuralgraph.training.tasks import InrClassification
    with pytest.raises(ValueError, match="InrEditing. requested by the checkpoint"):
        InrClassification.load_from_checkpoint(checkpoint, weights_only=True)


def test_edit_and_predict_write_the_edited_networks(tiny_inrs, tmp_path, monkeypatch):
    from neuralgraph.commands.edit import load_inr
    from neuralgraph.inr import DWS_MNIST, render
    from neuralgraph.training.tasks import InrEditing

    monkeypatch.chdir(tiny_inrs.parent)  # a relative --data.root: the checkpoint stores it absolute
    cli = run_lightning_cli(fit_args(tiny_inrs.name, tmp_path, extra=["--model.k", "3", "--test_after_fit", "false"]))
    checkpoint = cli.trainer.checkpoint_callback.best_model_path
    png, exported = tmp_path / "edit.png", tmp_path / "edited.safetensors"
    run = cli_subprocess(["edit", "--ckpt", checkpoint, "--index", "2", "--out", str(png), "--export", str(exported)],
                         cwd=tmp_path)
    output = run.communicate(timeout=300)[0]
    assert run.returncode == 0, output
    assert png.stat().st_size > 0
    weights, biases = load_inr(exported)
    assert [w.shape[0] for w in weights] == [96, 96, 1]  # k=3 members of 2-32-32-1 merged into one network
    task = InrEditing.load_from_checkpoint(checkpoint, weights_only=True).eval()
    dataset_batch = cli.datamodule.batch("test", [2])
    with torch.no_grad():
        members_w, members_b = task.edited_networks(dataset_batch.graph)
        average = render([w.flatten(0, 1) for w in members_w], [b.flatten(0, 1) for b in members_b]).mean(0)
    merged = render(weights, biases, convention=DWS_MNIST.__class__(layout=(2, 96, 96, 1)))
    torch.testing.assert_close(merged, average, rtol=0, atol=render_atol(weights, biases))

    predict_args = fit_args(tiny_inrs, tmp_path / "predict", extra=["--model.k", "3", "--ckpt_path", checkpoint])
    predict_args[0] = "predict"
    predicted = run_lightning_cli(predict_args)
    outputs = load_file(str(Path(predicted.trainer.log_dir) / "predictions.safetensors"))
    assert outputs["members"].shape == (16, 3, 28, 28) and outputs["prediction"].shape == (16, 28, 28)
    assert outputs["index"].tolist() == list(range(16))
    torch.testing.assert_close(outputs["prediction"][2], average, rtol=0, atol=render_atol(weights, biases))


def test_checkpoint_of_a_foreign_file_gives_a_clear_error(tmp_path):
    bogus = tmp_path / "bogus.ckpt"
    torch.save({"state_dict": {}}, bogus)
    run = cli_subprocess(["edit", "--ckpt", str(bogus), "--index", "0", "--out", str(tmp_path / "x.png")])
    output = run.communicate(timeout=120)[0]
    assert run.returncode != 0 and f"{bogus}: not a neuralgraph checkpoint" in output


def test_a_checkpoint_matched_at_the_exact_width_loads_with_its_width_multiple(tmp_path):
    """Checkpoints written before matched widths were aligned to 8 (GMN 64 at k = 8: 63, now 56) store no
    ``budget_width_multiple``, and the reference width as ``hidden_dim`` with ``match_budget``: loading
    them names ``budget_width_multiple`` in one line, and ``budget_width_multiple=1`` rebuilds their width."""
    import lightning

    from neuralgraph.training.tasks import InrEditing

    config = {"hidden_dim": 64, "num_layers": 1}
    exact = InrEditing(metanet="gmn", metanet_config=config, k=8, match_budget=True, budget_width_multiple=1)
    hparams = {key: value for key, value in exact.hparams.items() if key != "budget_width_multiple"}
    old = tmp_path / "old.ckpt"
    torch.save({"state_dict": exact.state_dict(), "hyper_parameters": hparams,
                "pytorch-lightning_version": lightning.__version__,
                "neuralgraph_task": {"task": "InrEditing", "metanet": "gmn"}}, old)
    message = r"^checkpoint: its metanet has hidden_dim=63, but match_budget with budget_width_multiple=8 builds hidden_dim=56"
    with pytest.raises(ValueError, match=message) as error:
        InrEditing.load_from_checkpoint(old)
    assert "\n" not in str(error.value)
    loaded = InrEditing.load_from_checkpoint(old, budget_width_multiple=1)
    assert loaded.metanet.hidden_dim == 63
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), exact.state_dict().values()))


def test_prune_mask_keeps_the_largest_per_layer_and_is_equivariant():
    gen = torch.Generator().manual_seed(0)
    layout = (2, 6, 5, 1)
    weights = [torch.randn(3, layout[l + 1], layout[l], generator=gen, dtype=torch.float64) for l in range(3)]
    biases = [torch.randn(3, layout[l + 1], generator=gen, dtype=torch.float64) for l in range(3)]
    graph = mlp_to_graph(weights, biases)
    mask = magnitude_prune_mask(graph, sparsity=0.5)
    for l, w in enumerate(weights):
        for n in range(3):
            edges = (graph.edge_layer == l) & (graph.batch[graph.edge_index[1]] == n)
            kept = graph.edge_attr[edges, 0].abs()[mask[edges] == 1]
            dropped = graph.edge_attr[edges, 0].abs()[mask[edges] == 0]
            assert len(kept) == -(-w[n].numel() // 2) and kept.min() > dropped.max()
    perms = random_hidden_permutation(layout, gen)
    permuted = mlp_to_graph(*permute_mlp(weights, biases, perms))
    # the mask of the permuted network is the permuted mask (compared as per-layer matrices)
    def as_matrices(g, per_edge):
        return [w.squeeze(-1) for w in graph_to_blocks(g.clone().update({"edge_attr": per_edge.unsqueeze(-1)}))[0]]

    expected, _ = permute_mlp(as_matrices(graph, mask), biases, perms)
    found = as_matrices(permuted, magnitude_prune_mask(permuted, 0.5))
    assert all(torch.equal(a, b) for a, b in zip(found, expected))


def test_epoch_seeded_sampler_reshuffles_per_epoch_and_repeats_per_seed():
    a, b = EpochSeededSampler(50, seed=3), EpochSeededSampler(50, seed=3)
    first = list(a)
    a.set_epoch(1)
    assert sorted(first) == list(range(50)) and list(a) != first
    b.set_epoch(1)
    assert list(a) == list(b)
    assert list(EpochSeededSampler(5, seed=0, shuffle=False)) == [0, 1, 2, 3, 4]


CONFIGS_FOLDER = Path(__file__).resolve().parents[1] / "neuralgraph" / "configs"
DILATION = CONFIGS_FOLDER / "benchmarks" / "dilation"
CONFIGS = sorted(CONFIGS_FOLDER.glob("**/*.yaml"))


def dilation_configs() -> list[str]:
    from neuralgraph.bench.grids import dilation_grid, paper_grid

    return sorted({**dilation_grid(), **paper_grid()})


@pytest.mark.parametrize("name", dilation_configs())
def test_the_shipped_dilation_grid_is_the_registrys(name):
    """configs/benchmarks/dilation is what the registry's declared reference configurations give; a registered
    architecture without its files is skipped with the command that writes them."""
    from neuralgraph.bench.grids import dilation_grid, paper_grid

    path = DILATION / name
    if not path.is_file():
        pytest.skip(f"{path.relative_to(CONFIGS_FOLDER.parents[1])} not written yet: "
                    "python scripts/generate_dilation.py")
    assert path.read_text() == {**dilation_grid(), **paper_grid()}[name], "rerun python scripts/generate_dilation.py"


def test_every_shipped_dilation_config_is_of_a_registered_architecture():
    names = {str(c.relative_to(DILATION)) for c in DILATION.glob("**/*.yaml")}
    assert names <= set(dilation_configs()), sorted(names - set(dilation_configs()))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.relative_to(CONFIGS_FOLDER).as_posix())
def test_every_config_parses(config, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_lightning_cli(["fit", "--config", str(config), "--print_config"])
    assert exit_info.value.code in (0, None)
    assert "class_path: neuralgraph.training.tasks." in capsys.readouterr().out


def shipped_root_dir(config: Path):
    import yaml

    return (yaml.safe_load(config.read_text()).get("trainer") or {}).get("default_root_dir")


def test_every_shipped_config_has_its_own_checkpoint_folder():
    """`--ckpt_path last` looks in <default_root_dir>/checkpoints: a shared folder would resume another run."""
    roots = {config: shipped_root_dir(config) for config in CONFIGS}
    unset = [c for c, root in roots.items() if root is None]
    assert not unset, f"no trainer.default_root_dir in {unset}"
    named = [root for root in roots.values() if root is not None]
    assert len(named) == len(set(named)), sorted(r for r in named if named.count(r) > 1)


def test_the_configs_lie_in_examples_by_task_and_benchmarks_by_benchmark():
    """configs/examples/<task>/ runs the task class of its folder (InrClassification: inr_classification);
    configs/benchmarks/<benchmark>/ belongs to benchmarks/<benchmark>.py."""
    import re

    import yaml

    assert sorted(p.name for p in CONFIGS_FOLDER.iterdir()) == ["benchmarks", "examples"]
    for config in (CONFIGS_FOLDER / "examples").glob("**/*.yaml"):
        task = yaml.safe_load(config.read_text())["model"]["class_path"].rsplit(".", 1)[1]
        assert config.parent.parent.name == "examples", config
        assert re.sub(r"(?<!^)(?=[A-Z])", "_", task).lower() == config.parent.name, config
    scripts = {p.name for p in (CONFIGS_FOLDER.parents[1] / "benchmarks").iterdir()}
    assert {f"{p.name}.py" for p in (CONFIGS_FOLDER / "benchmarks").iterdir()} <= scripts


def test_two_configs_in_one_directory_do_not_see_each_others_last(tiny_inrs, tmp_path, monkeypatch, capsys):
    from neuralgraph.cli import main

    monkeypatch.chdir(tmp_path)
    first, second = (DILATION / f"gmn_k{k}.yaml" for k in (1, 2))
    small = ["--model.init_args.metanet_config", TINY_MODEL, "--data.root", str(tiny_inrs), "--data.batch_size", "8",
             "--data.limit_train", "16", "--data.limit_val", "8", "--data.limit_test", "8",
             "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    fit = run_lightning_cli(["fit", "--config", str(first), *small, "--trainer.max_epochs", "1",
                             "--test_after_fit", "false"])
    assert Path(fit.trainer.checkpoint_callback.last_model_path) == tmp_path / shipped_root_dir(first) / \
        "checkpoints" / "last.ckpt"
    assert main(["test", "--config", str(second), *small, "--ckpt_path", "last"]) == 2
    assert capsys.readouterr().err.endswith(f"no last*.ckpt in {tmp_path / shipped_root_dir(second) / 'checkpoints'}\n")


def test_input_statistics_without_a_data_module_is_a_clear_error(tiny_inrs, tmp_path):
    import lightning as L

    from neuralgraph.data import InrDataset
    from neuralgraph.training.tasks import InrEditing

    dataset = InrDataset(tiny_inrs, "train")
    loader = torch.utils.data.DataLoader(range(8), batch_size=8, collate_fn=dataset.batch)
    def trainer():
        return L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, default_root_dir=tmp_path,
                         enable_progress_bar=False, enable_model_summary=False)

    with pytest.raises(ValueError, match=r"InrEditing\(normalize_inputs=True\) needs a data module with "
                                         r"batch\(split, indices\) and size\(split\), got NoneType"):
        trainer().fit(InrEditing(metanet_config={"hidden_dim": 8, "num_layers": 1}), train_dataloaders=loader)
    plain = trainer()
    plain.fit(InrEditing(metanet_config={"hidden_dim": 8, "num_layers": 1}, normalize_inputs=False),
                train_dataloaders=loader, val_dataloaders=loader)  # plain loaders work without the statistics
    assert plain.global_step == 1
