"""Parameter-budget matching: compare ``k`` output networks against ``k = 1`` at equal size.

Predicting ``k`` networks adds parameters to the decoder; a fair comparison shrinks the
metanetwork's width until metanet + decoder are no larger than the reference model. Counts
come from building the modules, so they cannot drift from the code.
"""
from __future__ import annotations

import inspect
from typing import Any, Mapping, NamedTuple

from torch import nn

from neuralgraph.nn.encoder import MAX_LAYERS
from neuralgraph.nn.heads import WeightDecoder
from neuralgraph.nn.registry import build_metanet, metanet_class


class BudgetMatch(NamedTuple):
    config: dict[str, Any]  # the metanet config with the matched hidden_dim
    params: int  # trainable parameters of metanet + WeightDecoder(k) at that config
    reference_params: int  # the same for the reference config and reference_k


def count_trainable(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def model_parameters(name: str, cfg: Mapping[str, Any], k: int, max_layers: int = MAX_LAYERS,
                     members: str = "independent") -> tuple[int, int]:
    """``(trainable parameters of metanet + WeightDecoder(k, members=members), hidden_dim)`` for ``build_metanet(name, **cfg)``."""
    metanet = build_metanet(name, **cfg)
    decoder = WeightDecoder(metanet.hidden_dim, k, max_layers=max_layers, scaling=metanet.scaling, members=members)
    return count_trainable(metanet) + count_trainable(decoder), metanet.hidden_dim


def hidden_dim_step(name: str, cfg: Mapping[str, Any]) -> int:
    """The value ``hidden_dim`` must be a multiple of (e.g. ``num_heads``), 1 if unconstrained."""
    cls = metanet_class(name)
    key = cls.hidden_dim_multiple_of
    if key is None:
        return 1
    return int(cfg.get(key, inspect.signature(cls).parameters[key].default))


def match_budget(
    name: str, cfg: Mapping[str, Any], k: int, reference_k: int = 1, max_layers: int = MAX_LAYERS,
    members: str = "independent",
) -> BudgetMatch:
    """The largest ``hidden_dim`` whose metanet + ``WeightDecoder(k, members=members)`` fits the reference budget.

    The reference is ``build_metanet(name, **cfg)`` with ``WeightDecoder(reference_k)``. Widths
    respect :attr:`Metanet.hidden_dim_multiple_of`. Raises ValueError when even the smallest
    width is over budget.
    """
    reference_params, _ = model_parameters(name, cfg, reference_k, max_layers)
    step = hidden_dim_step(name, cfg)

    def params_at(multiple: int) -> int:
        return model_parameters(name, {**cfg, "hidden_dim": multiple * step}, k, max_layers, members)[0]

    if params_at(1) > reference_params:
        raise ValueError(
            f"{name} with k={k} exceeds the k={reference_k} budget of {reference_params} parameters "
            f"even at hidden_dim={step}"
        )
    low, high = 1, 2  # params_at(low) fits; grow high until it does not
    while params_at(high) <= reference_params:
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        if params_at(middle) <= reference_params:
            low = middle
        else:
            high = middle
    config = {**cfg, "hidden_dim": low * step}
    return BudgetMatch(config, params_at(low), reference_params)
