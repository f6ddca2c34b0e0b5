"""Build the MNIST-INR dataset: one fitted SIREN per digit, in resumable safetensors shards.

Layout of a dataset folder::

    manifest.json              settings, split membership, one entry per finished shard
    train-00000.safetensors    layer{l}.weight [n, d_out, d_in], layer{l}.bias [n, d_out],
    ...                        image [n, 28, 28] uint8, label, mnist_index, psnr, steps

Splits: ``train`` (55,000) and ``val`` (5,000) partition MNIST's training set, ``val`` being
the first 5,000 of ``numpy.random.default_rng(split_seed).permutation(60000)``; ``test`` is
MNIST's test set. Each split is in increasing MNIST index, and ``limit`` keeps the first
``limit`` of it, so small datasets are prefixes of the full one. INR seeds come from
``(seed, MNIST split, MNIST index)`` and batched fitting does not couple INRs, so an INR is
the same bitwise whatever shard, batch or run it is fitted in (on CPU).

Writing, resuming and checking follow :mod:`neuralgraph.data.shards`: a run killed at any
moment and started again skips the recorded shards and refits the others, which yields the
same bytes as an uninterrupted run.
"""
from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import torch
from safetensors.torch import save as safetensors_bytes
from tqdm import tqdm

from neuralgraph.data.mnist import MNIST_SPLITS, Digits, PathLike, load_digits
from neuralgraph.data.shards import (
    MANIFEST,
    SPLITS,
    DatasetError,
    FolderFormat,
    FolderWriter,
    Worker,
    shard_name,
)
from neuralgraph.inr import DWS_MNIST, FitConfig, FitResult, SirenConvention, fit_inrs, preset
from neuralgraph.progress import Progress

INR_FOLDER = FolderFormat("neuralgraph-mnist-inrs/1", "make-inrs")
MNIST_SPLIT_OF = {"train": "train", "val": "train", "test": "test"}
VAL_SIZE = 5000
MNIST_TRAIN_SIZE = 60000


@dataclass(frozen=True)
class GenerationSettings:
    """What determines every byte of a dataset folder (recorded in, and checked against, its manifest).

    Attributes:
        convention: the SIREN convention of the INRs.
        fit: the fitting settings.
        seed: the seed every INR's initialisation seed derives from (:func:`inr_seed`).
        split_seed: the seed of the validation split (:func:`val_indices`).
        source: the MNIST images, ``"full"`` or ``"embedded"``.
        shard_size: INRs per shard.
    """

    convention: SirenConvention = DWS_MNIST
    fit: FitConfig = FitConfig()
    seed: int = 0
    split_seed: int = 0
    source: str = "full"
    shard_size: int = 1000

    def to_dict(self) -> dict:
        return {"convention": self.convention.to_dict(), "fit": self.fit_dict(), "seed": self.seed,
                "split_seed": self.split_seed, "source": self.source, "shard_size": self.shard_size}

    def fit_dict(self) -> dict:
        """The fitting settings that change results (``pool_size`` only changes speed)."""
        return {k: v for k, v in self.fit.to_dict().items() if k != "pool_size"}

    @classmethod
    def from_preset(cls, name: str, **fields) -> "GenerationSettings":
        """The convention and fit of the INR preset ``name`` (``neuralgraph.inr.PRESETS``), with
        the other ``fields`` (seed, source, shard_size, ...) as given."""
        recipe = preset(name)
        return cls(convention=recipe.convention, fit=recipe.fit, **fields)


def val_indices(split_seed: int) -> np.ndarray:
    """MNIST training indices of the validation split, increasing.

    Args:
        split_seed: the seed of the split.

    Returns:
        ``[VAL_SIZE]`` int.
    """
    return np.sort(np.random.default_rng(split_seed).permutation(MNIST_TRAIN_SIZE)[:VAL_SIZE])


def split_digits(split: str, source: str, split_seed: int, limit: Optional[int] = None,
                 root: Optional[PathLike] = None) -> Digits:
    """The digits of ``split`` in increasing MNIST index, the first ``limit`` of them.

    Args:
        split: ``"train"``, ``"val"`` or ``"test"``.
        source: the MNIST images, ``"full"`` or ``"embedded"``.
        split_seed: the seed of the validation split.
        limit: the most digits, or ``None`` for all.
        root: the MNIST folder, or ``None``.

    Returns:
        The :class:`~neuralgraph.data.mnist.Digits`.
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: expected one of {SPLITS}")
    digits = load_digits(MNIST_SPLIT_OF[split], source, root)
    if split != "test":
        in_val = np.isin(digits.indices, val_indices(split_seed))
        keep = in_val if split == "val" else ~in_val
        digits = Digits(digits.images[keep], digits.labels[keep], digits.indices[keep])
    if limit is not None:
        digits = Digits(digits.images[:limit], digits.labels[:limit], digits.indices[:limit])
    return digits


def inr_seed(seed: int, mnist_split: str, index: int) -> int:
    """Initialisation seed of the INR of MNIST digit ``index`` of ``mnist_split``.

    Args:
        seed: the dataset's seed.
        mnist_split: ``"train"`` or ``"test"``.
        index: the digit's position in that MNIST split.

    Returns:
        A 32-bit seed.
    """
    return int(np.random.SeedSequence([seed, MNIST_SPLITS.index(mnist_split), int(index)]).generate_state(1)[0])


def _fit_digits(images: np.ndarray, seeds: list[int], settings: GenerationSettings, device,
                on_finished=None) -> FitResult:
    return fit_inrs(torch.from_numpy(images).float() / 255, seeds, settings.convention, settings.fit, device,
                    on_finished=on_finished)


def _one_thread_worker() -> None:
    torch.set_num_threads(1)


def _shard_fits(shards: list, settings: GenerationSettings, device, workers: int,
                bar: tqdm) -> Iterator[list[FitResult]]:
    """The fits of each shard's INRs ``(split, path, digits, seeds)``, shard by shard: here, or
    cut into ``workers`` pieces fitted in as many one-thread processes (every piece is submitted
    at once, so the processes never wait for a shard to be written)."""
    if workers == 1 or str(device) != "cpu":
        for _, _, digits, seeds in shards:
            yield [_fit_digits(digits.images, seeds, settings, device, bar.update)]
        return
    pool = ProcessPoolExecutor(workers, multiprocessing.get_context("spawn"), _one_thread_worker)
    try:
        submitted = []
        for _, _, digits, seeds in shards:
            size = -(-len(seeds) // workers)
            pieces = []
            for lo in range(0, len(seeds), size):
                piece = pool.submit(_fit_digits, digits.images[lo:lo + size], seeds[lo:lo + size], settings, device)
                count = len(seeds[lo:lo + size])
                piece.add_done_callback(lambda f, count=count: f.cancelled() or f.exception() or bar.update(count))
                pieces.append(piece)
            submitted.append(pieces)
        for pieces in submitted:
            yield [piece.result() for piece in pieces]
    finally:
        pool.shutdown(cancel_futures=True)


def _shard_tensors(digits: Digits, results: list[FitResult]) -> dict:
    """The tensors of one shard, from the fits of consecutive pieces of its ``digits``."""
    tensors = {}
    for l in range(len(results[0].weights)):
        tensors[f"layer{l + 1}.weight"] = torch.cat([r.weights[l] for r in results]).contiguous()
        tensors[f"layer{l + 1}.bias"] = torch.cat([r.biases[l] for r in results]).contiguous()
    tensors.update(
        image=torch.from_numpy(np.ascontiguousarray(digits.images)),
        label=torch.from_numpy(digits.labels.astype(np.int64)),
        mnist_index=torch.from_numpy(digits.indices.astype(np.int64)),
        psnr=torch.cat([r.psnr for r in results]).contiguous(),
        steps=torch.cat([r.steps for r in results]).contiguous(),
    )
    return tensors


def make_inrs(out: PathLike, splits: tuple[str, ...] = SPLITS, limit: Optional[int] = None,
              settings: GenerationSettings = GenerationSettings(), device: str = "cpu",
              root: Optional[PathLike] = None, progress: bool = True, workers: int = 1,
              distributed: Optional[Worker] = None, merge: bool = False) -> dict:
    """Fit and write (or finish writing) the INRs of ``splits`` into ``out``; return the manifest.

    ``workers > 1`` (CPU only) fits in that many processes of one torch thread each: a shard is
    cut into ``workers`` consecutive pieces fitted in parallel, and shards are written in order.
    An INR does not depend on its batch-mates, so the folder is byte-identical for any
    ``workers``. On a CPU shared with other jobs this scales where one process with
    ``workers`` threads does not (docs/inr.md).

    ``distributed``: this process is that :class:`~neuralgraph.data.shards.Worker` of a run spread
    over processes or machines, fitting its share of the shards into its own record file; ``merge``
    then verifies every worker's shards and writes the manifest a run alone would have written
    (:class:`~neuralgraph.data.shards.FolderWriter`).

    Resuming into a folder whose manifest has other settings, or a split with another
    ``limit``, is an error naming the field; so is a recorded shard whose sha256 changed.

    Args:
        out: the dataset folder.
        splits: the splits to fit.
        limit: the most INRs per split, or ``None`` for all.
        settings: what the dataset is.
        device: where to fit.
        root: the MNIST folder, or ``None``.
        progress: show a progress bar.
        workers: CPU processes fitting in parallel.
        distributed: this process's worker, or ``None``.
        merge: merge the workers' manifests.

    Returns:
        The manifest, as written.
    """
    if workers < 1:
        raise ValueError(f"make_inrs: workers must be >= 1, got {workers}")
    out = Path(out)
    writer = FolderWriter(out, INR_FOLDER, settings.to_dict(), distributed, merge, splits={})
    manifest = writer.manifest
    manifest_path = out / MANIFEST
    plans = {}
    for split in splits:
        digits = split_digits(split, settings.source, settings.split_seed, limit, root)
        entry = manifest["splits"].setdefault(split, {
            "limit": limit, "count": len(digits), "mnist_split": MNIST_SPLIT_OF[split],
            "mnist_indices": digits.indices.tolist(), "shards": []})
        if entry["limit"] != limit:
            raise DatasetError(f"{manifest_path}: split {split} was made with limit {entry['limit']}, "
                               f"this run uses {limit}")
        plans[split] = digits
    todo = []  # (split, shard path, first index): every shard is checked before anything is written
    for split, digits in plans.items():
        for k, start in enumerate(range(0, len(digits), settings.shard_size)):
            path = out / shard_name(split, k)
            count = min(settings.shard_size, len(digits) - start)
            if writer.plan(manifest["splits"][split]["shards"], path, count=count):
                todo.append((split, path, start))
    writer.start()
    if merge:
        return manifest
    total = sum(len(d) for d in plans.values())
    shards = []  # (split, path, digits, INR seeds) of each shard to write
    for split, path, start in todo:
        digits = plans[split]
        digits = Digits(*(a[start:start + settings.shard_size] for a in (digits.images, digits.labels, digits.indices)))
        seeds = [inr_seed(settings.seed, MNIST_SPLIT_OF[split], i) for i in digits.indices]
        shards.append((split, path, digits, seeds))
    done = total - sum(len(digits.indices) for _, _, digits, _ in shards)
    with Progress(total=total, initial=done, unit="INR", desc=f"make-inrs {out}", disable=not progress,
                  dynamic_ncols=True) as bar, closing(_shard_fits(shards, settings, device, workers, bar)) as fits:
        for (split, path, digits, _), results in zip(shards, fits):
            # fitted (again, after a kill: fitting is deterministic, so the bytes are the same),
            # recorded, then renamed into place
            writer.commit(path, safetensors_bytes(_shard_tensors(digits, results)))
    return manifest
