"""A stand-in for the benchmarks' fit child process (``python -m neuralgraph.bench --run-one RESULT FIELDS fit ...``),
shared by their tests."""
import json
import subprocess
from pathlib import Path
from typing import Callable, Optional


def fake_fit(calls: list, result: Callable[[int], dict], fail_at: Optional[int] = None):
    """A ``subprocess.run`` that records each fit command in ``calls`` and writes ``result(n)`` (``n``: the
    call's number, from 1) where the child would, or fails like a killed child on call ``fail_at``.
    Other commands (``platform`` asks ``uname``) run as they are."""
    real_run = subprocess.run

    def run(command, *args, **kwargs):
        if "--run-one" not in command:
            return real_run(command, *args, **kwargs)
        calls.append(command)
        if len(calls) == fail_at:
            raise subprocess.CalledProcessError(-9, command)
        Path(command[command.index("--run-one") + 1]).write_text(json.dumps(result(len(calls))))

    return run
