"""PNG grids of INR edits: one row per INR, columns input | target | OCE average | members
(:func:`editing_grid`), or any named columns of images (:func:`image_grid`)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from PIL import Image, ImageDraw
from torch import Tensor


def editing_grid(
    inputs: Tensor, average: Tensor, members: Tensor, targets: Optional[Tensor] = None, scale: int = 3, pad: int = 2
) -> Image.Image:
    """A grey-scale grid. ``inputs``/``targets``/``average``: ``[B, H, W]``; ``members``: ``[B, k, H, W]``.

    Values are clipped to ``[0, 1]``. The members column is left out when ``k == 1`` (it equals
    the average). A header row names the columns.

    Args:
        inputs: ``[B, H, W]`` the input images.
        average: ``[B, H, W]`` the averaged output.
        members: ``[B, k, H, W]`` each output network's image.
        targets: ``[B, H, W]`` the targets, or ``None``.
        scale: pixels per image pixel.
        pad: pixels between cells.

    Returns:
        The ``PIL`` image.
    """
    columns: list[tuple[str, Tensor]] = [("input", inputs)]
    if targets is not None:
        columns.append(("target", targets))
    columns.append(("OCE avg" if members.shape[1] > 1 else "output", average))
    if members.shape[1] > 1:
        columns += [(f"m{i}", members[:, i]) for i in range(members.shape[1])]
    return image_grid(columns, scale, pad)


def image_grid(columns: Sequence[tuple[str, Tensor]], scale: int = 3, pad: int = 2) -> Image.Image:
    """A grey-scale grid of named columns, each ``[B, H, W]`` in ``[0, 1]`` (clipped), the name on top.

    Args:
        columns: ``(name, images)`` per column.
        scale: pixels per image pixel.
        pad: pixels between cells.

    Returns:
        The ``PIL`` image.
    """
    B, H, W = columns[0][1].shape
    for name, images in columns:
        if tuple(images.shape) != (B, H, W):
            raise ValueError(f"image_grid column {name!r}: shape {tuple(images.shape)}, expected {(B, H, W)}")
    cell_h, cell_w = H * scale + pad, max(W * scale, 42) + pad
    header = 12
    canvas = Image.new("L", (cell_w * len(columns) + pad, header + cell_h * B + pad), color=255)
    draw = ImageDraw.Draw(canvas)
    for c, (name, images) in enumerate(columns):
        draw.text((pad + c * cell_w, 0), name, fill=0)
        for r in range(B):
            pixels = (images[r].detach().float().clamp(0, 1).cpu().numpy() * 255).round().astype(np.uint8)
            tile = Image.fromarray(pixels).resize((W * scale, H * scale), Image.NEAREST)
            canvas.paste(tile, (pad + c * cell_w, header + pad + r * cell_h))
    return canvas


def save_editing_grid(path: Path | str, *args, **kwargs) -> Path:
    """Write :func:`editing_grid` as an image file (its folder made if needed).

    Args:
        path: the file; its suffix picks the format (``.png``).
        *args: :func:`editing_grid`'s arguments.
        **kwargs: its keyword arguments.

    Returns:
        ``path``.
    """
    return _save(editing_grid(*args, **kwargs), path)


def save_image_grid(path: Path | str, *args, **kwargs) -> Path:
    """Write :func:`image_grid` as an image file (its folder made if needed).

    Args:
        path: the file; its suffix picks the format (``.png``).
        *args: :func:`image_grid`'s arguments.
        **kwargs: its keyword arguments.

    Returns:
        ``path``.
    """
    return _save(image_grid(*args, **kwargs), path)


def _save(image: Image.Image, path: Path | str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path
