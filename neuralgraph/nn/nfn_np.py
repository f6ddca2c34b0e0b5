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
    """NP-NFN on the parameter graph.

    The layers follow NFN's parameterisation (``"terms"``), equivariant to permutations of
    every layer's neurons (inputs and outputs included); the encoder uses ``positional="layer"``.

    Args:
        hidden_dim: channels of every weight and bias (node and edge features).
        num_layers: number of :class:`~neuralgraph.nn.equivariant_linear.EquivariantLinear` layers
            (ReLU between them, none after the last).
        dropout: dropout probability after each activation.
        num_weight_layers: depth ``L`` of the networks read; every graph must have exactly ``L``
            weight layers, and the layers' per-layer parameters are sized for it. (default: ``3``,
            the project's INRs; ``build_metanet(..., spec=spec)`` fills it in)
        max_inputs: ``None`` or ``0``: the NP group permutes input neurons, so no input position
            is told apart (another value is refused).
        max_outputs: ``None`` or ``0``, likewise for output neurons.
        **encoder_options: keyword-only, passed on to :class:`~neuralgraph.nn.base.Metanet`, which
            documents each: ``edge_features``, ``positional``, ``fourier_features``, ``fourier_scale``,
            ``max_layers``, ``max_node_types``, ``probe_features``, ``gradient_features``, ``network_activation``,
            ``w0``, ``node_activations``, ``skip_edges`` (the encoder's) and ``checkpoint``;
            ``edge_chunk`` is accepted and has no effect (the layers run whole), ``edge_dtype`` is refused.
    """

    symmetry = "np"
    parameterisation = "terms"
    reference_config = {"hidden_dim": 32, "num_layers": 4, "dropout": 0.0}
