"""Batched fitting of SIRENs to images: Adam on each INR's own MSE, stopping at a target PSNR.

:func:`fit_inrs` optimises a pool of INRs together with a hand-written backward
(:mod:`neuralgraph.inr.backend` picks the code) and an in-place Adam update on flat
``[B, num_parameters]`` rows. Every INR's trajectory depends only on its own image and seed,
never on which other INRs share its pool.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor

from neuralgraph.inr.backend import step_function
from neuralgraph.inr.convention import DWS_MNIST, SirenConvention
from neuralgraph.inr.gradient import one_thread
from neuralgraph.inr.render import grid_axes
from neuralgraph.inr.siren import init_siren, pack, unpack


@dataclass(frozen=True)
class FitConfig:
    """Adam on the per-image mean squared error, stopping each INR at ``target_psnr``.

    The defaults are DWSNets' recipe as written (preset ``dws-1000``); ``PRESETS`` holds the
    recipe that matches the INRs they released (``dws-released``: lr 1e-3, 1500 steps).
    ``pool_size`` INRs are optimised together; a finished INR leaves the pool and the next
    image takes its place, so the pool stays full (it changes speed, never results).

    Attributes:
        steps: the most Adam steps per INR.
        lr: Adam's learning rate.
        target_psnr: the PSNR (dB) at which an INR stops.
        betas: Adam's betas.
        eps: Adam's epsilon.
        pool_size: INRs optimised together.
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


@dataclass
class FitResult:
    """Fitted INRs: ``weights[l]`` ``[N, d_out, d_in]``, ``biases[l]`` ``[N, d_out]``, final
    ``psnr`` ``[N]`` (dB, of the returned weights) and Adam ``steps`` taken ``[N]``.

    Attributes:
        weights: per layer ``[N, d_out, d_in]``.
        biases: per layer ``[N, d_out]``.
        psnr: ``[N]`` final PSNR in dB.
        steps: ``[N]`` Adam steps taken.
    """

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

    Args:
        images: ``[N, H, W]`` targets.
        seeds: one initialisation seed per image.
        convention: the SIREN convention (layout, ``w0``, grid, initialisation).
        config: the fitting settings.
        device: where to fit (default: the images' device).
        on_finished: progress callback.
        backend: ``"auto"``, ``"cpp"`` or ``"torch"``.

    Returns:
        The :class:`FitResult`, in the order of ``images``.
    """
    if images.dim() != 3:
        raise ValueError(f"fit_inrs: images must be [N, H, W], got {tuple(images.shape)}")
    if convention.output_scale != 1.0 or convention.layout[-1] != 1:
        raise ValueError(f"fit_inrs: fits grey SIRENs with output_scale 1; the convention has layout "
                         f"{convention.layout} and output_scale {convention.output_scale} (an imported set's, "
                         "for reading only)")
    if len(seeds) != len(images):
        raise ValueError(f"fit_inrs: {len(images)} images but {len(seeds)} seeds")
    device = torch.device(device) if device is not None else images.device
    dtype = images.dtype if images.is_floating_point() else torch.float32
    num, height, width = images.shape
    layout = convention.layout
    images = images.to(device, dtype)
    axes = grid_axes(height, width, device, dtype)
    capacity = max(1, min(config.pool_size, num))
    loss_and_gradient = step_function(backend, convention, capacity, axes, device, dtype)
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
        # op waits for every thread, which on a CPU shared with other jobs is a loss (docs/inr.md).
        with one_thread() if device.type == "cpu" else contextlib.nullcontext():
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
