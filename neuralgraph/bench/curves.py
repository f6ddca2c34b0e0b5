"""Per-epoch learning curves of benchmark runs: read from a fit's CSV logs into its record, drawn as one PNG.

A benchmark run logs through Lightning's ``CSVLogger`` (:func:`~neuralgraph.bench.runner.fit_arguments`):
``<run>/lightning_logs/version_<v>/metrics.csv``, one version per start of the fit (a resumed fit
writes the next one). :func:`epoch_history` joins the versions into the epoch-level values of a
run, which the runner records with its result, so that the curves of every run travel in the
committed results JSON; :func:`plot_curves` draws one metric of every recorded run, so that a
reader sees whether a row's number is converged or starved of epochs.
"""
from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Mapping, Sequence

#: ``metrics.csv`` columns a history keeps: epoch-level training and validation values.
HISTORY_PREFIXES = ("train/", "val/")


def _version(path: Path) -> int:
    match = re.fullmatch(r"version_(\d+)", path.parent.name)
    return int(match.group(1)) if match else -1


def epoch_history(log_root: Path) -> dict[str, list]:
    """The epoch-level training and validation metrics a fit logged, over every start of it.

    Args:
        log_root: the CSV logger's folder of versions (``<run>/lightning_logs``).

    Returns:
        ``{"epoch": [e0, e1, ...], "<metric>": [value or None, ...], ...}``, epochs increasing; a
        later version's value of an epoch replaces an earlier one's (a fit killed after logging
        an epoch and resumed from an earlier checkpoint repeats it). Empty when nothing was logged.

    Raises:
        ValueError: naming a ``metrics.csv`` without an ``epoch`` column or with a value that is not a number.
    """
    values: dict[int, dict[str, float]] = {}
    for path in sorted(log_root.glob("version_*/metrics.csv"), key=_version):
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None or "epoch" not in reader.fieldnames:
                raise ValueError(f"{path}: no 'epoch' column (columns: {reader.fieldnames})")
            for line, record in enumerate(reader, start=2):
                if not record["epoch"]:
                    continue
                try:
                    epoch = int(float(record["epoch"]))
                    logged = {key: float(value) for key, value in record.items()
                              if key.startswith(HISTORY_PREFIXES) and value not in ("", None)}
                except ValueError as err:
                    raise ValueError(f"{path}, line {line}: {err}") from None
                values.setdefault(epoch, {}).update(logged)
    epochs = sorted(epoch for epoch, logged in values.items() if logged)
    metrics = sorted({key for epoch in epochs for key in values[epoch]})
    return {"epoch": epochs, **{key: [values[epoch].get(key) for epoch in epochs] for key in metrics}} if epochs else {}


def plot_curves(runs: Sequence[Mapping], metric: str, title: str, path: Path, scale: float = 1.0) -> int:
    """One PNG of ``metric`` per epoch for every run that recorded a history: a colour per system, a
    line style per seed.

    Args:
        runs: the recorded runs (``arch``, ``seed``, ``history``); runs without a history are left out
            of the figure and named in its legend's title.
        metric: the history's metric (``"val/accuracy"``).
        title: the figure's title.
        path: the PNG written.
        scale: a factor on the values (100: a percentage).

    Returns:
        The number of runs drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drawn = [run for run in runs if metric in (run.get("history") or {})]
    systems = list(dict.fromkeys(run["arch"] for run in drawn))
    colours = plt.get_cmap("tab20" if len(systems) > 10 else "tab10")
    styles = ("-", "--", ":", "-.")
    figure, axis = plt.subplots(figsize=(10, 4.8))
    for run in drawn:
        history = run["history"]
        points = [(epoch + 1, scale * value) for epoch, value in zip(history["epoch"], history[metric])
                  if value is not None and math.isfinite(value)]
        if not points:
            continue
        axis.plot(*zip(*points), styles[run["seed"] % len(styles)], color=colours(systems.index(run["arch"])),
                  marker="." if len(points) < 20 else None, label=f"{run['arch']} seed {run['seed']}")
    missing = len(runs) - len(drawn)
    axis.set(xlabel="epoch", ylabel=metric + (f" x{scale:g}" if scale != 1.0 else ""), title=title)
    axis.grid(alpha=0.3)
    if drawn:
        axis.legend(fontsize=7, ncol=2 if len(drawn) > 12 else 1, loc="center left", bbox_to_anchor=(1.01, 0.5),
                    title=f"{missing} recorded run(s)\nwithout a per-epoch history" if missing else None,
                    title_fontsize=7)  # beside the axes: the curves stay visible
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return len(drawn)
