"""Which code computes the fitter's loss and gradient: the compiled kernel or the pure-torch path.

``"cpp"`` is ``neuralgraph/_kernels/siren_step.cpp`` (float32 SIRENs ``(2, d1, d2, 1)`` on CPU),
``"torch"`` is :mod:`neuralgraph.inr.gradient` (anything), and ``"auto"`` the faster of the two
where the kernel applies and builds, as measured once per kernel build, CPU, layout, image size
and thread count (:func:`calibrated_backend`), the torch path otherwise. The two agree to float32
rounding; each is batch-independent on its own.
"""
from __future__ import annotations

import json
import math
import os
import time
import warnings
from typing import Callable, Optional

import torch
from torch import Tensor

from neuralgraph._kernels import KernelBuildError, siren_library, siren_library_path
from neuralgraph.inr.convention import SirenConvention
from neuralgraph.inr.gradient import Workspace, loss_and_gradient
from neuralgraph.inr.render import grid_axes
from neuralgraph.inr.siren import init_siren, pack

#: The fitter's loss-and-gradient backends, for ``fit_inrs(backend=...)`` or ``$NEURALGRAPH_INR_BACKEND``
#: (``"auto"`` picks the faster of the other two, :func:`calibrated_backend`).
INR_BACKENDS = ("auto", "cpp", "torch")
StepFunction = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]  # (flat, targets) -> (mse, grad)


def compiled_loss_and_gradient(flat: Tensor, targets: Tensor, axes: tuple[Tensor, Tensor],
                               convention: SirenConvention) -> tuple[Tensor, Tensor]:
    """:func:`~neuralgraph.inr.gradient.loss_and_gradient` computed by ``neuralgraph/_kernels/siren_step.cpp``.

    The same mathematics, fused: each INR runs on one of ``torch.get_num_threads()`` OpenMP
    threads, its pixels in chunks (112 with AVX-512, 32 with AVX2) whose activations stay in
    the L1 cache; ``sin`` and ``cos`` of a layer come from one range reduction of the angle;
    every elementwise step runs on the registers the small matrix product before it has just
    filled. float32, layout ``(2, d1, d2, 1)``, CPU.

    Args:
        flat: ``[B, num_parameters]`` packed SIRENs (:func:`~neuralgraph.inr.siren.pack`).
        targets: ``[B, H, W]`` images.
        axes: the grid's row and column coordinates (:func:`~neuralgraph.inr.render.grid_axes`).
        convention: the SIRENs' convention.

    Returns:
        ``(mse [B], grad [B, num_parameters])``.
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


#: INRs in the pool of the one-off timing that picks the ``"auto"`` backend (large enough to fill 2-16 threads).
CALIBRATION_INRS = 32


def _time_steps(steps: dict[str, StepFunction], flat: Tensor, targets: Tensor,
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
    and caches ``{"choice", "cpp_us", "torch_us", ...}`` in a JSON file beside the compiled
    kernel (whose name hashes the source, the flags, the compiler and the CPU's instruction
    sets), keyed by layout, image size and ``torch.get_num_threads()``. A cache file that
    cannot be read is measured again and replaced, with a warning naming it.

    Args:
        convention: the SIRENs' convention (its layout).
        height: image height.
        width: image width.

    Returns:
        The cached entry, with ``"choice"`` (``"cpp"`` or ``"torch"``) and the measured microseconds
        per INR.
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
    space = Workspace(CALIBRATION_INRS, convention.layout, height * width, torch.device("cpu"), torch.float32)
    times = _time_steps({"cpp": lambda f, t: compiled_loss_and_gradient(f, t, axes, convention),
                         "torch": lambda f, t: loss_and_gradient(f, t, axes, convention, space)}, flat, targets)
    entry = {"choice": "cpp" if times["cpp_us"] <= times["torch_us"] else "torch", **times}
    entries[key] = entry
    partial = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")  # concurrent writers never share a file
    partial.write_text(json.dumps(entries, indent=1, sort_keys=True))
    os.replace(partial, cache)
    return entry


def step_function(backend: Optional[str], convention: SirenConvention, capacity: int, axes: tuple[Tensor, Tensor],
                  device: torch.device, dtype: torch.dtype) -> StepFunction:
    """``(flat, targets) -> (mse, grad)`` of the chosen backend (see ``INR_BACKENDS``).

    Args:
        backend: ``"auto"``, ``"cpp"``, ``"torch"``, or ``None`` for ``$NEURALGRAPH_INR_BACKEND``.
        convention: the SIRENs' convention.
        capacity: the most INRs of one call (the pool), which the torch path preallocates for.
        axes: the grid's row and column coordinates.
        device: where the INRs are fitted.
        dtype: their dtype.

    Returns:
        The step function.
    """
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
                return lambda flat, targets: compiled_loss_and_gradient(flat, targets, axes, convention)
        except KernelBuildError as err:
            if backend == "cpp":
                raise
            warnings.warn(f"{err}; fit_inrs uses the pure-torch path")
    space = Workspace(capacity, convention.layout, len(axes[0]) * len(axes[1]), device, dtype)
    return lambda flat, targets: loss_and_gradient(flat, targets, axes, convention, space)
