"""The markdown of a benchmark's results: rows of cells, and the cells every table shares."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional, Sequence

Cell = Optional[str]  # None: a blank cell (``| |``); "" an empty value (``|  |``)


class Group(NamedTuple):
    """The runs of one table row: a system (at one k) and its recorded seeds; ``report`` the whole table's."""

    system: str
    k: int
    runs: list[dict]
    report: Any


@dataclass(frozen=True)
class Column:
    """A table column: its header and its cell from a row's :class:`Group`.

    ``always``: the cell is also written in a row of a system not run yet (its name, a published
    number); of the others, the first says ``not run yet`` there and the rest are blank.
    """

    header: str
    cell: Callable[[Group], Any]
    always: bool = False


def row(cells: Sequence[Cell]) -> str:
    """A markdown table row; a ``None`` cell is blank."""
    return "|" + "|".join(" " if cell is None else f" {cell} " for cell in cells) + "|"


def header(columns: Sequence[Column]) -> list[str]:
    return [row([column.header for column in columns]), "|" + "---|" * len(columns)]


def seeds_cell(values: Sequence[float], digits: int = 3) -> str:
    """``mean ± std (n)`` of values over seeds, ``mean (1)`` for one, ``not run yet`` for none."""
    if not values:
        return "not run yet"
    return f"{mean_std(values, digits)} ({len(values)})"


def mean_std(values: Sequence[float], digits: int = 3) -> str:
    """``mean ± std`` of values over seeds, ``mean`` for one."""
    spread = f" ± {statistics.stdev(values):.{digits}f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.{digits}f}{spread}"


def wall_minutes(group: Group) -> str:
    """Mean wall time per run in minutes, ``(resumed)`` when a run resumed a killed fit."""
    resumed = " (resumed)" if any(r.get("resumed") for r in group.runs) else ""
    return f"{statistics.mean(r['wall_s'] for r in group.runs) / 60:.1f}{resumed}"


def peak_memory_mb(group: Group) -> str:
    """The first run's peak memory in MB: of the GPU where it ran on one, else resident."""
    run = group.runs[0]
    return f"{run['peak_cuda_mb'] if run['peak_cuda_mb'] is not None else run['peak_rss_mb']:.0f}"


SYSTEM = Column("system", lambda group: group.system, always=True)
PARAMETERS = Column("parameters", lambda group: f"{group.runs[0]['parameters']:,}")
HIDDEN_DIM = Column("hidden_dim", lambda group: group.runs[0]["hidden_dim"])
EPOCHS = Column("epochs", lambda group: group.runs[0]["epochs"])
PEAK_MEMORY = Column("peak memory (MB)", peak_memory_mb)


def seeds_column(header: str, field: str, scale: float = 1.0, digits: int = 3) -> Column:
    """``mean ± std (n)`` over seeds of a result field times ``scale``."""
    return Column(header, lambda group: seeds_cell([scale * r[field] for r in group.runs], digits))


def wall_column(header: str = "wall time per run (min)") -> Column:
    return Column(header, wall_minutes)


def published_column(header: str, published: Sequence[tuple], value: int, spec: str = "") -> Column:
    """The published numbers of the row's system: ``value (name)`` for each entry ``(name, system, ...)``
    of ``published`` (its ``value``-th field, formatted with ``spec``), joined by ``; ``."""
    return Column(header, lambda group: "; ".join(f"{p[value]:{spec}} ({p[0]})" for p in published
                                                  if p[1] == group.system), always=True)
