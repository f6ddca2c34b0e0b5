"""SIREN implicit neural representations of images: convention, rendering, batched fitting.

Modules: :mod:`~neuralgraph.inr.convention` (what turns weights into an image),
:mod:`~neuralgraph.inr.render` (the differentiable batched forward),
:mod:`~neuralgraph.inr.siren` (one SIREN as a module, seeded init, flat parameter rows),
:mod:`~neuralgraph.inr.fit` (batched Adam fitting), :mod:`~neuralgraph.inr.gradient` and
:mod:`~neuralgraph.inr.backend` (the fitter's pure-torch and compiled loss-and-gradient, and the
choice between them), :mod:`~neuralgraph.inr.presets` (named recipes). See ``docs/inr.md``.
"""
from neuralgraph.inr.backend import CALIBRATION_INRS, INR_BACKENDS, calibrated_backend
from neuralgraph.inr.convention import DWS_MNIST, GRID_ORIENTATIONS, INITS, SirenConvention
from neuralgraph.inr.fit import FitConfig, FitResult, fit_inrs
from neuralgraph.inr.presets import DEFAULT_PRESET, PRESETS, InrRecipe, preset
from neuralgraph.inr.render import full_precision, grid_axes, grid_coordinates, psnr, render, siren_layout
from neuralgraph.inr.siren import Sine, Siren, init_siren, pack, unpack, unpack_blocks

__all__ = [
    "CALIBRATION_INRS",
    "DEFAULT_PRESET",
    "DWS_MNIST",
    "GRID_ORIENTATIONS",
    "INITS",
    "INR_BACKENDS",
    "PRESETS",
    "FitConfig",
    "FitResult",
    "InrRecipe",
    "Sine",
    "Siren",
    "SirenConvention",
    "calibrated_backend",
    "fit_inrs",
    "full_precision",
    "grid_axes",
    "grid_coordinates",
    "init_siren",
    "pack",
    "preset",
    "psnr",
    "render",
    "siren_layout",
    "unpack",
    "unpack_blocks",
]
