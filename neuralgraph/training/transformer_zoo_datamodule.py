"""Lightning data module over a transformer zoo (``neuralgraph make-transformer-zoo``), for generalization prediction."""
from __future__ import annotations

from typing import Optional

from neuralgraph.data.transformer_zoo import TransformerZooDataset
from neuralgraph.training.cnn_zoo_datamodule import CnnZooDataModule
from neuralgraph.training.datamodule import SPLITS


class TransformerZooDataModule(CnnZooDataModule):
    """Zoo entries (ViT x checkpoint) as parameter graphs with their test accuracy.

    The options, split, loaders and ``spec`` of :class:`~neuralgraph.training.cnn_zoo_datamodule.CnnZooDataModule`;
    each split is a :class:`~neuralgraph.data.transformer_zoo.TransformerZooDataset`, whose graphs are
    converted once, on the first batch of the split (the spec's, at the latest).

    Args:
        root: zoo folder made by ``neuralgraph make-transformer-zoo``.
        batch_size, num_workers: DataLoader settings.
        split_seed: seed of the network-level train/val/test split.
        seed: seed of the per-epoch shuffling.
    """

    def __init__(self, root: str = "data/transformer_zoo", batch_size: int = 64, num_workers: int = 0,
                 split_seed: int = 0, seed: int = 0):
        super().__init__(root, batch_size, num_workers, split_seed, seed)

    def setup(self, stage: Optional[str] = None) -> None:
        for split in SPLITS:
            if split not in self.datasets:
                self.datasets[split] = TransformerZooDataset(self.hparams.root, split, self.hparams.split_seed)
