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
    """HNP-NFN on the parameter graph.

    The layers follow NFN's parameterisation (``"terms"``), equivariant to permutations of
    hidden neurons.

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
    parameterisation = "terms"
    reference_config = {"hidden_dim": 32, "num_layers": 4, "dropout": 0.0}
    # the parameter count grows with the width squared times the edge features: coarse steps
    budget_tolerance = 0.10

