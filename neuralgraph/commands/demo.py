"""``neuralgraph demo``: the main job, end to end on the embedded MNIST subset.

1. fit a small MNIST-INR set from the digits shipped in the package (offline);
2. train a GMN INR editor (3x3 dilation) with k=1 and with k=4 output networks, the latter
   budget-matched to the former, through the same LightningCLI path as ``neuralgraph fit``;
3. test both at their best-validation checkpoint, print the MSEs side by side and write the
   PNG grids: each run's (input | target | OCE average | members) and ``comparison_test.png``
   (input | target | each run's output), the same test INRs in every row.

Sizes come from ``neuralgraph/configs/examples/inr_editing/demo.yaml`` (the shipped config
``examples/inr_editing/demo``), package data installed with the wheel (or
``--config``, a file or a shipped config's name, whose ``reference_hidden_dim`` sets the k=1 width
and the budget of every k); numbers are whatever the run gives. Everything the demo writes lies
under ``--out``: the INRs in ``OUT/inrs`` (the config's ``data.root`` is replaced), each run's
checkpoints and logs in ``OUT/k<k>`` (its ``trainer.default_root_dir``, and its logger's
``save_dir`` when the config names one), the side-by-side grid in ``OUT/comparison_test.png``.
"""
from __future__ import annotations

import argparse
import time
from importlib.resources import files
from pathlib import Path

from neuralgraph.commands import output_folder, positive_int

#: The shipped config the demo runs by default, by name and as a file.
DEFAULT_CONFIG_NAME = "examples/inr_editing/demo"
DEFAULT_CONFIG = Path(str(files("neuralgraph") / "configs" / f"{DEFAULT_CONFIG_NAME}.yaml"))


def config_file(text: str) -> Path:
    """argparse type of ``--config``.

    Args:
        text: a file, or the name of a shipped config (``neuralgraph configs``).

    Returns:
        The config file.

    Raises:
        argparse.ArgumentTypeError: ``text`` is neither (with the closest shipped names).
    """
    from neuralgraph.commands.configs import resolve_config

    try:
        return resolve_config(text, option="")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).lstrip()) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the command's arguments.

    Args:
        parser: the ``neuralgraph demo`` parser.
    """
    parser.add_argument("--config", type=config_file, default=DEFAULT_CONFIG_NAME,
                        help="LightningCLI config of the runs (a file or a shipped config's name); its "
                             "reference_hidden_dim is the k=1 width and budget")
    parser.add_argument("--k", type=positive_int, nargs="+", default=[1, 4], help="numbers of output networks to compare")
    parser.add_argument("--out", type=output_folder, default="runs/demo",
                        help="folder of everything the demo writes: INRs (OUT/inrs), runs (OUT/k<k>), PNGs")
    parser.add_argument("--max-epochs", type=positive_int, help="override the config's trainer.max_epochs")


def output_arguments(config: Path, out: Path, k: int) -> list[str]:
    """The LightningCLI arguments that put everything one run writes under ``out``.

    Args:
        config: the config of the run (read for the logger it names, if any).
        out: the demo's ``--out``.
        k: the run's number of output networks.

    Returns:
        Arguments setting the INRs' folder to ``out/inrs`` and ``trainer.default_root_dir`` (and
        the ``save_dir`` of a logger the config names) to ``out/k<k>``.

    Raises:
        ValueError: ``config`` is not YAML.
    """
    import yaml

    run_dir = str(out / f"k{k}")
    argv = ["--data.init_args.root", str(out / "inrs"), "--trainer.default_root_dir", run_dir]
    try:
        settings = yaml.safe_load(config.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"--config {config}: not a YAML file ({err})") from None
    trainer = settings.get("trainer") if isinstance(settings, dict) else None
    logger = trainer.get("logger") if isinstance(trainer, dict) else None
    if isinstance(logger, dict) and "class_path" in logger:
        argv += ["--trainer.logger.init_args.save_dir", run_dir]
    return argv


def run(args: argparse.Namespace) -> int:
    """Runs the demo: one fit and test per ``--k``, the table of their test metrics, the PNG grids.

    Args:
        args: the parsed command line.

    Returns:
        The exit status, 0.
    """
    from neuralgraph.training.callbacks import EditingGrid
    from neuralgraph.training.cli import run_lightning_cli
    from neuralgraph.training.visualize import save_image_grid

    rows, outputs = [], []
    for k in args.k:
        argv = ["fit", "--config", str(args.config), "--model.init_args.k", str(k),
                *output_arguments(args.config, args.out, k)]
        if args.max_epochs is not None:
            argv += ["--trainer.max_epochs", str(args.max_epochs)]
        print(f"\n=== GMN INR editor, k={k} ===")
        start = time.perf_counter()
        cli = run_lightning_cli(argv)
        metrics = cli.trainer.callback_metrics
        [grid] = [callback.written["test"] for callback in cli.trainer.callbacks if isinstance(callback, EditingGrid)]
        outputs.append((f"k={k}" if k == 1 else f"k={k} avg", grid))
        rows.append({
            "k": k,
            "hidden_dim": cli.model.metanet.hidden_dim,
            "parameters": sum(p.numel() for p in cli.model.parameters() if p.requires_grad),
            "epochs": cli.trainer.current_epoch,
            "test_mse_x1e-2": float(metrics["test/mse"]) * 100,
            "test_psnr": float(metrics["test/psnr"]),
            "minutes": (time.perf_counter() - start) / 60,
            "grid": Path(cli.trainer.log_dir) / "editing_test.png",
        })
    print("\n| k | hidden_dim | parameters | epochs | test MSE x1e-2 | test PSNR (dB) | minutes |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['k']} | {r['hidden_dim']} | {r['parameters']:,} | {r['epochs']} | {r['test_mse_x1e-2']:.3f} "
              f"| {r['test_psnr']:.2f} | {r['minutes']:.1f} |")
    for r in rows:
        print(f"k={r['k']} grid: {r['grid']}")
    first = outputs[0][1]
    columns = [("input", first["inputs"]), ("target", first["target"])] + [
        (name, grid["prediction"]) for name, grid in outputs]
    print(f"side by side: {save_image_grid(args.out / 'comparison_test.png', columns)}")
    return 0
