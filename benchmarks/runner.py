"""What the benchmarks share: the ``neuralgraph fit`` arguments of one run, and the child process
that fits, tests at the best-validation checkpoint and records what every result table reports.

A benchmark script runs each (architecture, seed) in a child process of its own (so that its peak
memory is its own) and builds the task-specific result from :func:`fit_and_record`.
"""
from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import torch

from machine import cpu_short


def fit_arguments(config: Path, seed: int, data_root: Path, out: Path, metanet: str, metanet_config: dict,
                  data: dict, trainer: dict, model: dict | None = None) -> list[str]:
    """``neuralgraph fit`` arguments of one run, resuming from ``out``'s last checkpoint if any.

    ``data``, ``trainer`` and ``model`` (init arguments of the task) override the config file's
    entries; a ``None`` data value is passed as ``null``.
    """
    args = ["fit", "--config", str(config), "--seed_everything", str(seed),
            "--data.root", str(data_root), "--trainer.default_root_dir", str(out), "--ckpt_path", "last",
            "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(out),
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--model.init_args.metanet", metanet, "--model.init_args.metanet_config", json.dumps(metanet_config)]
    for key, value in (model or {}).items():
        args += [f"--model.init_args.{key}", str(value)]
    for key, value in data.items():
        args += [f"--data.{key}", "null" if value is None else str(value)]
    for key, value in trainer.items():
        args += [f"--trainer.{key}", str(value)]
    return args


def fit_and_record(argv: list[str]) -> tuple[dict[str, float], dict]:
    """Run ``neuralgraph fit`` (+ test at the best-validation checkpoint) in this process.

    Returns the final callback metrics and the record every table reports: best validation loss,
    trainable parameters, width, epochs, wall time, whether it resumed, peak memory, device, CPU.
    """
    from neuralgraph.nn.budget import count_trainable
    from neuralgraph.training.cli import checkpoint_dir, last_checkpoint, run_lightning_cli

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    resumed = last_checkpoint(checkpoint_dir(argv[argv.index("--trainer.default_root_dir") + 1])) is not None
    start = time.perf_counter()
    cli = run_lightning_cli(argv)
    metrics = {k: float(v) for k, v in cli.trainer.callback_metrics.items()}
    return metrics, {
        "best_val_loss": float(cli.trainer.checkpoint_callback.best_model_score),
        "parameters": count_trainable(cli.model),
        "hidden_dim": cli.model.metanet.hidden_dim,
        "epochs": cli.trainer.current_epoch,
        "wall_s": time.perf_counter() - start,
        "resumed": resumed,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_cuda_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "cpu": cpu_short(),
    }
