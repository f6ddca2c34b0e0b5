"""A zoo of small CNNs trained on MNIST, for predicting a classifier's test accuracy from its weights.

The recipe follows the Small CNN Zoo (Unterthiner et al., 2020, https://arxiv.org/abs/2002.11448):
three 3x3 convolutions of ``channels`` channels with stride 2, global average pooling and a
linear classifier, layout ``(1, C, C, C, 10)``. Each network draws its hyperparameters from its
own seed (:func:`sample_hyperparameters`): activation, initialisation and its scale, optimizer,
learning rate, L2 (weight decay), dropout before the classifier and the fraction of the training
images it sees. Weights and train/test accuracy and loss are recorded at every epoch of
``checkpoint_epochs``; each (network, epoch) is one entry of the zoo.

Networks train together: a shard of ``shard_size`` networks is one batched matrix product per
layer (:func:`batched_forward`), every network with its own optimizer state (one ``torch.optim``
parameter group per network), and the loss is the sum of the networks' own losses, so the
networks do not interact. Every network sees the same mini-batches; its training fraction is a
per-network mask over them.

Storage is the sharded folder of :mod:`neuralgraph.data.shards`: shards
``zoo-00000.safetensors`` with ``conv{1,2,3}.weight [n, C, C_in, 3, 3]``, ``conv*.bias``,
``linear.weight [n, 10, C]``, ``linear.bias`` (``n`` = networks x checkpoints), ``network``,
``epoch``, ``train_accuracy``, ``test_accuracy``, ``train_loss``, ``test_loss`` and one tensor per
hyperparameter (categorical ones as indices into the manifest's ``choices``). A killed run
started again skips the recorded shards (sha256-checked) and retrains the others.
"""
from __future__ import annotations

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
)
from neuralgraph.data.formats import cnn_wild_park
from neuralgraph.data.mnist import PathLike, load_digits
from neuralgraph.graph import Activation, activation_codes, batch_graphs, blocks_to_graph
from neuralgraph.nn.context import WeightBlocks

ZOO_FOLDER = FolderFormat("neuralgraph-cnn-zoo/1", "make-cnn-zoo")
ACTIVATIONS = (Activation.RELU.value, Activation.TANH.value, Activation.GELU.value)
INITS = ("kaiming_normal", "xavier_normal", "orthogonal")
OPTIMIZERS = ("adam", "sgd")
CHOICES = {"activation": ACTIVATIONS, "init": INITS, "optimizer": OPTIMIZERS}
NUM_CLASSES = 10
KERNEL, STRIDE = 3, 2
LAYERS = ("conv1", "conv2", "conv3", "linear")


@dataclass(frozen=True)
class ZooSettings:
    """What determines a zoo folder (recorded in, and checked against, its manifest).

    ``networks`` networks in shards of ``shard_size``; each trains for ``max(checkpoint_epochs)``
    epochs over the first ``train_size`` MNIST training images (a per-network fraction of
    them), in mini-batches of ``batch_size``, and is tested on the first ``test_size`` test images.
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


def network_seed(seed: int, network: int, stream: int = 0) -> int:
    """Seed of ``network`` (stream 0: its hyperparameters and init) or of its shard's batch order (stream 1)."""
    return int(np.random.SeedSequence([seed, network, stream]).generate_state(1)[0])


def sample_hyperparameters(seed: int) -> dict:
    """The hyperparameters of the network of ``seed`` (categorical ones as indices into :data:`CHOICES`)."""
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
    """One network's parameters, initialised by its ``init`` times ``init_scale``; biases zero."""
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
    """One network of the zoo as a plain module (what ``module_to_graph`` reads)."""

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


def _apply_activations(x: Tensor, codes: Tensor) -> Tensor:
    """Each network's activation on its own features: ``x`` ``[n, ...]``, ``codes`` ``[n]``.

    One call per run of equal codes (a shard orders its networks by activation: three calls).
    """
    values, counts = torch.unique_consecutive(codes, return_counts=True)
    return torch.cat([getattr(torch.nn.functional, ACTIVATIONS[v])(part)
                      for v, part in zip(values.tolist(), x.split(counts.tolist()))])


def batched_forward(params: list[dict[str, Tensor]], codes: Tensor, images: Tensor,
                    dropout: Optional[Tensor] = None, generator: Optional[torch.Generator] = None) -> Tensor:
    """Logits ``[B, n, 10]`` of ``n`` networks on ``images`` ``[B, 1, H, W]``.

    Each convolution is ``unfold`` then one batched matrix product over the networks
    (``[n, B*L, C_in*9] @ [n, C_in*9, C_out]``), much faster on CPU than a grouped convolution.
    ``dropout`` ``[n]`` (training): each network's dropout rate on its pooled features, the masks
    drawn from ``generator`` (so that a shard's training is reproducible).
    """
    n, B = len(params), images.shape[0]
    x = images.unsqueeze(0)  # [n or 1, B, C_in, H, W]: the input is shared
    for name in LAYERS[:-1]:
        weight = torch.stack([p[f"{name}.weight"] for p in params]).flatten(2)  # [n, C_out, C_in*9]
        bias = torch.stack([p[f"{name}.bias"] for p in params])  # [n, C_out]
        H, W = x.shape[-2:]
        h, w = (H - KERNEL) // STRIDE + 1, (W - KERNEL) // STRIDE + 1
        m = x.shape[0]
        cols = torch.nn.functional.unfold(x.reshape(m * B, *x.shape[2:]), KERNEL, stride=STRIDE)  # [mB, K, hw]
        cols = cols.view(m, B, -1, h * w).transpose(2, 3).reshape(m, B * h * w, -1)
        y = torch.matmul(cols, weight.transpose(1, 2)) + bias.unsqueeze(1)  # [n, B*hw, C_out]
        x = _apply_activations(y, codes).view(n, B, h * w, -1).transpose(2, 3).reshape(n, B, -1, h, w)
    features = x.mean(dim=(-2, -1)).transpose(0, 1)  # [B, n, C]
    if dropout is not None:
        keep = 1 - dropout.view(1, n, 1)
        features = features * torch.bernoulli(keep.expand_as(features), generator=generator) / keep
    weight = torch.stack([p["linear.weight"] for p in params])
    bias = torch.stack([p["linear.bias"] for p in params])
    return torch.einsum("bnc,nkc->bnk", features, weight) + bias


@torch.no_grad()
def _evaluate(params, codes, images: Tensor, labels: Tensor, mask: Tensor, batch_size: int) -> tuple[Tensor, Tensor]:
    """Per-network accuracy and mean cross-entropy on the images ``mask`` ``[N_images, n]`` selects."""
    n = len(params)
    correct, loss = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    for start in range(0, len(images), batch_size):
        logits = batched_forward(params, codes, images[start:start + batch_size])
        target = labels[start:start + batch_size]
        m = mask[start:start + batch_size]
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), target[:, None].expand(-1, n),
                                               reduction="none")
        correct += ((logits.argmax(-1) == target[:, None]) * m).sum(0).double()
        loss += (ce * m).sum(0).double()
    count = mask.sum(0).double()
    return (correct / count).float(), (loss / count).float()


def _optimizers(params: list[dict[str, Tensor]], hypers: list[dict]) -> list[torch.optim.Optimizer]:
    """One optimizer per kind, one parameter group per network (its lr and L2)."""
    groups = {name: [] for name in OPTIMIZERS}
    for p, h in zip(params, hypers):
        groups[OPTIMIZERS[h["optimizer"]]].append({"params": list(p.values()), "lr": h["lr"], "weight_decay": h["l2"]})
    optimizers = []
    if groups["adam"]:
        optimizers.append(torch.optim.Adam(groups["adam"], foreach=True))
    if groups["sgd"]:
        optimizers.append(torch.optim.SGD(groups["sgd"], momentum=0.9, foreach=True))
    return optimizers


def train_shard(first: int, count: int, settings: ZooSettings, train, test, bar: Optional[tqdm] = None) -> dict:
    """Train networks ``first .. first + count - 1``; the tensors of their shard."""
    seeds = [network_seed(settings.seed, first + i) for i in range(count)]
    hypers = [sample_hyperparameters(s) for s in seeds]
    order = sorted(range(count), key=lambda i: hypers[i]["activation"])  # one activation call per kind
    seeds, hypers = [seeds[i] for i in order], [hypers[i] for i in order]
    networks = torch.tensor([first + i for i in order])
    params = [{k: v.requires_grad_() for k, v in initial_parameters(settings.channels, h, s).items()}
              for h, s in zip(hypers, seeds)]
    codes = torch.tensor([h["activation"] for h in hypers])
    dropout = torch.tensor([h["dropout"] for h in hypers])
    train_images, train_labels = train
    N = len(train_images)
    # network i trains on the images its own permutation ranks below its fraction
    ranks = torch.stack([torch.randperm(N, generator=torch.Generator().manual_seed(s)).argsort() for s in seeds], 1)
    train_mask = (ranks < torch.tensor([max(1, round(h["train_fraction"] * N)) for h in hypers])).float()
    test_mask = torch.ones(len(test[0]), count)
    optimizers = _optimizers(params, hypers)
    generator = torch.Generator().manual_seed(network_seed(settings.seed, first, stream=1))
    records = []
    for epoch in range(1, max(settings.checkpoint_epochs) + 1):
        shuffled = torch.randperm(N, generator=generator)
        for start in range(0, N, settings.batch_size):
            index = shuffled[start:start + settings.batch_size]
            logits = batched_forward(params, codes, train_images[index], dropout, generator)
            mask = train_mask[index]
            ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), train_labels[index, None].expand(-1, count),
                                                   reduction="none")
            loss = ((ce * mask).sum(0) / mask.sum(0).clamp(min=1)).sum()
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
        if epoch in settings.checkpoint_epochs:
            train_acc, train_loss = _evaluate(params, codes, *train, train_mask, 256)
            test_acc, test_loss = _evaluate(params, codes, *test, test_mask, 256)
            records.append({**{k: torch.stack([p[k].detach() for p in params]) for k in params[0]},
                            "train_accuracy": train_acc, "test_accuracy": test_acc,
                            "train_loss": train_loss, "test_loss": test_loss,
                            "epoch": torch.full((count,), epoch), "network": networks})
        if bar is not None:
            bar.update(count / max(settings.checkpoint_epochs))
    tensors = {k: torch.cat([r[k] for r in records]).contiguous() for k in records[0]}
    E = len(records)
    for key in hypers[0]:
        dtype = torch.long if key in CHOICES else torch.float32
        tensors[key] = torch.tensor([h[key] for h in hypers], dtype=dtype).repeat(E)
    for key in ("train_loss", "test_loss"):  # a diverged network has no finite loss: record it as such
        tensors[key] = torch.nan_to_num(tensors[key], nan=math.inf)
    return tensors


def _mnist(split: str, size: int, source: str, root: Optional[PathLike]) -> tuple[Tensor, Tensor]:
    digits = load_digits(split, source, root)
    if size > len(digits.labels):
        raise ValueError(f"ZooSettings.{split}_size={size} but {source} MNIST {split} has {len(digits.labels)} images")
    images = torch.from_numpy(digits.images[:size]).float().div(255).sub(0.1307).div(0.3081).unsqueeze(1)
    return images, torch.from_numpy(digits.labels[:size].astype(np.int64))


def make_cnn_zoo(out: PathLike, settings: ZooSettings = ZooSettings(), root: Optional[PathLike] = None,
                 progress: bool = True, distributed: Optional[Worker] = None, merge: bool = False) -> dict:
    """Train and write (or finish writing) the zoo of ``settings`` into ``out``; return the manifest.

    Resuming into a folder made with other settings is an error naming the field; a recorded
    shard whose sha256 changed is refused; a file the manifest does not list is never overwritten.
    ``distributed`` (this process is one :class:`~neuralgraph.data.shards.Worker` of many) and
    ``merge`` (the step after the workers) are those of :class:`~neuralgraph.data.shards.FolderWriter`.
    """
    return write_zoo(out, ZOO_FOLDER, settings, train_shard, "CNN", root, progress, distributed, merge,
                     choices={k: list(v) for k, v in CHOICES.items()})


def write_zoo(out: PathLike, folder: FolderFormat, settings, train_shard: Callable, unit: str,
              root: Optional[PathLike], progress: bool, distributed: Optional[Worker], merge: bool,
              **manifest) -> dict:
    """The loop every zoo generator shares: plan the shards of ``settings.shard_size`` networks that
    are missing, train each with ``train_shard(first, count, settings, train, test, bar)`` on the
    settings' MNIST images, and commit it (``manifest``: the generator's own manifest fields)."""
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
        return manifest
    train = _mnist("train", settings.train_size, settings.source, root)
    test = _mnist("test", settings.test_size, settings.source, root)
    done = settings.networks - sum(count for _, _, count in todo)
    with tqdm(total=settings.networks, initial=done, unit=unit, desc=f"{folder.command} {out}", disable=not progress,
              dynamic_ncols=True, bar_format="{l_bar}{bar}| {n:.0f}/{total} [{elapsed}<{remaining}]") as bar:
        for path, first, count in todo:
            writer.commit(path, safetensors_bytes(train_shard(first, count, settings, train, test, bar)))
    return manifest


SPLIT_FRACTIONS = {"val": 0.15, "test": 0.15}


def network_split(tensors: dict[str, Tensor], networks: int, split: str, split_seed: int) -> dict[str, Tensor]:
    """The entries of ``split``, split by network: position in ``numpy.random.default_rng(split_seed)``'s
    permutation of the ``networks`` ids, first 15% val, next 15% test, the rest train."""
    permutation = np.random.default_rng(split_seed).permutation(networks)
    n_val, n_test = (round(SPLIT_FRACTIONS[s] * networks) for s in ("val", "test"))
    members = {"val": permutation[:n_val], "test": permutation[n_val:n_val + n_test],
               "train": permutation[n_val + n_test:]}[split]
    keep = torch.from_numpy(np.isin(tensors["network"].numpy(), members)).nonzero().flatten()
    return {key: value[keep] for key, value in tensors.items()}


class ZooBatch(NamedTuple):
    """A mini-batch of zoo entries: their parameter graphs, their weights and what the task predicts.

    ``blocks`` holds the weights the graph was built from (:meth:`CnnZooDataset.batch`), as
    ``InrBatch.blocks`` does; ``None`` in a batch built by hand.
    """

    graph: Batch  # parameter graphs, one layout (or one per network, in a folder of mixed layouts)
    accuracy: Tensor  # [B] test accuracy of each network at its checkpoint
    index: Tensor  # [B] position of each entry in its split
    blocks: Optional[WeightBlocks] = None  # the networks' edge-feature blocks and biases, layer by layer

    @property
    def size(self) -> int:
        return int(self.accuracy.shape[0])


def zoo_graph(weights: list[Tensor], biases: list[Tensor], activation: Tensor) -> Batch:
    """Parameter graphs of a batch of zoo CNNs: each 3x3 kernel is the 9 features of its
    channel->channel edge, the classifier's weights one feature per edge (zero-padded to 9).

    ``activation`` ``[B]``: each network's activation as an index into :data:`ACTIVATIONS`; the
    graphs' ``activation`` node field holds it on the three convolutions' neurons (``identity``
    on the input and the logits), as ``module_to_graph`` of the :class:`ZooNetwork` records it.
    """
    codes = activation_codes(ACTIVATIONS).to(activation.device)[activation]  # zoo index -> graph code
    identity = torch.zeros_like(codes)
    per_layer = torch.stack([identity, codes, codes, codes, identity], dim=1)
    return blocks_to_graph(zoo_blocks(weights), biases, activations=per_layer)


def zoo_blocks(weights: list[Tensor]) -> list[Tensor]:
    """Per layer the edge features ``[B, d_out, d_in, f]`` of a batch of zoo CNNs: 9 per 3x3 kernel, 1 per
    classifier weight (views)."""
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
    """

    def __init__(self, root: PathLike, split: str = "train", split_seed: int = 0):
        self.root = Path(root)
        manifest = read_manifest(self.root, ZOO_FOLDER)
        manifest_path = self.root / MANIFEST
        self.mixed_layouts = bool(manifest.get("mixed_layouts"))
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
            self.networks = cnn_wild_park.WildParkNetworks(tensors)
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
            cnn_wild_park.check_shard(tensors, path)
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
            return ZooBatch(batch_graphs([self.networks.graph(int(k)) for k in index]), self.accuracy[index], index)
        weights, biases = [w[index] for w in self.weights], [b[index] for b in self.biases]
        return ZooBatch(zoo_graph(weights, biases, self.tensors["activation"][index]), self.accuracy[index], index,
                        WeightBlocks.of(zoo_blocks(weights), biases))


STATISTIC_QUANTILES = (0.0, 0.25, 0.5, 0.75, 1.0)


def weight_statistics(weights: Sequence[Tensor], biases: Sequence[Tensor]) -> Tensor:
    """StatNN's features (Unterthiner et al., 2020): per layer, the mean, variance and the
    0/25/50/75/100% quantiles of the weights and of the biases; ``[B, 14 * layers]``."""
    q = torch.tensor(STATISTIC_QUANTILES)
    features = []
    for t in (tensor.flatten(1) for pair in zip(weights, biases) for tensor in pair):
        features += [t.mean(1, keepdim=True), t.var(1, keepdim=True), torch.quantile(t, q.to(t.dtype), dim=1).T]
    return torch.cat(features, dim=1)
