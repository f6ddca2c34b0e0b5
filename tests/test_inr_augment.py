"""INR augmentation (neuralgraph/inr/augment.py): the augmented INR draws the moved, turned and zoomed image exactly,
dropout thins the weights at its rate, and bad settings or shapes are refused in one line."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from neuralgraph.inr.augment import InrAugmentation, augment_inrs

OMEGA = 30.0


def siren(weights, biases, coords):
    """``[B, P]`` values of a batch of SIRENs at ``[P, 2]`` coordinates (sine hidden layers, linear output)."""
    h = coords.expand(weights[0].shape[0], *coords.shape)
    for w, b in zip(weights[:-1], biases[:-1]):
        h = torch.sin(OMEGA * (h @ w.transpose(-1, -2) + b[:, None]))
    return (h @ weights[-1].transpose(-1, -2) + biases[-1][:, None]).squeeze(-1)


def random_inrs(batch, generator):
    shapes = [(32, 2), (32, 32), (1, 32)]
    weights = [torch.randn(batch, *s, generator=generator, dtype=torch.float64) / math.sqrt(s[1]) for s in shapes]
    biases = [torch.randn(batch, s[0], generator=generator, dtype=torch.float64) for s in shapes]
    return weights, biases


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_augmented_inr_draws_the_image_at_the_transformed_coordinates(seed):
    """f_aug(x) = f(a R x + t), with a, R, t recovered from the first layer; float64, exact to rounding."""
    generator = torch.Generator().manual_seed(seed)
    weights, biases = random_inrs(4, generator)
    new_weights, new_biases = augment_inrs(weights, biases, InrAugmentation(dropout=0.0), generator)
    assert all(torch.equal(a, b) for a, b in zip(new_weights[1:], weights[1:]))
    assert all(torch.equal(a, b) for a, b in zip(new_biases[1:], biases[1:]))
    # the transform A = a R per INR: new W1 = W1 A, so A = pinv(W1) new W1 (W1 has full column rank)
    transform = torch.linalg.pinv(weights[0]) @ new_weights[0]
    zoom = torch.sqrt(torch.linalg.det(transform))
    rotation = transform / zoom[:, None, None]
    assert torch.allclose(rotation @ rotation.transpose(-1, -2), torch.eye(2, dtype=torch.float64).expand(4, 2, 2))
    assert bool(((zoom >= 0.8) & (zoom <= 1.2)).all())
    angle = torch.atan2(rotation[:, 1, 0], rotation[:, 0, 0])
    assert bool((angle.abs() <= math.radians(45) + 1e-12).all())
    shift = torch.linalg.lstsq(weights[0], (new_biases[0] - biases[0])[..., None]).solution.squeeze(-1)
    assert bool((shift.abs() <= 0.25 + 1e-12).all())
    coords = torch.rand(50, 2, generator=generator, dtype=torch.float64) * 2 - 1
    moved = coords @ transform.transpose(-1, -2) + shift[:, None]  # [B, P, 2]
    expected = torch.stack([siren([w[i:i + 1] for w in weights], [b[i:i + 1] for b in biases], moved[i])[0]
                            for i in range(4)])
    torch.testing.assert_close(siren(new_weights, new_biases, coords), expected, rtol=1e-10, atol=1e-10)


def test_every_inr_draws_its_own_transform_and_the_draw_follows_the_generator():
    weights, biases = random_inrs(64, torch.Generator().manual_seed(0))
    first = augment_inrs(weights, biases, generator=torch.Generator().manual_seed(1))
    again = augment_inrs(weights, biases, generator=torch.Generator().manual_seed(1))
    assert all(torch.equal(a, b) for a, b in zip(first[0] + first[1], again[0] + again[1]))
    transform = torch.linalg.pinv(weights[0]) @ first[0][0]
    assert len({round(float(t), 6) for t in torch.linalg.det(transform)}) > 60  # not one draw shared by the batch


def test_dropout_zeroes_weights_at_its_rate_and_rescales_the_rest():
    weights, biases = random_inrs(256, torch.Generator().manual_seed(0))
    plain = augment_inrs(weights, biases, InrAugmentation(dropout=0.0), torch.Generator().manual_seed(3))
    dropped = augment_inrs(weights, biases, InrAugmentation(dropout=0.1), torch.Generator().manual_seed(3))
    for kept, full in zip(dropped[0][1:] + dropped[1][1:], plain[0][1:] + plain[1][1:]):
        zero = kept == 0
        assert abs(zero.double().mean() - 0.1) < 4 * math.sqrt(0.1 * 0.9 / zero.numel())  # 4 binomial std
        torch.testing.assert_close(kept[~zero], full[~zero] / 0.9, rtol=1e-12, atol=0)


@pytest.mark.parametrize("field, value, message", [
    ("translation", -0.1, r"InrAugmentation.translation=-0.1: must be >= 0"),
    ("zoom", 1.0, r"InrAugmentation.zoom=1.0: must be in \[0, 1\)"),
    ("dropout", 1.0, r"InrAugmentation.dropout=1.0: must be in \[0, 1\)"),
])
def test_bad_ranges_are_refused_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        InrAugmentation(**{field: value})


def test_a_first_layer_that_does_not_read_2d_coordinates_is_refused():
    with pytest.raises(ValueError, match=r"augment_inrs: the first layer's weights have shape \(4, 32, 3\); expected"):
        augment_inrs([torch.zeros(4, 32, 3), torch.zeros(4, 1, 32)], [torch.zeros(4, 32), torch.zeros(4, 1)])


def test_datamodule_augments_training_batches_only_and_they_carry_labels_not_images(tiny_inrs):
    from neuralgraph.training.datamodule import MnistInrDataModule

    data = MnistInrDataModule(root=str(tiny_inrs), batch_size=8, augmentation=True, build=False)
    data.prepare_data()
    data.setup()
    train, val = next(iter(data.train_dataloader())), next(iter(data.val_dataloader()))
    plain = data.datasets["train"].batch(train.index)
    assert train.image is None and torch.equal(train.label, plain.label)
    assert not torch.equal(train.blocks.weights[0], plain.blocks.weights[0])
    assert val.image is not None and torch.equal(val.blocks.weights[0], data.batch("val", val.index).blocks.weights[0])
