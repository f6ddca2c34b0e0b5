"""``neuralgraph fit|validate|test|predict``: LightningCLI over the tasks and the INR data module.

Differences from a bare LightningCLI, all in the spirit of the paper's protocol:

* ``fit`` ends with ``test`` at the best-validation checkpoint (``--test_after_fit false``
  turns it off), so reported test metrics are never a minimum over test epochs;
* checkpoints: the best by ``val/loss`` and ``last.ckpt`` (resume with ``--ckpt_path last``);
* Lightning's default logger: CSV, or TensorBoard when it is installed, under
  ``trainer.default_root_dir``; ``seed_everything`` defaults to 0.
"""
from __future__ import annotations

import os

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI

from neuralgraph.training.datamodule import MnistInrDataModule
from neuralgraph.training.tasks import MetanetTask


class NeuralgraphCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--test_after_fit", type=bool, default=True,
                            help="after fit, test at the best-validation checkpoint")

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
