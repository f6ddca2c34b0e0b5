"""The zoo trainer (neuralgraph/data/zoo_trainer.py): each network of a shard trains as it would alone.

* A network trained alone and inside a shard of 64 (every other network with other
  hyperparameters) ends with the same weights, to within the float32 rounding of its own training
  (its distance from the same training in float64), for the Small-CNN-Zoo preset and the ViT zoo.
* The CNN stack's steps (tiles, patches, the written-out backward, folded dropout scales) are
  those of an ``nn.Module`` with ``torch.optim``, in float64, for every activation, both dropout
  placements and every optimizer rule; the stacked optimizer's are ``torch.optim``'s.
* Mini-batches, dropout streams and the thread count are each network's own affair.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from neuralgraph.data import small_cnn_zoo_preset as preset
from neuralgraph.data import transformer_zoo
from neuralgraph.data import zoo_trainer as zt
from neuralgraph.data.cnn_zoo import _mnist, network_seed

PRESET = preset.PresetSettings(networks=64, shard_size=64, checkpoint_epochs=(1,), train_size=200, test_size=60,
                               batch_size=8, source="embedded")
VIT = transformer_zoo.TransformerZooSettings(networks=64, shard_size=64, checkpoint_epochs=(1,), train_size=64,
                                             test_size=32, batch_size=16, source="embedded")


def preset_case():
    """Network of the shard with the most steps and dropout: its masks and batches are its own."""
    hypers = [preset.sample_hyperparameters(network_seed(PRESET.seed, i)) for i in range(64)]
    network = max(range(64), key=lambda i: (hypers[i]["train_fraction"], hypers[i]["dropout"]))
    data = preset._mnist("train", PRESET.train_size, "embedded", None), preset._mnist("test", PRESET.test_size,
                                                                                      "embedded", None)
    weights = lambda out: {"weights": out["weights"][out["network"] == network]}  # noqa: E731
    return preset.train_networks, PRESET, data, network, weights


def vit_case():
    data = _mnist("train", VIT.train_size, "embedded", None), _mnist("test", VIT.test_size, "embedded", None)
    keys = list(transformer_zoo.stored_shapes())
    network = 5
    weights = lambda out: {k: out[k][out["network"] == network] for k in keys}  # noqa: E731
    return transformer_zoo.train_networks, VIT, data, network, weights


@pytest.mark.parametrize("case", [preset_case, vit_case], ids=["small-cnn-zoo", "transformer-zoo"])
def test_a_network_trains_alike_alone_and_in_a_shard_of_64(case):
    train_networks, settings, (train, test), network, weights = case()
    shard = weights(train_networks(range(64), settings, train, test))
    alone = weights(train_networks([network], settings, train, test))
    exact = weights(train_networks([network], settings, train, test, dtype=torch.float64))
    for key, value in alone.items():
        # the tolerance is the float32 rounding of this very training: its distance from float64
        rounding = float((value.double() - exact[key]).abs().max())
        if not key.endswith("in_proj_bias"):  # (attention's key bias is rounding noise scaled by Adam:
            # test_transformer_zoo's step test) the others carry the training, rounded: no drift
            assert rounding <= 1e-4 * float(exact[key].abs().max()), key
        assert shard[key].shape == value.shape and value.numel() > 0
        difference = float((shard[key] - value).abs().max())
        assert difference <= rounding, f"{key}: alone and in the shard differ by {difference:.3g} > {rounding:.3g}"


def reference_cnn_step(p: dict, images, labels, activation, rate, dropout_at, masks):
    """One network's mean cross-entropy through plain ``F.conv2d``/``F.linear``, dropout masks given."""
    act = {"relu": F.relu, "tanh": torch.tanh, "gelu": F.gelu}[activation]
    keep = 1 - rate
    x = images
    for k, name in enumerate(("conv1", "conv2", "conv3")):
        x = act(F.conv2d(x, p[f"{name}.weight"], p[f"{name}.bias"], stride=2))
        if masks is not None and dropout_at == "conv":
            x = x * masks[k] / keep
    features = x.mean((2, 3))
    if masks is not None and dropout_at == "features":
        features = features * masks[0] / keep
    return F.cross_entropy(F.linear(features, p["linear.weight"], p["linear.bias"]), labels)


KERNELS = zt.conv_kernels(torch.float64) is not None
PATHS = [pytest.param(True, id="compiled", marks=pytest.mark.skipif(not KERNELS, reason="no C++ compiler")),
         pytest.param(False, id="torch")]


@pytest.mark.parametrize("fused", PATHS)
@pytest.mark.parametrize("dropout_at,decay,C", [("conv", "kernels", 16), ("features", "all", 6)])
def test_conv_stack_steps_are_each_networks_module_and_torch_optim(dropout_at, decay, C, fused):
    """Three steps of seven networks (every activation and rule; batches of their own sizes, split
    into tiles of 7 images; some networks sit steps out, so that a run of one rule steps rows that
    are not consecutive) against each network alone as conv2d/linear with its torch.optim optimizer,
    in float64: equal to float64 rounding. Through the compiled kernels (16 channels: their vector
    code; 6: their generic loops) and through torch operations alone."""
    torch.manual_seed(0)
    n, N, dt = 7, 40, torch.float64
    images, labels = torch.randn(N, 1, 28, 28, dtype=dt), torch.randint(10, (N,))
    activations = ["relu", "tanh", "gelu", "relu", "tanh", "gelu", "relu"]
    rates = [0.3, 0.5, 0.2, 0.0, 0.6, 0.1, 0.4]
    rules = [zt.Adam(eps=1e-7), zt.Adam(eps=1e-7), zt.Adam(eps=1e-7), zt.RMSprop(alpha=0.9, eps=1e-7),
             zt.SGD(momentum=0.9), zt.Adam(decoupled=True), zt.SGD()]
    lrs, wds = [1e-2, 3e-3, 5e-3, 3e-3, 5e-2, 1e-2, 0.1], [1e-3, 1e-2, 0.0, 1e-3, 5e-2, 1e-2, 1e-3]
    shapes = {"conv1.weight": (C, 1, 3, 3), "conv1.bias": (C,), "conv2.weight": (C, C, 3, 3), "conv2.bias": (C,),
              "conv3.weight": (C, C, 3, 3), "conv3.bias": (C,), "linear.weight": (10, C), "linear.bias": (10,)}
    weights = {k: torch.randn(n, *s, dtype=dt) * (0.5 if k.endswith("weight") else 0.1) for k, s in shapes.items()}
    stack = zt.ConvStack(weights, activations, rates, dropout_at, bit_seeds=range(100, 100 + n), tile=7, fused=fused)
    assert (stack.kernels is not None) == fused
    stack.optimizer(rules, lrs, wds, decay)
    inputs = stack.prepare(images)
    generator = torch.Generator().manual_seed(1)
    sizes = [10, 13, 9, 16, 5, 11, 7]
    steps = [[(i, torch.randperm(N, generator=generator)[:b]) for i, b in enumerate(sizes) if (s + i) % 3]
             for s in range(3)]
    assert any(0 in [i for i, _ in step] and 2 in [i for i, _ in step] and 1 not in [i for i, _ in step]
               for step in steps)  # the Adam run steps rows 0 and 2 without 1
    for step in steps:
        stack.step(step, inputs, labels)
    trained = stack.state()
    bits = zt.RandomBits(range(100, 100 + n), "cpu")
    layout, sides = stack.bit_layout(), zt.conv_sizes(28)
    for i in range(n):
        p = {k: v[i].clone().requires_grad_() for k, v in weights.items()}
        if decay == "kernels":
            groups = [{"params": [p[k] for k in p if k.endswith("weight")], "weight_decay": wds[i]},
                      {"params": [p[k] for k in p if k.endswith("bias")], "weight_decay": 0.0}]
            optimizer = zt.torch_optimizer(rules[i], groups, lrs[i])
        else:
            optimizer = zt.torch_optimizer(rules[i], list(p.values()), lrs[i], wds[i])
        threshold = zt.keep_threshold(rates[i])
        for step in steps:
            for j, index in step:
                if j != i:
                    continue
                b, masks = len(index), None
                if threshold is not None:
                    r = bits.draw(i, b * layout[-1][1]).view(b, -1)
                    if dropout_at == "conv":
                        masks = [zt.keep_mask(r[:, s0:s1].reshape(b, h, h, C), threshold, dt).permute(0, 3, 1, 2)
                                 for (s0, s1), h in zip(layout, sides)]
                    else:
                        masks = [zt.keep_mask(r[:, :C], threshold, dt)]
                loss = reference_cnn_step(p, images[index], labels[index], activations[i], rates[i], dropout_at, masks)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        for key, value in p.items():
            torch.testing.assert_close(trained[key][i], value.detach(), rtol=1e-10, atol=1e-12,
                                       msg=lambda m: f"network {i} {key}: {m}")
    accuracy, loss = stack.evaluate(inputs, labels, subsets=[(torch.arange(20) + 3 * i) % N for i in range(n)])
    for i in range(n):
        p = {k: v[i] for k, v in trained.items()}
        index = (torch.arange(20) + 3 * i) % N
        logits = F.linear(reference_features(p, images[index], activations[i]), p["linear.weight"], p["linear.bias"])
        torch.testing.assert_close(loss[i], F.cross_entropy(logits, labels[index]), rtol=1e-10, atol=1e-12)
        assert float(accuracy[i]) == float((logits.argmax(1) == labels[index]).double().mean())


def reference_features(p: dict, images, activation):
    act = {"relu": F.relu, "tanh": torch.tanh, "gelu": F.gelu}[activation]
    x = images
    for name in ("conv1", "conv2", "conv3"):
        x = act(F.conv2d(x, p[f"{name}.weight"], p[f"{name}.bias"], stride=2))
    return x.mean((2, 3))


def test_stacked_optimizer_is_torch_optim_row_by_row():
    """Every rule, with and without weight decay (coupled on marked entries only, decoupled for
    AdamW), for five steps on which different rows sit out: each row as its own torch.optim (float64)."""
    torch.manual_seed(0)
    rules = [zt.Adam(), zt.Adam(), zt.Adam(betas=(0.8, 0.99), eps=1e-6), zt.Adam(decoupled=True),
             zt.Adam(decoupled=True), zt.RMSprop(alpha=0.9, eps=1e-7), zt.RMSprop(), zt.SGD(), zt.SGD(momentum=0.9),
             zt.SGD(momentum=0.9)]
    n, P = len(rules), 12
    lr = [10 ** -(1 + k % 3) for k in range(n)]
    wd = [0.0 if k % 4 == 1 else 0.01 * (k + 1) for k in range(n)]
    decay = (torch.arange(P) % 3 != 0).double()
    start = torch.randn(n, P, dtype=torch.float64)
    params = start.clone()
    optimizer = zt.StackedOptimizer(params, rules, lr, wd, decay)
    grads = [torch.randn(n, P, dtype=torch.float64) for _ in range(5)]
    rows = [list(range(n)), [0, 2, 3, 5, 8], [1, 2, 4, 6, 7, 9], list(range(n)), [0, 3, 4, 9]]
    for g, r in zip(grads, rows):
        optimizer.step(g, r)
    for k, rule in enumerate(rules):
        decayed, kept = start[k].clone().requires_grad_(), start[k].clone().requires_grad_()
        index = decay.bool()
        reference = zt.torch_optimizer(rule, [{"params": [decayed], "weight_decay": wd[k]},
                                              {"params": [kept], "weight_decay": 0.0}], lr[k])
        for g, r in zip(grads, rows):
            if k in r:
                decayed.grad, kept.grad = g[k].clone(), g[k].clone()
                reference.step()
        expected = torch.where(index, decayed.detach(), kept.detach())
        torch.testing.assert_close(params[k], expected, rtol=1e-12, atol=1e-14, msg=lambda m: f"{rule}: {m}")
    assert not torch.equal(params, start)


def test_mini_batches_are_each_networks_own():
    subsets = [torch.arange(0, 20), torch.arange(5, 12), torch.arange(30, 66)]
    batches = zt.MiniBatches(subsets, [1, 2, 3], batch_size=8, drop_last=False)
    alone = zt.MiniBatches(subsets[1:2], [2], batch_size=8, drop_last=False)
    dropped = zt.MiniBatches(subsets, [1, 2, 3], batch_size=8, drop_last=True)
    assert batches.steps == [3, 1, 5] and dropped.steps == [2, 0, 4]
    for epoch in range(2):
        epochs = [batches.epoch(i) for i in range(3)]
        for subset, got in zip(subsets, epochs):
            assert torch.equal(torch.cat(got).sort().values, subset)  # without replacement, all of it
            assert [len(b) for b in got[:-1]] == [8] * (len(got) - 1)
        assert all(torch.equal(a, b) for a, b in zip(alone.epoch(0), epochs[1]))  # its seed alone decides
        assert [len(b) for b in dropped.epoch(2)] == [8] * 4
    assert not torch.equal(batches.epoch(0)[0], batches.epoch(0)[0])  # a new order every epoch


def test_dropout_streams_keep_the_rate_and_do_not_depend_on_draw_sizes():
    assert zt.keep_threshold(0.0) is None and zt.keep_threshold(1e-6) is None
    with pytest.raises(ValueError, match="dropout rate 1"):
        zt.keep_threshold(1.0)
    one, other = zt.RandomBits([7], "cpu"), zt.RandomBits([7], "cpu")
    assert torch.equal(torch.cat([one.draw(0, 8), one.draw(0, 24)]), other.draw(0, 32))
    bits = zt.RandomBits([3], "cpu").draw(0, 400_000)
    for rate in (0.05, 0.37, 0.7):
        kept = float(zt.keep_mask(bits, zt.keep_threshold(rate), torch.float64).mean())
        sigma = math.sqrt(rate * (1 - rate) / len(bits))
        assert abs(kept - (1 - rate)) < 5 * sigma + 2 ** -16, (rate, kept)


def test_the_thread_count_does_not_change_a_network():
    settings = preset.PresetSettings(networks=6, shard_size=6, checkpoint_epochs=(0, 1), train_size=200, test_size=30,
                                     batch_size=8, source="embedded")
    data = preset._mnist("train", 200, "embedded", None), preset._mnist("test", 30, "embedded", None)
    runs = []
    for threads in (1, 2):
        stack, batches, _ = preset.stack_networks(range(6), settings, 200)
        inputs = stack.prepare(data[0][0]), data[0][1]
        records = []
        zt.fit(stack, batches, inputs, (stack.prepare(data[1][0]), data[1][1]), (0, 1), records.append,
               threads=threads)
        runs.append((stack.params.clone(), records))
    assert torch.equal(runs[0][0], runs[1][0])
    for a, b in zip(runs[0][1], runs[1][1]):
        assert all(torch.equal(x, y) for x, y in zip(a[1:], b[1:]))
