"""Rendering SIRENs: the pixel grid, the layout check and the batched differentiable forward.

:func:`render` turns a batch of SIRENs into images at any resolution; gradients flow back to
the weights through a hand-written backward (:class:`_ChannelMajorSiren`), so a metanetwork's
predicted INRs can be trained through their images.
"""
from __future__ import annotations

import contextlib
from typing import Optional, Sequence

import torch
from torch import Tensor

from neuralgraph.inr.convention import DWS_MNIST, SirenConvention


def grid_axes(height: int, width: int, device=None, dtype=torch.float32) -> tuple[Tensor, Tensor]:
    """Row and column coordinates of a ``height x width`` image: ``linspace(-1, 1, .)`` each.

    Args:
        height: rows.
        width: columns.
        device: where the coordinates live.
        dtype: their dtype.

    Returns:
        ``(rows [height], columns [width])``.
    """
    return (
        torch.linspace(-1, 1, height, device=device, dtype=dtype),
        torch.linspace(-1, 1, width, device=device, dtype=dtype),
    )


def grid_coordinates(height: int, width: int, convention: SirenConvention = DWS_MNIST, device=None,
                     dtype=torch.float32) -> Tensor:
    """The ``[height * width, 2]`` network inputs, pixels in row-major order.

    Args:
        height: rows.
        width: columns.
        convention: which coordinate is input 0 (``convention.grid``).
        device: where the coordinates live.
        dtype: their dtype.

    Returns:
        ``[height * width, 2]``.
    """
    rows, cols = torch.meshgrid(*grid_axes(height, width, device, dtype), indexing="ij")
    pair = (rows, cols) if convention.grid == "ij" else (cols, rows)
    return torch.stack([c.reshape(-1) for c in pair], dim=1)


def siren_layout(weights: Sequence[Tensor], biases: Sequence[Tensor]) -> tuple[int, ...]:
    """Layout ``(2, d_1, ..., 1)`` of SIRENs given as weights ``[(B,) d_out, d_in]`` and biases ``[(B,) d_out]``.

    The tensors fix the widths and the depth (a :class:`SirenConvention` fixes ``w0``, the grid
    and the offset), so an OCE ensemble merged into one network of layout ``(2, k d_1, ..., 1)``
    is a SIREN like any other. A ValueError names the first layer that does not chain.

    Args:
        weights: per layer ``[(B,) d_out, d_in]``.
        biases: per layer ``[(B,) d_out]``.

    Returns:
        The layout.
    """
    if len(weights) == 0 or len(weights) != len(biases):
        raise ValueError(f"SIREN: got {len(weights)} weight and {len(biases)} bias tensors; need as many, at least one")
    if weights[0].dim() not in (2, 3):
        raise ValueError(f"SIREN layer 1: weight {tuple(weights[0].shape)} is not [d_out, d_in] or [B, d_out, d_in]")
    lead = tuple(weights[0].shape[:-2])
    layout = [2]
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        if w.dim() != len(lead) + 2 or tuple(w.shape[:-2]) != lead or w.shape[-1] != layout[-1]:
            batch = "B, " if lead else ""
            raise ValueError(f"SIREN layer {l}: weight {tuple(w.shape)} is not [{batch}d_out, {layout[-1]}]")
        if tuple(b.shape) != tuple(w.shape[:-1]):
            raise ValueError(f"SIREN layer {l}: bias {tuple(b.shape)} does not match weight {tuple(w.shape)}")
        layout.append(w.shape[-2])
    if layout[-1] != 1:
        raise ValueError(f"SIREN layer {len(weights)}: {layout[-1]} outputs; a SIREN renders one grey value")
    return tuple(layout)


class _ChannelMajorSiren(torch.autograd.Function):
    """A batch of SIRENs on ``[B, d, P]`` activations (pixels last), with a hand-written backward.

    Each layer is one ``bmm`` of an augmented matrix ``[W | b]`` (``w0`` already folded into the
    sine layers') with activations carrying a row of ones, so biases and their gradients ride in
    the same matmuls. When gradients are wanted the forward overwrites each pre-activation with
    its cosine: per hidden layer one ``sin``, one ``cos`` and one product over the activations, and
    half as many new ``[B, d, P]`` tensors as autograd's graph (fresh memory page-faults). These
    passes dominate an OCE step (``k B`` networks on every pixel; benchmarks/oce_cost.py --step).
    """

    @staticmethod
    def forward(ctx, inputs: Tensor, *layers: Tensor) -> Tensor:
        """``inputs`` ``[d_0 + 1, P]`` (last row ones), ``layers[l]`` ``[B, d_l, d_{l-1} + 1]`` -> ``[B, P]``."""
        wants_grad = any(ctx.needs_input_grad)
        ctx.num_layers = len(layers)
        h = inputs.expand(layers[0].shape[0], *inputs.shape)
        saved = []
        for a in layers[:-1]:
            z = torch.bmm(a, h)
            h = z.new_empty(z.shape[0], z.shape[1] + 1, z.shape[2])
            torch.sin(z, out=h[:, :-1])
            h[:, -1] = 1
            if wants_grad:
                saved += [torch.cos(z, out=z), h]
        ctx.save_for_backward(inputs, *layers, *saved)
        return torch.bmm(layers[-1], h).squeeze(1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Optional[Tensor], ...]:
        inputs, *rest = ctx.saved_tensors
        L = ctx.num_layers
        layers, cosines = rest[:L], rest[L::2]
        activations = [inputs.expand(layers[0].shape[0], *inputs.shape), *rest[L + 1::2]]
        g = grad.unsqueeze(1)  # the loss's gradient w.r.t. layer l's output, [B, d_l, P]
        grads = [torch.bmm(g, activations[-1].transpose(1, 2))]
        g = torch.mul(cosines[-1], layers[-1][:, 0, :-1, None]).mul_(g)  # through the one-output last layer
        for l in range(L - 2, -1, -1):
            grads.insert(0, torch.bmm(g, activations[l].transpose(1, 2)))
            if l > 0:
                g = torch.bmm(layers[l][:, :, :-1].transpose(1, 2), g).mul_(cosines[l - 1])
        return None, *grads


def render(weights: Sequence[Tensor], biases: Sequence[Tensor], resolution: int | tuple[int, int] = 28,
           convention: SirenConvention = DWS_MNIST) -> Tensor:
    """Images of ``B`` INRs, ``[B, H, W]`` (``[H, W]`` for unbatched weights); differentiable.

    ``weights[l]`` is ``[B, d_out, d_in]`` and ``biases[l]`` is ``[B, d_out]``, as
    ``graph_to_mlp`` returns them for a batch; all INRs are evaluated by batched matmuls on
    pixel-last activations (:class:`_ChannelMajorSiren`), ``k`` OCE members as ``k B`` INRs.
    ``convention`` gives ``w0``, the grid, the output scale and offset; the layout is read from the tensors
    (:func:`siren_layout`), never from ``convention.layout``. Gradients flow to the weights and
    biases (once: no double backward).

    Always computed in at least float32, with any active autocast (e.g. Lightning's
    ``precision="bf16-mixed"``) turned off: ``sin(w0 x)`` multiplies bfloat16's 3e-3 relative
    rounding of ``x`` by ``w0 = 30``, which would swamp the pixel errors being trained on.

    Args:
        weights: per layer ``[(B,) d_out, d_in]``.
        biases: per layer ``[(B,) d_out]``.
        resolution: ``H = W``, or ``(H, W)``.
        convention: the SIREN convention.

    Returns:
        ``[B, H, W]`` or ``[H, W]``.
    """
    height, width = (resolution, resolution) if isinstance(resolution, int) else resolution
    siren_layout(weights, biases)
    if autocast_active(weights[0].device.type) or weights[0].dtype.itemsize < 4:
        with autocast_off(weights[0].device.type):
            return render([full_precision(w) for w in weights], [full_precision(b) for b in biases],
                          resolution, convention)
    single = weights[0].dim() == 2
    if single:
        weights, biases = [w.unsqueeze(0) for w in weights], [b.unsqueeze(0) for b in biases]
    coords = grid_coordinates(height, width, convention, weights[0].device, weights[0].dtype)
    inputs = torch.cat([coords.t(), coords.new_ones(1, coords.shape[0])])
    layers = [torch.cat([w, b.unsqueeze(-1)], dim=-1) for w, b in zip(weights, biases)]
    layers = [convention.w0 * a for a in layers[:-1]] + layers[-1:]
    if convention.output_scale != 1.0:
        layers[-1] = convention.output_scale * layers[-1]
    images = (_ChannelMajorSiren.apply(inputs, *layers) + convention.output_offset).view(-1, height, width)
    return images[0] if single else images


def autocast_active(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (never on a device autocast does not know, e.g. ``meta``).

    Args:
        device_type: e.g. ``"cpu"``, ``"cuda"``.

    Returns:
        ``True`` when autocast is enabled there.
    """
    return torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type)


def autocast_off(device_type: str) -> contextlib.AbstractContextManager:
    """A context with autocast off for ``device_type`` (nothing to turn off on a device autocast does not know).

    Args:
        device_type: e.g. ``"cpu"``, ``"cuda"``.

    Returns:
        The context manager.
    """
    if torch.amp.is_autocast_available(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def full_precision(tensor: Tensor) -> Tensor:
    """``tensor`` as float32 when its dtype is narrower (bfloat16, float16), else unchanged (float64 stays).

    Args:
        tensor: any tensor.

    Returns:
        ``tensor``, or its float32 copy.
    """
    return tensor.float() if tensor.is_floating_point() and tensor.dtype.itemsize < 4 else tensor


def psnr(prediction: Tensor, target: Tensor) -> Tensor:
    """Peak signal-to-noise ratio in dB for values in ``[0, 1]``, one per image ``[B, ...]``.

    Args:
        prediction: ``[B, ...]`` values.
        target: ``[B, ...]`` values.

    Returns:
        ``[B]`` dB.
    """
    mse = (prediction - target).flatten(1).square().mean(1)
    return -10 * torch.log10(mse)
