"""The benchmark harness: end to end on its smoke protocol (every row of the paper's table at k = 1; OCE
k > 1 trains in tests/test_training.py), the runner's bookkeeping on stand-in fits, and the tables of the
committed results."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fake_fits
from neuralgraph.bench import Report, load_script, main, runner
from neuralgraph.bench.widths import REFERENCE, inr_spec, matched_width

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
dilation = load_script(BENCHMARKS / "dilation.py")


@pytest.mark.slow
def test_dilation_smoke_protocol_writes_results_for_every_architecture(tiny_inrs, tmp_path):
    results = tmp_path / "results"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dilation.py"), "--protocol", "smoke",
                          "--k", "1", "--data-root", str(tiny_inrs), "--out", str(tmp_path / "runs"),
                          "--results", str(results)],
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (raw,) = results.glob("dilation_smoke_*.json")
    runs = json.loads(raw.read_text())["runs"]
    assert {(r["arch"], r["k"]) for r in runs} == {(row, 1) for row in dilation.PAPER_ROWS}
    assert all(r["test_mse"] > 0 and r["parameters"] > 0 for r in runs)
    table = next(results.glob("dilation_smoke_*.md")).read_text()
    assert "published (full protocol) | OCE GMN k=8 | 8 | 1.06" in table and "measured (smoke" in table


def fake_fit(calls, fail_at=None):
    """Stands in for the fit subprocess: a dilation result whose MSE grows with the call's number."""
    return fake_fits.fake_fit(calls, lambda n: {
        "test_mse": 0.01 * n, "test_psnr": None, "best_val_loss": 0.0, "parameters": 10, "hidden_dim": 8,
        "epochs": 1, "wall_s": 1.0, "resumed": False, "peak_rss_mb": 1.0, "peak_cuda_mb": None, "device": "cpu"}, fail_at)


def smoke(tmp_path, *extra):
    return main(dilation.BENCHMARK, ["--protocol", "smoke", "--archs", "gmn", "dws", "--k", "1", "2", "--data-root",
                                     str(tmp_path), "--out", str(tmp_path / "runs"), "--results",
                                     str(tmp_path / "results"), *extra])


def test_runner_records_each_run_as_it_finishes_and_a_rerun_skips_them(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "run", fake_fit(calls, fail_at=3))
    with pytest.raises(subprocess.CalledProcessError):
        smoke(tmp_path)
    (raw,) = (tmp_path / "results").glob("dilation_smoke_*.json")
    first = json.loads(raw.read_text())["runs"]
    assert [(r["arch"], r["k"]) for r in first] == [("dws", 1), ("dws", 2)]
    assert "Not run yet" in raw.with_suffix(".md").read_text()
    assert "| dws | 2 | 2.000 | 2.00 |" in raw.with_suffix(".md").read_text()  # k/k1 from the JSON

    assert smoke(tmp_path) == 0
    assert len(calls) == 5  # the two recorded runs were not rerun; the killed one and the last were
    fit = calls[-1][calls[-1].index("fit"):]
    assert fit[fit.index("--data.build") + 1] == "true"  # the INRs a protocol asks for are fitted on first use
    assert json.loads(calls[-1][calls[-1].index("--run-one") + 2]) == {"test_mse": "test/mse", "test_psnr": "test/psnr?"}
    runs = json.loads(raw.read_text())["runs"]
    assert runs[:2] == first and [(r["arch"], r["k"]) for r in runs[2:]] == [("gmn", 1), ("gmn", 2)]
    assert smoke(tmp_path) == 0 and len(calls) == 5


def test_runner_refuses_a_recorded_run_made_with_other_settings(tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "run", fake_fit([]))
    smoke(tmp_path, "--seeds", "0")
    monkeypatch.setitem(dilation.PROTOCOLS["smoke"], "trainer", {"max_epochs": 2})
    with pytest.raises(ValueError, match=r"dws k=1 seed=0 was run with trainer=\{'max_epochs': 1\}"):
        smoke(tmp_path)


def test_a_run_recorded_before_the_width_setting_counts_as_exact_matching(tmp_path):
    settings = dilation.run_settings(dilation.PROTOCOLS["cpu"], "gmn", 8)
    older = {key: value for key, value in settings.items() if key != "budget_width_multiple"}
    runs = [{"arch": "gmn", "k": 8, "seed": 0, "settings": older}]
    assert runner.recorded(runs, "gmn", 8, 0, settings, tmp_path / "r.json", dilation.RECORDED_BEFORE)
    runs[0]["settings"] = {**settings, "budget_width_multiple": 8}
    with pytest.raises(ValueError, match=r"r.json: gmn k=8 seed=0 was run with budget_width_multiple=8, this protocol asks 1"):
        runner.recorded(runs, "gmn", 8, 0, settings, tmp_path / "r.json", dilation.RECORDED_BEFORE)


def test_a_committed_run_recorded_with_the_config_path_of_the_earlier_layout_is_not_rerun():
    """Runs recorded ``configs/dilation/gmn_k1.yaml``; the config is ``benchmarks/dilation/gmn_k1`` now."""
    from neuralgraph.commands.configs import shipped_configs

    results = BENCHMARKS / "results" / "dilation_cpu_cpu2.json"
    runs = json.loads(results.read_text())["runs"]
    for k in (1, 8):
        settings = dilation.run_settings(dilation.PROTOCOLS["cpu"], "gmn", k)
        assert settings["config"] == f"benchmarks/dilation/gmn_k{k}"
        assert runner.recorded(runs, "gmn", k, 0, settings, results, dilation.RECORDED_BEFORE)
    recorded = {run["settings"]["config"] for path in (BENCHMARKS / "results").glob("*.json")
                for run in json.loads(path.read_text()).get("runs", [])
                if isinstance(run, dict) and "config" in run.get("settings", {})}
    assert recorded and {runner.config_name_of_record(config) for config in recorded} <= set(shipped_configs())
    assert runner.config_name_of_record("benchmarks/dilation/gmn_k1") == "benchmarks/dilation/gmn_k1"


def test_write_atomic_keeps_the_old_file_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    runner.write_atomic(path, "old")

    def killed(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        runner.write_atomic(path, "new")
    assert path.read_text() == "old"


def test_result_fields_name_a_missing_metric_and_record_an_optional_one_as_null():
    fields = {"test_mse": "test/mse", "test_psnr": "test/psnr?"}
    assert runner.result_of({"test/mse": 0.5}, fields) == {"test_mse": 0.5, "test_psnr": None}
    with pytest.raises(KeyError, match=r"result field 'test_mse': the fit logged no 'test/mse'; it logged \['val/mse'\]"):
        runner.result_of({"val/mse": 0.5}, fields)


@pytest.mark.parametrize("name", ["dilation_cpu_cpu2", "dilation_cpu-large_cpu2"])
def test_committed_results_render_their_committed_tables(name):
    """The tables are generated from the JSONs: a committed JSON renders its committed table, to the byte."""
    record = json.loads((BENCHMARKS / "results" / f"{name}.json").read_text())
    bench = dilation.BENCHMARK
    done = {(r["arch"], r["k"], r["seed"]) for r in record["runs"]}
    missing = [run for run in bench.plan(bench.protocols[record["protocol"]]) if run not in done]
    report = Report(bench, record["protocol"], record["machine"], record["runs"], [], None)
    assert bench.table(report, missing) == (BENCHMARKS / "results" / f"{name}.md").read_text()


@pytest.mark.parametrize("system", sorted(dilation.CPU_SYSTEMS))
def test_cpu_systems_match_the_gmn_budget_within_five_percent(system):
    from neuralgraph.nn.budget import model_parameters

    settings = dilation.run_settings(dilation.PROTOCOLS["cpu"], system, 1)
    target = model_parameters(*REFERENCE, 1, spec=inr_spec())[0]
    params = model_parameters(settings["metanet"], settings["metanet_config"], 1, spec=inr_spec())[0]
    assert abs(params - target) <= 0.05 * target


def fit_one_cpu_run(tmp_path, monkeypatch, arch: str, k: int = 8) -> tuple[list[str], dict]:
    """The fit command of ``arch`` k seed 0 on the cpu protocol (fit faked) and the run it records."""
    calls = []
    monkeypatch.setattr(subprocess, "run", fake_fit(calls))
    assert main(dilation.BENCHMARK, ["--protocol", "cpu", "--archs", arch, "--k", str(k), "--seeds", "0", "--data-root",
                                     str(tmp_path), "--out", str(tmp_path / "runs"), "--results",
                                     str(tmp_path / "results")]) == 0
    (command,) = calls
    (raw,) = (tmp_path / "results").glob("dilation_cpu_*.json")
    (run,) = json.loads(raw.read_text())["runs"]
    return command, run


def test_decoder_variants_are_planned_last_and_reach_the_fit(tmp_path, monkeypatch):
    """The OCE ablation's variants come after every run planned before them; their runs ask for their decoder."""
    plan = dilation.PROTOCOLS["cpu"]["plan"]
    assert plan[-2] == (tuple(dilation.CPU_DECODER_VARIANTS), (8,), (0, 1, 2))
    assert all(arch not in dilation.CPU_DECODER_VARIANTS for archs, _, _ in plan[:-2] for arch in archs)
    assert "decoder_members" not in dilation.run_settings(dilation.PROTOCOLS["cpu"], "gmn", 8)
    command, run = fit_one_cpu_run(tmp_path, monkeypatch, "gmn_coupled")
    assert command[command.index("--model.init_args.decoder_members") + 1] == "coupled"
    assert run["settings"] == {**dilation.run_settings(dilation.PROTOCOLS["cpu"], "gmn", 8), "decoder_members": "coupled"}


def test_precision_variant_is_planned_last_and_trains_gmn_in_bf16_mixed(tmp_path, monkeypatch):
    """Same settings as GMN's but the trainer's precision; the fit is asked for it and the record says so."""
    assert dilation.PROTOCOLS["cpu"]["plan"][-1] == (("gmn_bf16",), (1, 8), (0,))
    gmn = dilation.run_settings(dilation.PROTOCOLS["cpu"], "gmn", 8)
    assert "precision" not in gmn["trainer"]
    command, run = fit_one_cpu_run(tmp_path, monkeypatch, "gmn_bf16")
    assert command[command.index("--trainer.precision") + 1] == "bf16-mixed"
    assert run["settings"] == {**gmn, "trainer": {**gmn["trainer"], "precision": "bf16-mixed"}}


@pytest.mark.parametrize("variant", sorted(dilation.CPU_DECODER_VARIANTS))
def test_decoder_variants_match_the_gmn_budget_counting_their_decoder(variant):
    from neuralgraph.nn.budget import match_budget, model_parameters

    settings = dilation.run_settings(dilation.PROTOCOLS["cpu"], variant, 8)
    # the protocol's exact width search, as the paper compares at the budget
    assert settings["budget_width_multiple"] == 1
    match = match_budget(settings["metanet"], settings["metanet_config"], 8, members=settings["decoder_members"],
                         width_multiple=settings["budget_width_multiple"], spec=inr_spec())
    target = model_parameters(*REFERENCE, 1, spec=inr_spec())[0]
    assert match.reference_params == target and 0.95 * target <= match.params <= target


def test_matched_width_names_the_system_it_cannot_match():
    with pytest.raises(ValueError, match=r"^ng_t: no hidden_dim gives 167,314 parameters within 5% \(nearest: 177,650"):
        matched_width("ng_t", "ng_t", {"num_heads": 8}, 167_314)


def test_oce_cost_counts_the_output_network_as_members_and_as_one_merged_network():
    oce_cost = load_script(BENCHMARKS / "oce_cost.py")
    editor = oce_cost.Editor(2)
    layout = [2, 64, 64, 1]  # merged: 2-(32k)-(32k)-1
    assert editor.static["output_parameters_members"] == 2 * (2 * 32 + 32 + 32 * 32 + 32 + 32 + 1)
    assert editor.static["output_parameters_merged"] == sum(a * b + b for a, b in zip(layout, layout[1:]))
    assert editor.static["hidden_dim"] == 56 and set(editor.calls) >= {"train_s_per_epoch", "render_merged_ms_b256"}


def test_oce_step_section_replaces_itself_and_labels_costs_of_other_widths(tmp_path, monkeypatch):
    oce_cost = load_script(BENCHMARKS / "oce_cost.py")
    monkeypatch.setattr(oce_cost, "RESULTS", tmp_path)
    names = ("k=1 h=64 autograd render", "k=1 h=64 batched render", "k=8 h=56 batched render")
    step = {"date": "2026-12-01", "cpu": "CPU X (avx2)", "platform": "p", "torch": "t", "rounds": 3,
            "hidden_dim_after": 56, "threads": {"1": {"step_s": dict(zip(names, (0.5, 0.4, 0.5))), "load": [1.0, 2.0],
                                                      "ratio_before": 1.6, "ratio_after": 1.25}}}
    (tmp_path / "oce_step_m.json").write_text(json.dumps(step))
    costs = {"costs": [{"k": 1, "hidden_dim": 64}, {"k": 8, "hidden_dim": 63}]}
    (tmp_path / "oce_cost_m.json").write_text(json.dumps(costs))
    (tmp_path / "oce_curve_m.md").write_text("# curve\n\n| table |\n")
    oce_cost.write_step_section("m")
    text = oce_cost.write_step_section("m").read_text()  # a second write replaces the section
    assert text.startswith("# curve\n\n| table |\n\n") and text.count(oce_cost.STEP_SECTION) == 1
    assert "on CPU X (avx2)" in text and "older measurement (hidden_dim 63 at k > 1" in text
    assert "| 1 | 1.0, 2.0 | 500 | 400 | 500 | 1.60 | 1.25 |" in text


def test_ensemble_of_editors_averages_their_renders(tiny_inrs):
    oce_ablation = load_script(BENCHMARKS / "oce_ablation.py")
    from neuralgraph.training.datamodule import MnistInrDataModule
    from neuralgraph.training.tasks import InrEditing

    torch.manual_seed(0)
    tasks = [InrEditing(metanet="gmn", metanet_config={"hidden_dim": 8, "num_layers": 1}, k=k,
                        normalize_inputs=False).eval() for k in (1, 2)]
    data = MnistInrDataModule(root=str(tiny_inrs), source="embedded", batch_size=8)
    data.setup("test")
    with torch.no_grad():
        outputs = [[task.loss_and_outputs(batch)[1] for batch in data.test_dataloader()] for task in tasks]
    predictions = [torch.cat([o["prediction"] for o in task_outputs]) for task_outputs in outputs]
    target = torch.cat([o["target"] for o in outputs[0]])
    mse = oce_ablation.ensemble_test_mse(tasks, data)
    assert mse == pytest.approx(float(((predictions[0] + predictions[1]) / 2 - target).pow(2).mean()), rel=1e-6)
    assert oce_ablation.ensemble_test_mse(tasks[:1], data) == pytest.approx(
        float((predictions[0] - target).pow(2).mean()), rel=1e-6)


def test_ensemble_member_without_its_best_checkpoint_is_an_error_naming_the_folder(tmp_path):
    oce_ablation = load_script(BENCHMARKS / "oce_ablation.py")
    with pytest.raises(FileNotFoundError, match=r"gmn_k1_s3/checkpoints: expected one best-\*\.ckpt, found 0"):
        oce_ablation.best_checkpoint(tmp_path / "gmn_k1_s3")


def synthetic_run(arch, k, seed, mse, parameters=100):
    return {"arch": arch, "k": k, "seed": seed, "test_mse": mse, "parameters": parameters, "settings": {}}


def test_oce_curve_joins_quality_and_cost_in_one_table_and_plot(tmp_path):
    oce_curve = load_script(BENCHMARKS / "oce_curve.py")
    runs = [synthetic_run("gmn", 1, seed, mse) for seed, mse in enumerate((0.040, 0.042, 0.044))]
    runs += [synthetic_run("gmn", 8, 0, 0.020), synthetic_run("dws", 1, 0, 0.05), synthetic_run("nft", 1, 0, 0.03)]
    (tmp_path / "dilation_cpu_m.json").write_text(json.dumps({"runs": runs}))
    costs = [{"k": k, "editor_parameters": 1000 + k, "hidden_dim": 64, "train_s_per_epoch": 10.0 * k,
              "peak_rss_mb": 500.0, "edit_ms_per_inr_b32": 2.0, "render_members_ms_b256": 3.0 * k,
              "render_merged_ms_b256": 4.0 * k, "output_parameters_merged": 7 * k} for k in (1, 2, 4, 8)]
    (tmp_path / "oce_cost_m.json").write_text(json.dumps({"platform": "p", "torch": "t", "load": 1.5, "costs": costs}))
    assert oce_curve.main(["--results", str(tmp_path), "--machine", "m"]) == 0
    table = (tmp_path / "oce_curve_m.md").read_text()
    assert "| gmn | 1 | 4.200 ± 0.200 (3) |  | 1.96 |  | 1,001 | 64 | 10.0 | 500.0 | 2.0 | 3.0 | 4.0 | 7 |" in table
    assert "| gmn | 2 | not run yet |  | 1.69 | 0.86 | 1,002 |" in table
    assert "| gmn | 8 | 2.000 (1) | 0.48 | 1.06 | 0.54 | 1,008 |" in table
    assert "| dws | 8 | not run yet |  | 1.36 | 0.59 |  |" in table and "nft" not in table and "load average 1.5" in table
    if importlib.util.find_spec("matplotlib") is not None:  # the bench extra; the table needs none
        assert (tmp_path / "oce_curve_m.png").read_bytes().startswith(b"\x89PNG")
    else:
        assert not (tmp_path / "oce_curve_m.png").exists()

    (tmp_path / "oce_cost_m.json").unlink()  # before the costs are measured: quality alone, said so
    oce_curve.write_report(tmp_path, "m")
    assert "`oce_cost_<machine>.json` not measured yet" in (tmp_path / "oce_curve_m.md").read_text()


def test_oce_ablation_reports_every_variant_and_what_is_not_run_yet():
    oce_ablation = load_script(BENCHMARKS / "oce_ablation.py")
    runs = [synthetic_run("gmn", 1, seed, 0.04, parameters=167_314) for seed in range(3)]
    runs += [synthetic_run("gmn", 8, 0, 0.024, 163_202), synthetic_run("gmn_coupled", 8, 0, 0.020, 166_802),
             synthetic_run("gmn_coupled", 8, 1, 0.022, 166_802)]
    ensembles = [{"seeds": list(range(8)), "test_mse_x1e-2": 2.4, "members_x1e-2": [3.5] * 4 + [2.5] * 4}]
    missing = [{"seeds": list(range(8, 16)), "not_recorded": [9]}]
    markdown, results = oce_ablation.report(runs, ensembles, missing, 8, "m")
    rows = [line for line in markdown.splitlines() if line.startswith("| ")][1:]
    assert rows == ["| k = 1, one editor | 1x | 167,314 | 4.000 ± 0.000 (3) |",
                    "| (a) OCE k = 8, eight members averaged | 1x | 163,202 | 2.400 (1) |",
                    "| (b) one network of width 8 x 32 decoded directly (`gmn_coupled`) | 1x | 166,802 "
                    "| 2.100 ± 0.141 (2) |",
                    "| (c) 8 k = 1 editors averaged at inference | 8x | 1,338,512 | 2.400 (1) |",
                    "| (d) k = 8, members forced identical (`gmn_tied`) | 1x |  | not run yet |"]
    assert "gmn k=8: seeds [1, 2] not run yet." in markdown and "gmn_tied k=8: seeds [0, 1, 2] not run yet." in markdown
    assert "Ensemble of seeds 8-15 not computed: seeds [9] are not recorded yet." in markdown
    assert ("Ensemble of seeds 0-7: 2.400 against its editors alone 3.000 ± 0.535 (8), best 2.500: averaging gains "
            "20.0% over the editors' mean.") in markdown
    assert [v["test_mse_x1e-2"] for v in results["variants"]][2] == pytest.approx([2.0, 2.2])
