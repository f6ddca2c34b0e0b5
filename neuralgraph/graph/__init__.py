"""Parameter graphs: the one representation every metanetwork in neuralgraph reads."""
from neuralgraph.graph.batch import batch_graphs
from neuralgraph.graph.blocks import GraphFacts, MetanetBatch, WeightBlocks, graph_facts
from neuralgraph.graph.build import blocks_to_graph, mlp_to_graph
from neuralgraph.graph.convert import (
    ElementConverter,
    LayerConverter,
    ModuleConverter,
    fold_batchnorm,
    graph_to_module,
    module_to_graph,
    register_converter,
)
from neuralgraph.graph.decode import (
    common_layout,
    graph_layouts,
    graph_shortcuts,
    graph_skips,
    graph_to_blocks,
    graph_to_mlp,
)
from neuralgraph.graph.permutation import permute_mlp, random_hidden_permutation, random_hidden_permutations
from neuralgraph.graph.scaling import random_hidden_scalings, rescale_mlp, scaling_invariant
from neuralgraph.graph.schema import (
    CHAIN_EDGE_KINDS,
    EDGE_KINDS,
    SCALING_GROUPS,
    SHORTCUT_EDGE,
    SKIP_EDGE,
    STRUCTURAL_EDGE_KINDS,
    WEIGHT_EDGE,
    Activation,
    Graph,
    GraphConversionError,
    Layout,
    ParameterGraph,
    activation_codes,
    num_node_types,
)
from neuralgraph.graph.spec import GraphSpec

__all__ = [
    "Activation",
    "CHAIN_EDGE_KINDS",
    "EDGE_KINDS",
    "ElementConverter",
    "Graph",
    "GraphConversionError",
    "GraphFacts",
    "GraphSpec",
    "LayerConverter",
    "Layout",
    "MetanetBatch",
    "ModuleConverter",
    "ParameterGraph",
    "SCALING_GROUPS",
    "SHORTCUT_EDGE",
    "SKIP_EDGE",
    "STRUCTURAL_EDGE_KINDS",
    "WEIGHT_EDGE",
    "WeightBlocks",
    "activation_codes",
    "batch_graphs",
    "blocks_to_graph",
    "common_layout",
    "fold_batchnorm",
    "graph_facts",
    "graph_layouts",
    "graph_shortcuts",
    "graph_skips",
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
