"""The `neuralgraph` command line: one-line errors with exit code 2, arguments checked before any work,
unreadable checkpoints refused without torch's advice, --debug, and a --help that imports no torch."""
import os
import re
import subprocess
import sys

import pytest
import torch

from neuralgraph.cli import main

TASK = "neuralgraph.training.tasks.InrEditing"


def run_main(argv: list[str], capsys) -> tuple[int, str]:
    """Exit code and stderr of ``neuralgraph *argv`` run in this process."""
    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    return code, capsys.readouterr().err


BAD_ARGUMENTS = [
    (["audit-gp", "{tmp}", "--limit", "-1"], "argument --limit: must be at least 1, got -1"),
    (["audit-gp", "{tmp}", "--limit", "0"], "argument --limit: must be at least 1, got 0"),
    (["audit-gp", "{tmp}", "--chunk", "0"], "argument --chunk: must be at least 1, got 0"),
    (["audit-gp", "{tmp}", "--bits", "1"], "argument --bits: 1 bits: choose 32 or 2..16"),
    (["expressivity-report", "--patience", "0"], "argument --patience: must be at least 1, got 0"),
    (["expressivity-report", "--layout", "2", "0", "1"], "argument --layout: must be at least 1, got 0"),
    (["expressivity-report", "--layout", "3"], "--layout 3: needs at least an input and an output width"),
    (["make-inrs", "--out", "{tmp}/new", "--limit", "0"], "argument --limit: must be at least 1, got 0"),
    (["make-inrs", "--out", "{tmp}/new", "--shard-size", "x"], "argument --shard-size: expected an integer, got 'x'"),
    (["edit", "--ckpt", "{tmp}/a.ckpt", "--index", "-1", "--out", "{tmp}/a.png"],
     "argument --index: must be at least 0, got -1"),
    (["fit", "--model", TASK, "--data.root", "{tmp}/new", "--data.limit_train", "0"],
     "data.limit_train=0: must be at least 1"),
    (["fit", "--model", TASK, "--data.root", "{tmp}/new", "--data.limit_val", "abc"],
     "NestedArg(key='limit_val', val='abc')"),  # data is a subclass choice: the error names the value
]


@pytest.mark.parametrize("argv,message", BAD_ARGUMENTS, ids=lambda a: " ".join(a) if isinstance(a, list) else "")
def test_bad_arguments_are_one_line_errors_before_any_work(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [a.format(tmp=tmp_path) for a in argv]
    code, err = run_main(argv, capsys)
    assert code == 2
    assert err.startswith(f"neuralgraph {argv[0]}: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written (no data folder, no run)


class NotATensor:
    """A pickled object that a weights-only load refuses."""


def write_bad_checkpoints(folder) -> dict[str, tuple]:
    """Unreadable checkpoint files: name -> (path, reason the error gives)."""
    good = folder / "good.ckpt"
    torch.save({"state_dict": {"w": torch.ones(3)}}, good)
    files = {"empty": (b"", "empty file"),
             "truncated": (good.read_bytes()[:200], "truncated or corrupt archive"),
             "random": (bytes(range(256)) * 4, "not a PyTorch checkpoint")}
    out = {}
    for name, (data, reason) in files.items():
        (folder / f"{name}.ckpt").write_bytes(data)
        out[name] = (folder / f"{name}.ckpt", re.escape(reason))
    torch.save({"state_dict": {}, "callback": NotATensor()}, folder / "object.ckpt")
    out["object"] = (folder / "object.ckpt", r"holds a [\w.]*NotATensor object, which a weights-only load refuses")
    return out


@pytest.mark.parametrize("kind", ["empty", "truncated", "random", "object"])
def test_unreadable_checkpoints_are_refused_in_one_line(kind, tmp_path, capsys):
    path, reason = write_bad_checkpoints(tmp_path)[kind]
    for argv in (["edit", "--ckpt", str(path), "--index", "0", "--out", str(tmp_path / "x.png")],
                 ["test", "--model", TASK, "--data.root", str(tmp_path / "none"), "--ckpt_path", str(path)],
                 ["audit-gp", str(tmp_path)]):
        if argv[0] == "audit-gp":  # a folder of MLP checkpoints: only this file
            for other in tmp_path.glob("*.ckpt"):
                other.rename(other.with_suffix(".pt") if other == path else other.with_suffix(".other"))
            path = path.with_suffix(".pt")
        code, err = run_main(argv, capsys)
        assert code == 2 and re.fullmatch(rf"neuralgraph {argv[0]}: error: {re.escape(str(path))}: not a readable "
                                          rf"checkpoint \({reason}\)\n", err), err
        assert "weights_only" not in err


def test_debug_flag_and_environment_variable_show_the_traceback(tmp_path, capsys, monkeypatch):
    path, _ = write_bad_checkpoints(tmp_path)["empty"]
    argv = ["edit", "--ckpt", str(path), "--index", "0", "--out", str(tmp_path / "x.png")]
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        main(["--debug", *argv])
    monkeypatch.setenv("NEURALGRAPH_DEBUG", "1")
    with pytest.raises(ValueError, match="not a readable checkpoint"):
        main(argv)


def test_help_imports_no_torch():
    code = ("import sys\nfrom neuralgraph.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('heavy modules:', sorted(m for m in ('torch', 'lightning', 'torch_geometric') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONWARNINGS": "error"})
    assert run.returncode == 0, run.stderr
    assert "expressivity-report" in run.stdout and "heavy modules: []" in run.stdout
