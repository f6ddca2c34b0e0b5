"""The CNN Wild Park (neural-graphs, Kofinas et al., 2024), as its ``CNNParkCIFAR10`` loader reads it.

Files: a split JSON (``cnn_park_splits.json`` in the dataset folder by default)
``{"train"|"val"|"test": {"path": [...], "score": [...], "step": [...]}}``, each path relative to
the dataset folder (``cifar10_zooV2/<trial>/<checkpoint_NNNNNN>/checkpoint.pt``, as
``generate_cnn_park_splits.py`` writes them) or absolute. Each ``checkpoint.pt`` holds ``model``
(the state dict ``layers.{i}.weight`` ``[c_{i+1}, c_i, k_i, k_i]``, ``layers.{i}.bias``,
``fc.weight`` ``[n_classes, c_L]``, ``fc.bias``), ``config`` (``n_layers``, ``n_classes``,
``channels`` ``[c_0 .. c_L]``, ``kernel_size``, ``stride``, ``padding``, ``residual``,
``activation``, one entry per convolution), ``last_result["test/acc"]`` and ``iteration``.

The networks are neural-graphs' sampled ``CNN``: convolution ``i`` computes
``z_i = conv_i(h_{i-1})``; where ``residual[i] = r >= 0``, the output ``h_r`` of convolution
``r`` is added to the first ``min(c_{r+1}, c_{i+1})`` channels of ``z_i``; then
``h_i = activation[i](z_i)``; global average pooling and ``fc`` give the logits.
:class:`WildParkNetwork` computes the same logits, and :func:`park_graph` gives its parameter
graph: a residual of equal widths becomes identity skip edges, one of unequal widths a
projection shortcut holding the 1x1 kernel that copies the shared channels (the exact linear
map of the partial add). Every graph's edge features are a ``k x k`` kernel's ``k * k`` values,
row-major, zero-padded to :data:`EDGE_FEATURES`, so networks of any kernel batch together.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor, nn

from neuralgraph.data.formats.protocol import Option
from neuralgraph.data.formats.source import SourceError, load_tensors
from neuralgraph.data.shards import DatasetError
from neuralgraph.graph import ParameterGraph, activation_codes, blocks_to_graph

NAME = "cnn-wild-park"
KIND = "mixed-cnn-zoo"
SPLITS_FILE = "cnn_park_splits.json"
OPTIONS = (Option("splits_file", Path, None, f"neural-graphs' JSON split file (without one, SRC/{SPLITS_FILE})",
                  metavar="FILE", flag="--splits"),)
SPLITS = ("train", "val", "test")
SPLIT_COLUMNS = ("path", "score", "step")
CONFIG_KEYS = ("n_layers", "n_classes", "channels", "kernel_size", "stride", "padding", "residual", "activation")
#: The ``config.activation`` values (neural-graphs' ``ACTIVATION_FN``), by index.
ACTIVATIONS = ("none", "relu", "gelu", "tanh", "sigmoid", "leaky_relu")
GRAPH_ACTIVATIONS = {"none": "identity", "relu": "relu", "gelu": "gelu", "tanh": "tanh", "sigmoid": "sigmoid",
                     "leaky_relu": "leaky_relu"}
MAX_KERNEL = 7  # the Wild Park samples kernels 3, 5 and 7
#: Edge features of every graph, the largest kernel's taps (smaller kernels zero-padded).
EDGE_FEATURES = MAX_KERNEL * MAX_KERNEL
SCORE_TOLERANCE = 1e-6  # a split score and its checkpoint's last_result["test/acc"] must agree this closely
ARCHITECTURE = {"source": "neural-graphs CNN", "pooling": "global_average", "residual": "added before the activation",
                "edge_features": "k*k kernel values, row-major, zero-padded"}


@dataclass(frozen=True)
class WildParkArchitecture:
    """One network's ``config``: per convolution its kernel, stride, padding, residual source
    (-1: none) and activation (a :data:`ACTIVATIONS` name); ``channels`` from input to last convolution.

    Attributes:
        channels: channels from the input to the last convolution (``layers + 1`` entries).
        kernel_size: each convolution's square kernel side.
        stride: each convolution's stride.
        padding: each convolution's padding.
        residual: each convolution's residual source (-1: none).
        activation: each convolution's activation.
        classes: outputs of the final linear layer.
    """

    channels: tuple[int, ...]
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    residual: tuple[int, ...]
    activation: tuple[str, ...]
    classes: int

    @property
    def layers(self) -> int:
        return len(self.kernel_size)

    def shapes(self) -> list[tuple[int, ...]]:
        """The state dict's shapes in its key order: each convolution's weight and bias, then ``fc``'s."""
        shapes = []
        for i, k in enumerate(self.kernel_size):
            shapes += [(self.channels[i + 1], self.channels[i], k, k), (self.channels[i + 1],)]
        return shapes + [(self.classes, self.channels[-1]), (self.classes,)]

    def keys(self) -> list[str]:
        """The state dict's keys, in the order of :meth:`shapes`."""
        convolutions = [f"layers.{i}.{kind}" for i in range(self.layers) for kind in ("weight", "bias")]
        return convolutions + ["fc.weight", "fc.bias"]


@dataclass(frozen=True)
class ParkEntry:
    """One checkpoint a split file lists: its file, its target (``score``) and training step.

    Attributes:
        file: the checkpoint file.
        score: its test accuracy, as the split file lists it.
        step: its training step.
        network: one id per run folder (the checkpoint folder's parent), over every split.
        listed_in: the split file.
    """

    file: Path
    score: float
    step: int
    network: int  # one id per run folder (the checkpoint folder's parent), over every split
    listed_in: Path


@dataclass(frozen=True)
class ParkSource:
    """The checkpoints a split file lists, split by split.

    Attributes:
        root: the Wild Park folder.
        splits: split -> its checkpoints, in the split file's order.
    """

    root: Path
    splits: dict[str, list[ParkEntry]]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def scan(src: Path, splits_file: Optional[Path] = None) -> ParkSource:
    """The entries of each split, in the split file's order; a listed file that is not there is an error.

    Args:
        src: the Wild Park folder.
        splits_file: the split file (default: ``SPLITS_FILE`` in ``src``).

    Returns:
        The :class:`ParkSource`.
    """
    path = Path(splits_file) if splits_file is not None else src / SPLITS_FILE
    try:
        table = json.loads(path.read_text())
    except OSError as err:
        raise SourceError(f"{path}: split file missing or unreadable ({err.strerror or err}); pass --splits") from err
    except json.JSONDecodeError as err:
        raise SourceError(f"{path}: not JSON ({err})") from err
    columns = {}
    for split in SPLITS:
        if not isinstance(table, dict) or not isinstance(table.get(split), dict):
            raise SourceError(f"{path}: key {split!r} is missing or not a mapping of {list(SPLIT_COLUMNS)}")
        for column in SPLIT_COLUMNS:
            if not isinstance(table[split].get(column), list):
                raise SourceError(f"{path}: key '{split}.{column}' is missing or not a list")
        lengths = {column: len(table[split][column]) for column in SPLIT_COLUMNS}
        if len(set(lengths.values())) != 1:
            raise SourceError(f"{path}: split {split!r} lists {lengths} entries: path, score and step must pair up")
        columns[split] = table[split]
    files = {}
    for split, column in columns.items():
        for k, (listed, score, step) in enumerate(zip(column["path"], column["score"], column["step"])):
            if not isinstance(score, (int, float)) or isinstance(score, bool) or not math.isfinite(score):
                raise SourceError(f"{path}: key '{split}.score[{k}]' is {score!r}, not a finite number")
            if not _is_int(step):
                raise SourceError(f"{path}: key '{split}.step[{k}]' is {step!r}, not an integer")
            file = src / str(listed)
            if not file.is_file():
                raise SourceError(f"{path}: lists {listed} ('{split}.path[{k}]'), which is not a file under {src}")
            files[(split, k)] = file
    runs = {run: n for n, run in enumerate(sorted({file.parent.parent for file in files.values()}))}
    return ParkSource(src, {split: [ParkEntry(files[(split, k)], float(score), int(step),
                                              runs[files[(split, k)].parent.parent], path)
                                    for k, (score, step) in enumerate(zip(column["score"], column["step"]))]
                            for split, column in columns.items()})


def _int_list(config: dict, key: str, length: int, file: Path, minimum: int) -> tuple[int, ...]:
    values = config[key]
    if not isinstance(values, (list, tuple)) or len(values) != length:
        shown = len(values) if isinstance(values, (list, tuple)) else type(values).__name__
        raise SourceError(f"{file}: key 'config.{key}' holds {shown} entries, expected {length}")
    for i, value in enumerate(values):
        if not _is_int(value) or value < minimum:
            raise SourceError(f"{file}: key 'config.{key}[{i}]' is {value!r}, expected an integer >= {minimum}")
    return tuple(values)


def read_architecture(config, file: Path) -> WildParkArchitecture:
    """The checked architecture of a checkpoint's ``config`` (neural-graphs' ``CNN._assert_cfg`` and more).

    Args:
        config: the checkpoint's ``config`` value.
        file: the checkpoint file, for errors.

    Returns:
        The :class:`WildParkArchitecture`.
    """
    if not isinstance(config, dict):
        raise SourceError(f"{file}: key 'config' holds a {type(config).__name__}, expected a mapping")
    for key in CONFIG_KEYS:
        if key not in config:
            raise SourceError(f"{file}: key 'config.{key}' is missing")
    layers, classes = config["n_layers"], config["n_classes"]
    for key, value in (("n_layers", layers), ("n_classes", classes)):
        if not _is_int(value) or value < 1:
            raise SourceError(f"{file}: key 'config.{key}' is {value!r}, expected a positive integer")
    channels = _int_list(config, "channels", layers + 1, file, 1)
    kernel = _int_list(config, "kernel_size", layers, file, 1)
    stride = _int_list(config, "stride", layers, file, 1)
    padding = _int_list(config, "padding", layers, file, 0)
    residual = _int_list(config, "residual", layers, file, -1)
    activation = config["activation"]
    if not isinstance(activation, (list, tuple)) or len(activation) != layers:
        raise SourceError(f"{file}: key 'config.activation' holds {activation!r}, expected {layers} names")
    for i, name in enumerate(activation):
        if name not in ACTIVATIONS:
            raise SourceError(f"{file}: key 'config.activation[{i}]' is {name!r}, none of {ACTIVATIONS}")
    for i, k in enumerate(kernel):
        if k > MAX_KERNEL:
            raise SourceError(f"{file}: key 'config.kernel_size[{i}]' is {k}; the import holds kernels up to "
                              f"{MAX_KERNEL}x{MAX_KERNEL} ({EDGE_FEATURES} edge features)")
    for i, r in enumerate(residual):
        if r < 0:
            continue
        if r >= i - 1:
            raise SourceError(f"{file}: key 'config.residual[{i}]' is {r}: a residual comes from a convolution "
                              "before the preceding one")
        for j in range(r + 1, i + 1):
            if stride[j] != 1 or 2 * padding[j] != kernel[j] - 1:
                raise SourceError(f"{file}: key 'config.residual[{i}]' adds the output of convolution {r} to that of "
                                  f"{i}, but convolution {j} (kernel {kernel[j]}, stride {stride[j]}, padding "
                                  f"{padding[j]}) changes the spatial size")
    return WildParkArchitecture(channels, kernel, stride, padding, residual, tuple(activation), classes)


def read_parameters(model, architecture: WildParkArchitecture, file: Path) -> list[Tensor]:
    """The state dict's tensors (float32) in :meth:`WildParkArchitecture.keys` order, checked
    against the architecture: every key, no other, the shapes, real floating values, all finite.

    Args:
        model: the checkpoint's ``model`` value (a state dict).
        architecture: what the config describes.
        file: the checkpoint file, for errors.

    Returns:
        The tensors.
    """
    if not isinstance(model, dict):
        raise SourceError(f"{file}: key 'model' holds a {type(model).__name__}, expected a state dict")
    keys = architecture.keys()
    extra = sorted(str(k) for k in model if k not in keys)
    if extra:
        raise SourceError(f"{file}: key 'model.{extra[0]}' is not a parameter of the CNN its config describes")
    parameters = []
    for key, shape in zip(keys, architecture.shapes()):
        value = model.get(key)
        if value is None:
            raise SourceError(f"{file}: key 'model.{key}' is missing")
        if not isinstance(value, Tensor) or not value.is_floating_point() or value.is_complex():
            raise SourceError(f"{file}: key 'model.{key}' holds {getattr(value, 'dtype', type(value).__name__)}, "
                              "expected a real floating tensor")
        if tuple(value.shape) != shape:
            raise SourceError(f"{file}: key 'model.{key}' has shape {tuple(value.shape)}, its config gives {shape}")
        if not bool(torch.isfinite(value).all()):
            raise SourceError(f"{file}: key 'model.{key}' has non-finite values")
        parameters.append(value.float())
    return parameters


def _check_target(checkpoint: dict, entry: ParkEntry) -> None:
    """The split file's score and step against the checkpoint's own record, where it has one."""
    last = checkpoint.get("last_result")
    if last is not None:
        if not isinstance(last, dict):
            raise SourceError(f"{entry.file}: key 'last_result' holds a {type(last).__name__}, expected a mapping")
        accuracy = last.get("test/acc")
        if accuracy is not None and not (isinstance(accuracy, (int, float))
                                         and abs(float(accuracy) - entry.score) <= SCORE_TOLERANCE):
            raise SourceError(f"{entry.file}: key 'last_result.test/acc' is {accuracy!r}, but {entry.listed_in} "
                              f"gives score {entry.score}: the split file was not written from this checkpoint")
    iteration = checkpoint.get("iteration")
    if iteration is not None and iteration != entry.step:
        raise SourceError(f"{entry.file}: key 'iteration' is {iteration!r}, but {entry.listed_in} gives step "
                          f"{entry.step}: the split file was not written from this checkpoint")


def read_checkpoint(entry: ParkEntry) -> tuple[WildParkArchitecture, list[Tensor]]:
    """The architecture and parameters of one checkpoint, read with ``weights_only=True`` and checked.

    Args:
        entry: the checkpoint.

    Returns:
        ``(architecture, parameters)``.
    """
    checkpoint = load_tensors(entry.file)
    for key in ("model", "config"):
        if key not in checkpoint:
            raise SourceError(f"{entry.file}: key {key!r} is missing")
    architecture = read_architecture(checkpoint["config"], entry.file)
    parameters = read_parameters(checkpoint["model"], architecture, entry.file)
    _check_target(checkpoint, entry)
    return architecture, parameters


# -- shards --------------------------------------------------------------------------------------
LAYER_FIELDS = ("channels", "kernel", "stride", "padding", "residual", "activation")


def folder_settings(source: ParkSource) -> dict:
    """The manifest's description of the networks: of mixed layouts, their edge features, activations and architecture.

    Args:
        source: the Wild Park.

    Returns:
        ``mixed_layouts``, ``edge_features``, ``choices`` and ``architecture`` of the folder's manifest.
    """
    return {"mixed_layouts": True, "edge_features": EDGE_FEATURES, "choices": {"activation": list(ACTIVATIONS)},
            "architecture": ARCHITECTURE}


def read(source: ParkSource, entries: Sequence[ParkEntry], advance: Callable[[int], object]) -> dict[str, Tensor]:
    """The shard of ``entries``: each network's parameters concatenated in state-dict order
    (``parameters``, ``parameter_count`` per network), its architecture one row per convolution
    (``layer_*``, ``conv_layers`` per network; activations as :data:`ACTIVATIONS` indices), its
    ``test_accuracy`` (the split file's score), ``epoch`` (its step) and ``network`` (its run).

    Args:
        source: the Wild Park (each entry names its own checkpoint file).
        entries: the shard's checkpoints.
        advance: called with 1 after each checkpoint is read (a progress bar's ``update``).

    Returns:
        The shard's tensors by name.
    """
    flat, counts, rows, networks = [], [], {field: [] for field in LAYER_FIELDS}, []
    for entry in entries:
        architecture, parameters = read_checkpoint(entry)
        flat += [p.flatten() for p in parameters]
        counts.append(sum(p.numel() for p in parameters))
        a = architecture
        rows["channels"] += a.channels[1:]
        rows["kernel"] += a.kernel_size
        rows["stride"] += a.stride
        rows["padding"] += a.padding
        rows["residual"] += a.residual
        rows["activation"] += [ACTIVATIONS.index(name) for name in a.activation]
        networks.append((a.layers, a.channels[0], a.classes))
        advance(1)
    long = lambda values: torch.tensor(values, dtype=torch.long)
    tensors = {"parameters": torch.cat(flat), "parameter_count": long(counts),
               "conv_layers": long([n[0] for n in networks]), "in_channels": long([n[1] for n in networks]),
               "classes": long([n[2] for n in networks]),
               **{f"layer_{field}": long(values) for field, values in rows.items()},
               "test_accuracy": torch.tensor([e.score for e in entries], dtype=torch.float32),
               "epoch": long([e.step for e in entries]), "network": long([e.network for e in entries])}
    return {key: value.contiguous() for key, value in tensors.items()}


def check_shard(tensors: dict[str, Tensor], path: Path) -> None:
    """A shard's tensors are all there and its parameters finite; errors name the shard and network.

    Args:
        tensors: a shard's tensors.
        path: the shard file, for errors.
    """
    for key in ("parameters", "parameter_count", "conv_layers", "in_channels", "classes", "test_accuracy", "epoch",
                "network", *(f"layer_{field}" for field in LAYER_FIELDS)):
        if key not in tensors:
            raise DatasetError(f"{path}: tensor {key!r} is missing")
    bad = (~torch.isfinite(tensors["parameters"])).nonzero().flatten()
    if len(bad):
        owner = int(torch.searchsorted(tensors["parameter_count"].cumsum(0), bad[0], right=True))
        raise DatasetError(f"{path}: network {int(tensors['network'][owner])} (epoch {int(tensors['epoch'][owner])}) "
                           "has non-finite parameters")


class WildParkNetworks:
    """The networks of one split's shard tensors (concatenated), each as architecture, parameters or graph.

    Args:
        tensors: the split's shard tensors, concatenated key by key.
    """

    def __init__(self, tensors: dict[str, Tensor]):
        self.tensors = tensors
        self.parameter_start = torch.cat([torch.zeros(1, dtype=torch.long), tensors["parameter_count"].cumsum(0)])
        self.layer_start = torch.cat([torch.zeros(1, dtype=torch.long), tensors["conv_layers"].cumsum(0)])

    def __len__(self) -> int:
        return len(self.tensors["conv_layers"])

    def architecture(self, k: int) -> WildParkArchitecture:
        t, first, last = self.tensors, int(self.layer_start[k]), int(self.layer_start[k + 1])
        row = {field: t[f"layer_{field}"][first:last].tolist() for field in LAYER_FIELDS}
        return WildParkArchitecture((int(t["in_channels"][k]), *row["channels"]), tuple(row["kernel"]),
                                    tuple(row["stride"]), tuple(row["padding"]), tuple(row["residual"]),
                                    tuple(ACTIVATIONS[i] for i in row["activation"]), int(t["classes"][k]))

    def parameters(self, k: int) -> tuple[WildParkArchitecture, list[Tensor]]:
        """Network ``k``'s architecture and its state dict's tensors, in :meth:`WildParkArchitecture.keys` order."""
        architecture = self.architecture(k)
        shapes = architecture.shapes()
        flat = self.tensors["parameters"][int(self.parameter_start[k]):int(self.parameter_start[k + 1])]
        pieces = flat.split([math.prod(shape) for shape in shapes])
        return architecture, [piece.view(shape) for piece, shape in zip(pieces, shapes)]

    def graph(self, k: int) -> ParameterGraph:
        return park_graph(*self.parameters(k))


def networks(tensors: dict[str, Tensor]) -> WildParkNetworks:
    """The networks of a folder's split, as its reader (``CnnZooDataset``) gets them.

    Args:
        tensors: the split's shard tensors, concatenated key by key, each shard checked by :func:`check_shard`.

    Returns:
        Their :class:`WildParkNetworks`.
    """
    return WildParkNetworks(tensors)


# -- the network and its graph ------------------------------------------------------------------
_ACTIVATION_MODULES = {"none": nn.Identity, "relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh,
                       "sigmoid": nn.Sigmoid, "leaky_relu": nn.LeakyReLU}


def shared_channels_kernel(channels_out: int, channels_in: int) -> Tensor:
    """The 1x1 kernel ``[c_out, c_in, 1, 1]`` adding input channel ``j`` to output channel ``j`` for
    ``j < min(c_out, c_in)``: neural-graphs' partial residual add as a linear map.

    Args:
        channels_out: ``c_out``.
        channels_in: ``c_in``.

    Returns:
        ``[c_out, c_in, 1, 1]``.
    """
    kernel = torch.zeros(channels_out, channels_in, 1, 1)
    shared = min(channels_out, channels_in)
    kernel[range(shared), range(shared)] = 1.0
    return kernel


class WildParkNetwork(nn.Module):
    """One Wild Park CNN as a plain module (what ``module_to_graph`` reads and ``graph_to_module`` fills).

    A residual between convolutions of unequal widths goes through ``shortcuts[str(i)]``, a
    bias-free 1x1 convolution initialised to :func:`shared_channels_kernel`, so that ``torch.fx``
    sees a projection shortcut; between equal widths it is a plain add (a skip).

    Args:
        architecture: the network's architecture.
    """

    def __init__(self, architecture: WildParkArchitecture):
        super().__init__()
        a = self.architecture = architecture
        self.layers = nn.ModuleList(nn.Conv2d(a.channels[i], a.channels[i + 1], a.kernel_size[i], a.stride[i],
                                              a.padding[i]) for i in range(a.layers))
        self.shortcuts = nn.ModuleDict()
        for i, r in enumerate(a.residual):
            if r >= 0 and a.channels[r + 1] != a.channels[i + 1]:
                self.shortcuts[str(i)] = nn.Conv2d(a.channels[r + 1], a.channels[i + 1], 1, bias=False)
                with torch.no_grad():
                    self.shortcuts[str(i)].weight.copy_(shared_channels_kernel(a.channels[i + 1], a.channels[r + 1]))
        self.activations = nn.ModuleList(_ACTIVATION_MODULES[name]() for name in a.activation)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(a.channels[-1], a.classes)

    def forward(self, x: Tensor) -> Tensor:
        residual, saved = self.architecture.residual, {}
        for i, (layer, activation) in enumerate(zip(self.layers, self.activations)):
            x = layer(x)
            r = residual[i]
            if r >= 0:
                x = x + (self.shortcuts[str(i)](saved[r]) if str(i) in self.shortcuts else saved[r])
            x = activation(x)
            if i in residual:
                saved[i] = x
        return self.fc(self.flatten(self.pool(x)))


def park_graph(architecture: WildParkArchitecture, parameters: Sequence[Tensor]) -> ParameterGraph:
    """The parameter graph of one network, as ``module_to_graph(WildParkNetwork)`` gives it, with its
    edge features zero-padded to :data:`EDGE_FEATURES`.

    Node layer ``i + 1`` holds convolution ``i``'s channels with its activation (``identity`` on
    the input and the logits); a residual from convolution ``r`` into ``i`` joins node layers
    ``r + 1`` and ``i + 1``: skip edges between equal widths, else a shortcut holding
    :func:`shared_channels_kernel`.

    Args:
        architecture: the network's architecture.
        parameters: its tensors in :meth:`WildParkArchitecture.keys` order.

    Returns:
        The ``ParameterGraph``.
    """
    a = architecture
    weights, biases = parameters[0::2], parameters[1::2]
    blocks = [w.reshape(w.shape[0], w.shape[1], -1) for w in weights[:-1]] + [weights[-1].unsqueeze(-1)]
    skips, shortcuts = [], []
    for i, r in enumerate(a.residual):
        if r < 0:
            continue
        start, end = r + 1, i + 1
        if a.channels[start] == a.channels[end]:
            skips.append((start, end))
        else:
            kernel = shared_channels_kernel(a.channels[end], a.channels[start]).to(blocks[0])
            shortcuts.append((start, end, kernel.flatten(2)))
    codes = activation_codes(["identity", *(GRAPH_ACTIVATIONS[name] for name in a.activation), "identity"])
    graph = blocks_to_graph(blocks, list(biases), skips, codes, shortcuts)
    graph.edge_attr = torch.nn.functional.pad(graph.edge_attr, (0, EDGE_FEATURES - graph.edge_attr.shape[1]))
    return graph
