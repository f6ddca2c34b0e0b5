"""``nn.Conv2d`` (``groups=1``) as edges: ``f = kh * kw`` features per edge, the kernel flattened row-major.

Stride, padding, dilation and padding mode are not edge features; :meth:`Conv2dConverter.describe`
records them in ``graph.architecture``.
"""
from __future__ import annotations

from torch import nn

from neuralgraph.graph.convert.registry import LayerConverter, register_converter
from neuralgraph.graph.schema import GraphConversionError

PROBE_SIZES = range(1, 129)  # square image sizes tried for a network that starts with a convolution


@register_converter(nn.Conv2d)
class Conv2dConverter(LayerConverter):
    """Weight ``[d_out, d_in, kh, kw]`` as edge features ``[d_out, d_in, kh * kw]``."""

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
        """The layer's settings that are not edge features, as recorded in ``graph.architecture``.

        Args:
            module: the ``nn.Conv2d``.

        Returns:
            Its constructor call, e.g. ``Conv2d(1, 16, kernel_size=(3, 3), stride=(2, 2), ...)``.
        """
        return (
            f"Conv2d({module.in_channels}, {module.out_channels}, kernel_size={module.kernel_size}, "
            f"stride={module.stride}, padding={module.padding}, dilation={module.dilation}, "
            f"padding_mode={module.padding_mode!r}, bias={module.bias is not None})"
        )
