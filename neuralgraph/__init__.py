"""neuralgraph: learning on the weights of neural networks, on PyTorch Geometric."""
import importlib

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


def __getattr__(name: str):
    """The graph functions, imported on first use (``neuralgraph --help`` needs no torch)."""
    if name in __all__:
        return getattr(importlib.import_module("neuralgraph.graph"), name)
    raise AttributeError(f"module 'neuralgraph' has no attribute {name!r}")
