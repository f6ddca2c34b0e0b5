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
* ``nn.Conv2d`` (``groups=1``): ``f = kh * kw``, the kernel flattened row-major.

Parameter-free layers (activations, pooling, flatten, dropout) become metadata, not edges.
Leaves are visited in ``named_modules`` order, which is the execution order of an
``nn.Sequential``; a module whose forward runs its children in another order must be
converted layer by layer with :func:`blocks_to_graph`.

To plug in another layer type::

    @register_converter(MyLayer)
    class MyLayerConverter(LayerConverter):
        def to_block(self, weight, bias, in_neurons): ...   # -> [d_out, d_in, f]
        def from_block(self, block, bias, like): ...         # -> (weight, bias)
"""
from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Mapping, Optional, Union

import torch
from torch import Tensor, nn

from neuralgraph.graph.core import Graph, GraphConversionError, blocks_to_graph, common_layout, graph_to_blocks

StateDict = Mapping[str, Tensor]


class LayerConverter:
    """Maps one layer's ``(weight, bias)`` to an edge block and back. Subclass and register."""

    def parameters(self, module: nn.Module) -> tuple[Tensor, Optional[Tensor]]:
        return module.weight, getattr(module, "bias", None)

    def to_block(self, weight: Tensor, bias: Optional[Tensor], in_neurons: Optional[int]) -> Tensor:
        """Edge features ``[d_out, d_in, f]``; ``in_neurons`` is the previous layer's width."""
        raise NotImplementedError

    def from_block(self, block: Tensor, like: Tensor) -> Tensor:
        """The weight of shape ``like.shape`` from its ``[d_out, d_in, f]`` edge features."""
        raise NotImplementedError


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


def _parametric_leaves(module: nn.Module) -> tuple[list[tuple[str, nn.Module, LayerConverter]], tuple[str, ...]]:
    """Parametric layers with their converters, and the architecture as metadata."""
    layers, architecture = [], []
    for name, m in module.named_modules():
        own_params = list(m.parameters(recurse=False))
        is_leaf = next(m.children(), None) is None
        if not is_leaf and not own_params:
            continue
        converter = converter_for(m)
        if own_params and (converter is None or not is_leaf):
            raise GraphConversionError(
                f"layer {name or '<root>'!r} ({type(m).__name__}) has parameters but no converter; "
                f"register one with @register_converter({type(m).__name__})"
            )
        if converter is not None:
            layers.append((name, m, converter))
        architecture.append(type(m).__name__)
    if not layers:
        raise GraphConversionError(f"{type(module).__name__} has no parametric layers to convert")
    return layers, tuple(architecture)


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
    layers = []
    for prefix, params in groups.items():
        if "weight" not in params:
            raise GraphConversionError(f"state dict has {prefix}.bias but no {prefix}.weight")
        weight = params["weight"]
        kinds = {2: nn.Linear, 4: nn.Conv2d}
        if weight.dim() not in kinds:
            raise GraphConversionError(
                f"state dict key '{prefix}.weight' has shape {tuple(weight.shape)}: expected 2-D (Linear) or 4-D (Conv2d)"
            )
        layers.append((prefix, weight, params.get("bias"), _CONVERTERS[kinds[weight.dim()]]))
    if not layers:
        raise GraphConversionError("state dict is empty")
    return layers


def _to_graph(layers) -> Graph:
    blocks, biases, in_neurons = [], [], None
    for name, weight, bias, converter in layers:
        weight = weight.detach()
        try:
            block = converter.to_block(weight, bias, in_neurons)
        except GraphConversionError as err:
            raise GraphConversionError(f"layer {name!r}: {err}") from None
        if bias is not None and tuple(bias.shape) != (block.shape[0],):
            raise GraphConversionError(f"layer {name!r}: bias shape {tuple(bias.shape)} does not match {block.shape[0]} outputs")
        blocks.append(block)
        biases.append(weight.new_zeros(block.shape[0]) if bias is None else bias.detach())
        in_neurons = block.shape[0]
    return blocks_to_graph(blocks, biases)


def module_to_graph(source: Union[nn.Module, StateDict]) -> Graph:
    """Parameter graph of an ``nn.Sequential``-style module or of its state dict.

    Layers without a bias get bias 0 on their nodes. The module's architecture (class names of
    its leaves, activations included) is kept as ``graph.architecture``.
    """
    if isinstance(source, nn.Module):
        leaves, architecture = _parametric_leaves(source)
        layers = [(name, *conv.parameters(m), conv) for name, m, conv in leaves]
    elif isinstance(source, Mapping):
        layers, architecture = _state_dict_layers(source), None
    else:
        raise GraphConversionError(f"expected an nn.Module or a state dict, got {type(source).__name__}")
    graph = _to_graph(layers)
    if architecture is not None:
        graph.architecture = architecture
    return graph


def graph_to_module(graph: Graph, template: Union[nn.Module, StateDict]) -> Union[nn.Module, StateDict]:
    """Exact inverse of :func:`module_to_graph`: a copy of ``template`` holding the graph's parameters.

    ``template`` fixes the layer types and shapes (a module, or a state dict, returned as a new
    state dict with the same keys). Features beyond a layer's own edge width must be zero.
    """
    if getattr(graph, "num_graphs", 1) != 1:
        raise GraphConversionError("graph_to_module takes a single graph; index the batch first")
    if isinstance(template, nn.Module):
        result = copy.deepcopy(template)
        leaves, _ = _parametric_leaves(result)
        layers = [(name, *conv.parameters(m), conv) for name, m, conv in leaves]
    elif isinstance(template, Mapping):
        layers = _state_dict_layers(template)
        result = OrderedDict(template)
    else:
        raise GraphConversionError(f"template must be an nn.Module or a state dict, got {type(template).__name__}")
    layout = common_layout(graph)
    if len(layout) - 1 != len(layers):
        raise GraphConversionError(f"graph has {len(layout) - 1} layers but the template has {len(layers)}")
    blocks, biases = graph_to_blocks(graph)
    for l, ((name, weight, bias, conv), block, b) in enumerate(zip(layers, blocks, biases), start=1):
        block, b = block[0], b[0]
        expected = conv.to_block(weight.detach(), bias, layout[l - 1] if l > 1 else None).shape
        if tuple(block.shape[:2]) != tuple(expected[:2]):
            raise GraphConversionError(
                f"layer {name!r}: template has {tuple(expected[:2])} (out, in) neurons, graph has {tuple(block.shape[:2])}"
            )
        width = expected[2]
        if bool((block[..., width:] != 0).any()):
            raise GraphConversionError(f"layer {name!r}: edge features beyond its {width} weights are nonzero")
        new_weight = conv.from_block(block[..., :width].contiguous(), weight).to(weight.dtype)
        if bias is None and bool((b != 0).any()):
            raise GraphConversionError(f"layer {name!r}: template has no bias but the graph's biases are nonzero")
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
