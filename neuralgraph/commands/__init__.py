"""The subcommands of ``neuralgraph`` (one module each) and what they share: argument types that
refuse bad values at parse time, one reader of checkpoint files with one-line errors, and
``one_line`` that makes any message such an error.

Importing this package is cheap (no torch), so ``neuralgraph --help`` stays fast.
"""
from __future__ import annotations

import argparse
import pickle
from pathlib import Path
from typing import Any, Callable


def one_line(message: object) -> str:
    """``message`` with its lines joined, for a one-line error.

    Args:
        message: an error message or exception, of any number of lines.

    Returns:
        Its non-empty lines, stripped and joined by single spaces.
    """
    return " ".join(line.strip() for line in str(message).splitlines() if line.strip())


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers ``>= minimum``; argparse names the argument on error.

    Args:
        minimum: the smallest value accepted.

    Returns:
        The parser of one option value (:func:`positive_int` and :func:`nonnegative_int` are two).
    """

    def parse(text: str) -> int:
        """Parses an option's value as an integer no smaller than the type's minimum
        (1 for ``positive_int``, 0 for ``nonnegative_int``).

        Args:
            text: the option's value.

        Returns:
            The integer.

        Raises:
            argparse.ArgumentTypeError: ``text`` is not an integer, or is below the minimum.
        """
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)


def output_folder(text: str) -> Path:
    """An argparse ``type`` for an output folder (``--out DIR``): a folder or a path still to create.

    A path that is a file, or that runs through one, is refused at parse time in one line
    (``argument --out: X: a file, not a folder``) rather than as an errno when writing starts.

    Args:
        text: the option's value.

    Returns:
        ``text`` as a path.

    Raises:
        argparse.ArgumentTypeError: ``text`` is a file or lies below one.
    """
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: a file, not a folder")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise argparse.ArgumentTypeError(f"{text}: {parent} is a file, not a folder")
            break
    return path


def check_output_file(path: Path, option: str, force: bool) -> None:
    """Refuses an output file before any work, so that nothing is computed for nothing.

    Args:
        path: the file a command is asked to write.
        option: the option that gave it (``--out``), named by the error.
        force: whether an existing file may be overwritten.

    Raises:
        ValueError: one line naming ``option``: ``path`` exists (without ``force``), is a folder,
            or lies below a file.
    """
    if path.is_dir():
        raise ValueError(f"{option} {path}: a folder, not a file")
    if path.exists() and not force:
        raise ValueError(f"{option} {path}: exists; pass --force to overwrite it")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{option} {path}: {parent} is a file, not a folder")
            break


def load_torch_file(path: str | Path) -> Any:
    """``torch.load(path, weights_only=True)`` on CPU; any unreadable file is a ValueError naming it.

    torch's own messages are replaced: they advise ``weights_only=False``, which would run
    arbitrary code from the file.

    Args:
        path: the checkpoint (or other ``torch.save``) file.

    Returns:
        The file's object, its tensors on CPU.

    Raises:
        ValueError: one line naming ``path``: it is missing, empty, corrupt, or needs more than
            ``weights_only`` allows.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such checkpoint file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except EOFError:
        reason = "empty file"
    except pickle.UnpicklingError as err:
        from neuralgraph.data.formats.source import weights_only_refusal

        reason = weights_only_refusal(err, default="not a PyTorch checkpoint")
    except RuntimeError:
        reason = "truncated or corrupt archive"
    raise ValueError(f"{path}: not a readable checkpoint ({reason})")
