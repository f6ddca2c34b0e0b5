"""Generalization prediction on a Small-CNN-Zoo-format MNIST zoo: Kendall's tau and R^2 of every architecture.

    python benchmarks/generalization.py --protocol smoke|cpu [--archs ...] [--seeds 0 1 2] [--zoo DIR]
    python benchmarks/generalization.py --write-configs     # configs/benchmarks/generalization/<system>.yaml

The zoo is written by ``neuralgraph make-cnn-zoo --preset small-cnn-zoo`` (the Small CNN Zoo's
architecture, hyperparameter distribution and file format, trained on MNIST here) and read through
the importer a user of the released zoo runs, ``neuralgraph import-dataset small-cnn-zoo``, at its
last checkpoint, with NFN's split (second half test, first half 80/20 train/val). Both steps are
resumable and run here when their folder is missing or unfinished (``--zoo``, default
``data/small_cnn_zoo_<protocol>``; imported into ``<zoo>-imported``, and ``<zoo>-tanh`` for the
tanh networks alone).

Each (system, seed) is trained by ``neuralgraph fit`` (``GeneralizationPrediction``: MSE on the test
accuracy; one subprocess per run, so that its peak memory is its own) and tested at its
best-validation checkpoint (lowest validation MSE); its test Kendall tau and R^2 are recorded.
A description that ``neuralgraph.bench.main`` runs, with the resumable bookkeeping of every benchmark: each finished run is appended to
``benchmarks/results/generalization_<protocol>_<machine>.json`` (temporary file, then rename), the
markdown beside it is regenerated from it, a rerun skips the runs it holds, a run killed mid-fit
resumes from its ``last.ckpt``, and a recorded run whose settings differ from the current ones is
an error naming the field. The zoo's bytes depend on the CPU that trained it (docs/datasets.md), so
each run records the imported zoo's ``data_sha256`` and a results file holds the runs of one zoo
(``--results DIR`` for another's).

Systems (:data:`SYSTEMS`), each at the width whose model (metanetwork + readout) has the parameter
count nearest GMN's at hidden 64 and 3 layers, within the metanetwork's declared ``budget_tolerance`` (``neuralgraph.bench.widths.matched_width``; 5%,
10% for DWS and NFN-HNP, whose counts move in coarser steps):

* every registered metanetwork whose symmetry holds on the mixed relu/tanh zoo, and StatNN
  (``neuralgraph.nn.statnn``: an MLP on per-layer weight and bias statistics);
* ScaleGMN and ScaleGMN-B are equivariant to the scaling group of one activation (sign flips for
  tanh, positive rescalings for ReLU): on the mixed zoo that group is wrong for half the networks,
  so they run on the zoo's tanh networks (``scalegmn_tanh``, ``scalegmn_b_tanh``), beside GMN on the
  same subset (``gmn_tanh``);
* the probing baselines ``probegen`` and ``probe`` (``neuralgraph.nn.probegen``: learned input images
  through the ZooNetwork each graph rebuilds), at their reference code's settings.

Protocols:

* ``cpu``: the Small-CNN-Zoo preset at CPU scale of docs/cnn_zoo.md (``make-cnn-zoo --preset
  small-cnn-zoo --networks 192 --epochs 0 1 2 3 20``: the recipe's 60,000 images, batch 512 and
  hyperparameter distribution; 28 min on the 2-core Xeon), imported at checkpoints 1, 2, 3 and 20:
  768 entries, NFN's split applied to the networks (``--split-by network``), so that no network
  has checkpoints in two splits: 76/20/96 train/val/test networks, 304/80/384 entries.
  Every system 50 epochs, batch 32, seed 0 (fast systems first), then seeds 1 and 2.
* ``cpu-wide``: the same data and training, DWS and NFN-HNP at hidden 24 (about 5 times GMN's
  budget) instead of the budget's 10, three seeds: whether their width is what holds them back.
* ``cpu-probing``: the same data, ProbeGen and vanilla probing for their reference code's 150
  epochs instead of 50.
* ``smoke``: 16 networks trained on the embedded MNIST subset, width 8, 1 layer, 1 epoch: plumbing only.
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import torch

from neuralgraph.bench import Benchmark, Data, main
from neuralgraph.bench.benchmark import write_fit_config
from neuralgraph.bench.runner import benchmark_configs
from neuralgraph.bench.machine import cpu_description
from neuralgraph.bench.published import CIFAR10_GS_TAU
from neuralgraph.bench.tables import (EPOCHS, FLOPS, HIDDEN_DIM, MACHINE, PARAMETERS, SYSTEM, published_column, seeds_column,
                                      wall_column)
from neuralgraph.bench.widths import (BUDGET_TOLERANCE, REFERENCE, budget_options, budget_tolerance, matched_width,
                                       plan_order, readout_parameters)
from neuralgraph.nn import METANETS

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = benchmark_configs(ROOT, "generalization")
LAYER_FEATURES = [9, 9, 9, 1]  # real edge features of the zoo's weight layers: three 3x3 kernels, the classifier
# system -> (registered metanet or baseline, options beside the width, activations of the networks read or None)
SYSTEMS = {
    "statnn": ("statnn", {"num_layers": 2, "dropout": 0.0, "layer_features": LAYER_FEATURES}, None),
    **{name: (name, budget_options(name), None) for name, cls in METANETS.items() if cls.scaling is None},
    "scalegmn_tanh": ("scalegmn", {"network_activation": "tanh"}, "tanh"),
    "scalegmn_b_tanh": ("scalegmn_b", {"network_activation": "tanh"}, "tanh"),
    "gmn_tanh": ("gmn", {}, "tanh"),
    "probegen": ("probegen", {"network": "cnn_zoo"}, None),
    "probe": ("probe", {"network": "cnn_zoo"}, None),
}
# the probing baselines run at their reference code's settings (neuralgraph/nn/probegen.py: 128 probes, a
# classifier of width 256, Adam at 3e-4 without weight decay or input normalisation), not at GMN's budget
PROBING = {"probegen", "probe"}
PROBING_TASK = {"lr": 3.0e-4, "weight_decay": 0.0, "normalize_inputs": False}
# registered metanetworks that do not run on the mixed zoo, and why (a line of the table)
REFUSED = {name: "equivariant to one activation's scaling group; the zoo mixes relu and tanh "
                 f"(run on the tanh networks: {name}_tanh)"
           for name, cls in METANETS.items() if cls.scaling is not None}

# the cpu protocol's order: the registry's, the architectures declared slow (NG-GNN and NG-T, about 1 min an
# epoch on one thread) last
EPOCHS_CPU = 50
CPU_ORDER = plan_order(tuple(SYSTEMS), lambda system: SYSTEMS[system][0])
# the zoo's bytes depend on the CPU that trained it (ATen's AVX-512 and AVX2 kernels train other networks from
# the same seeds: docs/datasets.md), so every run records the zoo's data_sha256; the runs recorded before it
# existed read the zoo built on the Intel Xeon, the CPU of every one of them
UNRECORDED_ZOO = "the zoo built on an Intel Xeon (AVX-512/AMX), recorded before data_sha256"

# docs/cnn_zoo.md's CPU-scale zoo of the released recipe
CPU_ZOO = {"networks": 192, "checkpoint_epochs": [0, 1, 2, 3, 20], "train_size": 60000, "test_size": 10000,
           "batch_size": 512, "shard_size": 64, "seed": 0, "source": "full"}
PROTOCOLS = {
    "cpu": {
        "plan": ((CPU_ORDER, (0,)), (CPU_ORDER, (1, 2))),
        "zoo": CPU_ZOO,
        "steps": [1, 2, 3, 20],
        "split_by": "network",
        "trainer": {"max_epochs": EPOCHS_CPU},
        "batch_size": 32,
    },
    # the weight-space models (DWS, NFN-HNP: hidden 10 at the budget) at hidden 24, on the cpu protocol's data:
    # is their width why they rank below StatNN here?
    "cpu-wide": {
        "plan": ((("dws", "nfn_hnp"), (0, 1, 2)),),
        "zoo": CPU_ZOO,
        "steps": [1, 2, 3, 20],
        "split_by": "network",
        "trainer": {"max_epochs": EPOCHS_CPU},
        "batch_size": 32,
        "metanet_config": {"hidden_dim": 24},
    },
    # the probing baselines for their reference code's 150 epochs (Small CNN Zoo script) on the cpu protocol's data
    "cpu-probing": {
        "plan": ((("probegen", "probe"), (0,)), (("probegen", "probe"), (1, 2))),
        "zoo": CPU_ZOO,
        "steps": [1, 2, 3, 20],
        "split_by": "network",
        "trainer": {"max_epochs": 150},
        "batch_size": 32,
    },
    "smoke": {
        "plan": ((tuple(SYSTEMS), (0,)),),
        "zoo": {"networks": 16, "checkpoint_epochs": [1, 2], "train_size": 200, "test_size": 60,
                "batch_size": 8, "shard_size": 8, "seed": 0, "source": "embedded"},
        "steps": [2],
        "split_by": "row",
        "trainer": {"max_epochs": 1},
        "batch_size": 4,
        "metanet_config": {"hidden_dim": 8, "num_layers": 1},
    },
}


@functools.lru_cache(maxsize=None)
def zoo_spec(activations: tuple[str, ...]):
    """The GraphSpec of zoo networks of ``activations`` (the parameter counts depend on it: edge features 9,
    and the activation embedding when the activations vary)."""
    from torch_geometric.data import Batch

    from neuralgraph.data.cnn_zoo import ZooNetwork
    from neuralgraph.graph import module_to_graph
    from neuralgraph.graph.spec import GraphSpec

    return GraphSpec.of(Batch.from_data_list([module_to_graph(ZooNetwork(activation=a)) for a in activations]))


def model_parameters(metanet: str, config: dict, activations: tuple[str, ...] = ("relu", "tanh")) -> int:
    """Trainable parameters of ``GeneralizationPrediction``'s model on the zoo: the metanetwork and its readout."""
    return readout_parameters(metanet, config, 1, zoo_spec(activations))


def subset_activations(subset) -> tuple[str, ...]:
    return ("relu", "tanh") if subset is None else (subset,)


@functools.lru_cache(maxsize=None)
def reference_parameters() -> int:
    return model_parameters(*REFERENCE)


def budget_config(system: str) -> dict:
    """The metanet config of ``configs/benchmarks/generalization/<system>.yaml``: ``CPU_DEPTH`` and the system's
    options at the width whose model is nearest GMN's at hidden 64 on the mixed zoo (within its declared
    ``budget_tolerance``)."""
    metanet, options, subset = SYSTEMS[system]
    if system in PROBING:
        return {**options, "dropout": 0.0}
    return matched_width(system, metanet, options, reference_parameters(),
                         count=lambda name, config: model_parameters(name, config, subset_activations(subset)))


def write_configs() -> list[Path]:
    """``configs/benchmarks/generalization/<system>.yaml`` for every system, at the matched width."""
    return [write_fit_config(
        CONFIGS / f"{system}.yaml",
        f"# Generalization prediction (benchmarks/generalization.py): {system} "
        + ("at its reference settings (not a parameter budget)" if system in PROBING else "at GMN's hidden-64 budget")
        + ("" if subset is None else f", on the zoo's {subset} networks") + ".\n"
        "# The zoo: neuralgraph make-cnn-zoo --preset small-cnn-zoo, imported with "
        "neuralgraph import-dataset small-cnn-zoo (docs/benchmarks.md).\n",
        "neuralgraph.training.tasks.GeneralizationPrediction",
        {"metanet": metanet, "metanet_config": budget_config(system), **(PROBING_TASK if system in PROBING else {})},
        "neuralgraph.training.cnn_zoo_datamodule.CnnZooDataModule",
        {"root": "data/small_cnn_zoo_cpu-" + ("imported" if subset is None else subset), "batch_size": 32},
        {"max_epochs": PROTOCOLS["cpu"]["trainer"]["max_epochs"], "default_root_dir": f"runs/benchmarks/generalization/{system}"})
        for system, (metanet, _, subset) in SYSTEMS.items()]


def prepare_zoo(protocol: dict, zoo: Path, subsets: set) -> dict:
    """Write (or finish, or verify) the protocol's zoo and its imports; ``{None or activation: imported folder}``."""
    from neuralgraph.data.importing import import_dataset
    from neuralgraph.data.small_cnn_zoo_preset import PresetSettings, make_small_cnn_zoo

    settings = protocol["zoo"]
    make_small_cnn_zoo(zoo, PresetSettings(**{**settings, "checkpoint_epochs": tuple(settings["checkpoint_epochs"])}),
                       progress=False)
    folders = {}
    for subset in sorted(subsets, key=str):
        out = zoo.with_name(zoo.name + "-" + ("imported" if subset is None else subset))
        import_dataset("small-cnn-zoo", zoo, out, steps=tuple(protocol["steps"]), split_by=protocol["split_by"],
                       progress=False,
                       **({} if subset is None else {"activations": [subset]}))
        folders[subset] = out
    return folders


def zoo_sha256(folders: dict) -> str:
    """The zoo's ``data_sha256``: the sha256 of the shards' sha256s of its import of every network (the
    other imports are subsets of the same networks)."""
    from neuralgraph.data.shards import folder_sha256

    return folder_sha256(json.loads((folders[None] / "manifest.json").read_text()))


def zoo_description(folders: dict) -> list[str]:
    """Split sizes and the test split's accuracy quartiles of each imported folder."""
    from neuralgraph.data.cnn_zoo import CnnZooDataset

    lines = []
    for subset, folder in folders.items():
        sizes = {split: len(CnnZooDataset(folder, split)) for split in ("train", "val", "test")}
        accuracy = CnnZooDataset(folder, "test").accuracy
        q = torch.quantile(accuracy.double(), torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64)).tolist()
        lines.append(f"* `{folder.name}` ({'every network' if subset is None else f'the {subset} networks'}): "
                     f"{sizes['train']}/{sizes['val']}/{sizes['test']} train/val/test entries (network x checkpoint); "
                     "test-split accuracy min / quartiles / max " + " / ".join(f"{v:.3f}" for v in q)
                     + (f"; data_sha256 {zoo_sha256(folders)[:12]}." if subset is None else "."))
    return lines


def zoo_paragraph(report) -> str:
    zoo = report.protocol["zoo"]
    return (f"Zoo: `make-cnn-zoo --preset small-cnn-zoo`, {zoo['networks']:,} networks of the Small CNN Zoo's "
            f"architecture and hyperparameter distribution, trained on the first {zoo['train_size']:,} "
            f"{zoo['source']} MNIST training images (each on its fraction of them), batches of {zoo['batch_size']}, "
            f"checkpoints at epochs {zoo['checkpoint_epochs']}, test accuracy on the first {zoo['test_size']:,} test "
            f"images; imported with `import-dataset small-cnn-zoo` at checkpoint epochs {report.protocol['steps']}, "
            + ("NFN's split applied to the networks (`--split-by network`: each network's checkpoints in one split; "
               "the second half of the networks the test split):" if report.protocol["split_by"] == "network"
               else "NFN's split:"))


def training_paragraph(report) -> str:
    protocol = report.protocol
    return (f"Every model trains {protocol['trainer']['max_epochs']} epoch(s) (batch {protocol['batch_size']}) and is "
            "tested at its best-validation checkpoint (lowest validation MSE); mean ± std over seeds (n); every "
            "system at the width whose model (metanetwork + readout) is nearest GMN's at hidden 64, within 5% ("
            + ", ".join(f"{name} {budget_tolerance(metanet):.0%}" for name, (metanet, _, _) in SYSTEMS.items()
                        if name not in PROBING and budget_tolerance(metanet) != BUDGET_TOLERANCE)
            + ": their counts move in coarser steps); the probing baselines (probegen, probe) at their reference "
            "code's settings instead (128 probes, a classifier of width 256, Adam at 3e-4, no weight decay), for the "
            "same epochs"
            + (f"; this protocol overrides {protocol['metanet_config']}" if "metanet_config" in protocol else "")
            + f". CPU: {cpu_description()}, torch {torch.__version__}. Generated from the JSON beside this file.")


BENCHMARK = Benchmark(
    name="generalization", title="Generalization prediction on a Small-CNN-Zoo-format MNIST zoo", doc=__doc__,
    script=__file__, protocols=PROTOCOLS, systems=tuple(SYSTEMS), configs="generalization",
    recorded=("zoo", "steps", "split_by", "batch_size", "trainer"), system_settings=lambda system: {"subset": SYSTEMS[system][2]},
    recorded_before={"data_sha256": UNRECORDED_ZOO},
    data=Data(option="--zoo",
              default=lambda protocol: "data/small_cnn_zoo_" + ("cpu" if protocol.startswith("cpu") else protocol),
              help="preset zoo folder (default: data/small_cnn_zoo_<protocol>; cpu-wide reads cpu's)",
              prepare=lambda protocol, zoo, systems: prepare_zoo(protocol, zoo, {SYSTEMS[s][2] for s in systems} | {None}),
              root=lambda folders, system: folders[SYSTEMS[system][2]],
              fit=lambda settings: {"batch_size": settings["batch_size"]}, fingerprint=zoo_sha256),
    write_configs=write_configs,
    curve=("val/kendall_tau", 1.0),
    result_fields={"kendall_tau": "test/kendall_tau", "r2": "test/r2"},
    progress=lambda result: f"Kendall tau {result['kendall_tau']:.3f}, R^2 {result['r2']:.3f}",
    intro=[zoo_paragraph, lambda report: "\n".join(zoo_description(report.data)), training_paragraph,
           "The published column is **another dataset**: Kendall tau on CIFAR10-GS of the released Small CNN Zoo "
           "(CIFAR-10 networks, 30k trained 86 epochs), from the NFN and NG-GNN/NG-T papers; it is there for "
           "reference, not as a target these numbers should reach."],
    columns=(SYSTEM, seeds_column("Kendall tau", "kendall_tau"), seeds_column("R^2", "r2"),
             published_column("published tau, CIFAR10-GS (other dataset)", CIFAR10_GS_TAU, 2, ".3f"),
             PARAMETERS, FLOPS, HIDDEN_DIM, EPOCHS, wall_column(), MACHINE),
    extra_rows=lambda report: [[f"{name} (every network)", f"not run: {reason}", *[None] * 8]
                               for name, reason in REFUSED.items()],
)

if __name__ == "__main__":
    sys.exit(main(BENCHMARK))
