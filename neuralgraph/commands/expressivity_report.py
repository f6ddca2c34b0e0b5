"""``neuralgraph expressivity-report``: how much of the equivariant linear space each metanet reaches.

For a small layout it prints one markdown table:

* the dimension of the space of linear maps on weight space that commute with the
  hidden-permutation group and with the NP group (``commutant_dimension`` of
  :mod:`neuralgraph.theory.equivariant_space`, cross-checked by ``orbit_count``);
* for every architecture of :data:`~neuralgraph.nn.METANETS`, the dimension spanned by its
  *linearisations*: the model followed by a :class:`~neuralgraph.nn.WeightDecoder` (``k`` outputs)
  is a map from weight space to weight space; its Jacobian at the zero network, which every
  neuron permutation fixes, is an equivariant linear map. A decoder with ``k`` outputs gives
  ``k`` such maps per draw of random model parameters; draws go on until ``--patience`` draws
  in a row add no dimension to their span.

One measure serves every architecture: message-passing models (gmn, ng_gnn, ng_t, nft) have
no linear layer to read off, and for the linear-layer models (dws, nfn_hnp, nfn_np) the
linearisation of a stack spans what its layers span. A model needs enough layers for
information to cross the graph (``--num-layers`` at least the number of node layers); with fewer,
terms coupling distant layers are missing and the span is smaller.
"""
from __future__ import annotations

import argparse
import inspect
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from neuralgraph.commands import positive_int
from neuralgraph.graph import Layout, mlp_to_graph
from neuralgraph.nn import METANETS, WeightDecoder, build_metanet, metanet_class
from neuralgraph.theory.equivariant_space import (
    GROUPS,
    commutant_dimension,
    commutes,
    flatten_parameters,
    orbit_count,
    parameter_count,
    span_rank,
    unflatten_parameters,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layout", type=positive_int, nargs="+", default=[2, 3, 3, 1],
                        help="layer widths of the networks read (input, hidden..., output)")
    parser.add_argument("--hidden-dim", type=positive_int, default=4, help="feature width of the metanets")
    parser.add_argument("--num-layers", type=positive_int, default=4, help="layers of the metanets")
    parser.add_argument("--maps-per-draw", type=positive_int, default=16, help="decoder outputs k: Jacobians per parameter draw")
    parser.add_argument("--patience", type=positive_int, default=2, help="stop after this many draws that add no dimension")
    parser.add_argument("--architectures", nargs="+", default=None, help="subset of metanets (default: all)")


def layout_options(name: str, layout: Layout) -> dict:
    """Constructor options that size architecture ``name`` for networks of ``layout``."""
    cls = metanet_class(name)
    accepted = inspect.signature(cls.__init__).parameters
    options = {"max_layers": len(layout) - 1}
    if "num_weight_layers" in accepted:  # per-layer parameters sized for this depth
        options["num_weight_layers"] = len(layout) - 1
    if "degree_layout" in accepted:
        options["degree_layout"] = layout
    if "max_inputs" in accepted and cls.symmetry == "hidden":  # NP models do not tell inputs/outputs apart
        options.update(max_inputs=layout[0], max_outputs=layout[-1])
    return options


def weight_space_map(name: str, layout: Layout, hidden_dim: int, num_layers: int, k: int) -> Callable[[Tensor], Tensor]:
    """Metanet ``name`` plus a ``k``-network WeightDecoder at fresh random parameters, float64:
    a weight-space vector ``[n]`` to ``k`` weight-space vectors ``[k, n]``."""
    model = build_metanet(name, hidden_dim=hidden_dim, num_layers=num_layers, **layout_options(name, layout)).double().eval()
    decoder = WeightDecoder(hidden_dim, k=k, max_layers=len(layout) - 1).double()

    def edit(vector: Tensor) -> Tensor:
        graph = mlp_to_graph(*unflatten_parameters(vector, layout))
        weights, biases = decoder(graph, *model(graph))
        return torch.stack([flatten_parameters([w[0, c] for w in weights], [b[0, c] for b in biases]) for c in range(k)])

    return edit


@dataclass
class LinearisationSpan:
    """Span of an architecture's linearisations at the zero network."""

    name: str
    group: str
    dimension: int
    draws: int
    equivariant: bool  # every Jacobian commutes with the architecture's group


def linearisation_span(
    name: str, layout: Layout, hidden_dim: int, num_layers: int, k: int, patience: int
) -> LinearisationSpan:
    """Draw ``k`` Jacobians at 0 per seed (0, 1, ...) until ``patience`` draws in a row leave the span as it is."""
    zero = torch.zeros(parameter_count(layout), dtype=torch.float64)
    group = metanet_class(name).symmetry
    jacobians, dimension, stale, draws = [], 0, 0, 0
    while stale < patience:
        torch.manual_seed(draws)
        draws += 1
        edit = weight_space_map(name, layout, hidden_dim, num_layers, k)
        jacobians.extend(torch.autograd.functional.jacobian(edit, zero, vectorize=True))
        grown = span_rank(jacobians)
        stale = stale + 1 if grown == dimension else 0
        dimension = grown
    equivariant = all(commutes(j, layout, group, atol=1e-8) for j in jacobians)
    return LinearisationSpan(name, group, dimension, len(jacobians), equivariant)


def format_report(layout: Layout, spans: list[LinearisationSpan]) -> str:
    """Markdown table: commutant dimensions of both groups, then one row per architecture."""
    commutant = {group: commutant_dimension(layout, group) for group in GROUPS}
    for group, dimension in commutant.items():
        if orbit_count(layout, group) != dimension:
            raise RuntimeError(f"{group} group on {layout}: commutant dimension and orbit count disagree")
    lines = [
        f"Layout {layout}: weight space of dimension {parameter_count(layout)}.",
        "",
        "| maps | group | dimension | of the commutant | Jacobians drawn | all equivariant |",
        "|---|---|---:|---:|---:|---|",
    ]
    lines += [f"| all equivariant linear maps | {g} | {d} | {d} | - | - |" for g, d in commutant.items()]
    for s in spans:
        lines.append(
            f"| {s.name} (linearisation at 0) | {s.group} | {s.dimension} | {commutant[s.group]} "
            f"| {s.draws} | {'yes' if s.equivariant else 'NO'} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    layout = tuple(args.layout)
    if len(layout) < 2:
        raise ValueError(f"--layout {' '.join(map(str, layout))}: needs at least an input and an output width")
    names = args.architectures or sorted(METANETS)
    unknown = sorted(set(names) - set(METANETS))
    if unknown:
        raise ValueError(f"unknown architectures {unknown}; known: {sorted(METANETS)}")
    spans = [
        linearisation_span(n, layout, args.hidden_dim, args.num_layers, args.maps_per_draw, args.patience) for n in names
    ]
    print(format_report(layout, spans))
    return 0
