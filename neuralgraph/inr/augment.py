r"""Function-space augmentation of SIREN INRs: the image an INR draws is moved, turned and zoomed by
editing its first layer, and its weights are thinned by dropout.

For an INR whose first layer reads the coordinates, :math:`h_1 = \sin(\omega_0 (W_1 x + b_1))`, the
INR of the transformed image :math:`x \mapsto f(A x + t)` is the same network with

.. math::
    W_1 \leftarrow a\, W_1 R_\theta, \qquad b_1 \leftarrow b_1 + W_1 t,

a rotation :math:`R_\theta` of the input plane, a zoom :math:`a` and a translation :math:`t`
(:math:`A = a R_\theta`, :math:`t` in the coordinates' units, the grid spanning :math:`[-1, 1]`).
Dropout then zeroes every weight and bias with probability :math:`p` and scales the rest by
:math:`1/(1-p)`, as :func:`torch.nn.functional.dropout` does.

This is the training augmentation of the INR-classification code of DWSNets (``experiments/data.py``,
``INRDataset._augment``, on by default in ``experiments/mnist/trainer.py``) and of neural-graphs
(the same code; ``augmentation: True`` for MNIST's training split): translation :math:`t \sim
U(-0.25, 0.25)^2`, rotation :math:`\theta \sim U(-45°, 45°)`, zoom :math:`a \sim U(0.8, 1.2)`, dropout
:math:`p = 0.01`, each INR its own draw. Two of their steps are left out and why: their translation
goes, half of the time, into the second layer's bias as :math:`W_2 W_1 t`, which moves no image
through the sine between the layers (here it is always the input's); and their "noise" adds
``w.std() * 0.1`` to every weight, a shift without a random draw. ScaleGMN's MNIST configs use no
augmentation. The rotation and translation ranges are symmetric, so the grid's orientation
(``'ij'`` or ``'xy'``, :class:`~neuralgraph.inr.convention.SirenConvention`) does not change what is drawn.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from torch import Tensor


@dataclass(frozen=True)
class InrAugmentation:
    """The ranges of :func:`augment_inrs` (module docstring); the defaults are DWSNets' and neural-graphs'.

    Attributes:
        translation: :math:`t` is uniform in ``[-translation, translation]`` per coordinate.
        rotation_degrees: :math:`\\theta` is uniform in ``[-rotation_degrees, rotation_degrees]``.
        zoom: :math:`a` is uniform in ``[1 - zoom, 1 + zoom]``.
        dropout: :math:`p`, the probability of zeroing a weight or bias.
    """

    translation: float = 0.25
    rotation_degrees: float = 45.0
    zoom: float = 0.2
    dropout: float = 0.01

    def __post_init__(self) -> None:
        for name in ("translation", "rotation_degrees", "zoom"):
            if getattr(self, name) < 0:
                raise ValueError(f"InrAugmentation.{name}={getattr(self, name)}: must be >= 0")
        if not 0 <= self.zoom < 1:
            raise ValueError(f"InrAugmentation.zoom={self.zoom}: must be in [0, 1) (the zoom factor stays positive)")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"InrAugmentation.dropout={self.dropout}: must be in [0, 1)")


def augment_inrs(weights: Sequence[Tensor], biases: Sequence[Tensor], augmentation: InrAugmentation = InrAugmentation(),
                 generator: Optional[torch.Generator] = None) -> tuple[list[Tensor], list[Tensor]]:
    """A random draw of :class:`InrAugmentation` for each INR of a batch (module docstring).

    Args:
        weights: per layer ``[B, d_out, d_in]``; the first layer reads 2-D coordinates (``d_in = 2``).
        biases: per layer ``[B, d_out]``.
        augmentation: the ranges.
        generator: the random source (default: torch's global one).

    Returns:
        ``(weights, biases)`` of the transformed INRs, new tensors of the same shapes and dtypes.

    Raises:
        ValueError: the first layer does not read 2-D coordinates, or the weights are not batched.
    """
    first = weights[0]
    if first.dim() != 3 or first.shape[-1] != 2:
        raise ValueError(f"augment_inrs: the first layer's weights have shape {tuple(first.shape)}; expected "
                         "[B, d_out, 2] (a batch of INRs of 2-D coordinates)")
    batch, dtype, device = first.shape[0], first.dtype, first.device

    def uniform(half_width: float, *shape: int) -> Tensor:
        draw = torch.rand(batch, *shape, generator=generator, dtype=torch.float64)
        return ((2 * draw - 1) * half_width).to(device=device, dtype=dtype)

    angle = uniform(math.radians(augmentation.rotation_degrees))
    cos, sin = torch.cos(angle), torch.sin(angle)
    rotation = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)  # [B, 2, 2]
    zoom = 1 + uniform(augmentation.zoom)
    shift = uniform(augmentation.translation, 2)
    new_biases = [biases[0] + torch.einsum("boi,bi->bo", first, shift), *biases[1:]]
    new_weights = [zoom[:, None, None] * (first @ rotation), *weights[1:]]
    if augmentation.dropout > 0:
        keep = 1 - augmentation.dropout

        def drop(tensor: Tensor) -> Tensor:
            mask = torch.rand(tensor.shape, generator=generator) < keep
            return tensor * mask.to(device=device, dtype=dtype) / keep

        new_weights, new_biases = [drop(w) for w in new_weights], [drop(b) for b in new_biases]
    return new_weights, new_biases
