"""``neuralgraph fit|validate|test|predict``: LightningCLI over the tasks and the INR data module.

Differences from a bare LightningCLI, all in the spirit of the paper's protocol:

* ``fit`` ends with ``test`` at the best-validation checkpoint (``--test_after_fit false``
  turns it off), so reported test metrics are never a minimum over test epochs;
* checkpoints: the best by ``val/loss`` and ``last.ckpt`` (resume with ``--ckpt_path last``);
* ``predict`` writes every output of the test split to ``predictions.safetensors`` in the log dir;
* Lightning's default logger: CSV, or TensorBoard when it is installed, under
  ``trainer.default_root_dir``; ``seed_everything`` defaults to 0.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import save_file

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI

from neuralgraph.training.datamodule import MnistInrDataModule
from neuralgraph.training.tasks import MetanetTask


ARCHITECTURE_ARGUMENTS = ("metanet", "metanet_config", "k", "match_budget", "num_classes", "num_weight_layers")


def check_checkpoint_matches(ckpt_path: Path, model_config) -> None:
    """ValueError naming what differs when ``ckpt_path`` holds another task or architecture."""
    checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    saved = checkpoint.get("neuralgraph_task")
    if saved is None:
        raise ValueError(f"{ckpt_path}: not a neuralgraph checkpoint (no 'neuralgraph_task' entry)")
    task = str(model_config.get("class_path", "")).rsplit(".", 1)[-1]
    if task and task != saved["task"]:
        raise ValueError(f"{ckpt_path}: holds a {saved['task']} checkpoint, but the configuration builds {task}")
    hparams = checkpoint.get("hyper_parameters", {})
    requested = model_config.get("init_args") or {}
    for key in ARCHITECTURE_ARGUMENTS:
        if key in hparams and key in requested and requested[key] != hparams[key]:
            raise ValueError(f"{ckpt_path}: checkpoint has {key}={hparams[key]!r}, "
                             f"but the configuration asks for {key}={requested[key]!r}")


class NeuralgraphCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--test_after_fit", type=bool, default=True,
                            help="after fit, test at the best-validation checkpoint")

    def _parse_ckpt_path(self) -> None:
        # LightningCLI replaces the model configuration by the checkpoint's hyperparameters,
        # silently: `test --config dws.yaml --ckpt_path gmn.ckpt` would test GMN. Refuse instead.
        subcommand = self.config.get("subcommand")
        ckpt_path = subcommand and self.config[subcommand].get("ckpt_path")
        if ckpt_path and Path(ckpt_path).is_file():
            check_checkpoint_matches(Path(ckpt_path), self.config[subcommand]["model"])
        super()._parse_ckpt_path()

    def after_predict(self) -> None:
        """Write the predictions (each output concatenated over batches) next to the logs."""
        batches = self.trainer.predict_loop.predictions
        if not batches or not self.trainer.is_global_zero:
            return
        path = Path(self.trainer.log_dir or self.trainer.default_root_dir) / "predictions.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({key: torch.cat([b[key] for b in batches]).contiguous().cpu() for key in batches[0]}, str(path))
        print(f"wrote {path}: " + ", ".join(f"{key} {tuple(torch.cat([b[key] for b in batches]).shape)}"
                                            for key in batches[0]))

    def after_fit(self) -> None:
        if self.config[self.subcommand].get("test_after_fit", True):
            self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path="best")


def run_lightning_cli(argv: list[str]) -> NeuralgraphCLI:
    """Run a Lightning verb (``argv[0]`` in fit/validate/test/predict) with neuralgraph defaults."""
    return NeuralgraphCLI(
        MetanetTask,
        MnistInrDataModule,
        subclass_mode_model=True,
        seed_everything_default=int(os.environ.get("NEURALGRAPH_SEED", 0)),
        trainer_defaults={
            "max_epochs": 150,
            "deterministic": "warn",
            "callbacks": [ModelCheckpoint(monitor="val/loss", mode="min", save_last=True, filename="best-{epoch}")],
        },
        args=argv,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={"default_env": False},
    )
