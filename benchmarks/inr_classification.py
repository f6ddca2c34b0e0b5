"""MNIST INR classification: every registered metanetwork at one parameter budget, beside the published accuracies.

    python benchmarks/inr_classification.py --protocol smoke|cpu|full [--archs ...] [--seeds 0 1 2] [--data-root DIR]
    python benchmarks/inr_classification.py --write-configs     # configs/benchmarks/inr_classification/<arch>.yaml

Without a selection the protocol's plan runs in its order; ``--archs``/``--seeds`` keep the planned
runs they match, and both together ask for exactly those runs.

Each (architecture, seed) is trained by ``neuralgraph fit`` (``InrClassification``, one subprocess
per run so that its peak memory is its own) and tested at its best-validation checkpoint (lowest
validation cross entropy). Results: a JSON of raw runs and a markdown table in
``benchmarks/results/inr_classification_<protocol>_<machine>.{json,md}``.

A description that ``neuralgraph.bench.main`` runs, as it runs ``benchmarks/dilation.py``, with its
resumable bookkeeping: each finished run is appended to
the JSON (temporary file, then rename), the markdown is regenerated from it, a rerun skips the runs
it holds, a run killed mid-fit resumes from its ``last.ckpt``, and a recorded run whose settings
differ from the current ones is an error naming the field.

Every architecture runs ``configs/benchmarks/inr_classification/<arch>.yaml``: 3 layers at the width whose
classifier (metanetwork + readout) has the parameter count nearest GMN's at hidden 64, within 5%
(``neuralgraph.bench.widths.matched_width`` counting the readout: readouts range from 16k to 136k parameters,
so the editors' widths would leave the classifiers 40% apart). Protocols (docs/benchmarks.md says
why they are sized so):

* ``full``: 55k/5k/10k INRs (all of the folder's), 150 epochs, batch 32, 3 seeds. For a GPU.
* ``cpu``: 5,000/500/1,000 INRs, 12 epochs, batch 32; seed 0 of every architecture, then seeds 1
  and 2. A run takes a few minutes (DWS, NFN) to about 20 (NG-T) on 2 quiet cores.
* ``smoke``: 64/32/32 INRs, 1 epoch, width 8, 1 layer: plumbing only.

``cpu`` and ``full`` fit missing INRs (in ``data/inrs-<protocol>`` unless ``--data-root`` says
otherwise) with the ``dws-released`` preset; a folder written by ``import-dataset`` (the released
``dws-inrs``) is used as it is.
"""
from __future__ import annotations

import sys
from pathlib import Path

from neuralgraph.bench import Benchmark, Column, main
from neuralgraph.bench.benchmark import write_fit_config
from neuralgraph.bench.published import INR_CLASSIFICATION_ACCURACY
from neuralgraph.bench.runner import benchmark_configs
from neuralgraph.bench.tables import (
    EPOCHS,
    HIDDEN_DIM,
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

# every registered metanetwork, those declared slow last
ORDER = plan_order(tuple(METANETS))

PROTOCOLS = {
    "full": {
        "plan": ((ORDER, (0, 1, 2)),),
        "data": {"limit_train": None, "limit_val": None, "limit_test": None, **DWS_RELEASED},
        "trainer": {"max_epochs": 150},
    },
    "cpu": {
        "plan": ((ORDER, (0,)), (ORDER, (1, 2))),
        "data": {"limit_train": 5000, "limit_val": 500, "limit_test": 1000, **DWS_RELEASED},
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
    (within 5%)."""
    return matched_width(arch, arch, budget_options(arch), classifier_parameters(*REFERENCE),
                         count=classifier_parameters)


def write_configs() -> list[Path]:
    """``configs/benchmarks/inr_classification/<arch>.yaml`` for every architecture, at the matched width, for
    the full protocol's epochs on the folder ``make-inrs`` writes by default."""
    return [write_fit_config(
        CONFIGS / f"{arch}.yaml",
        f"# MNIST INR classification with {arch} at GMN's hidden-64 parameter budget (benchmarks/inr_classification.py).\n",
        "neuralgraph.training.tasks.InrClassification",
        {"metanet": arch, "metanet_config": budget_config(arch), "num_classes": NUM_CLASSES}, None,
        {"root": "data/inrs", "batch_size": 32, **DWS_RELEASED},
        {"max_epochs": PROTOCOLS["full"]["trainer"]["max_epochs"],
         "default_root_dir": f"runs/benchmarks/inr_classification/{arch}"})
        for arch in METANETS]


BENCHMARK = Benchmark(
    name="inr_classification", title="MNIST INR classification", doc=__doc__, script=__file__, protocols=PROTOCOLS,
    systems=tuple(METANETS), configs="inr_classification", write_configs=write_configs,
    result_fields={"test_accuracy": "test/accuracy"},
    progress=lambda result: f"test accuracy {100 * result['test_accuracy']:.2f}%",
    intro=["Test accuracy (%) at the best-validation checkpoint, mean ± std over seeds (n), every architecture at "
           "GMN's parameter budget; published: on the DWS INRs at each paper's own size and full data (FashionMNIST "
           "is not measured here). Generated from the JSON beside this file."],
    columns=(Column("model", lambda group: group.system, always=True),
             seeds_column("measured MNIST", "test_accuracy", scale=100, digits=2),
             published_column("published MNIST", INR_CLASSIFICATION_ACCURACY, 2),
             published_column("published FashionMNIST", INR_CLASSIFICATION_ACCURACY, 3),
             PARAMETERS, HIDDEN_DIM, EPOCHS, wall_column("wall time (min)"), PEAK_MEMORY,
             Column("CPU", lambda group: "; ".join(sorted({r.get("cpu", "not recorded") for r in group.runs})))),
)

if __name__ == "__main__":
    sys.exit(main(BENCHMARK))
