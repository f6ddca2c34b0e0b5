"""The expressivity report's fast parts compute what the direct definitions do.

* ``linearisations`` (draws in one vmap, each one batch and a double vector-Jacobian product)
  equals, draw by draw, the Jacobian of the one-network map ``vector -> decoder(model(graph(vector)))``
  by ``torch.autograd.functional.jacobian`` (float64, 1e-10);
* ``Span`` grows to the rank ``span_rank`` computes, batch by batch;
* the report's numbers on a small layout are those of the draw-by-draw computation it replaced;
* the report names how its commutant dimension was checked.
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neuralgraph.commands.expressivity_report import (
    WeightEdit,
    format_report,
    layout_options,
    linearisation_span,
    linearisations,
    parameter_draws,
)
from neuralgraph.graph import mlp_to_graph
from neuralgraph.nn import METANETS, WeightDecoder, build_metanet
from neuralgraph.theory.equivariant_space import (
    Span,
    flatten_parameters,
    orbit_count,
    parameter_count,
    span_rank,
    unflatten_parameters,
)

LAYOUT = (2, 3, 1)


@pytest.mark.parametrize("name", ["gmn", "dws", "nft", "scalegmn"])  # nft: the draw-by-draw fallback
def test_linearisations_equal_the_jacobian_of_one_network(name):
    torch.manual_seed(0)
    model = build_metanet(name, hidden_dim=4, num_layers=2, **layout_options(name, LAYOUT)).double().eval()
    edit = WeightEdit(model, WeightDecoder(4, k=3, max_layers=len(LAYOUT) - 1), LAYOUT).double()
    draws = list(itertools.islice(parameter_draws(edit), 2))
    actual = linearisations(edit, {key: torch.stack([d[key] for d in draws]) for key in draws[0]})
    zero = torch.zeros(parameter_count(LAYOUT), dtype=torch.float64)
    for draw, jacobians in zip(draws, actual):
        edit.load_state_dict(draw, strict=False)  # parameters only: buffers stay

        def one_network(vector):
            graph = mlp_to_graph(*unflatten_parameters(vector, LAYOUT))
            weights, biases = edit.decoder(graph, *edit.model(graph))
            return torch.stack([flatten_parameters([w[0, c] for w in weights], [b[0, c] for b in biases]) for c in range(3)])

        expected = torch.autograd.functional.jacobian(one_network, zero)
        scale = expected.abs().max()
        torch.testing.assert_close(jacobians / scale, expected / scale, rtol=0, atol=1e-10)
    assert not torch.equal(actual[0], actual[1])


@settings(max_examples=20, deadline=None)
@given(rank=st.integers(0, 12), rows=st.lists(st.integers(1, 8), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_span_grows_to_the_rank_of_everything_added(rank, rows, seed):
    generator = torch.Generator().manual_seed(seed)
    factors = torch.randn(rank, 30, generator=generator, dtype=torch.float64)
    batches = [torch.randn(m, rank, generator=generator, dtype=torch.float64) @ factors for m in rows]
    span = Span()
    for count, batch in enumerate(batches, 1):
        assert span.add(batch.view(-1, 5, 6)) == span_rank(list(torch.cat(batches[:count])))


def test_span_stops_at_the_commutant_and_report_names_its_check():
    span = linearisation_span("nfn_np", LAYOUT, hidden_dim=4, num_layers=3, k=8, patience=3)
    assert span.equivariant and span.dimension == orbit_count(LAYOUT, "np")
    # reaching the commutant ends the draws: patience no longer matters
    assert linearisation_span("nfn_np", LAYOUT, hidden_dim=4, num_layers=3, k=8, patience=1).draws == span.draws
    assert "commutant dimension by orbit count, equal to the rank computation" in format_report(LAYOUT, [span])
    assert "rank cross-check skipped: n = 13 > --check-up-to 10" in format_report(LAYOUT, [span], check_up_to=10)


# (dimension, Jacobians drawn) on LAYOUT with the report's defaults, as the draw-by-draw computation
# (one double backward per draw, before draws were batched) gave them (tests/data/expressivity_reference.json).
# 41 and 27 are the commutant dimensions of the hidden and NP groups. ScaleGMN's RMS norm (eps: float64
# machine epsilon) has derivative 1/sqrt(eps) ~ 7e7 at zero features, layer after layer, so a few huge
# terms dominate its Jacobians at the zero network and they span only a few dimensions. A newly
# registered architecture is skipped until ``python tests/test_expressivity_report.py NAME`` records it.
REFERENCE_FILE = Path(__file__).parent / "data" / "expressivity_reference.json"


def reference_span(name: str):
    """The span the report's defaults give ``name`` (batches of 3 draws: the span stops inside one)."""
    return linearisation_span(name, LAYOUT, hidden_dim=4, num_layers=4, k=16, patience=2, batch=3)


@pytest.mark.parametrize("name", sorted(METANETS))
def test_report_numbers_are_those_of_the_draw_by_draw_computation(name):
    reference = json.loads(REFERENCE_FILE.read_text())
    if name not in reference:
        pytest.skip(f"{name}: no expressivity reference yet: python tests/test_expressivity_report.py {name}")
    span = reference_span(name)
    assert [span.dimension, span.draws, span.equivariant] == [*reference[name], True], name


if __name__ == "__main__":
    import sys

    recorded = json.loads(REFERENCE_FILE.read_text())
    for name in sys.argv[1:]:
        span = reference_span(name)
        if not span.equivariant:
            raise SystemExit(f"{name}: its linearisation is not equivariant; nothing recorded")
        recorded[name] = [span.dimension, span.draws]
    REFERENCE_FILE.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
