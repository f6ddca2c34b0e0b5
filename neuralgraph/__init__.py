"""neuralgraph: learning on the weights of neural networks, on PyTorch Geometric."""
from neuralgraph.graph import (
    graph_layouts,
    graph_to_mlp,
    graph_to_module,
    mlp_to_graph,
    module_to_graph,
    permute_mlp,
    random_hidden_permutation,
    register_converter,
)

__version__ = "0.1.0"

__all__ = [
    "graph_layouts",
    "graph_to_mlp",
    "graph_to_module",
    "mlp_to_graph",
    "module_to_graph",
    "permute_mlp",
    "random_hidden_permutation",
    "register_converter",
]
