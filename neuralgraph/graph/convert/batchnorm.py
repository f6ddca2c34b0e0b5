"""BatchNorm is folded into the layer before it, not represented in the graph.

``module_to_graph`` folds an eval-mode module's BatchNorms itself (a module in training mode is
refused: its normalisation uses batch statistics), and ``graph_to_module`` with a BatchNorm
template writes the folded weights into the layers and makes each BatchNorm the identity plus
the folded bias (:func:`unfold_into`), so the template's own module type comes back.

At inference a ``BatchNorm`` after a convolution (or a ``Linear``) is an affine map per output
channel, ``y = gamma (conv(x) - mu) / sqrt(var + eps) + beta``, so it is absorbed into the
convolution: ``W' = W gamma / sqrt(var + eps)`` (per output channel) and
``b' = (b - mu) gamma / sqrt(var + eps) + beta``. :func:`fold_batchnorm` traces the module with
``torch.fx.symbolic_trace``, replaces each such pair by ``torch.nn.utils.fuse_conv_bn_eval`` (or
``fuse_linear_bn_eval``) and returns a module of plain convolutions whose parameter graph
``module_to_graph`` reads; the folded module computes the original's eval-mode output up to float
rounding. The running statistics are not node features: a graph of the folded network is the
graph of the function the network computes at inference.
"""
from __future__ import annotations

import copy

from typing import Optional

import torch
from torch import fx, nn
from torch.nn.utils import fuse_conv_bn_eval, fuse_linear_bn_eval

from neuralgraph.graph.schema import GraphConversionError

_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
_FOLDS = {(nn.Conv1d, (nn.BatchNorm1d, nn.SyncBatchNorm)): fuse_conv_bn_eval,
          (nn.Conv2d, (nn.BatchNorm2d, nn.SyncBatchNorm)): fuse_conv_bn_eval,
          (nn.Conv3d, (nn.BatchNorm3d, nn.SyncBatchNorm)): fuse_conv_bn_eval,
          (nn.Linear, nn.BatchNorm1d): fuse_linear_bn_eval}


def has_batchnorm(module: nn.Module) -> bool:
    """Whether ``module`` contains a BatchNorm layer (which :func:`fold_batchnorm` folds).

    Args:
        module: any module.

    Returns:
        ``True`` if one of its submodules is a ``BatchNorm1d``/``2d``.
    """
    return any(isinstance(sub, _NORMS) for sub in module.modules())


def _fuse(module: nn.Module, pairs: Optional[list[tuple[str, str]]] = None) -> fx.GraphModule:
    """The traced copy of ``module`` with each BatchNorm that alone reads a layer's output folded
    into it; ``pairs`` collects ``(layer, norm)`` qualified names."""
    traced = fx.symbolic_trace(copy.deepcopy(module))
    modules = dict(traced.named_modules())
    for node in list(traced.graph.nodes):
        layer = node.args[0] if node.op == "call_module" and node.args else None
        if not isinstance(layer, fx.Node) or layer.op != "call_module" or len(layer.users) > 1:
            continue
        norm = modules[node.target]
        fold = next((f for (layer_type, norm_type), f in _FOLDS.items()
                     if type(modules[layer.target]) is layer_type and isinstance(norm, norm_type)), None)
        if fold is None or not norm.track_running_stats:
            continue
        parent, _, name = layer.target.rpartition(".")
        modules[layer.target] = fold(modules[layer.target], norm)
        setattr(modules[parent], name, modules[layer.target])
        if pairs is not None:
            pairs.append((layer.target, node.target))
        node.replace_all_uses_with(layer)
        traced.graph.erase_node(node)
    return fx.GraphModule(traced, traced.graph)


def fold_batchnorm(module: nn.Module) -> nn.Module:
    """A copy of ``module`` (in eval mode) with every ``BatchNorm`` folded into the convolution (or
    ``Linear``) before it.

    Errors: a module in training mode (folding uses the running statistics), one that
    ``torch.fx`` cannot trace, and a BatchNorm that does not read a layer's output directly
    (after an activation, pooling or a merge) or tracks no running statistics.

    Args:
        module: a module in eval mode.

    Returns:
        The folded copy, in eval mode (``module`` itself is not changed).
    """
    if module.training:
        raise GraphConversionError(f"{type(module).__name__} is in training mode: BatchNorm is folded with its "
                                   "running statistics at inference; call .eval() first")
    for name, sub in module.named_modules():
        if isinstance(sub, _NORMS) and not sub.track_running_stats:
            raise GraphConversionError(f"layer {name!r} ({type(sub).__name__}) tracks no running statistics: "
                                       "it normalises with batch statistics, which no fixed weights reproduce")
    try:
        folded = _fuse(module)
    except Exception as err:  # fx raises TraceError, TypeError, NotImplementedError, ...
        raise GraphConversionError(f"{type(module).__name__}: torch.fx cannot trace forward ({err})") from err
    left = [name for name, sub in folded.named_modules() if isinstance(sub, _NORMS)]
    if left:
        raise GraphConversionError(f"layer {left[0]!r} ({type(folded.get_submodule(left[0])).__name__}) does not "
                                   "directly follow a convolution or Linear, so it cannot be folded into one")
    return folded.eval()


def unfold_into(template: nn.Module, folded: nn.Module) -> nn.Module:
    """A copy of ``template`` computing what ``folded`` (its folded form, see :func:`fold_batchnorm`) computes.

    Each folded layer's weight goes into the template's layer; the BatchNorm after it becomes
    the identity (``gamma`` 1, running mean 0, running variance ``1 - eps``) and the folded bias
    goes into its ``beta`` (the layer's own bias, if any, 0), or, without ``beta``, into the layer's bias.

    Args:
        template: the module with its BatchNorm layers.
        folded: parameters in the folded form, e.g. read from a graph.

    Returns:
        The new module.
    """
    pairs: list[tuple[str, str]] = []
    _fuse(template, pairs)
    result = copy.deepcopy(template)
    with torch.no_grad():
        for layer_name, norm_name in pairs:
            layer, norm, fused = (result.get_submodule(layer_name), result.get_submodule(norm_name),
                                  folded.get_submodule(layer_name))
            layer.weight.copy_(fused.weight)
            norm.running_mean.zero_()
            norm.running_var.fill_(1 - norm.eps)
            if norm.affine:
                norm.weight.fill_(1)
                norm.bias.copy_(fused.bias)
                if layer.bias is not None:
                    layer.bias.zero_()
            elif layer.bias is not None:
                layer.bias.copy_(fused.bias)
            elif bool((fused.bias != 0).any()):
                raise GraphConversionError(f"layers {layer_name!r} and {norm_name!r} have no bias to hold the "
                                           "graph's biases of their neurons")
        for name, param in folded.named_parameters():  # every layer not followed by a BatchNorm
            if name.rpartition(".")[0] not in {layer for layer, _ in pairs}:
                result.get_parameter(name).copy_(param)
    return result.eval()
