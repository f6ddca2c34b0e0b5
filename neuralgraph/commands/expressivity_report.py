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
decomposed Python kernels). ``--draws-per-batch`` draws go through these passes together, one
``torch.func.vmap`` over their stacked parameters, which pays the per-operation overhead of the
small graphs once for all of them; the span still takes the draws one by one, so where it stops
does not depend on the batch. The commutant dimension is the orbit count; the linear-algebra
cross-check (:func:`~neuralgraph.theory.equivariant_space.commutant_dimension`, ``O(n^4)``
memory) runs up to ``--check-up-to`` weight-space coordinates and the report says whether it ran.
Progress goes to stderr (one bar per architecture, over dimensions).

One measure serves every architecture: message-passing models have no linear layer to read
off, and for the weight-space layer stacks (:class:`~neuralgraph.nn.equivariant_linear.WeightSpaceMetanet`)
the linearisation of a stack spans what its layers span. A model needs enough layers for
information to cross the graph (``--num-layers`` at least the number of node layers); with fewer,
terms coupling distant layers are missing and the span is smaller.
"""
from __future__ import annotations

import argparse
import inspect
import itertools
import warnings
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor
from torch.func import functional_call, vjp, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from neuralgraph.commands import positive_int
from neuralgraph.graph import Layout, mlp_to_graph
from neuralgraph.nn import METANETS, WeightDecoder, build_metanet, metanet_class
from neuralgraph.nn.ng_gnn import layout_degree_histogram
from neuralgraph.progress import Progress
from neuralgraph.theory.equivariant_space import (
    GROUPS,
    commutant_dimension,
    Span,
    commutes,
    flatten_parameters,
    orbit_count,
    parameter_count,
    unflatten_parameters,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``expressivity-report``'s arguments: the layout, the metanets' size, the draws and the check.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("--layout", type=positive_int, nargs="+", default=[2, 3, 3, 1],
                        help="layer widths of the networks read (input, hidden..., output)")
    parser.add_argument("--hidden-dim", type=positive_int, default=4, help="feature width of the metanets")
    parser.add_argument("--num-layers", type=positive_int, default=4, help="layers of the metanets")
    parser.add_argument("--maps-per-draw", type=positive_int, default=16, help="decoder outputs k: Jacobians per parameter draw")
    parser.add_argument("--patience", type=positive_int, default=2, help="stop after this many draws that add no dimension")
    parser.add_argument("--draws-per-batch", type=positive_int, default=12,
                        help="parameter draws differentiated together (one vmap); the span still takes them one by one")
    parser.add_argument("--architectures", nargs="+", choices=sorted(METANETS), default=None, metavar="NAME",
                        help=f"subset of the registered metanets, {', '.join(sorted(METANETS))} (default: all)")
    parser.add_argument("--check-up-to", type=positive_int, default=40,
                        help="cross-check the orbit count by linear algebra up to this weight-space dimension")


def layout_options(name: str, layout: Layout) -> dict:
    """Constructor options that size architecture ``name`` for networks of ``layout``.

    Args:
        name: a name of :data:`~neuralgraph.nn.METANETS`.
        layout: the widths of the networks read, input first.

    Returns:
        The keyword options (``max_layers`` and those of its depth, degrees and input/output
        widths that the architecture's constructor takes).
    """
    cls = metanet_class(name)
    accepted = inspect.signature(cls.__init__).parameters
    options = {"max_layers": len(layout) - 1}
    if "num_weight_layers" in accepted:  # per-layer parameters sized for this depth
        options["num_weight_layers"] = len(layout) - 1
    if "degree_histogram" in accepted:  # PNA's scalers normalised on graphs of this layout
        options["degree_histogram"] = layout_degree_histogram(layout).tolist()
    if "max_inputs" in accepted and cls.symmetry == "hidden":  # NP models do not tell inputs/outputs apart
        options.update(max_inputs=layout[0], max_outputs=layout[-1])
    return options


def redraw(module: torch.nn.Module) -> None:
    """Fresh random parameters for ``module``: ``reset_parameters`` of every submodule, innermost
    first, so a module that initialises its children its own way (as at construction) has the last word.

    Args:
        module: the module whose parameters are redrawn in place, from torch's global generator.
    """
    for child in reversed(list(module.modules())):
        if hasattr(child, "reset_parameters"):
            child.reset_parameters()


class WeightEdit(torch.nn.Module):
    """A metanet followed by a :class:`~neuralgraph.nn.WeightDecoder` with ``k`` outputs, as a map of
    weight-space vectors (coordinates of :func:`~neuralgraph.theory.equivariant_space.flatten_parameters`):
    ``[B, n]`` networks of ``layout`` to ``[B, k, n]`` edited ones.

    Args:
        model: the metanet.
        decoder: its weight decoder with ``k`` outputs.
        layout: the widths of the networks read, input first.
    """

    def __init__(self, model: torch.nn.Module, decoder: WeightDecoder, layout: Layout):
        super().__init__()
        self.model, self.decoder, self.layout = model, decoder, layout

    def forward(self, vectors: Tensor) -> Tensor:
        graph = mlp_to_graph(*unflatten_parameters(vectors, self.layout))
        return flatten_parameters(*self.decoder(graph, *self.model(graph)))


def parameter_draws(edit: WeightEdit) -> Iterator[dict[str, Tensor]]:
    """Parameters of ``edit`` for draws 0, 1, ...: draw 0 as built (under seed 0), draw ``d``
    redrawn under seed ``d`` (the metanet, then the decoder).

    Args:
        edit: the map whose parameters are drawn (redrawn in place, then copied).

    Yields:
        For each draw, a copy of every named parameter of ``edit``.
    """
    for draw in itertools.count():
        if draw:
            torch.manual_seed(draw)
            redraw(edit.model)
            redraw(edit.decoder)
        yield {name: p.detach().clone() for name, p in edit.named_parameters()}


def linearisations(edit: WeightEdit, parameters: dict[str, Tensor]) -> Tensor:
    """Jacobians ``[R, k, n, n]`` of ``edit`` at the zero network, float64, for ``R`` parameter
    draws (``parameters``: name -> ``[R, ...]``), all draws in one ``torch.func.vmap``.

    A draw is one batch of ``n`` zero networks, network ``a`` differentiated along ``e_a``:
    ``u -> J^T u`` is a vector-Jacobian product, linear in ``u``, and its own vector-Jacobian
    product at the identity gives every ``J_a e_a`` (see the module docstring). A model with an
    op that has no batching rule (PyG's ``to_dense_batch`` in nft) is differentiated draw by draw.

    Args:
        edit: the map differentiated.
        parameters: name -> ``[R, ...]``, the parameters of ``R`` draws stacked.

    Returns:
        The Jacobians ``[R, k, n, n]``, float64.
    """
    n = parameter_count(edit.layout)
    zeros = torch.zeros(n, n, dtype=torch.float64)  # row a: network a
    identity = torch.eye(n, dtype=torch.float64)

    def columns(draw: dict[str, Tensor]) -> Tensor:
        outputs, pullback = vjp(lambda vectors: functional_call(edit, draw, (vectors,)), zeros)  # [n, k, n]
        _, pushforward = vjp(lambda cotangent: pullback(cotangent)[0], torch.zeros_like(outputs))
        return pushforward(identity)[0].permute(1, 2, 0)  # [n (network a), k, n] -> [k, n, n (column a)]

    # the fused attention kernel has no double backward; the math kernel computes the same.
    # PyG's aggregations clamp in place, which vmap runs op by op: correct, with a warning not for the user
    with sdpa_kernel(SDPBackend.MATH), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="There is a performance drop because we have not yet implemented")
        try:
            return vmap(columns)(parameters)
        except RuntimeError as err:
            if not str(err).startswith("vmap:"):
                raise
            draws = next(iter(parameters.values())).shape[0]
            return torch.stack([columns({name: p[r] for name, p in parameters.items()}) for r in range(draws)])


def jacobian_draws(edit: WeightEdit, batch: int) -> Iterator[Tensor]:
    """The ``[k, n, n]`` Jacobians of draws 0, 1, ... (:func:`parameter_draws`), computed ``batch`` draws at a time.

    Args:
        edit: the map differentiated.
        batch: draws differentiated together (one :func:`linearisations` call).

    Yields:
        The Jacobians of each draw, in draw order, without end.
    """
    draws = parameter_draws(edit)
    while True:
        chunk = list(itertools.islice(draws, batch))
        yield from linearisations(edit, {name: torch.stack([d[name] for d in chunk]) for name in chunk[0]})


@dataclass
class LinearisationSpan:
    """Span of an architecture's linearisations at the zero network.

    Attributes:
        name: the architecture's name in :data:`~neuralgraph.nn.METANETS`.
        group: its symmetry group (``hidden`` or ``np``).
        dimension: the dimension spanned by its Jacobians.
        draws: how many Jacobians were drawn (draws times ``k``).
        equivariant: whether every Jacobian commutes with the architecture's group.
    """

    name: str
    group: str
    dimension: int
    draws: int
    equivariant: bool  # every Jacobian commutes with the architecture's group


def linearisation_span(
    name: str, layout: Layout, hidden_dim: int, num_layers: int, k: int, patience: int, progress: bool = False,
    batch: int = 12,
) -> LinearisationSpan:
    """Add ``k`` Jacobians at 0 per draw (0, 1, ...; ``batch`` draws computed at a time) to the span
    until it fills the commutant or ``patience`` draws in a row leave it as it is.

    Args:
        name: the architecture, a name of :data:`~neuralgraph.nn.METANETS`.
        layout: the widths of the networks read, input first.
        hidden_dim: the metanet's feature width.
        num_layers: the metanet's layers.
        k: the decoder's outputs, Jacobians per draw.
        patience: stop after this many draws in a row that add no dimension.
        progress: show a progress bar on stderr.
        batch: draws differentiated together.

    Returns:
        The span reached, its draws, and whether every Jacobian was equivariant.
    """
    group = metanet_class(name).symmetry
    bound = orbit_count(layout, group)
    span, stale, used = Span(), 0, []
    torch.manual_seed(0)  # draw 0: the parameters of construction
    model = build_metanet(name, hidden_dim=hidden_dim, num_layers=num_layers, **layout_options(name, layout))
    edit = WeightEdit(model, model.decoder(k, max_layers=len(layout) - 1), layout).double().eval()
    stream = jacobian_draws(edit, batch)
    with Progress(total=bound, desc=f"{name} span", unit="dim", disable=not progress, leave=False) as bar:
        while stale < patience and span.dimension < bound:
            used.append(next(stream))
            before = span.dimension
            bar.update(span.add(used[-1]) - before)
            bar.set_postfix(draws=len(used))
            stale = stale + 1 if span.dimension == before else 0
    equivariant = commutes(torch.stack(used), layout, group, atol=1e-8)
    return LinearisationSpan(name, group, span.dimension, len(used) * k, equivariant)


def format_report(layout: Layout, spans: list[LinearisationSpan], check_up_to: int = 40) -> str:
    """Markdown table: commutant dimensions of both groups, then one row per architecture.

    The commutant dimension is the orbit count, cross-checked by linear algebra when the weight
    space has at most ``check_up_to`` coordinates.

    Args:
        layout: the widths of the networks read, input first.
        spans: one span per architecture, in the order of the rows.
        check_up_to: the largest weight-space dimension cross-checked.

    Returns:
        A line on the weight space and the check, a blank line, then the table.

    Raises:
        RuntimeError: the cross-check disagrees with the orbit count.
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
    """Runs ``expressivity-report``: one span per architecture, printed as :func:`format_report`'s table.

    Args:
        args: the parsed arguments of :func:`add_arguments`.

    Returns:
        The exit status, 0.
    """
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    layout = tuple(args.layout)
    if len(layout) < 2:
        raise ValueError(f"--layout {' '.join(map(str, layout))}: needs at least an input and an output width")
    names = args.architectures or sorted(METANETS)
    spans = [
        linearisation_span(n, layout, args.hidden_dim, args.num_layers, args.maps_per_draw, args.patience,
                           progress=True, batch=args.draws_per_batch)
        for n in Progress(names, desc="expressivity-report", unit="metanet")
    ]
    print(format_report(layout, spans, args.check_up_to))
    return 0
