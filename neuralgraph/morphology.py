"""Batched grey-scale morphology on ``[B, H, W]`` images, the edits INRs are trained to apply.

With a flat 3x3 structuring element and pixels outside the image ignored (as
``cv2.dilate(img, np.ones((3, 3)))`` and ``scipy.ndimage.grey_dilation(img, size=3,
mode="nearest")`` do):

.. math::
    (I \\oplus K)[i, j] = \\max_{|u|, |v| \\le r,\\ (i+u, j+v) \\in \\text{image}} I[i+u, j+v],
    \\qquad (I \\ominus K)[i, j] = \\min_{\\ldots} I[i+u, j+v]

for ``size = 2 r + 1``. Both are max-pools (erosion is ``-maxpool(-I)``); ``max_pool2d`` pads
with ``-inf``, which is exactly "ignore out-of-image pixels". Everything is differentiable.
"""
from __future__ import annotations

from typing import Callable

import torch.nn.functional as F
from torch import Tensor


def _check(images: Tensor, size: int) -> None:
    if images.dim() != 3:
        raise ValueError(f"morphology: images must be [B, H, W], got {tuple(images.shape)}")
    if size < 1 or size % 2 == 0:
        raise ValueError(f"morphology: size must be a positive odd integer, got {size}")


def dilation(images: Tensor, size: int = 3) -> Tensor:
    """Grey-scale dilation (local maximum over a ``size x size`` window), one iteration.

    Args:
        images: ``[B, H, W]``.
        size: the window's side, odd.

    Returns:
        ``[B, H, W]``.
    """
    _check(images, size)
    return F.max_pool2d(images.unsqueeze(1), size, stride=1, padding=size // 2).squeeze(1)


def erosion(images: Tensor, size: int = 3) -> Tensor:
    """Grey-scale erosion (local minimum over a ``size x size`` window), one iteration.

    Args:
        images: ``[B, H, W]``.
        size: the window's side, odd.

    Returns:
        ``[B, H, W]``.
    """
    return -dilation(-images, size)


def gradient(images: Tensor, size: int = 3) -> Tensor:
    """Morphological gradient, ``dilation - erosion``: bright on edges, zero on flat areas.

    Args:
        images: ``[B, H, W]``.
        size: the window's side, odd.

    Returns:
        ``[B, H, W]``.
    """
    return dilation(images, size) - erosion(images, size)


#: The edits by name, for selecting a training target by name.
EDITS: dict[str, Callable[[Tensor], Tensor]] = {
    "dilation": dilation,
    "erosion": erosion,
    "gradient": gradient,
}
