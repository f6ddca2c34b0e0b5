"""The MNIST INR dilation benchmark: our measured numbers beside the published ones.

    python benchmarks/dilation.py --protocol smoke|cpu|cpu-large|full [--archs ...] [--k 1 2 4 8] [--seeds 0 1 2]

Without a selection the protocol's plan runs in its order; ``--archs``/``--k``/``--seeds`` keep
the planned runs they match, and all three together ask for exactly those runs.

Each (architecture, k, seed) is trained by ``neuralgraph fit`` (one subprocess per run, so that
its peak memory is its own) and tested at its best-validation checkpoint. Results: a JSON of raw
runs and a markdown table in ``benchmarks/results/dilation_<protocol>_<machine>.{json,md}``.

The runner is resumable. Each finished run is appended to the JSON as it completes (written to a
temporary file, then renamed: a kill leaves the previous file whole), the markdown is regenerated
from the JSON, and a rerun skips the runs the JSON holds. A run killed mid-fit resumes from its
``last.ckpt`` (``--ckpt_path last``); its record says so (``resumed``, and ``wall_s`` covers
only the resumed part). A recorded run whose settings differ from the current ones is an error
naming the field, never silently mixed into a table.

Protocols (see docs/benchmarks.md for why they are sized as they are):

* ``full``: the paper's: 55k/5k/10k INRs, 150 epochs, batch 32, 3 seeds, every row of the
  paper's table at its published size (``configs/dilation/paper``), k in 1, 2, 4, 8. For a GPU;
  the device is chosen automatically.
* ``cpu``: 1,000/300/300 INRs, 12 epochs, every registered metanetwork and the probe- and
  gradient-feature variants (:data:`CPU_SYSTEMS`), 3 layers, each at the width whose k = 1
  parameter count is nearest GMN's (hidden 64), within 5%, at k = 1 and k = 8 (budget-matched
  to the system's own k = 1), one seed; then GMN and DWS at k = 1, 2, 4, 8 with three seeds;
  then GMN k = 1 seeds 3-23 (the ensembles of ``benchmarks/oce_ablation.py``); then the ablation's
  decoder variants (:data:`CPU_DECODER_VARIANTS`) at k = 8, three seeds; then GMN trained under
  bfloat16 autocast (:data:`CPU_PRECISION_VARIANTS`) at k = 1 and 8, one seed.
  All runs share ``configs/dilation/gmn_k<k>.yaml`` (task, optimiser, batch) but the metanetwork.
* ``cpu-large``: the ``cpu`` settings on 5,000/1,000/1,000 INRs for 30 epochs, GMN and DWS.
* ``smoke``: every paper row at k=1 and k=2, tiny data and widths, one epoch: plumbing only.

``cpu``, ``cpu-large`` and ``full`` fit their INRs (in ``data/inrs-<protocol>`` unless
``--data-root`` says otherwise) with the ``dws-released`` preset, calibrated to the INR set the
published numbers were measured on (docs/inr.md).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

import torch

from neuralgraph.nn import METANETS
from runner import fit_and_record, fit_arguments, load_runs, run_missing, select_runs, write_atomic

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# The systems of the paper's dilation table at their published sizes: configs/dilation/paper/<row>_k<k>.yaml.
PAPER_ROWS = ("nft", "np_nfn", "ng_gnn64", "ng_t64", "scalegmn_b", "scalegmn_b_gradmetanet", "gmn_gradmetanet", "dws",
              "gmn")
# Options beside the width of a registered metanet in the cpu protocols. Two attention heads: widths
# then move in steps of 2, fine enough to land within 5% of the budget.
CPU_OPTIONS = {"ng_t": {"num_heads": 2}, "nft": {"num_heads": 2}}
# The architecture table of the cpu protocols: name -> (registered metanet, options beside the width):
# every registered metanet, then the probe- and gradient-feature variants.
CPU_SYSTEMS = {
    **{name: (name, CPU_OPTIONS.get(name, {})) for name in METANETS},
    "ng_gnn_probe16": ("ng_gnn", {"probe_features": 16}),
    "gmn_grad16": ("gmn", {"gradient_features": 16}),
    "scalegmn_b_grad16": ("scalegmn_b", {"gradient_features": 16}),
}
# The OCE ablation's decoder variants (benchmarks/oce_ablation.py): name -> (cpu system, WeightDecoder members).
# At k = 8 each is budget-matched like the system's own k = 8, counting its decoder's parameters.
CPU_DECODER_VARIANTS = {"gmn_coupled": ("gmn", "coupled"), "gmn_tied": ("gmn", "tied")}
# Trained in another precision (Lightning's ``--trainer.precision``): name -> (cpu system, precision).
CPU_PRECISION_VARIANTS = {"gmn_bf16": ("gmn", "bf16-mixed")}
CPU_DEPTH = {"num_layers": 3, "dropout": 0.0}
CPU_REFERENCE = ("gmn", {"hidden_dim": 64, **CPU_DEPTH})  # the k = 1 budget every cpu system is matched to
BUDGET_TOLERANCE = 0.05
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

# Published test MSE x1e-2 on MNIST INR dilation (2026 OCE paper and the works it compares to).
PUBLISHED = [
    ("NFT", "nft", 1, 5.10), ("NP-NFN", "np_nfn", 1, 2.55), ("NG-GNN-64", "ng_gnn64", 1, 2.06),
    ("ScaleGMN-B", "scalegmn_b", 1, 1.89), ("NG-T-64", "ng_t64", 1, 1.75),
    ("ScaleGMN + GradMetaNet++", "scalegmn_b_gradmetanet", 1, 1.60),
    ("OCE DWS k=1", "dws", 1, 2.29), ("OCE DWS k=2", "dws", 2, 2.01), ("OCE DWS k=4", "dws", 4, 1.58),
    ("OCE DWS k=8", "dws", 8, 1.36), ("OCE GMN k=1", "gmn", 1, 1.96), ("OCE GMN k=2", "gmn", 2, 1.69),
    ("OCE GMN k=4", "gmn", 4, 1.19), ("OCE GMN k=8", "gmn", 8, 1.06),
]


def machine_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0).replace(" ", "-").lower()
    return f"cpu{torch.get_num_threads()}"


def matched_width(name: str, metanet: str, options: dict, target: int, tolerance: float = BUDGET_TOLERANCE,
                  count=None) -> dict:
    """``CPU_DEPTH`` + ``options`` at the ``hidden_dim`` whose parameter count is nearest ``target``.

    ``count(metanet, config)`` counts a model's parameters (default: metanet + k = 1 ``WeightDecoder``;
    the classification benchmark counts its readout instead). Widths respect the metanetwork's
    ``hidden_dim_multiple_of``; ValueError naming the system when the nearest is more than
    ``tolerance`` (relative) away.
    """
    from neuralgraph.nn.budget import hidden_dim_step, model_parameters

    config = {**CPU_DEPTH, **options}
    step = hidden_dim_step(metanet, config)

    def params(multiple: int) -> int:
        sized = {**config, "hidden_dim": multiple * step}
        return count(metanet, sized) if count else model_parameters(metanet, sized, 1)[0]

    low, high = 1, 2  # grow high past the target, then bisect: params(low) <= target < params(high)
    while params(high) <= target:
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if params(middle) <= target else (low, middle)
    best = min((low, high), key=lambda m: abs(params(m) - target))
    found = params(best)
    if abs(found - target) > tolerance * target:
        raise ValueError(f"{name}: no hidden_dim gives {target:,} parameters within {tolerance:.0%} "
                         f"(nearest: {found:,} at hidden_dim={best * step})")
    return {**config, "hidden_dim": best * step}


def run_settings(protocol: dict, arch: str, k: int) -> dict:
    """What determines a run but its seed: config file, metanet, its config at k = 1, data, trainer
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
        target = model_parameters(CPU_REFERENCE[0], CPU_REFERENCE[1], 1)[0]
        config_file, metanet_config = config_path("dilation", "gmn", k), matched_width(arch, metanet, options, target)
    else:
        import yaml

        config_file = config_path(protocol["configs"], arch, k)
        init_args = yaml.safe_load(config_file.read_text())["model"]["init_args"]
        reference = {"hidden_dim": init_args["reference_hidden_dim"]} if "reference_hidden_dim" in init_args else {}
        metanet, metanet_config = init_args["metanet"], {**init_args["metanet_config"], **reference,
                                                          **protocol.get("metanet_config", {})}
    return {"config": str(config_file.relative_to(ROOT)), "metanet": metanet, "metanet_config": metanet_config,
            "budget_width_multiple": PROTOCOL_WIDTH_MULTIPLE, "data": protocol["data"], "trainer": protocol["trainer"]}


def run_arguments(settings: dict, seed: int, data_root: Path, out: Path) -> list[str]:
    """``neuralgraph fit`` arguments of one run (resuming from ``out``'s last checkpoint if any).

    The settings' k = 1 width is the run's ``reference_hidden_dim``: the task matches its width to that
    budget (at k = 1, the width itself).
    """
    config = dict(settings["metanet_config"])
    width = config.pop("hidden_dim")
    model = {"reference_hidden_dim": width, "budget_width_multiple": settings["budget_width_multiple"]}
    if "decoder_members" in settings:
        model["decoder_members"] = settings["decoder_members"]
    return fit_arguments(ROOT / settings["config"], seed, data_root, out, settings["metanet"], config,
                         settings["data"], settings["trainer"], model)


def config_path(folder: str, arch: str, k: int) -> Path:
    """``configs/<folder>/<arch>_k<k>.yaml``; FileNotFoundError naming it when absent."""
    path = ROOT / "configs" / folder / f"{arch}_k{k}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path.relative_to(ROOT)}: no config for {arch} at k={k} in this protocol")
    return path


def run_one(argv: list[str], result_path: Path) -> None:
    """Child process: one fit (+ test at best validation), results to ``result_path``."""
    metrics, record = fit_and_record(argv)
    write_atomic(result_path, json.dumps({"test_mse": metrics["test/mse"], "test_psnr": metrics.get("test/psnr"),
                                          **record}, indent=2))


def seeds_cell(values: list[float]) -> str:
    """``mean ± std (n)`` of values over seeds, ``mean (1)`` for one, ``not run yet`` for none."""
    if not values:
        return "not run yet"
    spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.3f}{spread} ({len(values)})"


def summarize(runs: list[dict], protocol_name: str, machine: str, missing: list[tuple[str, int, int]]) -> str:
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["arch"], r["k"]), []).append(r)
    means = {key: statistics.mean(100 * r["test_mse"] for r in rs) for key, rs in groups.items()}
    lines = [f"# MNIST INR dilation — protocol `{protocol_name}` on `{machine}`", "",
             "Test MSE x1e-2 at the best-validation checkpoint (mean ± std over seeds); k/k1: the ratio of "
             "the mean to the same model's k = 1 mean. Generated from the JSON beside this file.", "",
             "| source | model | k | test MSE x1e-2 | k/k1 | parameters | hidden_dim | epochs | wall time (min) "
             "| peak memory (MB) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (arch, k), rs in sorted(groups.items()):
        mses = [100 * r["test_mse"] for r in rs]
        spread = f" ± {statistics.stdev(mses):.3f}" if len(mses) > 1 else ""
        ratio = f"{means[arch, k] / means[arch, 1]:.2f}" if k != 1 and (arch, 1) in means else ""
        memory = rs[0]["peak_cuda_mb"] if rs[0]["peak_cuda_mb"] is not None else rs[0]["peak_rss_mb"]
        resumed = " (resumed)" if any(r.get("resumed") for r in rs) else ""
        lines.append(f"| measured ({protocol_name}, seed{'s' * (len(rs) > 1)} {', '.join(str(r['seed']) for r in rs)}) "
                     f"| {arch} | {k} | {statistics.mean(mses):.3f}{spread} | {ratio} | {rs[0]['parameters']:,} "
                     f"| {rs[0]['hidden_dim']} | {rs[0]['epochs']} "
                     f"| {statistics.mean(r['wall_s'] for r in rs) / 60:.1f}{resumed} | {memory:.0f} |")
    for name, arch, k, mse in PUBLISHED:
        lines.append(f"| published (full protocol) | {name} | {k} | {mse:.2f} | | | | 150 | | |")
    if missing:
        lines += ["", f"Not run yet ({len(missing)} of the protocol's runs): "
                  + ", ".join(f"{arch} k={k} seed {seed}" for arch, k, seed in missing) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=sorted(PROTOCOLS), default="smoke")
    parser.add_argument("--archs", nargs="+", choices=sorted({*CPU_SYSTEMS, *CPU_DECODER_VARIANTS, *CPU_PRECISION_VARIANTS, *PAPER_ROWS}),
                        help="systems (cpu protocols) or paper rows (full, smoke)")
    parser.add_argument("--k", nargs="+", type=int)
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument("--data-root", type=Path, default=None, help="INR folder (default: data/inrs-<protocol>)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "benchmarks")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--run-one", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one:
        run_one(args.run_one[1:], Path(args.run_one[0]))
        return 0
    protocol = PROTOCOLS[args.protocol]
    data_root = args.data_root or ROOT / "data" / f"inrs-{args.protocol}"
    plan = list(dict.fromkeys(  # the protocol's runs in its order, each once
        (arch, k, seed) for archs, ks, seeds in protocol["plan"] for arch in archs for k in ks for seed in seeds))
    todo = select_runs(plan, args.archs, args.k, args.seeds)
    machine = machine_name()
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"dilation_{args.protocol}_{machine}"
    runs = load_runs(stem.with_suffix(".json"))
    settings = {(arch, k): run_settings(protocol, arch, k) for arch, k in dict.fromkeys((a, k) for a, k, _ in todo)}

    def save() -> None:
        done = {(r["arch"], r["k"], r["seed"]) for r in runs}
        meta = {"protocol": args.protocol, "machine": machine, "platform": platform.platform(),
                "torch": torch.__version__, "runs": runs}
        write_atomic(stem.with_suffix(".json"), json.dumps(meta, indent=2))
        write_atomic(stem.with_suffix(".md"),
                     summarize(runs, args.protocol, machine, [run for run in plan if run not in done]))

    run_missing(__file__, f"[{args.protocol}]", todo, runs, lambda arch, k: settings[arch, k], stem.with_suffix(".json"),
                args.out / args.protocol, lambda arch, k, seed, out: run_arguments(settings[arch, k], seed, data_root, out),
                save, lambda result: f"test MSE x1e-2 {100 * result['test_mse']:.3f}", recorded_before=RECORDED_BEFORE)
    save()
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
