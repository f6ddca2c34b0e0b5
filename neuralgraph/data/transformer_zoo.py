"""A zoo of small ViT-style MNIST classifiers, for predicting a transformer's test accuracy from its weights.

The network (:class:`ZooViT`): a 7x7 patch convolution to ``dim`` features (16 tokens of a
28x28 image), a learned positional embedding, ``depth`` pre-norm blocks (LayerNorm, multi-head
self-attention, residual add; LayerNorm, MLP ``dim -> mlp_dim -> dim``, residual add), a final
LayerNorm, mean pooling over the tokens and a linear classifier.

A zoo follows one of two recipes (:data:`RECIPES`, ``TransformerZooSettings.recipe``).

``small-transformer-zoo``, the Small Transformer Zoo's MNIST recipe (Transformer-NFN, Tran et al.,
ICLR 2025; its ``vision_task`` code and sweep files) where it fits: every network of ``dim`` 32,
2 heads, 2 blocks, MLP 64 with ReLU; each draws from its own seed, uniformly from the recipe's
lists, its optimizer (SGD, SGD with momentum 0.9, Adam, RMSprop, ``torch.optim``'s defaults), its
learning rate (SGD: 1e-3 ... 7e-2, Adam and RMSprop: 3e-4 ... 5e-2, eight values each), its
initialisation std (SGD: 0.1 ... 0.3, Adam and RMSprop: 0.1 ... 0.5, five values; every kernel and
weight matrix truncated normal, biases zero, the positional embedding the sinusoidal table), its
L2 (1e-8, 1e-7, 1e-6, 1e-4, 1e-2, in the gradient), its training fraction (1, 0.9, 0.8, 0.7) and
its dropout (0 ... 0.2, on the embedded tokens and on each attention and MLP output); batches of
``batch_size`` (the recipe's 128), the last incomplete one dropped; the learning rate warms up
linearly over the first tenth of the epochs, then follows a cosine to 1e-5
(:func:`warmup_cosine`, the recipe's schedulers scaled to the run). Where it does not fit: 7x7
patches (16 tokens; the recipe's 4x4 give 49 tokens and about 3.5 times the work), the blocks of
:class:`ZooViT` (pre-norm residual blocks with LayerNorm affines, attention biases, a learned
positional embedding initialised to the table, a linear head; the recipe's blocks drop the
residual adds, its LayerNorms have no affine, its attention no biases, its position table is fixed
and its head is an MLP), no random-crop augmentation, and MNIST standardised rather than scaled to
[-1, 1].

``mixed`` (the default): each network draws its hyperparameters from its own seed
(:func:`sample_hyperparameters`), each uniformly unless said otherwise:

* architecture: ``dim`` 24 (every head count divides it), ``depth`` in {1, 2}, ``heads`` in
  {2, 3, 4}, ``mlp_dim`` in {24, 48}, ``activation`` of the MLP in {gelu, silu};
* optimizer in {adam, adamw, sgd} (SGD with momentum 0.9); learning rate log-uniform in
  [1e-4, 1e-2] for Adam and AdamW, in [1e-3, 1e-1] for SGD; weight decay log-uniform in
  [1e-6, 1e-1] (decoupled for AdamW, an L2 term in the gradient for the others);
* ``init_scale`` log-uniform in [0.3, 3]: every weight matrix and kernel of PyTorch's default
  initialisation, and the positional embedding (normal, std 0.02), is multiplied by it
  (LayerNorm and biases keep their initialisation);
* ``train_fraction`` uniform in [0.1, 1]: the network trains on that fraction of the training images.

Weights and train/test accuracy and loss are recorded at every epoch of ``checkpoint_epochs``;
each (network, epoch) is one entry of the zoo, as in the CNN zoo (:mod:`neuralgraph.data.cnn_zoo`).

Networks train together, a shard at a time, through the trainer every zoo shares
(:mod:`~neuralgraph.data.zoo_trainer`, :func:`train_networks`): the networks of one architecture
as one batched matrix product per layer over their stacked parameters, each network on its own
subset of the training images (its ``train_fraction`` of them) in its own mini-batch order,
under its own optimizer, so that it trains as it would alone.

Storage is the sharded folder of :mod:`neuralgraph.data.shards`: shards ``zoo-00000.safetensors``
hold one tensor per key of the state dict of the largest :class:`ZooViT` of the recipe
(``depth`` 2, ``mlp_dim`` 48 or 64), ``[n, *shape]`` (``n`` = networks x checkpoints), each network's own
tensors in the leading corner and zeros elsewhere (the second block of a one-block network is all
zero); ``network``, ``epoch``, the four metrics and one tensor per hyperparameter (``depth``,
``heads``, ``mlp_dim`` as values, ``activation`` and ``optimizer`` as indices into the manifest's
``choices``). The manifest's ``architecture`` holds the settings every network shares (and
``recipe`` names the recipe, when it is not ``mixed``), so that
``ZooViT(**architecture, depth=..., heads=..., mlp_dim=..., activation=...)`` rebuilds an entry
(:meth:`TransformerZooDataset.module`). A killed run started again skips the recorded shards
(sha256-checked) and retrains the others.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import Dataset
from tqdm import tqdm

from neuralgraph.data.cnn_zoo import ZooBatch, network_split, training_subset, write_zoo
from neuralgraph.data.mnist import PathLike
from neuralgraph.data.zoo_trainer import (
    SGD,
    Adam,
    RMSprop,
    Checkpoint,
    MiniBatches,
    Rule,
    VitArchitecture,
    VitStack,
    fit,
    network_seed,
    plan_networks,
)
from neuralgraph.data.shards import (
    MANIFEST,
    SPLITS,
    DatasetError,
    FolderFormat,
    Worker,
    read_manifest,
    read_shard,
)
from neuralgraph.graph import Activation, ModuleConverter, ParameterGraph, batch_graphs
from neuralgraph.graph.blocks import graph_facts

ZOO_FOLDER = FolderFormat("neuralgraph-transformer-zoo/1", "make-transformer-zoo")
#: The blocks' activations by name, with their modules.
ACTIVATIONS = {Activation.GELU.value: nn.GELU, Activation.SILU.value: nn.SiLU, Activation.RELU.value: nn.ReLU}
OPTIMIZERS = ("adam", "adamw", "sgd")
#: The categorical hyperparameters and their values, as the manifest records them.
CHOICES = {"activation": (Activation.GELU.value, Activation.SILU.value), "optimizer": OPTIMIZERS}
DEPTHS, HEADS, MLP_DIMS = (1, 2), (2, 3, 4), (24, 48)
ARCHITECTURE = {"dim": 24, "patch": 7, "classes": 10, "image_size": 28}  # shared by every network


@dataclass(frozen=True)
class Recipe:
    """What a zoo's networks are and how they train.

    Attributes:
        architecture: the :class:`ZooViT` arguments every network shares.
        depths: the block counts drawn from.
        heads: the head counts drawn from.
        mlp_dims: the MLP widths drawn from.
        choices: the categorical hyperparameters' values (``activation``, ``optimizer``).
        drop_last: an epoch leaves out its last, smaller mini-batch.
        schedule: the learning rate follows :func:`warmup_cosine` (else it is constant).
    """

    architecture: dict
    depths: tuple[int, ...]
    heads: tuple[int, ...]
    mlp_dims: tuple[int, ...]
    choices: dict
    drop_last: bool
    schedule: bool


#: The Small Transformer Zoo's MNIST grid (Transformer-NFN, ``vision_task/sweep_scripts``), per
#: optimizer family: learning rates and initialisation standard deviations.
STZ_OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "rmsprop")
STZ_LR = {"sgd": (1e-3, 3e-3, 5e-3, 7e-3, 1e-2, 3e-2, 5e-2, 7e-2),
          "adam": (3e-4, 5e-4, 1e-3, 3e-3, 5e-3, 1e-2, 3e-2, 5e-2)}
STZ_INIT_STD = {"sgd": (0.1, 0.15, 0.2, 0.25, 0.3), "adam": (0.1, 0.2, 0.3, 0.4, 0.5)}
STZ_L2 = (1e-8, 1e-7, 1e-6, 1e-4, 1e-2)
STZ_TRAIN_FRACTIONS = (1.0, 0.9, 0.8, 0.7)
STZ_DROPOUT = (0.0, 0.05, 0.1, 0.15, 0.2)
#: The cosine schedule's final learning rate (the recipe's ``eta_min``).
STZ_MIN_LR = 1e-5

#: The recipes by name (``TransformerZooSettings.recipe``; the module docstring describes both).
RECIPES = {
    # mixed architectures, continuous hyperparameter ranges (the module docstring's first list)
    "mixed": Recipe(ARCHITECTURE, DEPTHS, HEADS, MLP_DIMS, CHOICES, drop_last=False, schedule=False),
    # the Small Transformer Zoo's MNIST recipe (module docstring's second list)
    "small-transformer-zoo": Recipe({"dim": 32, "patch": 7, "classes": 10, "image_size": 28}, (2,), (2,), (64,),
                                    {"activation": (Activation.RELU.value,), "optimizer": STZ_OPTIMIZERS},
                                    drop_last=True, schedule=True),
}
#: The momentum of the networks trained with SGD.
SGD_MOMENTUM = 0.9
#: The standard deviation of the positional embedding's initialisation (ViT's), before ``init_scale``.
POSITION_STD = 0.02


class ZooBlock(nn.Module):
    """A pre-norm transformer block: self-attention then an MLP, each added to its input.

    Args:
        dim: width of the tokens.
        heads: attention heads.
        mlp_dim: hidden width of the MLP.
        activation: the MLP's activation, a key of :data:`ACTIVATIONS`.
    """

    def __init__(self, dim, heads, mlp_dim, activation):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), ACTIVATIONS[activation](), nn.Linear(mlp_dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ZooViT(nn.Module):
    """A small ViT-style MNIST classifier: patch convolution, learned positional embedding, pre-norm blocks, mean pooling.

    Args:
        dim: width of the tokens.
        depth: transformer blocks.
        heads: attention heads per block.
        mlp_dim: hidden width of each block's MLP.
        patch: side of the square patches.
        activation: the MLPs' activation.
        classes: outputs.
        image_size: side of the square input images.
    """

    def __init__(self, dim: int = 24, depth: int = 1, heads: int = 2, mlp_dim: int = 48, patch: int = 7,
                 activation: str = "gelu", classes: int = 10, image_size: int = 28):
        super().__init__()
        self.patch = nn.Conv2d(1, dim, patch, stride=patch)
        self.position = nn.Parameter(torch.zeros(1, (image_size // patch) ** 2, dim))
        self.blocks = nn.ModuleList(ZooBlock(dim, heads, mlp_dim, activation) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, images):
        x = self.patch(images).flatten(2).transpose(1, 2) + self.position
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(1))


@dataclass(frozen=True)
class TransformerZooSettings:
    """What determines a zoo folder (recorded in, and checked against, its manifest).

    ``networks`` networks in shards of ``shard_size``; each trains for ``max(checkpoint_epochs)``
    epochs over the first ``train_size`` MNIST training images (a per-network fraction of
    them), in mini-batches of ``batch_size``, and is tested on the first ``test_size`` test images.

    Attributes:
        networks: networks in the zoo.
        checkpoint_epochs: the epochs after which a network's weights and metrics are kept.
        train_size: MNIST training images used.
        test_size: MNIST test images used.
        batch_size: mini-batch size.
        shard_size: networks per shard.
        seed: the zoo's seed.
        source: the MNIST images, ``"full"`` or ``"embedded"``.
        recipe: a key of :data:`RECIPES`.
    """

    networks: int = 512
    checkpoint_epochs: tuple[int, ...] = (1, 2, 4)
    train_size: int = 2000
    test_size: int = 1000
    batch_size: int = 64
    shard_size: int = 64
    seed: int = 0
    source: str = "full"
    recipe: str = "mixed"

    def __post_init__(self):
        for name in ("networks", "train_size", "test_size", "batch_size", "shard_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"TransformerZooSettings.{name}={getattr(self, name)}: must be at least 1")
        if self.recipe not in RECIPES:
            raise ValueError(f"TransformerZooSettings.recipe={self.recipe!r}: expected one of {list(RECIPES)}")
        smallest = int(min(STZ_TRAIN_FRACTIONS) * self.train_size)
        if RECIPES[self.recipe].drop_last and self.batch_size > smallest:
            raise ValueError(f"TransformerZooSettings.batch_size={self.batch_size}: larger than the smallest training "
                             f"subset of the {self.recipe} recipe ({smallest} images), which would train no step")
        epochs = self.checkpoint_epochs
        if not epochs or any(e < 1 for e in epochs) or list(epochs) != sorted(set(epochs)):
            raise ValueError(f"TransformerZooSettings.checkpoint_epochs={epochs}: expected increasing positive epochs")

    def to_dict(self) -> dict:
        settings = {**asdict(self), "checkpoint_epochs": list(self.checkpoint_epochs)}
        if self.recipe == "mixed":  # folders written before recipes existed record none
            del settings["recipe"]
        return settings


def sample_hyperparameters(seed: int, recipe: str = "mixed") -> dict:
    """The hyperparameters of the network of ``seed`` (``activation`` and ``optimizer`` as indices
    into the recipe's ``choices``; the distributions are the module docstring's).

    Args:
        seed: the network's seed.
        recipe: a key of :data:`RECIPES`.

    Returns:
        The hyperparameters by name.
    """
    rng = np.random.default_rng(seed)
    if recipe == "small-transformer-zoo":
        optimizer = int(rng.integers(len(STZ_OPTIMIZERS)))
        family = "sgd" if STZ_OPTIMIZERS[optimizer].startswith("sgd") else "adam"
        return {"depth": 2, "heads": 2, "mlp_dim": 64, "activation": 0, "optimizer": optimizer,
                "lr": float(rng.choice(STZ_LR[family])), "weight_decay": float(rng.choice(STZ_L2)),
                "init_std": float(rng.choice(STZ_INIT_STD[family])),
                "train_fraction": float(rng.choice(STZ_TRAIN_FRACTIONS)), "dropout": float(rng.choice(STZ_DROPOUT))}
    optimizer = int(rng.integers(len(OPTIMIZERS)))
    low, high = (1e-3, 1e-1) if OPTIMIZERS[optimizer] == "sgd" else (1e-4, 1e-2)
    return {
        "depth": int(rng.choice(DEPTHS)),
        "heads": int(rng.choice(HEADS)),
        "mlp_dim": int(rng.choice(MLP_DIMS)),
        "activation": int(rng.integers(len(CHOICES["activation"]))),
        "optimizer": optimizer,
        "lr": float(np.exp(rng.uniform(np.log(low), np.log(high)))),
        "weight_decay": float(np.exp(rng.uniform(np.log(1e-6), np.log(1e-1)))),
        "init_scale": float(np.exp(rng.uniform(np.log(0.3), np.log(3.0)))),
        "train_fraction": float(rng.uniform(0.1, 1.0)),
    }


def architecture(hyper: dict, recipe: str = "mixed") -> dict:
    """The :class:`ZooViT` arguments of a network of hyperparameters ``hyper``.

    Args:
        hyper: the network's hyperparameters.
        recipe: a key of :data:`RECIPES`.

    Returns:
        Keyword arguments of :class:`ZooViT`.
    """
    shared = RECIPES[recipe]
    return {**shared.architecture, "depth": hyper["depth"], "heads": hyper["heads"], "mlp_dim": hyper["mlp_dim"],
            "activation": shared.choices["activation"][hyper["activation"]]}


def sinusoidal_positions(tokens: int, dim: int) -> Tensor:
    """The transformer's sinusoidal position table ``[1, tokens, dim]``: ``sin`` in the even
    features, ``cos`` in the odd, at wavelengths ``10000^(2i / dim)``.

    Args:
        tokens: positions.
        dim: features (even).

    Returns:
        The table.
    """
    position = torch.arange(tokens, dtype=torch.float64).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    table = torch.zeros(tokens, dim, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * frequency), torch.cos(position * frequency)
    return table.float().unsqueeze(0)


def initial_parameters(hyper: dict, seed: int, recipe: str = "mixed") -> dict[str, Tensor]:
    """One network's state dict at initialisation, drawn from ``seed``.

    ``mixed``: PyTorch's default initialisation, the positional embedding normal (std
    :data:`POSITION_STD`), every tensor of two or more dimensions (kernels, weight matrices, the
    positional embedding) times ``init_scale``. ``small-transformer-zoo``: the recipe's, every kernel
    and weight matrix truncated normal (``torch.nn.init.trunc_normal_``, std ``init_std``), biases
    zero, LayerNorms at one and zero, the positional embedding the sinusoidal table
    (:func:`sinusoidal_positions`).

    Args:
        hyper: the network's hyperparameters.
        seed: the network's seed.
        recipe: a key of :data:`RECIPES`.

    Returns:
        The state dict.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ZooViT(**architecture(hyper, recipe))
        if recipe == "mixed":
            nn.init.normal_(model.position, std=POSITION_STD)
            return {k: v * hyper["init_scale"] if v.dim() >= 2 else v.clone() for k, v in model.state_dict().items()}
        generator = torch.Generator().manual_seed(seed)
        state = {}
        for key, value in model.state_dict().items():
            if key == "position":
                state[key] = sinusoidal_positions(value.shape[1], value.shape[2])
            elif value.dim() >= 2:
                state[key] = nn.init.trunc_normal_(torch.empty_like(value), std=hyper["init_std"], generator=generator)
            elif ".norm" in f".{key}" and key.endswith("weight"):
                state[key] = torch.ones_like(value)
            else:
                state[key] = torch.zeros_like(value)
        return state


def stored_shapes(recipe: str = "mixed") -> dict[str, torch.Size]:
    """Shape of each state-dict key in a shard (one network): that of the recipe's largest architecture.

    Args:
        recipe: a key of :data:`RECIPES`.

    Returns:
        The shape of each key.
    """
    shared = RECIPES[recipe]
    with torch.device("meta"):
        model = ZooViT(**shared.architecture, depth=max(shared.depths), mlp_dim=max(shared.mlp_dims))
    return {k: v.shape for k, v in model.state_dict().items()}


def warmup_cosine(lr: float, epoch: int, epochs: int) -> float:
    """The Small Transformer Zoo's schedule at ``epoch`` (1, 2, ...) of ``epochs``, scaled to the run:
    a linear warmup over the first ``W = max(1, round(epochs / 10))`` epochs from ``lr / W`` to
    ``lr``, then a cosine from ``lr`` down to :data:`STZ_MIN_LR` (the recipe: 10 of 100 epochs).

    Args:
        lr: the network's learning rate.
        epoch: the epoch.
        epochs: the run's epochs.

    Returns:
        The learning rate of that epoch.
    """
    warmup, e = max(1, round(epochs / 10)), epoch - 1
    if e < warmup:
        return lr * (1 / warmup + (1 - 1 / warmup) * e / max(1, warmup - 1))
    return STZ_MIN_LR + (lr - STZ_MIN_LR) * (1 + math.cos(math.pi * (e - warmup) / max(1, epochs - warmup))) / 2


def _leading(shape: Sequence[int]) -> tuple[slice, ...]:
    """The index of a tensor of ``shape`` in the leading corner of a larger stored one."""
    return tuple(slice(0, s) for s in shape)


def optimizer_rule(hyper: dict, recipe: str = "mixed") -> Rule:
    """The optimizer of a network of hyperparameters ``hyper``.

    Args:
        hyper: the network's hyperparameters (:func:`sample_hyperparameters`).
        recipe: a key of :data:`RECIPES`.

    Returns:
        The rule (:mod:`~neuralgraph.data.zoo_trainer`), with ``torch.optim``'s defaults. In the
        ``mixed`` recipe Adam, AdamW (``Adam(decoupled=True)``) or SGD with momentum
        :data:`SGD_MOMENTUM`; in ``small-transformer-zoo`` SGD, SGD with momentum 0.9, Adam or RMSprop.
    """
    rules = {"adam": Adam(), "adamw": Adam(decoupled=True), "sgd": SGD(momentum=SGD_MOMENTUM)}
    if recipe == "small-transformer-zoo":
        rules = {"sgd": SGD(), "sgd_momentum": SGD(momentum=SGD_MOMENTUM), "adam": Adam(), "rmsprop": RMSprop()}
    return rules[RECIPES[recipe].choices["optimizer"][hyper["optimizer"]]]


def stack_networks(networks: Sequence[int], settings: TransformerZooSettings, images: int,
                   device: Optional[torch.device | str] = None,
                   dtype: torch.dtype = torch.float32) -> tuple[VitStack, MiniBatches, list[int]]:
    """The networks of ids ``networks`` ready to train: their stack (those of one architecture as one
    batched product per layer), with its optimizers, and their mini-batches
    (:mod:`~neuralgraph.data.zoo_trainer`).

    Each network trains on its own subset of the training images
    (:func:`~neuralgraph.data.cnn_zoo.training_subset`), in mini-batches of ``settings.batch_size``
    in an order from its stream 1 (the last batch of an epoch may be smaller, or is left out where
    the recipe drops it), with dropout masks from its stream 3 (recipes with dropout), under its own
    optimizer (:func:`optimizer_rule`, its weight decay on every parameter). Every random draw but
    the dropout masks' (counter-based, on the device) is made on the CPU whatever the device.

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
    recipe = settings.recipe
    plan = plan_networks(networks, settings.seed, lambda seed: sample_hyperparameters(seed, recipe),
                         lambda i, h: training_subset(settings, i, h["train_fraction"], images),
                         lambda h: optimizer_rule(h, recipe), lambda h: VitArchitecture(**architecture(h, recipe)),
                         settings.batch_size, RECIPES[recipe].drop_last)
    ordered = plan.ordered(plan.hypers)
    stack = VitStack([initial_parameters(h, s, recipe) for h, s in zip(ordered, plan.ordered(plan.seeds))],
                     plan.ordered(plan.groups), device, dtype, dropout=[h.get("dropout", 0.0) for h in ordered],
                     bit_seeds=plan.streams(3))
    stack.optimizer(plan.ordered(plan.rules), [h["lr"] for h in ordered], [h["weight_decay"] for h in ordered])
    return stack, plan.mini_batches(), plan.order


def train_networks(networks: Sequence[int], settings: TransformerZooSettings, train, test,
                   bar: Optional[tqdm] = None, device: Optional[torch.device | str] = None,
                   dtype: torch.dtype = torch.float32) -> dict[str, Tensor]:
    """Train the networks of ids ``networks`` together (:func:`stack_networks`), each as it would
    train alone; the tensors of their checkpoints, on the CPU.

    Args:
        networks: the networks' ids.
        settings: the zoo's settings.
        train: MNIST training ``(images, labels)``.
        test: MNIST test ``(images, labels)``.
        bar: a progress bar advanced per network and epoch, or ``None``.
        device: where the networks train (default: the CPU).
        dtype: their parameters' dtype (float32 in a zoo; float64 to measure rounding).

    Returns:
        The tensors by name, every key of :func:`stored_shapes` (each network's tensors in the
        leading corner), the metrics, ``epoch`` and ``network`` of every checkpoint (checkpoint by
        checkpoint, networks in the order given), and the hyperparameters.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    ids = list(networks)
    hypers = [sample_hyperparameters(network_seed(settings.seed, i), settings.recipe) for i in ids]
    stack, batches, order = stack_networks(ids, settings, len(train[0]), device, dtype)
    row = torch.tensor(order).argsort()  # each network's row in the stack
    shapes = stored_shapes(settings.recipe)
    records = []

    def record(checkpoint: Checkpoint) -> None:
        states = stack.state()
        stored = {key: torch.zeros(len(ids), *shape, dtype=dtype) for key, shape in shapes.items()}
        for k, r in enumerate(row.tolist()):
            for key, value in states[r].items():
                stored[key][k][_leading(value.shape)] = value.cpu()
        metrics = {name: getattr(checkpoint, name)[row].float().cpu()
                   for name in ("train_accuracy", "test_accuracy", "train_loss", "test_loss")}
        records.append({**stored, **metrics, "epoch": torch.full((len(ids),), checkpoint.epoch),
                        "network": torch.tensor(ids)})

    epochs = max(settings.checkpoint_epochs)
    rates = [hypers[k]["lr"] for k in order]
    schedule = ((lambda epoch: [warmup_cosine(lr, epoch, epochs) for lr in rates])
                if RECIPES[settings.recipe].schedule else None)
    fit(stack, batches, (stack.prepare(train[0]), train[1].to(device)), (stack.prepare(test[0]), test[1].to(device)),
        settings.checkpoint_epochs, record, progress=bar and (lambda epoch: bar.update(len(ids) / epochs)),
        lr_schedule=schedule)
    tensors = {k: torch.cat([r[k] for r in records]).contiguous() for k in records[0]}
    for key in hypers[0]:
        dtype_ = torch.float32 if isinstance(hypers[0][key], float) else torch.long
        tensors[key] = torch.tensor([h[key] for h in hypers], dtype=dtype_).repeat(len(records))
    for key in ("train_loss", "test_loss"):  # a diverged network has no finite loss: record it as such
        tensors[key] = torch.nan_to_num(tensors[key], nan=math.inf)
    return tensors


def train_shard(first: int, count: int, settings: TransformerZooSettings, train, test,
                bar: Optional[tqdm] = None) -> dict[str, Tensor]:
    """Train networks ``first .. first + count - 1`` (:func:`train_networks`); the tensors of their shard.

    Args:
        first: the first network's id.
        count: networks in the shard.
        settings: the zoo's settings.
        train: MNIST training ``(images, labels)``.
        test: MNIST test ``(images, labels)``.
        bar: a progress bar, or ``None``.

    Returns:
        The shard's tensors by name.
    """
    return train_networks(range(first, first + count), settings, train, test, bar)


def make_transformer_zoo(out: PathLike, settings: TransformerZooSettings = TransformerZooSettings(),
                         root: Optional[PathLike] = None, progress: bool = True, distributed: Optional[Worker] = None,
                         merge: bool = False) -> dict:
    """Train and write (or finish writing) the zoo of ``settings`` into ``out``; return the manifest.

    As :func:`~neuralgraph.data.cnn_zoo.make_cnn_zoo`: other settings in an existing folder are an
    error naming the field, a recorded shard whose sha256 changed is refused, a file the manifest
    does not list is never overwritten; ``distributed`` and ``merge`` are those of
    :class:`~neuralgraph.data.shards.FolderWriter`.

    Args:
        out: the zoo folder.
        settings: what the zoo is.
        root: the MNIST folder, or ``None``.
        progress: show a progress bar.
        distributed: this process's worker, or ``None``.
        merge: merge the workers' manifests.

    Returns:
        The manifest, as written.
    """
    shared = RECIPES[settings.recipe]
    return write_zoo(out, ZOO_FOLDER, settings, train_shard, "ViT", root, progress, distributed, merge,
                     architecture=shared.architecture, choices={k: list(v) for k, v in shared.choices.items()})


class TransformerZooDataset(Dataset):
    """The entries (network x checkpoint) of one split of a transformer zoo folder, held in memory.

    Split by network with the CNN zoo's recipe (:class:`~neuralgraph.data.cnn_zoo.CnnZooDataset`):
    a network is in ``val`` or ``test`` by its position in
    ``numpy.random.default_rng(split_seed).permutation`` of the network ids (first 15% val, next
    15% test). Every shard's sha256 is checked; an unfinished zoo is refused.

    Each entry's parameter graph is that of :class:`ZooViT` (:meth:`module`);
    the split's graphs are converted together on the first read of :attr:`graphs` (a batch, a
    spec) and kept: converting per item would repeat the tracing every epoch.

    Args:
        root: the zoo folder.
        split: ``"train"``, ``"val"`` or ``"test"``.
        split_seed: the seed of the split by network.
    """

    def __init__(self, root: PathLike, split: str = "train", split_seed: int = 0):
        self.root = Path(root)
        if split not in SPLITS:
            raise ValueError(f"split {split!r}: expected one of {SPLITS}")
        self.manifest = read_manifest(self.root, ZOO_FOLDER)
        manifest_path = self.root / MANIFEST
        found = sum(s["networks"] for s in self.manifest["shards"])
        if found != self.manifest["networks"]:
            raise DatasetError(f"{manifest_path}: {found} of {self.manifest['networks']} networks trained "
                               "(an unfinished run? rerun the same make-transformer-zoo command)")
        shards = [self._load_shard(record) for record in self.manifest["shards"]]
        tensors = network_split({key: torch.cat([s[key] for s in shards]) for key in shards[0]},
                                self.manifest["networks"], split, split_seed)
        self.split = split
        self.tensors = tensors
        self.accuracy = self.tensors["test_accuracy"]

    def _load_shard(self, record: dict) -> dict[str, Tensor]:
        path = self.root / record["file"]
        tensors = read_shard(path, record, ZOO_FOLDER.command)
        parameters = list(stored_shapes(self.manifest.get("recipe", "mixed")))
        for key in [*parameters, "depth", "heads", "mlp_dim", "activation", "network", "epoch", "test_accuracy"]:
            if key not in tensors:
                raise DatasetError(f"{path}: tensor {key!r} is missing")
        for key in parameters:
            bad = (~torch.isfinite(tensors[key])).flatten(1).any(1).nonzero().flatten()
            if len(bad):
                raise DatasetError(f"{path}: network {int(tensors['network'][bad[0]])} (epoch "
                                   f"{int(tensors['epoch'][bad[0]])}) has non-finite values in {key}")
        return tensors

    def __len__(self) -> int:
        return len(self.accuracy)

    def settings(self, i: int) -> dict:
        """The :class:`ZooViT` arguments of entry ``i``: the manifest's ``architecture`` and its own."""
        t, activations = self.tensors, self.manifest["choices"]["activation"]
        return {**self.manifest["architecture"], "depth": int(t["depth"][i]), "heads": int(t["heads"][i]),
                "mlp_dim": int(t["mlp_dim"][i]), "activation": activations[int(t["activation"][i])]}

    def module(self, i: int) -> ZooViT:
        """Entry ``i`` as a :class:`ZooViT` holding its stored parameters (in training mode, as built)."""
        with torch.device("meta"):
            model = ZooViT(**self.settings(i))
        state = {k: self.tensors[k][i][_leading(v.shape)].clone() for k, v in model.state_dict().items()}
        model.load_state_dict(state, assign=True)
        return model

    @cached_property
    def graphs(self) -> list[ParameterGraph]:
        """Every entry's parameter graph, in entry order, read with one :class:`~neuralgraph.graph.ModuleConverter`
        per architecture of the split (traced and checked once), each entry's parameters read along it."""
        size = self.manifest["architecture"]["image_size"]
        probe = torch.randn(2, 1, size, size, generator=torch.Generator().manual_seed(0))
        converters: dict[tuple, ModuleConverter] = {}
        graphs = []
        for i in range(len(self)):
            module = self.module(i).eval()
            key = tuple(sorted(self.settings(i).items()))
            if key not in converters:
                converters[key] = ModuleConverter(module, example_input=probe)
            graphs.append(converters[key](module))
        return graphs

    def batch(self, indices: Sequence[int] | Tensor) -> ZooBatch:
        """Entries ``indices`` as one :class:`~neuralgraph.data.cnn_zoo.ZooBatch` (a ``DataLoader``'s
        ``collate_fn``): their graphs of mixed layouts, without ``blocks``."""
        index = torch.as_tensor(indices, dtype=torch.long)
        graph = batch_graphs([self.graphs[int(k)] for k in index])
        return ZooBatch(graph, self.accuracy[index], index, facts=graph_facts(graph))
