"""What every source reader shares: the safe tensor-file loader, the entry record, its errors."""
from __future__ import annotations

import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import Tensor


class SourceError(ValueError):
    """A source file or folder that cannot be imported; the message names the file and key."""


@dataclass(frozen=True)
class InrEntry:
    """One INR of a source: its file, class label and, where the source says, the MNIST digit it encodes.

    Attributes:
        file: the INR's file.
        label: its class.
        mnist_split: ``"train"`` or ``"test"``, the MNIST split of the digit, or ``None``.
        mnist_index: index of the digit in that split; -1 when the source does not say.
        copy: 0 for the INR itself; ``i > 0`` for augmented copy ``i - 1`` (NFN's ``randinit_smaller_aug{i-1}``).
    """

    file: Path
    label: int
    mnist_split: Optional[str] = None  # "train" or "test": the MNIST split of the digit
    mnist_index: int = -1  # index of the digit in that split; -1 when the source does not say
    copy: int = 0  # 0: the INR itself; i > 0: augmented copy i - 1 (NFN's randinit_smaller_aug{i-1})


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def plain_text(message: str) -> str:
    """``message`` without terminal escape codes (torch's messages carry bold markers).

    Args:
        message: a message.

    Returns:
        The text.
    """
    return ANSI_ESCAPE.sub("", message).strip() or "no message"


def weights_only_refusal(err: pickle.UnpicklingError,
                         default: str = "not a file of tensors and plain containers (a weights-only load refuses it)",
                         ) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, in one plain line.

    torch's own message is replaced: it carries escape codes and advises loading the file with
    ``weights_only=False``, which would run arbitrary code from an untrusted file.

    Args:
        err: the error ``torch.load`` raised.
        default: the reason when torch's message names no refused object.

    Returns:
        The object the file needs (``holds a fractions.Fraction object, ...``) or a generic reason.
    """
    refused = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
    if refused:
        return f"holds a {refused.group(1)} object, which a weights-only load refuses (only tensors and plain containers are read)"
    return default


def load_tensors(path: Path) -> dict:
    """The dict a ``.pth``/``.pt`` file holds, read with ``torch.load(weights_only=True)``.

    A pickle that needs anything beyond tensors and plain containers is refused, never executed.

    Args:
        path: the file.

    Returns:
        The dict.
    """
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError as err:
        raise SourceError(f"{path}: missing") from err
    except pickle.UnpicklingError as err:
        raise SourceError(f"{path}: refused: {weights_only_refusal(err)}") from err
    except (RuntimeError, EOFError, OSError) as err:
        raise SourceError(f"{path}: not a readable torch file ({plain_text(str(err)).splitlines()[0][:200]})") from err
    if not isinstance(data, dict):
        raise SourceError(f"{path}: holds a {type(data).__name__}, expected a state dict")
    return data


def linear_layers(state: dict, keys: Sequence[tuple[str, str]], path: Path,
                  layout: Optional[Sequence[int]] = None) -> tuple[list[Tensor], list[Tensor]]:
    """The ``(weight, bias)`` pairs at ``keys`` of ``state`` as float32 ``nn.Linear`` blocks, checked.

    Consecutive layers must chain (``weight[l].shape[1] == weight[l - 1].shape[0]``) and match
    ``layout`` when given; every value must be finite. Errors name ``path`` and the key.

    Args:
        state: the file's dict.
        keys: ``(weight key, bias key)`` per layer.
        path: the file, for errors.
        layout: the layout the layers must have, or ``None``.

    Returns:
        ``(weights, biases)``, per layer.
    """
    weights, biases = [], []
    for weight_key, bias_key in keys:
        for key in (weight_key, bias_key):
            if key not in state:
                found = ", ".join(sorted(k for k in state if isinstance(k, str))[:6])
                raise SourceError(f"{path}: key {key!r} is missing (found {found})")
            if not isinstance(state[key], Tensor):
                raise SourceError(f"{path}: key {key!r} holds a {type(state[key]).__name__}, expected a tensor")
        weight, bias = state[weight_key], state[bias_key]
        if weight.dim() != 2 or bias.shape != (weight.shape[0],):
            raise SourceError(f"{path}: {weight_key} has shape {tuple(weight.shape)} and {bias_key} "
                              f"{tuple(bias.shape)}; expected [d_out, d_in] and [d_out]")
        if weights and weight.shape[1] != weights[-1].shape[0]:
            raise SourceError(f"{path}: {weight_key} has shape {tuple(weight.shape)} but the layer before has "
                              f"{weights[-1].shape[0]} outputs")
        for key, value in ((weight_key, weight), (bias_key, bias)):
            if not bool(torch.isfinite(value).all()):
                raise SourceError(f"{path}: key {key!r} has non-finite values")
        weights.append(weight.float())
        biases.append(bias.float())
    found = (weights[0].shape[1], *(w.shape[0] for w in weights))
    if layout is not None and tuple(found) != tuple(layout):
        raise SourceError(f"{path}: layout {found}, but the source's other files have {tuple(layout)}")
    return weights, biases


def unused_keys(state: dict, used: Sequence[str], path: Path) -> None:
    """Refuse tensors the reader does not place (nothing of a source is silently dropped).

    Args:
        state: the file's dict.
        used: the keys the reader placed.
        path: the file, for errors.
    """
    extra = sorted(str(k) for k in state if k not in used)
    if extra:
        raise SourceError(f"{path}: unexpected keys {extra[:4]}; not a network of this format")


def natural_key(path: Path) -> list:
    """Sort key that orders ``net2`` before ``net10``.

    Args:
        path: a path.

    Returns:
        Its parts, digit runs as integers.
    """
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]
