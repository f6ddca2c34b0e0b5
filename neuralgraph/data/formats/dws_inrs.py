"""DWSNets' released INRs (also read by neural-graphs and ScaleGMN), as their loaders read them.

Files: ``mnist_png_{training|testing}_{label}_{mnist_index}/checkpoints/model_final.pth``, each a
bare state dict ``seq.{0,1,2}.weight`` ``[32, 2]``, ``[32, 32]``, ``[1, 32]`` and ``seq.{0,1,2}.bias``
(``nn.Linear`` layout); FashionMNIST files (``model_{idx}.pth``) carry a ``"label"`` entry too.
The split file is JSON: ``{"train"|"val"|"test": {"path": [...], "label": [...]}}`` with labels as
strings and absolute or relative paths, or FashionMNIST's ``{"train": [paths], ...}``. Without
one, the folder names give the split (``training`` -> train, ``testing`` -> test) and ``val`` is
the package's own validation digits (``neuralgraph.data.generate.val_indices``).

Convention: ``f(p) = W_3 sin(30 (W_2 sin(30 (W_1 p + b_1)) + b_2)) + b_3 + 0.5`` on DWSNets'
``make_coordinates`` grid (``np.meshgrid`` 'xy': input 0 is the column), values in [0, 1].
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Optional

from torch import Tensor

from neuralgraph.data.formats.protocol import Option
from neuralgraph.data.formats.source import InrEntry, SourceError, linear_layers, load_tensors, natural_key, unused_keys

NAME = "dws-inrs"
KIND = "inr"
OPTIONS = (
    Option("splits_file", Path, None, "DWSNets' JSON split file (without one, the folder names give the split)",
           metavar="FILE", flag="--splits"),
    Option("split_seed", int, 0, "the seed of the validation digits when there is no split file "
                                 "(neuralgraph.data.generate.val_indices, as make-inrs splits)"),
)
CONVENTION = {"w0": 30.0, "output_offset": 0.5, "output_scale": 1.0, "grid": "xy", "init": "dws"}
FOLDER = re.compile(r"^mnist_png_(training|testing)_(\d+)_(\d+)$")
MNIST_SPLIT = {"training": "train", "testing": "test"}
SPLIT_NAMES = ("train", "val", "test")


def _folder_facts(path: Path) -> Optional[tuple[str, int, int]]:
    """``(mnist split, label, mnist index)`` from a ``mnist_png_*`` folder on ``path``, if there is one."""
    for part in reversed(path.parts):
        match = FOLDER.match(part)
        if match:
            return MNIST_SPLIT[match.group(1)], int(match.group(2)), int(match.group(3))
    return None


def _entry(path: Path, label: Optional[int], source: str) -> InrEntry:
    facts = _folder_facts(path)
    if facts is None:
        if label is None:
            return InrEntry(path, -1)  # label read from the file's "label" entry (FashionMNIST)
        return InrEntry(path, label)
    mnist_split, folder_label, index = facts
    if label is not None and label != folder_label:
        raise SourceError(f"{source}: {path} is labelled {label}, but its folder says {folder_label}")
    return InrEntry(path, folder_label, mnist_split, index)


def _resolve(name: str, src: Path, splits_file: Path) -> Path:
    """A path of the split file, found as written, under ``src`` or the split file's folder, or by
    its ``mnist_png_*`` tail under ``src`` (split files hold the absolute paths of the machine
    that wrote them)."""
    path = Path(name)
    candidates = [path] if path.is_absolute() else [src / path, splits_file.parent / path]
    tail = [i for i, part in enumerate(path.parts) if FOLDER.match(part) or part.startswith("model_")]
    if tail:
        candidates.append(src.joinpath(*path.parts[tail[0]:]))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise SourceError(f"{splits_file}: lists {name}, which is not under {src} (tried {', '.join(map(str, candidates))})")


def scan(src: Path, splits_file: Optional[Path] = None, split_seed: int = 0) -> dict[str, list[InrEntry]]:
    """The INRs of each split, in the split file's order (else by folder name).

    Args:
        src: the source folder.
        splits_file: a JSON split file, or ``None`` to split by folder name.
        split_seed: the seed of the validation split without a split file.

    Returns:
        The entries by split.
    """
    if splits_file is not None:
        try:
            table = json.loads(Path(splits_file).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise SourceError(f"{splits_file}: not a readable JSON split file ({err})") from err
        unknown = sorted(set(table) - set(SPLIT_NAMES)) if isinstance(table, dict) else ["<not an object>"]
        if unknown:
            raise SourceError(f"{splits_file}: unexpected split keys {unknown}; expected {SPLIT_NAMES}")
        splits = {}
        for split, listing in table.items():
            paths, labels = (listing, [None] * len(listing)) if isinstance(listing, list) else \
                (listing.get("path"), listing.get("label"))
            if not isinstance(paths, list) or not isinstance(labels, list) or len(paths) != len(labels):
                raise SourceError(f"{splits_file}: split {split!r} needs a list 'path' and a list 'label' of equal length")
            splits[split] = [_entry(_resolve(p, src, Path(splits_file)), None if l is None else int(l), str(splits_file))
                             for p, l in zip(paths, labels)]
        return splits
    from neuralgraph.data.generate import val_indices

    files = sorted(src.glob("mnist_png_*/**/*.pth"), key=natural_key)
    if not files:
        raise SourceError(f"{src}: no mnist_png_*/**/*.pth files; give the split file with --splits")
    validation = set(val_indices(split_seed).tolist())
    splits = defaultdict(list)
    for path in files:
        entry = _entry(path, None, str(src))
        if entry.mnist_split is None:
            raise SourceError(f"{path}: not under a mnist_png_{{training|testing}}_{{label}}_{{index}} folder")
        split = "test" if entry.mnist_split == "test" else ("val" if entry.mnist_index in validation else "train")
        splits[split].append(entry)
    return {split: sorted(splits[split], key=lambda e: e.mnist_index) for split in SPLIT_NAMES if splits[split]}


def read(entry: InrEntry, layout: Optional[tuple[int, ...]] = None) -> tuple[list[Tensor], list[Tensor], int]:
    """Weights, biases (``nn.Linear`` layout) and label of one INR file.

    Args:
        entry: the INR.
        layout: the layout every INR of the source must have, or ``None``.

    Returns:
        ``(weights, biases, label)``.
    """
    state = load_tensors(entry.file)
    label = entry.label
    if "label" in state:
        stored = int(state["label"])
        if label not in (-1, stored):
            raise SourceError(f"{entry.file}: key 'label' is {stored}, but the split file or folder says {label}")
        label = stored
    if label < 0:
        raise SourceError(f"{entry.file}: no label (no 'label' key, no mnist_png_* folder, no label in the split file)")
    count = len([k for k in state if isinstance(k, str) and re.fullmatch(r"seq\.\d+\.weight", k)])
    keys = [(f"seq.{i}.weight", f"seq.{i}.bias") for i in range(count)]
    if not keys:
        raise SourceError(f"{entry.file}: key 'seq.0.weight' is missing; not a DWSNets INR")
    unused_keys(state, [k for pair in keys for k in pair] + ["label"], entry.file)
    weights, biases = linear_layers(state, keys, entry.file, layout)
    return weights, biases, label
