"""The layer-converter registry: how one parametric layer type becomes an edge block and back.

A converter turns a layer's ``(weight, bias)`` into an *edge block* ``[d_out, d_in, f]``, the
``f`` features of each edge from an input neuron (or channel) to an output neuron (or channel);
the bias ``[d_out]`` becomes the output neurons' ``x``. Converters are looked up by layer type,
nearest base class first.
"""
from __future__ import annotations

import abc
from typing import Iterable, Optional, Union

from torch import Tensor, nn

from neuralgraph.graph.schema import GraphConversionError


class LayerConverter(abc.ABC):
    """Maps one layer's ``(weight, bias)`` to an edge block and back. Subclass and register."""

    def parameters(self, module: nn.Module) -> tuple[Tensor, Optional[Tensor]]:
        """The layer's weight and bias (None for a layer without one)."""
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


_CONVERTERS: dict[type, object] = {}


def register_converter(layer_type: type):
    """Class decorator registering a converter for ``layer_type`` (and subclasses): a
    :class:`LayerConverter`, or an :class:`~neuralgraph.graph.convert.elements.ElementConverter`
    for a layer that becomes several node layers.

    Args:
        layer_type: the ``nn.Module`` class converted.

    Returns:
        The decorator, which registers an instance of the class and returns the class.
    """

    def decorator(converter_cls):
        _CONVERTERS[layer_type] = converter_cls()
        return converter_cls

    return decorator


def converter_for(layer: Union[nn.Module, type]) -> Optional[object]:
    """The converter registered for ``layer`` (a module or a layer type) or its nearest base class; None if none.

    Args:
        layer: a module or a module class.

    Returns:
        The converter instance, or ``None``.
    """
    for cls in (layer if isinstance(layer, type) else type(layer)).__mro__:
        if cls in _CONVERTERS:
            return _CONVERTERS[cls]
    return None


def layer_block(name: str, weight: Tensor, bias: Optional[Tensor], converter: LayerConverter,
                in_neurons: Optional[int]) -> tuple[Tensor, Tensor]:
    """One layer's edge block and bias (zeros when it has none); errors name the layer.

    Args:
        name: the layer's qualified name, for errors.
        weight: its weight.
        bias: its bias, or ``None``.
        converter: its converter.
        in_neurons: neurons of the layer it reads (``None``: the network's input).

    Returns:
        ``(block [d_out, d_in, f], bias [d_out])``.
    """
    weight = weight.detach()
    try:
        block = converter.to_block(weight, bias, in_neurons)
    except GraphConversionError as err:
        raise GraphConversionError(f"layer {name!r}: {err}") from None
    if bias is not None and tuple(bias.shape) != (block.shape[0],):
        raise GraphConversionError(f"layer {name!r}: bias shape {tuple(bias.shape)} does not match {block.shape[0]} outputs")
    return block, weight.new_zeros(block.shape[0]) if bias is None else bias.detach()


def layer_weight(name: str, weight: Tensor, bias: Optional[Tensor], conv: LayerConverter, block: Tensor,
                 in_neurons: Optional[int]) -> Tensor:
    """The weight of a template layer from its ``[d_out, d_in, F]`` edge block; features past its own must be 0.

    Args:
        name: the layer's qualified name, for errors.
        weight: the template layer's weight (shape and dtype).
        bias: the template layer's bias, or ``None``.
        conv: its converter.
        block: the edge block read from a graph, ``[d_out, d_in, F]``.
        in_neurons: neurons of the layer it reads (``None``: the network's input).

    Returns:
        A weight of ``weight``'s shape and dtype.
    """
    expected = conv.to_block(weight.detach(), bias, in_neurons).shape
    if tuple(block.shape[:2]) != tuple(expected[:2]):
        raise GraphConversionError(
            f"layer {name!r}: template has {tuple(expected[:2])} (out, in) neurons, graph has {tuple(block.shape[:2])}"
        )
    width = expected[2]
    if bool((block[..., width:] != 0).any()):
        raise GraphConversionError(f"layer {name!r}: edge features beyond its {width} weights are nonzero")
    return conv.from_block(block[..., :width].contiguous(), weight).to(weight.dtype)
