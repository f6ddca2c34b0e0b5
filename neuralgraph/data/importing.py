"""``neuralgraph import-dataset``: a released dataset into the package's own verified shard folder.

The importer is chosen by the format's kind alone (:mod:`neuralgraph.data.formats.protocol`): an
INR source becomes a folder that :class:`~neuralgraph.data.inr_dataset.InrDataset` reads (the
``make-inrs`` format, with the source's SIREN convention and splits in the manifest); a CNN zoo
becomes one that :class:`~neuralgraph.data.cnn_zoo.CnnZooDataset` reads. The import writes shards
as the generators do (:mod:`neuralgraph.data.shards`): resumable after a kill, byte-identical on
rerun, refusing a folder it does not own. The CNN Wild Park, networks of many layouts, becomes a
CNN-zoo folder of mixed layouts (``mixed_layouts`` in its manifest), whose networks
:class:`~neuralgraph.data.cnn_zoo.CnnZooDataset` rebuilds one graph each. Every source file is
read with ``torch.load(weights_only=True)``; a bad file stops the import with one line naming it
and the key, before its shard is written.

MNIST images are attached to INRs whose source names their digit (the editing tasks need them),
and each INR is rendered with the source's convention against its digit: a median PSNR under
:data:`MIN_MEDIAN_PSNR` means the convention or the digits do not match the source, and the
import stops. Without images the folder serves classification only.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from safetensors.torch import save as safetensors_bytes

from neuralgraph.data import cnn_zoo, generate
from neuralgraph.data.formats import FORMATS, InrEntry
from neuralgraph.data.formats.source import SourceError
from neuralgraph.data.mnist import MNIST_SPLITS, MnistFileError, load_digits, locate
from neuralgraph.data.shards import MANIFEST, DatasetError, FolderWriter, Worker, shard_name
from neuralgraph.inr import SirenConvention, psnr, render
from neuralgraph.progress import Progress

#: Values of ``--images``: the full MNIST, the subset embedded in the package, or no images.
IMAGE_SOURCES = ("full", "embedded", "none")
#: Lowest median PSNR (dB) of a shard's INRs rendered against their MNIST digits; a lower one means
#: the source's convention or digits are not those of the INRs, and the import stops.
MIN_MEDIAN_PSNR = 20.0


def image_source(requested: Optional[str]) -> str:
    """``requested``, or ``"full"`` where MNIST is on disk and ``"none"`` otherwise (said in one line).

    Args:
        requested: ``--images`` (one of :data:`IMAGE_SOURCES`), or None to choose by what is on disk.

    Returns:
        The image source of the import.

    Raises:
        ValueError: ``requested`` is not an image source.
    """
    if requested is not None:
        if requested not in IMAGE_SOURCES:
            raise ValueError(f"--images {requested!r}: expected one of {IMAGE_SOURCES}")
        return requested
    try:
        locate(download=False)
        return "full"
    except MnistFileError:
        print("import-dataset: MNIST is not on disk (NEURALGRAPH_MNIST): importing without images, "
              "for classification only (editing tasks need --images full)")
        return "none"


class DigitLookup:
    """MNIST digits by (split, index), loaded on first use.

    Args:
        source: the MNIST the digits come from (``full`` or ``embedded``, see
            :func:`~neuralgraph.data.mnist.load_digits`).
    """

    def __init__(self, source: str):
        self.source = source
        self.tables: dict[str, tuple[np.ndarray, dict[int, int]]] = {}

    def image(self, split: Optional[str], index: int, file: Path) -> np.ndarray:
        if split not in MNIST_SPLITS or index < 0:
            raise SourceError(f"{file}: the source does not say which MNIST digit this INR encodes; "
                              "import with --images none")
        if split not in self.tables:
            digits = load_digits(split, self.source)
            self.tables[split] = (digits.images, {int(i): k for k, i in enumerate(digits.indices)})
        images, position = self.tables[split]
        if index not in position:
            raise SourceError(f"{file}: MNIST {split} digit {index} is not in the {self.source} MNIST")
        return images[position[index]]


def _shard_plan(writer: FolderWriter, split: str, count: int, shard_size: int, **entry) -> list[tuple[Path, int]]:
    """Plan the shards of ``split``; those this process writes, as ``(path, first entry)``."""
    record = writer.manifest["splits"].setdefault(split, {"count": count, **entry, "shards": []})
    if record["count"] != count:
        raise DatasetError(f"{writer.manifest_path}: split {split} holds {record['count']} entries, this import "
                           f"{count} (another --limit or source?)")
    return [(writer.out / shard_name(split, k), first) for k, first in enumerate(range(0, count, shard_size))
            if writer.plan(record["shards"], writer.out / shard_name(split, k), count=min(shard_size, count - first))]


def _inr_shard(reader, entries: Sequence[InrEntry], layout: tuple[int, ...], convention: SirenConvention,
               digits: Optional[DigitLookup], bar: Progress) -> dict:
    weights, biases, labels = [], [], []
    for entry in entries:
        w, b, label = reader.read(entry, layout)
        weights.append(w)
        biases.append(b)
        labels.append(label)
        bar.update(1)
    tensors = {}
    for l in range(len(layout) - 1):
        tensors[f"layer{l + 1}.weight"] = torch.stack([w[l] for w in weights])
        tensors[f"layer{l + 1}.bias"] = torch.stack([b[l] for b in biases])
    tensors["label"] = torch.tensor(labels, dtype=torch.int64)
    tensors["mnist_index"] = torch.tensor([e.mnist_index for e in entries], dtype=torch.int64)
    tensors["mnist_split"] = torch.tensor([MNIST_SPLITS.index(e.mnist_split) if e.mnist_split in MNIST_SPLITS else -1
                                           for e in entries], dtype=torch.int64)
    tensors["copy"] = torch.tensor([e.copy for e in entries], dtype=torch.int64)
    if digits is not None:
        images = np.stack([digits.image(e.mnist_split, e.mnist_index, e.file) for e in entries])
        tensors["image"] = torch.from_numpy(images)
        with torch.no_grad():
            rendered = render([tensors[f"layer{l + 1}.weight"] for l in range(len(layout) - 1)],
                              [tensors[f"layer{l + 1}.bias"] for l in range(len(layout) - 1)], images.shape[-2:],
                              convention)
        tensors["psnr"] = psnr(rendered.clamp(0, 1), tensors["image"].float() / 255)
    return {key: value.contiguous() for key, value in tensors.items()}


def import_inrs(fmt: str, src: Path, out: Path, limit: Optional[int], options: dict, images: str,
                shard_size: int, progress: bool, distributed: Optional[Worker] = None, merge: bool = False) -> dict:
    """Imports an INR source into an :class:`~neuralgraph.data.inr_dataset.InrDataset` folder, with
    its MNIST digits unless ``images`` is ``"none"`` (each shard checked against
    :data:`MIN_MEDIAN_PSNR`).

    Args:
        fmt: the INR format, a key of :data:`~neuralgraph.data.formats.FORMATS`.
        src: the source folder.
        out: the dataset folder to write.
        limit: keep the first ``limit`` entries of each split, or None for all.
        options: the format's own options for its ``scan``.
        images: the image source, as :func:`image_source` returns it.
        shard_size: entries per safetensors shard.
        progress: show a progress bar.
        distributed: this process's share when it is one worker of many, or None.
        merge: merge the workers' records into the manifest instead of writing shards.

    Returns:
        The folder's manifest.

    Raises:
        ~neuralgraph.data.formats.source.SourceError: a source file is bad, or the rendered INRs do not
            match their digits.
    """
    reader = FORMATS[fmt]
    splits = reader.scan(src, **options)
    splits = {split: entries[:limit] for split, entries in splits.items()}
    first = next(entries[0] for entries in splits.values() if entries)
    w, _, _ = reader.read(first)
    layout = (w[0].shape[1], *(x.shape[0] for x in w))
    convention = SirenConvention.from_dict({"layout": list(layout), **reader.CONVENTION})
    settings = {"convention": convention.to_dict(), "shard_size": shard_size,
                "imported": {"source_format": fmt, "source": str(src.resolve()), "limit": limit, "images": images,
                             "options": recorded_options(options)}}
    writer = FolderWriter(out, generate.INR_FOLDER, settings, distributed, merge, splits={})
    digits = None if images == "none" else DigitLookup(images)
    todo = []
    for split, entries in splits.items():
        plan = _shard_plan(writer, split, len(entries), shard_size, limit=limit,
                           mnist_indices=[e.mnist_index for e in entries])
        todo += [(split, path, entries[start:start + shard_size]) for path, start in plan]
    writer.start()
    total = sum(len(e) for e in splits.values())
    with Progress(total=total, initial=total - sum(len(t[2]) for t in todo), unit="INR", desc=f"import {fmt}",
              disable=not progress, dynamic_ncols=True) as bar:
        for split, path, entries in todo:
            tensors = _inr_shard(reader, entries, layout, convention, digits, bar)
            if digits is not None:
                median = float(tensors["psnr"].median())
                if median < MIN_MEDIAN_PSNR:
                    raise SourceError(
                        f"{entries[0].file}: its shard renders its MNIST digits at a median {median:.1f} dB PSNR "
                        f"(< {MIN_MEDIAN_PSNR}) with the {fmt} convention {reader.CONVENTION}: not MNIST digits of "
                        "this convention (FashionMNIST or CIFAR INRs need --images none)")
            writer.commit(path, safetensors_bytes(tensors))
    return writer.manifest


def import_zoo(fmt: str, src: Path, out: Path, limit: Optional[int], options: dict, shard_size: int, progress: bool,
               distributed: Optional[Worker] = None, merge: bool = False) -> dict:
    """Imports a CNN zoo (a format of kind ``cnn-zoo`` or ``mixed-cnn-zoo``) into a
    :class:`~neuralgraph.data.cnn_zoo.CnnZooDataset` folder: the format's ``folder_settings`` describe
    its networks in the manifest, and its ``read`` assembles each shard (reading only that shard's
    networks from the source).

    Args:
        fmt: the format, a key of :data:`~neuralgraph.data.formats.FORMATS`.
        src: the source folder.
        out: the dataset folder to write.
        limit: keep the first ``limit`` entries of each split, or None for all.
        options: the format's own options for its ``scan``.
        shard_size: entries per safetensors shard.
        progress: show a progress bar.
        distributed: this process's share when it is one worker of many, or None.
        merge: merge the workers' records into the manifest instead of writing shards.

    Returns:
        The folder's manifest.

    Raises:
        ~neuralgraph.data.formats.source.SourceError: the source is not of the format, or its networks
            are not what a folder of its kind holds.
    """
    reader = FORMATS[fmt]
    source = reader.scan(src, **options)
    splits = {split: entries[:limit] for split, entries in source.splits.items()}
    settings = {**reader.folder_settings(source), "shard_size": shard_size,
                "imported": {"source_format": fmt, "source": str(src.resolve()), "limit": limit,
                             "options": recorded_options(options)}}
    writer = FolderWriter(out, cnn_zoo.ZOO_FOLDER, settings, distributed, merge, splits={})
    todo = []
    for split, entries in splits.items():
        todo += [(path, entries[start:start + shard_size])
                 for path, start in _shard_plan(writer, split, len(entries), shard_size)]
    writer.start()
    total = sum(len(e) for e in splits.values())
    with Progress(total=total, initial=total - sum(len(t[1]) for t in todo), unit="CNN", desc=f"import {fmt}",
                  disable=not progress, dynamic_ncols=True) as bar:
        for path, entries in todo:
            writer.commit(path, safetensors_bytes(reader.read(source, entries, bar.update)))
    return writer.manifest


def recorded_options(options: dict) -> dict:
    """The options of an import as its manifest records them (JSON: paths as text, tuples as lists).

    Args:
        options: the options the import was given.

    Returns:
        The options, JSON-ready.
    """
    return {key: str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value
            for key, value in options.items()}


def import_dataset(fmt: str, src, out, limit: Optional[int] = None, images: Optional[str] = None,
                   shard_size: int = 1000, progress: bool = True, distributed: Optional[Worker] = None,
                   merge: bool = False, **options) -> dict:
    """Import ``src`` (a folder of format ``fmt``, :data:`~neuralgraph.data.formats.FORMATS`) into ``out``.

    The importer is chosen by the format's ``KIND`` (an INR set, or a CNN zoo of one layout or of
    mixed layouts). The options are the format's ``OPTIONS``; those given (and not None, which
    means the option's default) are passed to its ``scan`` and recorded in the manifest. A first
    run that fails removes what it wrote, so that a retry with other options starts afresh; a
    killed run leaves its shards for the same command to resume.

    Args:
        fmt: the source's format, a key of :data:`~neuralgraph.data.formats.FORMATS`.
        src: the source folder, as its authors released it.
        out: the dataset folder to write.
        limit: keep the first ``limit`` entries of each split, or None for all.
        images: INR formats: the MNIST digits to attach (:func:`image_source`), or None to choose.
        shard_size: entries per safetensors shard.
        progress: show a progress bar.
        distributed: this process's share when it is one worker of many, or None
            (:class:`~neuralgraph.data.shards.FolderWriter`).
        merge: merge the workers' records into the manifest instead of writing shards.
        **options: the format's own, by the names of its ``OPTIONS`` (``splits_file`` for three of
            the four; ``nfn-sirens``: ``prefix``, ``augmented``, ``split_points``; ``small-cnn-zoo``:
            ``steps``, ``activations``, ``order_header``).

    Returns:
        The folder's manifest.

    Raises:
        ValueError: an unknown format or option, ``images`` for a CNN zoo, a ``limit`` below 1, or
            ``out`` is a file.
        ~neuralgraph.data.formats.source.SourceError: ``src`` is not a folder, or a source file is bad.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: expected one of {sorted(FORMATS)}")
    kind = FORMATS[fmt].KIND
    declared = [option.name for option in FORMATS[fmt].OPTIONS]
    for name in options:
        if name not in declared:
            raise ValueError(f"option {name!r}: not an option of {fmt} (its options: {', '.join(declared) or 'none'})")
    options = {name: value for name, value in options.items() if value is not None}
    if images is not None and kind != "inr":
        raise ValueError(f"images {images!r}: {fmt} is a {kind} format; only INR formats attach MNIST images")
    if limit is not None and limit < 1:
        raise ValueError(f"--limit {limit}: must be at least 1")
    src, out = Path(src), Path(out)
    if not src.is_dir():
        raise SourceError(f"{src}: not a folder")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: a file, not a folder")
    first_run = distributed is None and not merge and not (out / MANIFEST).exists()
    existed, before = out.exists(), set(out.iterdir()) if out.exists() else set()
    try:
        if kind == "inr":
            return import_inrs(fmt, src, out, limit, options, image_source(images), shard_size, progress,
                               distributed, merge)
        return import_zoo(fmt, src, out, limit, options, shard_size, progress, distributed, merge)
    except Exception:
        # a first run that fails leaves the folder as it found it, so that a retry with other
        # options (say --images none after a PSNR failure) starts afresh; a kill leaves its shards
        # for the same command to resume
        if first_run:
            _remove_written(out, existed, before)
        raise


def _remove_written(out: Path, existed: bool, before: set[Path]) -> None:
    """Remove what a failed first import wrote into ``out``: the folder itself when it created it."""
    if not existed:
        shutil.rmtree(out, ignore_errors=True)
        return
    for path in set(out.iterdir()) - before:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
