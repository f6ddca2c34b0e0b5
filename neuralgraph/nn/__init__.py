"""Metanetworks: permutation-equivariant networks that read the parameter graphs of other networks.

Importing this package registers every architecture in :data:`METANETS`.
"""
from neuralgraph.nn.base import EdgeUpdate, Metanet, MetanetLayer, ResidualNorm
from neuralgraph.nn.encoder import EncodedGraph, GraphEncoder
from neuralgraph.nn.registry import METANETS, build_metanet, metanet_class, register_metanet

__all__ = [
    "METANETS",
    "EdgeUpdate",
    "EncodedGraph",
    "GraphEncoder",
    "Metanet",
    "MetanetLayer",
    "ResidualNorm",
    "build_metanet",
    "metanet_class",
    "register_metanet",
]
