"""Sign flips and positive rescalings: function kept, canonical sign/scale then order, GP up to the group."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_graph import mlp_forward, random_mlp

from neuralgraph.graph import SCALING_GROUPS, Activation, GraphConversionError, permute_mlp, random_hidden_permutation
from neuralgraph.graph.scaling import random_hidden_scalings, rescale_mlp
from neuralgraph.nn.weight_features import trace_mlp
from neuralgraph.theory import audit_gp
from neuralgraph.theory.canonical import CanonicalizationError, canonicalize

layouts = st.lists(st.integers(1, 7), min_size=2, max_size=6).map(tuple)


def relu_forward(weights, biases, inputs):
    return trace_mlp([w[None] for w in weights], [b[None] for b in biases], inputs, "relu").activations[-1][0]


@settings(max_examples=30, deadline=None)
@given(layout=layouts, seed=st.integers(0, 2**16))
def test_rescaling_keeps_the_function(layout, seed):
    """Sign flips keep a tanh network's function, positive scalings a ReLU network's."""
    weights, biases = random_mlp(layout, seed=seed, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    inputs = torch.randn(8, layout[0], generator=gen, dtype=torch.float64)
    for group, forward in (("sign", mlp_forward), ("scale", relu_forward)):
        scaled = rescale_mlp(weights, biases, random_hidden_scalings(layout, group, generator=gen))
        torch.testing.assert_close(forward(*scaled, inputs), forward(weights, biases, inputs), rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(layout=layouts, seed=st.integers(0, 2**16))
def test_canonical_sign_then_order_is_one_network_per_orbit(layout, seed):
    """Any sign flips and permutations of a network give the bitwise same canonical form."""
    weights, biases = random_mlp(layout, seed=seed, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    form = canonicalize(weights, biases, group="sign")
    moved = permute_mlp(*rescale_mlp(weights, biases, random_hidden_scalings(layout, "sign", generator=gen)),
                        random_hidden_permutation(layout, gen))
    other = canonicalize(*moved, group="sign")
    assert not bool(form.unresolved)
    assert all(torch.equal(x, y) for x, y in zip(form.weights + form.biases, other.weights + other.biases))
    for b in form.biases[:-1]:
        assert bool((b >= 0).all())  # canonical sign: nonzero bias made positive
    rebuilt = permute_mlp(*rescale_mlp(weights, biases, form.scalings), form.perms)
    assert all(torch.equal(x, y) for x, y in zip(rebuilt[0] + rebuilt[1], form.weights + form.biases))
    inputs = torch.randn(8, layout[0], generator=gen, dtype=torch.float64)
    torch.testing.assert_close(mlp_forward(form.weights, form.biases, inputs), mlp_forward(weights, biases, inputs),
                               rtol=1e-12, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(layout=layouts, seed=st.integers(0, 2**16))
def test_canonical_scale_then_order_for_relu(layout, seed):
    weights, biases = random_mlp(layout, seed=seed, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    moved = permute_mlp(*rescale_mlp(weights, biases, random_hidden_scalings(layout, "scale", generator=gen)),
                        random_hidden_permutation(layout, gen))
    form, other = canonicalize(weights, biases, group="scale"), canonicalize(*moved, group="scale")
    for x, y in zip(form.weights + form.biases, other.weights + other.biases):
        torch.testing.assert_close(x, y, rtol=1e-12, atol=1e-12)
    for w, b in zip(form.weights[:-1], form.biases[:-1]):
        torch.testing.assert_close(torch.cat([b[:, None], w], 1).norm(dim=1), torch.ones_like(b), rtol=1e-12, atol=1e-12)


def test_sign_canonicalisation_falls_back_to_the_incoming_row_and_flags_dead_neurons():
    weights, biases = random_mlp((2, 3, 1), seed=0, dtype=torch.float64)
    biases[0] = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    weights[0][0] = torch.tensor([-2.0, 1.0], dtype=torch.float64)
    form = canonicalize(weights, biases, group="sign")
    assert float(form.scalings[0][0]) == -1.0  # first nonzero incoming entry -2 -> +2
    weights[0][1] = 0.0  # neuron 1: no bias, no incoming weight: no canonical sign
    with pytest.raises(CanonicalizationError, match="zero bias and zero incoming weights, so it has no canonical sign"):
        canonicalize(weights, biases, group="sign")
    assert bool(canonicalize(weights, biases, on_tie="flag", group="sign").unresolved)


def test_gp_audit_up_to_sign():
    """Biases b and -b tie under the sign group, not under permutations alone."""
    weights, biases = random_mlp((2, 3, 1), seed=1, dtype=torch.float64)
    biases[0] = torch.tensor([0.5, -0.5, 1.0], dtype=torch.float64)
    assert audit_gp(weights, biases).tied_neurons() == {}
    assert audit_gp(weights, biases, group="sign").tied_neurons() == {1: [(0, 1)]}
    weights[0][1] = -weights[0][0]
    weights[1][:, 1] = -weights[1][:, 0]  # neuron 1 is neuron 0 flipped: no separator tells them apart
    assert audit_gp(weights, biases, group="sign").tied_neurons(combined=True) == {1: [(0, 1)]}
    assert audit_gp(weights, biases).tied_neurons(combined=True) == {}


def test_bad_scalings_are_named():
    weights, biases = random_mlp((2, 3, 4, 1), seed=0)
    with pytest.raises(GraphConversionError, match="hidden layer 2: 3 scalings for 4 neurons"):
        rescale_mlp(weights, biases, [None, torch.ones(3)])
    with pytest.raises(GraphConversionError, match="hidden layer 1: scalings must be finite and nonzero"):
        rescale_mlp(weights, biases, [torch.tensor([1.0, 0.0, 1.0]), None])
    with pytest.raises(GraphConversionError, match="got 1 scalings for 3 layers"):
        rescale_mlp(weights, biases, [None])
    with pytest.raises(ValueError, match="group='rotation'"):
        random_hidden_scalings((2, 3, 1), "rotation")


def test_activation_codes_are_fixed_and_each_declared_group_commutes_with_the_activation():
    # the codes are stored in graphs and checkpoints: appending is the only allowed change
    assert Activation.names() == ("identity", "relu", "tanh", "sigmoid", "gelu", "sine", "silu", "leaky_relu", "elu",
                                  "softplus")
    assert [a.code for a in Activation] == list(range(len(Activation)))
    functions = {Activation.RELU: torch.relu, Activation.TANH: torch.tanh, Activation.SINE: torch.sin,
                 Activation.LEAKY_RELU: torch.nn.functional.leaky_relu}
    assert {a for a in Activation if a.scaling is not None} == set(functions)
    z = torch.randn(50, dtype=torch.float64)
    for activation, sigma in functions.items():
        assert activation.scaling in SCALING_GROUPS
        q = -1.0 if activation.scaling == "sign" else 2.5
        torch.testing.assert_close(sigma(q * z), q * sigma(z), rtol=1e-15, atol=1e-15)
