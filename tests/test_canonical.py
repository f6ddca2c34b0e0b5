"""Canonicalisation: one representative per hidden-permutation orbit, same function, honest ties."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_graph import mlp_forward, random_mlp

from neuralgraph.graph import permute_mlp, random_hidden_permutation
from neuralgraph.theory.canonical import CanonicalizationError, canonical_features, canonicalize, lexsort_rows
from neuralgraph.theory.quantize import quantize_mlp

layouts = st.lists(st.integers(1, 7), min_size=2, max_size=6).map(tuple)


def assert_same_network(a, b):
    assert all(torch.equal(x, y) for x, y in zip(a.weights + a.biases, b.weights + b.biases))


@settings(max_examples=40, deadline=None)
@given(layout=layouts, seed=st.integers(0, 2**16))
def test_canonical_form_is_permutation_invariant_and_keeps_the_function(layout, seed):
    weights, biases = random_mlp(layout, seed=seed, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    form = canonicalize(weights, biases)
    assert not bool(form.unresolved)
    assert_same_network(form, canonicalize(*permute_mlp(weights, biases, random_hidden_permutation(layout, gen))))
    inputs = torch.randn(16, layout[0], generator=gen, dtype=torch.float64)
    assert torch.allclose(mlp_forward(form.weights, form.biases, inputs), mlp_forward(weights, biases, inputs), atol=1e-12)
    rebuilt_w, rebuilt_b = permute_mlp(weights, biases, form.perms)
    assert all(torch.equal(x, y) for x, y in zip(rebuilt_w + rebuilt_b, form.weights + form.biases))
    for b in form.biases[:-1]:
        assert bool((b[1:] > b[:-1]).all())  # general position: sorted by bias alone


@settings(max_examples=30, deadline=None)
@given(layout=st.lists(st.integers(2, 6), min_size=3, max_size=5).map(tuple), seed=st.integers(0, 2**16))
def test_equal_biases_are_ordered_by_rows_then_columns(layout, seed):
    weights, biases = random_mlp(layout, seed=seed, dtype=torch.float64)
    biases = [torch.zeros_like(b) for b in biases[:-1]] + biases[-1:]  # no bias separates anything
    gen = torch.Generator().manual_seed(seed + 1)
    form = canonicalize(weights, biases)
    assert_same_network(form, canonicalize(*permute_mlp(weights, biases, random_hidden_permutation(layout, gen))))
    # identical biases and rows in layer 1: the outgoing columns (sorted, or as they are before
    # the outputs) decide
    weights[0] = weights[0][:1].expand_as(weights[0]).clone()
    assert_same_network(
        canonicalize(weights, biases),
        canonicalize(*permute_mlp(weights, biases, random_hidden_permutation(layout, gen))),
    )


@settings(max_examples=20, deadline=None)
@given(layout=layouts, batch=st.integers(1, 5), bits=st.sampled_from([3, 16]))
def test_batched_canonicalisation_equals_per_network(layout, batch, bits):
    weights, biases = quantize_mlp(*random_mlp(layout, batch), bits)
    form = canonicalize(weights, biases, on_tie="flag")
    for n in range(batch):
        single = canonicalize([w[n] for w in weights], [b[n] for b in biases], on_tie="flag")
        assert bool(single.unresolved) == bool(form.unresolved[n])
        assert all(torch.equal(a[n], b) for a, b in zip(form.weights + form.biases + form.perms, single.weights + single.biases + single.perms))


def test_unresolved_tie_is_raised_or_flagged():
    # layer-1 neurons 0 and 2 share bias and row; their outgoing columns are (1, 2) and (2, 1):
    # equal as multisets, so only the (not yet canonical) order of layer 2 could separate them
    weights = [
        torch.tensor([[1.0], [5.0], [1.0]]),
        torch.tensor([[1.0, 0.0, 2.0], [2.0, 0.0, 1.0]]),
        torch.tensor([[1.0, 1.0]]),
    ]
    biases = [torch.tensor([0.5, 0.1, 0.5]), torch.zeros(2), torch.zeros(1)]
    with pytest.raises(CanonicalizationError, match="hidden layer 1: neurons 0 and 2 share bias"):
        canonicalize(weights, biases)
    assert bool(canonicalize(weights, biases, on_tie="flag").unresolved)
    batched = [w.unsqueeze(0).repeat(3, 1, 1) for w in weights], [b.unsqueeze(0).repeat(3, 1) for b in biases]
    batched[1][0][0, 2] = 0.7  # network 0 is now in general position
    with pytest.raises(CanonicalizationError, match="network 1, hidden layer 1"):
        canonicalize(*batched)
    assert canonicalize(*batched, on_tie="flag").unresolved.tolist() == [False, True, True]
    with pytest.raises(ValueError, match="on_tie='ignore'"):
        canonicalize(weights, biases, on_tie="ignore")


def test_duplicate_neurons_are_a_harmless_tie():
    weights, biases = random_mlp((2, 4, 3), seed=3, dtype=torch.float64)
    weights[0][3], biases[0][3], weights[1][:, 3] = weights[0][1], biases[0][1], weights[1][:, 1]
    form = canonicalize(weights, biases)
    assert not bool(form.unresolved)
    assert_same_network(form, canonicalize(*permute_mlp(weights, biases, [torch.tensor([3, 0, 2, 1])])))


def test_lexsort_rows_orders_lexicographically():
    keys = torch.tensor([[[1, 2], [0, 9], [1, 1], [0, 3]]])
    assert lexsort_rows(keys).tolist() == [[3, 1, 2, 0]]


def test_canonical_features_are_a_complete_invariant_on_general_position():
    weights, biases = random_mlp((3, 5, 4, 2), seed=4, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    features = canonical_features(weights, biases)
    assert features.shape == (3 * 5 + 5 + 5 * 4 + 4 + 4 * 2 + 2,)
    assert torch.equal(features, canonical_features(*permute_mlp(weights, biases, random_hidden_permutation((3, 5, 4, 2), gen))))
    batched = canonical_features([w.unsqueeze(0).repeat(2, 1, 1) for w in weights], [b.unsqueeze(0).repeat(2, 1) for b in biases])
    assert batched.shape == (2, features.numel()) and torch.equal(batched[1], features)
    weights[1][0, 0] += 1e-12
    assert not torch.equal(features, canonical_features(weights, biases))
