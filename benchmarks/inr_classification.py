"""MNIST INR classification: the metanetworks at one budget and the probing baselines, beside published accuracies.

    python benchmarks/inr_classification.py --protocol smoke|cpu|cpu-augmented|cpu-large|probing-full|full [--archs ...] [--seeds 0 1 2] [--data-root DIR]
    python benchmarks/inr_classification.py --write-configs     # configs/benchmarks/inr_classification/<system>.yaml

Without a selection the protocol's plan runs in its order; ``--archs``/``--seeds`` keep the planned
runs they match, and both together ask for exactly those runs.

Each (system, seed) is trained by ``neuralgraph fit`` (``InrClassification``, one subprocess
per run so that its peak memory is its own) and tested at its best-validation checkpoint (lowest
validation cross entropy). Results: a JSON of raw runs (with each run's per-epoch training and
validation metrics), a markdown table and a PNG of every run's validation accuracy per epoch in
``benchmarks/results/inr_classification_<protocol>_<machine>{.json,.md,_curves.png}``.

A description that ``neuralgraph.bench.main`` runs, as it runs ``benchmarks/dilation.py``, with its
resumable bookkeeping: each finished run is appended to
the JSON (temporary file, then rename), the markdown is regenerated from it, a rerun skips the runs
it holds, a run killed mid-fit resumes from its ``last.ckpt``, and a recorded run whose settings
differ from the current ones is an error naming the field.

Every metanetwork runs ``configs/benchmarks/inr_classification/<arch>.yaml``: 3 layers at the width whose
classifier (metanetwork + readout) has the parameter count nearest GMN's at hidden 64, within 5%
(``neuralgraph.bench.widths.matched_width`` counting the readout: readouts range from 16k to 136k parameters,
so the editors' widths would leave the classifiers 40% apart). The probing baselines ``probegen`` and
``probe`` (``neuralgraph.nn.probegen``: 128 learned coordinates, from a 2-layer deep linear generator or
directly, through each SIREN; an MLP of width 256 on the 128 values) run at the settings of their
reference code's MNIST INR scripts instead: Adam at 3e-4 without weight decay, batch 32, 30 epochs.
Protocols (docs/benchmarks.md says why they are sized so):

* ``full``: 55k/5k/10k INRs (all of the folder's), 150 epochs, batch 32, 3 seeds. For a GPU.
* ``probing-full``: the probing baselines on the full data for their reference code's 30 epochs,
  3 seeds: a CPU job (a prediction costs about 0.3 MFLOPs).
* ``cpu-large``: all 55k/5k/10k INRs for GMN, NG-GNN, ScaleGMN-B and DWS, each for the epochs that
  the ``cpu`` protocol's time per INR fits in about an hour (:data:`CPU_LARGE_EPOCHS`, with the times
  measured: about two hours a run on one thread of the 2-core Intel Xeon, AVX-512), without the
  training augmentation of DWSNets and neural-graphs
  (``--data.augmentation``, :mod:`neuralgraph.inr.augment`): on ``cpu-augmented`` it cost GMN 8.6
  points (47.5% against 56.1%, seed 0), a regulariser for a model that had not yet fit its training set
  (training accuracy 42% at epoch 12, below validation's 51%); the anchors use it for 100-200 epochs.
* ``cpu``: 5,000/500/1,000 INRs, 12 epochs, batch 32; seed 0 of every system, then seeds 1
  and 2. A run takes a minute (probing) or a few minutes (DWS, NFN) to about 20 (NG-T) on 2 quiet cores.
* ``cpu-augmented``: the ``cpu`` protocol with that augmentation, for GMN and NG-GNN: whether it helps
  at this size.
* ``smoke``: 64/32/32 INRs, 1 epoch, width 8, 1 layer: plumbing only.

The protocols on all INRs read ``data/inrs``, the folder ``neuralgraph make-inrs --out data/inrs
--split all`` writes (about 2 hours with ``--threads 2`` on the 2-core Xeon: 2,000 INRs in 202 s); the
others fit their missing INRs on first use with the ``dws-released`` preset, in ``data/inrs-<protocol>``
(``cpu`` and ``cpu-augmented`` share ``data/inrs-cpu``) unless ``--data-root`` names another folder:
``data/inrs`` gives them its first INRs, the same ones (limits are prefixes, ``make-inrs`` is
byte-identical on rerun); a folder written by ``import-dataset`` (the released ``dws-inrs``) is used as it is.
"""
from __future__ import annotations

import sys
from pathlib import Path

from neuralgraph.bench import Benchmark, Column, Data, main
from neuralgraph.bench.benchmark import write_fit_config
from neuralgraph.bench.published import INR_CLASSIFICATION_ACCURACY
from neuralgraph.bench.runner import benchmark_configs
from neuralgraph.bench.tables import (
    EPOCHS,
    FLOPS,
    HIDDEN_DIM,
    MACHINE,
    PARAMETERS,
    PEAK_MEMORY,
    published_column,
    seeds_column,
    wall_column,
)
from neuralgraph.bench.widths import REFERENCE, budget_options, matched_width, plan_order, readout_parameters
from neuralgraph.nn import METANETS

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = benchmark_configs(ROOT, "inr_classification")
DWS_RELEASED = {"preset": "dws-released"}
NUM_CLASSES = 10

# the probing baselines at their reference code's MNIST INR settings (ProbeGen's scripts/main_results and
# scripts/vanilla_probing: 128 probes, a classifier of 6 linear layers of width 256, Adam at 3e-4 without weight
# decay or input normalisation, batch 32, 30 epochs), not at GMN's budget
PROBING = {
    "probegen": {"hidden_dim": 256, "num_layers": 5, "dropout": 0.0, "num_probes": 128, "latent_dim": 32,
                 "generator_layers": 2},
    "probe": {"hidden_dim": 256, "num_layers": 5, "dropout": 0.0, "num_probes": 128},
}
PROBING_TASK = {"lr": 3.0e-4, "weight_decay": 0.0, "normalize_inputs": False}
PROBING_EPOCHS = 30
SYSTEMS = (*METANETS, *PROBING)
# every system, the probing baselines first, the metanetworks declared slow last
ORDER = plan_order((*PROBING, *METANETS))
FULL_DATA = {"limit_train": None, "limit_val": None, "limit_test": None, **DWS_RELEASED}
#: Epochs of each ``cpu-large`` system: about an hour on 55,000 INRs at the ``cpu`` protocol's minutes per
#: 60,000 INR-epochs (5,000 x 12), GMN 5.3, NG-GNN 16.3, ScaleGMN 36.4 (AMD EPYC, AVX2, 2 threads; the ``cpu``
#: table's wall-time column), DWS 2.9 (Intel Xeon, AVX-512/AMX, 1 thread beside a second run; its 84.7 on the EPYC
#: predates the dense layer path). On one thread of the Xeon beside a second run GMN and NG-GNN took twice their
#: EPYC minutes: 9.7 and 29 minutes an epoch.
CPU_LARGE_EPOCHS = {"gmn": 12, "ng_gnn": 4, "scalegmn_b": 2, "dws": 20}

CPU_DATA = {"limit_train": 5000, "limit_val": 500, "limit_test": 1000, **DWS_RELEASED}
PROTOCOLS = {
    "full": {
        "plan": ((ORDER, (0, 1, 2)),),
        "data": FULL_DATA,
        "trainer": {"max_epochs": 150},
        "system_trainer": {system: {"max_epochs": PROBING_EPOCHS} for system in PROBING},
    },
    "probing-full": {
        "plan": ((tuple(PROBING), (0,)), (tuple(PROBING), (1, 2))),
        "data": FULL_DATA,
        "trainer": {"max_epochs": PROBING_EPOCHS},
    },
    "cpu-large": {
        "plan": ((tuple(CPU_LARGE_EPOCHS), (0,)),),
        "data": {**FULL_DATA, "augmentation": False},
        "trainer": {"max_epochs": 1},
        "system_trainer": {system: {"max_epochs": epochs} for system, epochs in CPU_LARGE_EPOCHS.items()},
    },
    "cpu": {
        "plan": ((ORDER, (0,)), (ORDER, (1, 2))),
        "data": CPU_DATA,
        "trainer": {"max_epochs": 12},
    },
    "cpu-augmented": {
        "plan": ((("gmn", "ng_gnn"), (0,)),),
        "data": {**CPU_DATA, "augmentation": True},
        "trainer": {"max_epochs": 12},
    },
    "smoke": {
        "plan": ((ORDER, (0,)),),
        "data": {"limit_train": 64, "limit_val": 32, "limit_test": 32, "preset": None},  # any recipe: tiny fits
        "trainer": {"max_epochs": 1},
        "metanet_config": {"hidden_dim": 8, "num_layers": 1},
    },
}


def classifier_parameters(metanet: str, config: dict) -> int:
    """Trainable parameters of ``InrClassification``'s model: the metanetwork and its readout."""
    return readout_parameters(metanet, config, NUM_CLASSES)


def budget_config(arch: str) -> dict:
    """The metanet config of ``configs/benchmarks/inr_classification/<arch>.yaml``: ``CPU_DEPTH`` + the declared ``budget_options``
    (``neuralgraph.bench.widths``) at the width whose classifier parameters are nearest GMN's at hidden 64
    (within 5%); a probing baseline's reference settings."""
    if arch in PROBING:
        return dict(PROBING[arch])
    return matched_width(arch, arch, budget_options(arch), classifier_parameters(*REFERENCE),
                         count=classifier_parameters)


def write_configs() -> list[Path]:
    """``configs/benchmarks/inr_classification/<system>.yaml`` for every system, at the matched width (the
    probing baselines at their reference settings), for the full protocol's epochs on the folder ``make-inrs``
    writes by default."""
    return [write_fit_config(
        CONFIGS / f"{arch}.yaml",
        f"# MNIST INR classification with {arch} "
        + ("at its reference code's settings, not a parameter budget" if arch in PROBING
           else "at GMN's hidden-64 parameter budget") + " (benchmarks/inr_classification.py).\n",
        "neuralgraph.training.tasks.InrClassification",
        {"metanet": arch, "metanet_config": budget_config(arch), "num_classes": NUM_CLASSES,
         **(PROBING_TASK if arch in PROBING else {})}, None,
        {"root": "data/inrs", "batch_size": 32, **DWS_RELEASED},
        {"max_epochs": PROBING_EPOCHS if arch in PROBING else PROTOCOLS["full"]["trainer"]["max_epochs"],
         "default_root_dir": f"runs/benchmarks/inr_classification/{arch}"})
        for arch in SYSTEMS]


def protocol_paragraph(protocol: dict) -> str:
    """The protocol's size in one line: INRs per split, epochs (per system where they differ), augmentation."""
    data = protocol["data"]
    sizes = "/".join("all" if data.get(f"limit_{split}") is None else f"{data[f'limit_{split}']:,}"
                     for split in ("train", "val", "test"))
    epochs = f"{protocol['trainer']['max_epochs']} epoch(s)"
    if protocol.get("system_trainer"):
        epochs += " (" + ", ".join(f"{system} {options['max_epochs']}"
                                   for system, options in protocol["system_trainer"].items()) + ")"
    return (f"Protocol: {sizes} train/val/test INRs (all: 55,000/5,000/10,000), {epochs}, batch 32, "
            + ("the training augmentation of DWSNets and neural-graphs (neuralgraph/inr/augment.py)"
               if data.get("augmentation") else "no augmentation") + ".")


#: Protocols on every INR, which read the folder ``make-inrs --out data/inrs --split all`` writes.
ALL_INRS = ("full", "probing-full", "cpu-large")
#: Protocols that read another protocol's INRs (the same limits and preset).
SAME_INRS = {"cpu-augmented": "cpu"}
DATA = Data(default=lambda protocol: "data/inrs" if protocol in ALL_INRS
            else f"data/inrs-{SAME_INRS.get(protocol, protocol)}",
            help="INR folder (default: data/inrs for the protocols on every INR, data/inrs-cpu for cpu and "
                 "cpu-augmented, else data/inrs-<protocol>)",
            build=True)


BENCHMARK = Benchmark(
    name="inr_classification", title="MNIST INR classification", doc=__doc__, script=__file__, protocols=PROTOCOLS,
    systems=SYSTEMS, configs="inr_classification", write_configs=write_configs, data=DATA,
    curve=("val/accuracy", 100.0),
    result_fields={"test_accuracy": "test/accuracy"},
    progress=lambda result: f"test accuracy {100 * result['test_accuracy']:.2f}%",
    intro=[lambda report: protocol_paragraph(report.protocol),
           "Test accuracy (%) at the best-validation checkpoint, mean ± std over seeds (n), every metanetwork at "
           "GMN's parameter budget, the probing baselines (probegen, probe) at their reference code's settings "
           "(128 probes, an MLP of width 256, Adam at 3e-4); published: on the DWS INRs at each paper's own size and "
           "full data (FashionMNIST is not measured here; ProbeGen's INR table was not reachable from this machine, "
           "so its published cells are blank). Generated from the JSON beside this file."],
    columns=(Column("model", lambda group: group.system, always=True),
             seeds_column("measured MNIST", "test_accuracy", scale=100, digits=2),
             published_column("published MNIST", INR_CLASSIFICATION_ACCURACY, 2),
             published_column("published FashionMNIST", INR_CLASSIFICATION_ACCURACY, 3),
             PARAMETERS, FLOPS, HIDDEN_DIM, EPOCHS, wall_column("wall time (min)"), PEAK_MEMORY, MACHINE),
)

if __name__ == "__main__":
    sys.exit(main(BENCHMARK))
