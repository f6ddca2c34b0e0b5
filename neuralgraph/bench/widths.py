"""The benchmarks' parameter budget: every system at the width whose parameter count is nearest a reference's.

The tables compare systems at one budget, GMN's at hidden 64 and 3 layers (:data:`REFERENCE`).
:func:`matched_width` searches the width with :mod:`neuralgraph.nn.budget` (its width steps and
its search), counting what a benchmark trains: by default the metanetwork and a k = 1
``WeightDecoder``; a task with a readout counts it instead (:func:`readout_parameters`).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Optional, Sequence

#: The depth every system of the budget-matched protocols runs at.
CPU_DEPTH = {"num_layers": 3, "dropout": 0.0}
#: The budget every system is matched to, GMN at hidden 64.
REFERENCE = ("gmn", {"hidden_dim": 64, **CPU_DEPTH})
BUDGET_TOLERANCE = 0.05

Count = Callable[[str, dict], int]


def budget_options(metanet: str) -> dict:
    """The options beside the width a registered metanetwork or baseline runs with in the budget-matched
    protocols (its declared :attr:`~neuralgraph.nn.base.Metanet.budget_options`).

    Args:
        metanet: a registered name.

    Returns:
        A copy of the declared options (e.g. ``{"num_heads": 2}``).
    """
    from neuralgraph.nn.registry import metanet_class

    return dict(metanet_class(metanet).budget_options)


def budget_tolerance(metanet: str) -> float:
    """How far (relative) from a budget the nearest width of ``metanet`` may land (its declared
    :attr:`~neuralgraph.nn.base.Metanet.budget_tolerance`).

    Args:
        metanet: a registered name.

    Returns:
        The relative tolerance.
    """
    from neuralgraph.nn.registry import metanet_class

    return metanet_class(metanet).budget_tolerance


@functools.lru_cache(maxsize=None)
def inr_spec():
    """The :class:`~neuralgraph.graph.spec.GraphSpec` of the INR benchmarks' data, SIRENs of DWS MNIST's
    convention, which their models are built for (NG-GNN's degree histogram, the probe features' ``w0``).

    Returns:
        The spec (of one network; a one-layout set's spec does not depend on how many were read).
    """
    import torch

    from neuralgraph.graph import GraphSpec, mlp_to_graph
    from neuralgraph.inr import DWS_MNIST

    layout = DWS_MNIST.layout
    graph = mlp_to_graph([torch.zeros(d_out, d_in) for d_in, d_out in zip(layout, layout[1:])],
                         [torch.zeros(d_out) for d_out in layout[1:]])
    return GraphSpec.of(graph, convention=DWS_MNIST.to_dict())


def plan_order(names: Sequence[str], metanet_of: Callable[[str], str] = lambda name: name) -> tuple[str, ...]:
    """``names`` in the order the benchmark plans run them: the declared ``slow`` architectures last.

    Args:
        names: systems, in registry order.
        metanet_of: the registered metanetwork or baseline a system runs.

    Returns:
        The systems, the fast ones first, each group in the given order.
    """
    from neuralgraph.nn.registry import metanet_class

    return tuple(sorted(names, key=lambda name: metanet_class(metanet_of(name)).slow))


def matched_width(name: str, metanet: str, options: Mapping[str, Any], target: int,
                  tolerance: Optional[float] = None, count: Optional[Count] = None) -> dict:
    """:data:`CPU_DEPTH` + ``options`` at the ``hidden_dim`` whose parameter count is nearest ``target``.

    Widths respect the metanetwork's ``hidden_dim_multiple_of``; of the largest width at or under
    ``target`` and the next one, the nearer.

    Args:
        name: the system, named by the error.
        metanet: the registered metanetwork or baseline it runs.
        options: its options besides the width and :data:`CPU_DEPTH` (which they override).
        target: the parameter budget.
        tolerance: how far (relative) from ``target`` the nearest width may land; None for the
            metanetwork's declared :func:`budget_tolerance`.
        count: ``count(metanet, config)`` counts a model's parameters; None for the metanetwork
            and a k = 1 ``WeightDecoder`` (:func:`~neuralgraph.nn.budget.model_parameters`), built for
            the INR benchmarks' data (:func:`inr_spec`).

    Returns:
        The config, :data:`CPU_DEPTH` and ``options`` with the matched ``hidden_dim``.

    Raises:
        ValueError: naming ``name``, when the nearest width is more than ``tolerance`` away.
    """
    from neuralgraph.nn.budget import hidden_dim_step, largest_fitting, model_parameters

    tolerance = budget_tolerance(metanet) if tolerance is None else tolerance
    config = {**CPU_DEPTH, **options}
    step = hidden_dim_step(metanet, config)
    counted: dict[int, int] = {}

    def params(multiple: int) -> int:
        if multiple not in counted:
            sized = {**config, "hidden_dim": multiple * step}
            counted[multiple] = (count(metanet, sized) if count
                                 else model_parameters(metanet, sized, 1, spec=inr_spec())[0])
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
    prediction): the metanetwork built for ``spec`` and its ``readout(outputs)``.

    Args:
        metanet: the registered metanetwork or baseline.
        config: its constructor options.
        outputs: the readout's outputs (classes, or 1 for a regression).
        spec: the :class:`~neuralgraph.graph.spec.GraphSpec` of the data; ``None``: the INR benchmarks'
            (:func:`inr_spec`).

    Returns:
        The number of trainable parameters of both.
    """
    from neuralgraph.nn import build_metanet
    from neuralgraph.nn.budget import count_trainable

    model = build_metanet(metanet, spec=inr_spec() if spec is None else spec, **config)
    return count_trainable(model) + count_trainable(model.readout(outputs))
