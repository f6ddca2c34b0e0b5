"""``neuralgraph expressivity-report``: how much of the equivariant linear space each metanet reaches.

For a small layout it prints one markdown table:

* the dimension of the space of linear maps on weight space that commute with the
  hidden-permutation group and with the NP group (``commutant_dimension`` of
  :mod:`neuralgraph.theory.equivariant_space`, cross-checked by ``orbit_count``);
* for every architecture of :data:`~neuralgraph.nn.METANETS`, the dimension spanned by its
  *linearisations*: the model followed by a :class:`~neuralgraph.nn.WeightDecoder` (``k`` outputs)
  is a map from weight space to weight space; its Jacobian at the zero network, which every
  neuron permutation fixes, is an equivariant linear map. A decoder with ``k`` outputs gives
  ``k`` such maps per draw of random model parameters; draws go on until the span reaches the
  commutant (it cannot grow further: every map is checked to be equivariant) or ``--patience``
  draws in a row add no dimension to it.

All ``k n^2`` Jacobian entries of a draw come from one batch of ``n`` zero networks, network
``a`` differentiated along ``e_a`` (the metanets treat the graphs of a batch independently):
one forward pass and two backward passes (the Jacobian-vector product as the derivative of a
vector-Jacobian product, which autograd runs natively where forward-mode autodiff would take
decomposed Python kernels). The commutant dimension is the orbit count; the linear-algebra
cross-check (:func:`~neuralgraph.theory.equivariant_space.commutant_dimension`, ``O(n^4)``
memory) runs up to ``--check-up-to`` weight-space coordinates and the report says whether it ran.
Progress goes to stderr (one bar per architecture, over draws).

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

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel
from tqdm import tqdm

from neuralgraph.commands import positive_int
from neuralgraph.graph import Layout, mlp_to_graph
from neuralgraph.nn import METANETS, WeightDecoder, build_metanet, metanet_class
from neuralgraph.theory.equivariant_space import (
    GROUPS,
    commutant_dimension,
    Span,
    commutes,
    orbit_count,
    parameter_count,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layout", type=positive_int, nargs="+", default=[2, 3, 3, 1],
                        help="layer widths of the networks read (input, hidden..., output)")
    parser.add_argument("--hidden-dim", type=positive_int, default=4, help="feature width of the metanets")
    parser.add_argument("--num-layers", type=positive_int, default=4, help="layers of the metanets")
    parser.add_argument("--maps-per-draw", type=positive_int, default=16, help="decoder outputs k: Jacobians per parameter draw")
    parser.add_argument("--patience", type=positive_int, default=2, help="stop after this many draws that add no dimension")
    parser.add_argument("--architectures", nargs="+", default=None, help="subset of metanets (default: all)")
    parser.add_argument("--check-up-to", type=positive_int, default=40,
                        help="cross-check the orbit count by linear algebra up to this weight-space dimension")


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


def redraw(module: torch.nn.Module) -> None:
    """Fresh random parameters for ``module``: ``reset_parameters`` of every submodule, innermost
    first, so a module that initialises its children its own way (as at construction) has the last word."""
    for child in reversed(list(module.modules())):
        if hasattr(child, "reset_parameters"):
            child.reset_parameters()


def linearisations(model: torch.nn.Module, decoder: WeightDecoder, layout: Layout) -> Tensor:
    """Jacobians ``[k, n, n]`` at the zero network of ``model`` followed by ``decoder`` (``k``
    outputs), float64 (one batch, see the module docstring)."""
    n = parameter_count(layout)
    pairs = list(zip(layout[:-1], layout[1:]))
    # the fused attention kernel has no double backward; the math kernel computes the same
    with sdpa_kernel(SDPBackend.MATH):
        vectors = torch.zeros(n, n, dtype=torch.float64, requires_grad=True)  # row a: network a
        chunks = vectors.split([d_out * d_in for d_in, d_out in pairs] + [d_out for _, d_out in pairs], dim=1)
        graph = mlp_to_graph([chunk.view(n, d_out, d_in) for chunk, (d_in, d_out) in zip(chunks, pairs)],
                             list(chunks[len(pairs):]))
        weights, biases = decoder(graph, *model(graph))  # [n, k, d_out, d_in], [n, k, d_out]
        outputs = torch.cat([w.flatten(2) for w in weights] + list(biases), dim=2)  # [n (network a), k, n]
        cotangent = torch.zeros_like(outputs, requires_grad=True)
        (pullback,) = torch.autograd.grad(outputs, vectors, cotangent, create_graph=True)  # J_a^T u_a, linear in u
        (columns,) = torch.autograd.grad(pullback, cotangent, torch.eye(n, dtype=torch.float64))  # J_a e_a
    return columns.permute(1, 2, 0)


@dataclass
class LinearisationSpan:
    """Span of an architecture's linearisations at the zero network."""

    name: str
    group: str
    dimension: int
    draws: int
    equivariant: bool  # every Jacobian commutes with the architecture's group


def linearisation_span(
    name: str, layout: Layout, hidden_dim: int, num_layers: int, k: int, patience: int, progress: bool = False
) -> LinearisationSpan:
    """Draw ``k`` Jacobians at 0 per seed (0, 1, ...) until the span fills the commutant or
    ``patience`` draws in a row leave it as it is."""
    group = metanet_class(name).symmetry
    bound = orbit_count(layout, group)
    span, stale, draws, equivariant = Span(), 0, 0, True
    torch.manual_seed(0)  # draw 0: the parameters of construction; draw d: redrawn under seed d
    model = build_metanet(name, hidden_dim=hidden_dim, num_layers=num_layers, **layout_options(name, layout)).double().eval()
    decoder = WeightDecoder(hidden_dim, k=k, max_layers=len(layout) - 1).double()
    with tqdm(total=bound, desc=f"{name} span", unit="dim", disable=not progress, leave=False) as bar:
        while stale < patience and span.dimension < bound:
            if draws:
                torch.manual_seed(draws)
                redraw(model)
                redraw(decoder)
            draws += 1
            jacobians = linearisations(model, decoder, layout)
            equivariant = equivariant and commutes(jacobians, layout, group, atol=1e-8)
            before = span.dimension
            bar.update(span.add(jacobians) - before)
            bar.set_postfix(draws=draws)
            stale = stale + 1 if span.dimension == before else 0
    return LinearisationSpan(name, group, span.dimension, draws * k, equivariant)


def format_report(layout: Layout, spans: list[LinearisationSpan], check_up_to: int = 40) -> str:
    """Markdown table: commutant dimensions of both groups, then one row per architecture.

    The commutant dimension is the orbit count, cross-checked by linear algebra when the weight
    space has at most ``check_up_to`` coordinates.
    """
    n = parameter_count(layout)
    commutant = {group: orbit_count(layout, group) for group in GROUPS}
    if n <= check_up_to:
        for group, dimension in commutant.items():
            if commutant_dimension(layout, group) != dimension:
                raise RuntimeError(f"{group} group on {layout}: commutant dimension and orbit count disagree")
        check = "orbit count, equal to the rank computation"
    else:
        check = f"orbit count (rank cross-check skipped: n = {n} > --check-up-to {check_up_to})"
    lines = [
        f"Layout {layout}: weight space of dimension {n}; commutant dimension by {check}.",
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
        linearisation_span(n, layout, args.hidden_dim, args.num_layers, args.maps_per_draw, args.patience, progress=True)
        for n in tqdm(names, desc="expressivity-report", unit="metanet")
    ]
    print(format_report(layout, spans, args.check_up_to))
    return 0
