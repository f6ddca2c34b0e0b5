"""Metanetworks: permutation-equivariant networks that read the parameter graphs of other networks.

Importing this package registers every architecture in :data:`METANETS`.
"""
from neuralgraph.nn.base import EdgeUpdate, FeedForward, FiLM, Metanet, MetanetLayer, ResidualNorm
from neuralgraph.nn.context import GraphContext, LayerIndex
from neuralgraph.nn.encoder import EncodedGraph, EncoderOptions, GraphEncoder
from neuralgraph.nn.registry import BASELINES, METANETS, build_metanet, metanet_class, register_baseline, register_metanet
from neuralgraph.nn.heads import InvariantReadout, WeightDecoder
from neuralgraph.nn.ensemble import merge_ensemble
from neuralgraph.nn.budget import BudgetMatch, match_budget

# Architectures register themselves on import.
from neuralgraph.nn import gmn, ng_gnn, ng_t, nft  # noqa: E402,F401  isort: skip
from neuralgraph.nn import dws  # noqa: E402,F401  isort: skip
from neuralgraph.nn import nfn_hnp  # noqa: E402,F401  isort: skip
from neuralgraph.nn import nfn_np  # noqa: E402,F401  isort: skip
from neuralgraph.nn import scalegmn  # noqa: E402,F401  isort: skip
from neuralgraph.nn import statnn  # noqa: E402,F401  isort: skip  (a baseline: BASELINES)
from neuralgraph.nn import probegen  # noqa: E402,F401  isort: skip  (baselines: BASELINES)

__all__ = [
    "BASELINES",
    "METANETS",
    "BudgetMatch",
    "EdgeUpdate",
    "EncodedGraph",
    "EncoderOptions",
    "FeedForward",
    "FiLM",
    "GraphContext",
    "GraphEncoder",
    "InvariantReadout",
    "LayerIndex",
    "Metanet",
    "MetanetLayer",
    "ResidualNorm",
    "WeightDecoder",
    "build_metanet",
    "match_budget",
    "merge_ensemble",
    "metanet_class",
    "register_baseline",
    "register_metanet",
]
