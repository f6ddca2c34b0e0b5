r"""DWS (Navon et al., 2023, "Equivariant Architectures for Learning in Deep Weight Spaces").

Linear layers equivariant to permutations of hidden neurons, stacked with ReLU. The space of
such layers is the same as HNP-NFN's (:mod:`~neuralgraph.nn.nfn_hnp`); what differs is the
published parameterisation, which this module follows (see
:class:`~neuralgraph.nn.equivariant_linear.TermMixer`, ``parameterisation="blocks"``):

* the layer is a sum of blocks by input kind, weights-to-* and biases-to-*, each block with its
  own matrices and bias;
* the block outputs are summed and normalised by the number of parameter matrices, ``2L``;
* DWS's initialisation (Xavier normal scaled by :math:`\sqrt{2\,\text{fan-in}/\text{fan-out}}`, bias
  near zero).

DWS pools with ``max`` by default; here every pool is a mean (see
:mod:`~neuralgraph.nn.equivariant_linear`), which keeps the layer linear, so it spans exactly the
equivariant space, and lets one model read networks of different widths.
"""
from __future__ import annotations

from neuralgraph.nn.equivariant_linear import WeightSpaceMetanet
from neuralgraph.nn.registry import register_metanet


@register_metanet("dws")
class DWS(WeightSpaceMetanet):
    """DWS on the parameter graph."""

    symmetry = "hidden"
    parameterisation = "blocks"

