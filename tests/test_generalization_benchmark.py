"""The generalization-prediction benchmark: its smoke protocol end to end (a preset zoo written, imported and
fitted), the runner's bookkeeping on stand-in fits, and the configs at the parameter budget."""
import json
import subprocess
from pathlib import Path

import pytest
import yaml

import fake_fits
from registry_skips import generated_config
from neuralgraph.bench import load_script, main
from neuralgraph.bench.widths import BUDGET_TOLERANCE
from neuralgraph.data.cnn_zoo import CnnZooDataset
from neuralgraph.nn import BASELINES, METANETS

ROOT = Path(__file__).resolve().parents[1]
bench = load_script(ROOT / "benchmarks" / "generalization.py")


@pytest.fixture(scope="module")
def smoke_zoo(tmp_path_factory) -> Path:
    """The smoke protocol's zoo and its imports (written once; the runs below verify and reuse them)."""
    zoo = tmp_path_factory.mktemp("generalization") / "zoo"
    bench.prepare_zoo(bench.PROTOCOLS["smoke"], zoo, {None, "tanh"})
    return zoo


def smoke(tmp_path, zoo, *extra):
    return main(bench.BENCHMARK, ["--protocol", "smoke", "--zoo", str(zoo), "--out", str(tmp_path / "runs"),
                                  "--results", str(tmp_path / "results"), *extra])


def test_smoke_protocol_records_tau_and_r2_and_a_rerun_skips_them(smoke_zoo, tmp_path, capsys):
    assert smoke(tmp_path, smoke_zoo, "--archs", "statnn", "scalegmn_tanh") == 0
    (raw,) = (tmp_path / "results").glob("generalization_smoke_*.json")
    runs = json.loads(raw.read_text())["runs"]
    assert [(r["arch"], r["seed"]) for r in runs] == [("statnn", 0), ("scalegmn_tanh", 0)]
    for run in runs:
        assert run["hidden_dim"] == 8 and run["parameters"] > 0 and run["epochs"] == 1
        assert -1 <= run["kendall_tau"] <= 1 or run["kendall_tau"] != run["kendall_tau"]  # NaN: a constant split
        assert run["r2"] <= 1
    assert runs[1]["settings"]["subset"] == "tanh" and runs[0]["settings"]["metanet"] == "statnn"
    table = raw.with_suffix(".md").read_text()
    assert "| statnn | " in table and "| 0.915 (StatNN) |" in table and "CIFAR10-GS" in table
    assert "| ng_t | not run yet | | 0.935 (NG-T) |" in table
    assert "| scalegmn (every network) | not run: equivariant to one activation's scaling group" in table
    tanh = CnnZooDataset(smoke_zoo.with_name("zoo-tanh"), "train")
    assert set(tanh.tensors["activation"].tolist()) == {1}  # the tanh networks alone (ACTIVATIONS index 1)
    assert "Not run yet (11 of the protocol's runs): gmn seed 0" in table and "probegen seed 0, probe seed 0" in table

    capsys.readouterr()
    assert smoke(tmp_path, smoke_zoo, "--archs", "statnn", "scalegmn_tanh") == 0
    assert capsys.readouterr().out.count("skipped") == 2
    assert json.loads(raw.read_text())["runs"] == runs


def fake_fit(calls, fail_at=None):
    """Stands in for the fit subprocess: a result whose tau and R^2 grow with the call's number."""
    return fake_fits.fake_fit(calls, lambda n: {
        "kendall_tau": 0.1 * n, "r2": 0.05 * n, "best_val_loss": 1.0, "parameters": 10, "hidden_dim": 8,
        "epochs": 1, "wall_s": 1.0, "resumed": False, "threads": 1, "peak_rss_mb": 1.0}, fail_at)


def test_a_killed_invocation_keeps_its_finished_runs_and_the_next_one_continues(smoke_zoo, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "run", fake_fit(calls, fail_at=3))
    selection = ("--archs", "gmn", "nft", "--seeds", "0", "1")
    with pytest.raises(subprocess.CalledProcessError):
        smoke(tmp_path, smoke_zoo, *selection)
    (raw,) = (tmp_path / "results").glob("generalization_smoke_*.json")
    assert [(r["arch"], r["seed"]) for r in json.loads(raw.read_text())["runs"]] == [("gmn", 0), ("gmn", 1)]
    assert "| gmn | 0.150 ± 0.071 (2) | 0.075 ± 0.035 (2) |" in raw.with_suffix(".md").read_text()
    root = calls[0][calls[0].index("--data.root") + 1]
    assert root == str(smoke_zoo.with_name("zoo-imported")) and "--data.batch_size" in calls[0]
    assert "--data.build" not in calls[0]  # the zoo's data module has no such option

    assert smoke(tmp_path, smoke_zoo, *selection) == 0 and len(calls) == 5  # the recorded runs were not rerun
    assert [(r["arch"], r["seed"]) for r in json.loads(raw.read_text())["runs"]][2:] == [("nft", 0), ("nft", 1)]
    assert smoke(tmp_path, smoke_zoo, *selection) == 0 and len(calls) == 5


def test_runs_on_a_zoo_with_other_bytes_never_join_the_table(smoke_zoo, tmp_path, monkeypatch):
    """The CNN zoo trained with ATen's AVX2 kernels has other bytes than with its AVX-512 ones (docs/datasets.md):
    a run records the imported zoo's data_sha256, and a table of another zoo, or of the runs recorded before the
    field (the Intel Xeon's zoo), refuses it."""
    calls = []
    monkeypatch.setattr(subprocess, "run", fake_fit(calls))
    assert smoke(tmp_path, smoke_zoo, "--archs", "gmn") == 0
    (raw,) = (tmp_path / "results").glob("generalization_smoke_*.json")
    (run,) = json.loads(raw.read_text())["runs"]
    sha = bench.zoo_sha256({None: smoke_zoo.with_name("zoo-imported")})
    assert run["settings"]["data_sha256"] == sha and f"data_sha256 {sha[:12]}" in raw.with_suffix(".md").read_text()
    assert Path(calls[0][calls[0].index("--run-one") + 1]).parent.parent.name == sha[:12]  # run folders kept apart

    del run["settings"]["data_sha256"]
    raw.write_text(json.dumps({**json.loads(raw.read_text()), "runs": [run]}))
    with pytest.raises(ValueError, match=rf"{raw}: its runs read other data \(the zoo built on an Intel Xeon .*\), "
                                         rf"not .* \(data_sha256 {sha[:12]}\)"):
        smoke(tmp_path, smoke_zoo, "--archs", "nft")
    assert len(calls) == 1


def test_a_recorded_run_made_with_other_settings_is_refused(smoke_zoo, tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "run", fake_fit([]))
    smoke(tmp_path, smoke_zoo, "--archs", "gmn")
    monkeypatch.setitem(bench.PROTOCOLS["smoke"], "trainer", {"max_epochs": 2})
    with pytest.raises(ValueError, match=r"gmn k=1 seed=0 was run with trainer=\{'max_epochs': 1\}"):
        smoke(tmp_path, smoke_zoo, "--archs", "gmn")


def test_systems_cover_every_metanet_once():
    ran = {bench.SYSTEMS[s][0] for s in bench.SYSTEMS} | set(bench.REFUSED)
    assert set(METANETS) <= ran and "statnn" in ran
    assert all(METANETS[name].scaling is not None for name in bench.REFUSED)
    assert {bench.SYSTEMS[f"{name}_tanh"][0] for name in bench.REFUSED} == set(bench.REFUSED)
    plan = bench.PROTOCOLS["cpu"]["plan"]
    assert plan[0] == (bench.CPU_ORDER, (0,)) and sorted(plan[0][0]) == sorted(bench.SYSTEMS)


@pytest.mark.parametrize("system", sorted(bench.SYSTEMS))
def test_every_config_is_its_system_at_the_gmn_budget(system):
    config = generated_config(bench.CONFIGS / f"{system}.yaml", "python benchmarks/generalization.py --write-configs")
    init_args = config["model"]["init_args"]
    metanet, _, subset = bench.SYSTEMS[system]
    assert init_args["metanet"] == metanet and init_args["metanet_config"] == bench.budget_config(system)
    assert config["trainer"]["max_epochs"] == bench.PROTOCOLS["cpu"]["trainer"]["max_epochs"]
    if system in bench.PROBING:  # the reference code's settings, not a parameter budget
        assert {k: init_args[k] for k in bench.PROBING_TASK} == bench.PROBING_TASK
        assert init_args["metanet_config"]["network"] == "cnn_zoo"
        return
    target = bench.reference_parameters()
    found = bench.model_parameters(metanet, init_args["metanet_config"], bench.subset_activations(subset))
    assert abs(found - target) <= METANETS.get(metanet, BASELINES.get(metanet)).budget_tolerance * target
