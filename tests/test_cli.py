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
    out["object"] = (folder / "object.ckpt", r"holds a [\w.]*NotATensor object, which a weights-only load refuses "
                                             r"\(only tensors and plain containers are read\)")
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


# -- the package as a user meets it: version, shipped configs, outputs, quiet runs, progress in logs --

def run_main_out(argv: list[str], capsys) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``neuralgraph *argv`` run in this process."""
    try:
        code = main(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    captured = capsys.readouterr()
    return code or 0, captured.out, captured.err


def test_version_names_the_package_and_its_distribution(capsys):
    import neuralgraph

    code, out, _ = run_main_out(["--version"], capsys)
    assert code == 0 and out == f"neuralgraph {neuralgraph.__version__} (neuralgraph-pyg)\n"


def test_help_lists_the_lightning_verbs_and_subcommand_help_shows_defaults(capsys):
    _, out, _ = run_main_out(["--help"], capsys)
    listed = re.findall(r"^    ([a-z-]+)", out, flags=re.M)
    assert listed[:5] == ["fit", "validate", "test", "predict", "configs"] and "demo" in listed
    _, out, _ = run_main_out(["audit-gp", "--help"], capsys)
    assert "(default: 1024)" in " ".join(out.split()) and "(default: None)" not in out
    _, out, _ = run_main_out(["demo", "--help"], capsys)
    assert "(default: 1 4)" in " ".join(out.split())


def test_configs_lists_the_shipped_configs_with_their_header(capsys):
    from neuralgraph.commands.configs import shipped_configs

    code, out, _ = run_main_out(["configs"], capsys)
    rows = [line for line in out.splitlines() if line and not line[0].isdigit()]
    assert code == 0 and len(rows) == len(shipped_configs()) > 100
    assert re.search(r"^benchmarks/dilation/gmn_k4 +INR dilation \(MNIST SIREN .*with gmn, k=4\.$", out, flags=re.M)
    assert re.search(r"^examples/inr_editing/demo +make demo: GMN INR editor", out, flags=re.M)
    names = [line.split()[0] for line in rows]
    assert names.index("examples/inr_editing/demo") < names.index("benchmarks/dilation/gmn_k4")  # examples first
    code, out, _ = run_main_out(["configs", "gmn_k4"], capsys)
    assert [line.split()[0] for line in out.splitlines()[:-2]] == [
        "benchmarks/dilation/gmn_k4", "benchmarks/dilation/paper/gmn_k4", "benchmarks/dilation/scalegmn_k4"]
    code, _, err = run_main_out(["configs", "no-such"], capsys)
    assert code == 2 and err == ("neuralgraph configs: error: no shipped config's name contains 'no-such' "
                                 "(`neuralgraph configs` lists all)\n")


@pytest.mark.parametrize("name", ["benchmarks/dilation/gmn_k4", "benchmarks/dilation/gmn_k4.yaml"])
def test_a_shipped_config_name_resolves_to_its_file(name, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ folder here: the name is the package's
    code, out, _ = run_main_out(["fit", "--config", name, "--print_config"], capsys)
    assert code == 0 and "metanet: gmn" in out and re.search(r"^    k: 4$", out, flags=re.M)
    assert "reference_hidden_dim: 128" in out and "default_root_dir: runs/benchmarks/dilation/gmn_k4" in out


def test_an_unknown_config_name_is_one_line_with_the_closest_names(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["fit", "--config", "dilation/gmn_k3"], ["test", "--config=dilation/gmn_k3", "--ckpt_path", "x.ckpt"],
                 ["demo", "--config", "dilation/gmn_k3"]):
        code, _, err = run_main_out(argv, capsys)
        assert code == 2 and err.count("\n") == 1, err
        assert "dilation/gmn_k3: no such file, nor a shipped config of that name" in err
        assert "did you mean benchmarks/dilation/gmn_k1, benchmarks/dilation/gmn_k2, benchmarks/dilation/gmn_k4" in err
    assert not any(tmp_path.iterdir())


def test_a_wrong_config_name_fails_before_torch_is_imported(tmp_path):
    code = ("import sys\nfrom neuralgraph.cli import main\ncode = main(['fit', '--config', 'nope'])\n"
            "print(code, 'torch' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.stdout.split() == ["2", "False"], run.stderr


OUT_COMMANDS = [
    ["make-inrs", "--limit", "1"],
    ["make-cnn-zoo", "--networks", "1"],
    ["make-transformer-zoo", "--networks", "1"],
    ["import-dataset", "dws-inrs", "{tmp}"],
    ["demo"],
]


@pytest.mark.parametrize("argv", OUT_COMMANDS, ids=lambda a: a[0])
@pytest.mark.parametrize("under", [False, True], ids=["file", "below-a-file"])
def test_an_out_that_is_a_file_is_one_line(argv, under, tmp_path, capsys):
    existing = tmp_path / "taken"
    existing.write_text("a file")
    out = existing / "sub" if under else existing
    argv = [a.format(tmp=tmp_path) for a in argv] + ["--out", str(out)]
    code, _, err = run_main_out(argv, capsys)
    reason = f"{existing} is a file, not a folder" if under else "a file, not a folder"
    assert code == 2 and err.startswith(f"neuralgraph {argv[0]}: error: argument --out: {out}: {reason} (see ")
    assert err.count("\n") == 1 and sorted(tmp_path.iterdir()) == [existing]


def test_edit_refuses_to_overwrite_without_force(tmp_path, capsys):
    for option in ("--out", "--export"):
        existing = tmp_path / f"taken{option}"
        existing.write_text("keep me")
        argv = ["edit", "--ckpt", str(tmp_path / "none.ckpt"), "--index", "0", "--out", str(tmp_path / "new.png")]
        argv = [a if a != str(tmp_path / "new.png") or option != "--out" else str(existing) for a in argv]
        if option == "--export":
            argv += ["--export", str(existing)]
        code, _, err = run_main_out(argv, capsys)
        assert code == 2
        assert err == f"neuralgraph edit: error: {option} {existing}: exists; pass --force to overwrite it\n"
        # --force passes the check: the next error is the missing checkpoint, nothing was written
        code, _, err = run_main_out([*argv, "--force"], capsys)
        assert code == 2 and "none.ckpt: no such checkpoint file" in err
        assert existing.read_text() == "keep me"
    code, _, err = run_main_out(["edit", "--ckpt", "x.ckpt", "--index", "0", "--out", str(tmp_path)], capsys)
    assert code == 2 and err == f"neuralgraph edit: error: --out {tmp_path}: a folder, not a file\n"


def test_audit_gp_with_ieee_alone_defaults_to_the_ieee_widths(tmp_path, capsys):
    from neuralgraph.commands.audit_gp import DEFAULT_BITS, default_bits

    for n in range(2):
        torch.manual_seed(n)
        model = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
        torch.save(model.state_dict(), tmp_path / f"net{n}.pt")
    code, out, err = run_main_out(["audit-gp", str(tmp_path), "--granularity", "ieee"], capsys)
    assert code == 0, err
    assert [line.split("|")[1:3] for line in out.splitlines()[2:]] == [[" 32 ", " IEEE "], [" 16 ", " IEEE "]]
    assert default_bits(["tensor"]) == default_bits(["ieee", "layer"]) == list(DEFAULT_BITS)


def test_demo_writes_everything_under_out(tmp_path, monkeypatch, capsys):
    """INRs, checkpoints, logs and PNGs under --out, whatever folders the config names; none in the cwd."""
    import yaml

    from neuralgraph.commands.demo import DEFAULT_CONFIG

    config = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config["model"]["init_args"].update(metanet_config={"num_layers": 1, "dropout": 0.0}, reference_hidden_dim=8)
    elsewhere = tmp_path / "elsewhere"
    config["data"].update(root=str(elsewhere / "inrs"), limit_train=8, limit_val=4, limit_test=4)
    config["trainer"].update(max_epochs=1, enable_progress_bar=False, default_root_dir=str(elsewhere),
                             logger={"class_path": "lightning.pytorch.loggers.CSVLogger",
                                     "init_args": {"save_dir": str(elsewhere)}})
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(config))
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["demo", "--config", str(tmp_path / "demo.yaml"), "--k", "1", "--out", str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "demo.yaml", "out"] and not any(cwd.iterdir())
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert {"comparison_test.png", "inrs/manifest.json", "k1/checkpoints/last.ckpt",
            "k1/lightning_logs/version_0/editing_test.png", "k1/lightning_logs/version_0/metrics.csv"} <= written


def test_progress_writes_lines_not_frames_when_not_a_terminal():
    import io

    from neuralgraph.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    log, terminal = io.StringIO(), Terminal()
    for stream in (log, terminal):
        with Progress(total=200, file=stream, mininterval=0, desc="work") as bar:
            for _ in range(200):
                bar.update()
    assert "\r" in terminal.getvalue()  # a terminal still gets tqdm's frames
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and "\x1b" not in log.getvalue() and log.getvalue().endswith("\n")
    assert 1 <= len(lines) <= 201 and lines[-1].startswith("work: 100%|##########| 200/200")
    assert len(set(lines)) == len(lines)  # no line written twice
    slow = io.StringIO()  # default interval: a short bar writes its final line only
    for _ in Progress(range(1000), file=slow, desc="quick"):
        pass
    assert slow.getvalue().count("\n") == 1 and slow.getvalue().startswith("quick: 100%")
    transient = io.StringIO()  # a bar that does not stay writes nothing when it is short
    for _ in Progress(range(10), file=transient, leave=False):
        pass
    assert transient.getvalue() == ""


def test_a_zoo_bar_writes_one_line_per_shard_to_a_log(tmp_path):
    """unit_progress in a log: a line at each checkpoint() (a shard committed), none while a shard trains;
    make-cnn-zoo's own log has one line per shard."""
    import io

    from neuralgraph.progress import unit_progress

    log = io.StringIO()
    with unit_progress(total=6, file=log, desc="zoo", unit="CNN") as bar:
        for shard in range(3):
            for _ in range(2):
                bar.update()  # networks of the shard, epoch by epoch: no line
            assert log.getvalue().count("\n") == shard
            bar.checkpoint()
    lines = log.getvalue().splitlines()
    assert [line.split("|")[-1].split()[0] for line in lines] == ["2/6", "4/6", "6/6"]
    run = subprocess.run([sys.executable, "-m", "neuralgraph.cli", "make-cnn-zoo", "--out", str(tmp_path / "zoo"),
                          "--networks", "4", "--shard-size", "2", "--epochs", "1", "--train-size", "64",
                          "--test-size", "32", "--batch-size", "32", "--source", "embedded", "--channels", "4"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stdout
    bars = [line for line in run.stdout.splitlines() if line.startswith("make-cnn-zoo")]
    assert "\r" not in run.stdout and len(bars) == 2 and bars[-1].split("|")[-1].split()[0] == "4/4", run.stdout


def test_a_fit_in_a_log_is_quiet_and_writes_one_line_per_epoch(tiny_inrs, tmp_path):
    """A fit whose output goes to a file: no \\r frames, no message its user cannot act on."""
    argv = ["fit", "--model", "neuralgraph.training.tasks.InrEditing", "--model.metanet", "gmn",
            "--model.metanet_config", '{"hidden_dim": 8, "num_layers": 1}', "--data.root", str(tiny_inrs),
            "--data.batch_size", "8", "--data.limit_train", "16", "--data.limit_val", "8", "--data.limit_test", "8",
            "--trainer.max_epochs", "2", "--trainer.default_root_dir", str(tmp_path / "run"),
            "--trainer.enable_model_summary", "false"]
    run = subprocess.run([sys.executable, "-m", "neuralgraph.cli", *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stdout
    log = run.stdout
    assert "\r" not in log and "\x1b[" not in log
    for unactionable in ("tensorboardX", "litlogger", "LeafSpec", "log_every_n_steps", "configure_callbacks"):
        assert unactionable not in log, log
    epochs = [line for line in log.splitlines() if line.startswith("Epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["Epoch 0", "Epoch 1"], log
    assert all("2/2" in line and "val/loss=" in line and "train/loss=" in line for line in epochs), log
    assert len([line for line in log.splitlines() if line.startswith("Testing")]) == 1, log


def test_fast_dev_run_fits_and_tests_the_weights_it_ends_with(tiny_inrs, tmp_path, capsys):
    """A fast_dev_run writes no checkpoint: the test after fit uses the final weights (and says so)."""
    code = main(["fit", "--config", "examples/inr_editing/demo", "--data.root", str(tiny_inrs),
                 "--data.preset", "null", "--data.limit_train", "16", "--data.limit_val", "8", "--data.limit_test", "8",
                 "--trainer.fast_dev_run", "true", "--trainer.default_root_dir", str(tmp_path / "run")])
    assert code == 0
    assert "testing the weights the run ends with" in capsys.readouterr().out
    assert (tmp_path / "run" / "editing_test.png").is_file()
