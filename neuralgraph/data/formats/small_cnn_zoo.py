"""The Small CNN Zoo (Unterthiner et al., 2020), as NFN's ``ZooDataset`` reads it, memory-mapped.

Files: ``weights.npy`` ``[N, 4970]`` float32 (a full zoo is 270k rows, 5.4 GB: it is memory-mapped
and read a shard of rows at a time, never whole), ``layout.csv`` (``varname,start_idx,end_idx,shape``:
each layer's ``.../bias:0`` row before its ``.../kernel:0`` row), ``metrics.csv.gz`` (one row per
weights row: ``config.*`` hyperparameters, ``modeldir``, ``step``, ``test_accuracy``, ``test_loss``,
``train_accuracy``, ``train_loss``). Kernels are TensorFlow's: conv ``(kh, kw, in, out)`` ->
PyTorch ``(out, in, kh, kw)``, dense ``(in, out)`` -> ``(out, in)``.

The networks are Keras CNNs: 3x3 convolutions with stride 2 and 'valid' padding, each followed
by ``config.activation``, global average pooling, a dense classifier
(``neuralgraph.data.cnn_zoo.ZooNetwork`` computes the same logits).

Split (NFN's recipe): rows are put in the order of the optional ``*_split.csv`` file, filtered
to ``step`` in ``steps`` (86, the last checkpoint, by default); the second half is ``test``, the
first half is shuffled with ``random.Random(0)`` and cut 80/20 into ``train`` and ``val``. NFN
reads the order file with ``header=None``, so its first line ``0`` (a pandas column name) is
taken as a row index: ``order_header="data"`` does the same (row 0 then appears twice, and the
split equals NFN's); ``"header"`` skips it. With several ``steps``, ``split_by="network"`` applies
that split to the networks (``modeldir``, in the order of their first kept row) and gives each
split all the kept rows of its networks, so that no network has checkpoints in two splits; with
one step it is NFN's split.
"""
from __future__ import annotations

import ast
import csv
import functools
import gzip
import io
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from neuralgraph.data.formats.protocol import Option
from neuralgraph.data.formats.source import SourceError

NAME = "small-cnn-zoo"
KIND = "cnn-zoo"
FINAL_STEP = 86
STEPS = (FINAL_STEP,)
ORDER_HEADERS = ("data", "header")
SPLIT_UNITS = ("row", "network")
OPTIONS = (
    Option("splits_file", Path, None, "NFN's *_split.csv order file (without one, the rows' own order)",
           metavar="FILE", flag="--splits"),
    Option("steps", int, STEPS, "checkpoints (metrics.csv.gz 'step') to keep", nargs="+"),
    Option("activations", str, None, "keep networks of these config.activation values (e.g. relu); all without",
           nargs="+"),
    Option("order_header", str, "data", "the order file's first line '0' read as a row index, as NFN reads it "
                                        "(data), or skipped (header)", choices=ORDER_HEADERS),
    Option("split_by", str, "row", "NFN's split over the kept rows (row), or over the networks ('modeldir'), each "
                                   "with all its kept checkpoints (network; the same split with one step)",
           choices=SPLIT_UNITS),
)
METRICS = ("test_accuracy", "test_loss", "train_accuracy", "train_loss")
ARCHITECTURE = {"kernel": 3, "stride": 2, "padding": "valid", "pooling": "global_average", "source": "keras"}


@dataclass(frozen=True)
class ZooLayer:
    """One layer of ``layout.csv``: its columns of ``weights.npy`` and TensorFlow shapes.

    Attributes:
        name: the layer's name.
        kernel: the kernel's columns and TensorFlow shape.
        bias: the bias's columns and shape.
    """

    name: str
    kernel: tuple[slice, tuple[int, ...]]
    bias: tuple[slice, tuple[int, ...]]


@dataclass
class ZooSource:
    """A Small-CNN-Zoo folder: the memory-mapped weights, its layers, and the rows of each split.

    Attributes:
        root: the zoo folder.
        weights: ``[N, P]``, memory-mapped.
        layers: the layers of ``layout.csv``.
        splits: split -> row numbers of ``weights.npy``.
        metrics: column -> per-row values (float for metrics, str for the rest).
    """

    root: Path
    weights: np.ndarray  # memory-mapped [N, P]
    layers: list[ZooLayer]
    splits: dict[str, np.ndarray]  # split -> row numbers of weights.npy
    metrics: dict[str, np.ndarray]  # column -> per-row values (float for metrics, str for the rest)

    @property
    def layout(self) -> tuple[int, ...]:
        shapes = [layer.kernel[1] for layer in self.layers]
        return (shapes[0][-2], *(shape[-1] for shape in shapes))

    @functools.cached_property
    def network_ids(self) -> dict[str, int]:
        """One id per ``modeldir`` (a network's checkpoints share it), in sorted order."""
        return {name: k for k, name in enumerate(sorted(set(self.metrics["modeldir"].tolist())))}


def _read_layout(path: Path) -> list[ZooLayer]:
    try:
        rows = list(csv.DictReader(path.read_text().splitlines()))
    except OSError as err:
        raise SourceError(f"{path}: missing or unreadable ({err})") from err
    pending: dict[str, tuple[slice, tuple[int, ...]]] = {}
    layers = []
    for number, row in enumerate(rows, start=2):
        try:
            name, start, end = row["varname"], int(row["start_idx"]), int(row["end_idx"])
            shape = tuple(int(d) for d in ast.literal_eval(row["shape"]))
        except (KeyError, TypeError, ValueError, SyntaxError) as err:
            raise SourceError(f"{path}: line {number} is not 'varname,start_idx,end_idx,shape' ({err})") from err
        if end - start != int(np.prod(shape)):
            raise SourceError(f"{path}: line {number} ({name}) spans {end - start} columns for shape {shape}")
        layer, _, kind = name.rpartition("/")
        if kind == "bias:0":
            pending[layer] = (slice(start, end), shape)
        elif kind == "kernel:0":
            if layer not in pending:
                raise SourceError(f"{path}: line {number} ({name}) comes before the bias of its layer")
            layers.append(ZooLayer(layer, (slice(start, end), shape), pending.pop(layer)))
        else:
            raise SourceError(f"{path}: line {number}: varname {name!r} is neither a kernel:0 nor a bias:0")
    if pending or not layers:
        raise SourceError(f"{path}: {'no layers' if not layers else f'bias without kernel: {sorted(pending)}'}")
    for before, layer in zip(layers, layers[1:]):
        if layer.kernel[1][-2] != before.kernel[1][-1]:
            raise SourceError(f"{path}: {layer.name} takes {layer.kernel[1][-2]} inputs, {before.name} gives "
                              f"{before.kernel[1][-1]}")
    return layers


def _read_metrics(path: Path, rows: int) -> dict[str, np.ndarray]:
    try:
        text = gzip.decompress(path.read_bytes()).decode()
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise SourceError(f"{path}: missing or not gzip ({err})") from err
    reader = csv.DictReader(io.StringIO(text))
    table = list(reader)
    columns = reader.fieldnames or []
    for column in ("step", "modeldir", "config.activation", *METRICS):
        if column not in columns:
            raise SourceError(f"{path}: column {column!r} is missing")
    if len(table) != rows:
        raise SourceError(f"{path}: {len(table)} rows, but weights.npy has {rows}")
    metrics = {}
    for column in columns:
        values = [row[column] for row in table]
        if column in METRICS or column == "step":
            try:
                metrics[column] = np.asarray(values, dtype=np.float64)
            except ValueError as err:
                raise SourceError(f"{path}: column {column!r} is not numeric ({err})") from err
        else:
            metrics[column] = np.asarray(values, dtype=object)
    return metrics


def _read_order(path: Path, rows: int, order_header: str) -> np.ndarray:
    if order_header not in ORDER_HEADERS:
        raise SourceError(f"order_header={order_header!r}: expected one of {ORDER_HEADERS}")
    try:
        lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    except OSError as err:
        raise SourceError(f"{path}: missing or unreadable ({err})") from err
    if order_header == "header":
        lines = lines[1:]
    try:
        order = np.asarray([int(line) for line in lines], dtype=np.int64)
    except ValueError as err:
        raise SourceError(f"{path}: not one row index per line ({err})") from err
    if len(order) and (order.min() < 0 or order.max() >= rows):
        raise SourceError(f"{path}: row indices outside [0, {rows})")
    return order


def nfn_split(count: int) -> dict[str, list[int]]:
    """NFN's ``_split_indices_iid``: positions of the train, val and test entries among ``count``.

    Args:
        count: entries.

    Returns:
        Positions by split.
    """
    test_point = int(0.5 * count)
    trainval = list(range(test_point))
    val_point = int(0.8 * len(trainval))
    random.Random(0).shuffle(trainval)
    return {"train": trainval[:val_point], "val": trainval[val_point:], "test": list(range(test_point, count))}


def scan(src: Path, splits_file: Optional[Path] = None, steps: Sequence[int] = STEPS,
         activations: Optional[Sequence[str]] = None, order_header: str = "data", split_by: str = "row") -> ZooSource:
    """The zoo at ``src``, split as NFN splits it; ``activations`` keeps those networks only.

    Args:
        src: the zoo folder.
        splits_file: a file fixing the row order NFN splits, or ``None`` for the file's order.
        steps: the training steps kept.
        activations: the activations kept, or ``None`` for all.
        order_header: ``"data"`` (the order file's first line is a row, as NFN reads it) or
            ``"header"`` (it is skipped); module docstring.
        split_by: ``"row"`` (NFN's split of the kept rows) or ``"network"`` (the same split of the
            networks, each with all its kept rows); module docstring.

    Returns:
        The :class:`ZooSource`.
    """
    if split_by not in SPLIT_UNITS:
        raise SourceError(f"split_by={split_by!r}: expected one of {list(SPLIT_UNITS)}")
    path = src / "weights.npy"
    try:
        weights = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as err:
        raise SourceError(f"{path}: missing or not a .npy array ({err})") from err
    if weights.ndim != 2 or not np.issubdtype(weights.dtype, np.floating):
        raise SourceError(f"{path}: array {weights.shape} {weights.dtype}, expected [N, P] floats")
    layers = _read_layout(src / "layout.csv")
    width = max(max(l.kernel[0].stop, l.bias[0].stop) for l in layers)
    if width != weights.shape[1]:
        raise SourceError(f"{path}: {weights.shape[1]} columns, but layout.csv covers {width}")
    metrics = _read_metrics(src / "metrics.csv.gz", weights.shape[0])
    order = (np.arange(weights.shape[0]) if splits_file is None
             else _read_order(Path(splits_file), weights.shape[0], order_header))
    order = order[np.isin(metrics["step"][order], np.asarray(steps, dtype=np.float64))]
    if not len(order):
        raise SourceError(f"{src / 'metrics.csv.gz'}: no rows at step {list(steps)}")
    if split_by == "row":
        splits = {split: order[positions] for split, positions in nfn_split(len(order)).items()}
    else:
        first, unit = np.unique(metrics["modeldir"][order].astype(str), return_index=True, return_inverse=True)[1:]
        unit = np.argsort(np.argsort(first))[unit]  # each row's network, numbered by its first kept row
        grouped = np.argsort(unit, kind="stable")  # rows network by network, each network's in file order
        bounds = np.searchsorted(unit[grouped], np.arange(len(first) + 1))
        splits = {split: np.concatenate([order[grouped[bounds[p]:bounds[p + 1]]] for p in positions] or
                                        [np.empty(0, dtype=order.dtype)])
                  for split, positions in nfn_split(len(first)).items()}
    if activations is not None:
        splits = {split: rows[np.isin(metrics["config.activation"][rows], list(activations))]
                  for split, rows in splits.items()}
    return ZooSource(src, weights, layers, splits, metrics)


def read_rows(source: ZooSource, rows: np.ndarray) -> tuple[list[Tensor], list[Tensor]]:
    """Weights ``[n, out, in, kh, kw]`` / ``[n, out, in]`` and biases ``[n, out]`` of ``rows``, in
    PyTorch layout; only those rows are read from the memory-mapped file. Errors name the row.

    Args:
        source: the zoo.
        rows: row numbers of ``weights.npy``.

    Returns:
        ``(weights, biases)``, per layer.
    """
    block = np.asarray(source.weights[np.sort(rows)], dtype=np.float32)
    block = block[np.argsort(np.argsort(rows))]  # back to the order of ``rows``
    bad = ~np.isfinite(block).all(axis=1)
    if bad.any():
        raise SourceError(f"{source.root / 'weights.npy'}: row {int(rows[bad.argmax()])} has non-finite values")
    weights, biases = [], []
    for layer in source.layers:
        (columns, shape), (bias_columns, _) = layer.kernel, layer.bias
        kernel = torch.from_numpy(np.ascontiguousarray(block[:, columns])).view(-1, *shape)
        if kernel.dim() == 5:  # (n, kh, kw, in, out) -> (n, out, in, kh, kw)
            kernel = kernel.permute(0, 4, 3, 1, 2)
        elif kernel.dim() == 3:  # (n, in, out) -> (n, out, in)
            kernel = kernel.transpose(1, 2)
        else:
            raise SourceError(f"{source.root / 'layout.csv'}: {layer.name} kernel shape {shape} is neither conv nor dense")
        weights.append(kernel.contiguous())
        biases.append(torch.from_numpy(np.ascontiguousarray(block[:, bias_columns])))
    return weights, biases


def folder_settings(source: ZooSource) -> dict:
    """The manifest's description of the zoo's networks, once the source is checked to be the Small CNN
    Zoo's: three 3x3 convolutions and a dense layer, activations among the CNN-zoo folder's.

    Args:
        source: the zoo.

    Returns:
        ``channels``, ``layout``, ``choices`` and ``architecture`` of the folder's manifest.
    """
    from neuralgraph.data.cnn_zoo import ACTIVATIONS, LAYERS

    if len(source.layers) != len(LAYERS) or any(len(l.kernel[1]) != 4 for l in source.layers[:-1]):
        raise SourceError(f"{source.root / 'layout.csv'}: {len(source.layers)} layers; the Small CNN Zoo has three "
                          f"3x3 convolutions and a dense layer ({', '.join(LAYERS)})")
    unknown = sorted(set(source.metrics["config.activation"].tolist()) - set(ACTIVATIONS))
    if unknown:
        raise SourceError(f"{source.root / 'metrics.csv.gz'}: config.activation {unknown[0]!r} is none of {ACTIVATIONS}")
    layout = source.layout
    return {"channels": layout[1], "layout": list(layout), "choices": {"activation": list(ACTIVATIONS)},
            "architecture": {**ARCHITECTURE, "layers": [l.name for l in source.layers]}}


def read(source: ZooSource, rows: np.ndarray, advance: Callable[[int], object]) -> dict[str, Tensor]:
    """One shard of a CNN-zoo folder: the networks at ``rows``, their metrics, epoch (step), network
    (``modeldir``), row of ``weights.npy`` and activation (an index into the folder's choices).

    Args:
        source: the zoo, checked by :func:`folder_settings`.
        rows: row numbers of ``weights.npy``.
        advance: called with the number of rows once they are read (a progress bar's ``update``).

    Returns:
        The shard's tensors by name.
    """
    from neuralgraph.data.cnn_zoo import ACTIVATIONS, LAYERS

    weights, biases = read_rows(source, rows)
    tensors = {}
    for name, w, b in zip(LAYERS, weights, biases):
        tensors[f"{name}.weight"], tensors[f"{name}.bias"] = w, b
    metrics = source.metrics
    tensors.update({column: torch.from_numpy(metrics[column][rows].astype(np.float32)) for column in METRICS})
    tensors["epoch"] = torch.from_numpy(metrics["step"][rows].astype(np.int64))
    tensors["network"] = torch.tensor([source.network_ids[m] for m in metrics["modeldir"][rows]], dtype=torch.int64)
    tensors["row"] = torch.from_numpy(rows.astype(np.int64))
    tensors["activation"] = torch.tensor([ACTIVATIONS.index(a) for a in metrics["config.activation"][rows]],
                                         dtype=torch.int64)
    advance(len(rows))
    return {key: value.contiguous() for key, value in tensors.items()}
