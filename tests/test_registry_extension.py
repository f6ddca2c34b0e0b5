"""An architecture added in one file joins every benchmark plan and every parametrised test, with no other edit.

The variant below is registered by a module of its own (as a user's file would be), loaded in a
child process as a pytest plugin, so the registry of this process stays as it is.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANT = '''
"""A GMN variant in one file: the whole of what adding an architecture takes."""
from neuralgraph.nn import register_metanet
from neuralgraph.nn.gmn import GMN


@register_metanet("gmn_variant")
class GMNVariant(GMN):
    """GMN registered under another name (its declarations are GMN's)."""
'''
PLANS = '''
import variant  # noqa: F401  (registers gmn_variant)
from neuralgraph.bench import load_script
from neuralgraph.bench.grids import dilation_grid

dilation = load_script("benchmarks/dilation.py")
classification = load_script("benchmarks/inr_classification.py")
generalization = load_script("benchmarks/generalization.py")
transformers = load_script("benchmarks/transformer_zoo.py")
found = {
    "dilation grid": "gmn_variant_k8.yaml" in dilation_grid(),
    "dilation cpu plan": "gmn_variant" in dilation.PROTOCOLS["cpu"]["plan"][0][0],
    "inr classification plan": "gmn_variant" in classification.PROTOCOLS["cpu"]["plan"][0][0],
    "generalization plan": "gmn_variant" in generalization.PROTOCOLS["cpu"]["plan"][0][0],
    "transformer zoo plan": "gmn_variant" in transformers.PROTOCOLS["cpu"]["plan"][0][0],
    "generalization width": generalization.budget_config("gmn_variant") == generalization.budget_config("gmn"),
}
print(sorted(name for name, ok in found.items() if not ok))
'''
SUITES = ["tests/test_nn_symmetry.py", "tests/test_pinned_outputs.py", "tests/test_expressivity_report.py",
          "tests/test_training.py", "tests/test_inr_classification_benchmark.py", "tests/test_spec.py",
          "tests/test_memory_options.py", "tests/test_meta_device.py"]


def run(tmp_path, *command):
    (tmp_path / "variant.py").write_text(VARIANT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_a_variant_in_one_file_joins_every_benchmark_plan(tmp_path):
    result = run(tmp_path, "-c", textwrap.dedent(PLANS))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout


def test_a_variant_in_one_file_joins_the_parametrised_tests_and_passes_or_names_its_command(tmp_path):
    collected = run(tmp_path, "-m", "pytest", "-p", "variant", "-q", "--collect-only", "-p", "no:cacheprovider",
                    "-k", "gmn_variant", *SUITES).stdout
    suites = {line.split("::")[0] for line in collected.splitlines() if "::" in line and "gmn_variant" in line}
    assert suites == set(SUITES), sorted(set(SUITES) - suites)

    result = run(tmp_path, "-m", "pytest", "-p", "variant", "-q", "-rs", "-p", "no:cacheprovider", "-k", "gmn_variant",
                 *SUITES)
    out = result.stdout
    assert result.returncode == 0 and " passed" in out, out[-4000:]
    # what only a command can make is skipped with that command
    assert "python tests/test_pinned_outputs.py gmn_variant" in out
    assert "python tests/test_expressivity_report.py gmn_variant" in out
    assert "python scripts/generate_dilation.py" in out
    assert "python benchmarks/inr_classification.py --write-configs" in out
