"""Parameter-budget matching: compare ``k`` output networks against ``k = 1`` at equal size.

Predicting ``k`` networks adds parameters to the decoder; a fair comparison shrinks the
metanetwork's width until metanet + decoder are no larger than the reference model. Counts
come from building the modules, so they cannot drift from the code.

Matched widths are multiples of :data:`WIDTH_MULTIPLE` where the budget allows: matmul kernels
fill their vector lanes in steps of 8, so a width such as 63 (the exact match of GMN 64 at k = 8)
trains slower than 56 or 64 (docs/benchmarks.md, "What OCE costs per step", has the step times
and the parameters this gives up).
"""
from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Mapping, NamedTuple, Optional

from torch import nn

from neuralgraph.graph.spec import GraphSpec
from neuralgraph.nn.encoder import MAX_LAYERS
from neuralgraph.nn.registry import build_metanet, metanet_class

#: Matched widths are multiples of this where the budget allows (module docstring).
WIDTH_MULTIPLE = 8


class BudgetMatch(NamedTuple):
    """The result of :func:`match_budget`.

    Attributes:
        config: the metanet config with the matched ``hidden_dim``.
        params: trainable parameters of metanet + ``WeightDecoder(k)`` at that config.
        reference_params: the same for the reference config and ``reference_k``.
    """
    config: dict[str, Any]  # the metanet config with the matched hidden_dim
    params: int  # trainable parameters of metanet + WeightDecoder(k) at that config
    reference_params: int  # the same for the reference config and reference_k


def count_trainable(module: nn.Module) -> int:
    """The number of trainable parameters (``requires_grad``) of ``module``.

    Args:
        module: any module.

    Returns:
        The count.
    """
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def model_parameters(name: str, cfg: Mapping[str, Any], k: int, max_layers: int = MAX_LAYERS,
                     members: str = "independent", spec: Optional[GraphSpec] = None) -> tuple[int, int]:
    """``(trainable parameters of metanet + WeightDecoder(k, members=members), hidden_dim)`` for
    ``build_metanet(name, spec=spec, **cfg)``.

    Args:
        name: the registry name of the metanet.
        cfg: its constructor arguments.
        k: the decoder's output networks.
        max_layers: the decoder's per-layer scales.
        members: the decoder's ``members`` (:class:`~neuralgraph.nn.heads.WeightDecoder`).
        spec: the data's graph facts, if any.

    Returns:
        ``(parameters, hidden_dim)``.
    """
    metanet = build_metanet(name, spec=spec, **cfg)
    decoder = metanet.decoder(k, max_layers=max_layers, members=members)
    return count_trainable(metanet) + count_trainable(decoder), metanet.hidden_dim


def hidden_dim_step(name: str, cfg: Mapping[str, Any]) -> int:
    """The value ``hidden_dim`` must be a multiple of (e.g. ``num_heads``), 1 if unconstrained.

    Args:
        name: the registry name of the metanet.
        cfg: its constructor arguments (the constraint's value, else its default).

    Returns:
        The step.
    """
    cls = metanet_class(name)
    key = cls.hidden_dim_multiple_of
    if key is None:
        return 1
    return int(cfg.get(key, inspect.signature(cls).parameters[key].default))


def match_budget(
    name: str, cfg: Mapping[str, Any], k: int, reference_k: int = 1, max_layers: int = MAX_LAYERS,
    members: str = "independent", width_multiple: int = WIDTH_MULTIPLE, spec: Optional[GraphSpec] = None,
) -> BudgetMatch:
    """The largest ``hidden_dim`` whose metanet + ``WeightDecoder(k, members=members)`` fits the reference budget.

    The reference is ``build_metanet(name, **cfg)`` with ``WeightDecoder(reference_k)``. Widths are
    multiples of ``lcm(width_multiple, step)``, ``step`` being :attr:`Metanet.hidden_dim_multiple_of`'s
    value; when even that width is over budget, of ``step`` alone (``width_multiple=1`` always
    searches those: the exact match). Metanets are built for ``spec`` where given. Raises
    ValueError when even ``step`` is over budget.

    Args:
        name: the registry name of the metanet.
        cfg: its constructor arguments at the reference width.
        k: the decoder's output networks at the matched width.
        reference_k: the decoder's output networks of the reference.
        max_layers: the decoder's per-layer scales.
        members: the decoder's ``members`` at the matched width.
        width_multiple: the preferred multiple of widths.
        spec: the data's graph facts, if any.

    Returns:
        The :class:`BudgetMatch`.
    """
    reference_params, _ = model_parameters(name, cfg, reference_k, max_layers, spec=spec)
    step = hidden_dim_step(name, cfg)

    def params_at(width: int) -> int:
        return model_parameters(name, {**cfg, "hidden_dim": width}, k, max_layers, members, spec)[0]

    for width_step in dict.fromkeys((math.lcm(width_multiple, step), step)):  # aligned, then exact
        if params_at(width_step) <= reference_params:
            width = width_step * largest_fitting(lambda m: params_at(m * width_step) <= reference_params)
            return BudgetMatch({**cfg, "hidden_dim": width}, params_at(width), reference_params)
    raise ValueError(
        f"{name} with k={k} exceeds the k={reference_k} budget of {reference_params} parameters "
        f"even at hidden_dim={step}"
    )


def largest_fitting(fits: Callable[[int], bool]) -> int:
    """The largest ``m >= 1`` with ``fits(m)``, for ``fits`` true at 1 and monotone (doubling, then bisection).

    Args:
        fits: the monotone predicate.

    Returns:
        The largest ``m``.
    """
    low, high = 1, 2  # fits(low); grow high until it does not
    while fits(high):
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
