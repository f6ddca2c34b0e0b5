"""The benchmarks' parameter budget: every system at the width whose parameter count is nearest a reference's.

The tables compare systems at one budget, GMN's at hidden 64 and 3 layers (:data:`REFERENCE`).
:func:`matched_width` searches the width with :mod:`neuralgraph.nn.budget` (its width steps and
its search), counting what a benchmark trains: by default the metanetwork and a k = 1
``WeightDecoder``; a task with a readout counts it instead (:func:`readout_parameters`).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

# The depth every system of the budget-matched protocols runs at.
CPU_DEPTH = {"num_layers": 3, "dropout": 0.0}
# Options beside the width of a registered metanetwork in those protocols. Two attention heads: widths then
# move in steps of 2, fine enough to land within 5% of the budget.
CPU_OPTIONS = {"ng_t": {"num_heads": 2}, "nft": {"num_heads": 2}}
# The budget every system is matched to: GMN at hidden 64.
REFERENCE = ("gmn", {"hidden_dim": 64, **CPU_DEPTH})
BUDGET_TOLERANCE = 0.05

Count = Callable[[str, dict], int]


def matched_width(name: str, metanet: str, options: Mapping[str, Any], target: int,
                  tolerance: float = BUDGET_TOLERANCE, count: Optional[Count] = None) -> dict:
    """:data:`CPU_DEPTH` + ``options`` at the ``hidden_dim`` whose parameter count is nearest ``target``.

    ``count(metanet, config)`` counts a model's parameters (default: metanet + k = 1 ``WeightDecoder``,
    ``neuralgraph.nn.budget.model_parameters``). Widths respect the metanetwork's
    ``hidden_dim_multiple_of``; of the largest width at or under ``target`` and the next one, the
    nearer. ValueError naming the system (``name``) when that is more than ``tolerance`` (relative) away.
    """
    from neuralgraph.nn.budget import hidden_dim_step, largest_fitting, model_parameters

    config = {**CPU_DEPTH, **options}
    step = hidden_dim_step(metanet, config)
    counted: dict[int, int] = {}

    def params(multiple: int) -> int:
        if multiple not in counted:
            sized = {**config, "hidden_dim": multiple * step}
            counted[multiple] = count(metanet, sized) if count else model_parameters(metanet, sized, 1)[0]
        return counted[multiple]

    below = largest_fitting(lambda multiple: params(multiple) <= target)
    best = min((below, below + 1), key=lambda multiple: abs(params(multiple) - target))
    found = params(best)
    if abs(found - target) > tolerance * target:
        raise ValueError(f"{name}: no hidden_dim gives {target:,} parameters within {tolerance:.0%} "
                         f"(nearest: {found:,} at hidden_dim={best * step})")
    return {**config, "hidden_dim": best * step}


def readout_parameters(metanet: str, config: Mapping[str, Any], outputs: int, spec=None) -> int:
    """Trainable parameters of a task's model that reads a metanetwork out (classification, generalization
    prediction): the metanetwork built for ``spec`` (a ``GraphSpec``, None: the MLP default) and its
    ``readout(outputs)``."""
    from neuralgraph.nn import build_metanet
    from neuralgraph.nn.budget import count_trainable

    model = build_metanet(metanet, spec=spec, **config)
    return count_trainable(model) + count_trainable(model.readout(outputs))
