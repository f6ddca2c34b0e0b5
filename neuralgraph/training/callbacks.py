"""What a run does around the training loop, as Lightning callbacks: encoder input statistics
before fitting, PNG grids of INR edits, predictions written to safetensors.

The task and the data module never call each other: a callback reads the batches the loops
already made (grids, predictions) or asks the data module for one batch (statistics).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter, Callback
from safetensors.torch import save_file
from torch import Tensor

from neuralgraph.data.inr_dataset import InrBatch
from neuralgraph.graph.blocks import batch_mlps
from neuralgraph.inr import render
from neuralgraph.training.visualize import save_editing_grid


class InputStatistics(Callback):
    """Before a fit from scratch, standardise the encoder's inputs with the first ``count`` training INRs.

    The per-layer mean and std (:meth:`~neuralgraph.nn.encoder.GraphEncoder.set_input_statistics`)
    become buffers of the model, so checkpoints carry them; a resumed fit keeps the checkpoint's.
    Needs a data module with ``batch(split, indices)`` and ``size(split)``
    (:class:`~neuralgraph.training.datamodule.MnistInrDataModule`).

    Args:
        count: the most training INRs the statistics are computed from.
    """

    def __init__(self, count: int = 10_000):
        self.count = count

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or trainer.ckpt_path is not None:
            return
        datamodule = trainer.datamodule
        if not (hasattr(datamodule, "batch") and hasattr(datamodule, "size")):
            raise ValueError(f"{type(pl_module).__name__}(normalize_inputs=True) needs a data module with "
                             f"batch(split, indices) and size(split), got {type(datamodule).__name__}")
        datamodule.setup("fit")
        sample = datamodule.batch("train", range(min(self.count, datamodule.size("train"))))
        pl_module.metanet.encoder.set_input_statistics(sample.graph)


class EditingGrid(Callback):
    """``editing_val.png`` at the end of a fit and ``editing_test.png`` at the end of a test, in the log dir.

    Rows are the first ``rows`` INRs of the stage's first batch (the split's first INRs: the
    val and test loaders do not shuffle), as the model saw them in the loop; columns are
    input | target | OCE average | members (:func:`~neuralgraph.training.visualize.editing_grid`).
    The val grid shows the last validation epoch; no validation, no val grid. ``written[stage]``
    keeps the tensors of the grid last written (``neuralgraph demo`` sets runs side by side).

    Args:
        rows: INRs shown, one per row.
    """

    def __init__(self, rows: int = 6):
        self.rows = rows
        self.first: dict[str, dict[str, Tensor]] = {}
        self.written: dict[str, dict[str, Tensor]] = {}

    def _keep(self, trainer: L.Trainer, stage: str, outputs: Any, batch: InrBatch, batch_idx: int,
              dataloader_idx: int) -> None:
        if batch_idx == 0 and dataloader_idx == 0 and trainer.is_global_zero and not trainer.sanity_checking:
            weights, biases = batch_mlps(batch.graph, batch.blocks)
            inputs = render([w[:self.rows] for w in weights], [b[:self.rows] for b in biases],
                            tuple(batch.image.shape[-2:]), trainer.lightning_module.siren_convention)
            grid = {"inputs": inputs} | {key: outputs[key][:self.rows] for key in ("prediction", "members", "target")}
            self.first[stage] = {key: value.detach().cpu() for key, value in grid.items()}

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._keep(trainer, "val", outputs, batch, batch_idx, dataloader_idx)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self._keep(trainer, "test", outputs, batch, batch_idx, dataloader_idx)

    def _write(self, trainer: L.Trainer, stage: str) -> Optional[Path]:
        # a collective under DDP: every rank asks; without a logger (fast_dev_run) the run's root folder
        log_dir = Path(trainer.log_dir or trainer.default_root_dir)
        grid = self.first.pop(stage, None)
        if grid is None:
            return None
        path = save_editing_grid(log_dir / f"editing_{stage}.png", grid["inputs"], grid["prediction"],
                                 grid["members"], grid["target"])
        self.written[stage] = grid
        print(f"wrote {path}")
        return path

    def on_fit_end(self, trainer, pl_module) -> None:
        self._write(trainer, "val")

    def on_test_end(self, trainer, pl_module) -> None:
        self._write(trainer, "test")


class PredictionWriter(BasePredictionWriter):
    """Every output of ``predict``, concatenated over batches, to ``predictions.safetensors`` in the log dir.

    Rows follow the ``index`` output (the INR's position in its split). Under DDP each rank
    writes its share to ``predictions-rank<r>.safetensors``.
    """

    def __init__(self):
        super().__init__(write_interval="epoch")

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices) -> None:
        if not predictions:
            return
        name = "predictions" + (f"-rank{trainer.global_rank}" if trainer.world_size > 1 else "")
        path = Path(trainer.log_dir or trainer.default_root_dir) / f"{name}.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        tensors = {key: torch.cat([batch[key] for batch in predictions]).contiguous().cpu() for key in predictions[0]}
        save_file(tensors, str(path))
        print(f"wrote {path}: " + ", ".join(f"{key} {tuple(value.shape)}" for key, value in tensors.items()))
