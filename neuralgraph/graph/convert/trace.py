"""Reading a module's data flow: the ``torch.fx`` walk behind ``module_to_graph`` and ``graph_to_module``.

``torch.fx`` traces ``forward`` (layers with a converter stay single calls) and the traced graph
is run once on a probe input on the ``meta`` device, which gives every node's shape without
computing anything. The walk then follows the chain from the input to the output: every node
that carries data reads the chain's latest value, and each is either claimed by a converter (a
parametric layer, which becomes edges into a new node layer) or parameter-free, which becomes an
entry of ``graph.architecture``: an :class:`~neuralgraph.graph.schema.Activation` (recorded as
the ``activation`` of the current node layer's neurons, at most one per layer), or pooling,
flatten, dropout, a scaling, which record nothing else.

**Residual connections.** An add of the chain's value (node layer ``b``) and an earlier value
of the same shape (node layer ``a < b``, channels on dimension 1, no step between the fork and
the add) is a skip: identity edges from neuron ``j`` of layer ``a`` to neuron ``j`` of layer
``b`` (``edge_kind`` 1, ``edge_layer = b - 1``, features ``[1, 0, ..., 0]``), as Neural Graphs
(Kofinas et al., 2024) represent residual connections; an activation after the add is layer
``b``'s. So ``relu(bn2(conv2(h)) + x)`` of a ResNet block converts after
:func:`~neuralgraph.graph.convert.batchnorm.fold_batchnorm`. A *projection shortcut*, a converted
layer (a strided 1x1 convolution with its folded BatchNorm) whose only user is the add, reading a
value the main path is computed from, becomes shortcut edges (``edge_kind`` 2) between every pair
of neurons of layers ``a`` and ``b`` holding its kernel.

Everything else raises :class:`~neuralgraph.graph.schema.GraphConversionError` naming the node:
a merge other than such an add (concatenation, product, unequal shapes, a shortcut path with a
step other than one layer), a branch, a second activation in one layer, a step that is neither an
activation nor structural (softmax, normalisation), a shape chain that does not run, a layer
called twice, a parameter read outside a converted layer. The node lookup is in one place
(``_Walk.claim``), where converters for more node kinds plug in.
"""
from __future__ import annotations

import copy
import operator
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor, fx, nn

from neuralgraph.graph.convert.elements import ElementConverter
from neuralgraph.graph.convert.registry import LayerConverter, converter_for
from neuralgraph.graph.schema import Activation, GraphConversionError

PROBE_BATCH = 2  # samples in a probe input built from the first layer


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
        shapes = [tuple(self.env[i].shape) for i in node.all_input_nodes if isinstance(self.env.get(i), Tensor)]
        try:
            value = super().run_node(node)
        except Exception as err:  # any failure of user code: reported with the node it happened in
            raise _NodeFailure(node, err, shapes) from err
        data = [tuple(self.env[i].shape) for i in node.all_input_nodes if i.op != "get_attr"
                and isinstance(self.env.get(i), Tensor)]
        if len(data) == 1 and len(shapes) == 2 and isinstance(value, Tensor) and tuple(value.shape) != data[0]:
            # a parameter (a positional embedding) that broadcasts the data to its own shape: too small a probe
            raise _NodeFailure(node, ValueError(f"a parameter broadcasts {data[0]} to {tuple(value.shape)}"), shapes)
        self.values[node] = value
        return value


@dataclass(frozen=True)
class Chain:
    """What the walk found: parametric layers (qualified names) in data-flow order, the
    architecture entries of every step, the residual skips ``(a, b)`` between node layers, the
    projection shortcuts, the activation of each node layer and the shape and dtype of the probe input.

    Attributes:
        layers: ``(qualified name, converter)`` of each parametric layer, in data-flow order.
        architecture: one entry per step of the walk (layers with their settings, activations, ...).
        skips: residual skips ``(a, b)`` between node layers.
        shortcuts: projection shortcuts ``(layer, converter, a, b)``.
        activations: the activation of each node layer.
        probe_shape: the shape of the probe input.
        probe_dtype: its dtype.
        pieces: the converted layers, elements and positional embeddings (:class:`Piece`).
        widths: neurons of each node layer, in the order the walk made them.
        roles: ``"input"``, ``"hidden"``, ``"output"``, ``"group"`` or ``"position"`` per node layer.
    """

    layers: tuple[tuple[str, LayerConverter], ...]
    architecture: tuple[str, ...]
    skips: tuple[tuple[int, int], ...]
    shortcuts: tuple[tuple[str, LayerConverter, int, int], ...]  # (layer, converter, a, b)
    activations: tuple[Activation, ...]
    probe_shape: tuple[int, ...]
    probe_dtype: torch.dtype
    pieces: tuple["Piece", ...] = ()
    widths: tuple[int, ...] = ()  # neurons of each node layer, in the order the walk made them
    roles: tuple[str, ...] = ()  # "input", "hidden", "output", "group" or "position" per node layer

    @property
    def general(self) -> bool:
        """Whether the module has elements beyond a chain of layers (a general parameter graph)."""
        return any(not isinstance(p.converter, LayerConverter) for p in self.pieces)


#: The converter of a positional-embedding piece.
POSITION = "position"


@dataclass(frozen=True)
class Piece:
    """One converted layer, element or positional embedding: its qualified name, converter
    (:class:`LayerConverter`, :class:`ElementConverter` or :data:`POSITION`), the node layer it
    reads and the node layers it makes (a positional embedding: its position nodes, added to ``source``).

    Attributes:
        name: the qualified name of the layer or parameter.
        converter: its converter, or :data:`POSITION`.
        source: the node layer it reads.
        levels: the node layers it makes.
    """

    name: str
    converter: object
    source: int
    levels: tuple[int, ...]


_ACTIVATION_MODULES = {nn.ReLU: Activation.RELU, nn.Tanh: Activation.TANH, nn.Sigmoid: Activation.SIGMOID,
                       nn.GELU: Activation.GELU, nn.SiLU: Activation.SILU, nn.LeakyReLU: Activation.LEAKY_RELU,
                       nn.ELU: Activation.ELU, nn.Softplus: Activation.SOFTPLUS}
# torch functions and tensor methods (torch.tanh, F.relu, x.sin()) carry their activation's name, sine's as "sin"
_ACTIVATION_CALLS = {**{a.value: a for a in Activation if a is not Activation.SINE}, "sin": Activation.SINE}
# parameter-free steps that act on every neuron alike or only on the spatial axes: no activation
_STRUCTURAL_MODULES = (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d, nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d,
                       nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d,
                       nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d,
                       nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout,
                       nn.Flatten, nn.Unflatten, nn.Identity)
# no converter on purpose: fold_batchnorm (convert/batchnorm.py) folds them into the layer before them
_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
                nn.LazyBatchNorm1d, nn.LazyBatchNorm2d, nn.LazyBatchNorm3d)
_STRUCTURAL_CALLS = {"flatten", "view", "reshape", "contiguous", "mean", "dropout", "mul", "truediv", "add", "sub",
                     "transpose", "permute", "swapaxes", "squeeze", "unsqueeze", "getitem", "sum",
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
        """The layer converter that turns ``node`` into one edge block, or None (a parameter-free step, an element)."""
        converter = converter_for(self.gm.get_submodule(node.target)) if node.op == "call_module" else None
        return converter if isinstance(converter, LayerConverter) else None

    def activation(self, node: fx.Node) -> Optional[Activation]:
        """The :class:`Activation` of a parameter-free step, or None for a structural one
        (pooling, flatten, dropout, a scaling); any other step raises."""
        if node.op == "call_module":
            sub = self.gm.get_submodule(node.target)
            name = next((n for cls, n in _ACTIVATION_MODULES.items() if isinstance(sub, cls)), None)
            structural = isinstance(sub, _STRUCTURAL_MODULES)
        else:
            name = node.target if node.op == "call_method" else getattr(node.target, "__name__", str(node.target))
            name = name.rstrip("_")  # in-place variants: relu_, mul_
            structural = name in _STRUCTURAL_CALLS
            name = _ACTIVATION_CALLS.get(name)
        if name is None and not structural:
            raise GraphConversionError(
                f"{self.label(node)} is neither an activation of {Activation.names()} nor a pooling, flatten, dropout or "
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

    def chain(self) -> Chain:
        """Layers, elements, skips and architecture; an error names the first node the graph cannot record.

        Every data node gets the node layer whose neurons its channels are (``level``): the
        input 0, a converted layer a new one, an element (:mod:`~neuralgraph.graph.convert.elements`)
        several, a parameter-free step its input's. Each node reads the chain's latest value
        (``head``), except a residual add, whose other operand is an earlier layer's value of the
        same shape: a skip from that layer to the head's. The axis holding the neurons of each
        value (``axis``: 1 for images, the last for tokens) is followed through transposes,
        flattens and reductions, so that skips and norms are checked on the right axis.
        """
        layers, architecture, skips, shortcuts, pieces = [], [], [], [], []
        level: dict[fx.Node, int] = {}
        self.axis: dict[fx.Node, Optional[int]] = {}
        self.widths: list[int] = []
        self.roles: list[str] = ["input"]
        pending: dict[fx.Node, int] = {}  # shortcut layer -> node layer it reads, until its add
        joined: set[tuple[int, int]] = set()  # node layers joined by a skip or shortcut
        activations: dict[int, tuple[Activation, fx.Node]] = {}
        parameters = dict(self.gm.named_parameters())
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
            if inputs and head is not None and head.op == "call_module" and self.element(head) is not None \
                    and isinstance(self.values.get(head), tuple):
                if inputs != [head] or node.target is not operator.getitem or node.args[1] != 0:
                    raise GraphConversionError(f"{self.label(head)} returns a tuple of which only the output "
                                               f"[0] is a graph element; {self.label(node)} reads it otherwise")
                level[node], self.axis[node] = level[head], self.axis[head]
                head = node
                continue
            if not inputs and not (node.op == "placeholder" and head is None):
                continue
            if not isinstance(value, Tensor) and self.element(node) is None:
                continue
            free = self._free_parameters(node, level, parameters)
            if node.op == "placeholder":
                level[node], self.axis[node] = 0, 1
                self.widths.append(value.shape[1] if value.dim() > 1 else 1)
            elif free and self._is_add(node) and inputs == [head] and len(free) == 1 \
                    and any(a is free[0][1] for a in node.args):
                name, _ = free[0]
                self._position(node, name, head, level)
                pieces.append(Piece(name, POSITION, level[head], (len(self.widths) - 1,)))
                architecture.append(self._step(node, head))
            elif free:
                self._refuse_parameter(free[0][0], f" by {self.label(node)}")
            elif len(inputs) == 2 and head in inputs and self._is_add(node):
                skip = inputs[1 - inputs.index(head)]
                if skip in pending:
                    a = pending.pop(skip)
                    level[node] = self._merge(node, skip, a, head, level, joined, identity=False)
                    shortcuts.append((skip.target, self.claim(skip), a, level[node]))
                else:
                    level[node] = self._merge(node, skip, level[skip], head, level, joined, identity=True)
                    skips.append((level[skip], level[node]))
                self.axis[node] = self.axis[head]
                architecture.append(self._step(node, head))
            elif len(inputs) > 1:
                names = ", ".join(repr(i.name) for i in inputs)
                raise GraphConversionError(
                    f"{self.label(node)} combines {names}: a merge other than a residual add of the chain's "
                    "value and an earlier layer's value of the same shape (cross-attention, concatenation, products)"
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
                self._refuse_second_call(node, layers, shortcuts, pieces)
                converter = self.claim(node)
                layers.append((node.target, converter))
                pieces.append(Piece(node.target, converter, level[head], (len(self.widths),)))
                architecture.append(converter.describe(self.gm.get_submodule(node.target)))
                self.axis[node] = 1 if value.dim() > 1 and not isinstance(self.gm.get_submodule(node.target),
                                                                        nn.Linear) else value.dim() - 1
                level[node] = self._new_level(value.shape[self.axis[node]] if value.dim() > 1 else 1, "hidden")
            elif self.element(node) is not None:
                self._refuse_second_call(node, layers, shortcuts, pieces)
                sub, converter = self.gm.get_submodule(node.target), self.element(node)
                self._check_element_input(node, sub, converter, head, level)
                new = tuple(self._new_level(width, role) for width, role in converter.layers(sub))
                pieces.append(Piece(node.target, converter, level[head], new))
                architecture.append(converter.describe(sub) + self._call(node, head))
                level[node], self.axis[node] = new[converter.output], self.axis[head]
            else:
                architecture.append(self._step(node, head))
                level[node] = level[head]
                self.axis[node] = self._follow_axis(node, head)
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
        self.roles[level[head]] = "output" if self.roles[level[head]] == "hidden" else self.roles[level[head]]
        self._check_parameters([name for name, _ in layers] + [name for name, _, _, _ in shortcuts]
                               + [p.name for p in pieces])
        names = tuple(activations[l][0] if l in activations else Activation.IDENTITY for l in range(len(self.widths)))
        return Chain(tuple(layers), tuple(architecture), tuple(skips), tuple(shortcuts), names, self.probe_shape,
                     self.probe_dtype, tuple(pieces), tuple(self.widths), tuple(self.roles))

    def _call(self, node: fx.Node, current: fx.Node) -> str:
        """How an element is called beyond its input, e.g. ``(x, x, x, need_weights=False)``: masks and
        flags are architecture (a mask computed from a buffer shows the buffer's node)."""
        args = fx.node.map_arg((node.args, node.kwargs), lambda n: _Name("x" if n is current else n.name))
        return "(" + ", ".join([repr(a) for a in args[0]] + [f"{k}={v!r}" for k, v in args[1].items()]) + ")"

    def _new_level(self, width: int, role: str) -> int:
        self.widths.append(int(width))
        self.roles.append(role)
        return len(self.widths) - 1

    def element(self, node: fx.Node) -> Optional[ElementConverter]:
        """The element converter of ``node`` (a normalisation, attention), or None."""
        converter = converter_for(self.gm.get_submodule(node.target)) if node.op == "call_module" else None
        return converter if isinstance(converter, ElementConverter) else None

    def _free_parameters(self, node: fx.Node, level: dict, parameters: dict) -> list[tuple[str, fx.Node]]:
        """Parameters ``node`` reads outside any layer: ``(name, get_attr node)``, through parameter-only steps."""
        found, seen, todo = [], set(), [i for i in node.all_input_nodes if i not in level]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            if current.op == "get_attr" and current.target in parameters:
                found.append((current.target, current))
            elif current.op != "placeholder":
                todo.extend(i for i in current.all_input_nodes if i not in level)
        return found

    def _position(self, node: fx.Node, name: str, head: fx.Node, level: dict) -> None:
        """Check ``head + parameter`` is a positional embedding ``[1, T, D]`` (or ``[T, D]``) on tokens."""
        shape, param = tuple(self.values[head].shape), tuple(self.gm.get_parameter(name).shape)
        axis = self.axis.get(head)
        padded = (1,) * (len(shape) - len(param)) + param
        others = [d for i, d in enumerate(padded) if i != axis and d != 1]
        if axis is None or axis != len(shape) - 1 or len(padded) != len(shape) or padded[axis] != shape[axis] \
                or len(others) != 1 or any(p not in (1, s) for p, s in zip(padded, shape)):
            raise GraphConversionError(
                f"parameter {name!r} {param} is added to {self.label(head)} {shape} but is not a positional embedding "
                "(one value per token and channel, channels on the last axis)")
        level[node], self.axis[node] = level[head], axis
        self.widths.append(others[0])
        self.roles.append("position")

    def _check_element_input(self, node: fx.Node, sub: nn.Module, converter: ElementConverter, head: fx.Node,
                             level: dict) -> None:
        """The element reads its features on the axis it expects, as many as the layer before has neurons."""
        shape, axis = tuple(self.values[head].shape), self.axis.get(head)
        expected = len(shape) - 1 if converter.feature_axis == "last" else 1
        try:
            width = converter.in_width(sub)
        except GraphConversionError as err:
            raise GraphConversionError(f"{self.label(node)}: {err}") from None
        if axis != expected or shape[axis] != width or self.widths[level[head]] != width:
            where = "the last axis" if converter.feature_axis == "last" else "dimension 1"
            raise GraphConversionError(
                f"{self.label(node)} reads {width} features on {where} of {self.label(head)} {shape}, whose neurons "
                f"({self.widths[level[head]]}) are on axis {axis}: not a per-neuron element")

    def _follow_axis(self, node: fx.Node, head: fx.Node) -> Optional[int]:
        """The axis of ``node``'s value holding the neurons, from the head's (None once merged away)."""
        axis, before, after = self.axis.get(head), self.values[head], self.values[node]
        if axis is None or not isinstance(after, Tensor):
            return None
        name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
        args = [a for a in node.args[1:] if not isinstance(a, fx.Node)]
        norm = lambda d: d % before.dim()  # noqa: E731
        if name in ("transpose", "swapaxes") and len(args) == 2:
            a, b = map(norm, args)
            return b if axis == a else a if axis == b else axis
        if name == "permute":
            dims = [norm(d) for d in (args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args)]
            return dims.index(axis)
        if name == "flatten":
            start = norm(node.kwargs.get("start_dim", args[0] if args else 0))
            end = norm(node.kwargs.get("end_dim", args[1] if len(args) > 1 else -1))
            return axis if axis < start else axis - (end - start) if axis > end else None
        if after.dim() == before.dim() and tuple(after.shape[:axis + 1]) == tuple(before.shape[:axis + 1]):
            return axis
        if name in ("mean", "sum", "amax", "max") and after.dim() < before.dim():
            dims = node.kwargs.get("dim", args[0] if args else None)
            dims = [norm(d) for d in (dims if isinstance(dims, (tuple, list)) else [dims])] if dims is not None else []
            return None if axis in dims or not dims else axis - sum(d < axis for d in dims)
        if after.dim() > axis and tuple(after.shape[:axis + 1]) == tuple(before.shape[:axis + 1]):
            return axis  # trailing axes merged or dropped: a flatten after global pooling
        return None

    def _refuse_second_call(self, node: fx.Node, layers: list, shortcuts: list, pieces: list = ()) -> None:
        names = [l[0] for l in layers] + [s[0] for s in shortcuts] + [p.name for p in pieces]
        if node.target in names:
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
        axis = self.axis.get(head)
        widths = (self.widths[a],) * identity + (self.widths[b],)
        if axis is None or self.axis.get(skip, axis) != axis or any(shapes[0][axis] != width for width in widths):
            raise GraphConversionError(
                f"{self.label(node)} adds values of shape {shapes[0]} that do not keep the {' and '.join(map(str, widths))} "
                f"neurons of layer{'s ' + str(a) + ' and' if identity else ''} {b} on one axis"
            )
        if (a, b) in joined:
            raise GraphConversionError(f"{self.label(node)} adds a second skip from layer {a} to layer {b}")
        joined.add((a, b))
        return b

    def _check_parameters(self, held: list[str]) -> None:
        """Every parameter of the module belongs to a converted layer or element."""
        for name, _ in self.module.named_parameters():
            owner = name.rpartition(".")[0]
            if name not in held and not any(owner == layer or owner.startswith(layer + ".") for layer in held):
                sub = self.module.get_submodule(owner)
                if converter_for(sub) is not None:
                    raise GraphConversionError(
                        f"layer {owner!r} ({type(sub).__name__}) is not called as a layer by forward (unused, or its "
                        "weights are read directly); its weights would be lost"
                    )
                self._refuse_parameter(name, " or never used by forward")

    def _refuse_parameter(self, name: str, where: str) -> None:
        owner = name.rpartition(".")[0]
        cls = type(self.module.get_submodule(owner)).__name__
        raise GraphConversionError(
            f"parameter {name!r} ({cls}) is read outside a converted layer{where}; register a converter for "
            f"{cls} with @register_converter({cls}) (a positional embedding added to the tokens, x + parameter, "
            "is read; a class token is not)"
        )

    def _step(self, node: fx.Node, current: fx.Node) -> str:
        """Architecture entry of a parameter-free step; a leaf module with parameters has no converter."""
        if node.op == "call_module":
            sub = self.gm.get_submodule(node.target)
            if isinstance(sub, _BATCH_NORMS):
                raise GraphConversionError(
                    f"layer {node.target!r} ({type(sub).__name__}): fold it into the preceding conv or Linear first: "
                    "`module_to_graph(fold_batchnorm(model.eval()), ...)` "
                    "(from neuralgraph.graph import fold_batchnorm)"
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


def trace_chain(module: nn.Module, example_input: Optional[Tensor] = None) -> Chain:
    """The :class:`Chain` of ``module``'s data flow; an error names the first node a graph cannot record.

    Args:
        module: the module to walk.
        example_input: the probe input (default: built from the first layer).

    Returns:
        The :class:`Chain`.
    """
    return _Walk(module, example_input).chain()
