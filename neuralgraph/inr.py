"""SIREN implicit neural representations of images: convention, rendering, batched fitting.

A SIREN with layout ``(2, d_1, ..., d_{L-1}, 1)`` maps a pixel coordinate ``p`` to a grey value:

.. math::
    h_0 = p, \\qquad h_l = \\sin\\big(\\omega_0 (W_l h_{l-1} + b_l)\\big) \\ (0 < l < L), \\qquad
    f(p) = W_L h_{L-1} + b_L + c

with ``nn.Linear`` weights ``W_l`` of shape ``[d_l, d_{l-1}]``. The default
:class:`SirenConvention` is the one of the DWS MNIST INRs used by the field's benchmark
(``\\omega_0 = 30``, ``c = 0.5``, layout 2-32-32-1, ``(column, row)`` coordinates in
``[-1, 1]^2``); see ``docs/inr.md``.

:func:`render` is the differentiable batched forward (any resolution). :func:`fit_inrs`
fits many INRs at once with a hand-written backward pass and an in-place Adam update; every
INR's trajectory depends only on its own image and seed, never on which other INRs share
its batch.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor, nn

from neuralgraph._kernels import KernelBuildError, siren_library, siren_library_path

GRID_ORIENTATIONS = ("ij", "xy")
INITS = ("dws", "siren")
# How fit_inrs computes the loss and gradient (argument ``backend``, else $NEURALGRAPH_INR_BACKEND):
# "cpp" the compiled kernel, "torch" the pure-torch path, "auto" the faster of the two where the
# kernel applies (float32 on CPU, two hidden layers) and builds, as measured once per kernel
# build, CPU, layout, image size and thread count (:func:`calibrated_backend`), the torch path
# otherwise.
INR_BACKENDS = ("auto", "cpp", "torch")


@dataclass(frozen=True)
class SirenConvention:
    """Everything needed to turn SIREN weights back into the image they encode.

    Attributes:
        layout: layer widths ``(2, d_1, ..., 1)``.
        w0: frequency ``\\omega_0`` inside every hidden ``sin``.
        output_offset: constant ``c`` added to the linear output layer.
        grid: ``"ij"``: input 0 is the row coordinate (-1 at the top row, +1 at the bottom),
            input 1 the column coordinate (-1 left, +1 right), i.e.
            ``torch.meshgrid(linspace(-1, 1, H), linspace(-1, 1, W), indexing="ij")``;
            ``"xy"``: input 0 is the column, input 1 the row.
        init: ``"dws"`` (DWSNets' ``nn/inr.py``): sine layers ``U(+-sqrt(6 / fan_in) / w0)``
            with zero biases, the output layer ``nn.Linear``'s default (weight and bias
            ``U(+-1 / sqrt(fan_in))``); ``"siren"`` (Sitzmann et al.): the first layer
            ``U(+-1 / fan_in)``, every other layer ``U(+-sqrt(6 / fan_in) / w0)``, zero biases.
    """

    layout: tuple[int, ...] = (2, 32, 32, 1)
    w0: float = 30.0
    output_offset: float = 0.5
    grid: str = "xy"
    init: str = "dws"

    def __post_init__(self):
        layout = tuple(int(d) for d in self.layout)
        object.__setattr__(self, "layout", layout)
        if len(layout) < 3 or layout[0] != 2 or layout[-1] != 1:
            raise ValueError(f"SirenConvention.layout {layout}: expected (2, hidden..., 1) with >= 1 hidden layer")
        if self.grid not in GRID_ORIENTATIONS:
            raise ValueError(f"SirenConvention.grid {self.grid!r}: expected one of {GRID_ORIENTATIONS}")
        if self.init not in INITS:
            raise ValueError(f"SirenConvention.init {self.init!r}: expected one of {INITS}")

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "layout": list(self.layout)}

    @classmethod
    def from_dict(cls, data: dict) -> "SirenConvention":
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - fields
        if unknown:
            raise ValueError(f"SirenConvention: unknown fields {sorted(unknown)}")
        return cls(**data)

    @property
    def num_parameters(self) -> int:
        return sum((d_in + 1) * d_out for d_in, d_out in zip(self.layout[:-1], self.layout[1:]))


DWS_MNIST = SirenConvention()


@dataclass(frozen=True)
class FitConfig:
    """Adam on the per-image mean squared error, stopping each INR at ``target_psnr``.

    The defaults are DWSNets' recipe as written (preset ``dws-1000``); ``PRESETS`` holds the
    recipe that matches the INRs they released (``dws-released``: lr 1e-3, 1500 steps).
    ``pool_size`` INRs are optimised together; a finished INR leaves the pool and the next
    image takes its place, so the pool stays full (it changes speed, never results).
    """

    steps: int = 1000
    lr: float = 5e-4
    target_psnr: float = 40.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    pool_size: int = 64

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "betas": list(self.betas)}

    @classmethod
    def from_dict(cls, data: dict) -> "FitConfig":
        return cls(**{**data, "betas": tuple(data["betas"])})


@dataclass(frozen=True)
class InrRecipe:
    """A named way of making INRs: the SIREN convention and the fitting settings."""

    convention: SirenConvention
    fit: FitConfig


# Named recipes (``make-inrs --preset``, ``MnistInrDataModule(preset=...)``); the calibration
# behind them is in docs/inr.md and benchmarks/results/inr_fidelity*.
PRESETS = {
    # Matches the INR set DWSNets released: per-layer weight and bias std within 5%, and its
    # GP-under-quantization table (benchmarks/inr_fidelity.py).
    "dws-released": InrRecipe(DWS_MNIST, FitConfig(lr=1e-3, steps=1500)),
    # DWSNets' recipe as written (lr 5e-4, 1000 steps): INRs 10-30% less spread than the
    # released ones; the datasets made before the calibration.
    "dws-1000": InrRecipe(DWS_MNIST, FitConfig()),
    # Sitzmann et al.'s initialisation: 40 dB in about 350 steps (the demo's, for speed).
    "siren-1000": InrRecipe(SirenConvention(init="siren"), FitConfig()),
}
DEFAULT_PRESET = "dws-released"


def preset(name: str) -> InrRecipe:
    """The recipe called ``name``; an error listing the presets when there is none."""
    if name not in PRESETS:
        raise ValueError(f"INR preset {name!r}: expected one of {sorted(PRESETS)}")
    return PRESETS[name]


def grid_axes(height: int, width: int, device=None, dtype=torch.float32) -> tuple[Tensor, Tensor]:
    """Row and column coordinates of a ``height x width`` image: ``linspace(-1, 1, .)`` each."""
    return (
        torch.linspace(-1, 1, height, device=device, dtype=dtype),
        torch.linspace(-1, 1, width, device=device, dtype=dtype),
    )


def grid_coordinates(height: int, width: int, convention: SirenConvention = DWS_MNIST, device=None,
                     dtype=torch.float32) -> Tensor:
    """The ``[height * width, 2]`` network inputs, pixels in row-major order."""
    rows, cols = torch.meshgrid(*grid_axes(height, width, device, dtype), indexing="ij")
    pair = (rows, cols) if convention.grid == "ij" else (cols, rows)
    return torch.stack([c.reshape(-1) for c in pair], dim=1)


def siren_layout(weights: Sequence[Tensor], biases: Sequence[Tensor]) -> tuple[int, ...]:
    """Layout ``(2, d_1, ..., 1)`` of SIRENs given as weights ``[(B,) d_out, d_in]`` and biases ``[(B,) d_out]``.

    The tensors fix the widths and the depth (a :class:`SirenConvention` fixes ``w0``, the grid
    and the offset), so an OCE ensemble merged into one network of layout ``(2, k d_1, ..., 1)``
    is a SIREN like any other. A ValueError names the first layer that does not chain.
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
    half as many new ``[B, d, P]`` tensors as autograd's graph (fresh memory page-faults, which costs
    about a pass). These passes dominate an OCE step (``k B`` networks on every pixel; benchmarks/oce_cost.py --step).
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
    ``convention`` gives ``w0``, the grid and the offset; the layout is read from the tensors
    (:func:`siren_layout`), never from ``convention.layout``. Gradients flow to the weights and
    biases (once: no double backward).

    Always computed in at least float32, with any active autocast (e.g. Lightning's
    ``precision="bf16-mixed"``) turned off: ``sin(w0 x)`` multiplies bfloat16's 3e-3 relative
    rounding of ``x`` by ``w0 = 30``, which would swamp the pixel errors being trained on.
    """
    height, width = (resolution, resolution) if isinstance(resolution, int) else resolution
    siren_layout(weights, biases)
    if torch.is_autocast_enabled(weights[0].device.type) or weights[0].dtype.itemsize < 4:
        with torch.autocast(weights[0].device.type, enabled=False):
            return render([full_precision(w) for w in weights], [full_precision(b) for b in biases],
                          resolution, convention)
    single = weights[0].dim() == 2
    if single:
        weights, biases = [w.unsqueeze(0) for w in weights], [b.unsqueeze(0) for b in biases]
    coords = grid_coordinates(height, width, convention, weights[0].device, weights[0].dtype)
    inputs = torch.cat([coords.t(), coords.new_ones(1, coords.shape[0])])
    layers = [torch.cat([w, b.unsqueeze(-1)], dim=-1) for w, b in zip(weights, biases)]
    layers = [convention.w0 * a for a in layers[:-1]] + layers[-1:]
    images = (_ChannelMajorSiren.apply(inputs, *layers) + convention.output_offset).view(-1, height, width)
    return images[0] if single else images


def full_precision(tensor: Tensor) -> Tensor:
    """``tensor`` as float32 when its dtype is narrower (bfloat16, float16), else unchanged (float64 stays)."""
    return tensor.float() if tensor.is_floating_point() and tensor.dtype.itemsize < 4 else tensor


def psnr(prediction: Tensor, target: Tensor) -> Tensor:
    """Peak signal-to-noise ratio in dB for values in ``[0, 1]``, one per image ``[B, ...]``."""
    mse = (prediction - target).flatten(1).square().mean(1)
    return -10 * torch.log10(mse)


class Sine(nn.Module):
    """``sin(w0 * x)``."""

    def __init__(self, w0: float):
        super().__init__()
        self.w0 = w0

    def forward(self, x: Tensor) -> Tensor:
        return torch.sin(self.w0 * x)


class Siren(nn.Sequential):
    """One SIREN as a plain ``nn.Sequential`` of ``nn.Linear`` and :class:`Sine`.

    ``forward(coords)`` maps ``[P, 2]`` coordinates to ``[P, 1]`` values, without the output
    offset (add ``convention.output_offset``); :meth:`load` copies in given weights. Its
    ``nn.Linear`` layers make it convertible by ``module_to_graph``.
    """

    def __init__(self, convention: SirenConvention = DWS_MNIST):
        layers: list[nn.Module] = []
        for l, (d_in, d_out) in enumerate(zip(convention.layout[:-1], convention.layout[1:]), start=1):
            layers.append(nn.Linear(d_in, d_out))
            if l < len(convention.layout) - 1:
                layers.append(Sine(convention.w0))
        super().__init__(*layers)
        self.convention = convention

    def linears(self) -> list[nn.Linear]:
        return [m for m in self if isinstance(m, nn.Linear)]

    @torch.no_grad()
    def load(self, weights: Sequence[Tensor], biases: Sequence[Tensor]) -> "Siren":
        for layer, w, b in zip(self.linears(), weights, biases):
            layer.weight.copy_(w)
            layer.bias.copy_(b)
        return self


def init_siren(seeds: Sequence[int], convention: SirenConvention = DWS_MNIST,
               dtype=torch.float32) -> tuple[list[Tensor], list[Tensor]]:
    """Initial weights ``[N, d_out, d_in]`` and biases ``[N, d_out]`` of ``N`` INRs.

    INR ``n`` is drawn from ``torch.Generator().manual_seed(seeds[n])`` alone, layer by layer
    (weight, then bias), so it does not depend on the other INRs. See :class:`SirenConvention`
    for the two schemes.
    """
    layout = convention.layout
    num_layers = len(layout) - 1
    bounds = []  # (weight bound, bias bound) per layer
    for l, d_in in enumerate(layout[:-1], start=1):
        sine_bound = math.sqrt(6 / d_in) / convention.w0
        if l == num_layers and convention.init == "dws":
            bounds.append((1 / math.sqrt(d_in), 1 / math.sqrt(d_in)))  # nn.Linear's default
        elif l == 1 and convention.init == "siren":
            bounds.append((1 / d_in, 0.0))
        else:
            bounds.append((sine_bound, 0.0))

    def uniform(shape, bound, generator):
        return (torch.rand(shape, generator=generator, dtype=torch.float64) * 2 - 1) * bound

    weights = [[] for _ in range(num_layers)]
    biases = [[] for _ in range(num_layers)]
    for seed in seeds:
        generator = torch.Generator().manual_seed(int(seed))
        for l, (d_in, d_out) in enumerate(zip(layout[:-1], layout[1:])):
            weight_bound, bias_bound = bounds[l]
            weights[l].append(uniform((d_out, d_in), weight_bound, generator))
            biases[l].append(uniform((d_out,), bias_bound, generator))
    return ([torch.stack(w).to(dtype) if w else torch.zeros(0, d_out, d_in, dtype=dtype)
             for w, d_in, d_out in zip(weights, layout[:-1], layout[1:])],
            [torch.stack(b).to(dtype) if b else torch.zeros(0, d_out, dtype=dtype) for b, d_out in zip(biases, layout[1:])])


def pack(weights: Sequence[Tensor], biases: Sequence[Tensor]) -> Tensor:
    """Flat ``[B, num_parameters]``: per layer, ``[W_l | b_l]`` row-major (bias as last column)."""
    return torch.cat([torch.cat([w, b.unsqueeze(-1)], -1).flatten(1) for w, b in zip(weights, biases)], 1)


def unpack_blocks(flat: Tensor, layout: Sequence[int]) -> list[Tensor]:
    """Views ``[B, d_out, d_in + 1]`` of :func:`pack`'s flat tensor, one per layer."""
    blocks, start = [], 0
    for d_in, d_out in zip(layout[:-1], layout[1:]):
        size = d_out * (d_in + 1)
        blocks.append(flat[:, start:start + size].view(-1, d_out, d_in + 1))
        start += size
    return blocks


def unpack(flat: Tensor, layout: Sequence[int]) -> tuple[list[Tensor], list[Tensor]]:
    """Inverse of :func:`pack`: contiguous weights ``[B, d_out, d_in]`` and biases ``[B, d_out]``."""
    blocks = unpack_blocks(flat, layout)
    return [b[..., :-1].contiguous() for b in blocks], [b[..., -1].contiguous() for b in blocks]


class _Workspace:
    """Preallocated activations for a pool of INRs (reused every step; sliced to the pool).

    Activations are channel-major, ``[B, d, H * W]``, so every layer is one ``bmm`` of the
    ``[B, d_out, d_in + 1]`` block with the previous activation, which carries an extra row of
    ones for the bias. ``bmm`` writes its large outputs into preallocated buffers: a fresh
    multi-megabyte tensor per call costs as much as the ``bmm`` itself (page faults).
    ``cosines[l]`` first receives layer ``l + 1``'s pre-activations (then their ``sin`` and,
    in place, their ``cos``); ``grad_hidden[l]`` receives the gradient of ``h_{l+1}``.
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
    splits a lone product's pixel sum between threads, which changes its rounding (measured
    with 2 threads: a pool of one INR drifted from the same INR in a pool of two). A batch
    smaller than the thread count is therefore multiplied on one thread.
    """
    if a.shape[0] >= torch.get_num_threads() or a.device.type != "cpu":
        return torch.bmm(a, b)
    with _one_thread():
        return torch.bmm(a, b)


@contextlib.contextmanager
def _one_thread():
    """torch on one thread inside the block."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _loss_and_gradient(flat: Tensor, targets: Tensor, axes: tuple[Tensor, Tensor], convention: SirenConvention,
                       space: _Workspace) -> tuple[Tensor, Tensor]:
    """Per-INR mean squared error ``[B]`` and its gradient ``[B, num_parameters]``.

    Hand-written forward and backward of the SIREN. The first layer is separable on the
    grid: ``w0 (W p + b) = a_row + a_col``, so ``sin``/``cos`` of it come from the
    ``H + W`` values of ``sin``/``cos`` of each part (angle addition) instead of ``H * W``.
    The factor ``w0`` is applied to the small weight blocks, never to activations. ``bmm``
    never writes into a strided view (``out=`` on a view falls off MKL's batched path).
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


def _compiled_loss_and_gradient(flat: Tensor, targets: Tensor, axes: tuple[Tensor, Tensor],
                                convention: SirenConvention) -> tuple[Tensor, Tensor]:
    """:func:`_loss_and_gradient` computed by ``neuralgraph/_kernels/siren_step.cpp``.

    The same mathematics, fused: each INR runs on one of ``torch.get_num_threads()`` OpenMP
    threads, its pixels in chunks (112 with AVX-512, 32 with AVX2) whose activations stay in
    the L1 cache; ``sin`` and
    ``cos`` of a layer come from one range reduction of the angle; every elementwise step
    runs on the registers the small matrix product before it has just filled. float32,
    layout ``(2, d1, d2, 1)``, CPU.
    """
    flat, targets = flat.contiguous(), targets.contiguous()
    n, height, width = targets.shape
    mse, grad = flat.new_empty(n), torch.empty_like(flat)
    rows, cols = axes
    with torch.profiler.record_function("siren_step.cpp"):  # visible in torch.profiler tables
        siren_library().siren_loss_and_gradient(
            n, height, width, convention.layout[1], convention.layout[2], flat.data_ptr(), targets.data_ptr(),
            rows.data_ptr(), cols.data_ptr(), int(convention.grid == "xy"), convention.w0, convention.output_offset,
            mse.data_ptr(), grad.data_ptr(), torch.get_num_threads())
    return mse, grad


CALIBRATION_INRS = 32  # pool of the one-off timing: large enough to fill 2-16 threads


def _time_steps(steps: dict[str, Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]], flat: Tensor, targets: Tensor,
                repeats: int = 5) -> dict[str, float]:
    """Microseconds per INR of one call of each step function: the fastest of ``repeats`` rounds,
    the functions interleaved within a round (so a passing load slows all of them alike), after
    one warm-up call each."""
    best = {name: math.inf for name in steps}
    for round_ in range(repeats + 1):
        for name, step in steps.items():
            start = time.perf_counter()
            step(flat, targets)
            if round_:
                best[name] = min(best[name], time.perf_counter() - start)
    return {f"{name}_us": 1e6 * seconds / len(flat) for name, seconds in best.items()}


def calibrated_backend(convention: SirenConvention, height: int, width: int) -> dict:
    """Which of ``"cpp"`` and ``"torch"`` is faster for this problem on this CPU, measured once.

    Times one loss-and-gradient step of both backends on :data:`CALIBRATION_INRS` random INRs
    (about 0.1-0.3 s) and caches ``{"choice", "cpp_us", "torch_us", ...}`` in a JSON file beside
    the compiled kernel (whose name hashes the source, the flags, the compiler and the CPU's
    instruction sets), keyed by layout, image size and ``torch.get_num_threads()``. A cache
    file that cannot be read is measured again and replaced, with a warning naming it.
    """
    library = siren_library_path()
    cache = library.with_name(f"{library.stem}.calibration.json")
    key = f"{'x'.join(map(str, convention.layout))} {height}x{width} threads={torch.get_num_threads()}"
    entries = {}
    if cache.exists():
        try:
            entries = json.loads(cache.read_text())
            if not isinstance(entries, dict):
                raise ValueError("not a JSON object")
        except ValueError as err:
            warnings.warn(f"{cache}: unreadable backend calibration ({err}); measuring again")
            entries = {}
    if key in entries:
        return entries[key]
    generator = torch.Generator().manual_seed(0)
    weights, biases = init_siren(range(CALIBRATION_INRS), convention)
    flat = pack(weights, biases)
    targets = torch.rand(CALIBRATION_INRS, height, width, generator=generator)
    axes = grid_axes(height, width)
    space = _Workspace(CALIBRATION_INRS, convention.layout, height * width, torch.device("cpu"), torch.float32)
    times = _time_steps({"cpp": lambda f, t: _compiled_loss_and_gradient(f, t, axes, convention),
                         "torch": lambda f, t: _loss_and_gradient(f, t, axes, convention, space)}, flat, targets)
    entry = {"choice": "cpp" if times["cpp_us"] <= times["torch_us"] else "torch", **times}
    entries[key] = entry
    partial = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")  # concurrent writers never share a file
    partial.write_text(json.dumps(entries, indent=1, sort_keys=True))
    os.replace(partial, cache)
    return entry


def _step_function(backend: Optional[str], convention: SirenConvention, capacity: int, axes: tuple[Tensor, Tensor],
                   device: torch.device, dtype: torch.dtype) -> Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """``(flat, targets) -> (mse, grad)`` of the chosen backend (see ``INR_BACKENDS``)."""
    source = "fit_inrs backend" if backend is not None else "$NEURALGRAPH_INR_BACKEND"
    backend = backend if backend is not None else os.environ.get("NEURALGRAPH_INR_BACKEND", "auto")
    if backend not in INR_BACKENDS:
        raise ValueError(f"{source} {backend!r}: expected one of {INR_BACKENDS}")
    applies = device.type == "cpu" and dtype == torch.float32 and len(convention.layout) == 4
    if backend == "cpp" and not applies:
        raise ValueError(f"{source} 'cpp': the compiled kernel fits float32 SIRENs (2, d1, d2, 1) on cpu; "
                         f"got {dtype}, layout {convention.layout}, device {device}")
    if backend == "cpp" or (backend == "auto" and applies):
        try:
            siren_library()
            if backend == "cpp" or calibrated_backend(convention, len(axes[0]), len(axes[1]))["choice"] == "cpp":
                return lambda flat, targets: _compiled_loss_and_gradient(flat, targets, axes, convention)
        except KernelBuildError as err:
            if backend == "cpp":
                raise
            warnings.warn(f"{err}; fit_inrs uses the pure-torch path")
    space = _Workspace(capacity, convention.layout, len(axes[0]) * len(axes[1]), device, dtype)
    return lambda flat, targets: _loss_and_gradient(flat, targets, axes, convention, space)


@dataclass
class FitResult:
    """Fitted INRs: ``weights[l]`` ``[N, d_out, d_in]``, ``biases[l]`` ``[N, d_out]``, final
    ``psnr`` ``[N]`` (dB, of the returned weights) and Adam ``steps`` taken ``[N]``."""

    weights: list[Tensor]
    biases: list[Tensor]
    psnr: Tensor
    steps: Tensor


def fit_inrs(images: Tensor, seeds: Sequence[int], convention: SirenConvention = DWS_MNIST,
             config: FitConfig = FitConfig(), device: Optional[torch.device | str] = None,
             on_finished: Optional[Callable[[int], None]] = None, backend: Optional[str] = None) -> FitResult:
    """Fit one SIREN per image ``[N, H, W]`` (values in ``[0, 1]``), batched.

    INR ``n`` starts from ``init_siren([seeds[n]])`` and takes Adam steps on its own MSE
    until its PSNR reaches ``config.target_psnr`` (it is then frozen and leaves the pool) or
    ``config.steps`` steps are done. On CPU the result for an INR is bitwise independent of
    the other images, their order and the pool size. ``on_finished(k)`` is called as ``k``
    INRs finish (for progress bars). ``backend`` (default: ``$NEURALGRAPH_INR_BACKEND``, else
    ``"auto"``) picks the compiled kernel or the pure-torch path (``INR_BACKENDS``); they
    agree to float32 rounding, and each is batch-independent on its own.
    """
    if images.dim() != 3:
        raise ValueError(f"fit_inrs: images must be [N, H, W], got {tuple(images.shape)}")
    if len(seeds) != len(images):
        raise ValueError(f"fit_inrs: {len(images)} images but {len(seeds)} seeds")
    device = torch.device(device) if device is not None else images.device
    dtype = images.dtype if images.is_floating_point() else torch.float32
    num, height, width = images.shape
    layout = convention.layout
    images = images.to(device, dtype)
    axes = grid_axes(height, width, device, dtype)
    capacity = max(1, min(config.pool_size, num))
    loss_and_gradient = _step_function(backend, convention, capacity, axes, device, dtype)
    beta1, beta2 = config.betas
    min_psnr = torch.tensor(config.target_psnr, dtype=dtype)
    out_flat = torch.empty(num, convention.num_parameters, dtype=dtype)
    out_psnr = torch.empty(num, dtype=dtype)
    out_steps = torch.empty(num, dtype=torch.long)

    def start(ids: Tensor) -> Tensor:
        weights, biases = init_siren([seeds[i] for i in ids.tolist()], convention, dtype)
        return pack(weights, biases).to(device)

    ids = torch.arange(min(capacity, num))
    queued = len(ids)
    flat = start(ids)
    exp_avg, exp_avg_sq = torch.zeros_like(flat), torch.zeros_like(flat)
    step = torch.zeros(len(ids), 1, dtype=dtype, device=device)
    # beta ** step as running float64 products: a product is rounded the same in any lane, while
    # torch's vectorised pow differs from its scalar tail, which made an INR depend on its row
    powers = torch.ones(len(ids), 2, dtype=torch.float64, device=device)
    betas = torch.tensor([beta1, beta2], dtype=torch.float64, device=device)
    targets = images[ids.to(device)]  # gathered again only when the pool changes
    while len(ids):
        mse, grad = loss_and_gradient(flat, targets)
        current_psnr = -10 * torch.log10(mse).cpu()
        finished = (current_psnr >= min_psnr) | (step.view(-1).cpu() >= config.steps)
        if finished.any():
            done = ids[finished]
            out_flat[done] = flat[finished.to(device)].cpu()
            out_psnr[done] = current_psnr[finished]
            out_steps[done] = step.view(-1)[finished.to(device)].long().cpu()
            if on_finished is not None:
                on_finished(len(done))
        # Adam (torch.optim.Adam's update, with a per-INR step count); the per-INR step size
        # divides the denominator so that the update is a single addcdiv_. On CPU on one
        # thread: a pool's few hundred kB gain nothing from threads, and each multithreaded
        # op waits for every thread, which a CPU shared with other jobs makes a 5-40x loss
        # (measured at 2 threads; docs/inr.md).
        with _one_thread() if device.type == "cpu" else contextlib.nullcontext():
            step += 1
            powers.mul_(betas)
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            bias1, bias2 = (1 - powers).to(dtype).unbind(1)
            step_size = config.lr / bias1.unsqueeze(1)
            denom = exp_avg_sq.sqrt().div_(bias2.sqrt().unsqueeze(1)).add_(config.eps).div_(step_size)
            flat.addcdiv_(exp_avg, denom, value=-1)
        if finished.any():
            keep = ~finished
            refill = torch.arange(queued, min(queued + int(finished.sum()), num))
            queued += len(refill)
            keep_dev = keep.to(device)
            ids = torch.cat([ids[keep], refill])
            flat = torch.cat([flat[keep_dev], start(refill)])
            exp_avg = torch.cat([exp_avg[keep_dev], flat.new_zeros(len(refill), flat.shape[1])])
            exp_avg_sq = torch.cat([exp_avg_sq[keep_dev], flat.new_zeros(len(refill), flat.shape[1])])
            step = torch.cat([step[keep_dev], step.new_zeros(len(refill), 1)])
            powers = torch.cat([powers[keep_dev], powers.new_ones(len(refill), 2)])
            targets = images[ids.to(device)]
    weights, biases = unpack(out_flat, layout)
    return FitResult(weights, biases, out_psnr, out_steps)
