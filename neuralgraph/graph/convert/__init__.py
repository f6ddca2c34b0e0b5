"""Modules and state dicts <-> parameter graphs, through a registry of layer converters.

A converter (:mod:`~neuralgraph.graph.convert.registry`) turns one parametric layer into an edge
block ``[d_out, d_in, f]`` and back; ``nn.Linear`` (:mod:`~neuralgraph.graph.convert.linear`) and
``nn.Conv2d`` (:mod:`~neuralgraph.graph.convert.conv`) are registered on import. A module is read
through its ``torch.fx`` data flow (:mod:`~neuralgraph.graph.convert.trace`), a state dict key by
key (:mod:`~neuralgraph.graph.convert.state_dict`); BatchNorm is folded first, in eval mode
(:func:`fold_batchnorm`). Normalisations and multi-head attention are *elements*
(:mod:`~neuralgraph.graph.convert.elements`): several node layers and edge groups each, stored as
general parameter graphs (:mod:`~neuralgraph.graph.convert.general`).

To plug in another layer type::

    @register_converter(MyLayer)
    class MyLayerConverter(LayerConverter):
        def to_block(self, weight, bias, in_neurons): ...   # -> [d_out, d_in, f]
        def from_block(self, block, like): ...         # -> weight of shape like.shape
        def input_shapes(self, module): ...            # probe shapes when it reads the input
"""
from neuralgraph.graph.convert.batchnorm import fold_batchnorm
from neuralgraph.graph.convert.conv import Conv2dConverter
from neuralgraph.graph.convert.elements import Element, ElementConverter
from neuralgraph.graph.convert.linear import LinearConverter
from neuralgraph.graph.convert.module import ModuleConverter, graph_to_module, module_to_graph
from neuralgraph.graph.convert.registry import LayerConverter, converter_for, register_converter

__all__ = [
    "Conv2dConverter",
    "Element",
    "ElementConverter",
    "LayerConverter",
    "LinearConverter",
    "ModuleConverter",
    "converter_for",
    "fold_batchnorm",
    "graph_to_module",
    "module_to_graph",
    "register_converter",
]
