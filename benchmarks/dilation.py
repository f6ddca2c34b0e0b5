"""The MNIST INR dilation benchmark: our measured numbers beside the published ones.

    python benchmarks/dilation.py --protocol smoke|cpu|cpu-large|full [--archs ...] [--k 1 2 4 8] [--seeds 0 1 2]

Without a selection the protocol's plan runs in its order; ``--archs``/``--k``/``--seeds`` keep
the planned runs they match, and all three together ask for exactly those runs.

Each (architecture, k, seed) is trained by ``neuralgraph fit`` (one subprocess per run, so that
its peak memory is its own) and tested at its best-validation checkpoint. Results: a JSON of raw
runs and a markdown table in ``benchmarks/results/dilation_<protocol>_<machine>.{json,md}``. This
file is a description that ``neuralgraph.bench.main`` runs (docs/benchmarks.md, "Adding a benchmark").

The runner is resumable. Each finished run is appended to the JSON as it completes (written to a
temporary file, then renamed: a kill leaves the previous file whole), the markdown is regenerated
from the JSON, and a rerun skips the runs the JSON holds. A run killed mid-fit resumes from its
``last.ckpt`` (``--ckpt_path last``); its record says so (``resumed``, and ``wall_s`` covers
only the resumed part). A recorded run whose settings differ from the current ones is an error
naming the field, never silently mixed into a table.

Protocols (see docs/benchmarks.md for why they are sized as they are):

* ``full``: the paper's: 55k/5k/10k INRs, 150 epochs, batch 32, 3 seeds, every row of the
  paper's table at its published size (``configs/benchmarks/dilation/paper``), k in 1, 2, 4, 8. For a GPU;
  the device is chosen automatically.
* ``cpu``: 1,000/300/300 INRs, 12 epochs, every registered metanetwork and the probe- and
  gradient-feature variants (:data:`CPU_SYSTEMS`), 3 layers, each at the width whose k = 1
  parameter count is nearest GMN's (hidden 64), within 5%, at k = 1 and k = 8 (budget-matched
  to the system's own k = 1), one seed; then GMN and DWS at k = 1, 2, 4, 8 with three seeds;
  then GMN k = 1 seeds 3-23 (the ensembles of ``benchmarks/oce_ablation.py``); then the ablation's
  decoder variants (:data:`CPU_DECODER_VARIANTS`) at k = 8, three seeds; then GMN trained under
  bfloat16 autocast (:data:`CPU_PRECISION_VARIANTS`) at k = 1 and 8, one seed.
  All runs share ``configs/benchmarks/dilation/gmn_k<k>.yaml`` (task, optimiser, batch) but the metanetwork.
* ``cpu-large``: the ``cpu`` settings on 5,000/1,000/1,000 INRs for 30 epochs, GMN and DWS.
* ``smoke``: every paper row at k=1 and k=2, tiny data and widths, one epoch: plumbing only.

``cpu``, ``cpu-large`` and ``full`` fit their INRs (in ``data/inrs-<protocol>`` unless
``--data-root`` says otherwise) with the ``dws-released`` preset, calibrated to the INR set the
published numbers were measured on (docs/inr.md).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

from neuralgraph.bench import Benchmark, Column, main
from neuralgraph.bench.published import DILATION_MSE
from neuralgraph.bench.runner import benchmark_configs, config_file, config_name, fit_arguments
from neuralgraph.bench.tables import EPOCHS, HIDDEN_DIM, PARAMETERS, PEAK_MEMORY, mean_std, wall_minutes
from neuralgraph.bench.widths import REFERENCE, budget_options, inr_spec, matched_width
from neuralgraph.nn import METANETS

ROOT = Path(__file__).resolve().parents[1]
# The systems of the paper's dilation table at their published sizes: configs/benchmarks/dilation/paper/<row>_k<k>.yaml.
PAPER_ROWS = ("nft", "np_nfn", "ng_gnn64", "ng_t64", "scalegmn_b", "scalegmn_b_gradmetanet", "gmn_gradmetanet", "dws",
              "gmn")
# The architecture table of the cpu protocols: name -> (registered metanet, options beside the width):
# every registered metanet, then the probe- and gradient-feature variants.
CPU_SYSTEMS = {
    **{name: (name, budget_options(name)) for name in METANETS},
    "ng_gnn_probe16": ("ng_gnn", {"probe_features": 16}),
    "gmn_grad16": ("gmn", {"gradient_features": 16}),
    "scalegmn_b_grad16": ("scalegmn_b", {"gradient_features": 16}),
}
# The OCE ablation's decoder variants (benchmarks/oce_ablation.py): name -> (cpu system, WeightDecoder members).
# At k = 8 each is budget-matched like the system's own k = 8, counting its decoder's parameters.
CPU_DECODER_VARIANTS = {"gmn_coupled": ("gmn", "coupled"), "gmn_tied": ("gmn", "tied")}
# Trained in another precision (Lightning's ``--trainer.precision``): name -> (cpu system, precision).
CPU_PRECISION_VARIANTS = {"gmn_bf16": ("gmn", "bf16-mixed")}
# The protocols compare k output networks at the k = 1 budget as the paper does: the exact width
# search (InrEditing's default aligns widths to multiples of 8 for speed, at 54-88% of the budget;
# docs/benchmarks.md). Runs recorded before the setting existed were matched so.
PROTOCOL_WIDTH_MULTIPLE = 1
RECORDED_BEFORE = {"budget_width_multiple": 1}  # settings a run recorded before they existed ran with
CPU_DATA = {"limit_train": 1000, "limit_val": 300, "limit_test": 300, "preset": "dws-released"}

PROTOCOLS = {
    "full": {
        "plan": ((PAPER_ROWS, (1, 2, 4, 8), (0, 1, 2)),), "configs": "dilation/paper",
        "data": {"limit_train": None, "limit_val": None, "limit_test": None, "preset": "dws-released"},
        "trainer": {"max_epochs": 150},
    },
    "cpu": {
        # the architecture table, the OCE curve over k with three seeds, then the k = 1 editors that
        # benchmarks/oce_ablation.py averages in three ensembles of eight, then its decoder variants
        "plan": ((tuple(CPU_SYSTEMS), (1, 8), (0,)), (("gmn", "dws"), (1, 2, 4, 8), (0, 1, 2)),
                 (("gmn",), (1,), tuple(range(24))), (tuple(CPU_DECODER_VARIANTS), (8,), (0, 1, 2)),
                 (tuple(CPU_PRECISION_VARIANTS), (1, 8), (0,))),
        "systems": "cpu",
        "data": CPU_DATA, "trainer": {"max_epochs": 12},
    },
    "cpu-large": {
        "plan": ((("gmn", "dws"), (1, 8), (0,)),), "systems": "cpu",
        "data": {**CPU_DATA, "limit_train": 5000, "limit_val": 1000, "limit_test": 1000}, "trainer": {"max_epochs": 30},
    },
    "smoke": {
        "plan": ((PAPER_ROWS, (1, 2), (0,)),), "configs": "dilation/paper",
        "data": {"limit_train": 64, "limit_val": 32, "limit_test": 32},
        "trainer": {"max_epochs": 1},
        "metanet_config": {"hidden_dim": 8, "num_layers": 1},
    },
}


def run_settings(protocol: dict, arch: str, k: int) -> dict:
    """What determines a run but its seed: config (its shipped name), metanet, its config at k = 1, data, trainer
    (and ``decoder_members`` for the decoder variants, the trainer's ``precision`` for the precision ones)."""
    if protocol.get("systems") == "cpu" and arch in CPU_DECODER_VARIANTS:
        system, members = CPU_DECODER_VARIANTS[arch]
        return {**run_settings(protocol, system, k), "decoder_members": members}
    if protocol.get("systems") == "cpu" and arch in CPU_PRECISION_VARIANTS:
        system, precision = CPU_PRECISION_VARIANTS[arch]
        settings = run_settings(protocol, system, k)
        return {**settings, "trainer": {**settings["trainer"], "precision": precision}}
    if protocol.get("systems") == "cpu":
        if arch not in CPU_SYSTEMS:
            raise ValueError(f"{arch}: not a system of the cpu protocols; known: "
                             f"{sorted(CPU_SYSTEMS) + sorted(CPU_DECODER_VARIANTS) + sorted(CPU_PRECISION_VARIANTS)}")
        from neuralgraph.nn.budget import model_parameters

        metanet, options = CPU_SYSTEMS[arch]
        target = model_parameters(REFERENCE[0], REFERENCE[1], 1, spec=inr_spec())[0]
        path, metanet_config = config_path("dilation", "gmn", k), matched_width(arch, metanet, options, target)
    else:
        import yaml

        path = config_path(protocol["configs"], arch, k)
        init_args = yaml.safe_load(path.read_text())["model"]["init_args"]
        reference = {"hidden_dim": init_args["reference_hidden_dim"]} if "reference_hidden_dim" in init_args else {}
        metanet, metanet_config = init_args["metanet"], {**init_args["metanet_config"], **reference,
                                                          **protocol.get("metanet_config", {})}
    return {"config": config_name(path, ROOT), "metanet": metanet, "metanet_config": metanet_config,
            "budget_width_multiple": PROTOCOL_WIDTH_MULTIPLE, "data": protocol["data"], "trainer": protocol["trainer"]}


def run_arguments(settings: dict, seed: int, data_root: Path, out: Path) -> list[str]:
    """``neuralgraph fit`` arguments of one run (resuming from ``out``'s last checkpoint if any; the INRs
    missing from ``data_root`` fitted on first use).

    The settings' k = 1 width is the run's ``reference_hidden_dim``: the task matches its width to that
    budget (at k = 1, the width itself).
    """
    config = dict(settings["metanet_config"])
    width = config.pop("hidden_dim")
    model = {"reference_hidden_dim": width, "budget_width_multiple": settings["budget_width_multiple"]}
    if "decoder_members" in settings:
        model["decoder_members"] = settings["decoder_members"]
    return fit_arguments(config_file(settings["config"], ROOT), seed, data_root, out, settings["metanet"], config,
                         settings["data"], settings["trainer"], model, build=True)


def config_path(folder: str, arch: str, k: int) -> Path:
    """``configs/benchmarks/<folder>/<arch>_k<k>.yaml``; FileNotFoundError naming it when absent."""
    path = benchmark_configs(ROOT, folder) / f"{arch}_k{k}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path.relative_to(ROOT)}: no config for {arch} at k={k} in this protocol")
    return path


def mse(group) -> list[float]:
    return [100 * r["test_mse"] for r in group.runs]


def k1_ratio(group) -> str:
    """The ratio of the mean test MSE to the same model's k = 1 mean (empty at k = 1 or without k = 1 runs)."""
    k1 = [100 * r["test_mse"] for r in group.report.runs if (r["arch"], r["k"]) == (group.system, 1)]
    return f"{statistics.mean(mse(group)) / statistics.mean(k1):.2f}" if group.k != 1 and k1 else ""


def seeds(group) -> str:
    runs = group.runs
    return f"measured ({group.report.protocol_name}, seed{'s' * (len(runs) > 1)} {', '.join(str(r['seed']) for r in runs)})"


BENCHMARK = Benchmark(
    name="dilation", title="MNIST INR dilation", doc=__doc__, script=__file__, protocols=PROTOCOLS,
    systems=sorted({*CPU_SYSTEMS, *CPU_DECODER_VARIANTS, *CPU_PRECISION_VARIANTS, *PAPER_ROWS}),
    systems_help="systems (cpu protocols) or paper rows (full, smoke)", per_k=True,
    settings=run_settings, arguments=run_arguments, recorded_before=RECORDED_BEFORE, runs_folder="",
    curve=("val/mse", 100.0),
    result_fields={"test_mse": "test/mse", "test_psnr": "test/psnr?"},
    progress=lambda result: f"test MSE x1e-2 {100 * result['test_mse']:.3f}",
    intro=["Test MSE x1e-2 at the best-validation checkpoint (mean ± std over seeds); k/k1: the ratio of the mean to "
           "the same model's k = 1 mean. Generated from the JSON beside this file."],
    every_system=False,
    columns=(Column("source", seeds), Column("model", lambda group: group.system), Column("k", lambda group: group.k),
             Column("test MSE x1e-2", lambda group: mean_std(mse(group))), Column("k/k1", k1_ratio), PARAMETERS,
             HIDDEN_DIM, EPOCHS, Column("wall time (min)", wall_minutes), PEAK_MEMORY),
    extra_rows=lambda report: [["published (full protocol)", name, k, f"{value:.2f}", None, None, None, "150", None, None]
                               for name, _, k, value in DILATION_MSE],
)

if __name__ == "__main__":
    sys.exit(main(BENCHMARK))
