"""NFN's SIREN sets (read by NFN and NFT), as their ``SirenDataset`` reads them.

Files: ``{prefix}_{label}s/net{idx}.pth`` (``prefix`` is ``randinit_smaller``), each a state dict
``net.0.linear.{weight,bias}``, ``net.1.linear.{weight,bias}``, ``net.2.{weight,bias}``
(``nn.Linear`` layout; 3 outputs for CIFAR-10). ``idx`` runs over 0..N-1 across the label folders
and is the image's position in the dataset's train+test concatenation; the split is by index:
train ``[0, 45000)``, val ``[45000, 50000)``, test ``[50000, N)`` (``split_points``). The
augmented copies ``{prefix}_aug{i}_{label}s`` join the training split on request. Only the
exact ``{prefix}_{label}s`` folders are the base set (NFN's glob ``{prefix}_*`` also matches the
augmented folders).

Convention: ``f(p) = W_3 sin(30 (W_2 sin(30 (W_1 p + b_1)) + b_2)) + b_3`` with no offset, on
``torch.meshgrid`` 'ij' coordinates (input 0 is the row), images in [-1, 1]; the package renders
``0.5 f + 0.5`` so that values are in [0, 1] as for every other INR set.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Sequence

from torch import Tensor

from neuralgraph.data.formats.protocol import Option
from neuralgraph.data.formats.source import InrEntry, SourceError, linear_layers, load_tensors, unused_keys

NAME = "nfn-sirens"
KIND = "inr"
CONVENTION = {"w0": 30.0, "output_offset": 0.5, "output_scale": 0.5, "grid": "ij", "init": "siren"}
PREFIX = "randinit_smaller"
SPLIT_POINTS = (45000, 50000)
OPTIONS = (
    Option("prefix", str, PREFIX, "folder prefix of the base set"),
    Option("augmented", int, 0, "also import the training INRs of {prefix}_aug0 .. aug{N-1}"),
    Option("split_points", int, SPLIT_POINTS, "first index of val and of test", nargs=2, metavar=("VAL", "TEST")),
)
MNIST_TRAIN_SIZE = 60000
NET = re.compile(r"^net(\d+)\.pth$")


def _label_folders(src: Path, prefix: str) -> dict[int, Path]:
    pattern = re.compile(rf"^{re.escape(prefix)}_(\d+)s$")
    folders = {}
    for folder in sorted(p for p in src.iterdir() if p.is_dir()):
        match = pattern.match(folder.name)
        if match:
            folders[int(match.group(1))] = folder
    return folders


def _indexed_files(src: Path, prefix: str) -> dict[int, tuple[Path, int]]:
    """``idx -> (file, label)`` of the folders ``{prefix}_{label}s``; indices must be 0..N-1."""
    found: dict[int, tuple[Path, int]] = {}
    folders = _label_folders(src, prefix)
    if not folders:
        raise SourceError(f"{src}: no {prefix}_{{label}}s folders")
    for label, folder in folders.items():
        for path in folder.iterdir():
            match = NET.match(path.name)
            if not match:
                continue
            idx = int(match.group(1))
            if idx in found:
                raise SourceError(f"{path}: index {idx} also in {found[idx][0]}")
            found[idx] = (path, label)
    missing = sorted(set(range(len(found))) - set(found))
    if missing:
        raise SourceError(f"{src}: {prefix} indices are not 0..{len(found) - 1}: net{missing[0]}.pth is missing "
                          f"({len(missing)} in all)")
    return found


def _entry(idx: int, path: Path, label: int, copy: int = 0) -> InrEntry:
    mnist_split, mnist_index = ("train", idx) if idx < MNIST_TRAIN_SIZE else ("test", idx - MNIST_TRAIN_SIZE)
    return InrEntry(path, label, mnist_split, mnist_index, copy)


def scan(src: Path, prefix: str = PREFIX, augmented: int = 0,
         split_points: Sequence[int] = SPLIT_POINTS) -> dict[str, list[InrEntry]]:
    """The INRs of each split in index order; ``augmented`` copies of each training INR after the base set.

    Args:
        src: the source folder.
        prefix: the folder name of the base set.
        augmented: augmented copies per training INR to add.
        split_points: ``(val, test)``, the indices where the validation and test splits start.

    Returns:
        The entries by split.
    """
    if augmented < 0:
        raise SourceError(f"augmented {augmented}: expected 0 or more augmented copies")
    if len(split_points) != 2:
        raise SourceError(f"split points {tuple(split_points)}: expected two, (val, test)")
    val_point, test_point = split_points
    if not 0 < val_point <= test_point:
        raise SourceError(f"split points {tuple(split_points)}: expected 0 < val <= test")
    base = _indexed_files(src, prefix)
    if test_point > len(base):
        raise SourceError(f"{src}: {len(base)} INRs, fewer than the test split point {test_point} (set --split-points)")
    ranges = {"train": range(val_point), "val": range(val_point, test_point), "test": range(test_point, len(base))}
    splits = {split: [_entry(i, *base[i]) for i in indices] for split, indices in ranges.items()}
    for copy in range(augmented):
        copies = _indexed_files(src, f"{prefix}_aug{copy}")
        for i in ranges["train"]:
            if i not in copies:
                raise SourceError(f"{src}: {prefix}_aug{copy} has no net{i}.pth")
            path, label = copies[i]
            if label != base[i][1]:
                raise SourceError(f"{path}: label {label}, but the base INR net{i}.pth has {base[i][1]}")
            splits["train"].append(_entry(i, path, label, copy + 1))
    return splits


def read(entry: InrEntry, layout: Optional[tuple[int, ...]] = None) -> tuple[list[Tensor], list[Tensor], int]:
    """Weights, biases (``nn.Linear`` layout) and label of one SIREN file.

    Args:
        entry: the SIREN.
        layout: the layout every SIREN of the source must have, or ``None``.

    Returns:
        ``(weights, biases, label)``.
    """
    state = load_tensors(entry.file)
    hidden = len([k for k in state if isinstance(k, str) and re.fullmatch(r"net\.\d+\.linear\.weight", k)])
    if hidden == 0:
        raise SourceError(f"{entry.file}: key 'net.0.linear.weight' is missing; not an NFN SIREN")
    keys = [(f"net.{i}.linear.weight", f"net.{i}.linear.bias") for i in range(hidden)]
    keys.append((f"net.{hidden}.weight", f"net.{hidden}.bias"))
    unused_keys(state, [k for pair in keys for k in pair], entry.file)
    weights, biases = linear_layers(state, keys, entry.file, layout)
    return weights, biases, entry.label
