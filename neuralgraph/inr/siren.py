"""One SIREN as a module, the seeded initialisation of many, and their flat parameter vectors.

:class:`Siren` is the network as plain ``nn.Linear`` and :class:`Sine` layers (what
``module_to_graph`` reads); :func:`init_siren` draws each INR from its own seed, so an INR
never depends on its batch-mates; :func:`pack`/:func:`unpack` convert per-layer tensors to
and from the flat ``[B, num_parameters]`` rows the fitter optimises.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor, nn

from neuralgraph.inr.convention import DWS_MNIST, SirenConvention


class Sine(nn.Module):
    r"""``sin(w0 * x)``.

    Args:
        w0: the frequency :math:`\omega_0`.
    """

    def __init__(self, w0: float):
        super().__init__()
        self.w0 = w0

    def forward(self, x: Tensor) -> Tensor:
        return torch.sin(self.w0 * x)


class Siren(nn.Sequential):
    """One SIREN as a plain ``nn.Sequential`` of ``nn.Linear`` and :class:`Sine`.

    ``forward(coords)`` maps ``[P, 2]`` coordinates to ``[P, 1]`` values, without the output
    scale and offset (``convention.output_scale * f + convention.output_offset``); :meth:`load` copies in given weights. Its
    ``nn.Linear`` layers make it convertible by ``module_to_graph``.

    Args:
        convention: the layout and ``w0`` of the SIREN.
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
        """Copy weights and biases into the SIREN's ``nn.Linear`` layers, in place.

        Args:
            weights: per layer ``[d_out, d_in]``.
            biases: per layer ``[d_out]``.

        Returns:
            The SIREN itself.
        """
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

    Args:
        seeds: one seed per INR.
        convention: the layout and initialisation scheme.
        dtype: the dtype of the returned tensors.

    Returns:
        ``(weights, biases)``, per layer.
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
    """Flat ``[B, num_parameters]``: per layer, ``[W_l | b_l]`` row-major (bias as last column).

    Args:
        weights: per layer ``[B, d_out, d_in]``.
        biases: per layer ``[B, d_out]``.

    Returns:
        ``[B, num_parameters]``.
    """
    return torch.cat([torch.cat([w, b.unsqueeze(-1)], -1).flatten(1) for w, b in zip(weights, biases)], 1)


def unpack_blocks(flat: Tensor, layout: Sequence[int]) -> list[Tensor]:
    """Views ``[B, d_out, d_in + 1]`` of :func:`pack`'s flat tensor, one per layer.

    Args:
        flat: ``[B, num_parameters]``.
        layout: the SIREN layout.

    Returns:
        Per layer ``[B, d_out, d_in + 1]``, the bias as last column.
    """
    blocks, start = [], 0
    for d_in, d_out in zip(layout[:-1], layout[1:]):
        size = d_out * (d_in + 1)
        blocks.append(flat[:, start:start + size].view(-1, d_out, d_in + 1))
        start += size
    return blocks


def unpack(flat: Tensor, layout: Sequence[int]) -> tuple[list[Tensor], list[Tensor]]:
    """Inverse of :func:`pack`: contiguous weights ``[B, d_out, d_in]`` and biases ``[B, d_out]``.

    Args:
        flat: ``[B, num_parameters]``.
        layout: the SIREN layout.

    Returns:
        ``(weights, biases)``, per layer.
    """
    blocks = unpack_blocks(flat, layout)
    return [b[..., :-1].contiguous() for b in blocks], [b[..., -1].contiguous() for b in blocks]
