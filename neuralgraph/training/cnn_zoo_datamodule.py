"""Lightning data module over a CNN zoo (``neuralgraph make-cnn-zoo``), for generalization prediction."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from torch.utils.data import DataLoader

from neuralgraph.data.cnn_zoo import CnnZooDataset, ZooBatch
from neuralgraph.graph.spec import GraphSpec
from neuralgraph.training.datamodule import SPEC_SAMPLE, SPLITS, EpochSeededSampler, IndexBatchDataModule


class CnnZooDataModule(IndexBatchDataModule):
    """Zoo entries (network x checkpoint) as parameter graphs with their test accuracy.

    Args:
        root: zoo folder made by ``neuralgraph make-cnn-zoo`` or ``neuralgraph import-dataset
            small-cnn-zoo`` (a missing one is an error that names the command: training a zoo
            takes minutes, it is never started implicitly).
        batch_size, num_workers: DataLoader settings.
        split_seed: seed of the network-level train/val/test split of a ``make-cnn-zoo`` folder
            (an imported zoo keeps its source's split).
        seed: seed of the per-epoch shuffling.
    """

    def __init__(self, root: str = "data/cnn_zoo", batch_size: int = 64, num_workers: int = 0,
                 split_seed: int = 0, seed: int = 0):
        super().__init__()
        self.save_hyperparameters()
        self.hparams.root = str(Path(root).resolve())
        self.datasets: dict[str, CnnZooDataset] = {}

    def setup(self, stage: Optional[str] = None) -> None:
        for split in SPLITS:
            if split not in self.datasets:
                self.datasets[split] = CnnZooDataset(self.hparams.root, split, self.hparams.split_seed)

    def size(self, split: str) -> int:
        return len(self.datasets[split])

    def batch(self, split: str, indices: Sequence[int]) -> ZooBatch:
        """Entries ``indices`` of ``split`` as one batch, built as the loaders build theirs."""
        self.setup()
        return self.datasets[split].batch(indices)

    @property
    def spec(self) -> GraphSpec:
        """The :class:`~neuralgraph.graph.spec.GraphSpec` of the training split's first
        :data:`~neuralgraph.training.datamodule.SPEC_SAMPLE` entries."""
        self.setup()
        return GraphSpec.of(self.batch("train", range(min(SPEC_SAMPLE, self.size("train")))).graph)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        hp, size = self.hparams, self.size(split)
        return DataLoader(range(size), batch_size=hp.batch_size, sampler=EpochSeededSampler(size, hp.seed, shuffle),
                          collate_fn=self.datasets[split].batch, num_workers=hp.num_workers,
                          persistent_workers=hp.num_workers > 0)
