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
    for a layer that becomes several node layers."""

    def decorator(converter_cls):
        _CONVERTERS[layer_type] = converter_cls()
        return converter_cls

    return decorator


def converter_for(layer: Union[nn.Module, type]) -> Optional[object]:
    """The converter registered for ``layer`` (a module or a layer type) or its nearest base class; None if none."""
    for cls in (layer if isinstance(layer, type) else type(layer)).__mro__:
        if cls in _CONVERTERS:
            return _CONVERTERS[cls]
    return None
