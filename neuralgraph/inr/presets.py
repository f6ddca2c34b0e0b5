"""Named INR recipes: a SIREN convention with its fitting settings (``make-inrs --preset``)."""
from __future__ import annotations

from dataclasses import dataclass

from neuralgraph.inr.convention import DWS_MNIST, SirenConvention
from neuralgraph.inr.fit import FitConfig


@dataclass(frozen=True)
class InrRecipe:
    """A named way of making INRs: the SIREN convention and the fitting settings.

    Attributes:
        convention: the SIREN convention.
        fit: the fitting settings.
    """

    convention: SirenConvention
    fit: FitConfig


#: Named INR recipes (convention and fit settings), for ``neuralgraph make-inrs --preset``. The calibration
#: behind them is in docs/inr.md (Presets) and benchmarks/results/inr_fidelity*.
PRESETS = {
    # The INR set DWSNets released: its per-layer weight and bias spread and its
    # GP-under-quantization table (benchmarks/inr_fidelity.py).
    "dws-released": InrRecipe(DWS_MNIST, FitConfig(lr=1e-3, steps=1500)),
    # DWSNets' recipe as written (lr 5e-4, 1000 steps), less spread than the released INRs;
    # the datasets made before the calibration.
    "dws-1000": InrRecipe(DWS_MNIST, FitConfig()),
    # Sitzmann et al.'s initialisation, which reaches 40 dB early (the demo's, for speed).
    "siren-1000": InrRecipe(SirenConvention(init="siren"), FitConfig()),
}
#: The recipe used when none is named.
DEFAULT_PRESET = "dws-released"


def preset(name: str) -> InrRecipe:
    """The recipe called ``name``; an error listing the presets when there is none.

    Args:
        name: a key of :data:`PRESETS`.

    Returns:
        The recipe.
    """
    if name not in PRESETS:
        raise ValueError(f"INR preset {name!r}: expected one of {sorted(PRESETS)}")
    return PRESETS[name]
