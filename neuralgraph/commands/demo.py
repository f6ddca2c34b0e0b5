"""``neuralgraph demo``: the main job, end to end on the embedded MNIST subset.

1. fit a small MNIST-INR set from the digits shipped in the package (offline);
2. train a GMN INR editor (3x3 dilation) with k=1 and with k=4 output networks, the latter
   budget-matched to the former, through the same LightningCLI path as ``neuralgraph fit``;
3. test both at their best-validation checkpoint, print the MSEs side by side and write the
   PNG grids: each run's (input | target | OCE average | members) and ``comparison_test.png``
   (input | target | each run's output), the same test INRs in every row.

Sizes come from ``neuralgraph/configs/demo.yaml``, package data installed with the wheel (or
``--config``, whose ``reference_hidden_dim`` sets the k=1 width and the budget of every k);
numbers are whatever the run gives.
"""
from __future__ import annotations

import argparse
import time
from importlib.resources import files
from pathlib import Path

from neuralgraph.commands import positive_int

DEFAULT_CONFIG = Path(str(files("neuralgraph") / "configs" / "demo.yaml"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG,
                        help="LightningCLI config of the runs; its reference_hidden_dim is the k=1 width and budget")
    parser.add_argument("--k", type=positive_int, nargs="+", default=[1, 4], help="numbers of output networks to compare")
    parser.add_argument("--out", type=Path, default=Path("runs/demo"), help="folder for logs, checkpoints, PNGs")
    parser.add_argument("--max-epochs", type=positive_int, help="override the config's trainer.max_epochs")


def run(args: argparse.Namespace) -> int:
    from neuralgraph.training.callbacks import EditingGrid
    from neuralgraph.training.cli import run_lightning_cli
    from neuralgraph.training.visualize import save_image_grid

    if not args.config.is_file():
        raise ValueError(f"--config {args.config}: no such file")
    rows, outputs = [], []
    for k in args.k:
        argv = ["fit", "--config", str(args.config), "--model.init_args.k", str(k),
                "--trainer.default_root_dir", str(args.out / f"k{k}")]
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
