"""The tasks: one LightningModule each, on a metanetwork from the registry (:data:`~neuralgraph.nn.METANETS`).

Five tasks in the four settings of the 2026 paper; the function-space functional has two.

=====================================  =======================================  ==========================
setting                                task                                     head
=====================================  =======================================  ==========================
function-space operator                :class:`InrEditing`                      ``WeightDecoder(k)`` (OCE)
function-space functional              :class:`InrClassification`               ``InvariantReadout``
function-space functional (CNN zoo)    :class:`GeneralizationPrediction`        ``InvariantReadout``
permutation-invariant functional       :class:`WeightStatisticRegression`       ``InvariantReadout``
permutation-equivariant operator       :class:`EquivariantWeightPrediction`     per-edge linear
=====================================  =======================================  ==========================

The task never calls into the data: a batch (a :class:`~neuralgraph.graph.blocks.MetanetBatch`:
:class:`~neuralgraph.data.inr_dataset.InrBatch`, :class:`~neuralgraph.data.cnn_zoo.ZooBatch`) goes
encoder -> layers -> head -> loss, with the target derived from the batch in the loss.
Input statistics and PNG grids are callbacks (:mod:`neuralgraph.training.callbacks`) the tasks
request through ``configure_callbacks``.

Optimisation follows the paper: AdamW (lr 1e-3, weight decay 1e-3), ReduceLROnPlateau on the
validation loss (factor 0.5, patience 5 epochs, min lr 1e-4). Test metrics are computed at the
best-validation checkpoint by the CLI, never as a minimum over test epochs.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import lightning as L
import torch
import torchmetrics
from torch import Tensor, nn

from neuralgraph.graph import GraphSpec
from neuralgraph.graph.blocks import GraphFacts, MetanetBatch, WeightBlocks, batch_mlps, node_graph_index
from neuralgraph.graph.scaling import scaling_invariant
from neuralgraph.inr import DWS_MNIST, SirenConvention, full_precision, render
from neuralgraph.inr.render import autocast_active, autocast_off
from neuralgraph.morphology import EDITS
from neuralgraph.nn import build_metanet, match_budget
from neuralgraph.nn.budget import WIDTH_MULTIPLE, count_trainable
from neuralgraph.nn.context import GraphContext, context_facts
from neuralgraph.nn.heads import MEMBERS
from neuralgraph.data.cnn_zoo import ZooBatch
from neuralgraph.data.inr_dataset import InrBatch
from neuralgraph.training.callbacks import EditingGrid, InputStatistics

STAGES = ("train", "val", "test")
#: Constructor arguments that change how a model is trained, not what it is or computes, the only
#: ones in which a configuration may differ from the checkpoint it evaluates or resumes.
OPTIMIZATION_ARGUMENTS = frozenset({"lr", "weight_decay", "lr_factor", "lr_patience", "min_lr", "compile"})


def check_checkpoint(checkpoint: Any, task: Optional[str], hparams: Mapping[str, Any], source: str) -> None:
    """ValueError naming ``source`` and the field at fault unless ``checkpoint`` fits the configuration.

    The checkpoint must have been written by a neuralgraph task, of class ``task`` (any when
    None), with the same value of every constructor argument in ``hparams`` that it also
    stores, the optimiser's (:data:`OPTIMIZATION_ARGUMENTS`) excepted. A ``metanet_config`` without
    ``hidden_dim`` beside a ``reference_hidden_dim`` leaves the width to budget matching, and the
    checkpoint's stored result stands. The one check for the CLI (before anything is built),
    ``load_from_checkpoint`` and resumed fits.

    Args:
        checkpoint: the loaded checkpoint (a dict).
        task: the task class name the configuration builds, or ``None``.
        hparams: the configuration's constructor arguments.
        source: the checkpoint's path, for errors.
    """
    saved = checkpoint.get("neuralgraph_task") if isinstance(checkpoint, dict) else None
    if saved is None:
        raise ValueError(f"{source}: not a neuralgraph checkpoint (no 'neuralgraph_task' entry)")
    if task is not None and task != saved["task"]:
        raise ValueError(f"{source}: holds a {saved['task']} checkpoint, but the configuration builds {task}")
    stored = checkpoint.get("hyper_parameters", {})
    config, matched = hparams.get("metanet_config") or {}, stored.get("metanet_config") or {}
    if hparams.get("reference_hidden_dim") is not None and "hidden_dim" not in config and "hidden_dim" in matched:
        hparams = {**hparams, "metanet_config": {**config, "hidden_dim": matched["hidden_dim"]}}
    for key in sorted((stored.keys() & hparams.keys()) - OPTIMIZATION_ARGUMENTS):
        if key == "spec":  # linked from the data after parsing (None until then, and in older checkpoints)
            _check_spec(stored[key], hparams[key], source)
        elif stored[key] != hparams[key]:
            raise ValueError(f"{source}: checkpoint has {key}={stored[key]!r}, "
                             f"but the configuration asks for {key}={hparams[key]!r}")


def _check_spec(stored: Optional[dict], data: Optional[dict], source: str) -> None:
    """ValueError naming the first GraphSpec field in which the checkpoint's data and this data differ."""
    if stored is None or data is None:
        return
    for field in sorted(stored.keys() | data.keys()):
        if stored.get(field) != data.get(field):
            raise ValueError(f"{source}: trained on graphs whose GraphSpec has {field}={stored.get(field)!r}, "
                             f"but this data's has {field}={data.get(field)!r}")


class MetanetTask(L.LightningModule):
    """Shared training logic: a registry metanetwork, a head, a loss, torchmetrics per stage.

    Args:
        metanet: registry name (:data:`neuralgraph.nn.METANETS`).
        metanet_config: constructor arguments of that metanetwork.
        spec: the data's :class:`~neuralgraph.graph.spec.GraphSpec` as a dict; ``neuralgraph fit``
            links it from the data module (``datamodule.spec``), and it is stored in checkpoints.
            The metanetwork is built for it (``build_metanet(name, spec=spec)``) and INRs are
            rendered with its SIREN convention (``siren_convention``; DWS MNIST's without one);
            ``None``: from ``metanet_config`` alone.
        lr, weight_decay: AdamW settings.
        lr_factor, lr_patience, min_lr: ReduceLROnPlateau on ``val/loss`` (patience in epochs).
        normalize_inputs: before fitting, standardise the encoder's inputs layer by layer with
            statistics of (up to 10,000) training INRs; stored with the model's buffers
            (:class:`~neuralgraph.training.callbacks.InputStatistics`).
        compile: compile each message-passing layer with ``torch.compile`` (inductor), in place, so
            state-dict keys and checkpoints are unchanged; fuses the element-wise passes over edge
            rows. The first steps pay the compilation and a batch of a new size recompiles once
            (docs/training.md says when it pays; docs/benchmarks.md has the times).
    """

    def __init__(
        self,
        metanet: str = "gmn",
        metanet_config: Optional[dict[str, Any]] = None,
        spec: Optional[dict[str, Any]] = None,
        lr: float = 1e-3,
        weight_decay: float = 1e-3,
        lr_factor: float = 0.5,
        lr_patience: int = 5,
        min_lr: float = 1e-4,
        normalize_inputs: bool = True,
        compile: bool = False,
    ):
        super().__init__()
        self.save_hyperparameters()  # collects the arguments of subclass constructors too
        # parsed once: the loss renders with the convention at every step
        self.graph_spec = None if spec is None else GraphSpec.from_dict(spec)
        self.siren_convention = (DWS_MNIST if self.graph_spec is None or self.graph_spec.convention is None
                                 else SirenConvention.from_dict(self.graph_spec.convention))
        self.metanet = build_metanet(metanet, spec=self.graph_spec, **self.metanet_config_resolved())
        if compile:
            for layer in self.metanet.layers:
                layer.compile()

    def metanet_config_resolved(self) -> dict[str, Any]:
        """The metanetwork's constructor arguments (subclasses may adjust, e.g. budget matching)."""
        return dict(self.hparams.metanet_config or {})

    def add_metrics(self, make) -> None:
        """One metric object per stage (``train_metrics``, ``val_metrics``, ``test_metrics``)."""
        for stage in STAGES:
            setattr(self, f"{stage}_metrics", make(stage))

    def metrics(self, stage: str):
        return getattr(self, f"{stage}_metrics")

    def features(self, graph, blocks: Optional[WeightBlocks] = None,
                 facts: Optional[GraphFacts] = None) -> tuple[Tensor, Tensor, GraphContext]:
        """The metanetwork's node and edge features of ``graph`` and the graph context they were computed
        with, built once (from the batch's ``blocks`` and ``facts`` when it carries them) and handed on to the
        head."""
        context = self.metanet.context(graph, blocks, facts)
        node, edge = self.metanet(graph, context)
        return node, edge, context

    def network_prediction(self, batch: MetanetBatch) -> Tensor:
        """The task's ``readout`` on ``batch``: ``[B, out]``, one row per network. A readout that reads one
        feature row per network (``per_network``: the probing baselines') gets the metanetwork's
        ``network_features`` and skips the node and edge rows that repeat them."""
        context = self.metanet.context(batch.graph, batch.blocks, batch.facts)
        if getattr(self.readout, "per_network", False):
            return self.readout.from_network(self.metanet.network_features(batch.graph, context))
        node, edge = self.metanet(batch.graph, context)
        return self.readout(batch.graph, node, edge, context)

    # -- subclasses -------------------------------------------------------------------------
    def loss_and_outputs(self, batch: MetanetBatch) -> tuple[Tensor, dict[str, Tensor]]:
        raise NotImplementedError

    def update_metrics(self, stage: str, outputs: dict[str, Tensor], batch: MetanetBatch) -> None:
        raise NotImplementedError

    # -- Lightning --------------------------------------------------------------------------
    def forward(self, batch: MetanetBatch):
        return self.loss_and_outputs(batch)[1]

    def _step(self, batch: MetanetBatch, stage: str) -> dict[str, Tensor]:
        """The loss and outputs of one batch (callbacks read them), logged and added to the metrics."""
        loss, outputs = self.loss_and_outputs(batch)
        self.log(f"{stage}/loss", loss, batch_size=batch.size, prog_bar=stage != "test", on_epoch=True,
                 on_step=False, sync_dist=True)
        self.update_metrics(stage, outputs, batch)
        return {"loss": loss, **outputs}

    def training_step(self, batch: MetanetBatch, batch_idx: int) -> Tensor:
        return self._step(batch, "train")["loss"]

    def validation_step(self, batch: MetanetBatch, batch_idx: int) -> dict[str, Tensor]:
        return self._step(batch, "val")

    def test_step(self, batch: MetanetBatch, batch_idx: int) -> dict[str, Tensor]:
        return self._step(batch, "test")

    def predict_step(self, batch: MetanetBatch, batch_idx: int) -> dict[str, Tensor]:
        return {"index": batch.index, **self.loss_and_outputs(batch)[1]}

    def configure_optimizers(self):
        hp = self.hparams
        optimizer = torch.optim.AdamW(self.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="min", factor=hp.lr_factor, patience=hp.lr_patience, min_lr=hp.min_lr
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val/loss"}}

    def configure_callbacks(self) -> list[L.Callback]:
        return [InputStatistics()] if self.hparams.normalize_inputs else []

    def on_fit_start(self) -> None:
        self.print(f"{type(self).__name__}: {self.hparams.metanet} with {count_trainable(self):,} trainable parameters")

    # Exact resumption: the global RNG (dropout, augmentation) travels with the checkpoint.
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["torch_rng_state"] = torch.get_rng_state()
        checkpoint["neuralgraph_task"] = {"task": type(self).__name__, "metanet": self.hparams.metanet}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        check_checkpoint(checkpoint, type(self).__name__, self.hparams, "checkpoint")
        saved = checkpoint["neuralgraph_task"]
        expected = {k: tuple(v.shape) for k, v in self.state_dict().items()}
        found = {k: tuple(v.shape) for k, v in checkpoint["state_dict"].items()}
        if expected != found:
            diff = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
            raise ValueError(
                f"checkpoint's {saved['metanet']!r} parameters do not fit this configuration "
                f"(different widths, depth, k or layout); first mismatches: "
                + ", ".join(f"{k}: checkpoint {found.get(k)} vs model {expected.get(k)}" for k in diff[:3])
            )
        if "torch_rng_state" in checkpoint:
            torch.set_rng_state(checkpoint["torch_rng_state"])


class EpochMetricTask(MetanetTask):
    """A task whose metrics need the whole stage (PSNR over every image, a rank correlation over
    every network): updated per batch, computed and logged at the end of each epoch."""

    def epoch_values(self, stage: str) -> dict[str, Tensor]:
        return self.metrics(stage).compute()

    def _log_epoch_metrics(self, stage: str) -> None:
        self.log_dict(self.epoch_values(stage), sync_dist=True)
        self.metrics(stage).reset()

    def on_train_epoch_end(self):
        self._log_epoch_metrics("train")

    def on_validation_epoch_end(self):
        self._log_epoch_metrics("val")

    def on_test_epoch_end(self):
        self._log_epoch_metrics("test")


class InrEditing(EpochMetricTask):
    """Function-space operator: edit an INR so that it renders the edited image (OCE with ``k`` outputs).

    The metanetwork's features go through ``WeightDecoder(k)``; the ``k`` output INRs are
    rendered on the image grid and averaged: ``f = (1/k) sum_i f_i``. Loss: pixel MSE against
    ``edit(image)`` (3x3 dilation by default).

    Args:
        k: number of output networks (Output Capacity Expansion; 1 = the usual single output).
        edit: name in :data:`neuralgraph.morphology.EDITS`.
        reference_hidden_dim: budget matching: the width of the reference model, ``metanet_config``
            at this ``hidden_dim`` with ``k = 1``. When ``metanet_config`` gives no ``hidden_dim``, the
            metanetwork gets the largest width at which metanet + decoder(k) have no more trainable
            parameters than the reference (:func:`~neuralgraph.nn.match_budget`; both counts are
            printed; at ``k = 1`` the reference width itself), and that width is written into the
            stored ``metanet_config``, so a checkpoint loads at it without searching again.
        budget_width_multiple: budget matching's ``width_multiple`` (:func:`~neuralgraph.nn.match_budget`):
            matched widths are multiples of 8 where the budget allows; 1 gives the exact match, the
            width of checkpoints written before matched widths were aligned.
        decoder_members: the decoder's ``members`` (:class:`~neuralgraph.nn.heads.WeightDecoder`):
            ``"independent"`` (OCE), ``"coupled"`` (one network of width ``k h``, rendered as is) or
            ``"tied"`` (``k`` identical members); budget matching counts that decoder.
        match_budget: what checkpoints written before ``reference_hidden_dim`` store instead: true
            means ``metanet_config``'s ``hidden_dim`` is the reference, matched again at every load.
        *args: :class:`MetanetTask`'s arguments (``metanet``, ``metanet_config``, ``spec``, ``lr``, ...).
        **kwargs: its keyword arguments, likewise.
    """

    def __init__(self, *args, k: int = 1, edit: str = "dilation", reference_hidden_dim: Optional[int] = None,
                 decoder_members: str = "independent", budget_width_multiple: int = WIDTH_MULTIPLE,
                 match_budget: bool = False, **kwargs):
        if edit not in EDITS:
            raise ValueError(f"edit={edit!r}: choose one of {sorted(EDITS)}")
        if decoder_members not in MEMBERS:
            raise ValueError(f"InrEditing decoder_members={decoder_members!r}: choose one of {', '.join(MEMBERS)}")
        if match_budget and reference_hidden_dim is not None:
            raise ValueError(f"InrEditing reference_hidden_dim={reference_hidden_dim} with match_budget=True: "
                             "give reference_hidden_dim alone")
        super().__init__(*args, **kwargs)
        self.decoder = self.metanet.decoder(self.hparams.k, members=decoder_members)
        self.edit = EDITS[edit]
        self.add_metrics(lambda stage: torchmetrics.MetricCollection({
            "mse": torchmetrics.MeanSquaredError(),
            "psnr": torchmetrics.image.PeakSignalNoiseRatio(data_range=1.0),
        }, prefix=f"{stage}/"))

    def metanet_config_resolved(self) -> dict[str, Any]:
        """``metanet_config`` with the budget-matched ``hidden_dim``, which the hyperparameters then store."""
        config = super().metanet_config_resolved()
        hp = self.hparams
        if hp.match_budget:  # a checkpoint written before reference_hidden_dim: hidden_dim is the reference
            return config if hp.k == 1 else self.matched(config)
        if hp.reference_hidden_dim is None or "hidden_dim" in config:
            return config
        reference = {**config, "hidden_dim": hp.reference_hidden_dim}
        config = reference if hp.k == 1 else self.matched(reference)
        hp.metanet_config = config
        return config

    def matched(self, reference: dict[str, Any]) -> dict[str, Any]:
        """The config ``reference`` at the largest width whose metanet + decoder(k) fit its k = 1 budget."""
        hp = self.hparams
        matched = match_budget(hp.metanet, reference, hp.k, members=hp.decoder_members,
                               width_multiple=hp.budget_width_multiple, spec=self.graph_spec)
        print(f"budget match: {hp.metanet} k={hp.k} ({hp.decoder_members} members) "
              f"hidden_dim={matched.config['hidden_dim']} ({matched.params:,} parameters) vs k=1 "
              f"hidden_dim={reference.get('hidden_dim')} ({matched.reference_params:,} parameters)")
        return matched.config

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """A one-line error naming ``budget_width_multiple`` when a ``match_budget`` checkpoint, whose width is
        matched again at load, was matched to another width."""
        check_checkpoint(checkpoint, type(self).__name__, self.hparams, "checkpoint")
        stored = checkpoint.get("state_dict", {}).get("decoder.edge_head.0.weight")  # [hidden_dim, hidden_dim]
        width = self.metanet.hidden_dim
        if self.hparams.match_budget and stored is not None and stored.shape[1] != width:
            multiple = self.hparams.budget_width_multiple
            raise ValueError(
                f"checkpoint: its metanet has hidden_dim={stored.shape[1]}, but match_budget with "
                f"budget_width_multiple={multiple} builds hidden_dim={width}: set budget_width_multiple to the "
                f"checkpoint's (1 for checkpoints written before matched widths were aligned to 8)")
        super().on_load_checkpoint(checkpoint)

    def edited_networks(self, graph, blocks: Optional[WeightBlocks] = None,
                        facts: Optional[GraphFacts] = None) -> tuple[list[Tensor], list[Tensor]]:
        """The output INRs per input graph: weights ``[B, k, d_out, d_in]``, biases ``[B, k, d_out]``
        (one network of hidden width ``k h`` with ``decoder_members="coupled"``); ``blocks``: the batch's
        weights, when it carries them.

        Under autocast (``--trainer.precision bf16-mixed``) the metanetwork runs in bfloat16 but the
        decoder in float32: its deltas are added to the input weights, whose precision they keep."""
        node, edge, context = self.features(graph, blocks, facts)
        device = node.device.type
        if not autocast_active(device):
            return self.decoder(graph, node, edge, context)
        with autocast_off(device):
            return self.decoder(graph, full_precision(node), full_precision(edge), context)

    def loss_and_outputs(self, batch: InrBatch) -> tuple[Tensor, dict[str, Tensor]]:
        if batch.image is None:
            raise ValueError("InrEditing: the batch has no images (an INR set imported with --images none: import it "
                             "again with --images full; or data.augmentation, which moves the images: turn it off)")
        weights, biases = self.edited_networks(batch.graph, batch.blocks, batch.facts)
        B, k = weights[0].shape[:2]
        size = batch.image.shape[-2:]
        members = render([w.flatten(0, 1) for w in weights], [b.flatten(0, 1) for b in biases], tuple(size),
                         self.siren_convention)
        members = members.view(B, k, *size)
        prediction = members.mean(dim=1)
        target = self.edit(batch.image)
        return nn.functional.mse_loss(prediction, target), {"prediction": prediction, "members": members,
                                                            "target": target}

    def update_metrics(self, stage: str, outputs: dict[str, Tensor], batch: InrBatch) -> None:
        self.metrics(stage).update(outputs["prediction"], outputs["target"])

    def epoch_values(self, stage: str) -> dict[str, Tensor]:
        values = super().epoch_values(stage)
        values[f"{stage}/mse_x1e-2"] = values[f"{stage}/mse"] * 100
        return values

    def configure_callbacks(self) -> list[L.Callback]:
        return super().configure_callbacks() + [EditingGrid()]


class InrClassification(MetanetTask):
    """Function-space functional: the digit an INR draws, read from its weights.

    Args:
        num_classes: classes of the readout.
        *args: :class:`MetanetTask`'s arguments (``metanet``, ``metanet_config``, ``spec``, ``lr``, ...).
        **kwargs: its keyword arguments, likewise.
    """

    def __init__(self, *args, num_classes: int = 10, **kwargs):
        super().__init__(*args, **kwargs)
        self.readout = self.metanet.readout(num_classes)
        self.add_metrics(lambda stage: torchmetrics.classification.MulticlassAccuracy(num_classes, average="micro"))

    def loss_and_outputs(self, batch: InrBatch) -> tuple[Tensor, dict[str, Tensor]]:
        logits = self.network_prediction(batch)
        return nn.functional.cross_entropy(logits, batch.label), {"logits": logits}

    def update_metrics(self, stage: str, outputs: dict[str, Tensor], batch: InrBatch) -> None:
        self.metrics(stage)(outputs["logits"], batch.label)
        self.log(f"{stage}/accuracy", self.metrics(stage), on_epoch=True, on_step=False, batch_size=batch.size)


def layer_norms(graph, blocks: Optional[WeightBlocks] = None) -> Tensor:
    """Per-layer L2 norm of each network's weight matrix, ``[B, L]``; ``blocks``: the batch's weights, when it
    carries them (else they are decoded from ``graph``).

    Args:
        graph: MLP parameter graphs (a ``Batch``).
        blocks: the batch's weights and biases, if it carries them.

    Returns:
        ``[B, L]``.
    """
    weights, _ = batch_mlps(graph, blocks)
    return torch.stack([w.flatten(1).norm(dim=1) for w in weights], dim=1)


class WeightStatisticRegression(MetanetTask):
    """Permutation-invariant functional: per-layer L2 norms of the weights.

    Fixed by the weights but not by the function (the INR's function does not determine them),
    so function-space training signals cannot learn it.

    Args:
        num_weight_layers: outputs of the readout, one per weight layer of the data.
        *args: :class:`MetanetTask`'s arguments (``metanet``, ``metanet_config``, ``spec``, ``lr``, ...).
        **kwargs: its keyword arguments, likewise.
    """

    def __init__(self, *args, num_weight_layers: int = 3, **kwargs):
        super().__init__(*args, **kwargs)
        self.readout = self.metanet.readout(num_weight_layers)
        self.add_metrics(lambda stage: torchmetrics.R2Score(num_weight_layers))

    def loss_and_outputs(self, batch: MetanetBatch) -> tuple[Tensor, dict[str, Tensor]]:
        prediction = self.network_prediction(batch)
        target = layer_norms(batch.graph, batch.blocks)
        if prediction.shape != target.shape:
            raise ValueError(f"num_weight_layers={prediction.shape[1]} but the data has {target.shape[1]} weight layers")
        return nn.functional.mse_loss(prediction, target), {"prediction": prediction, "target": target}

    def update_metrics(self, stage: str, outputs: dict[str, Tensor], batch: MetanetBatch) -> None:
        self.metrics(stage)(outputs["prediction"], outputs["target"])
        self.log(f"{stage}/r2", self.metrics(stage), on_epoch=True, on_step=False, batch_size=batch.size)


class GeneralizationPrediction(EpochMetricTask):
    """Function-space functional: a trained CNN's test accuracy, read from its weights.

    ``InvariantReadout`` on the CNN's parameter graph regresses the accuracy (MSE); reported as
    Kendall's tau (the rank correlation NFN, NG-GNN/NG-T and ScaleGMN report on the Small CNN
    Zoo) and R^2, over each whole stage. Data: :class:`~neuralgraph.training.cnn_zoo_datamodule.CnnZooDataModule`.

    Args:
        *args: :class:`MetanetTask`'s arguments (``metanet``, ``metanet_config``, ``spec``, ``lr``, ...).
        **kwargs: its keyword arguments, likewise.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.readout = self.metanet.readout(1)
        self.add_metrics(lambda stage: torchmetrics.MetricCollection({
            "kendall_tau": torchmetrics.KendallRankCorrCoef(), "r2": torchmetrics.R2Score()}, prefix=f"{stage}/"))

    def loss_and_outputs(self, batch: ZooBatch) -> tuple[Tensor, dict[str, Tensor]]:
        prediction = self.network_prediction(batch).squeeze(-1)
        return nn.functional.mse_loss(prediction, batch.accuracy), {"prediction": prediction}

    def update_metrics(self, stage: str, outputs: dict[str, Tensor], batch: ZooBatch) -> None:
        self.metrics(stage).update(outputs["prediction"].detach(), batch.accuracy)


def magnitude_prune_mask(graph, sparsity: float, context: Optional[GraphContext] = None) -> Tensor:
    """1 for the weights kept by per-layer magnitude pruning, per edge, in the graph's edge order.

    Within each network and layer, the ``ceil((1 - sparsity) * n)`` largest ``|w|`` are kept;
    ties are resolved by a stable sort of the edge order (measure zero for real weights). The
    groups are counted on the graph's device, sized by the batch's
    :class:`~neuralgraph.graph.blocks.GraphFacts` (``context``'s, else read from ``graph``).

    Args:
        graph: MLP parameter graphs.
        sparsity: the fraction of each layer's weights pruned, in ``(0, 1)``.
        context: the batch's graph context, if built (its graph facts).

    Returns:
        ``[E]`` in the edges' dtype.
    """
    facts = context_facts(graph, context)
    magnitude = graph.edge_attr[:, 0].abs()
    graph_of_edge = node_graph_index(graph)[graph.edge_index[1]]
    group = graph_of_edge * (facts.max_edge_layer + 1) + graph.edge_layer
    # rank of |w| within its (network, layer) group: sort by magnitude, then stably by group
    order = torch.argsort(magnitude, descending=True, stable=True)
    order = order[torch.argsort(group[order], stable=True)]
    group_sizes = torch.zeros(facts.num_graphs * (facts.max_edge_layer + 1), dtype=torch.long,
                              device=group.device).index_add_(0, group, torch.ones_like(group))
    starts = torch.cumsum(group_sizes, 0) - group_sizes
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=order.device) - starts[group[order]]
    keep = torch.ceil((1 - sparsity) * group_sizes.to(magnitude.dtype)).long()
    return (rank < keep[group]).to(graph.edge_attr.dtype)


class EquivariantWeightPrediction(MetanetTask):
    """Permutation-equivariant operator: a per-weight target in the input's own indexing.

    Predicts the magnitude-pruning mask (keep the largest ``1 - sparsity`` of each layer) from
    the edge features; a hidden permutation of the input permutes the prediction alike. With a
    sign-equivariant metanetwork (``scaling="sign"``) the head reads ``|edge features|``: the mask,
    a function of ``|w|``, does not change when neurons flip sign, and neither does the prediction.

    Args:
        sparsity: the fraction of each layer's weights pruned, in ``(0, 1)``.
        *args: :class:`MetanetTask`'s arguments (``metanet``, ``metanet_config``, ``spec``, ``lr``, ...).
        **kwargs: its keyword arguments, likewise.
    """

    def __init__(self, *args, sparsity: float = 0.5, **kwargs):
        if not 0 < sparsity < 1:
            raise ValueError(f"sparsity={sparsity}: expected a fraction strictly between 0 and 1")
        super().__init__(*args, **kwargs)
        self.edge_head = nn.Linear(self.metanet.hidden_dim, 1)
        self.add_metrics(lambda stage: torchmetrics.classification.BinaryAccuracy())

    def loss_and_outputs(self, batch: MetanetBatch) -> tuple[Tensor, dict[str, Tensor]]:
        node, edge, context = self.features(batch.graph, batch.blocks, batch.facts)
        if self.metanet.scaling == "sign":
            edge = scaling_invariant(edge, "sign")
        logits = self.edge_head(edge).squeeze(-1)
        target = magnitude_prune_mask(batch.graph, self.hparams.sparsity, context)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, target)
        return loss, {"logits": logits, "target": target}

    def update_metrics(self, stage: str, outputs: dict[str, Tensor], batch: MetanetBatch) -> None:
        self.metrics(stage)(outputs["logits"].sigmoid(), outputs["target"].long())
        self.log(f"{stage}/accuracy", self.metrics(stage), on_epoch=True, on_step=False, batch_size=batch.size)
