"""FLOPs per prediction: what one network's prediction costs a model, counted on a real batch.

:func:`flops_per_prediction` runs a model's forward on a batch under ``torch.utils.flop_counter``'s
``FlopCounterMode`` and divides by the batch's networks. ``FlopCounterMode`` counts the operations
that carry the arithmetic, matrix products (``mm``, ``addmm``, ``bmm``, ``einsum`` through them),
convolutions (transposed ones included) and attention, at 2 FLOPs per multiply-add; element-wise
operations, gathers and scatters are not counted. Work done once per batch is shared by its
networks, so the count is that of a batch of the size given; work a model does once and keeps (the
modules a probing baseline rebuilds, traced; its probes, made once in eval mode) is left out by a
first, uncounted pass.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from neuralgraph.nn.base import Metanet


def flops_per_prediction(model: nn.Module, batch: Any, out_dim: int = 1) -> float:
    """FLOPs of ``model``'s forward on ``batch`` (eval mode, no autograd), per network of the batch.

    ``model``: a task (a module whose forward takes the batch, as every
    :class:`~neuralgraph.training.tasks.MetanetTask` does: metanetwork, head and, for INR editing, the
    rendering of its output INRs) or a :class:`~neuralgraph.nn.base.Metanet` (any registered
    metanetwork or baseline), counted with its readout to ``out_dim`` outputs. ``batch``: an
    :class:`~neuralgraph.data.inr_dataset.InrBatch` or :class:`~neuralgraph.data.cnn_zoo.ZooBatch`
    (its ``graph``, ``blocks``, ``facts`` and ``size``). The model's training mode is restored afterwards.

    Args:
        model: the task or metanetwork.
        batch: the networks to predict for.
        out_dim: the readout's outputs when ``model`` is a metanetwork.

    Returns:
        The counted FLOPs divided by ``batch.size``.
    """
    size = int(batch.size)
    if size < 1:
        raise ValueError(f"flops_per_prediction: the batch has {size} networks")
    readout = None
    if isinstance(model, Metanet):
        parameter = next(model.parameters(), None)
        readout = model.readout(out_dim)
        if parameter is not None:
            readout = readout.to(device=parameter.device, dtype=parameter.dtype)
    def predict() -> None:
        if readout is None:
            model(batch)
            return
        context = model.context(batch.graph, getattr(batch, "blocks", None), getattr(batch, "facts", None))
        node, edge = model(batch.graph, context)
        readout(batch.graph, node, edge, context)

    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            predict()  # uncounted: what a model makes once and keeps (module docstring)
            with FlopCounterMode(display=False) as counter:
                predict()
    finally:
        model.train(training)
    return counter.get_total_flops() / size
