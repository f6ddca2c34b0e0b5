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
    """``message`` with its lines joined, for a one-line error."""
    return " ".join(line.strip() for line in str(message).splitlines() if line.strip())


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers ``>= minimum``; argparse names the argument on error."""

    def parse(text: str) -> int:
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


def load_torch_file(path: str | Path) -> Any:
    """``torch.load(path, weights_only=True)`` on CPU; any unreadable file is a ValueError naming it.

    torch's own messages are replaced: they advise ``weights_only=False``, which would run
    arbitrary code from the file.
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
