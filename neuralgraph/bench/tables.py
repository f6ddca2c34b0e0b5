"""The markdown of a benchmark's results: rows of cells, and the cells every table shares."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional, Sequence

Cell = Optional[str]  # None: a blank cell (``| |``); "" an empty value (``|  |``)


class Group(NamedTuple):
    """The runs of one table row: a system (at one k) and its recorded seeds.

    Attributes:
        system: the system's name.
        k: its number of ensemble members (decoder outputs).
        runs: the recorded result of each of its seeds.
        report: the whole table's report, for cells that need more than the row.
    """

    system: str
    k: int
    runs: list[dict]
    report: Any


@dataclass(frozen=True)
class Column:
    """A table column: its header and its cell from a row's :class:`Group`.

    Attributes:
        header: the column's header.
        cell: the cell of a row's :class:`Group`.
        always: the cell is also written in a row of a system not run yet (its name, a published
            number); of the other columns, the first says ``not run yet`` there and the rest are blank.
    """

    header: str
    cell: Callable[[Group], Any]
    always: bool = False


def row(cells: Sequence[Cell]) -> str:
    """A markdown table row; a ``None`` cell is blank.

    Args:
        cells: the row's cells, in order.

    Returns:
        The row, ``| a | b |``.
    """
    return "|" + "|".join(" " if cell is None else f" {cell} " for cell in cells) + "|"


def header(columns: Sequence[Column]) -> list[str]:
    """The first two lines of a markdown table.

    Args:
        columns: the table's columns.

    Returns:
        The row of their headers, then the separator line.
    """
    return [row([column.header for column in columns]), "|" + "---|" * len(columns)]


def seeds_cell(values: Sequence[float], digits: int = 3) -> str:
    """``mean ± std (n)`` of values over seeds, ``mean (1)`` for one, ``not run yet`` for none.

    Args:
        values: one value per seed.
        digits: decimals of the mean and std.

    Returns:
        The cell.
    """
    if not values:
        return "not run yet"
    return f"{mean_std(values, digits)} ({len(values)})"


def mean_std(values: Sequence[float], digits: int = 3) -> str:
    """``mean ± std`` of values over seeds, ``mean`` for one.

    Args:
        values: one value per seed, at least one.
        digits: decimals of the mean and std.

    Returns:
        The mean, and the sample standard deviation when there are two values or more.
    """
    spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.{digits}f}{spread}"


def wall_minutes(group: Group) -> str:
    """Mean wall time per run in minutes, over the runs that ran whole when there are any.

    A run that resumed a killed fit timed only its last part, so it is left out of a mean that has
    whole runs (and named: ``(seed 2 resumed, not in the mean)``); a row whose every run resumed
    gives their mean, marked ``(resumed)``.

    Args:
        group: the row's runs.

    Returns:
        The cell, one decimal.
    """
    resumed = [run for run in group.runs if run.get("resumed")]
    timed = [run for run in group.runs if not run.get("resumed")] or resumed
    suffix = ""
    if resumed:
        seeds = ", ".join(str(run.get("seed", "?")) for run in sorted(resumed, key=lambda run: run.get("seed", -1)))
        suffix = (" (resumed)" if timed is resumed
                  else f" (seed{'s' if len(resumed) > 1 else ''} {seeds} resumed, not in the mean)")
    by_threads = runs_by_threads(timed)
    if len(by_threads) < 2:
        return f"{statistics.mean(r['wall_s'] for r in timed) / 60:.1f}{suffix}"
    return "; ".join(f"{statistics.mean(r['wall_s'] for r in runs) / 60:.1f} ({threads_phrase(threads)})"
                     for threads, runs in by_threads.items()) + suffix


def runs_by_threads(runs: Sequence[dict]) -> dict[Optional[int], list[dict]]:
    """The runs grouped by their recorded torch thread count (None: not recorded), fewest threads first.

    Args:
        runs: recorded runs.

    Returns:
        ``{threads: runs}``.
    """
    grouped: dict[Optional[int], list[dict]] = {}
    for run in sorted(runs, key=lambda run: run.get("threads") or 0):
        grouped.setdefault(run.get("threads"), []).append(run)
    return grouped


def threads_phrase(threads: Optional[int]) -> str:
    """``1 thread``, ``2 threads``, or ``threads not recorded``.

    Args:
        threads: a thread count, None when not recorded.

    Returns:
        The phrase.
    """
    return "threads not recorded" if threads is None else f"{threads} thread{'' if threads == 1 else 's'}"


def machine_cell(group: Group) -> str:
    """Where the row's runs ran: each CPU (or GPU) with the thread counts of its runs, joined by semicolons.

    Args:
        group: the row's runs.

    Returns:
        The cell, e.g. ``Intel(R) Xeon(R) Processor, AVX-512 (1, 2 threads)``.
    """
    by_cpu: dict[str, set] = {}
    for run in group.runs:
        by_cpu.setdefault(run.get("cpu", "CPU not recorded"), set()).add(run.get("threads"))
    cells = []
    for cpu, threads in sorted(by_cpu.items()):
        known = sorted(count for count in threads if count is not None)
        counts = [*map(str, known[:-1]), threads_phrase(known[-1])] if known else []
        cells.append(f"{cpu} ({', '.join(counts)})" if known else cpu)
    return "; ".join(cells)


def peak_memory_mb(group: Group) -> str:
    """The first run's peak memory in MB: of the GPU where it ran on one, else resident.

    Args:
        group: the row's runs.

    Returns:
        The cell, in whole MB.
    """
    run = group.runs[0]
    return f"{run['peak_cuda_mb'] if run['peak_cuda_mb'] is not None else run['peak_rss_mb']:.0f}"


SYSTEM = Column("system", lambda group: group.system, always=True)
PARAMETERS = Column("parameters", lambda group: f"{group.runs[0]['parameters']:,}")


def flops_cell(group: Group) -> str:
    """MFLOPs per prediction of the row's first run that counted them (the count depends on the
    settings, which a row's runs share; runs recorded before the count existed have none).

    Args:
        group: the row's runs.

    Returns:
        The cell, or empty when no run counted them.
    """
    counted = [run["flops_per_prediction"] for run in group.runs if run.get("flops_per_prediction") is not None]
    return f"{counted[0] / 1e6:,.2f}" if counted else ""


FLOPS = Column("MFLOPs per prediction", flops_cell)
HIDDEN_DIM = Column("hidden_dim", lambda group: group.runs[0]["hidden_dim"])
EPOCHS = Column("epochs", lambda group: group.runs[0]["epochs"])
PEAK_MEMORY = Column("peak memory (MB)", peak_memory_mb)
MACHINE = Column("CPU (threads)", machine_cell)


def seeds_column(header: str, field: str, scale: float = 1.0, digits: int = 3) -> Column:
    """``mean ± std (n)`` over seeds of a result field times ``scale``.

    Args:
        header: the column's header.
        field: the result field of each run.
        scale: the factor applied to each value (100 for a percentage).
        digits: decimals of the mean and std.

    Returns:
        The column, its cells from :func:`seeds_cell`.
    """
    return Column(header, lambda group: seeds_cell([scale * r[field] for r in group.runs], digits))


def wall_column(header: str = "wall time per run (min)") -> Column:
    """The column of :func:`wall_minutes`.

    Args:
        header: the column's header.

    Returns:
        The column.
    """
    return Column(header, wall_minutes)


def published_column(header: str, published: Sequence[tuple], value: int, spec: str = "") -> Column:
    """The published numbers of the row's system: ``value (name)`` for each entry ``(name, system, ...)``
    of ``published`` (its ``value``-th field, formatted with ``spec``), joined by ``"; "``.

    Args:
        header: the column's header.
        published: the published results, each ``(name, system, ...)``.
        value: the index of the field shown.
        spec: the format spec of that field.

    Returns:
        The column, written for systems not run yet as well.
    """
    return Column(header, lambda group: "; ".join(f"{p[value]:{spec}} ({p[0]})" for p in published
                                                  if p[1] == group.system), always=True)
