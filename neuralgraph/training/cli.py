"""``neuralgraph fit|validate|test|predict``: LightningCLI over the tasks and the INR data module.

Differences from a bare LightningCLI, all in the spirit of the paper's protocol:

* ``fit`` ends with ``test`` at the best-validation checkpoint (``--test_after_fit false``
  turns it off), so reported test metrics are never a minimum over test epochs;
* checkpoints: the best by ``val/loss`` and ``last.ckpt``, in ``<default_root_dir>/checkpoints``,
  outside the logger's ``version_N`` folders, so rerunning a killed ``fit`` with
  ``--ckpt_path last`` finds and resumes its newest ``last*.ckpt``;
* ``validate``/``test``/``predict`` refuse to run without a checkpoint (a file, or ``last``), and
  a checkpoint of another task or architecture is refused with the field that differs;
* ``predict`` writes every output of the test split to ``predictions.safetensors`` in the log dir
  (:class:`~neuralgraph.training.callbacks.PredictionWriter`);
* Lightning's default logger: CSV, or TensorBoard when it is installed, under
  ``trainer.default_root_dir``; ``seed_everything`` defaults to 0;
* quiet: Lightning's messages that a user of this command cannot act on are dropped (below), its
  own warnings are kept; when stdout is not a terminal (a log), the progress bar writes one line
  per epoch instead of a ``\\r`` frame per batch (:mod:`neuralgraph.training.progress`).
"""
from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Optional

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from neuralgraph.commands import load_torch_file, one_line
from neuralgraph.graph.spec import GraphSpec
from neuralgraph.training import callbacks as neuralgraph_callbacks
from neuralgraph.training.callbacks import PredictionWriter
from neuralgraph.training.datamodule import MnistInrDataModule
from neuralgraph.training.progress import LinesWhenNotATerminal
from neuralgraph.training.tasks import MetanetTask, check_checkpoint

# We pass ``args`` on purpose (the `neuralgraph` entry point parses sys.argv itself); the seed is
# in each run's config.yaml, and an error before any work stays one line without "Seed set to 0".
warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended", category=UserWarning)
logging.getLogger("lightning.fabric.utilities.seed").setLevel(logging.WARNING)

# What every run printed that its user cannot act on (the package's choices, or Lightning's and
# torch's internals); Lightning's other warnings and messages are kept.
# - without tensorboard, Lightning's default logger is CSV (as documented above), with a notice;
warnings.filterwarnings("ignore", message=r"Starting from v1\.9\.0, `tensorboardX` has been removed")
# - Lightning 2.6's own pytree helper uses LeafSpec, which torch 2.13 deprecates;
warnings.filterwarnings("ignore", message=re.escape("`isinstance(treespec, LeafSpec)` is deprecated"),
                        category=FutureWarning)
# - an epoch shorter than log_every_n_steps logs no per-step training loss; the tasks log every
#   metric per epoch as well, so nothing is missing from the logs (a small dataset is no mistake).
warnings.filterwarnings("ignore", message=r"The number of training batches \(\d+\) is smaller than the logging "
                        r"interval Trainer\(log_every_n_steps=")


class DropUnactionableInfo(logging.Filter):
    """Drops two of Lightning's info messages: its tips advertising its cloud services, and the note
    that ``configure_callbacks`` overrides callbacks when they are all this package's own (the tasks
    return them, and the test that ends a fit attaches them again)."""

    OVERRIDE = "The following callbacks returned in `LightningModule.configure_callbacks` will override"

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("\N{ELECTRIC LIGHT BULB} Tip:"):
            return False
        if message.startswith(self.OVERRIDE):
            names = message.rsplit(":", 1)[-1].replace(",", " ").split()
            return not all(isinstance(getattr(neuralgraph_callbacks, name, None), type) for name in names)
        return True


for _name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
    logging.getLogger(_name).addFilter(DropUnactionableInfo())


def checkpoint_dir(default_root_dir: Optional[str]) -> Path:
    """Checkpoint folder of the runs under ``default_root_dir`` (the working directory when None).

    The folder lies outside the logger's ``version_N`` folders, so that ``--ckpt_path last`` of a
    rerun finds the checkpoints of the run it resumes.

    Args:
        default_root_dir: the trainer's ``default_root_dir``, or None for the working directory.

    Returns:
        The absolute path of ``<default_root_dir>/checkpoints`` (not created here).
    """
    return Path(default_root_dir or os.getcwd()).resolve() / "checkpoints"


def last_checkpoint(folder: Path) -> Optional[Path]:
    """The newest ``last*.ckpt`` of ``folder`` (Lightning's rule for ``ckpt_path="last"``), if any.

    Args:
        folder: a checkpoint folder, as :func:`checkpoint_dir` names it (it may not exist).

    Returns:
        The ``last*.ckpt`` file modified last, or None when there is none.
    """
    candidates = [p for p in folder.glob("last*.ckpt") if p.is_file()]
    return max(candidates, key=lambda p: p.stat().st_mtime_ns, default=None)


def forbid_building(config, subcommand: str) -> None:
    """``validate``/``test``/``predict`` read data and never make it: a data module's ``build``
    option is set to ``False`` (asking for ``true`` is an error), so a missing ``--data.root`` is a
    one-line error that creates nothing.

    Args:
        config: the parsed config of the subcommand; its ``data.init_args`` is edited in place.
        subcommand: the verb (``validate``, ``test`` or ``predict``), named in the error.

    Raises:
        ValueError: the config asks for ``--data.build true``.
    """
    init_args = config["data"].get("init_args") if config.get("data") else None
    if init_args is None or "build" not in init_args:
        return
    if init_args["build"]:
        raise ValueError(f"--data.build true: `{subcommand}` never builds data; make it with `neuralgraph fit "
                         "--data.build true` or `neuralgraph make-inrs` first")
    init_args["build"] = False


class OneLineArgumentParser(LightningArgumentParser):
    """Parse errors as one line (``neuralgraph fit: error: ...``, exit code 2), not a usage dump."""

    def error(self, message: str, ex: Optional[Exception] = None):
        if not self.exit_on_error:  # jsonargparse probing alternatives: it catches the exception
            super().error(message, ex)
        prog = self.prog.replace(" [options]", "")
        sys.stderr.write(f"{prog}: error: {one_line(message)} (see {prog} --help)\n")
        raise SystemExit(2)


class NeuralgraphCLI(LightningCLI):
    """LightningCLI with the package's protocol (module docstring), built by :func:`run_lightning_cli`.

    What it adds over LightningCLI: a config's ``data:`` without ``class_path`` is the INR data module;
    the data module's :class:`~neuralgraph.graph.spec.GraphSpec` reaches the model's ``spec``;
    ``--test_after_fit`` tests at the best-validation checkpoint after ``fit``; ``--ckpt_path`` is
    resolved (``last``) and checked against the configured task and model before anything is built;
    checkpoints are written to :func:`checkpoint_dir`. Its constructor is LightningCLI's.
    """

    def add_arguments_to_parser(self, parser) -> None:
        # a config's `data:` without class_path configures the INR data module
        parser.set_defaults({"data": {"class_path": f"{MnistInrDataModule.__module__}.{MnistInrDataModule.__name__}"}})
        parser.add_argument("--test_after_fit", type=bool, default=True,
                            help="after fit, test at the best-validation checkpoint")
        # the data's facts reach the model: GraphSpec of the training split, read when the data
        # module is built (the INRs are fitted then if missing) and stored with the model's hparams
        parser.link_arguments("data.spec", "model.init_args.spec", compute_fn=GraphSpec.to_dict,
                              apply_on="instantiate")

    def parse_arguments(self, parser: LightningArgumentParser, args) -> None:
        """Parse, then resolve ``--ckpt_path`` to a file before anything is built and check it fits.

        ``last`` is the newest ``last*.ckpt`` in :func:`checkpoint_dir`; a ``fit`` without one starts
        from scratch (so one command both starts and resumes a run), the other verbs refuse. A
        checkpoint of another task or model is refused (:func:`~neuralgraph.training.tasks.check_checkpoint`):
        LightningCLI would silently replace the configured model by the checkpoint's
        (`test --config dws.yaml --ckpt_path gmn.ckpt` would test GMN). This must happen here, in the
        public override point that runs before LightningCLI reads the checkpoint's hyperparameters
        (``before_instantiate_classes`` comes after that read, too late for ``last`` and the check).
        """
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        if not subcommand:
            return
        config = self.config[subcommand]
        if subcommand != "fit":
            forbid_building(config, subcommand)
        ckpt_path = config.get("ckpt_path")
        if ckpt_path == "last":
            folder = checkpoint_dir(config.trainer.default_root_dir)
            found = last_checkpoint(folder)
            if found is None and subcommand != "fit":
                raise ValueError(f"--ckpt_path last: no last*.ckpt in {folder}")
            print(f"--ckpt_path last: resuming from {found}" if found else
                  f"--ckpt_path last: no last*.ckpt in {folder} yet, fitting from the start")
            ckpt_path = config["ckpt_path"] = found and str(found)
            # resuming into the folder the checkpoint came from is the point, not a mistake
            warnings.filterwarnings("ignore", message=f"Checkpoint directory {folder} exists and is not empty")
        elif ckpt_path == "best":
            raise ValueError("--ckpt_path best: only known inside the fit that wrote it; pass a checkpoint file "
                             "(best-epoch=N.ckpt) or 'last'")
        elif ckpt_path is None and subcommand != "fit":
            raise ValueError(f"`{subcommand}` needs --ckpt_path: a checkpoint file, or 'last' for the newest "
                             f"last*.ckpt in {checkpoint_dir(config.trainer.default_root_dir)}")
        if ckpt_path is not None:
            model = config["model"]
            init_args = model.get("init_args")
            requested = init_args.as_dict() if hasattr(init_args, "as_dict") else dict(init_args or {})
            task = str(model.get("class_path", "")).rsplit(".", 1)[-1] or None
            check_checkpoint(load_torch_file(ckpt_path), task, requested, ckpt_path)

    def instantiate_trainer(self, **kwargs):
        trainer = super().instantiate_trainer(**kwargs)
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, ModelCheckpoint) and callback.dirpath is None:
                callback.dirpath = str(checkpoint_dir(trainer.default_root_dir))
        return trainer

    def after_fit(self) -> None:
        """Test at the best-validation checkpoint (``--test_after_fit``); a ``fast_dev_run``, which
        writes no checkpoint, tests the weights it ends with and says so."""
        if not self.config[self.subcommand].get("test_after_fit", True):
            return
        if self.trainer.fast_dev_run:
            print("fast_dev_run wrote no checkpoint: testing the weights the run ends with")
            self.trainer.test(self.model, datamodule=self.datamodule)
            return
        self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path="best")


def run_lightning_cli(argv: list[str], run: bool = True) -> NeuralgraphCLI:
    """Runs a Lightning verb with neuralgraph's defaults (module docstring).

    Args:
        argv: the verb (fit, validate, test or predict), then LightningCLI's arguments; with
            ``run=False`` the arguments alone (the verb's own, such as ``--ckpt_path``, excluded).
        run: run the verb; False builds the trainer, model and data module and stops there.

    Returns:
        The finished CLI, whose ``trainer``, ``model`` and ``datamodule`` are those of the run.
    """
    return NeuralgraphCLI(
        MetanetTask,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        seed_everything_default=int(os.environ.get("NEURALGRAPH_SEED", 0)),
        trainer_defaults={
            "max_epochs": 150,
            "deterministic": "warn",
            "callbacks": [ModelCheckpoint(monitor="val/loss", mode="min", save_last=True, filename="best-{epoch}"),
                          PredictionWriter(), LinesWhenNotATerminal()],
        },
        args=argv,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={"default_env": False, "prog": "neuralgraph"},
        parser_class=OneLineArgumentParser,
        run=run,
    )
