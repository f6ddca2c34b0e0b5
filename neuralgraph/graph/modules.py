"""Modules and state dicts <-> parameter graphs, through a registry of layer converters.

A converter turns one parametric layer into an *edge block*: a tensor ``[d_out, d_in, f]``
holding the ``f`` features of each edge from an input neuron (or channel) to an output
neuron (or channel), plus the bias ``[d_out]``. Blocks of all layers are zero-padded to a
common width ``F`` by :func:`~neuralgraph.graph.core.blocks_to_graph`, as the graph
metanetwork papers do for convolution kernels.

Shipped converters:

* ``nn.Linear``: ``f = in_features / d_in`` where ``d_in`` is the number of neurons (or
  channels) of the previous layer. For a plain MLP ``f = 1``; after ``Flatten`` of a
  ``[C, H, W]`` feature map, ``f = H * W`` and each channel->neuron edge carries the ``H*W``
  weights that read that channel (PyTorch flattens channel-major). Global pooling before
  ``Flatten`` gives ``f = 1``.
* ``nn.Conv2d`` (``groups=1``): ``f = kh * kw``, the kernel flattened row-major. Stride,
  padding, dilation and padding mode are recorded in ``graph.architecture``.

**Data flow.** A module is read through its real data flow: ``torch.fx`` traces ``forward``
(layers with a converter stay single calls) and the traced graph is run once on a probe input
on the ``meta`` device, which gives every node's shape without computing anything. The walk
then follows the chain from the input to the output: every node that carries data reads the
chain's latest value, and each is either claimed by a converter (a parametric layer, which
becomes edges into a new node layer) or parameter-free, which becomes an entry of
``graph.architecture``: an activation (:data:`~neuralgraph.graph.core.ACTIVATIONS`, recorded as
the ``activation`` of the current node layer's neurons, at most one per layer), or pooling,
flatten, dropout, a scaling, which record nothing else.

**Residual connections.** An add of the chain's value (node layer ``b``) and an earlier value
of the same shape (node layer ``a < b``, channels on dimension 1, no step between the fork and
the add) is a skip: identity edges from neuron ``j`` of layer ``a`` to neuron ``j`` of layer
``b`` (``edge_kind`` 1, ``edge_layer = b - 1``, features ``[1, 0, ..., 0]``), as Neural Graphs
(Kofinas et al., 2024) represent residual connections; an activation after the add is layer
``b``'s. So ``relu(bn2(conv2(h)) + x)`` of a ResNet block converts after
:func:`~neuralgraph.graph.converters.fold_batchnorm`, and the rebuilt module computes the same
outputs. A *projection shortcut*, a converted layer (a strided 1x1 convolution with its folded
BatchNorm) whose only user is the add, reading a value the main path is computed from, becomes
shortcut edges (``edge_kind`` 2) between every pair of neurons of layers ``a`` and ``b`` holding
its kernel. Its bias acts on layer ``b``'s neurons, so it is added to that layer's biases: the
graph holds the function's bias per neuron, and the rebuilt module puts all of it in the main
path's layer (the shortcut's bias 0), equal to the original up to the rounding of that sum.

Everything else raises :class:`~neuralgraph.graph.core.GraphConversionError` naming the node: a
merge other than such an add (concatenation, product, unequal shapes, a shortcut path with a
step other than one layer), a branch, a second activation in one layer, a step that is
neither an activation nor structural (softmax, normalisation), a shape chain that does not run,
a layer called twice, a parameter read outside a converted layer. The node lookup is in one place
(``_Walk.claim``), where converters for more node kinds plug in. After conversion,
:func:`module_to_graph` checks on the probe input that the module rebuilt from the graph
computes exactly what the module computes.

A state dict has no data flow: its ``<layer>.weight`` keys are taken in order (2-D: Linear,
4-D: Conv2d), and consecutive 2-D weights must chain exactly.

To plug in another layer type::

    @register_converter(MyLayer)
    class MyLayerConverter(LayerConverter):
        def to_block(self, weight, bias, in_neurons): ...   # -> [d_out, d_in, f]
        def from_block(self, block, like): ...         # -> weight of shape like.shape
        def input_shapes(self, module): ...            # probe shapes when it reads the input
"""
from __future__ import annotations

import abc
import copy
import itertools
import operator
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Union

import torch
from torch import Tensor, fx, nn

from neuralgraph.graph.core import (
    ACTIVATIONS,
    Graph,
    GraphConversionError,
    activation_codes,
    blocks_to_graph,
    check_finite,
    common_layout,
    graph_shortcuts,
    graph_skips,
    graph_to_blocks,
)

StateDict = Mapping[str, Tensor]
PROBE_BATCH = 2
PROBE_SIZES = range(1, 129)  # square image sizes tried for a network that starts with a convolution
SHORTCUT_BIAS_ULPS = 1024  # probe-check tolerance (in eps of the dtype) when a shortcut's bias moved


class LayerConverter(abc.ABC):
    """Maps one layer's ``(weight, bias)`` to an edge block and back. Subclass and register."""

    def parameters(self, module: nn.Module) -> tuple[Tensor, Optional[Tensor]]:
        return module.weight, getattr(module, "bias", None)

    @abc.abstractmethod
    def to_block(self, weight: Tensor, bias: Optional[Tensor], in_neurons: Optional[int]) -> Tensor:
        """Edge features ``[d_out, d_in, f]``; ``in_neurons`` is the previous layer's width."""

    @abc.abstractmethod
    def from_block(self, block: Tensor, like: Tensor) -> Tensor:
        """The weight of shape ``like.shape`` from its ``[d_out, d_in, f]`` edge features."""

    def input_shapes(self, module: nn.Module) -> Iterable[tuple[int, ...]]:
        """Shapes of one input sample to try when this layer reads the network's input.

        None by default: such a network then needs ``example_input``.
        """
        return ()

    def describe(self, module: nn.Module) -> str:
        """The layer's entry in ``graph.architecture``: its type and every setting its weights do not carry."""
        return f"{type(module).__name__}({module.extra_repr()})"


_CONVERTERS: dict[type, LayerConverter] = {}


def register_converter(layer_type: type):
    """Class decorator registering a :class:`LayerConverter` for ``layer_type`` (and subclasses)."""

    def decorator(converter_cls):
        _CONVERTERS[layer_type] = converter_cls()
        return converter_cls

    return decorator


def converter_for(module: nn.Module) -> Optional[LayerConverter]:
    for cls in type(module).__mro__:
        if cls in _CONVERTERS:
            return _CONVERTERS[cls]
    return None


@register_converter(nn.Linear)
class LinearConverter(LayerConverter):
    def to_block(self, weight, bias, in_neurons):
        d_out, in_features = weight.shape
        d_in = in_features if in_neurons is None else in_neurons
        if in_features % d_in:
            raise GraphConversionError(
                f"{in_features} input features cannot be split over the {d_in} neurons of the previous layer"
            )
        return weight.reshape(d_out, d_in, in_features // d_in)

    def from_block(self, block, like):
        return block.reshape(like.shape)

    def input_shapes(self, module):
        return [(module.in_features,)]


@register_converter(nn.Conv2d)
class Conv2dConverter(LayerConverter):
    def parameters(self, module):
        if module.groups != 1:
            raise GraphConversionError(f"Conv2d with groups={module.groups} is not supported (only groups=1)")
        return module.weight, module.bias

    def to_block(self, weight, bias, in_neurons):
        d_out, d_in = weight.shape[:2]
        if in_neurons is not None and in_neurons != d_in:
            raise GraphConversionError(f"convolution reads {d_in} channels but the previous layer has {in_neurons}")
        return weight.reshape(d_out, d_in, -1)

    def from_block(self, block, like):
        return block.reshape(like.shape)

    def input_shapes(self, module):
        return ((module.in_channels, size, size) for size in PROBE_SIZES)

    def describe(self, module):
        return (
            f"Conv2d({module.in_channels}, {module.out_channels}, kernel_size={module.kernel_size}, "
            f"stride={module.stride}, padding={module.padding}, dilation={module.dilation}, "
            f"padding_mode={module.padding_mode!r}, bias={module.bias is not None})"
        )


class _Tracer(fx.Tracer):
    """Keeps every layer with a converter as one ``call_module`` node (``torch.nn`` layers are leaves anyway)."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return converter_for(m) is not None or super().is_leaf_module(m, qualname)


class _NodeFailure(Exception):
    def __init__(self, node: fx.Node, error: Exception, input_shapes: list[tuple[int, ...]]):
        super().__init__(str(error))
        self.node, self.error, self.input_shapes = node, error, input_shapes


class _Recorder(fx.Interpreter):
    """Runs a traced module, keeping every node's value; a failure names its node."""

    def __init__(self, module: fx.GraphModule):
        super().__init__(module)
        self.values: dict[fx.Node, object] = {}

    def run_node(self, node: fx.Node):
        try:
            value = super().run_node(node)
        except Exception as err:  # any failure of user code: reported with the node it happened in
            shapes = [tuple(self.env[i].shape) for i in node.all_input_nodes if isinstance(self.env.get(i), Tensor)]
            raise _NodeFailure(node, err, shapes) from err
        self.values[node] = value
        return value


@dataclass(frozen=True)
class _Chain:
    """What the walk found: parametric layers (qualified names) in data-flow order, the
    architecture entries of every step, the residual skips ``(a, b)`` between node layers, the
    projection shortcuts, the activation of each node layer and the shape and dtype of the probe input."""

    layers: tuple[tuple[str, LayerConverter], ...]
    architecture: tuple[str, ...]
    skips: tuple[tuple[int, int], ...]
    shortcuts: tuple[tuple[str, LayerConverter, int, int], ...]  # (layer, converter, a, b)
    activations: tuple[str, ...]
    probe_shape: tuple[int, ...]
    probe_dtype: torch.dtype


_ACTIVATION_MODULES = {nn.ReLU: "relu", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid", nn.GELU: "gelu", nn.SiLU: "silu",
                       nn.LeakyReLU: "leaky_relu", nn.ELU: "elu", nn.Softplus: "softplus"}
# parameter-free steps that act on every neuron alike or only on the spatial axes: no activation
_STRUCTURAL_MODULES = (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d, nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d,
                       nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d,
                       nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d,
                       nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout,
                       nn.Flatten, nn.Unflatten, nn.Identity)
# no converter on purpose: converters.fold_batchnorm folds them into the layer before them
_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
                nn.LazyBatchNorm1d, nn.LazyBatchNorm2d, nn.LazyBatchNorm3d)
_STRUCTURAL_CALLS = {"flatten", "view", "reshape", "contiguous", "mean", "dropout", "mul", "truediv", "add", "sub",
                     "avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d", "max_pool2d", "max_pool3d",
                     "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
                     "adaptive_max_pool2d", "adaptive_max_pool3d"}
_ADDS = {operator.add, torch.add, "add"}


def _depends_on(node: fx.Node, ancestor: fx.Node) -> bool:
    """Whether ``node``'s value is computed from ``ancestor``'s."""
    seen, todo = set(), [node]
    while todo:
        current = todo.pop()
        if current is ancestor:
            return True
        if current not in seen:
            seen.add(current)
            todo.extend(current.all_input_nodes)
    return False


class _Name:
    """An fx node shown by name in an architecture entry (the chain's own value as ``x``)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


class _Walk:
    """Follows the data flow of ``module`` from its input to its output (see the module docstring)."""

    def __init__(self, module: nn.Module, example_input: Optional[Tensor]):
        self.module = module
        try:
            graph = _Tracer().trace(module)
        except Exception as err:  # fx raises TraceError, TypeError, NotImplementedError, ...
            raise GraphConversionError(f"{type(module).__name__}: torch.fx cannot trace forward ({err})") from err
        # a meta copy: the probe run allocates no data and leaves the module's own state untouched
        self.gm = copy.deepcopy(fx.GraphModule(module, graph)).to("meta").eval()
        self.values = self._probe(example_input)

    def label(self, node: fx.Node) -> str:
        if node.op == "call_module":
            return f"layer {node.target!r} ({type(self.gm.get_submodule(node.target)).__name__})"
        return f"node {node.name!r}"

    def claim(self, node: fx.Node) -> Optional[LayerConverter]:
        """The converter that turns ``node`` into graph edges, or None for a parameter-free step."""
        if node.op == "call_module":
            return converter_for(self.gm.get_submodule(node.target))
        return None

    def activation(self, node: fx.Node) -> Optional[str]:
        """The :data:`ACTIVATIONS` name of a parameter-free step, or None for a structural one
        (pooling, flatten, dropout, a scaling); any other step raises."""
        if node.op == "call_module":
            sub = self.gm.get_submodule(node.target)
            name = next((n for cls, n in _ACTIVATION_MODULES.items() if isinstance(sub, cls)), None)
            structural = isinstance(sub, _STRUCTURAL_MODULES)
        else:
            name = node.target if node.op == "call_method" else getattr(node.target, "__name__", str(node.target))
            name = name.rstrip("_")  # in-place variants: relu_, mul_
            structural = name in _STRUCTURAL_CALLS
            name = name if name in ACTIVATIONS else None
        if name is None and not structural:
            raise GraphConversionError(
                f"{self.label(node)} is neither an activation of {ACTIVATIONS} nor a pooling, flatten, dropout or "
                "scaling step, so graph.activation cannot record it"
            )
        return name

    def _probe(self, example_input: Optional[Tensor]) -> dict[fx.Node, object]:
        """Every node's value on the probe input (meta tensors): the first shape that runs through."""
        if example_input is not None:
            if not isinstance(example_input, Tensor):
                raise GraphConversionError(f"example_input is {type(example_input).__name__}, expected a tensor")
            candidates = [example_input.to("meta")]
        else:
            first = next((n for n in self.gm.graph.nodes if self.claim(n) is not None), None)
            if first is None:
                raise GraphConversionError(f"{type(self.module).__name__} has no parametric layers to convert")
            layer = self.gm.get_submodule(first.target)
            shapes = iter(self.claim(first).input_shapes(layer))
            dtype = self.claim(first).parameters(layer)[0].dtype
            candidates = (torch.empty(PROBE_BATCH, *shape, device="meta", dtype=dtype) for shape in shapes)
        order = {node: i for i, node in enumerate(self.gm.graph.nodes)}
        furthest: Optional[_NodeFailure] = None
        for candidate in candidates:
            recorder = _Recorder(self.gm)
            try:
                with torch.no_grad():
                    recorder.run(candidate)
            except _NodeFailure as failure:
                if furthest is None or order[failure.node] >= order[furthest.node]:  # the largest probe that got as far
                    furthest = failure
                continue
            self.probe_shape, self.probe_dtype = tuple(candidate.shape), candidate.dtype
            return recorder.values
        if furthest is None:
            raise GraphConversionError(
                f"{self.label(first)} gives no probe input shape; pass example_input to convert this module"
            )
        shapes = ", ".join(str(shape) for shape in furthest.input_shapes)
        converter = self.claim(furthest.node)
        layer = f"; it is {converter.describe(self.gm.get_submodule(furthest.node.target))}" if converter else ""
        error = str(furthest.error).rstrip(".")
        raise GraphConversionError(f"{self.label(furthest.node)} cannot run on inputs of shape {shapes} (probe): {error}{layer}")

    def chain(self) -> _Chain:
        """Layers, skips and architecture; an error names the first node the graph cannot record.

        Every data node gets the node layer whose neurons its channels are (``level``): the
        input 0, a converted layer a new one, a parameter-free step its input's. Each node reads
        the chain's latest value (``head``), except a residual add, whose other operand is an
        earlier layer's value of the same shape: a skip from that layer to the head's.
        """
        layers, architecture, skips, shortcuts = [], [], [], []
        level: dict[fx.Node, int] = {}
        pending: dict[fx.Node, int] = {}  # shortcut layer -> node layer it reads, until its add
        joined: set[tuple[int, int]] = set()  # node layers joined by a skip or shortcut
        activations: dict[int, tuple[str, fx.Node]] = {}
        head = None
        for node in self.gm.graph.nodes:
            if node.op == "output":
                if node.args[0] is not head:
                    raise GraphConversionError(
                        f"{type(self.module).__name__}.forward returns {node.args[0]!r}, not the single tensor "
                        "at the end of its chain of layers"
                    )
                break
            value = self.values.get(node)
            inputs = [i for i in node.all_input_nodes if i in level or i in pending]
            if not isinstance(value, Tensor) or not (inputs or node.op == "placeholder" and head is None):
                continue
            if node.op == "placeholder":
                level[node] = 0
            elif len(inputs) == 2 and head in inputs and self._is_add(node):
                skip = inputs[1 - inputs.index(head)]
                if skip in pending:
                    a = pending.pop(skip)
                    level[node] = self._merge(node, skip, a, head, level, joined, identity=False)
                    shortcuts.append((skip.target, self.claim(skip), a, level[node]))
                else:
                    level[node] = self._merge(node, skip, level[skip], head, level, joined, identity=True)
                    skips.append((level[skip], level[node]))
                architecture.append(self._step(node, head))
            elif len(inputs) > 1:
                names = ", ".join(repr(i.name) for i in inputs)
                raise GraphConversionError(
                    f"{self.label(node)} combines {names}: a merge other than a residual add of the chain's "
                    "value and an earlier layer's value of the same shape"
                )
            elif self.claim(node) is not None and self._is_shortcut(node, inputs[0]):
                self._refuse_second_call(node, layers, shortcuts)
                architecture.append(self.claim(node).describe(self.gm.get_submodule(node.target)))
                pending[node] = level[inputs[0]]
                continue  # the chain's value stays the head until the add
            elif inputs[0] is not head:
                users = [u for u in inputs[0].users if u.op != "output" and isinstance(self.values.get(u), Tensor)]
                names = ", ".join(repr(u.name) for u in users)
                raise GraphConversionError(
                    f"{self.label(inputs[0])} feeds {len(users)} nodes ({names}): a branch or skip connection "
                    "that does not end in a residual add of an unchanged value"
                )
            elif self.claim(node) is not None:
                self._refuse_second_call(node, layers, shortcuts)
                layers.append((node.target, self.claim(node)))
                architecture.append(self.claim(node).describe(self.gm.get_submodule(node.target)))
                level[node] = len(layers)
            else:
                architecture.append(self._step(node, head))
                level[node] = level[head]
                name = self.activation(node)
                if name is not None:
                    if level[node] in activations:
                        first, at = activations[level[node]]
                        raise GraphConversionError(
                            f"{self.label(node)} applies {name} after {first} ({self.label(at)}) to the neurons of "
                            "one layer; graph.activation holds one activation per layer"
                        )
                    activations[level[node]] = (name, node)
            head = node
        if not layers:
            raise GraphConversionError(f"{type(self.module).__name__} has no parametric layers to convert")
        self._check_parameters(layers + [(name, converter) for name, converter, _, _ in shortcuts])
        names = tuple(activations[l][0] if l in activations else "identity" for l in range(len(layers) + 1))
        return _Chain(tuple(layers), tuple(architecture), tuple(skips), tuple(shortcuts), names, self.probe_shape,
                      self.probe_dtype)

    def _refuse_second_call(self, node: fx.Node, layers: list, shortcuts: list) -> None:
        if any(name == node.target for name in [l[0] for l in layers] + [s[0] for s in shortcuts]):
            raise GraphConversionError(f"{self.label(node)} is called more than once (shared weights)")

    def _is_add(self, node: fx.Node) -> bool:
        target = node.target if node.op in ("call_function", "call_method") else None
        return target in _ADDS and len(node.args) == 2 and not node.kwargs

    def _is_shortcut(self, node: fx.Node, source: fx.Node) -> bool:
        """A layer on a residual shortcut: its only user is an add whose other operand is computed
        from the same ``source`` through other nodes (the main path). ``f(h) + h`` is a chain
        layer and a skip; the main path's last layer is not computed from the shortcut's source
        through the add's other operand, so it stays on the chain."""
        users = [u for u in node.users if u.op != "output"]
        if len(users) != 1 or not self._is_add(users[0]):
            return False
        other = [i for i in users[0].all_input_nodes if i is not node]
        return len(other) == 1 and other[0] is not source and _depends_on(other[0], source)

    def _merge(self, node: fx.Node, skip: fx.Node, a: int, head: fx.Node, level: dict[fx.Node, int],
               joined: set[tuple[int, int]], identity: bool) -> int:
        """Check the residual add ``node`` of ``skip`` (a value from node layer ``a``: an earlier
        value, or a shortcut layer reading one when not ``identity``) to ``head``; the head's node layer."""
        b = level[head]
        shapes = tuple(self.values[skip].shape), tuple(self.values[head].shape)
        if shapes[0] != shapes[1]:
            raise GraphConversionError(
                f"{self.label(node)} adds {skip.name!r} {shapes[0]} to {head.name!r} {shapes[1]}: a residual "
                "connection needs equal shapes"
            )
        if a == b:
            raise GraphConversionError(
                f"{self.label(node)} adds {skip.name!r} to {head.name!r}, two values of layer {b} with no layer "
                "between them: a merge the graph cannot record"
            )
        widths = (self._width(a, level),) * identity + (self._width(b, level),)
        if any(shapes[0][1:2] != (width,) for width in widths):
            raise GraphConversionError(
                f"{self.label(node)} adds values of shape {shapes[0]} that do not keep the {' and '.join(map(str, widths))} "
                f"neurons of layer{'s ' + str(a) + ' and' if identity else ''} {b} on dimension 1"
            )
        if (a, b) in joined:
            raise GraphConversionError(f"{self.label(node)} adds a second skip from layer {a} to layer {b}")
        joined.add((a, b))
        return b

    def _width(self, l: int, level: dict[fx.Node, int]) -> int:
        """Number of neurons (channels) of node layer ``l``: dim 1 of the value that starts it."""
        start = next(n for n, k in level.items() if k == l)
        return self.values[start].shape[1]

    def _check_parameters(self, layers: list[tuple[str, LayerConverter]]) -> None:
        """Every parameter of the module belongs to a converted layer."""
        held = {name for name, _ in layers}
        for name, _ in self.module.named_parameters():
            owner = name.rpartition(".")[0]
            if not any(owner == layer or owner.startswith(layer + ".") for layer in held):
                sub = self.module.get_submodule(owner)
                cls = type(sub).__name__
                if converter_for(sub) is not None:
                    raise GraphConversionError(
                        f"layer {owner!r} ({cls}) is not called as a layer by forward (unused, or its weights are "
                        "read directly); its weights would be lost"
                    )
                raise GraphConversionError(
                    f"parameter {name!r} ({cls}) is read outside a converted layer or never used by forward; "
                    f"register a converter for {cls} with @register_converter({cls})"
                )

    def _step(self, node: fx.Node, current: fx.Node) -> str:
        """Architecture entry of a parameter-free step; a leaf module with parameters has no converter."""
        if node.op == "call_module":
            sub = self.gm.get_submodule(node.target)
            if isinstance(sub, _BATCH_NORMS):
                raise GraphConversionError(
                    f"layer {node.target!r} ({type(sub).__name__}): fold it into the preceding conv or Linear first: "
                    "`module_to_graph(fold_batchnorm(model.eval()), ...)` "
                    "(from neuralgraph.graph.converters import fold_batchnorm)"
                )
            if next(sub.parameters(), None) is not None:
                cls = type(sub).__name__
                raise GraphConversionError(
                    f"layer {node.target!r} ({cls}) has parameters but no converter; "
                    f"register one with @register_converter({cls})"
                )
            return f"{type(sub).__name__}({sub.extra_repr()})"
        args = fx.node.map_arg((node.args, node.kwargs), lambda n: _Name("x" if n is current else n.name))
        shown = [repr(a) for a in args[0]] + [f"{k}={v!r}" for k, v in args[1].items()]
        name = node.target if node.op == "call_method" else getattr(node.target, "__name__", str(node.target))
        return f"{name}({', '.join(shown)})"


def _module_layers(module: nn.Module, chain: _Chain) -> list[tuple[str, Tensor, Optional[Tensor], LayerConverter]]:
    return [(name, *conv.parameters(module.get_submodule(name)), conv) for name, conv in chain.layers]


def _state_dict_layers(state_dict: StateDict) -> list[tuple[str, Tensor, Optional[Tensor], LayerConverter]]:
    """Group ``<prefix>.weight``/``<prefix>.bias`` keys in order; infer Linear (2-D) or Conv2d (4-D)."""
    groups: OrderedDict[str, dict[str, Tensor]] = OrderedDict()
    for key, value in state_dict.items():
        prefix, _, leaf = key.rpartition(".")
        if leaf not in ("weight", "bias"):
            raise GraphConversionError(f"unexpected key {key!r} in state dict: only '<layer>.weight' and '<layer>.bias'")
        if not isinstance(value, Tensor):
            raise GraphConversionError(f"state dict key {key!r} holds {type(value).__name__}, not a tensor")
        groups.setdefault(prefix, {})[leaf] = value
    layers, previous = [], None
    for prefix, params in groups.items():
        if "weight" not in params:
            raise GraphConversionError(f"state dict has {prefix}.bias but no {prefix}.weight")
        weight = params["weight"]
        kinds = {2: nn.Linear, 4: nn.Conv2d}
        if weight.dim() not in kinds:
            raise GraphConversionError(
                f"state dict key '{prefix}.weight' has shape {tuple(weight.shape)}: expected 2-D (Linear) or 4-D (Conv2d)"
            )
        if weight.dim() == 2 and previous is not None and previous[1].dim() == 2 and weight.shape[1] != previous[1].shape[0]:
            raise GraphConversionError(
                f"state dict key '{prefix}.weight' reads {weight.shape[1]} features but '{previous[0]}.weight' gives "
                f"{previous[1].shape[0]}: keys must follow the data flow"
            )
        layers.append((prefix, weight, params.get("bias"), _CONVERTERS[kinds[weight.dim()]]))
        previous = (prefix, weight)
    if not layers:
        raise GraphConversionError("state dict is empty")
    return layers


def _module_shortcuts(module: nn.Module, chain: _Chain) -> list[tuple[str, Tensor, Optional[Tensor], LayerConverter, int, int]]:
    return [(name, *conv.parameters(module.get_submodule(name)), conv, a, b) for name, conv, a, b in chain.shortcuts]


def _block(name: str, weight: Tensor, bias: Optional[Tensor], converter: LayerConverter,
           in_neurons: Optional[int]) -> tuple[Tensor, Tensor]:
    """One layer's edge block and bias (zeros when it has none); errors name the layer."""
    weight = weight.detach()
    try:
        block = converter.to_block(weight, bias, in_neurons)
    except GraphConversionError as err:
        raise GraphConversionError(f"layer {name!r}: {err}") from None
    if bias is not None and tuple(bias.shape) != (block.shape[0],):
        raise GraphConversionError(f"layer {name!r}: bias shape {tuple(bias.shape)} does not match {block.shape[0]} outputs")
    return block, weight.new_zeros(block.shape[0]) if bias is None else bias.detach()


def _to_graph(layers, chain: Optional[_Chain] = None, shortcut_layers=()) -> Graph:
    """The graph of the chain ``layers``; with ``chain``, also its skips, shortcuts and activations.

    A shortcut's bias is added to the biases of the layer it adds into: the graph holds the
    function's bias per neuron, not how it is split between the two paths.
    """
    blocks, biases, in_neurons = [], [], None
    for name, weight, bias, converter in layers:
        block, b = _block(name, weight, bias, converter, in_neurons)
        blocks.append(block)
        biases.append(b)
        in_neurons = block.shape[0]
    if chain is None:
        return blocks_to_graph(blocks, biases)
    layout = [blocks[0].shape[1]] + [block.shape[0] for block in blocks]
    shortcuts = []
    for name, weight, bias, converter, a, b in shortcut_layers:
        block, shortcut_bias = _block(name, weight, bias, converter, layout[a])
        shortcuts.append((a, b, block))
        biases[b - 1] = biases[b - 1] + shortcut_bias
    codes = activation_codes(chain.activations).to(blocks[0].device)
    return blocks_to_graph(blocks, biases, chain.skips, codes, shortcuts)


def module_to_graph(source: Union[nn.Module, StateDict], example_input: Optional[Tensor] = None) -> Graph:
    """Parameter graph of a module (read through its ``torch.fx`` data flow) or of its state dict.

    Layers without a bias get bias 0 on their nodes. Every step of the module's chain (layers
    with their settings, activations, pooling, residual adds, ...) is kept as
    ``graph.architecture``; the activation of each layer as the ``activation`` node field and
    residual adds as skip or shortcut edges (``edge_kind``). A state dict gives none of these.
    ``example_input`` (a batch) is the probe input; by default it is built from the first
    layer (``[2, in_features]``, or the smallest square image that runs through the network).
    The module rebuilt from the graph must compute exactly the module's output on it; with a
    projection shortcut whose bias moved into the main path's layer, up to float rounding
    (:data:`SHORTCUT_BIAS_ULPS` units of the dtype's precision, relative to the largest output).
    """
    if isinstance(source, nn.Module):
        chain = _Walk(source, example_input).chain()
        graph = _to_graph(_module_layers(source, chain), chain, _module_shortcuts(source, chain))
        graph.architecture = chain.architecture
        _check_rebuilt(graph, source, chain, example_input)
        return graph
    if isinstance(source, Mapping):
        return _to_graph(_state_dict_layers(source))
    raise GraphConversionError(f"expected an nn.Module or a state dict, got {type(source).__name__}")


def _check_rebuilt(graph: Graph, module: nn.Module, chain: _Chain, example_input: Optional[Tensor]) -> None:
    """``graph_to_module(graph, module)`` computes what ``module`` computes, on the probe input (eval mode)."""
    weight = _module_layers(module, chain)[0][1]
    if example_input is None:
        generator = torch.Generator().manual_seed(0)
        example_input = torch.randn(chain.probe_shape, generator=generator, dtype=chain.probe_dtype).to(weight.device)
    with torch.no_grad():
        expected = copy.deepcopy(module).eval()(example_input)
        rebuilt = _load(graph, copy.deepcopy(module), _module_layers, chain).eval()(example_input)
    moved = any(bias is not None and bool((bias != 0).any()) for _, _, bias, _, _, _ in _module_shortcuts(module, chain))
    tolerance = SHORTCUT_BIAS_ULPS * torch.finfo(expected.dtype).eps if moved else 0.0
    if not torch.allclose(rebuilt, expected, rtol=tolerance, atol=tolerance * float(expected.abs().max())):
        raise GraphConversionError(
            f"{type(module).__name__}: the module rebuilt from its graph computes another output on a probe input "
            f"(max abs difference {float((rebuilt - expected).abs().max()):.3g}); its forward uses its layers in "
            "a way the graph does not record"
        )


def graph_to_module(graph: Graph, template: Union[nn.Module, StateDict],
                    example_input: Optional[Tensor] = None) -> Union[nn.Module, StateDict]:
    """Exact inverse of :func:`module_to_graph`: a copy of ``template`` holding the graph's parameters.

    ``template`` fixes the layer types and shapes (a module, or a state dict, returned as a new
    state dict with the same keys). Features beyond a layer's own edge width must be zero. A
    graph that records an architecture (from :func:`module_to_graph`) is refused by a module
    template whose traced architecture differs, e.g. in a convolution's stride or padding.
    ``example_input`` as in :func:`module_to_graph`, for tracing the template.
    """
    if getattr(graph, "num_graphs", 1) != 1:
        raise GraphConversionError("graph_to_module takes a single graph; index the batch first")
    if isinstance(template, nn.Module):
        chain = _Walk(template, example_input).chain()
        return _load(graph, copy.deepcopy(template), _module_layers, chain)
    if isinstance(template, Mapping):
        return _load(graph, OrderedDict(template), lambda state, _: _state_dict_layers(state), None)
    raise GraphConversionError(f"template must be an nn.Module or a state dict, got {type(template).__name__}")


def _weight(name: str, weight: Tensor, bias: Optional[Tensor], conv: LayerConverter, block: Tensor,
            in_neurons: Optional[int]) -> Tensor:
    """The weight of a template layer from its ``[d_out, d_in, F]`` edge block; features past its own must be 0."""
    expected = conv.to_block(weight.detach(), bias, in_neurons).shape
    if tuple(block.shape[:2]) != tuple(expected[:2]):
        raise GraphConversionError(
            f"layer {name!r}: template has {tuple(expected[:2])} (out, in) neurons, graph has {tuple(block.shape[:2])}"
        )
    width = expected[2]
    if bool((block[..., width:] != 0).any()):
        raise GraphConversionError(f"layer {name!r}: edge features beyond its {width} weights are nonzero")
    return conv.from_block(block[..., :width].contiguous(), weight).to(weight.dtype)


def _load(graph: Graph, result, read_layers, chain: Optional[_Chain]):
    """Write the graph's parameters into ``result`` (a module copy or a state dict) and return it."""
    layers = read_layers(result, chain)
    layout = common_layout(graph)
    if len(layout) - 1 != len(layers):
        raise GraphConversionError(f"graph has {len(layout) - 1} layers but the template has {len(layers)}")
    check_finite(graph)
    blocks, biases = graph_to_blocks(graph)
    updates = []
    for l, ((name, weight, bias, conv), block, b) in enumerate(zip(layers, blocks, biases), start=1):
        b = b[0]
        if bias is None and bool((b != 0).any()):
            raise GraphConversionError(f"layer {name!r}: template has no bias but the graph's biases are nonzero")
        updates.append((name, weight, bias, _weight(name, weight, bias, conv, block[0], layout[l - 1] if l > 1 else None), b))
    if chain is not None:
        if graph_skips(graph) != tuple(sorted(chain.skips)):
            raise GraphConversionError(
                f"graph has residual skips {list(graph_skips(graph))} (node layers a -> b) but the template has "
                f"{sorted(chain.skips)}"
            )
        in_graph = graph_shortcuts(graph)
        in_template = {(a, b): rest for *rest, a, b in _module_shortcuts(result, chain)}
        if sorted(in_graph) != sorted(in_template):
            raise GraphConversionError(f"graph has projection shortcuts {sorted(in_graph)} (node layers a -> b) but "
                                       f"the template has {sorted(in_template)}")
        for pair, block in in_graph.items():  # the shortcut's bias is in the layer it adds into
            name, weight, bias, conv = in_template[pair]
            new_weight = _weight(name, weight, bias, conv, block, layout[pair[0]])
            updates.append((name, weight, bias, new_weight, None if bias is None else torch.zeros_like(bias)))
    recorded = getattr(graph, "architecture", None)
    if chain is not None and recorded is not None and tuple(recorded) != chain.architecture:
        step, (found, wanted) = next(
            (i, pair) for i, pair in enumerate(itertools.zip_longest(recorded, chain.architecture, fillvalue="<end>"), 1)
            if pair[0] != pair[1]
        )
        raise GraphConversionError(
            f"the template's architecture differs from the graph's at step {step}: graph {found!r}, "
            f"template {wanted!r} (delete graph.architecture to load the weights regardless)"
        )
    for name, weight, bias, new_weight, b in updates:
        if isinstance(result, nn.Module):
            with torch.no_grad():
                weight.copy_(new_weight)
                if bias is not None:
                    bias.copy_(b)
        else:
            result[f"{name}.weight"] = new_weight
            if bias is not None:
                result[f"{name}.bias"] = b.to(bias.dtype)
    return result
