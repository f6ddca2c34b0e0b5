"""Progress bars for terminals and for logs: every bar of the package is a :class:`Progress`.

On a terminal a :class:`Progress` is a plain tqdm bar. When its stream is not a terminal (a log
file, a pipe, a batch job's output), tqdm would write thousands of ``\\r`` frames into one
enormous line; a :class:`Progress` writes whole lines instead: one every :data:`LINE_INTERVAL`
seconds (or ``mininterval``, when given) while it runs, and the final state of a bar that stays
(``leave``) when it is reset or closed. A bar shorter than the interval that does not stay writes
nothing. No ``\\r`` and no cursor movement is written.

A loop whose units of work are long (a zoo's shards) takes :func:`unit_progress` and calls
:meth:`Progress.checkpoint` after each unit: a log then gets one line per unit.

``progress(iterable, **kwargs)`` is ``Progress(iterable, **kwargs)``; both take tqdm's arguments.
"""
from __future__ import annotations

import math
import sys
import time
from typing import Any, Iterable, Optional

from tqdm import tqdm

#: Seconds between two lines of a bar written to a log (not a terminal).
LINE_INTERVAL = 30.0


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an interactive terminal (tqdm's frames are for those only).

    Args:
        stream: a file object, such as ``sys.stderr``.

    Returns:
        True when ``stream.isatty()`` says so; False for a file, a pipe, a closed stream.
    """
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class Progress(tqdm):
    """tqdm that writes whole lines, rate-limited, when its stream is not a terminal.

    Args:
        iterable: what to iterate over, as in tqdm (None for a bar updated by hand).
        *args: tqdm's further positional arguments.
        file: the stream to write to; ``sys.stderr`` by default, as in tqdm.
        mininterval: seconds between two redraws; when the stream is not a terminal, between two
            lines (default :data:`LINE_INTERVAL`; tqdm's 0.1 on a terminal).
        **kwargs: tqdm's keyword arguments; ``ascii`` defaults to True when not a terminal.
    """

    def __init__(self, iterable: Optional[Iterable] = None, *args: Any, file: Any = None,
                 mininterval: Optional[float] = None, **kwargs: Any) -> None:
        file = sys.stderr if file is None else file
        self._lines = not is_terminal(file)
        self._line_interval = LINE_INTERVAL if mininterval is None else mininterval
        self._line_time = time.monotonic()  # when the last line was written (or the bar began)
        self._last_line = ""
        if self._lines:
            kwargs.setdefault("ascii", True)
            kwargs["dynamic_ncols"] = False  # no terminal to measure
            mininterval = self._line_interval
        elif mininterval is None:
            mininterval = 0.1  # tqdm's default
        super().__init__(iterable, *args, file=file, mininterval=mininterval, **kwargs)

    # -- line mode: tqdm calls these to draw, move the cursor and erase; a log gets lines only --

    def status_printer(self, file):  # tqdm calls it as self.status_printer(self.fp)
        if not self._lines:
            return tqdm.status_printer(file)
        return lambda text: None  # every line is written by _write_line

    def _write_line(self) -> None:
        line = self.__str__().strip()
        if line and line != self._last_line:
            self.fp.write(line + "\n")
            getattr(self.fp, "flush", lambda: None)()
            self._last_line = line
        self._line_time = time.monotonic()

    def display(self, msg: Optional[str] = None, pos: Optional[int] = None) -> bool:
        if not self._lines:
            return super().display(msg, pos)
        if msg is not None or not self.n:  # erasing, or nothing done yet: no line
            return True
        if time.monotonic() - self._line_time >= self._line_interval:
            self._write_line()
        return True

    def checkpoint(self) -> None:
        """Write the bar's state as a line now when its stream is not a terminal (a unit of work
        finished: a zoo's shard); on a terminal, nothing beyond tqdm's redraws."""
        if self._lines and not self.disable and self.n:
            self._write_line()

    def moveto(self, n: int) -> None:
        if not self._lines:
            super().moveto(n)

    def clear(self, nolock: bool = False) -> None:
        if not self._lines:
            super().clear(nolock)

    def _leaves(self) -> bool:
        return abs(getattr(self, "pos", 0)) == 0 if self.leave is None else bool(self.leave)

    def reset(self, total: Optional[float] = None) -> None:
        if self._lines and not self.disable and self.n and self._leaves():
            self._write_line()  # the state the bar reached before it starts over (an epoch's last)
        super().reset(total)

    def close(self) -> None:
        if not getattr(self, "_lines", False) or getattr(self, "disable", True):
            super().close()
            return
        if self.n and self._leaves():
            self._ema_dt = lambda: None  # the overall rate in the last line, as tqdm's close shows it
            self._write_line()
        self.disable = True
        self._decr_instances(self)


def progress(iterable: Optional[Iterable] = None, **kwargs: Any) -> Progress:
    """A progress bar for the package's loops.

    Args:
        iterable: what to iterate over (None for a bar updated by hand, with ``total=``).
        **kwargs: tqdm's keyword arguments.

    Returns:
        A :class:`Progress` bar.
    """
    return Progress(iterable, **kwargs)


def unit_progress(**kwargs: Any) -> Progress:
    """A bar over long units of work (a zoo's shards, counted in networks): on a terminal a tqdm bar
    redrawn as usual; elsewhere one line each time the loop calls :meth:`Progress.checkpoint` (and
    the last at close), none in between.

    Args:
        **kwargs: tqdm's keyword arguments (``total``, ``initial``, ``unit``, ``desc``, ``disable``, ...).

    Returns:
        A :class:`Progress` bar counting whole units.
    """
    terminal = is_terminal(kwargs.get("file") or sys.stderr)
    kwargs.setdefault("bar_format", "{l_bar}{bar}| {n:.0f}/{total} [{elapsed}<{remaining}]")
    return Progress(dynamic_ncols=terminal, mininterval=None if terminal else math.inf, **kwargs)
