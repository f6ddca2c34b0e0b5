"""State dicts as layer lists: the conversion path for weights without a module.

A state dict has no data flow: its ``<layer>.weight`` keys are taken in order (2-D: Linear,
4-D: Conv2d), and consecutive 2-D weights must chain exactly. Its graph records no
architecture, activations or residual connections.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Mapping, Optional

from torch import Tensor, nn

from neuralgraph.graph.convert.registry import LayerConverter, converter_for
from neuralgraph.graph.schema import GraphConversionError

StateDict = Mapping[str, Tensor]


def state_dict_layers(state_dict: StateDict) -> list[tuple[str, Tensor, Optional[Tensor], LayerConverter]]:
    """Group ``<prefix>.weight``/``<prefix>.bias`` keys in order; infer Linear (2-D) or Conv2d (4-D).

    Args:
        state_dict: ``<layer>.weight``/``<layer>.bias`` keys only, in data-flow order.

    Returns:
        Per layer ``(prefix, weight, bias or None, converter)``.
    """
    groups: OrderedDict[str, dict[str, Tensor]] = OrderedDict()
    for key, value in state_dict.items():
        prefix, _, leaf = key.rpartition(".")
        if leaf not in ("weight", "bias"):
            raise GraphConversionError(f"unexpected key {key!r} in state dict: only '<layer>.weight' and '<layer>.bias'")
        if not isinstance(value, Tensor):
            raise GraphConversionError(f"state dict key {key!r} holds {type(value).__name__}, not a tensor")
        groups.setdefault(prefix, {})[leaf] = value
    layers, previous = [], None
    for prefix, params in groups.items():
        if "weight" not in params:
            raise GraphConversionError(f"state dict has {prefix}.bias but no {prefix}.weight")
        weight = params["weight"]
        kinds = {2: nn.Linear, 4: nn.Conv2d}
        if weight.dim() not in kinds:
            raise GraphConversionError(
                f"state dict key '{prefix}.weight' has shape {tuple(weight.shape)}: expected 2-D (Linear) or 4-D (Conv2d)"
            )
        if weight.dim() == 2 and previous is not None and previous[1].dim() == 2 and weight.shape[1] != previous[1].shape[0]:
            raise GraphConversionError(
                f"state dict key '{prefix}.weight' reads {weight.shape[1]} features but '{previous[0]}.weight' gives "
                f"{previous[1].shape[0]}: keys must follow the data flow"
            )
        layers.append((prefix, weight, params.get("bias"), converter_for(kinds[weight.dim()])))
        previous = (prefix, weight)
    if not layers:
        raise GraphConversionError("state dict is empty")
    return layers
