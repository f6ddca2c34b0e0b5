r"""DWS (Navon et al., 2023, "Equivariant Architectures for Learning in Deep Weight Spaces").

Linear layers equivariant to permutations of hidden neurons, stacked with ReLU. The space of
such layers is the same as HNP-NFN's (:mod:`~neuralgraph.nn.nfn_hnp`); what differs is the
published parameterisation, which this module follows (see
:class:`~neuralgraph.nn.equivariant_linear.TermMixer`, ``parameterisation="blocks"``):

* the layer is a sum of blocks by input kind, weights-to-``*`` and biases-to-``*``, each block with its
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
    """DWS on the parameter graph.

    The layers follow DWS's parameterisation (``"blocks"``; module docstring), equivariant to
    permutations of hidden neurons.

    Args:
        hidden_dim: channels of every weight and bias (node and edge features).
        num_layers: number of :class:`~neuralgraph.nn.equivariant_linear.EquivariantLinear` layers
            (ReLU between them, none after the last).
        dropout: dropout probability after each activation.
        num_weight_layers: depth ``L`` of the networks read; every graph must have exactly ``L``
            weight layers, and the layers' per-layer parameters are sized for it. (default: ``3``,
            the project's INRs; ``build_metanet(..., spec=spec)`` fills it in)
        max_inputs: input neurons whose positions the layers tell apart, at least the networks'
            input width. (default: ``None``, ``2``; ``build_metanet(..., spec=spec)`` fills it in)
        max_outputs: output neurons whose positions the layers tell apart. (default: ``None``, ``1``)
        **encoder_options: keyword-only, passed on to :class:`~neuralgraph.nn.base.Metanet`, which
            documents each: ``edge_features``, ``positional``, ``fourier_features``, ``fourier_scale``,
            ``max_layers``, ``max_node_types``, ``probe_features``, ``gradient_features``, ``network_activation``,
            ``w0``, ``node_activations``, ``skip_edges`` (the encoder's) and ``checkpoint``;
            ``edge_chunk`` is accepted and has no effect (the layers run whole), ``edge_dtype`` is refused.
    """

    symmetry = "hidden"
    parameterisation = "blocks"
    reference_config = {"hidden_dim": 32, "num_layers": 4, "dropout": 0.0}
    # the parameter count grows with the width squared times the edge features: coarse steps
    budget_tolerance = 0.10

