"""The pure-torch backend of the fitter: per-INR loss and its closed-form gradient in batched ops.

Any depth, dtype and device; the compiled kernel (:mod:`neuralgraph.inr.backend`) computes the
same mathematics for float32 SIRENs ``(2, d1, d2, 1)`` on CPU. Every INR's result is bitwise
independent of its batch-mates on CPU (see :func:`_pixel_sum_bmm`).
"""
from __future__ import annotations

import contextlib
from typing import Sequence

import torch
from torch import Tensor

from neuralgraph.inr.convention import SirenConvention
from neuralgraph.inr.render import grid_coordinates
from neuralgraph.inr.siren import unpack_blocks


class Workspace:
    """Preallocated activations for a pool of INRs (reused every step; sliced to the pool).

    Activations are channel-major, ``[B, d, H * W]``, so every layer is one ``bmm`` of the
    ``[B, d_out, d_in + 1]`` block with the previous activation, which carries an extra row of
    ones for the bias. ``bmm`` writes its large outputs into preallocated buffers, since a fresh
    multi-megabyte tensor per call would page-fault its memory in at every step (docs/inr.md).
    ``cosines[l]`` first receives layer ``l + 1``'s pre-activations (then their ``sin`` and,
    in place, their ``cos``); ``grad_hidden[l]`` receives the gradient of ``h_{l+1}``.

    Args:
        capacity: the most INRs of a step.
        layout: the SIREN layout.
        pixels: ``H * W``.
        device: where the buffers live.
        dtype: their dtype.
    """

    def __init__(self, capacity: int, layout: Sequence[int], pixels: int, device, dtype):
        hidden = layout[1:-1]
        self.augmented = [torch.ones(capacity, d + 1, pixels, device=device, dtype=dtype) for d in hidden]
        self.cosines = [torch.empty(capacity, d, pixels, device=device, dtype=dtype) for d in hidden]
        self.grad_hidden = [torch.empty(capacity, d, pixels, device=device, dtype=dtype) for d in hidden[:-1]]
        self.residual = torch.empty(capacity, 1, pixels, device=device, dtype=dtype)


def _pixel_sum_bmm(a: Tensor, b: Tensor) -> Tensor:
    """``torch.bmm(a, b)`` for a product that sums over the pixels, in a batch-independent order.

    MKL runs each product of a batch at least as large as the thread count on one thread, but
    splits a lone product's pixel sum between threads, which changes its rounding: a pool of
    one INR would drift from the same INR in a pool of two. A batch smaller than the thread
    count is therefore multiplied on one thread.
    """
    if a.shape[0] >= torch.get_num_threads() or a.device.type != "cpu":
        return torch.bmm(a, b)
    with one_thread():
        return torch.bmm(a, b)


@contextlib.contextmanager
def one_thread():
    """torch on one thread inside the block.

    Yields:
        Nothing; the previous thread count is restored on exit.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def loss_and_gradient(flat: Tensor, targets: Tensor, axes: tuple[Tensor, Tensor], convention: SirenConvention,
                      space: Workspace) -> tuple[Tensor, Tensor]:
    """Per-INR mean squared error ``[B]`` and its gradient ``[B, num_parameters]``.

    Hand-written forward and backward of the SIREN. The first layer is separable on the
    grid: ``w0 (W p + b) = a_row + a_col``, so ``sin``/``cos`` of it come from the
    ``H + W`` values of ``sin``/``cos`` of each part (angle addition) instead of ``H * W``.
    The factor ``w0`` is applied to the small weight blocks, never to activations. ``bmm``
    never writes into a strided view (``out=`` on a view falls off MKL's batched path).

    Args:
        flat: ``[B, num_parameters]`` packed SIRENs (:func:`~neuralgraph.inr.siren.pack`).
        targets: ``[B, H, W]`` images.
        axes: the grid's row and column coordinates.
        convention: the SIRENs' convention.
        space: preallocated buffers for at least ``B`` INRs.

    Returns:
        ``(mse [B], grad [B, num_parameters])``.
    """
    n, height, width = targets.shape
    layout, w0 = convention.layout, convention.w0
    num_layers = len(layout) - 1
    blocks = unpack_blocks(flat, layout)
    hs = [a[:n] for a in space.augmented]
    cs = [c[:n] for c in space.cosines]
    rows, cols = axes
    row_input = 0 if convention.grid == "ij" else 1
    # forward, layer 1 by angle addition
    first = blocks[0]
    a_row = w0 * (first[:, :, row_input, None] * rows + first[:, :, 2, None])  # [n, d1, H]
    a_col = w0 * (first[:, :, 1 - row_input, None] * cols)  # [n, d1, W]
    sin_r, cos_r, sin_c, cos_c = a_row.sin(), a_row.cos(), a_col.sin(), a_col.cos()
    d1 = layout[1]
    h1 = hs[0][:, :d1].view(n, d1, height, width)
    torch.mul(sin_r.unsqueeze(-1), cos_c.unsqueeze(-2), out=h1)
    h1.addcmul_(cos_r.unsqueeze(-1), sin_c.unsqueeze(-2))
    c1 = cs[0].view(n, d1, height, width)
    torch.mul(cos_r.unsqueeze(-1), cos_c.unsqueeze(-2), out=c1)
    c1.addcmul_(sin_r.unsqueeze(-1), sin_c.unsqueeze(-2), value=-1)
    for l in range(2, num_layers):
        z = torch.bmm(blocks[l - 1] * w0, hs[l - 2], out=cs[l - 1])
        torch.sin(z, out=hs[l - 1][:, :layout[l]])
        z.cos_()
    residual = torch.bmm(blocks[-1], hs[-1], out=space.residual[:n])  # [n, 1, P]
    residual.add_(convention.output_offset - targets.view(n, 1, -1))
    mse = residual.square().mean((1, 2))
    # Backward. With z = W h + b, the last hidden layer's dL/dz is w0 * w_out * cos(w0 z) * g_out;
    # the per-channel factor ``scale`` = w0 * w_out is applied to the small matrices it meets
    # (that layer's weight gradient and W^T, or layer 1's gradient if it is the only hidden
    # layer) instead of to the [n, d, P] activations, which saves a full pass over them.
    # Below the last hidden layer ``scale`` is just w0.
    g_out = residual.mul_(2 / residual.shape[-1])
    grad_blocks = [_pixel_sum_bmm(g_out, hs[-1].transpose(1, 2))]
    scale = blocks[-1][:, 0, :-1].unsqueeze(-1) * w0  # [n, d, 1]
    g_z = cs[-1].mul_(g_out)  # dL/dz / scale, [n, d, P]
    for l in range(num_layers - 1, 1, -1):
        # [d_in + 1, P] x [P, d] runs faster than the untransposed [d, P] x [P, d_in + 1]
        grad_blocks.insert(0, _pixel_sum_bmm(hs[l - 2], g_z.transpose(1, 2)).transpose(1, 2).mul_(scale))
        g_h = torch.bmm((blocks[l - 1][:, :, :-1] * scale).transpose(1, 2), g_z, out=space.grad_hidden[l - 2][:n])
        g_z = cs[l - 2].mul_(g_h)
        scale = w0
    # Layer 1's block gradient is dL/dz_1 [n, d1, P] times the [P, 3] matrix of inputs and a
    # one per pixel; computed transposed, as [3, P] x [P, d1], MKL's fast shape for it.
    inputs = grid_coordinates(height, width, convention, flat.device, flat.dtype)
    design = torch.cat([inputs.t(), torch.ones_like(inputs[:, 0]).unsqueeze(0)]).expand(n, -1, -1)
    grad_blocks.insert(0, _pixel_sum_bmm(design, g_z.transpose(1, 2)).transpose(1, 2).mul_(scale))
    return mse, torch.cat([g.flatten(1) for g in grad_blocks], 1)
