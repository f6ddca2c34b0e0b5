"""Metanetworks: permutation-equivariant networks that read the parameter graphs of other networks.

Importing this package registers every architecture in :data:`METANETS`.
"""
from neuralgraph.nn.base import EdgeUpdate, FeedForward, FiLM, Metanet, MetanetLayer, ResidualNorm
from neuralgraph.nn.encoder import EncodedGraph, GraphEncoder
from neuralgraph.nn.registry import METANETS, build_metanet, metanet_class, register_metanet

# Architectures register themselves on import.
from neuralgraph.nn import gmn, ng_gnn, ng_t, nft  # noqa: E402,F401  isort: skip

__all__ = [
    "METANETS",
    "EdgeUpdate",
    "EncodedGraph",
    "FeedForward",
    "FiLM",
    "GraphEncoder",
    "Metanet",
    "MetanetLayer",
    "ResidualNorm",
    "build_metanet",
    "metanet_class",
    "register_metanet",
]
