"""Lightning's progress bar for logs: lines, not ``\\r`` frames, when stdout is not a terminal.

:class:`LineProgressBar` is Lightning's :class:`~lightning.pytorch.callbacks.TQDMProgressBar` whose
bars are :class:`~neuralgraph.progress.Progress` bars: in a log, one line per epoch (its last
state, with the epoch's metrics), one per test or prediction run, and one every
:data:`~neuralgraph.progress.LINE_INTERVAL` seconds within a long epoch; on a terminal, the usual
bars. :class:`LinesWhenNotATerminal` puts it in place of Lightning's default bar when stdout is
not a terminal, so that ``--trainer.enable_progress_bar false`` and a progress bar of the user's
own choosing keep working.
"""
from __future__ import annotations

import sys

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from neuralgraph.progress import Progress, is_terminal


class LightningProgress(Progress, Tqdm):
    """A :class:`~neuralgraph.progress.Progress` bar with Lightning's number padding."""


class LineProgressBar(TQDMProgressBar):
    """:class:`~lightning.pytorch.callbacks.TQDMProgressBar` drawing :class:`LightningProgress` bars."""

    def _bar(self, desc: str, leave: bool, position: int = 0, **kwargs) -> LightningProgress:
        return LightningProgress(desc=desc, position=2 * self.process_position + position, disable=self.is_disabled,
                                 leave=leave, file=sys.stdout, bar_format=self.BAR_FORMAT, **kwargs)

    def init_sanity_tqdm(self) -> LightningProgress:
        return self._bar(self.sanity_check_description, leave=False)

    def init_train_tqdm(self) -> LightningProgress:
        return self._bar(self.train_description, leave=True, smoothing=0)

    def init_predict_tqdm(self) -> LightningProgress:
        return self._bar(self.predict_description, leave=True, smoothing=0)

    def init_validation_tqdm(self) -> LightningProgress:
        has_main_bar = self.trainer.state.fn != "validate"  # no training bar in `validate`
        return self._bar(self.validation_description, leave=not has_main_bar, position=int(has_main_bar))

    def init_test_tqdm(self) -> LightningProgress:
        return self._bar(self.test_description, leave=True)


class LinesWhenNotATerminal(L.Callback):
    """Replaces Lightning's default :class:`~lightning.pytorch.callbacks.TQDMProgressBar` by a
    :class:`LineProgressBar` of the same settings when stdout is not a terminal.

    A trainer default rather than a progress bar callback: Lightning refuses a progress bar
    callback together with ``enable_progress_bar=False``, and adds its own bar only when none is
    given. Any other progress bar (a subclass, a ``RichProgressBar``) is left alone.
    """

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if is_terminal(sys.stdout):
            return
        for i, callback in enumerate(trainer.callbacks):
            if type(callback) is TQDMProgressBar:
                bar = LineProgressBar(refresh_rate=callback.refresh_rate, process_position=callback.process_position,
                                      leave=callback._leave)
                bar.setup(trainer, pl_module, stage)
                trainer.callbacks[i] = bar
