"""The package as a user installs it: a wheel in a fresh virtual environment, no editable install."""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import neuralgraph

ROOT = Path(__file__).resolve().parents[1]


def run(*command, **kwargs) -> str:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{command}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
    return result.stdout


def test_the_wheel_installs_the_cli_and_its_demo_config(tmp_path):
    # build from a copy: an in-tree build would write build/ into the checkout
    source = tmp_path / "source"
    shutil.copytree(ROOT / "neuralgraph", source / "neuralgraph", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE", "CITATION.cff"):
        shutil.copy(ROOT / name, source / name)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
        "-w", tmp_path / "dist", source)
    (wheel,) = (tmp_path / "dist").glob("neuralgraph_pyg-*.whl")
    check_wheel_contents(wheel)

    # a fresh venv that borrows this environment's dependencies (offline), but not its neuralgraph:
    # a path added by a .pth file is not itself a site directory, so the editable finder there stays off
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    site_packages = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    (site_packages / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel)

    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    where = run(python, "-c", "import neuralgraph.commands.demo as demo; print(demo.__file__); "
                "print(demo.DEFAULT_CONFIG)", cwd=tmp_path, env=env).split()
    assert all(Path(path).is_relative_to(site_packages) for path in where), where
    assert "--config" in run(venv / "bin" / "neuralgraph", "demo", "--help", cwd=tmp_path, env=env)
    config = run(venv / "bin" / "neuralgraph", "fit", "--config", where[1], "--print_config", cwd=tmp_path, env=env)
    assert "class_path: neuralgraph.training.tasks.InrEditing" in config and "source: embedded" in config

    # the version from the installed metadata; the shipped configs listed and found by name
    assert run(venv / "bin" / "neuralgraph", "--version", cwd=tmp_path, env=env) == \
        f"neuralgraph {neuralgraph.__version__} (neuralgraph-pyg)\n"
    listed = run(venv / "bin" / "neuralgraph", "configs", "dilation/gmn", cwd=tmp_path, env=env)
    assert re.search(r"^benchmarks/dilation/gmn_k4 +INR dilation", listed, flags=re.M)
    assert str(site_packages / "neuralgraph" / "configs") in listed
    config = run(venv / "bin" / "neuralgraph", "fit", "--config", "benchmarks/dilation/gmn_k4", "--print_config",
                 cwd=tmp_path, env=env)
    assert "metanet: gmn" in config and "default_root_dir: runs/benchmarks/dilation/gmn_k4" in config


def check_wheel_contents(wheel: Path) -> None:
    """Every shipped config, py.typed, the kernels and data, the license and citation, and no config script."""
    names = set(zipfile.ZipFile(wheel).namelist())
    configs = {f"neuralgraph/configs/{p.relative_to(ROOT / 'neuralgraph' / 'configs').as_posix()}"
               for p in (ROOT / "neuralgraph" / "configs").rglob("*.yaml")}
    assert len(configs) > 100 and configs <= names, sorted(configs - names)[:5]
    assert not [n for n in names if n.startswith("neuralgraph/configs/") and not n.endswith(".yaml")]
    assert {"neuralgraph/py.typed", "neuralgraph/_kernels/siren_step.cpp"} <= names
    assert [n for n in names if n.startswith("neuralgraph/data/") and n.endswith(".npz")]
    info = f"neuralgraph_pyg-{neuralgraph.__version__}.dist-info"
    assert {f"{info}/licenses/LICENSE", f"{info}/licenses/CITATION.cff"} <= names
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert "Name: neuralgraph-pyg\n" in metadata and f"Version: {neuralgraph.__version__}\n" in metadata
    assert "License-Expression: MIT\n" in metadata and "License-File: LICENSE\n" in metadata
    entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "neuralgraph = neuralgraph.cli:main" in entry_points


def test_license_and_citation_agree_with_the_package():
    citation = (ROOT / "CITATION.cff").read_text()
    assert f'\nversion: "{neuralgraph.__version__}"\n' in citation and "\nlicense: MIT\n" in citation
    assert 'title: "neuralgraph"' in citation and "cff-version: 1.2.0" in citation
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    assert 'license = "MIT"' in (ROOT / "pyproject.toml").read_text()


def test_the_repository_configs_folder_is_the_shipped_one():
    # configs/ at the root is a link to the package's folder, so paths `configs/...` keep working
    assert (ROOT / "configs").is_symlink() and (ROOT / "configs").resolve() == ROOT / "neuralgraph" / "configs"
