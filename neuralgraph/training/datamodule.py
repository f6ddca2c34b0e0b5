"""Lightning data module over the MNIST-INR dataset: builds it on first use, batches to PyG.

The loaders draw index lists, and ``InrDataset.batch`` turns each into an ``InrBatch`` (no
per-INR ``Data`` objects: one batched :func:`~neuralgraph.graph.mlp_to_graph` per batch).
Shuffling is seeded per epoch (``seed + epoch``), so a run resumed from a checkpoint sees the
same batches as an uninterrupted one.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Optional, Sequence

import lightning as L
import torch
from torch.utils.data import DataLoader, Sampler

from neuralgraph.data.inr_dataset import InrBatch
from neuralgraph.data.shards import SPLITS
from neuralgraph.inr.augment import InrAugmentation
from neuralgraph.graph.spec import GraphSpec

#: Training networks a data module's :class:`~neuralgraph.graph.spec.GraphSpec` is read from.
SPEC_SAMPLE = 512



class EpochSeededSampler(Sampler[int]):
    """A permutation of ``range(size)`` drawn from ``seed + epoch`` (Lightning calls ``set_epoch``).

    Seeding by epoch rather than by a running generator makes a run resumed from a checkpoint draw
    the batches an uninterrupted run draws.

    Args:
        size: the number of indices.
        seed: the base seed.
        shuffle: whether to permute; without it the indices come in order.
    """

    def __init__(self, size: int, seed: int, shuffle: bool = True):
        self.size, self.seed, self.shuffle, self.epoch = size, seed, shuffle, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        if not self.shuffle:
            return iter(range(self.size))
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(torch.randperm(self.size, generator=generator).tolist())

    def __len__(self) -> int:
        return self.size


def split_ready(root: Path, split: str) -> bool:
    """Whether ``root`` holds a complete ``split`` (made by ``make-inrs`` with any limit, or imported).

    Args:
        root: the dataset folder.
        split: a split name.

    Returns:
        True when the manifest lists the split with every one of its shards.
    """
    from neuralgraph.data.generate import INR_FOLDER
    from neuralgraph.data.shards import MANIFEST, read_manifest

    if not (root / MANIFEST).exists():
        return False
    entry = read_manifest(root, INR_FOLDER)["splits"].get(split)
    return entry is not None and sum(s["count"] for s in entry["shards"]) == entry["count"]


class IndexBatchDataModule(L.LightningDataModule):
    """Loaders over index lists that the data module's ``_loader(split, shuffle)`` batches
    (training shuffled per epoch, the others in order; predict reads the test split)."""

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        raise NotImplementedError

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)


class MnistInrDataModule(IndexBatchDataModule):
    """MNIST INRs (SIREN 2-32-32-1) with images and labels, for every task of the package.

    Args:
        root: dataset folder (shards + manifest). A folder written by ``make-inrs`` or
            ``import-dataset`` is used as it is (its source's convention and splits).
        source: ``"full"`` MNIST (``NEURALGRAPH_MNIST``, the user cache, or a verified download)
            or ``"embedded"``, the subset shipped with the package.
        build: whether a split missing from ``root`` (or unfinished) is fitted here, by the
            ``make-inrs`` machinery with ``limit_<split>`` INRs (a message and a progress bar
            say so). ``None`` (the default) builds only the embedded subset (minutes) and refuses
            the full MNIST (hours: run ``neuralgraph make-inrs`` or pass ``--data.build true``);
            ``False`` never builds (``neuralgraph test/validate/predict`` set it). A missing
            data set that is not built is a one-line error and nothing is created.
        batch_size, num_workers: DataLoader settings.
        limit_train, limit_val, limit_test: use the first N INRs of a split (None: all there
            are). Limits are prefixes, so a small run on a large folder sees the same first INRs.
        permutation_augmentation: permute each training INR's hidden neurons at random.
        augmentation: move, turn and zoom the image of each training INR and drop 1% of its
            weights (:mod:`neuralgraph.inr.augment`: the training augmentation of DWSNets and
            neural-graphs); its batches carry labels, not images, so editing tasks refuse it.
        seed: seed of the per-epoch shuffling.
        preset: INR recipe (``neuralgraph.inr.PRESETS``) of splits fitted on first use; None
            fits with ``DEFAULT_PRESET`` and uses a complete split as it is, a named preset also
            requires a complete split to have been made with it (an error names the field).
    """

    def __init__(
        self,
        root: str = "data/inrs",
        source: str = "full",
        batch_size: int = 32,
        num_workers: int = 0,
        limit_train: Optional[int] = None,
        limit_val: Optional[int] = None,
        limit_test: Optional[int] = None,
        permutation_augmentation: bool = False,
        augmentation: bool = False,
        seed: int = 0,
        preset: Optional[str] = None,
        build: Optional[bool] = None,
    ):
        for split, limit in zip(SPLITS, (limit_train, limit_val, limit_test)):
            if limit is not None and limit < 1:
                raise ValueError(f"data.limit_{split}={limit}: must be at least 1 (or null for every INR)")
        super().__init__()
        self.save_hyperparameters()
        self.hparams.root = str(Path(root).resolve())  # absolute in checkpoints: `edit --index` works from anywhere
        self.datasets: dict = {}

    def limit(self, split: str) -> Optional[int]:
        return getattr(self.hparams, f"limit_{split}")

    def prepare_data(self) -> None:
        from neuralgraph.data.generate import INR_FOLDER, GenerationSettings, make_inrs
        from neuralgraph.data.shards import MANIFEST, check_settings, read_manifest
        from neuralgraph.inr import DEFAULT_PRESET

        root = Path(self.hparams.root)
        if (root / MANIFEST).exists() and "imported" in read_manifest(root, INR_FOLDER):
            missing = [split for split in SPLITS if not split_ready(root, split)]
            if missing:
                raise ValueError(f"{root}: an imported INR set without a complete {', '.join(missing)} split (rerun "
                                 "its import-dataset command; for dws-inrs give the split file with --splits)")
            return
        settings = GenerationSettings.from_preset(self.hparams.preset or DEFAULT_PRESET, source=self.hparams.source)
        for split in SPLITS:
            limit = self.limit(split)
            if split_ready(root, split) and self.hparams.preset is not None:
                recipe = {"convention": settings.convention.to_dict(), "fit": settings.fit_dict()}
                check_settings(read_manifest(root, INR_FOLDER), recipe, root / MANIFEST)
            elif not split_ready(root, split):
                self._refuse_unless_building(root, split)
                print(f"MNIST-INR split {split!r} ({limit or 'all'} INRs, {self.hparams.source} MNIST) is not in {root} "
                      "yet: fitting the SIRENs now (once; later runs reuse them)")
                make_inrs(root, (split,), limit, settings, device="cuda" if torch.cuda.is_available() else "cpu")

    def _refuse_unless_building(self, root: Path, split: str) -> None:
        """A one-line error, before anything is created, when the missing ``split`` is not to be fitted here."""
        hp = self.hparams
        if hp.build or (hp.build is None and hp.source == "embedded"):
            return
        limit = self.limit(split)
        command = (f"neuralgraph make-inrs --out {root} --source {hp.source}"
                   + (f" --preset {hp.preset}" if hp.preset else "") + (f" --limit {limit}" if limit else ""))
        where = f"no such folder {root}" if not root.exists() else f"{root} holds no complete {split!r} split"
        if hp.build is False:
            raise ValueError(f"data.root: {where}; this command never fits INRs (make them with `{command}`)")
        raise ValueError(f"data.root: {where}; fitting {limit or 'all'} {hp.source}-MNIST INRs takes hours, so it "
                         f"is never started implicitly: run `{command}` or pass --data.build true to fit")

    def setup(self, stage: Optional[str] = None) -> None:
        from neuralgraph.data.inr_dataset import InrDataset

        for split in SPLITS:
            if split not in self.datasets:
                self.datasets[split] = InrDataset(self.hparams.root, split)

    def size(self, split: str) -> int:
        """INRs used from ``split``: the first ``limit`` of the folder's."""
        available, limit = len(self.datasets[split]), self.limit(split)
        if limit is not None and limit > available:
            raise ValueError(f"limit_{split}={limit} but {self.hparams.root} holds {available} INRs of split {split!r}")
        return available if limit is None else limit

    def batch(self, split: str, indices: Sequence[int]) -> InrBatch:
        """INRs ``indices`` of ``split`` as one batch, built as the loaders build theirs."""
        self.setup()
        return self.datasets[split].batch(indices)

    @property
    def layout(self) -> tuple[int, ...]:
        self.setup()
        return self.datasets["train"].convention.layout

    @property
    def spec(self) -> GraphSpec:
        """The :class:`~neuralgraph.graph.spec.GraphSpec` of the training split (its first
        :data:`SPEC_SAMPLE` INRs: one layout, so the degree histogram only scales with more) and
        its SIREN convention. Fits missing splits first where ``build`` allows (``prepare_data``): ``neuralgraph fit``
        reads the spec before the trainer starts, so DDP's worker processes find the INRs made."""
        self.prepare_data()
        self.setup()
        graph = self.batch("train", range(min(SPEC_SAMPLE, self.size("train")))).graph
        return GraphSpec.of(graph, convention=self.datasets["train"].convention.to_dict())

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        hp = self.hparams
        dataset, size = self.datasets[split], self.size(split)
        return DataLoader(
            range(size),
            batch_size=hp.batch_size,
            sampler=EpochSeededSampler(size, hp.seed, shuffle),
            collate_fn=partial(dataset.batch, permute=hp.permutation_augmentation and split == "train",
                               augment=InrAugmentation() if hp.augmentation and split == "train" else None),
            num_workers=hp.num_workers,
            persistent_workers=hp.num_workers > 0,
        )
