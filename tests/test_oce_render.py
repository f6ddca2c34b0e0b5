"""``render``'s batched pixel-last pass and hand-written backward against a plain per-member reference.

The reference is the autograd graph ``render`` replaced: ``[B, P, d]`` activations, one matmul,
bias and ``sin(w0 .)`` per layer, each OCE member rendered on its own and the k images averaged.
"""
import math

import pytest
import torch
from conftest import render_atol

from neuralgraph.data.inr_dataset import InrBatch
from neuralgraph.graph import mlp_to_graph
from neuralgraph.inr import DWS_MNIST, grid_coordinates, init_siren, render
from neuralgraph.nn.ensemble import merge_ensemble
from neuralgraph.training.tasks import InrEditing


def reference_render(weights, biases, resolution, convention=DWS_MNIST):
    """``[B, H, W]`` images of ``[B, d_out, d_in]`` weights through autograd's ops, layer by layer."""
    h = grid_coordinates(resolution, resolution, convention, dtype=weights[0].dtype)
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        h = torch.matmul(h, w.transpose(1, 2)) + b.unsqueeze(1)
        if l < len(weights):
            h = torch.sin(convention.w0 * h)
    return (h.squeeze(-1) + convention.output_offset).view(-1, resolution, resolution)


def member_average(weights, biases, resolution):
    """The mean of the ``k`` members' reference renders, each rendered alone: ``[B, H, W]``."""
    k = weights[0].shape[1]
    return sum(reference_render([w[:, m] for w in weights], [b[:, m] for b in biases], resolution)
               for m in range(k)) / k


def random_members(layout, batch, k, dtype, seed=0):
    """``[B, k, d_out, d_in]`` weights and ``[B, k, d_out]`` biases at the scale of fitted SIRENs (leaves)."""
    gen = torch.Generator().manual_seed(seed)
    weights = [(torch.rand(batch, k, o, i, generator=gen, dtype=torch.float64) * 2 - 1) * math.sqrt(6 / i) / 30
               for i, o in zip(layout, layout[1:])]
    biases = [torch.randn(batch, k, o, generator=gen, dtype=torch.float64) * 0.1 for o in layout[1:]]
    return ([w.to(dtype).requires_grad_() for w in weights], [b.to(dtype).requires_grad_() for b in biases])


def gradient_atol(layout, grads) -> float:
    """Float64 rounding (unit 2^-53) of a gradient through ``L`` layers: each multiplies the error of
    what flows back by up to ``w0 (d + 1)`` (the derivative's scale times the sum's terms), ``L`` such
    layers, relative to the gradient's magnitude."""
    u = torch.finfo(torch.float64).eps / 2
    hidden = len(layout) - 2
    return (DWS_MNIST.w0 * (max(layout) + 1)) ** hidden * (hidden + 1) * u * max(float(g.abs().max()) for g in grads)


@pytest.mark.parametrize("layout", [(2, 32, 32, 1), (2, 8, 5, 8, 1), (2, 16, 1)])
def test_batched_members_render_the_member_average_and_its_gradient_in_float64(layout):
    weights, biases = random_members(layout, batch=3, k=4, dtype=torch.float64)
    batched = render([w.flatten(0, 1) for w in weights], [b.flatten(0, 1) for b in biases], 7).view(3, 4, 7, 7).mean(1)
    reference = member_average(weights, biases, 7)
    torch.testing.assert_close(batched, reference, rtol=0, atol=render_atol([w.flatten(0, 1) for w in weights],
                                                                            [b.flatten(0, 1) for b in biases], 7))
    target = torch.rand(3, 7, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad((batched - target).square().mean(), weights + biases)
    expected = torch.autograd.grad((reference - target).square().mean(), weights + biases)
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, rtol=0, atol=gradient_atol(layout, expected))


def test_the_hand_written_backward_passes_gradcheck():
    weights, biases = random_members((2, 4, 3, 1), batch=2, k=1, dtype=torch.float64)
    inputs = [w[:, 0].detach().requires_grad_() for w in weights] + [b[:, 0].detach().requires_grad_() for b in biases]
    assert torch.autograd.gradcheck(lambda *p: render(p[:3], p[3:], 3), inputs)


def test_merged_and_batched_renders_match_the_float64_member_average_in_float32():
    """Float32 renders (batched members, and the merged network) within the rounding bound of the
    float64 average, and their gradients no further from float64 than the reference graph's own."""
    layout, batch, k = (2, 32, 32, 1), 4, 8
    weights, biases = random_members(layout, batch, k, torch.float32)
    exact_w = [w.detach().double().requires_grad_() for w in weights]
    exact_b = [b.detach().double().requires_grad_() for b in biases]
    exact = member_average(exact_w, exact_b, 28)
    flat_w, flat_b = [w.flatten(0, 1) for w in weights], [b.flatten(0, 1) for b in biases]
    batched = render(flat_w, flat_b).view(batch, k, 28, 28).mean(1)
    merged_w, merged_b = merge_ensemble(weights, biases)
    merged = render(merged_w, merged_b)
    torch.testing.assert_close(batched.double(), exact.detach(), rtol=0, atol=render_atol(flat_w, flat_b))
    torch.testing.assert_close(merged.double(), exact.detach(), rtol=0, atol=render_atol(merged_w, merged_b))

    target = torch.rand(batch, 28, 28, generator=torch.Generator().manual_seed(1))
    loss = lambda images: (images - target.to(images.dtype)).square().mean()  # noqa: E731
    want = torch.autograd.grad(loss(exact), exact_w + exact_b)
    autograd32 = torch.autograd.grad(loss(member_average(weights, biases, 28)), weights + biases)
    for images in (batched, merged):
        got = torch.autograd.grad(loss(images), weights + biases, retain_graph=True)
        for g, g32, w in zip(got, autograd32, want):
            reference_error = float((g32.double() - w).abs().max())
            assert float((g.double() - w).abs().max()) <= 4 * reference_error + 1e-12


def test_the_oce_task_step_renders_its_members_and_their_average():
    """InrEditing at k = 8: ``members`` are the decoder's networks rendered one by one and ``prediction``
    their mean, to float32 rounding of the float64 reference."""
    torch.manual_seed(0)
    task = InrEditing(metanet="gmn", metanet_config={"hidden_dim": 8, "num_layers": 1}, k=8, normalize_inputs=False)
    weights, biases = init_siren(range(3))
    batch = InrBatch(mlp_to_graph(weights, biases), torch.rand(3, 28, 28), torch.zeros(3, dtype=torch.long),
                     torch.arange(3))
    loss, outputs = task.loss_and_outputs(batch)
    weights, biases = task.edited_networks(batch.graph)
    exact_w, exact_b = [w.detach().double() for w in weights], [b.detach().double() for b in biases]
    atol = render_atol([w.flatten(0, 1) for w in weights], [b.flatten(0, 1) for b in biases])
    members = torch.stack([reference_render([w[:, m] for w in exact_w], [b[:, m] for b in exact_b], 28)
                           for m in range(8)], dim=1)
    torch.testing.assert_close(outputs["members"].double(), members, rtol=0, atol=atol)
    torch.testing.assert_close(outputs["prediction"].double(), members.mean(1), rtol=0, atol=atol)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in task.decoder.parameters())


def test_render_without_gradients_gives_the_same_images():
    weights, biases = init_siren(range(5))
    with torch.no_grad():
        plain = render(weights, biases)
    assert torch.equal(plain, render([w.requires_grad_() for w in weights], [b.requires_grad_() for b in biases]))


def test_a_retained_graph_backpropagates_twice_alike():
    """The saved cosines are read, never overwritten, by the backward."""
    weights, biases = init_siren(range(2))
    leaves = [w.requires_grad_() for w in weights] + [b.requires_grad_() for b in biases]
    images = render(leaves[:3], leaves[3:])
    first = torch.autograd.grad(images.sum(), leaves, retain_graph=True)
    assert all(torch.equal(a, b) for a, b in zip(first, torch.autograd.grad(images.sum(), leaves)))
