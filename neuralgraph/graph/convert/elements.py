"""Layers that become several node layers and edge groups: normalisations and multi-head attention.

A :class:`~neuralgraph.graph.convert.registry.LayerConverter` turns a layer into one weight
block between the layer it reads and one new node layer. The layers here carry parameters that
belong to neurons (a normalisation's ``gamma``/``beta``) or a structure of their own (attention
heads), so an :class:`ElementConverter` returns an :class:`Element`: new node layers (width and
role), their biases, and edge groups between the layer it reads (``SOURCE``) and its new layers.

**Normalisations** (``LayerNorm``, ``RMSNorm``, ``GroupNorm``): one new node layer of the same
width, neuron ``j`` joined to neuron ``j`` of the layer it normalises by one edge of the norm's
kind holding ``gamma_j``; the node's bias is ``beta_j`` (0 for RMSNorm or ``bias=False``). A
per-feature norm commutes with permuting its features together with ``gamma``/``beta``, and the
one-to-one edges make exactly that the graph's symmetry: the neurons around it keep theirs.
GroupNorm's ``G`` groups are ``G`` group nodes, each channel's normalised neuron a member
(``member`` edge) of its group's node, so channels permute within groups and groups permute
whole. BatchNorm is not here: at inference it is an affine map per channel and
:func:`~neuralgraph.graph.convert.batchnorm.fold_batchnorm` folds it into the layer before it.

**Multi-head attention** (``nn.MultiheadAttention``, ``h`` heads of ``d_h = D / h`` dimensions,
either ``batch_first``): new node layers ``Q``, ``K``, ``V`` (``D`` neurons each, biases the
in-projection's), ``H`` (one node per head) and ``O`` (``D`` output neurons, the out-projection's
bias). Query, key and value weights are edges from the input layer into ``Q``, ``K``, ``V``, the
out-projection's from ``V`` into ``O``; ``pair`` edges join query dimension ``i`` to key
dimension ``i`` (their products make the scores, so they permute jointly) and ``member`` edges
join every ``Q``/``K``/``V`` neuron to its head's node. The graph's automorphisms are then
exactly the attention's permutation symmetries: heads permute (with their ``Q``/``K``/``V``
neurons), within a head the query/key dimensions permute jointly and the value dimensions with
the out-projection's columns. The scaling ``1/sqrt(d_h)`` and the softmax are the
architecture's (``graph.architecture``).

A *positional embedding*, a parameter added to the tokens outside any layer, is an element of
the walk (:mod:`~neuralgraph.graph.convert.trace`): ``T`` ordered token-position nodes, each
joined to every channel by a ``position`` edge holding its embedding (it is a linear map of
one-hot positions).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor, nn

from neuralgraph.graph.convert.registry import register_converter
from neuralgraph.graph.schema import (
    ATTENTION_OUTPUT_EDGE,
    GROUP_NORM_EDGE,
    KEY_EDGE,
    LAYER_NORM_EDGE,
    MEMBER_EDGE,
    PAIR_EDGE,
    QUERY_EDGE,
    RMS_NORM_EDGE,
    VALUE_EDGE,
    GraphConversionError,
)

#: In an :class:`EdgeGroup`, the node layer the element reads (``k >= 0``: the element's ``k``-th new layer).
SOURCE = -1
#: Roles of an element's node layers, which are hidden neurons, group nodes (heads, groups) or ordered positions.
ROLES = ("hidden", "group", "position")


@dataclass
class EdgeGroup:
    """Edges of one kind from node layer ``source`` to node layer ``target`` (see :data:`SOURCE`).

    ``pattern``: ``"full"`` (features ``[d_t, d_s, f]``, one edge per pair, row-major),
    ``"diagonal"`` (``[d, f]``, neuron ``j`` to neuron ``j``) or ``"assign"`` (``[d_s, f]``,
    neuron ``j`` to neuron ``assign[j]``).

    Attributes:
        kind: the edge kind (:data:`~neuralgraph.graph.schema.EDGE_KINDS` code).
        source: the node layer the edges leave, within the element (:data:`SOURCE`: the layer it reads).
        target: the node layer they enter, within the element.
        pattern: ``"full"``, ``"diagonal"`` or ``"assign"``.
        features: the edges' features, shaped by ``pattern``.
        assign: ``[d_s]`` target of each source neuron, for ``"assign"``.
    """

    kind: int
    source: int
    target: int
    pattern: str
    features: Tensor
    assign: Optional[Tensor] = None

    def endpoints(self, d_source: int, d_target: int) -> tuple[Tensor, Tensor]:
        """``(source index, target index)`` within the two layers, in storage order."""
        if self.pattern == "full":
            return torch.arange(d_source).repeat(d_target), torch.arange(d_target).repeat_interleave(d_source)
        if self.pattern == "diagonal":
            return torch.arange(d_source), torch.arange(d_source)
        return torch.arange(d_source), self.assign.cpu()

    def rows(self) -> Tensor:
        """Features ``[edges, f]`` in storage order."""
        return self.features.reshape(-1, self.features.shape[-1])


@dataclass
class Element:
    """What one element adds to the graph: node layers (``widths``, ``roles``, ``biases``) and edge groups.

    Attributes:
        widths: neurons of each new node layer.
        roles: the role of each new node layer, one of :data:`ROLES`.
        biases: per new node layer, the biases of its neurons.
        groups: the element's edge groups.
    """

    widths: list[int]
    roles: list[str]
    biases: list[Tensor]
    groups: list[EdgeGroup] = field(default_factory=list)


class ElementConverter(abc.ABC):
    """A layer that becomes an :class:`Element`. Subclass and register with ``@register_converter(LayerType)``."""

    #: where the layer expects its features, ``"last"`` (tokens, ``[..., D]``) or ``"channels"`` (dim 1)
    feature_axis = "last"
    #: which of its new node layers holds its output neurons
    output = -1

    @abc.abstractmethod
    def layers(self, module: nn.Module) -> list[tuple[int, str]]:
        """``(width, role)`` of each new node layer (shapes only: runs on ``meta`` modules)."""

    @abc.abstractmethod
    def in_width(self, module: nn.Module) -> int:
        """The number of features the layer reads."""

    @abc.abstractmethod
    def element(self, module: nn.Module) -> Element:
        """The element of ``module``'s parameters."""

    @abc.abstractmethod
    def load(self, module: nn.Module, biases: list[Tensor], features: list[Tensor]) -> None:
        """Write the biases of the new layers and each edge group's features (as :meth:`element`
        orders them, shapes as in its groups) into ``module``; values it has no parameter for
        must be the identity's (``gamma`` 1, biases 0)."""

    def describe(self, module: nn.Module) -> str:
        return f"{type(module).__name__}({module.extra_repr()})"


def _ones(n: int, like: Tensor) -> Tensor:
    return like.new_ones(n, 1)


def _must_equal(value: Tensor, expected: float, what: str) -> None:
    if not bool((value == expected).all()):
        raise GraphConversionError(f"the graph's {what} are not all {expected}, but the template has none")


class _Norm(ElementConverter):
    """A per-feature normalisation ``y_j = gamma_j n(x)_j + beta_j`` with optional ``gamma``/``beta``."""

    kind: int

    def gamma_beta(self, module: nn.Module) -> tuple[Optional[Tensor], Optional[Tensor]]:
        return module.weight, getattr(module, "bias", None)

    def layers(self, module):
        return [(self.in_width(module), "hidden")]

    def element(self, module):
        gamma, beta = self.gamma_beta(module)
        width = self.in_width(module)
        ref = next((t for t in (gamma, beta) if t is not None), None)
        dtype = ref.dtype if ref is not None else torch.get_default_dtype()
        device = ref.device if ref is not None else None
        gamma = torch.ones(width, dtype=dtype, device=device) if gamma is None else gamma.detach()
        beta = torch.zeros(width, dtype=dtype, device=device) if beta is None else beta.detach()
        return Element([width], ["hidden"], [beta], [EdgeGroup(self.kind, SOURCE, 0, "diagonal", gamma.reshape(width, 1))])

    def load(self, module, biases, features):
        gamma, beta = self.gamma_beta(module)
        with torch.no_grad():
            if gamma is None:
                _must_equal(features[0], 1.0, "gamma")
            else:
                gamma.copy_(features[0][:, 0])
            if beta is None:
                _must_equal(biases[0], 0.0, "beta (biases)")
            else:
                beta.copy_(biases[0])


@register_converter(nn.LayerNorm)
class LayerNormConverter(_Norm):
    """``nn.LayerNorm(D)`` over the last axis (tokens or an MLP's features)."""

    kind = LAYER_NORM_EDGE

    def in_width(self, module):
        if len(module.normalized_shape) != 1:
            raise GraphConversionError(
                f"LayerNorm over {tuple(module.normalized_shape)}: only a norm over one feature axis (the neurons) "
                "is a graph element")
        return module.normalized_shape[0]


@register_converter(nn.RMSNorm)
class RMSNormConverter(LayerNormConverter):
    """``nn.RMSNorm(D)``: ``gamma`` only, its nodes' biases 0."""

    kind = RMS_NORM_EDGE

    def gamma_beta(self, module):
        return module.weight, None


@register_converter(nn.GroupNorm)
class GroupNormConverter(_Norm):
    """``nn.GroupNorm(G, C)`` on channels (dim 1): the norm layer plus ``G`` group nodes."""

    kind = GROUP_NORM_EDGE
    feature_axis = "channels"
    output = 0  # the normalised channels; the group nodes after them only gather their members

    def in_width(self, module):
        return module.num_channels

    def layers(self, module):
        return [(module.num_channels, "hidden"), (module.num_groups, "group")]

    def element(self, module):
        norm = super().element(module)
        C, G = module.num_channels, module.num_groups
        assign = torch.arange(C) // (C // G)
        norm.widths.append(G)
        norm.roles.append("group")
        norm.biases.append(norm.biases[0].new_zeros(G))
        norm.groups.append(EdgeGroup(MEMBER_EDGE, 0, 1, "assign", _ones(C, norm.biases[0]), assign))
        return norm


@register_converter(nn.MultiheadAttention)
class MultiheadAttentionConverter(ElementConverter):
    """``nn.MultiheadAttention`` as self-attention (the walk refuses other key/value inputs): see the module docstring."""

    def _check(self, module: nn.MultiheadAttention) -> None:
        if module.bias_k is not None or module.add_zero_attn:
            raise GraphConversionError("MultiheadAttention with add_bias_kv or add_zero_attn: the extra key/value "
                                       "tokens are not graph elements")

    def in_width(self, module):
        self._check(module)
        return module.embed_dim

    def layers(self, module):
        D = self.in_width(module)
        return [(D, "hidden"), (D, "hidden"), (D, "hidden"), (module.num_heads, "group"), (D, "hidden")]

    def element(self, module):
        self._check(module)
        D, h = module.embed_dim, module.num_heads
        weight = module.in_proj_weight.detach()
        in_bias = weight.new_zeros(3 * D) if module.in_proj_bias is None else module.in_proj_bias.detach()
        out_bias = module.out_proj.bias
        out_bias = weight.new_zeros(D) if out_bias is None else out_bias.detach()
        q, k, v = weight.view(3, D, D, 1)
        head = torch.arange(D) // (D // h)
        ones = _ones(D, weight)
        groups = [EdgeGroup(QUERY_EDGE, SOURCE, 0, "full", q), EdgeGroup(KEY_EDGE, SOURCE, 1, "full", k),
                  EdgeGroup(VALUE_EDGE, SOURCE, 2, "full", v), EdgeGroup(PAIR_EDGE, 0, 1, "diagonal", ones)]
        groups += [EdgeGroup(MEMBER_EDGE, layer, 3, "assign", ones, head) for layer in range(3)]
        groups.append(EdgeGroup(ATTENTION_OUTPUT_EDGE, 2, 4, "full", module.out_proj.weight.detach().view(D, D, 1)))
        biases = list(in_bias.view(3, D)) + [weight.new_zeros(h), out_bias]
        return Element([D, D, D, h, D], ["hidden", "hidden", "hidden", "group", "hidden"], biases, groups)

    def load(self, module, biases, features):
        D = module.embed_dim
        with torch.no_grad():
            module.in_proj_weight.copy_(torch.cat([features[i].reshape(D, D) for i in range(3)]))
            in_bias = torch.cat(biases[:3])
            if module.in_proj_bias is None:
                _must_equal(in_bias, 0.0, "query/key/value biases")
            else:
                module.in_proj_bias.copy_(in_bias)
            module.out_proj.weight.copy_(features[-1].reshape(D, D))
            if module.out_proj.bias is None:
                _must_equal(biases[4], 0.0, "output biases")
            else:
                module.out_proj.bias.copy_(biases[4])

    def describe(self, module):
        return (f"MultiheadAttention(embed_dim={module.embed_dim}, num_heads={module.num_heads}, "
                f"batch_first={module.batch_first}, bias={module.in_proj_bias is not None}, dropout={module.dropout})")
