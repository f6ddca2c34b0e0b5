"""Parameter graphs: the one representation every metanetwork in neuralgraph reads."""
from neuralgraph.graph.core import (
    GraphConversionError,
    Layout,
    ParameterGraph,
    blocks_to_graph,
    common_layout,
    graph_layouts,
    graph_to_blocks,
    graph_to_mlp,
    mlp_to_graph,
    num_node_types,
)
from neuralgraph.graph.modules import LayerConverter, graph_to_module, module_to_graph, register_converter
from neuralgraph.graph.permutation import permute_mlp, random_hidden_permutation, random_hidden_permutations
from neuralgraph.graph.scaling import SCALING_GROUPS, random_hidden_scalings, rescale_mlp, scaling_invariant

__all__ = [
    "GraphConversionError",
    "LayerConverter",
    "Layout",
    "ParameterGraph",
    "SCALING_GROUPS",
    "blocks_to_graph",
    "common_layout",
    "graph_layouts",
    "graph_to_blocks",
    "graph_to_mlp",
    "graph_to_module",
    "mlp_to_graph",
    "module_to_graph",
    "num_node_types",
    "permute_mlp",
    "random_hidden_permutation",
    "random_hidden_permutations",
    "random_hidden_scalings",
    "register_converter",
    "rescale_mlp",
    "scaling_invariant",
]
