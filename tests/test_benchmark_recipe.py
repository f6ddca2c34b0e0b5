"""docs/benchmarks.md, "Adding a benchmark": the recipe's example declares a tiny benchmark and runs its smoke
protocol as written, and saved as the recipe says, it is a script with the options of every benchmark."""
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "benchmarks.md"
SECTION = "## Adding a benchmark"
# the page's python blocks run in order in one namespace, as a reader's session would (tests/test_doc_snippets.py)
RUNNER = """
import json, sys
namespace = {"__name__": "__main__", "__file__": sys.argv[1]}
for code in json.loads(sys.stdin.read()):
    exec(compile(code, sys.argv[1], "exec"), namespace)
"""


def recipe() -> tuple[str, list[str]]:
    """The section's text (to the next section) and its python blocks."""
    text = PAGE.read_text(encoding="utf-8")
    assert SECTION in text, f"{PAGE.name} has no section {SECTION!r}"
    section = text[text.index(SECTION):]
    following = section.find("\n## ", len(SECTION))
    section = section if following < 0 else section[:following]
    return section, re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)


def test_the_recipe_declares_a_benchmark_and_runs_its_smoke_protocol(tmp_path):
    _, blocks = recipe()
    assert len(blocks) == 2, "the recipe: a declaration, then a run of its smoke protocol"
    run = subprocess.run([sys.executable, "-c", RUNNER, str(PAGE)], input=json.dumps(blocks + blocks[1:]), text=True,
                         capture_output=True, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (raw,) = (tmp_path / "results").glob("tiny_classification_smoke_*.json")
    runs = json.loads(raw.read_text())["runs"]
    assert [(r["arch"], r["seed"]) for r in runs] == [("dws", 0), ("gmn", 0)]
    assert all(0 <= r["test_accuracy"] <= 1 and r["hidden_dim"] == 8 and r["epochs"] == 1 for r in runs)
    assert runs[0]["settings"]["config"] == "benchmarks/inr_classification/dws"
    table = raw.with_suffix(".md").read_text()
    assert table.startswith("# Tiny INR classification — protocol `smoke` on `")
    assert "| system | test accuracy (%) | parameters | wall time per run (min) |" in table and "| gmn | " in table
    assert run.stdout.count("in tiny_classification_smoke_") == 2  # the second run skipped both recorded runs
    assert (tmp_path / "inrs").is_dir() and (tmp_path / "runs" / "smoke" / "dws_s0").is_dir()


def test_the_recipe_saved_as_a_script_has_every_benchmarks_options(tmp_path):
    section, blocks = recipe()
    (closing,) = re.findall(r'`(if __name__ == "__main__": sys\.exit\(main\(\w+\)\))`', section)
    script = tmp_path / "benchmarks" / "tiny_classification.py"
    script.parent.mkdir()
    script.write_text(blocks[0] + "\n" + closing + "\n")
    run = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    usage = " ".join(run.stdout.split())
    assert usage.startswith("usage: tiny_classification.py [-h] [--protocol {smoke}] [--archs {dws,gmn}")
    for option in ("--seeds", "--data-root", "--out", "--results"):
        assert option in usage
    assert "Tiny INR classification: DWS and GMN" in run.stdout
