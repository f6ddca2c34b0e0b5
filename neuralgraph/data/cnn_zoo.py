"""A zoo of small CNNs trained on MNIST, for predicting a classifier's test accuracy from its weights.

The recipe follows the Small CNN Zoo (Unterthiner et al., 2020, https://arxiv.org/abs/2002.11448):
three 3x3 convolutions of ``channels`` channels with stride 2, global average pooling and a
linear classifier, layout ``(1, C, C, C, 10)``. Each network draws its hyperparameters from its
own seed (:func:`sample_hyperparameters`): activation, initialisation and its scale, optimizer,
learning rate, L2 (weight decay), dropout before the classifier and the fraction of the training
images it sees. Weights and train/test accuracy and loss are recorded at every epoch of
``checkpoint_epochs``; each (network, epoch) is one entry of the zoo.

Networks train together, a shard of ``shard_size`` at a time, through the trainer every zoo
shares (:mod:`~neuralgraph.data.zoo_trainer`, :func:`train_networks`): each network on its own
subset of the training images (its ``train_fraction`` of them), in its own mini-batch order, with
its own dropout masks and optimizer state, so that it trains as it would alone.

Storage is the sharded folder of :mod:`neuralgraph.data.shards`: shards
``zoo-00000.safetensors`` with ``conv{1,2,3}.weight [n, C, C_in, 3, 3]``, ``conv*.bias``,
``linear.weight [n, 10, C]``, ``linear.bias`` (``n`` = networks x checkpoints), ``network``,
``epoch``, ``train_accuracy``, ``test_accuracy``, ``train_loss``, ``test_loss`` and one tensor per
hyperparameter (categorical ones as indices into the manifest's ``choices``). A killed run
started again skips the recorded shards (sha256-checked) and retrains the others.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np
import torch
from safetensors.torch import save as safetensors_bytes
from torch import Tensor, nn
from torch.utils.data import Dataset
from torch_geometric.data import Batch
from tqdm import tqdm

from neuralgraph.data.shards import (
    MANIFEST,
    SPLITS,
    DatasetError,
    FolderFormat,
    FolderWriter,
    Worker,
    read_manifest,
    read_shard,
    shard_name,
    write_manifest,
)
from neuralgraph.data.zoo_report import accuracy_summary, read_shard_metrics
from neuralgraph.data.formats import imported_format
from neuralgraph.data.mnist import PathLike, load_digits
from neuralgraph.data.zoo_trainer import Adam, Checkpoint, ConvStack, MiniBatches, Rule, SGD, fit, network_seed, plan_networks
from neuralgraph.graph import Activation, activation_codes, batch_graphs, blocks_to_graph
from neuralgraph.graph.blocks import GraphFacts, WeightBlocks, graph_facts
from neuralgraph.progress import unit_progress

ZOO_FOLDER = FolderFormat("neuralgraph-cnn-zoo/1", "make-cnn-zoo")
#: The zoo networks' activations, indexed by their ``activation`` hyperparameter.
ACTIVATIONS = (Activation.RELU.value, Activation.TANH.value, Activation.GELU.value)
#: The initialisations (``torch.nn.init`` names), indexed by ``init``.
INITS = ("kaiming_normal", "xavier_normal", "orthogonal")
#: The optimizers, indexed by ``optimizer``.
OPTIMIZERS = ("adam", "sgd")
#: The categorical hyperparameters and their values, as the manifest records them.
CHOICES = {"activation": ACTIVATIONS, "init": INITS, "optimizer": OPTIMIZERS}
NUM_CLASSES = 10
SGD_MOMENTUM = 0.9
KERNEL, STRIDE = 3, 2
#: The layers, in order; a shard stores each as ``<layer>.weight`` and ``<layer>.bias``.
LAYERS = ("conv1", "conv2", "conv3", "linear")


@dataclass(frozen=True)
class ZooSettings:
    """What determines a zoo folder (recorded in, and checked against, its manifest).

    ``networks`` networks in shards of ``shard_size``; each trains for ``max(checkpoint_epochs)``
    epochs over the first ``train_size`` MNIST training images (a per-network fraction of
    them), in mini-batches of ``batch_size``, and is tested on the first ``test_size`` test images.

    Attributes:
        networks: networks in the zoo.
        channels: channels of each convolution.
        checkpoint_epochs: the epochs after which a network's weights and metrics are kept.
        train_size: MNIST training images used.
        test_size: MNIST test images used.
        batch_size: mini-batch size.
        shard_size: networks per shard.
        seed: the zoo's seed (every network's is derived from it).
        source: the MNIST images, ``"full"`` or ``"embedded"`` (:func:`~neuralgraph.data.mnist.load_digits`).
    """

    networks: int = 256
    channels: int = 16
    checkpoint_epochs: tuple[int, ...] = (1, 3)
    train_size: int = 2000
    test_size: int = 1000
    batch_size: int = 128
    shard_size: int = 64
    seed: int = 0
    source: str = "full"

    def __post_init__(self):
        for name in ("networks", "channels", "train_size", "test_size", "batch_size", "shard_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"ZooSettings.{name}={getattr(self, name)}: must be at least 1")
        epochs = self.checkpoint_epochs
        if not epochs or any(e < 1 for e in epochs) or list(epochs) != sorted(set(epochs)):
            raise ValueError(f"ZooSettings.checkpoint_epochs={epochs}: expected increasing positive epochs")

    def to_dict(self) -> dict:
        return {**asdict(self), "checkpoint_epochs": list(self.checkpoint_epochs)}

    @property
    def layout(self) -> tuple[int, ...]:
        return (1, self.channels, self.channels, self.channels, NUM_CLASSES)


def sample_hyperparameters(seed: int) -> dict:
    """The hyperparameters of the network of ``seed`` (categorical ones as indices into :data:`CHOICES`).

    Args:
        seed: the network's seed (:func:`network_seed`).

    Returns:
        ``activation``, ``init``, ``init_scale``, ``optimizer``, ``lr``, ``l2``, ``dropout`` and
        ``train_fraction``, by name.
    """
    rng = np.random.default_rng(seed)
    optimizer = int(rng.integers(len(OPTIMIZERS)))
    low, high = (1e-4, 1e-2) if OPTIMIZERS[optimizer] == "adam" else (1e-3, 1e-1)
    return {
        "activation": int(rng.integers(len(ACTIVATIONS))),
        "init": int(rng.integers(len(INITS))),
        "init_scale": float(np.exp(rng.uniform(np.log(0.3), np.log(3.0)))),
        "optimizer": optimizer,
        "lr": float(np.exp(rng.uniform(np.log(low), np.log(high)))),
        "l2": float(np.exp(rng.uniform(np.log(1e-8), np.log(1e-2)))),
        "dropout": float(rng.uniform(0.0, 0.5)),
        "train_fraction": float(rng.uniform(0.1, 1.0)),
    }


def initial_parameters(channels: int, hyper: dict, seed: int) -> dict[str, Tensor]:
    """One network's parameters, initialised by its ``init`` times ``init_scale``; biases zero.

    Args:
        channels: channels of each convolution.
        hyper: the network's hyperparameters (:func:`sample_hyperparameters`).
        seed: the network's seed.

    Returns:
        ``state_dict``-style tensors of a :class:`ZooNetwork`.
    """
    generator = torch.Generator().manual_seed(seed)
    init = getattr(nn.init, INITS[hyper["init"]] + "_")
    shapes = {"conv1": (channels, 1, KERNEL, KERNEL), "conv2": (channels, channels, KERNEL, KERNEL),
              "conv3": (channels, channels, KERNEL, KERNEL), "linear": (NUM_CLASSES, channels)}
    params = {}
    for name, shape in shapes.items():
        weight = torch.empty(shape)
        init(weight, generator=generator)
        params[f"{name}.weight"] = weight * hyper["init_scale"]
        params[f"{name}.bias"] = torch.zeros(shape[0])
    return params


class ZooNetwork(nn.Module):
    """One network of the zoo as a plain module (what ``module_to_graph`` reads).

    Args:
        channels: channels of each convolution.
        activation: ``"relu"``, ``"tanh"`` or ``"gelu"``.
    """

    def __init__(self, channels: int = 16, activation: str = "relu"):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, KERNEL, STRIDE)
        self.conv2 = nn.Conv2d(channels, channels, KERNEL, STRIDE)
        self.conv3 = nn.Conv2d(channels, channels, KERNEL, STRIDE)
        self.act = {"relu": nn.ReLU(), "tanh": nn.Tanh(), "gelu": nn.GELU()}[activation]
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.linear = nn.Linear(channels, NUM_CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        x = self.act(self.conv1(x))
        x = self.act(self.conv2(x))
        x = self.act(self.conv3(x))
        return self.linear(self.flatten(self.pool(x)))


def optimizer_rule(hyper: dict) -> Rule:
    """The optimizer of a network of hyperparameters ``hyper``.

    Args:
        hyper: the network's hyperparameters (:func:`sample_hyperparameters`).

    Returns:
        Adam (``torch.optim.Adam``'s defaults) or SGD with momentum 0.9, as a
        :mod:`~neuralgraph.data.zoo_trainer` rule.
    """
    return Adam() if OPTIMIZERS[hyper["optimizer"]] == "adam" else SGD(momentum=SGD_MOMENTUM)


def training_subset(settings: ZooSettings, network: int, fraction: float, images: int) -> Tensor:
    """The training images a network trains on: the first ``round(fraction * images)`` (at least one)
    of a permutation from its stream 2.

    Args:
        settings: the zoo's settings (its seed).
        network: the network's id.
        fraction: its ``train_fraction``.
        images: training images available.

    Returns:
        ``[m]`` image indices.
    """
    generator = torch.Generator().manual_seed(network_seed(settings.seed, network, 2))
    return torch.randperm(images, generator=generator)[:max(1, round(fraction * images))]


def stack_networks(networks: Sequence[int], settings: ZooSettings, images: int,
                   device: Optional[torch.device | str] = None,
                   dtype: torch.dtype = torch.float32) -> tuple[ConvStack, MiniBatches, list[int]]:
    """The networks of ids ``networks`` ready to train: their stack, with its optimizer, and their
    mini-batches (:mod:`~neuralgraph.data.zoo_trainer`).

    Each network trains on its own subset of the training images (:func:`training_subset`), in
    mini-batches of ``settings.batch_size`` in an order from its stream 1 (the last batch of an
    epoch may be smaller), with dropout masks on its pooled features from its stream 3, under its
    own optimizer (:func:`optimizer_rule`, its ``l2`` as weight decay on every parameter). Every
    random draw is made on the CPU whatever the device.

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
                         lambda i, h: training_subset(settings, i, h["train_fraction"], images), optimizer_rule,
                         lambda h: ACTIVATIONS[h["activation"]], settings.batch_size, drop_last=False)
    ordered, activations = plan.ordered(plan.hypers), plan.ordered(plan.groups)
    initial = [initial_parameters(settings.channels, h, s) for h, s in zip(ordered, plan.ordered(plan.seeds))]
    stack = ConvStack({key: torch.stack([p[key] for p in initial]).to(device, dtype) for key in initial[0]},
                      activations, [h["dropout"] for h in ordered], dropout_at="features", bit_seeds=plan.streams(3))
    stack.optimizer(plan.ordered(plan.rules), [h["lr"] for h in ordered], [h["l2"] for h in ordered],
                    decay="all", groups=activations)
    return stack, plan.mini_batches(), plan.order


def train_networks(networks: Sequence[int], settings: ZooSettings, train, test, bar: Optional[tqdm] = None,
                   device: Optional[torch.device | str] = None, dtype: torch.dtype = torch.float32) -> dict:
    """Train the networks of ids ``networks`` together (:func:`stack_networks`), each as it would
    train alone; the tensors of their checkpoints, on the CPU.

    Every random draw is made on the CPU whatever the device, so another device changes the
    networks by float rounding only (bitwise reproducibility is the CPU's); it is no setting of
    the zoo.

    Args:
        networks: the networks' ids.
        settings: the zoo's settings.
        train: MNIST training ``(images, labels)``.
        test: MNIST test ``(images, labels)``.
        bar: a progress bar advanced per network and epoch, or ``None``.
        device: where the networks train (default: the CPU).
        dtype: their parameters' dtype (float32 in a zoo; float64 to measure rounding).

    Returns:
        The tensors by name, parameters, metrics, ``epoch`` and ``network`` of every checkpoint
        (checkpoint by checkpoint, networks in the order given), and the hyperparameters.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    ids = list(networks)
    hypers = [sample_hyperparameters(network_seed(settings.seed, i)) for i in ids]
    stack, batches, order = stack_networks(ids, settings, len(train[0]), device, dtype)
    row = torch.tensor(order).argsort()  # each network's row in the stack
    records = []

    def record(checkpoint: Checkpoint) -> None:
        state = {key: value[row].cpu() for key, value in stack.state().items()}
        metrics = {name: getattr(checkpoint, name)[row].float().cpu()
                   for name in ("train_accuracy", "test_accuracy", "train_loss", "test_loss")}
        records.append({**state, **metrics, "epoch": torch.full((len(ids),), checkpoint.epoch),
                        "network": torch.tensor(ids)})

    epochs = max(settings.checkpoint_epochs)
    fit(stack, batches, (stack.prepare(train[0]), train[1].to(device)), (stack.prepare(test[0]), test[1].to(device)),
        settings.checkpoint_epochs, record, progress=bar and (lambda epoch: bar.update(len(ids) / epochs)))
    tensors = {k: torch.cat([r[k] for r in records]).contiguous() for k in records[0]}
    for key in hypers[0]:
        dtype_ = torch.long if key in CHOICES else torch.float32
        tensors[key] = torch.tensor([h[key] for h in hypers], dtype=dtype_).repeat(len(records))
    for key in ("train_loss", "test_loss"):  # a diverged network has no finite loss: record it as such
        tensors[key] = torch.nan_to_num(tensors[key], nan=math.inf)
    return tensors


def train_shard(first: int, count: int, settings: ZooSettings, train, test, bar: Optional[tqdm] = None,
                device: Optional[torch.device | str] = None) -> dict:
    """Train networks ``first .. first + count - 1``; the tensors of their shard, on the CPU.

    ``device`` (default: the CPU) is where they train (:func:`train_networks`).

    Args:
        first: the first network's id.
        count: networks in the shard.
        settings: the zoo's settings.
        train: MNIST training ``(images, labels)``.
        test: MNIST test ``(images, labels)``.
        bar: a progress bar advanced per network and epoch, or ``None``.
        device: where the networks train (default: the CPU).

    Returns:
        The shard's tensors by name (parameters, metrics and ids of every kept checkpoint).
    """
    return train_networks(range(first, first + count), settings, train, test, bar, device)


def _mnist(split: str, size: int, source: str, root: Optional[PathLike]) -> tuple[Tensor, Tensor]:
    digits = load_digits(split, source, root)
    if size > len(digits.labels):
        raise ValueError(f"ZooSettings.{split}_size={size} but {source} MNIST {split} has {len(digits.labels)} images")
    images = torch.from_numpy(digits.images[:size]).float().div(255).sub(0.1307).div(0.3081).unsqueeze(1)
    return images, torch.from_numpy(digits.labels[:size].astype(np.int64))


def make_cnn_zoo(out: PathLike, settings: ZooSettings = ZooSettings(), root: Optional[PathLike] = None,
                 progress: bool = True, distributed: Optional[Worker] = None, merge: bool = False,
                 device: Optional[torch.device | str] = None) -> dict:
    """Train and write (or finish writing) the zoo of ``settings`` into ``out``; return the manifest.

    Resuming into a folder made with other settings is an error naming the field; a recorded
    shard whose sha256 changed is refused; a file the manifest does not list is never overwritten.
    ``distributed`` (this process is one :class:`~neuralgraph.data.shards.Worker` of many) and
    ``merge`` (the step after the workers) are those of :class:`~neuralgraph.data.shards.FolderWriter`.
    ``device``: where the networks train (:func:`train_shard`; default the CPU).

    Args:
        out: the zoo folder.
        settings: what the zoo is.
        root: the MNIST folder (default: found as :func:`~neuralgraph.data.mnist.load_mnist` finds it).
        progress: show a progress bar.
        distributed: this process's worker, or ``None``.
        merge: merge the workers' manifests.
        device: where the networks train (default: the CPU).

    Returns:
        The manifest, as written.
    """
    trainer = train_shard if device is None else functools.partial(train_shard, device=device)
    return write_zoo(out, ZOO_FOLDER, settings, trainer, "CNN", root, progress, distributed, merge,
                     choices={k: list(v) for k, v in CHOICES.items()})


def write_zoo(out: PathLike, folder: FolderFormat, settings, train_shard: Callable, unit: str,
              root: Optional[PathLike], progress: bool, distributed: Optional[Worker], merge: bool,
              **manifest) -> dict:
    """The loop every zoo generator shares: plan the shards of ``settings.shard_size`` networks that
    are missing, train each with ``train_shard(first, count, settings, train, test, bar)`` on the
    settings' MNIST images, and commit it (``manifest``: the generator's own manifest fields).

    Args:
        out: the zoo folder.
        folder: its format (name and command).
        settings: the zoo's settings (with ``networks``, ``shard_size``, ``to_dict()`` and the MNIST sizes).
        train_shard: the shard trainer.
        unit: the progress bar's unit.
        root: the MNIST folder, or ``None``.
        progress: show a progress bar.
        distributed: this process's worker, or ``None``.
        merge: merge the workers' manifests.
        **manifest: the generator's own manifest fields.

    Returns:
        The manifest, as written.
    """
    out = Path(out)
    writer = FolderWriter(out, folder, settings.to_dict(), distributed, merge, **manifest, shards=[])
    manifest = writer.manifest
    todo = []
    for k, first in enumerate(range(0, settings.networks, settings.shard_size)):
        path, count = out / shard_name("zoo", k), min(settings.shard_size, settings.networks - first)
        if writer.plan(manifest["shards"], path, networks=count, first=first):
            todo.append((path, first, count))
    writer.start()
    if not todo:
        return record_accuracy(out, manifest, distributed)
    train = _mnist("train", settings.train_size, settings.source, root)
    test = _mnist("test", settings.test_size, settings.source, root)
    done = settings.networks - sum(count for _, _, count in todo)
    with unit_progress(total=settings.networks, initial=done, unit=unit, desc=f"{folder.command} {out}",
                       disable=not progress) as bar:  # a log gets one line per shard
        for path, first, count in todo:
            writer.commit(path, safetensors_bytes(train_shard(first, count, settings, train, test, bar)))
            bar.checkpoint()
    return record_accuracy(out, manifest, distributed)


def record_accuracy(out: Path, manifest: dict, distributed: Optional[Worker]) -> dict:
    """The finished zoo's manifest with its test accuracy per checkpoint epoch
    (:func:`~neuralgraph.data.zoo_report.accuracy_summary`, what ``neuralgraph zoo-report`` prints),
    written once; a worker's or an unfinished zoo's manifest is left as it is.

    Args:
        out: the zoo folder.
        manifest: its manifest.
        distributed: this process's worker, or ``None``.

    Returns:
        The manifest.
    """
    finished = sum(s["networks"] for s in manifest["shards"]) == manifest["networks"]
    if distributed is None and finished and "accuracy" not in manifest:
        manifest["accuracy"] = accuracy_summary(*read_shard_metrics(out))
        write_manifest(out, manifest)
    return manifest


SPLIT_FRACTIONS = {"val": 0.15, "test": 0.15}


def network_split(tensors: dict[str, Tensor], networks: int, split: str, split_seed: int) -> dict[str, Tensor]:
    """The entries of ``split``, split by network: position in ``numpy.random.default_rng(split_seed)``'s
    permutation of the ``networks`` ids, first 15% val, next 15% test, the rest train.

    Args:
        tensors: a zoo's tensors by name, with ``network`` ids.
        networks: networks in the zoo.
        split: ``"train"``, ``"val"`` or ``"test"``.
        split_seed: the seed of the permutation.

    Returns:
        The split's rows of every tensor.
    """
    permutation = np.random.default_rng(split_seed).permutation(networks)
    n_val, n_test = (round(SPLIT_FRACTIONS[s] * networks) for s in ("val", "test"))
    members = {"val": permutation[:n_val], "test": permutation[n_val:n_val + n_test],
               "train": permutation[n_val + n_test:]}[split]
    keep = torch.from_numpy(np.isin(tensors["network"].numpy(), members)).nonzero().flatten()
    return {key: value[keep] for key, value in tensors.items()}


class ZooBatch(NamedTuple):
    """A mini-batch of zoo entries: their parameter graphs, their weights and what the task predicts.

    ``blocks`` holds the weights the graph was built from (:meth:`CnnZooDataset.batch`), as
    ``InrBatch.blocks`` does; ``None`` in a batch built by hand. ``facts``: as ``InrBatch.facts``. A
    :class:`~neuralgraph.graph.blocks.MetanetBatch`, as ``InrBatch`` is.

    Attributes:
        graph: parameter graphs, of one layout (or one per network, in a folder of mixed layouts).
        accuracy: ``[B]`` test accuracy of each network at its checkpoint.
        index: ``[B]`` position of each entry in its split.
        blocks: the networks' edge-feature blocks and biases, layer by layer.
        facts: sizes and index ranges of the graph, read on the CPU.
    """

    graph: Batch  # parameter graphs, one layout (or one per network, in a folder of mixed layouts)
    accuracy: Tensor  # [B] test accuracy of each network at its checkpoint
    index: Tensor  # [B] position of each entry in its split
    blocks: Optional[WeightBlocks] = None  # the networks' edge-feature blocks and biases, layer by layer
    facts: Optional[GraphFacts] = None  # sizes and index ranges of the graph, read on the CPU

    @property
    def size(self) -> int:
        return int(self.accuracy.shape[0])


def zoo_graph(weights: list[Tensor], biases: list[Tensor], activation: Tensor) -> Batch:
    """Parameter graphs of a batch of zoo CNNs: each 3x3 kernel is the 9 features of its
    channel->channel edge, the classifier's weights one feature per edge (zero-padded to 9).

    ``activation`` ``[B]``: each network's activation as an index into :data:`ACTIVATIONS`; the
    graphs' ``activation`` node field holds it on the three convolutions' neurons (``identity``
    on the input and the logits), as ``module_to_graph`` of the :class:`ZooNetwork` records it.

    Args:
        weights: per layer, ``[B, C_out, C_in, 3, 3]`` kernels, then ``[B, 10, C]``.
        biases: per layer ``[B, d_out]``.
        activation: ``[B]`` activation indices.

    Returns:
        A ``Batch`` of ``B`` graphs.
    """
    codes = activation_codes(ACTIVATIONS).to(activation.device)[activation]  # zoo index -> graph code
    identity = torch.zeros_like(codes)
    per_layer = torch.stack([identity, codes, codes, codes, identity], dim=1)
    return blocks_to_graph(zoo_blocks(weights), biases, activations=per_layer)


def zoo_blocks(weights: list[Tensor]) -> list[Tensor]:
    """Per layer the edge features ``[B, d_out, d_in, f]`` of a batch of zoo CNNs: 9 per 3x3 kernel, 1 per
    classifier weight (views).

    Args:
        weights: per layer, kernels ``[B, C_out, C_in, kh, kw]`` or matrices ``[B, d_out, d_in]``.

    Returns:
        Per layer ``[B, d_out, d_in, f]``.
    """
    return [w.flatten(3) if w.dim() == 5 else w.unsqueeze(-1) for w in weights]


class CnnZooDataset(Dataset):
    """The entries (network x checkpoint) of one split of a zoo folder, held in memory.

    A ``make-cnn-zoo`` folder is split by network, so no network has checkpoints on both sides:
    a network is in ``val`` or ``test`` by its position in
    ``numpy.random.default_rng(split_seed).permutation`` of the network ids (first 15% val, next
    15% test). A folder written by ``import-dataset`` holds its source's splits, one shard list
    each (``split_seed`` does not apply). Every shard's sha256 is checked against the manifest;
    an unfinished zoo is refused (rerun the command that wrote it to finish it).

    A folder of mixed layouts (``mixed_layouts`` in its manifest: the CNN Wild Park) holds each
    network's architecture next to its parameters; ``networks`` gives each one's architecture,
    parameters and graph (:class:`~neuralgraph.data.formats.cnn_wild_park.WildParkNetworks`), and a
    batch is its networks' graphs through :func:`~neuralgraph.graph.batch_graphs`, without ``blocks``.

    Args:
        root: the zoo folder.
        split: ``"train"``, ``"val"`` or ``"test"``.
        split_seed: the seed of the split by network (generated zoos).
    """

    def __init__(self, root: PathLike, split: str = "train", split_seed: int = 0):
        self.root = Path(root)
        manifest = read_manifest(self.root, ZOO_FOLDER)
        manifest_path = self.root / MANIFEST
        self.mixed_layouts = bool(manifest.get("mixed_layouts"))
        # the format a folder of mixed layouts was imported from reads its shards (check_shard, networks)
        self.source_format = imported_format(manifest, manifest_path) if self.mixed_layouts else None
        if split not in SPLITS:
            raise ValueError(f"split {split!r}: expected one of {SPLITS}")
        if "imported" in manifest:
            tensors = self._imported_split(manifest, split, manifest_path)
        else:
            tensors = self._generated_split(manifest, split, split_seed, manifest_path)
        self.split = split
        self.tensors = tensors
        self.accuracy = self.tensors["test_accuracy"]
        if self.mixed_layouts:
            self.networks = self.source_format.networks(tensors)
            return
        self.weights = [self.tensors[f"{name}.weight"] for name in LAYERS]
        self.biases = [self.tensors[f"{name}.bias"] for name in LAYERS]

    def _generated_split(self, manifest: dict, split: str, split_seed: int, manifest_path: Path) -> dict[str, Tensor]:
        found = sum(s["networks"] for s in manifest["shards"])
        if found != manifest["networks"]:
            raise DatasetError(f"{manifest_path}: {found} of {manifest['networks']} networks trained "
                               "(an unfinished run? rerun the same make-cnn-zoo command)")
        shards = [self._load_shard(record) for record in manifest["shards"]]
        return network_split({key: torch.cat([s[key] for s in shards]) for key in shards[0]}, manifest["networks"],
                             split, split_seed)

    def _imported_split(self, manifest: dict, split: str, manifest_path: Path) -> dict[str, Tensor]:
        entry = manifest["splits"].get(split)
        if entry is None:
            raise DatasetError(f"{manifest_path}: no split {split!r} (has {sorted(manifest['splits'])})")
        if not entry["count"]:
            raise DatasetError(f"{manifest_path}: split {split!r} is empty (its import kept no entry of it)")
        found = sum(s["count"] for s in entry["shards"])
        if found != entry["count"]:
            raise DatasetError(f"{manifest_path}: split {split} lists {entry['count']} entries, its shards hold "
                               f"{found} (an unfinished import? rerun the same import-dataset command)")
        shards = [self._load_shard(record) for record in entry["shards"]]
        return {key: torch.cat([s[key] for s in shards]) for key in shards[0]}

    def _load_shard(self, record: dict) -> dict[str, Tensor]:
        path = self.root / record["file"]
        tensors = read_shard(path, record, "make-cnn-zoo")
        if self.mixed_layouts:
            self.source_format.check_shard(tensors, path)
            return tensors
        for key in (f"{name}.{kind}" for name in LAYERS for kind in ("weight", "bias")):
            if key not in tensors:
                raise DatasetError(f"{path}: tensor {key!r} is missing")
            bad = (~torch.isfinite(tensors[key])).flatten(1).any(1).nonzero().flatten()
            if len(bad):
                raise DatasetError(f"{path}: network {int(tensors['network'][bad[0]])} (epoch "
                                   f"{int(tensors['epoch'][bad[0]])}) has non-finite values in {key}")
        return tensors

    def __len__(self) -> int:
        return len(self.accuracy)

    def batch(self, indices: Sequence[int] | Tensor) -> ZooBatch:
        """Entries ``indices`` as one :class:`ZooBatch` (a ``DataLoader``'s ``collate_fn``)."""
        index = torch.as_tensor(indices, dtype=torch.long)
        if self.mixed_layouts:
            graph = batch_graphs([self.networks.graph(int(k)) for k in index])
            return ZooBatch(graph, self.accuracy[index], index, facts=graph_facts(graph))
        weights, biases = [w[index] for w in self.weights], [b[index] for b in self.biases]
        graph = zoo_graph(weights, biases, self.tensors["activation"][index])
        blocks = WeightBlocks.of(zoo_blocks(weights), biases)
        return ZooBatch(graph, self.accuracy[index], index, blocks, graph_facts(graph, blocks.layout))


STATISTIC_QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)


def weight_statistics(weights: Sequence[Tensor], biases: Sequence[Tensor]) -> Tensor:
    """StatNN's features (Unterthiner et al., 2020): per layer, the mean, variance and the
    0/25/50/75/100% quantiles of the weights and of the biases; ``[B, 14 * layers]``.

    Args:
        weights: per layer ``[B, ...]``.
        biases: per layer ``[B, d_out]``.

    Returns:
        ``[B, 14 * layers]``.
    """
    q = torch.tensor(STATISTIC_QUANTILES)
    features = []
    for t in (tensor.flatten(1) for pair in zip(weights, biases) for tensor in pair):
        features += [t.mean(1, keepdim=True), t.var(1, keepdim=True), torch.quantile(t, q.to(t.dtype), dim=1).T]
    return torch.cat(features, dim=1)
