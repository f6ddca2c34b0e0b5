"""A zoo of small ViT-style MNIST classifiers, for predicting a transformer's test accuracy from its weights.

The network (:class:`ZooViT`): a 7x7 patch convolution to ``dim`` = 24 features (16 tokens of a
28x28 image), a learned positional embedding, ``depth`` pre-norm blocks (LayerNorm, multi-head
self-attention, residual add; LayerNorm, MLP ``dim -> mlp_dim -> dim``, residual add), a final
LayerNorm, mean pooling over the tokens and a linear classifier. ``dim`` is fixed at 24 so that
every head count of the distribution divides it.

Each network draws its hyperparameters from its own seed (:func:`sample_hyperparameters`), each
uniformly unless said otherwise:

* architecture: ``depth`` in {1, 2}, ``heads`` in {2, 3, 4}, ``mlp_dim`` in {24, 48},
  ``activation`` of the MLP in {gelu, silu};
* optimizer in {adam, adamw, sgd} (SGD with momentum 0.9); learning rate log-uniform in
  [1e-4, 1e-2] for Adam and AdamW, in [1e-3, 1e-1] for SGD; weight decay log-uniform in
  [1e-6, 1e-1] (decoupled for AdamW, an L2 term in the gradient for the others);
* ``init_scale`` log-uniform in [0.3, 3]: every weight matrix and kernel of PyTorch's default
  initialisation, and the positional embedding (normal, std 0.02), is multiplied by it
  (LayerNorm and biases keep their initialisation);
* ``train_fraction`` uniform in [0.1, 1]: the network trains on that fraction of the training images.

Weights and train/test accuracy and loss are recorded at every epoch of ``checkpoint_epochs``;
each (network, epoch) is one entry of the zoo, as in the CNN zoo (:mod:`neuralgraph.data.cnn_zoo`).

Networks train together: a shard's networks are ordered by architecture, and the networks of one
architecture run as one ``torch.vmap`` of ``torch.func.functional_call`` of a :class:`ZooViT`
over their stacked parameters (:class:`ZooTraining`); every network has its own ``torch.optim``
parameter group (its lr and weight decay) and the loss is the sum of the networks' own losses, so
the networks do not interact. Every network of a shard sees the same mini-batches; its training
fraction is a per-network mask over them.

Storage is the sharded folder of :mod:`neuralgraph.data.shards`: shards ``zoo-00000.safetensors``
hold one tensor per key of the state dict of the largest :class:`ZooViT` of the distribution
(``depth`` 2, ``mlp_dim`` 48), ``[n, *shape]`` (``n`` = networks x checkpoints), each network's own
tensors in the leading corner and zeros elsewhere (the second block of a one-block network is all
zero); ``network``, ``epoch``, the four metrics and one tensor per hyperparameter (``depth``,
``heads``, ``mlp_dim`` as values, ``activation`` and ``optimizer`` as indices into the manifest's
``choices``). The manifest's ``architecture`` holds the settings every network shares, so that
``ZooViT(**architecture, depth=..., heads=..., mlp_dim=..., activation=...)`` rebuilds an entry
(:meth:`TransformerZooDataset.module`). A killed run started again skips the recorded shards
(sha256-checked) and retrains the others.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.data import Dataset
from tqdm import tqdm

from neuralgraph.data.cnn_zoo import ZooBatch, network_seed, network_split, write_zoo
from neuralgraph.data.mnist import PathLike
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

ZOO_FOLDER = FolderFormat("neuralgraph-transformer-zoo/1", "make-transformer-zoo")
ACTIVATIONS = {Activation.GELU.value: nn.GELU, Activation.SILU.value: nn.SiLU}
OPTIMIZERS = ("adam", "adamw", "sgd")
CHOICES = {"activation": tuple(ACTIVATIONS), "optimizer": OPTIMIZERS}
DEPTHS, HEADS, MLP_DIMS = (1, 2), (2, 3, 4), (24, 48)
ARCHITECTURE = {"dim": 24, "patch": 7, "classes": 10, "image_size": 28}  # shared by every network
SGD_MOMENTUM = 0.9
POSITION_STD = 0.02  # the positional embedding's initialisation (ViT's), before init_scale
EVALUATION_BATCH = 500


class ZooBlock(nn.Module):
    """A pre-norm transformer block: self-attention then an MLP, each added to its input."""

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
    """A small ViT-style MNIST classifier: patch convolution, learned positional embedding, pre-norm blocks, mean pooling."""

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
    """

    networks: int = 512
    checkpoint_epochs: tuple[int, ...] = (1, 2, 4)
    train_size: int = 2000
    test_size: int = 1000
    batch_size: int = 64
    shard_size: int = 64
    seed: int = 0
    source: str = "full"

    def __post_init__(self):
        for name in ("networks", "train_size", "test_size", "batch_size", "shard_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"TransformerZooSettings.{name}={getattr(self, name)}: must be at least 1")
        epochs = self.checkpoint_epochs
        if not epochs or any(e < 1 for e in epochs) or list(epochs) != sorted(set(epochs)):
            raise ValueError(f"TransformerZooSettings.checkpoint_epochs={epochs}: expected increasing positive epochs")

    def to_dict(self) -> dict:
        return {**asdict(self), "checkpoint_epochs": list(self.checkpoint_epochs)}


def sample_hyperparameters(seed: int) -> dict:
    """The hyperparameters of the network of ``seed`` (``activation`` and ``optimizer`` as indices
    into :data:`CHOICES`; the distribution is the module docstring's)."""
    rng = np.random.default_rng(seed)
    optimizer = int(rng.integers(len(OPTIMIZERS)))
    low, high = (1e-3, 1e-1) if OPTIMIZERS[optimizer] == "sgd" else (1e-4, 1e-2)
    return {
        "depth": int(rng.choice(DEPTHS)),
        "heads": int(rng.choice(HEADS)),
        "mlp_dim": int(rng.choice(MLP_DIMS)),
        "activation": int(rng.integers(len(ACTIVATIONS))),
        "optimizer": optimizer,
        "lr": float(np.exp(rng.uniform(np.log(low), np.log(high)))),
        "weight_decay": float(np.exp(rng.uniform(np.log(1e-6), np.log(1e-1)))),
        "init_scale": float(np.exp(rng.uniform(np.log(0.3), np.log(3.0)))),
        "train_fraction": float(rng.uniform(0.1, 1.0)),
    }


def architecture(hyper: dict) -> dict:
    """The :class:`ZooViT` arguments of a network of hyperparameters ``hyper``."""
    return {**ARCHITECTURE, "depth": hyper["depth"], "heads": hyper["heads"], "mlp_dim": hyper["mlp_dim"],
            "activation": CHOICES["activation"][hyper["activation"]]}


def initial_parameters(hyper: dict, seed: int) -> dict[str, Tensor]:
    """One network's state dict at initialisation: PyTorch's default initialisation drawn from
    ``seed``, the positional embedding normal (std :data:`POSITION_STD`), every tensor of two or
    more dimensions (kernels, weight matrices, the positional embedding) times ``init_scale``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ZooViT(**architecture(hyper))
        nn.init.normal_(model.position, std=POSITION_STD)
    return {k: v * hyper["init_scale"] if v.dim() >= 2 else v.clone() for k, v in model.state_dict().items()}


def stored_shapes() -> dict[str, torch.Size]:
    """Shape of each state-dict key in a shard (one network): that of the largest architecture."""
    with torch.device("meta"):
        model = ZooViT(**ARCHITECTURE, depth=max(DEPTHS), mlp_dim=max(MLP_DIMS))
    return {k: v.shape for k, v in model.state_dict().items()}


def _leading(shape: Sequence[int]) -> tuple[slice, ...]:
    """The index of a tensor of ``shape`` in the leading corner of a larger stored one."""
    return tuple(slice(0, s) for s in shape)


class ZooTraining:
    """Networks of any of the zoo's architectures, trained together.

    ``hypers`` and ``parameters`` (each network's state dict) are ordered so that networks of one
    architecture are consecutive; each such run is one ``torch.vmap`` of ``functional_call`` of a
    :class:`ZooViT` (built on the meta device: it only lends its forward) over the networks'
    stacked parameters. Each network's parameters stay their own leaves, in its own parameter
    group of one ``torch.optim`` optimizer per kind, so that every network trains as it would alone.
    Attention runs through PyTorch's math kernel, whose operations ``vmap`` batches (its fused CPU
    kernel has no batching rule and would run network by network).
    """

    def __init__(self, hypers: list[dict], parameters: list[dict[str, Tensor]]):
        self.parameters = [{k: v.detach().clone().requires_grad_() for k, v in p.items()} for p in parameters]
        self.groups = []  # (batched forward, first network, end)
        start = 0
        for settings, run in itertools.groupby(map(architecture, hypers), key=lambda a: tuple(a.items())):
            end = start + len(list(run))
            with torch.device("meta"):
                template = ZooViT(**dict(settings))
            self.groups.append((torch.vmap(partial(functional_call, template), in_dims=(0, None)), start, end))
            start = end
        if start != len(hypers) or len({tuple(architecture(h).items()) for h in hypers}) != len(self.groups):
            raise ValueError("ZooTraining: order the networks so that those of one architecture are consecutive")
        self.optimizers = _optimizers(self.parameters, hypers)

    def __len__(self) -> int:
        return len(self.parameters)

    def logits(self, images: Tensor) -> Tensor:
        """``[n, B, classes]``: every network's logits on ``images`` ``[B, 1, H, W]``."""
        out = []
        with sdpa_kernel(SDPBackend.MATH):
            for forward, start, end in self.groups:
                members = self.parameters[start:end]
                out.append(forward({k: torch.stack([p[k] for p in members]) for k in members[0]}, (images,)))
        return torch.cat(out)

    def step(self, images: Tensor, labels: Tensor, mask: Tensor) -> None:
        """One optimizer step of every network on its mean loss over the images ``mask`` ``[n, B]`` gives it."""
        ce = _cross_entropy(self.logits(images), labels)
        loss = ((ce * mask).sum(1) / mask.sum(1).clamp(min=1)).sum()
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for optimizer in self.optimizers:
            optimizer.step()

    @torch.no_grad()
    def evaluate(self, images: Tensor, labels: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """Per-network accuracy and mean cross-entropy on the images ``mask`` ``[n, N_images]`` selects."""
        correct = torch.zeros(len(self), dtype=torch.float64)
        loss = torch.zeros(len(self), dtype=torch.float64)
        for start in range(0, len(images), EVALUATION_BATCH):
            part = slice(start, start + EVALUATION_BATCH)
            logits = self.logits(images[part])
            ce = _cross_entropy(logits, labels[part])
            correct += ((logits.argmax(-1) == labels[part]) * mask[:, part]).sum(1).double()
            loss += (ce * mask[:, part]).sum(1).double()
        count = mask.sum(1).double()
        return (correct / count).float(), (loss / count).float()


def _cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """``[n, B]``: each network's cross-entropy on each image, from ``logits`` ``[n, B, classes]``."""
    return nn.functional.cross_entropy(logits.flatten(0, 1), labels.repeat(len(logits)),
                                       reduction="none").view(len(logits), -1)


def _optimizers(parameters: list[dict[str, Tensor]], hypers: list[dict]) -> list[torch.optim.Optimizer]:
    """One optimizer per kind, one parameter group per network (its lr and weight decay)."""
    groups = {name: [] for name in OPTIMIZERS}
    for p, h in zip(parameters, hypers):
        groups[OPTIMIZERS[h["optimizer"]]].append({"params": list(p.values()), "lr": h["lr"],
                                                    "weight_decay": h["weight_decay"]})
    kinds = {"adam": lambda g: torch.optim.Adam(g, foreach=True),
             "adamw": lambda g: torch.optim.AdamW(g, foreach=True),
             "sgd": lambda g: torch.optim.SGD(g, momentum=SGD_MOMENTUM, foreach=True)}
    return [kinds[name](g) for name, g in groups.items() if g]


def train_shard(first: int, count: int, settings: TransformerZooSettings, train, test,
                bar: Optional[tqdm] = None) -> dict[str, Tensor]:
    """Train networks ``first .. first + count - 1``; the tensors of their shard."""
    seeds = [network_seed(settings.seed, first + i) for i in range(count)]
    hypers = [sample_hyperparameters(s) for s in seeds]
    order = sorted(range(count), key=lambda i: tuple(architecture(hypers[i]).values()))  # one vmap per architecture
    seeds, hypers = [seeds[i] for i in order], [hypers[i] for i in order]
    networks = torch.tensor([first + i for i in order])
    training = ZooTraining(hypers, [initial_parameters(h, s) for h, s in zip(hypers, seeds)])
    train_images, train_labels = train
    N = len(train_images)
    # network i trains on the images its own permutation ranks below its fraction
    ranks = torch.stack([torch.randperm(N, generator=torch.Generator().manual_seed(s)).argsort() for s in seeds])
    train_mask = (ranks < torch.tensor([[max(1, round(h["train_fraction"] * N))] for h in hypers])).float()
    test_mask = torch.ones(count, len(test[0]))
    generator = torch.Generator().manual_seed(network_seed(settings.seed, first, stream=1))
    shapes = stored_shapes()
    records = []
    for epoch in range(1, max(settings.checkpoint_epochs) + 1):
        shuffled = torch.randperm(N, generator=generator)
        for start in range(0, N, settings.batch_size):
            index = shuffled[start:start + settings.batch_size]
            training.step(train_images[index], train_labels[index], train_mask[:, index])
        if epoch in settings.checkpoint_epochs:
            train_acc, train_loss = training.evaluate(*train, train_mask)
            test_acc, test_loss = training.evaluate(*test, test_mask)
            stored = {}
            for key, shape in shapes.items():
                stored[key] = torch.zeros(count, *shape)
                for i, p in enumerate(training.parameters):
                    if key in p:
                        stored[key][i][_leading(p[key].shape)] = p[key].detach()
            records.append({**stored, "train_accuracy": train_acc, "test_accuracy": test_acc,
                            "train_loss": train_loss, "test_loss": test_loss,
                            "epoch": torch.full((count,), epoch), "network": networks})
        if bar is not None:
            bar.update(count / max(settings.checkpoint_epochs))
    tensors = {k: torch.cat([r[k] for r in records]).contiguous() for k in records[0]}
    for key in hypers[0]:
        dtype = torch.float32 if isinstance(hypers[0][key], float) else torch.long
        tensors[key] = torch.tensor([h[key] for h in hypers], dtype=dtype).repeat(len(records))
    for key in ("train_loss", "test_loss"):  # a diverged network has no finite loss: record it as such
        tensors[key] = torch.nan_to_num(tensors[key], nan=math.inf)
    return tensors


def make_transformer_zoo(out: PathLike, settings: TransformerZooSettings = TransformerZooSettings(),
                         root: Optional[PathLike] = None, progress: bool = True, distributed: Optional[Worker] = None,
                         merge: bool = False) -> dict:
    """Train and write (or finish writing) the zoo of ``settings`` into ``out``; return the manifest.

    As :func:`~neuralgraph.data.cnn_zoo.make_cnn_zoo`: other settings in an existing folder are an
    error naming the field, a recorded shard whose sha256 changed is refused, a file the manifest
    does not list is never overwritten; ``distributed`` and ``merge`` are those of
    :class:`~neuralgraph.data.shards.FolderWriter`.
    """
    return write_zoo(out, ZOO_FOLDER, settings, train_shard, "ViT", root, progress, distributed, merge,
                     architecture=ARCHITECTURE, choices={k: list(v) for k, v in CHOICES.items()})


class TransformerZooDataset(Dataset):
    """The entries (network x checkpoint) of one split of a transformer zoo folder, held in memory.

    Split by network with the CNN zoo's recipe (:class:`~neuralgraph.data.cnn_zoo.CnnZooDataset`):
    a network is in ``val`` or ``test`` by its position in
    ``numpy.random.default_rng(split_seed).permutation`` of the network ids (first 15% val, next
    15% test). Every shard's sha256 is checked; an unfinished zoo is refused.

    Each entry's parameter graph is that of :class:`ZooViT` (:meth:`module`);
    the split's graphs are converted together on the first read of :attr:`graphs` (a batch, a
    spec) and kept: converting per item would repeat the tracing every epoch.
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
        parameters = list(stored_shapes())
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
        """Every entry's parameter graph, in entry order: one :class:`~neuralgraph.graph.ModuleConverter`
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
        return ZooBatch(batch_graphs([self.graphs[int(k)] for k in index]), self.accuracy[index], index)
