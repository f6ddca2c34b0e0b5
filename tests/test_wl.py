"""1-WL on parameter graphs: permutation invariance, exactness, and the cycle pair it cannot split."""
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_graph import mlp_forward, random_mlp
from torch_geometric.data import Batch

from neuralgraph.commands.expressivity_report import linearisation_span
from neuralgraph.graph import mlp_to_graph, permute_mlp, random_hidden_permutation
from neuralgraph.nn import InvariantReadout, build_metanet, metanet_class
from neuralgraph.nn.ng_gnn import layout_degree_histogram
from neuralgraph.theory.canonical import CanonicalizationError, canonical_features, canonicalize
from neuralgraph.theory.equivariant_space import commutant_dimension
from neuralgraph.theory.wl import cycle_pair, wl_colors, wl_equivalent

MESSAGE_PASSING = {"gmn": {}, "ng_gnn": {"degree_histogram": layout_degree_histogram((2, 4, 4, 1)).tolist()}, "ng_t": {"num_heads": 2}, "nft": {"num_heads": 2}}


@settings(max_examples=25, deadline=None)
@given(layout=st.lists(st.integers(1, 5), min_size=2, max_size=5).map(tuple), seed=st.integers(0, 2**16))
def test_colours_follow_the_neurons_under_hidden_permutations(layout, seed):
    weights, biases = random_mlp(layout, seed=seed)
    perms = random_hidden_permutation(layout, torch.Generator().manual_seed(seed))
    original, permuted = mlp_to_graph(weights, biases), mlp_to_graph(*permute_mlp(weights, biases, perms))
    colours = wl_colors(Batch.from_data_list([original, permuted]))
    first, second = colours[: original.num_nodes], colours[original.num_nodes :]
    offsets = [0, *itertools.accumulate(layout)]
    for l, p in enumerate([None, *perms, None]):
        block = slice(offsets[l], offsets[l + 1])
        expected = first[block] if p is None else first[block][p]
        assert torch.equal(second[block], expected)
    assert wl_equivalent(original, permuted)
    # ids are ranks of signatures, so an isomorphic copy in the batch changes nothing
    assert torch.equal(wl_colors(original), first)


def test_any_changed_weight_or_bias_is_seen():
    weights, biases = random_mlp((2, 3, 3, 1), dtype=torch.float64)
    graph = mlp_to_graph(weights, biases)
    nudged_w = [w.clone() for w in weights]
    nudged_w[1][2, 0] += 1e-15
    nudged_b = [b.clone() for b in biases]
    nudged_b[0][1] = torch.nextafter(nudged_b[0][1], torch.tensor(9.0, dtype=torch.float64))
    assert not wl_equivalent(graph, mlp_to_graph(nudged_w, biases))
    assert not wl_equivalent(graph, mlp_to_graph(weights, nudged_b))
    assert not wl_equivalent(graph, mlp_to_graph(*random_mlp((2, 3, 4, 1))))


def test_cycle_pair_is_wl_equivalent_but_not_a_permutation_of_each_other():
    (wa, ba), (wb, bb) = cycle_pair(4)
    assert wl_equivalent(mlp_to_graph(wa, ba), mlp_to_graph(wb, bb))
    assert torch.linalg.matrix_rank(wa[1]) == 3 and torch.linalg.matrix_rank(wb[1]) == 2
    perms = itertools.product(itertools.permutations(range(4)), repeat=2)
    for p1, p2 in perms:
        pw, pb = permute_mlp(wa, ba, [torch.tensor(p1), torch.tensor(p2)])
        assert not all(torch.equal(x, y) for x, y in zip(pw + pb, wb + bb))
    # 1-WL equivalent parameter graphs compute the same function
    inputs = torch.randn(32, 2, dtype=torch.float64)
    assert torch.allclose(mlp_forward(wa, ba, inputs), mlp_forward(wb, bb, inputs), atol=1e-14)
    with pytest.raises(ValueError, match="even hidden width of at least 4"):
        cycle_pair(5)


@pytest.mark.parametrize("name", sorted(MESSAGE_PASSING))
def test_message_passing_metanets_cannot_separate_the_cycle_pair(name):
    torch.manual_seed(0)
    model = build_metanet(name, hidden_dim=16, num_layers=3, **MESSAGE_PASSING[name]).double().eval()
    readout = InvariantReadout(16, 3).double()
    graphs = Batch.from_data_list([mlp_to_graph(w, b) for w, b in cycle_pair(4)])
    outputs = readout(graphs, *model(graphs))
    assert torch.allclose(outputs[0], outputs[1], rtol=0, atol=1e-10)
    # sanity: the same model does separate a pair that differs in a single weight
    (w, b), _ = cycle_pair(4)
    w[1] = w[1].clone()
    w[1][0, 0] = 0.9
    other = Batch.from_data_list([mlp_to_graph(*cycle_pair(4)[0]), mlp_to_graph(w, b)])
    separated = readout(other, *model(other))
    assert not torch.allclose(separated[0], separated[1], rtol=0, atol=1e-6)


def test_canonical_features_separate_the_pair_once_biases_are_in_general_position():
    pair = cycle_pair(4)
    with pytest.raises(CanonicalizationError, match="hidden layer 1"):
        canonicalize(*pair[0])
    spread = [torch.linspace(-0.3, 0.3, 4, dtype=torch.float64), torch.linspace(0.1, 0.4, 4, dtype=torch.float64)]
    features = []
    for weights, biases in pair:
        features.append(canonical_features(weights, spread + biases[2:]))
    assert not torch.equal(*features)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gmn", "nfn_np"])
def test_linearisations_span_the_whole_commutant(name):
    layout = (1, 2, 1)
    span = linearisation_span(name, layout, hidden_dim=4, num_layers=3, k=8, patience=1)
    assert span.equivariant and span.group == metanet_class(name).symmetry
    assert span.dimension == commutant_dimension(layout, span.group)
