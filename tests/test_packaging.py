"""The package as a user installs it: a wheel in a fresh virtual environment, no editable install."""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*command, **kwargs) -> str:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{command}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
    return result.stdout


def test_the_wheel_installs_the_cli_and_its_demo_config(tmp_path):
    # build from a copy: an in-tree build would write build/ into the checkout
    source = tmp_path / "source"
    shutil.copytree(ROOT / "neuralgraph", source / "neuralgraph", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
        "-w", tmp_path / "dist", source)
    (wheel,) = (tmp_path / "dist").glob("neuralgraph-*.whl")

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
