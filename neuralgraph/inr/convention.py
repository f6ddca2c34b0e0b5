"""The SIREN convention: what, besides the weights, turns an INR back into its image.

A SIREN with layout ``(2, d_1, ..., d_{L-1}, 1)`` maps a pixel coordinate ``p`` to a grey value:

.. math::
    h_0 = p, \\qquad h_l = \\sin\\big(\\omega_0 (W_l h_{l-1} + b_l)\\big) \\ (0 < l < L), \\qquad
    f(p) = s (W_L h_{L-1} + b_L) + c

with ``nn.Linear`` weights ``W_l`` of shape ``[d_l, d_{l-1}]``. The default
:data:`DWS_MNIST` is the convention of the DWS MNIST INRs used by the field's benchmark
(``\\omega_0 = 30``, ``s = 1``, ``c = 0.5``, layout 2-32-32-1, ``(column, row)`` coordinates in
``[-1, 1]^2``); see ``docs/inr.md``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

#: The orders of the pixel grid's coordinates (``SirenConvention.grid``).
GRID_ORIENTATIONS = ("ij", "xy")
#: The SIREN initialisations (``SirenConvention.init``).
INITS = ("dws", "siren")


@dataclass(frozen=True)
class SirenConvention:
    """Everything needed to turn SIREN weights back into the image they encode.

    Attributes:
        layout: layer widths ``(2, d_1, ..., d_out)``; ``d_out = 1`` (grey images) for every set
            the package renders or fits; NFN's 3-channel CIFAR-10 SIRENs are for classification.
        w0: frequency ``\\omega_0`` inside every hidden ``sin``.
        output_offset: constant ``c`` added to the linear output layer.
        output_scale: factor ``s`` of the linear output layer before the offset: 0.5 maps NFN's
            images in [-1, 1] to [0, 1] (``0.5 f + 0.5``). Recorded (``to_dict``) only when it is
            not 1, so dataset folders and checkpoints written before it existed stay valid.
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
    output_scale: float = 1.0
    grid: str = "xy"
    init: str = "dws"

    def __post_init__(self):
        layout = tuple(int(d) for d in self.layout)
        object.__setattr__(self, "layout", layout)
        if len(layout) < 3 or layout[0] != 2 or min(layout) < 1:
            raise ValueError(f"SirenConvention.layout {layout}: expected (2, hidden..., d_out) with >= 1 hidden layer")
        if not self.output_scale > 0:
            raise ValueError(f"SirenConvention.output_scale {self.output_scale}: must be positive")
        if self.grid not in GRID_ORIENTATIONS:
            raise ValueError(f"SirenConvention.grid {self.grid!r}: expected one of {GRID_ORIENTATIONS}")
        if self.init not in INITS:
            raise ValueError(f"SirenConvention.init {self.init!r}: expected one of {INITS}")

    def to_dict(self) -> dict:
        data = {**dataclasses.asdict(self), "layout": list(self.layout)}
        if self.output_scale == 1.0:
            del data["output_scale"]
        return data

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


#: The convention of DWSNets' MNIST INRs, the default of every INR in the package.
DWS_MNIST = SirenConvention()
