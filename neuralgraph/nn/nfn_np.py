r"""NP-NFN (Zhou et al., 2023, "Permutation Equivariant Neural Functionals"), the NP group.

The NF-Layer for the larger group that permutes every layer's neurons, inputs and outputs
included. Every layer ``0..L`` is a permuted set, so each output reads the edge, the states and
incoming/outgoing edge means of its end neurons and the per-layer means of the graph (see
:mod:`~neuralgraph.nn.equivariant_linear`), with NFN's parameterisation (one matrix per term, one bias).
The encoder uses ``positional="layer"`` so that no input or output neuron is told apart, and
the whole model is equivariant to the NP group; it reads any widths, inputs and outputs
included, of one depth.
"""
from __future__ import annotations

from neuralgraph.nn.equivariant_linear import WeightSpaceMetanet
from neuralgraph.nn.registry import register_metanet


@register_metanet("nfn_np")
class NFNNP(WeightSpaceMetanet):
    """NP-NFN on the parameter graph."""

    symmetry = "np"
    parameterisation = "terms"
