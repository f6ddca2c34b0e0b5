"""The INR classification benchmark: its smoke protocol end to end, and the runner's bookkeeping on stand-in fits."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import fake_fits
from registry_skips import generated_config
from neuralgraph.bench import load_script, main
from neuralgraph.bench.machine import machine_name
from neuralgraph.bench.widths import REFERENCE
from neuralgraph.nn import METANETS

ROOT = Path(__file__).resolve().parents[1]
bench = load_script(ROOT / "benchmarks" / "inr_classification.py")


def benchmark(tmp_path, data_root, *extra):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "inr_classification.py"), "--protocol", "smoke",
                           "--data-root", str(data_root), "--out", str(tmp_path / "runs"),
                           "--results", str(tmp_path / "results"), *extra],
                          capture_output=True, text=True, timeout=600)


def test_smoke_protocol_records_accuracies_and_a_rerun_skips_them(tiny_inrs, tmp_path):
    run = benchmark(tmp_path, tiny_inrs, "--archs", "dws", "nfn_np", "probegen")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (raw,) = (tmp_path / "results").glob("inr_classification_smoke_*.json")
    runs = json.loads(raw.read_text())["runs"]
    assert [(r["arch"], r["seed"]) for r in runs] == [("probegen", 0), ("dws", 0), ("nfn_np", 0)]
    assert all(0 <= r["test_accuracy"] <= 1 and r["parameters"] > 0 and r["flops_per_prediction"] > 0 for r in runs)
    assert all(r["hidden_dim"] == 8 for r in runs)  # smoke's width overrides every config, probing's too
    # every run carries its per-epoch metrics: smoke's one epoch, training and validation
    assert all(r["history"]["epoch"] == [0] and 0 <= r["history"]["val/accuracy"][0] <= 1
               and r["history"]["train/loss"][0] > 0 for r in runs)
    table = raw.with_suffix(".md").read_text()
    assert "| dws | " in table and "| 85.71 (DWS) | 67.06 (DWS) |" in table
    assert "| ng_gnn | not run yet | 91.40 (NG-GNN); 94.7 (NG-GNN-64) | 68.00 (NG-GNN); 74.2 (NG-GNN-64) |" in table
    assert "Not run yet (8 of the protocol's runs): probe seed 0, gmn seed 0, nft seed 0" in table  # slow ones last
    assert "Protocol: 64/32/32 train/val/test INRs (all: 55,000/5,000/10,000), 1 epoch(s), batch 32, no augmentation." in table
    curves = raw.with_name(raw.stem + "_curves.png")
    if importlib.util.find_spec("matplotlib") is None:
        assert not curves.exists() and "not written: matplotlib is not installed" in run.stderr
    else:
        assert curves.read_bytes().startswith(b"\x89PNG") and f"]({curves.name})" in table

    again = benchmark(tmp_path, tiny_inrs, "--archs", "dws", "nfn_np", "probegen")
    assert again.returncode == 0 and again.stdout.count("skipped") == 3
    assert json.loads(raw.read_text())["runs"] == runs

    # a run recorded before the FLOPs count existed gets it from its settings, the count its fit made
    record = json.loads(raw.read_text())
    for run_record in record["runs"][1:]:
        del run_record["flops_per_prediction"]
    raw.write_text(json.dumps(record))
    counted = benchmark(tmp_path, tiny_inrs, "--count-flops")
    assert counted.returncode == 0, counted.stdout[-3000:] + counted.stderr[-3000:]
    assert "dws seed 0: " in counted.stdout and "probegen seed 0: " not in counted.stdout
    assert json.loads(raw.read_text())["runs"] == runs


def fake_fit(calls, fail_at=None):
    """Stands in for the fit subprocess: a result whose accuracy grows with the call's number."""
    return fake_fits.fake_fit(calls, lambda n: {
        "test_accuracy": 0.1 * n, "best_val_loss": 1.0, "parameters": 10, "hidden_dim": 8, "epochs": 1,
        "wall_s": 1.0, "resumed": False, "peak_rss_mb": 1.0, "peak_cuda_mb": None, "device": "cpu"}, fail_at)


def smoke(tmp_path, *extra):
    return main(bench.BENCHMARK, ["--protocol", "smoke", "--archs", "gmn", "dws", "--seeds", "0", "1", "--data-root",
                                  str(tmp_path), "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results"),
                                  *extra])


def test_a_killed_invocation_keeps_its_finished_runs_and_the_next_one_continues(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "run", fake_fit(calls, fail_at=3))
    with pytest.raises(subprocess.CalledProcessError):
        smoke(tmp_path)
    (raw,) = (tmp_path / "results").glob("inr_classification_smoke_*.json")
    assert [(r["arch"], r["seed"]) for r in json.loads(raw.read_text())["runs"]] == [("gmn", 0), ("gmn", 1)]
    assert "| gmn | 15.00 ± 7.07 (2) |" in raw.with_suffix(".md").read_text()

    assert smoke(tmp_path) == 0 and len(calls) == 5  # the recorded runs were not rerun
    assert calls[-1][calls[-1].index("--data.build") + 1] == "true"  # the INRs are fitted on first use
    assert [(r["arch"], r["seed"]) for r in json.loads(raw.read_text())["runs"]][2:] == [("dws", 0), ("dws", 1)]
    assert smoke(tmp_path) == 0 and len(calls) == 5


def test_invocations_side_by_side_keep_each_others_runs(tmp_path, monkeypatch):
    """Another invocation records dws seed 1 while this one fits gmn seed 0: this one's writes keep that run
    and it does not fit it again."""
    calls = []
    fit = fake_fit(calls)
    other = {"arch": "dws", "k": 1, "seed": 1, "settings": bench.BENCHMARK.run_settings(bench.PROTOCOLS["smoke"], "dws", 1),
             "test_accuracy": 0.75, "best_val_loss": 1.0, "parameters": 10, "hidden_dim": 8, "epochs": 1, "wall_s": 1.0,
             "resumed": False, "peak_rss_mb": 1.0, "peak_cuda_mb": None, "device": "cpu", "threads": 1}

    def fit_while_another_records(command, *args, **kwargs):
        result = fit(command, *args, **kwargs)
        if len(calls) == 1:
            raw = tmp_path / "results" / f"inr_classification_smoke_{machine_name()}.json"
            raw.write_text(json.dumps({"protocol": "smoke", "runs": [other]}))
        return result

    monkeypatch.setattr(subprocess, "run", fit_while_another_records)
    smoke(tmp_path)
    (raw,) = (tmp_path / "results").glob("inr_classification_smoke_*.json")
    recorded = {(r["arch"], r["seed"]): r["test_accuracy"] for r in json.loads(raw.read_text())["runs"]}
    assert set(recorded) == {("gmn", 0), ("gmn", 1), ("dws", 0), ("dws", 1)} and recorded[("dws", 1)] == 0.75
    assert len(calls) == 3  # gmn 0, gmn 1, dws 0: dws 1 is the other invocation's
    assert "| dws | 52.50 ± 31.82 (2) |" in raw.with_suffix(".md").read_text()


def test_a_recorded_run_made_with_other_settings_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "run", fake_fit([]))
    smoke(tmp_path)
    monkeypatch.setitem(bench.PROTOCOLS["smoke"], "trainer", {"max_epochs": 2})
    with pytest.raises(ValueError, match=r"gmn k=1 seed=0 was run with trainer=\{'max_epochs': 1\}"):
        smoke(tmp_path)


@pytest.mark.parametrize("arch", sorted(bench.PROBING))
def test_probing_configs_are_the_reference_settings_of_the_examples(arch):
    """The benchmark's probing configs are the example configs' reference settings (ProbeGen's INR scripts)."""
    config = generated_config(bench.CONFIGS / f"{arch}.yaml", "python benchmarks/inr_classification.py --write-configs")
    example = yaml.safe_load((ROOT / "configs" / "examples" / "inr_classification" / f"{arch}.yaml").read_text())
    assert config["model"]["init_args"] == example["model"]["init_args"]
    assert config["trainer"]["max_epochs"] == example["trainer"]["max_epochs"] == bench.PROBING_EPOCHS
    full = bench.PROTOCOLS["full"]
    assert bench.BENCHMARK.run_settings(full, arch)["trainer"] == {"max_epochs": bench.PROBING_EPOCHS}
    assert bench.BENCHMARK.run_settings(full, "gmn")["trainer"] == {"max_epochs": 150}


def test_cpu_large_gives_each_system_its_epochs_on_every_inr():
    protocol = bench.PROTOCOLS["cpu-large"]
    assert bench.DATA.folder(ROOT, "cpu-large") == ROOT / "data" / "inrs" == bench.DATA.folder(ROOT, "probing-full")
    assert bench.DATA.folder(ROOT, "cpu") == ROOT / "data" / "inrs-cpu" == bench.DATA.folder(ROOT, "cpu-augmented")
    for system, epochs in bench.CPU_LARGE_EPOCHS.items():
        settings = bench.BENCHMARK.run_settings(protocol, system)
        assert settings["trainer"] == {"max_epochs": epochs} and settings["data"]["limit_train"] is None


@pytest.mark.parametrize("arch", sorted(METANETS))
def test_every_config_is_its_architecture_at_the_gmn_budget(arch):
    config = generated_config(bench.CONFIGS / f"{arch}.yaml", "python benchmarks/inr_classification.py --write-configs")
    init_args = config["model"]["init_args"]
    assert init_args["metanet"] == arch and init_args["metanet_config"] == bench.budget_config(arch)
    target = bench.classifier_parameters(*REFERENCE)
    assert abs(bench.classifier_parameters(arch, init_args["metanet_config"]) - target) <= METANETS[arch].budget_tolerance * target


def test_cpu_protocol_runs_every_architecture_with_seed_zero_first():
    plan = bench.PROTOCOLS["cpu"]["plan"]
    assert plan[0] == (bench.ORDER, (0,)) and sorted(bench.ORDER) == sorted(bench.SYSTEMS) and bench.PROTOCOLS["cpu"]["data"]["preset"] == "dws-released"
