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
seed apart from its initialisation's). Networks train in shards, batched (:func:`zoo_forward`:
channels-last maps, one batched matrix product per layer; one ``torch.optim`` parameter group per
network), each network on its own mini-batches, so that a network of fraction 0.1 takes a tenth
of the steps, as it did alone. Where this differs from the TensorFlow script (a fixed training
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
from itertools import groupby
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from safetensors.torch import save as safetensors_bytes
from torch import Tensor, nn
from tqdm import tqdm

from neuralgraph.data.cnn_zoo import network_seed
from neuralgraph.data.mnist import PathLike, load_digits
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
ACTIVATIONS = ("relu", "tanh")
W_INITS = ("glorot_normal", "glorot_uniform", "he_normal", "orthogonal", "RandomNormal", "TruncatedNormal")
OPTIMIZERS = ("adam", "rmsprop", "sgd")
TRAIN_FRACTIONS = (0.1, 0.25, 0.5, 1.0)
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
    Keras' fans (kernel taps x channels); biases zero."""
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


def zoo_forward(params: Sequence[dict[str, Tensor]], activations: Sequence[str], images: Tensor,
                dropout: Optional[Tensor] = None, generator: Optional[torch.Generator] = None) -> Tensor:
    """Logits ``[n, B, 10]`` of ``n`` networks on ``images`` ``[n or 1, B, 1, H, W]`` (each
    network its own images, or one set for all).

    Feature maps are kept channels-last (``[n, B, h, w, C]``): a convolution is the 3x3 stride-2
    patches as a strided view (``Tensor.unfold``), one reshape, and one batched matrix product over
    the networks, whose output is already the next layer's input. On one set of images the first
    convolution is a single matrix product for all networks. ``activations``: each network's, in
    runs (one call per run). ``dropout`` ``[n]`` (training): each network's rate after every
    convolution (after its activation, as Keras' ``Dropout`` layer there), the masks drawn from
    ``generator``.
    """
    n = len(params)
    runs = [len(list(group)) for _, group in groupby(activations)]
    names = [name for name, _ in groupby(activations)]
    x = images.movedim(2, -1)  # [m, B, H, W, C]
    for name in CONVS:
        weight = torch.stack([p[f"{name}.weight"] for p in params])  # [n, C_out, C_in, 3, 3]
        weight = weight.permute(0, 2, 3, 4, 1).flatten(1, 3)  # [n, C_in*9, C_out], rows ordered as the patches
        bias = torch.stack([p[f"{name}.bias"] for p in params])
        m, B, C = x.shape[0], x.shape[1], x.shape[-1]
        patches = x.unfold(2, KERNEL, STRIDE).unfold(3, KERNEL, STRIDE)  # [m, B, h, w, C, 3, 3] (a view)
        h, w = patches.shape[2], patches.shape[3]
        cols = patches.reshape(m, B * h * w, C * KERNEL * KERNEL)
        if m == 1 and n > 1:  # one set of images: one product for every network
            y = torch.mm(cols[0], weight.permute(1, 0, 2).flatten(1))  # [Bhw, n*C_out]
            y = y.view(B * h * w, n, -1).transpose(0, 1) + bias.unsqueeze(1)  # [n, Bhw, C_out]
        else:
            y = torch.baddbmm(bias.unsqueeze(1), cols.expand(n, -1, -1), weight)
        y = torch.cat([getattr(torch, a)(part) for a, part in zip(names, y.split(runs))])
        if dropout is not None:
            keep = (1 - dropout).view(n, 1, 1)
            y = y * ((torch.rand(y.shape, generator=generator) < keep) / keep)
        x = y.view(n, B, h, w, -1)
    weight = torch.stack([p["linear.weight"] for p in params])
    bias = torch.stack([p["linear.bias"] for p in params])
    return torch.baddbmm(bias.unsqueeze(1), x.mean(dim=(2, 3)), weight.transpose(1, 2))


def l2_penalty(params: Sequence[dict[str, Tensor]], l2: Tensor) -> Tensor:
    """Each network's ``l2 * sum of its squared kernel entries`` ``[n]`` (biases are not penalised)."""
    squares = sum(torch.stack([p[f"{name}.weight"] for p in params]).flatten(1).square().sum(1) for name in SHAPES)
    return l2 * squares


def _optimizers(params: list[dict[str, Tensor]], hypers: list[dict]) -> list[torch.optim.Optimizer]:
    """One optimizer per kind with Keras' defaults, one parameter group per network (its lr)."""
    groups = {kind: [{"params": list(p.values()), "lr": h["learning_rate"]} for p, h in zip(params, hypers)
                     if h["optimizer"] == kind] for kind in OPTIMIZERS}
    make = {"adam": lambda g: torch.optim.Adam(g, eps=1e-7, foreach=True),
            "rmsprop": lambda g: torch.optim.RMSprop(g, alpha=0.9, eps=1e-7, foreach=True),
            "sgd": lambda g: torch.optim.SGD(g, foreach=True)}
    return [make[kind](g) for kind, g in groups.items() if g]


@torch.no_grad()
def _evaluate(params, activations, l2: Tensor, images: Tensor, labels: Tensor, mask: Tensor,
              chunk: int = 250) -> tuple[Tensor, Tensor]:
    """Per-network accuracy and loss (mean cross-entropy + L2 term, as Keras' ``evaluate``) on the
    images ``mask`` ``[n, N]`` selects."""
    n = len(params)
    correct, loss = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    for start in range(0, len(images), chunk):
        logits = zoo_forward(params, activations, images[None, start:start + chunk])
        target = labels[start:start + chunk].expand(n, -1)
        m = mask[:, start:start + chunk]
        ce = nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
        correct += ((logits.argmax(-1) == target) * m).sum(1).double()
        loss += (ce * m).sum(1).double()
    count = mask.sum(1).double()
    return correct / count, loss / count + l2_penalty(params, l2).double()


def tf_row(params: dict[str, Tensor]) -> Tensor:
    """One network's 4,970 parameters in the zoo's column order: per layer its bias, then its
    kernel in TensorFlow layout."""
    parts = []
    for name in SHAPES:
        weight = params[f"{name}.weight"]
        kernel = weight.permute(2, 3, 1, 0) if weight.dim() == 4 else weight.T  # (kh, kw, in, out) / (in, out)
        parts += [params[f"{name}.bias"], kernel.reshape(-1)]
    return torch.cat(parts)


def train_shard(first: int, count: int, settings: PresetSettings, train: tuple[Tensor, Tensor],
                test: tuple[Tensor, Tensor], bar: Optional[tqdm] = None) -> dict[str, Tensor]:
    """Train networks ``first .. first + count - 1``; the tensors of their part file."""
    seeds = [network_seed(settings.seed, first + i) for i in range(count)]
    order = sorted(range(count), key=lambda i: ACTIVATIONS.index(sample_hyperparameters(seeds[i])["activation"]))
    seeds = [seeds[i] for i in order]  # a shard orders its networks by activation: one call per kind
    hypers = [sample_hyperparameters(s) for s in seeds]
    params = [{k: v.requires_grad_() for k, v in initial_parameters(h, s).items()} for h, s in zip(hypers, seeds)]
    activations = [h["activation"] for h in hypers]
    dropout = torch.tensor([h["dropout"] for h in hypers])
    l2 = torch.tensor([h["l2reg"] for h in hypers])
    images, labels = train
    N, B = len(images), settings.batch_size
    # each network's training subset from a stream of its own (stream 2), apart from its initialisation's
    subsets = [torch.randperm(N, generator=torch.Generator().manual_seed(network_seed(settings.seed, first + i, 2)))
               [:int(h["train_fraction"] * N)] for i, h in zip(order, hypers)]
    train_mask = torch.zeros(count, N)
    for i, subset in enumerate(subsets):
        train_mask[i, subset] = 1
    steps = torch.tensor([len(s) // B for s in subsets])
    optimizers = _optimizers(params, hypers)
    generator = torch.Generator().manual_seed(network_seed(settings.seed, first, stream=1))
    alive = torch.ones(count, dtype=torch.bool)
    rows = []
    for epoch in range(max(settings.checkpoint_epochs) + 1):
        if epoch > 0:
            batches = [subset[torch.randperm(len(subset), generator=generator)] for subset in subsets]
            for step in range(int(steps.max())):
                active = ((steps > step) & alive).nonzero().flatten().tolist()
                if not active:
                    break
                index = torch.stack([batches[i][step * B:(step + 1) * B] for i in active])  # [n_active, B]
                chosen = [params[i] for i in active]
                logits = zoo_forward(chosen, [activations[i] for i in active], images[index], dropout[active],
                                     generator)
                ce = nn.functional.cross_entropy(logits.transpose(1, 2), labels[index], reduction="none").mean(1)
                loss = ce + l2_penalty(chosen, l2[active])
                for optimizer in optimizers:
                    optimizer.zero_grad(set_to_none=True)
                loss.sum().backward()
                for k, i in enumerate(active):
                    if not torch.isfinite(loss[k]):  # it stops here, as a crashed run did
                        alive[i] = False
                        for p in params[i].values():
                            p.grad = None
                for optimizer in optimizers:
                    optimizer.step()
        if epoch in settings.checkpoint_epochs:
            test_mask = torch.ones(count, len(test[0]))
            test_acc, test_loss = _evaluate(params, activations, l2, *test, test_mask)
            train_acc, train_loss = _evaluate(params, activations, l2, *train, train_mask)
            for i in range(count):
                row = tf_row({k: v.detach() for k, v in params[i].items()})
                alive[i] &= bool(torch.isfinite(row).all() & torch.isfinite(test_loss[i]) & torch.isfinite(train_loss[i]))
                if alive[i]:
                    rows.append((first + order[i], epoch, row, test_acc[i], test_loss[i], train_acc[i], train_loss[i]))
        if bar is not None and epoch > 0:
            bar.update(count / max(settings.checkpoint_epochs))
    rows.sort(key=lambda r: (r[0], r[1]))  # by network, then step
    return {"weights": torch.stack([r[2] for r in rows]) if rows else torch.zeros(0, 4970),
            "network": torch.tensor([r[0] for r in rows], dtype=torch.int64),
            "step": torch.tensor([r[1] for r in rows], dtype=torch.int64),
            **{name: torch.tensor([float(r[3 + k]) for r in rows], dtype=torch.float64)
               for k, name in enumerate(METRICS)}}


def layout_csv() -> str:
    """``layout.csv``: each layer's bias row, then its kernel row (TensorFlow shapes)."""
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
    its seed), ``modeldir``, ``step`` and the metrics."""
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
    """The zoo's three files from its parts, byte for byte the same on every run."""
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
    """Train and write (or finish writing) the zoo of ``settings`` into ``out``; return the manifest."""
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
        with tqdm(total=settings.networks, initial=done, unit="CNN", desc=f"make-cnn-zoo --preset {PRESET} {out}",
                  disable=not progress, dynamic_ncols=True,
                  bar_format="{l_bar}{bar}| {n:.0f}/{total} [{elapsed}<{remaining}]") as bar:
            for path, first, count in todo:
                tensors = train_shard(first, count, settings, train, test, bar)
                commit_shard(out, manifest, manifest["parts"], path, safetensors_bytes(tensors), networks=count,
                             first=first, rows=len(tensors["step"]))
    files = {f["file"]: f for f in manifest["files"]}
    missing = [name for name in FILES if shard_to_write(out / name, files, manifest_path)]
    if missing:
        parts = [read_shard(out / p["file"], p, FOLDER.command) for p in sorted(manifest["parts"], key=lambda p: p["first"])]
        data = assemble(settings, parts)
        for name in missing:
            commit_shard(out, manifest, manifest["files"], out / name, data[name])
    return manifest


class DefaultInt(int):
    """An integer flag left at make-cnn-zoo's default, so that the preset applies its own."""


class DefaultList(list):
    """A list flag left at make-cnn-zoo's default, so that the preset applies its own."""


PRESET_FLAGS = {"checkpoint_epochs": "epochs", "train_size": "train_size", "test_size": "test_size",
                "batch_size": "batch_size"}  # PresetSettings field -> make-cnn-zoo argument whose default differs


def mark_defaults(parser: argparse.ArgumentParser) -> None:
    """Mark the defaults of :data:`PRESET_FLAGS` so that :func:`preset_settings` tells them from given values."""
    for dest in PRESET_FLAGS.values():
        value = parser.get_default(dest)
        parser.set_defaults(**{dest: DefaultList(value) if isinstance(value, list) else DefaultInt(value)})


def preset_settings(args: argparse.Namespace) -> PresetSettings:
    """The preset's settings from make-cnn-zoo's arguments: the flags given, else the preset's defaults."""
    if args.channels != CHANNELS:
        raise ValueError(f"--channels {args.channels}: the {PRESET} preset's networks have {CHANNELS}")
    given = {field: getattr(args, dest) for field, dest in PRESET_FLAGS.items()
             if not isinstance(getattr(args, dest), (DefaultInt, DefaultList))}
    if "checkpoint_epochs" in given:
        given["checkpoint_epochs"] = tuple(given["checkpoint_epochs"])
    return PresetSettings(networks=args.networks, shard_size=args.shard_size, seed=args.seed, source=args.source,
                          **given)
