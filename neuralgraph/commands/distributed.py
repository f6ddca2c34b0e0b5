"""Options of the commands that write a dataset folder from many processes or machines at once
(``make-inrs``, ``make-cnn-zoo``, ``import-dataset``): which worker this process is, from the
options or from the environment of the launcher (torchrun, a SLURM array), and the merge step
(docs/datasets.md, "Data beyond one machine"). Imports no torch, so ``--help`` stays fast.
"""
from __future__ import annotations

import argparse
import os
from typing import Mapping, Optional

from neuralgraph.commands import nonnegative_int, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the worker options (``--worker-index``, ``--num-workers``, ``--merge``) as one group.

    Args:
        parser: the parser of a command that writes a dataset folder.
    """
    group = parser.add_argument_group("many processes or machines (docs/datasets.md, 'Data beyond one machine')")
    group.add_argument("--worker-index", type=nonnegative_int, default=None,
                       help="this worker's index, 0 .. N-1 (default: torchrun's RANK, or a SLURM array's "
                            "SLURM_ARRAY_TASK_ID); it writes every N-th shard and records it in worker-I-of-N.json")
    group.add_argument("--num-workers", type=positive_int, default=None,
                       help="workers sharing --out (default: torchrun's WORLD_SIZE, or SLURM_ARRAY_TASK_COUNT)")
    group.add_argument("--merge", action="store_true",
                       help="once every worker is done: verify their shards and write manifest.json "
                            "(the workers' command, other options unchanged)")


def _integer(environ: Mapping[str, str], name: str) -> int:
    try:
        return int(environ[name])
    except ValueError:
        raise ValueError(f"${name}={environ[name]!r}: expected an integer") from None


def worker_of(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Optional[tuple[int, int]]:
    """``(index, count)`` of this worker, or None for a run alone or a merge.

    ``--worker-index``/``--num-workers`` if given; else torchrun's ``RANK``/``WORLD_SIZE`` (or
    ``LOCAL_RANK``/``LOCAL_WORLD_SIZE``); else a SLURM array's ``SLURM_ARRAY_TASK_ID`` (less
    ``SLURM_ARRAY_TASK_MIN``) and ``SLURM_ARRAY_TASK_COUNT``. A count of 1 is a run alone; both
    launchers at once, or an index outside ``0 .. count-1``, is an error.

    Args:
        args: the parsed options of :func:`add_arguments`.
        environ: the environment the launcher's variables are read from.

    Returns:
        The worker's index and the number of workers, or None when this process writes alone or merges.

    Raises:
        ValueError: the options contradict each other or the environment, or the index is out of range.
    """
    if args.merge:
        if args.worker_index is not None or args.num_workers is not None:
            raise ValueError("--merge merges the records of every worker: drop --worker-index and --num-workers")
        return None
    if (args.worker_index is None) != (args.num_workers is None):
        raise ValueError("--worker-index and --num-workers go together")
    if args.worker_index is not None:
        found = {"--worker-index/--num-workers": (args.worker_index, args.num_workers)}
    else:
        found = {}
        for rank, size in (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE")):
            if size in environ and rank in environ:
                found[f"${rank}/${size} (torchrun)"] = (_integer(environ, rank), _integer(environ, size))
                break
        if "SLURM_ARRAY_TASK_COUNT" in environ and "SLURM_ARRAY_TASK_ID" in environ:
            first = _integer(environ, "SLURM_ARRAY_TASK_MIN") if "SLURM_ARRAY_TASK_MIN" in environ else 0
            found["$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT"] = (
                _integer(environ, "SLURM_ARRAY_TASK_ID") - first, _integer(environ, "SLURM_ARRAY_TASK_COUNT"))
        found = {source: pair for source, pair in found.items() if pair[1] > 1}
        if len(found) > 1:
            raise ValueError(f"both {' and '.join(found)} name this process's worker: "
                             "pass --worker-index and --num-workers")
    if not found:
        return None
    (source, (index, count)), = found.items()
    if not 0 <= index < count:
        raise ValueError(f"{source}: worker {index} of {count}, expected 0 .. {count - 1} "
                         "(a SLURM array must be contiguous, e.g. --array=0-N-1)")
    return (index, count) if count > 1 else None


def worker_done(out: str, worker: tuple[int, int]) -> str:
    """What a worker prints when its share is written.

    Args:
        out: the dataset folder.
        worker: the worker's index and the number of workers.

    Returns:
        One line saying the shards are written and that ``--merge`` comes next.
    """
    return (f"{out}: worker {worker[0]} of {worker[1]} wrote its shards (worker-{worker[0]}-of-{worker[1]}.json); "
            "once every worker is done, run this command once more with --merge instead of the worker options")
