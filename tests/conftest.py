"""Shared fixtures, and rounding tolerances derived from the computations they compare.

The device: tests that take one ask for the ``device`` fixture (they are marked ``device``, so
``pytest -m device`` selects them); it is ``$NEURALGRAPH_DEVICE`` (``cpu`` unless set, e.g. ``cuda``).
Tests of CPU-only code (the compiled SIREN kernel) are marked ``cpu_only`` and skip, saying so, when the
device is another.
"""
import os

import pytest
import torch

from neuralgraph.data.generate import GenerationSettings, make_inrs
from neuralgraph.inr import DWS_MNIST, FitConfig, grid_coordinates


def render_atol(weights, biases, resolution=28, convention=DWS_MNIST) -> float:
    """How far two ``render``s of one function may differ by rounding alone, on any CPU.

    For the wider of the two networks (a merged ensemble against its members' mean, or an INR
    against its neuron-permuted copy), in the weights' dtype with unit roundoff u: layer l's
    ``z = W h + b`` is a sum of ``d_in + 1`` terms, within ``(d_in + 1) u (|W| |h| + |b|)`` of exact
    in any summation order (MKL and oneDNN block differently on AVX2 and AVX-512); ``sin(w0 z)``
    multiplies the error of ``z`` by up to ``w0`` and adds the roundings of ``w0 z`` and of ``sin``
    (``u w0 |z|``, one ulp); the next layer multiplies the error by ``|W|``. This first-order bound
    is propagated in float64 over the grid, and doubled: each render rounds on its own (a mean of
    k member renders, and a merge's rounding of ``W_L / k``, add about ``k u`` times a pixel, far below).
    """
    u = torch.finfo(weights[0].dtype).eps / 2
    height, width = (resolution, resolution) if isinstance(resolution, int) else resolution
    h = grid_coordinates(height, width, convention, dtype=torch.float64)
    error = torch.zeros_like(h)
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        w, b = w.detach().double().transpose(-1, -2), b.detach().double().unsqueeze(-2)
        z = h @ w + b
        error = error @ w.abs() + (w.shape[-2] + 1) * u * (h.abs() @ w.abs() + b.abs())
        if l < len(weights):
            h = torch.sin(convention.w0 * z)
            error = convention.w0 * (error + u * z.abs()) + 2 * u
    return 2 * float((error + u * (z + convention.output_offset).abs()).max())


def sum_atol(terms: int, values: torch.Tensor) -> float:
    """How far two summation orders may put sums of ``terms`` terms, e.g. a float32 gradient summed
    over every edge by a dense and by a scattering path, or by AVX2 and AVX-512 kernels: any order is
    within ``terms * u`` times the terms' magnitudes (Higham's gamma_n), taken as ``values``' largest."""
    return terms * torch.finfo(values.dtype).eps / 2 * float(values.detach().abs().max())


@pytest.fixture(scope="session")
def tiny_inrs(tmp_path_factory):
    """64/32/32 INRs of embedded MNIST digits, fitted briefly (20 steps: plumbing, not quality)."""
    root = tmp_path_factory.mktemp("inrs")
    settings = GenerationSettings(source="embedded", fit=FitConfig(steps=20), shard_size=32)
    for split, limit in (("train", 64), ("val", 32), ("test", 32)):
        make_inrs(root, (split,), limit, settings, progress=False)
    return root


def selected_device() -> torch.device:
    """``$NEURALGRAPH_DEVICE`` (default ``cpu``), the device the tests that take one run on."""
    return torch.device(os.environ.get("NEURALGRAPH_DEVICE", "cpu"))


def pytest_configure(config):
    config.addinivalue_line("markers", "device: takes the device fixture ($NEURALGRAPH_DEVICE, default cpu)")
    config.addinivalue_line("markers", "cpu_only(reason): tests CPU-only code; skipped when $NEURALGRAPH_DEVICE "
                                       "is not cpu")


def pytest_collection_modifyitems(config, items):
    device = selected_device()
    for item in items:
        if "device" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.device)
        marker = item.get_closest_marker("cpu_only")
        if marker is not None and device.type != "cpu":
            reason = marker.args[0] if marker.args else marker.kwargs.get("reason", "CPU-only code")
            item.add_marker(pytest.mark.skip(reason=f"{reason} (NEURALGRAPH_DEVICE={device})"))


@pytest.fixture(scope="session")
def device() -> torch.device:
    """The device of the tests that take one: ``$NEURALGRAPH_DEVICE``, default ``cpu``; a device this machine
    lacks fails the test that asks for it (a run meant for a GPU must not pass on the CPU)."""
    device = selected_device()
    if device.type == "cuda" and not torch.cuda.is_available():
        pytest.fail(f"NEURALGRAPH_DEVICE={device}, but torch sees no CUDA device")
    return device
