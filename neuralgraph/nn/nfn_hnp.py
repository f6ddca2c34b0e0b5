r"""HNP-NFN (Zhou et al., 2023, "Permutation Equivariant Neural Functionals"), hidden-neuron group.

The NF-Layer for the hidden-neuron permutation group: each output (a weight or bias of layer
``l``) is a sum over pooled terms, one weight matrix per term, plus one bias, with ReLU between
layers. Input and output neurons are fixed by the group, so terms may depend on their positions
(they are folded into channels, see :mod:`~neuralgraph.nn.equivariant_linear`). This spans the same space
as :mod:`~neuralgraph.nn.dws`; the difference is NFN's parameterisation
(:class:`~neuralgraph.nn.equivariant_linear.TermMixer`, ``parameterisation="terms"``): no block split, no
``1/2L`` normalisation, one bias per output, and the PyTorch-default uniform initialisation with
the fan-in of all terms of an output. Pools are means, as NFN offers, so widths may vary.
"""
from __future__ import annotations

from neuralgraph.nn.equivariant_linear import WeightSpaceMetanet
from neuralgraph.nn.registry import register_metanet


@register_metanet("nfn_hnp")
class NFNHNP(WeightSpaceMetanet):
    """HNP-NFN on the parameter graph."""

    symmetry = "hidden"
    parameterisation = "terms"

