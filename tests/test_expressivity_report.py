"""The expressivity report's fast parts compute what the direct definitions do.

* ``linearisations`` (one batch, double backward) equals the Jacobian of the one-network map
  ``vector -> decoder(model(graph(vector)))`` by ``torch.autograd.functional.jacobian`` (float64, 1e-10);
* ``Span`` grows to the rank ``span_rank`` computes, batch by batch;
* the report names how its commutant dimension was checked.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neuralgraph.commands.expressivity_report import (
    format_report,
    layout_options,
    linearisation_span,
    linearisations,
)
from neuralgraph.graph import mlp_to_graph
from neuralgraph.nn import WeightDecoder, build_metanet
from neuralgraph.theory.equivariant_space import (
    Span,
    flatten_parameters,
    orbit_count,
    parameter_count,
    span_rank,
    unflatten_parameters,
)

LAYOUT = (2, 3, 1)


@pytest.mark.parametrize("name", ["gmn", "dws", "nft", "scalegmn"])
def test_linearisations_equal_the_jacobian_of_one_network(name):
    torch.manual_seed(0)
    model = build_metanet(name, hidden_dim=4, num_layers=2, **layout_options(name, LAYOUT)).double().eval()
    decoder = WeightDecoder(4, k=3, max_layers=len(LAYOUT) - 1).double()

    def edit(vector):
        weights, biases = decoder(*(lambda g: (g, *model(g)))(mlp_to_graph(*unflatten_parameters(vector, LAYOUT))))
        return torch.stack([flatten_parameters([w[0, c] for w in weights], [b[0, c] for b in biases]) for c in range(3)])

    zero = torch.zeros(parameter_count(LAYOUT), dtype=torch.float64)
    expected = torch.autograd.functional.jacobian(edit, zero)
    actual = linearisations(model, decoder, LAYOUT)
    scale = expected.abs().max()
    torch.testing.assert_close(actual / scale, expected / scale, rtol=0, atol=1e-10)


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
