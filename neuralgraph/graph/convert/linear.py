"""``nn.Linear`` as edges: ``f = in_features / d_in`` features per edge.

``d_in`` is the number of neurons (or channels) of the previous layer. For a plain MLP ``f = 1``;
after ``Flatten`` of a ``[C, H, W]`` feature map, ``f = H * W`` and each channel->neuron edge
carries the ``H*W`` weights that read that channel (PyTorch flattens channel-major). Global
pooling before ``Flatten`` gives ``f = 1``.
"""
from __future__ import annotations

from torch import nn

from neuralgraph.graph.convert.registry import LayerConverter, register_converter
from neuralgraph.graph.schema import GraphConversionError


@register_converter(nn.Linear)
class LinearConverter(LayerConverter):
    """Weight ``[d_out, in_features]`` as edge features ``[d_out, d_in, in_features / d_in]``."""

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
