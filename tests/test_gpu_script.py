"""``benchmarks/gpu.sh`` end to end on this CPU (``--smoke``, ``NEURALGRAPH_DEVICE=cpu``): every step runs and
writes its result file, so that on a GPU machine only the device is new; a failing step is recorded in its
file and the next step runs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from neuralgraph.nn import METANETS

ROOT = Path(__file__).resolve().parents[1]
STEPS = ("install", "tests", "metanet_speed", "inr_fit", "dilation_slice", "zoo")


def gpu_script(out: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "NEURALGRAPH_DEVICE": "cpu", "OUT": str(out), "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu.sh"), "--smoke"], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=900)


def summary(out: Path) -> dict[str, str]:
    rows = [line.split("\t") for line in (out / "summary.tsv").read_text().splitlines()[1:]]
    return {name: status for name, status, _, _ in rows}


def test_the_smoke_run_writes_every_result_on_the_cpu(tmp_path):
    out = tmp_path / "gpu"
    run = gpu_script(out)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert summary(out) == dict.fromkeys(STEPS, "ok"), (out / "summary.tsv").read_text()
    env = json.loads((out / "env.json").read_text())
    assert env["neuralgraph_device"] == "cpu" and env["versions"]["torch"] and env["cuda"] is False
    tests = ElementTree.parse(out / "tests.xml").getroot().find("testsuite")
    assert int(tests.get("tests")) >= 3 and tests.get("failures") == tests.get("errors") == "0"
    for name in sorted(METANETS):
        rates = json.loads((out / f"metanet_speed_{name}.json").read_text())["rates"]
        assert set(rates) == {"batch2_32", "batch2_bf16-mixed"}, name
        assert all(row["graphs_per_s"] > 0 and row["peak_mib"] > 0 for row in rates.values()), (name, rates)
    fit = json.loads((out / "inr_fit.json").read_text())
    assert fit["device"] == "cpu" and set(fit["rows"][0]["inr_steps_per_s"]) == {"torch", "loop"}
    dilation = json.loads((out / "dilation_slice.json").read_text())
    assert set(dilation["runs"]) == {"k1", "k8"} and dilation["published_hours_per_run"] == [4, 10]
    for run_ in dilation["runs"].values():
        assert run_["train_steps"] > 0 and run_["val_steps"] > 0 and run_["s_per_full_epoch"] > 0
        assert run_["full_epochs"] == 150 and run_["hours_per_full_run"] > 0
    assert json.loads((out / "zoo.json").read_text())["network_epochs_per_s"] > 0


def test_a_failing_step_is_recorded_and_the_next_one_runs(tmp_path):
    out = tmp_path / "gpu"
    run = gpu_script(out, GPU_STEPS="inr_fit zoo", TIMEOUT_INR_FIT="1", TIMEOUT_ZOO="1")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    assert summary(out) == {"inr_fit": "timed out after 1s", "zoo": "timed out after 1s"}
    for name in ("inr_fit", "zoo"):
        record = json.loads((out / f"{name}.json").read_text())
        assert record["step"] == name and record["status"] == "timed out after 1s"
