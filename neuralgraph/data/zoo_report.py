"""How well a zoo's networks were trained: test accuracy per checkpoint epoch, as a table and a histogram.

A zoo of barely trained networks says little about a metanetwork that predicts their accuracy,
so every zoo states its accuracy distribution: per checkpoint epoch the count, minimum,
quartiles and maximum of the networks' test accuracy (:func:`accuracy_summary`), which
``make-cnn-zoo --preset small-cnn-zoo`` records in the manifest and ``neuralgraph zoo-report``
prints as markdown (:func:`summary_markdown`) beside a histogram PNG drawn with Pillow
(:func:`histogram_png`). It reads the Small CNN Zoo's ``metrics.csv.gz`` (``step``,
``test_accuracy``), so the released zoo reports the same way as a generated one, and the sharded
folders of ``make-cnn-zoo`` and ``make-transformer-zoo`` (each shard's ``epoch`` and
``test_accuracy``), whose manifests record the summary too.
"""
from __future__ import annotations

import csv
import gzip
import io
from pathlib import Path

import numpy as np

QUANTILES = (0.25, 0.5, 0.75)
BINS = 20  # histogram bins over accuracy 0 .. 1


def read_metrics(folder: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """The checkpoint epoch and test accuracy of every entry of a zoo.

    Args:
        folder: a Small-CNN-Zoo-format folder (generated or released: its ``metrics.csv.gz``), or a
            sharded zoo folder of ``make-cnn-zoo`` or ``make-transformer-zoo`` (its shards, each
            checked against the manifest's sha256).

    Returns:
        ``(epochs, accuracies)``, one entry per row (network x checkpoint).

    Raises:
        ValueError: the folder is neither, or its metrics lack the ``step`` (``epoch``) or
            ``test_accuracy`` column (named).
    """
    path = Path(folder) / "metrics.csv.gz"
    if not path.is_file() and (Path(folder) / "manifest.json").is_file():
        return read_shard_metrics(Path(folder))
    if not path.is_file():
        raise ValueError(f"{path}: no such file (a zoo of the Small CNN Zoo's format has one; a sharded zoo "
                         "folder has a manifest.json)")
    with gzip.open(path, "rt") as f:
        rows = list(csv.DictReader(f))
    for column in ("step", "test_accuracy"):
        if not rows or column not in rows[0]:
            raise ValueError(f"{path}: no {column!r} column")
    return (np.array([int(float(r["step"])) for r in rows]), np.array([float(r["test_accuracy"]) for r in rows]))


def read_shard_metrics(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """The checkpoint epoch and test accuracy of every entry of a sharded zoo folder.

    Args:
        folder: a folder of ``make-cnn-zoo`` or ``make-transformer-zoo`` (every shard written).

    Returns:
        ``(epochs, accuracies)``, one entry per network x checkpoint.

    Raises:
        ValueError: the manifest lists no shards, or a shard lacks ``epoch`` or ``test_accuracy`` (named).
    """
    import json

    from neuralgraph.data.shards import read_shard

    manifest = json.loads((folder / "manifest.json").read_text())
    shards = manifest.get("shards") or []
    if not shards:
        raise ValueError(f"{folder / 'manifest.json'}: lists no shards (not a zoo folder, or none trained yet)")
    epochs, accuracies = [], []
    for record in shards:
        tensors = read_shard(folder / record["file"], record, "the zoo's command")
        for key in ("epoch", "test_accuracy"):
            if key not in tensors:
                raise ValueError(f"{folder / record['file']}: no {key!r} tensor")
        epochs.append(tensors["epoch"].numpy())
        accuracies.append(tensors["test_accuracy"].double().numpy())
    return np.concatenate(epochs).astype(np.int64), np.concatenate(accuracies)


def accuracy_summary(epochs: np.ndarray, accuracies: np.ndarray) -> dict[str, dict[str, float]]:
    """Count, minimum, quartiles and maximum of the test accuracy at each checkpoint epoch.

    Args:
        epochs: the checkpoint epoch of each row.
        accuracies: the test accuracy of each row; non-finite values (diverged networks) are counted
            apart and left out of the statistics.

    Returns:
        ``{epoch: {"networks", "diverged", "min", "q1", "median", "q3", "max"}}`` with the epochs as
        strings (JSON keys), in increasing order.
    """
    summary = {}
    for epoch in sorted(set(epochs.tolist())):
        values = accuracies[epochs == epoch]
        finite = values[np.isfinite(values)]
        stats = np.quantile(finite, (0.0, *QUANTILES, 1.0)) if len(finite) else [float("nan")] * 5
        summary[str(epoch)] = {"networks": int(len(values)), "diverged": int(len(values) - len(finite)),
                               **{name: round(float(v), 4) for name, v in zip(("min", "q1", "median", "q3", "max"),
                                                                              stats)}}
    return summary


def summary_markdown(summary: dict[str, dict[str, float]]) -> str:
    """The summary as a markdown table, one row per checkpoint epoch.

    Args:
        summary: :func:`accuracy_summary`'s result.

    Returns:
        The table's lines, joined.
    """
    lines = ["| epoch | networks | diverged | min | q1 | median | q3 | max |", "|---|---|---|---|---|---|---|---|"]
    for epoch, s in summary.items():
        lines.append(f"| {epoch} | {s['networks']} | {s['diverged']} | " + " | ".join(
            f"{s[k]:.3f}" for k in ("min", "q1", "median", "q3", "max")) + " |")
    return "\n".join(lines) + "\n"


def histogram_png(epochs: np.ndarray, accuracies: np.ndarray, title: str) -> bytes:
    """A PNG of the accuracy histograms, one panel per checkpoint epoch (Pillow only, no plotting library).

    Args:
        epochs: the checkpoint epoch of each row.
        accuracies: the test accuracy of each row (non-finite values left out).
        title: the line above the panels.

    Returns:
        The PNG file's bytes.
    """
    from PIL import Image, ImageDraw

    panels = sorted(set(epochs.tolist()))
    width, panel_height, top, margin = 640, 120, 30, 50
    image = Image.new("RGB", (width, top + panel_height * len(panels) + 20), "white")
    draw = ImageDraw.Draw(image)
    draw.text((margin, 8), title, fill="black")
    plot = width - 2 * margin
    for row, epoch in enumerate(panels):
        values = accuracies[(epochs == epoch) & np.isfinite(accuracies)]
        counts, _ = np.histogram(values, bins=BINS, range=(0.0, 1.0))
        y0 = top + row * panel_height
        base = y0 + panel_height - 25
        tallest = max(int(counts.max()), 1)
        for k, count in enumerate(counts):
            x = margin + k * plot // BINS
            height = int((panel_height - 40) * count / tallest)
            draw.rectangle([x + 1, base - height, x + plot // BINS - 1, base], fill=(70, 110, 180))
        draw.line([margin, base, margin + plot, base], fill="black")
        for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
            x = margin + int(tick * plot)
            draw.line([x, base, x, base + 4], fill="black")
            draw.text((x - 8, base + 6), f"{tick:.2f}", fill="black")
        draw.text((4, y0 + 4), f"epoch {epoch}", fill="black")
        draw.text((margin + plot - 120, y0 + 4), f"n={len(values)}, max {tallest}", fill="black")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()
