"""The benchmark harness end to end on its smoke protocol (every row of the paper's table, k = 1 and 2)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from dilation import PAPER_ROWS  # noqa: E402


@pytest.mark.slow
def test_dilation_smoke_protocol_writes_results_for_every_architecture(tiny_inrs, tmp_path):
    results = tmp_path / "results"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dilation.py"), "--protocol", "smoke",
                          "--data-root", str(tiny_inrs), "--out", str(tmp_path / "runs"), "--results", str(results)],
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (raw,) = results.glob("dilation_smoke_*.json")
    runs = json.loads(raw.read_text())["runs"]
    assert {(r["arch"], r["k"]) for r in runs} == {(row, k) for row in PAPER_ROWS for k in (1, 2)}
    assert all(r["test_mse"] > 0 and r["parameters"] > 0 for r in runs)
    table = next(results.glob("dilation_smoke_*.md")).read_text()
    assert "published (full protocol) | OCE GMN k=8 | 8 | 1.06" in table and "measured (smoke" in table
