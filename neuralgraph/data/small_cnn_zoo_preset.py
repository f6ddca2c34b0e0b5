"""``make-cnn-zoo --preset small-cnn-zoo``: MNIST CNNs of the Small CNN Zoo's recipe, in its file format.

The recipe is the zoo's (Unterthiner et al., 2020, https://arxiv.org/abs/2002.11448; its
``train_network.py`` and dataset README in google-research/dnn_predict_accuracy): the Keras CNN
of three 3x3 convolutions of 16 channels, stride 2, 'valid' padding, each followed by the
activation and by dropout, global average pooling and a dense layer of 10 (4,970 parameters);
biases zero at init; images scaled to [-1, 1]; mini-batches of ``batch_size`` drawn without
replacement from the network's own fraction of the training images (an incomplete last batch
is dropped); the L2 penalty ``l2reg * sum(kernel**2)`` on every kernel added to the loss (Keras'
``kernel_regularizer``), and so to the reported losses. Per network, from its own seed
(:func:`sample_hyperparameters`): activation, weight initialisation and its std, optimizer,
learning rate, L2, dropout and training fraction (its training subset from a stream of its own
seed apart from its initialisation's). Networks train in shards, through the trainer every zoo
shares (:mod:`~neuralgraph.data.zoo_trainer`, :func:`train_networks`): each network on its own
mini-batches, with its own dropout masks and optimizer state, as it would alone (a network of
fraction 0.1 takes a tenth of the steps). Where this differs from the TensorFlow script (a fixed training
subset, complete shuffles, training metrics over the whole subset): docs/cnn_zoo.md. A network whose loss
or weights become non-finite stops; its later checkpoints are not written (the released zoo
likewise lacks the rows of runs that crashed), and the manifest counts them.

A checkpoint is taken at each epoch of ``checkpoint_epochs`` (0: at initialisation) and is one
row of the zoo, whose ``step`` is the epoch: the importer's ``--steps`` names epochs.

Files (the released zoo's, read by ``neuralgraph import-dataset small-cnn-zoo``): ``weights.npy``
``[rows, 4970]`` float32, TensorFlow layouts (conv ``(kh, kw, in, out)``, dense ``(in, out)``),
each layer's bias before its kernel as ``layout.csv`` lists them; ``metrics.csv.gz`` (``config.*``,
``modeldir``, ``step``, metrics); rows ordered by network, then step. Resumable: each shard of
networks is written to ``part-00000.safetensors`` and recorded with its sha256 in
``manifest.json`` (:mod:`neuralgraph.data.shards`); when every part is there they are assembled
into the three files, recorded alike. A rerun is byte-identical.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import io
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from safetensors.torch import save as safetensors_bytes
from torch import Tensor, nn
from tqdm import tqdm

from neuralgraph.data.mnist import PathLike, load_digits
from neuralgraph.data.zoo_report import accuracy_summary, read_metrics
from neuralgraph.data.zoo_trainer import Adam, Checkpoint, ConvStack, MiniBatches, RMSprop, SGD, fit, network_seed, plan_networks
from neuralgraph.progress import unit_progress
from neuralgraph.data.shards import (
    MANIFEST,
    FolderFormat,
    commit_shard,
    open_folder,
    read_shard,
    shard_name,
    shard_to_write,
    write_manifest,
)

PRESET = "small-cnn-zoo"
FOLDER = FolderFormat("neuralgraph-small-cnn-zoo/1", f"make-cnn-zoo --preset {PRESET}")
#: The activations the preset draws from.
ACTIVATIONS = ("relu", "tanh")
#: The Keras initialisers it draws from.
W_INITS = ("glorot_normal", "glorot_uniform", "he_normal", "orthogonal", "RandomNormal", "TruncatedNormal")
#: The optimizers it draws from.
OPTIMIZERS = ("adam", "rmsprop", "sgd")
#: The fractions of the training images a network trains on.
TRAIN_FRACTIONS = (0.1, 0.25, 0.5, 1.0)
#: The ranges of the continuous hyperparameters (log-uniform, but dropout uniform).
RANGES = {"init_std": (1e-3, 0.5), "learning_rate": (5e-4, 5e-2), "l2reg": (1e-8, 1e-2), "dropout": (0.0, 0.7)}
CHANNELS, CLASSES, KERNEL, STRIDE = 16, 10, 3, 2
CONVS = ("conv1", "conv2", "conv3")
SHAPES = {"conv1": (CHANNELS, 1, KERNEL, KERNEL), "conv2": (CHANNELS, CHANNELS, KERNEL, KERNEL),
          "conv3": (CHANNELS, CHANNELS, KERNEL, KERNEL), "linear": (CLASSES, CHANNELS)}
VARNAMES = {"conv1": "sequential/conv2d", "conv2": "sequential/conv2d_1", "conv3": "sequential/conv2d_2",
            "linear": "sequential/dense"}
TRUNCATED_STD = 0.87962566103423978  # std of a unit normal truncated at +-2 (Keras' VarianceScaling divides by it)
METRICS = ("test_accuracy", "test_loss", "train_accuracy", "train_loss")
FILES = ("weights.npy", "layout.csv", "metrics.csv.gz")


@dataclass(frozen=True)
class PresetSettings:
    """What determines a preset zoo folder (recorded in, and checked against, its manifest).

    Defaults: the released zoo's protocol (all 60,000 MNIST training images, 86 epochs,
    checkpoints at epochs 0, 1, 2, 3, 20, 40, 60, 80, 86, batches of 512, the 10,000 test images).

    Attributes:
        networks: networks in the zoo.
        checkpoint_epochs: the epochs whose weights and metrics are kept (0: at initialisation).
        train_size: MNIST training images used.
        test_size: MNIST test images used.
        batch_size: mini-batch size.
        shard_size: networks per part file.
        seed: the zoo's seed.
        source: the MNIST images, ``"full"`` or ``"embedded"``.
    """

    networks: int = 2000
    checkpoint_epochs: tuple[int, ...] = (0, 1, 2, 3, 20, 40, 60, 80, 86)
    train_size: int = 60000
    test_size: int = 10000
    batch_size: int = 512
    shard_size: int = 64
    seed: int = 0
    source: str = "full"

    def __post_init__(self):
        for name in ("networks", "train_size", "test_size", "batch_size", "shard_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"PresetSettings.{name}={getattr(self, name)}: must be at least 1")
        epochs = self.checkpoint_epochs
        if not epochs or epochs[0] < 0 or list(epochs) != sorted(set(epochs)):
            raise ValueError(f"PresetSettings.checkpoint_epochs={epochs}: expected increasing epochs >= 0")
        smallest = int(min(TRAIN_FRACTIONS) * self.train_size)
        if self.batch_size > smallest:
            raise ValueError(f"PresetSettings.batch_size={self.batch_size}: larger than the smallest training "
                             f"subset ({min(TRAIN_FRACTIONS)} x train_size {self.train_size} = {smallest} images)")

    def to_dict(self) -> dict:
        return {**asdict(self), "checkpoint_epochs": list(self.checkpoint_epochs)}


def sample_hyperparameters(seed: int) -> dict:
    """The hyperparameters of the network of ``seed``, named as the zoo's ``config.*`` columns.

    Uniform over :data:`ACTIVATIONS`, :data:`W_INITS`, :data:`OPTIMIZERS` and
    :data:`TRAIN_FRACTIONS`; log-uniform over :data:`RANGES` but dropout, uniform.
    ``init_std`` is drawn for every network and used by ``RandomNormal`` and ``TruncatedNormal``.

    Args:
        seed: the network's seed.

    Returns:
        The hyperparameters by name.
    """
    rng = np.random.default_rng(seed)

    def log_uniform(name: str) -> float:
        low, high = RANGES[name]
        return float(np.exp(rng.uniform(np.log(low), np.log(high))))

    return {"activation": ACTIVATIONS[rng.integers(len(ACTIVATIONS))], "w_init": W_INITS[rng.integers(len(W_INITS))],
            "init_std": log_uniform("init_std"), "optimizer": OPTIMIZERS[rng.integers(len(OPTIMIZERS))],
            "learning_rate": log_uniform("learning_rate"), "l2reg": log_uniform("l2reg"),
            "dropout": float(rng.uniform(*RANGES["dropout"])),
            "train_fraction": TRAIN_FRACTIONS[rng.integers(len(TRAIN_FRACTIONS))]}


def initial_parameters(hyper: dict, seed: int) -> dict[str, Tensor]:
    """One network's parameters (PyTorch layouts) initialised as Keras' ``w_init`` does, with
    Keras' fans (kernel taps x channels); biases zero.

    Args:
        hyper: the network's hyperparameters.
        seed: the network's seed.

    Returns:
        ``state_dict``-style tensors.
    """
    generator = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in SHAPES.items():
        taps = math.prod(shape[2:])
        fan_in, fan_out = shape[1] * taps, shape[0] * taps
        weight, kind = torch.empty(shape), hyper["w_init"]
        if kind == "orthogonal":
            nn.init.orthogonal_(weight, generator=generator)
        elif kind == "glorot_uniform":
            limit = math.sqrt(6 / (fan_in + fan_out))
            nn.init.uniform_(weight, -limit, limit, generator=generator)
        elif kind == "RandomNormal":
            nn.init.normal_(weight, 0.0, hyper["init_std"], generator=generator)
        else:
            std = {"glorot_normal": math.sqrt(2 / (fan_in + fan_out)) / TRUNCATED_STD,
                   "he_normal": math.sqrt(2 / fan_in) / TRUNCATED_STD, "TruncatedNormal": hyper["init_std"]}[kind]
            nn.init.trunc_normal_(weight, 0.0, std, -2 * std, 2 * std, generator=generator)
        params[f"{name}.weight"], params[f"{name}.bias"] = weight, torch.zeros(shape[0])
    return params


#: Keras' epsilon (its Adam's and RMSprop's), not PyTorch's 1e-8.
KERAS_EPSILON = 1e-7
#: Each optimizer of :data:`OPTIMIZERS` with Keras' defaults (RMSprop's rho 0.9, SGD without momentum).
RULES = {"adam": Adam(eps=KERAS_EPSILON), "rmsprop": RMSprop(alpha=0.9, eps=KERAS_EPSILON), "sgd": SGD()}


def training_subset(seed: int, network: int, fraction: float, images: int) -> Tensor:
    """The training images a network trains on: the first ``int(fraction * images)`` of a
    permutation from its stream 2 (apart from its initialisation's).

    Args:
        seed: the zoo's seed.
        network: the network's id.
        fraction: its ``train_fraction``.
        images: training images available.

    Returns:
        ``[m]`` image indices.
    """
    generator = torch.Generator().manual_seed(network_seed(seed, network, 2))
    return torch.randperm(images, generator=generator)[:int(fraction * images)]


def kernel_penalty(state: dict[str, Tensor], l2: Tensor) -> Tensor:
    """Each network's ``l2 * sum of its squared kernel entries`` (biases are not penalised), in float64.

    Args:
        state: the networks' parameters, PyTorch layouts ``[n, ...]``.
        l2: ``[n]`` each network's L2 factor.

    Returns:
        ``[n]``.
    """
    return l2.double() * sum(state[f"{name}.weight"].double().flatten(1).square().sum(1) for name in SHAPES)


def tf_row(params: dict[str, Tensor]) -> Tensor:
    """One network's 4,970 parameters in the zoo's column order: per layer its bias, then its
    kernel in TensorFlow layout.

    Args:
        params: the network's parameters (PyTorch layouts).

    Returns:
        ``[4970]``.
    """
    parts = []
    for name in SHAPES:
        weight = params[f"{name}.weight"]
        kernel = weight.permute(2, 3, 1, 0) if weight.dim() == 4 else weight.T  # (kh, kw, in, out) / (in, out)
        parts += [params[f"{name}.bias"], kernel.reshape(-1)]
    return torch.cat(parts)


def stack_networks(networks: Sequence[int], settings: PresetSettings, images: int,
                   device: Optional[torch.device | str] = None,
                   dtype: torch.dtype = torch.float32) -> tuple[ConvStack, MiniBatches, list[int]]:
    """The networks of ids ``networks`` ready to train: their stack, with its optimizer, and their
    mini-batches (:mod:`~neuralgraph.data.zoo_trainer`).

    Each network draws mini-batches without replacement from its own subset
    (:func:`training_subset`; an incomplete last batch is dropped), in an order from its stream 1,
    with dropout masks from its stream 3, under its own optimizer (:data:`RULES`; the L2 penalty's
    gradient ``2 * l2reg * kernel`` added to its kernels' gradients). Every random draw is made on
    the CPU whatever the device.

    Args:
        networks: the networks' ids.
        settings: the zoo's settings.
        images: training images available.
        device: where the networks train (default: the CPU).
        dtype: their parameters' dtype (float32 in a zoo; float64 to measure rounding).

    Returns:
        The stack, the mini-batches (both in the stack's order of networks) and that order (each
        stack row's position in ``networks``).
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    plan = plan_networks(networks, settings.seed, sample_hyperparameters,
                         lambda i, h: training_subset(settings.seed, i, h["train_fraction"], images),
                         lambda h: RULES[h["optimizer"]], lambda h: h["activation"], settings.batch_size, drop_last=True)
    ordered, activations = plan.ordered(plan.hypers), plan.ordered(plan.groups)
    initial = [initial_parameters(h, s) for h, s in zip(ordered, plan.ordered(plan.seeds))]
    stack = ConvStack({key: torch.stack([p[key] for p in initial]).to(device, dtype) for key in initial[0]},
                      activations, [h["dropout"] for h in ordered], dropout_at="conv", bit_seeds=plan.streams(3))
    stack.optimizer(plan.ordered(plan.rules), [h["learning_rate"] for h in ordered],
                    [2 * h["l2reg"] for h in ordered], decay="kernels", groups=activations)
    return stack, plan.mini_batches(), plan.order


def train_networks(networks: Sequence[int], settings: PresetSettings, train: tuple[Tensor, Tensor],
                   test: tuple[Tensor, Tensor], bar: Optional[tqdm] = None, device: Optional[torch.device | str] = None,
                   dtype: torch.dtype = torch.float32) -> dict[str, Tensor]:
    """Train the networks of ids ``networks`` together (:func:`stack_networks`), each as it would
    train alone; the rows of their part file, on the CPU.

    A network whose parameters or losses become non-finite stops (found at the end of its epoch):
    it has no later rows.

    Args:
        networks: the networks' ids.
        settings: the zoo's settings.
        train: MNIST training ``(images, labels)``, scaled as :func:`_mnist` does.
        test: MNIST test ``(images, labels)``.
        bar: a progress bar advanced per network and epoch, or ``None``.
        device: where the networks train (default: the CPU).
        dtype: their parameters' dtype (float32 in a zoo; float64 to measure rounding).

    Returns:
        ``weights`` ``[rows, 4970]`` (:func:`tf_row`), ``network``, ``step`` and the metrics
        (float64) of every row, by network, then step.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    ids = list(networks)
    stack, batches, order = stack_networks(ids, settings, len(train[0]), device, dtype)
    ordered = [sample_hyperparameters(network_seed(settings.seed, ids[k])) for k in order]
    l2 = torch.tensor([h["l2reg"] for h in ordered], dtype=torch.float64)
    rows = []

    def record(checkpoint: Checkpoint) -> None:
        state = {key: value.cpu() for key, value in stack.state().items()}
        penalty = kernel_penalty(state, l2)
        metrics = [checkpoint.test_accuracy.cpu(), checkpoint.test_loss.cpu() + penalty,
                   checkpoint.train_accuracy.cpu(), checkpoint.train_loss.cpu() + penalty]
        for r, alive in enumerate(checkpoint.alive.tolist()):
            if alive:
                rows.append((ids[order[r]], checkpoint.epoch, tf_row({k: v[r] for k, v in state.items()}),
                             *(float(m[r]) for m in metrics)))

    epochs = max(settings.checkpoint_epochs)
    fit(stack, batches, (stack.prepare(train[0]), train[1].to(device)), (stack.prepare(test[0]), test[1].to(device)),
        settings.checkpoint_epochs, record, stop_nonfinite=True,
        progress=bar and (lambda epoch: bar.update(len(ids) / epochs)))
    rows.sort(key=lambda r: (r[0], r[1]))  # by network, then step
    return {"weights": torch.stack([r[2] for r in rows]) if rows else torch.zeros(0, 4970, dtype=dtype),
            "network": torch.tensor([r[0] for r in rows], dtype=torch.int64),
            "step": torch.tensor([r[1] for r in rows], dtype=torch.int64),
            **{name: torch.tensor([r[3 + k] for r in rows], dtype=torch.float64) for k, name in enumerate(METRICS)}}


def train_shard(first: int, count: int, settings: PresetSettings, train: tuple[Tensor, Tensor],
                test: tuple[Tensor, Tensor], bar: Optional[tqdm] = None) -> dict[str, Tensor]:
    """Train networks ``first .. first + count - 1`` (:func:`train_networks`); the tensors of their part file.

    Args:
        first: the first network's id.
        count: networks in the part.
        settings: the zoo's settings.
        train: MNIST training ``(images, labels)``.
        test: MNIST test ``(images, labels)``.
        bar: a progress bar, or ``None``.

    Returns:
        The part's tensors by name.
    """
    return train_networks(range(first, first + count), settings, train, test, bar)


def layout_csv() -> str:
    """``layout.csv``: each layer's bias row, then its kernel row (TensorFlow shapes).

    Returns:
        The file's text.
    """
    lines, start = ["varname,start_idx,end_idx,shape"], 0
    for name, shape in SHAPES.items():
        kernel = (*shape[2:], shape[1], shape[0]) if len(shape) == 4 else (shape[1], shape[0])
        for kind, dims in (("bias", (shape[0],)), ("kernel", kernel)):
            size = math.prod(dims)
            lines.append(f'{VARNAMES[name]}/{kind}:0,{start},{start + size},"{dims}"')
            start += size
    return "\n".join(lines) + "\n"


def metrics_rows(settings: PresetSettings, part: dict[str, Tensor]) -> list[dict]:
    """The ``metrics.csv.gz`` rows of a part: ``config.*`` (its hyperparameters, recomputed from
    its seed), ``modeldir``, ``step`` and the metrics.

    Args:
        settings: the zoo's settings.
        part: a part's tensors.

    Returns:
        One row per (network, checkpoint).
    """
    rows = []
    for k, network in enumerate(part["network"].tolist()):
        seed = network_seed(settings.seed, network)
        hyper = sample_hyperparameters(seed)
        rows.append({**{f"config.{key}": value for key, value in hyper.items()},
                     "config.b_init": "zeros", "config.dataset": "mnist", "config.dnn_architecture": "cnn",
                     "config.epochs": max(settings.checkpoint_epochs), "config.num_layers": len(CONVS),
                     "config.num_units": CHANNELS, "config.random_seed": seed,
                     "modeldir": f"{PRESET}/mnist/seed{settings.seed}/{network:05d}", "step": int(part["step"][k]),
                     **{name: repr(float(part[name][k])) for name in METRICS}})
    return rows


def assemble(settings: PresetSettings, parts: list[dict[str, Tensor]]) -> dict[str, bytes]:
    """The zoo's three files from its parts, byte for byte the same on every run.

    Args:
        settings: the zoo's settings.
        parts: every part's tensors, in order.

    Returns:
        ``weights.npy``, ``layout.csv`` and ``metrics.csv.gz``, by name.
    """
    buffer = io.BytesIO()
    np.save(buffer, torch.cat([p["weights"] for p in parts]).numpy())
    rows = [row for part in parts for row in metrics_rows(settings, part)]
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=sorted(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return {"weights.npy": buffer.getvalue(), "layout.csv": layout_csv().encode(),
            "metrics.csv.gz": gzip.compress(text.getvalue().encode(), mtime=0)}


def _mnist(split: str, size: int, source: str, root: Optional[PathLike]) -> tuple[Tensor, Tensor]:
    """The first ``size`` images of ``split`` scaled to [-1, 1] as the zoo's training script does."""
    digits = load_digits(split, source, root)
    if size > len(digits.labels):
        raise ValueError(f"PresetSettings.{split}_size={size} but {source} MNIST {split} has {len(digits.labels)} images")
    images = torch.from_numpy(digits.images[:size]).float().div(255).mul(2).sub(1).unsqueeze(1)
    return images, torch.from_numpy(digits.labels[:size].astype(np.int64))


def make_small_cnn_zoo(out: PathLike, settings: PresetSettings = PresetSettings(), root: Optional[PathLike] = None,
                       progress: bool = True) -> dict:
    """Train and write (or finish writing) the zoo of ``settings`` into ``out``; return the manifest.

    Args:
        out: the zoo folder.
        settings: what the zoo is.
        root: the MNIST folder, or ``None``.
        progress: show a progress bar.

    Returns:
        The manifest, as written.
    """
    out = Path(out)
    settings_dict = {**settings.to_dict(), "preset": PRESET,
                     "distribution": {"activation": list(ACTIVATIONS), "w_init": list(W_INITS),
                                      "optimizer": list(OPTIMIZERS), "train_fraction": list(TRAIN_FRACTIONS),
                                      **{k: list(v) for k, v in RANGES.items()}}}
    manifest = open_folder(out, FOLDER, settings_dict, parts=[], files=[])
    manifest_path = out / MANIFEST
    recorded = {p["file"]: p for p in manifest["parts"]}
    plan = [(out / shard_name("part", k), first, min(settings.shard_size, settings.networks - first))
            for k, first in enumerate(range(0, settings.networks, settings.shard_size))]
    todo = [(path, first, count) for path, first, count in plan if shard_to_write(path, recorded, manifest_path)]
    if todo:  # before the manifest is written: a folder is never started with sizes MNIST does not have
        train = _mnist("train", settings.train_size, settings.source, root)
        test = _mnist("test", settings.test_size, settings.source, root)
    write_manifest(out, manifest)
    if todo:
        done = sum(p["networks"] for p in manifest["parts"])
        with unit_progress(total=settings.networks, initial=done, unit="CNN",
                           desc=f"make-cnn-zoo --preset {PRESET} {out}", disable=not progress) as bar:
            for path, first, count in todo:
                tensors = train_shard(first, count, settings, train, test, bar)
                commit_shard(out, manifest, manifest["parts"], path, safetensors_bytes(tensors), networks=count,
                             first=first, rows=len(tensors["step"]))
                bar.checkpoint()
    files = {f["file"]: f for f in manifest["files"]}
    missing = [name for name in FILES if shard_to_write(out / name, files, manifest_path)]
    if missing:
        parts = [read_shard(out / p["file"], p, FOLDER.command) for p in sorted(manifest["parts"], key=lambda p: p["first"])]
        data = assemble(settings, parts)
        for name in missing:
            commit_shard(out, manifest, manifest["files"], out / name, data[name])
    if "accuracy" not in manifest:  # how well the zoo trained: per checkpoint epoch, `neuralgraph zoo-report`
        manifest["accuracy"] = accuracy_summary(*read_metrics(out))
        write_manifest(out, manifest)
    return manifest


class DefaultInt(int):
    """An integer flag left at make-cnn-zoo's default, so that the preset applies its own."""


class DefaultList(list):
    """A list flag left at make-cnn-zoo's default, so that the preset applies its own."""


#: PresetSettings field -> the make-cnn-zoo argument whose default differs from the preset's.
PRESET_FLAGS = {"checkpoint_epochs": "epochs", "train_size": "train_size", "test_size": "test_size",
                "batch_size": "batch_size"}  # PresetSettings field -> make-cnn-zoo argument whose default differs


def mark_defaults(parser: argparse.ArgumentParser) -> None:
    """Mark the defaults of :data:`PRESET_FLAGS` so that :func:`preset_settings` tells them from given values.

    Args:
        parser: make-cnn-zoo's parser.
    """
    for dest in PRESET_FLAGS.values():
        value = parser.get_default(dest)
        parser.set_defaults(**{dest: DefaultList(value) if isinstance(value, list) else DefaultInt(value)})


def preset_settings(args: argparse.Namespace) -> PresetSettings:
    """The preset's settings from make-cnn-zoo's arguments: the flags given, else the preset's defaults.

    Args:
        args: make-cnn-zoo's parsed arguments (defaults marked by :func:`mark_defaults`).

    Returns:
        The :class:`PresetSettings`.
    """
    if args.channels != CHANNELS:
        raise ValueError(f"--channels {args.channels}: the {PRESET} preset's networks have {CHANNELS}")
    given = {field: getattr(args, dest) for field, dest in PRESET_FLAGS.items()
             if not isinstance(getattr(args, dest), (DefaultInt, DefaultList))}
    if "checkpoint_epochs" in given:
        given["checkpoint_epochs"] = tuple(given["checkpoint_epochs"])
    return PresetSettings(networks=args.networks, shard_size=args.shard_size, seed=args.seed, source=args.source,
                          **given)
