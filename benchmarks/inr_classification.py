"""MNIST INR classification: every registered metanetwork at one parameter budget, beside the published accuracies.

    python benchmarks/inr_classification.py --protocol smoke|cpu|full [--archs ...] [--seeds 0 1 2] [--data-root DIR]

Without a selection the protocol's plan runs in its order; ``--archs``/``--seeds`` keep the planned
runs they match, and both together ask for exactly those runs.

Each (architecture, seed) is trained by ``neuralgraph fit`` (``InrClassification``, one subprocess
per run so that its peak memory is its own) and tested at its best-validation checkpoint (lowest
validation cross entropy). Results: a JSON of raw runs and a markdown table in
``benchmarks/results/inr_classification_<protocol>_<machine>.{json,md}``.

Resumable as ``benchmarks/dilation.py`` is, with its bookkeeping: each finished run is appended to
the JSON (temporary file, then rename), the markdown is regenerated from it, a rerun skips the runs
it holds, a run killed mid-fit resumes from its ``last.ckpt``, and a recorded run whose settings
differ from the current ones is an error naming the field.

Every architecture runs ``configs/inr_classification/<arch>.yaml``: 3 layers at the width whose
classifier (metanetwork + readout) has the parameter count nearest GMN's at hidden 64, within 5%
(dilation's ``matched_width`` counting the readout: readouts range from 16k to 136k parameters,
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

import json
import statistics
import sys
from pathlib import Path

import yaml

from dilation import CPU_DEPTH, CPU_OPTIONS, machine_name, matched_width
from neuralgraph.nn import METANETS
from runner import (
    fit_and_record,
    fit_arguments,
    load_runs,
    protocol_runs,
    results_saver,
    run_missing,
    seeded_parser,
    write_atomic,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CONFIGS = ROOT / "configs" / "inr_classification"
DWS_RELEASED = {"preset": "dws-released"}
NUM_CLASSES = 10
REFERENCE = ("gmn", {"hidden_dim": 64, **CPU_DEPTH})  # the budget every architecture is matched to

PROTOCOLS = {
    "full": {
        "plan": ((tuple(METANETS), (0, 1, 2)),),
        "data": {"limit_train": None, "limit_val": None, "limit_test": None, **DWS_RELEASED},
        "trainer": {"max_epochs": 150},
    },
    "cpu": {
        "plan": ((tuple(METANETS), (0,)), (tuple(METANETS), (1, 2))),
        "data": {"limit_train": 5000, "limit_val": 500, "limit_test": 1000, **DWS_RELEASED},
        "trainer": {"max_epochs": 12},
    },
    "smoke": {
        "plan": ((tuple(METANETS), (0,)),),
        "data": {"limit_train": 64, "limit_val": 32, "limit_test": 32, "preset": None},  # any recipe: tiny fits
        "trainer": {"max_epochs": 1},
        "metanet_config": {"hidden_dim": 8, "num_layers": 1},
    },
}

# Published test accuracy (%) on the DWS MNIST and FashionMNIST INRs, each at its paper's own size and
# full data, as printed: (name, our architecture, MNIST, FashionMNIST).
PUBLISHED = [
    ("DWS", "dws", "85.71", "67.06"), ("NFN-NP", "nfn_np", "78.50", "68.19"),
    ("NFN-HNP", "nfn_hnp", "79.11", "68.94"), ("NG-GNN", "ng_gnn", "91.40", "68.00"),
    ("NG-GNN-64", "ng_gnn", "94.7", "74.2"), ("NG-T-64", "ng_t", "97.3", "74.8"),
    ("ScaleGMN", "scalegmn", "96.57", "80.46"), ("ScaleGMN-B", "scalegmn_b", "96.59", "80.78"),
]


def classifier_parameters(metanet: str, config: dict) -> int:
    """Trainable parameters of ``InrClassification``'s model: the metanetwork and its readout."""
    from neuralgraph.nn import build_metanet
    from neuralgraph.nn.budget import count_trainable

    model = build_metanet(metanet, **config)
    return count_trainable(model) + count_trainable(model.readout(NUM_CLASSES))


def budget_config(arch: str) -> dict:
    """The metanet config of ``configs/inr_classification/<arch>.yaml``: ``CPU_DEPTH`` + dilation's
    ``CPU_OPTIONS`` at the width whose classifier parameters are nearest GMN's at hidden 64 (within 5%)."""
    return matched_width(arch, arch, CPU_OPTIONS.get(arch, {}), classifier_parameters(*REFERENCE),
                         count=classifier_parameters)


def run_settings(protocol: dict, arch: str) -> dict:
    """What determines a run but its seed: config file, metanet and its config, data, trainer."""
    config = CONFIGS / f"{arch}.yaml"
    if not config.is_file():
        raise FileNotFoundError(f"{config.relative_to(ROOT)}: no config for {arch}")
    init_args = yaml.safe_load(config.read_text())["model"]["init_args"]
    return {"config": str(config.relative_to(ROOT)), "metanet": init_args["metanet"],
            "metanet_config": {**init_args["metanet_config"], **protocol.get("metanet_config", {})},
            "data": protocol["data"], "trainer": protocol["trainer"]}


def run_arguments(settings: dict, seed: int, data_root: Path, out: Path) -> list[str]:
    """``neuralgraph fit`` arguments of one run (resuming from ``out``'s last checkpoint if any)."""
    return fit_arguments(ROOT / settings["config"], seed, data_root, out, settings["metanet"],
                         settings["metanet_config"], settings["data"], settings["trainer"])


def run_one(argv: list[str], result_path: Path) -> None:
    """Child process: one fit (+ test at best validation), results to ``result_path``."""
    metrics, record = fit_and_record(argv)
    write_atomic(result_path, json.dumps({"test_accuracy": metrics["test/accuracy"], **record}, indent=2))


def accuracy_cell(runs: list[dict]) -> str:
    """Test accuracy in %, ``mean ± std (n)`` over seeds, ``not run yet`` for none."""
    if not runs:
        return "not run yet"
    values = [100 * r["test_accuracy"] for r in runs]
    spread = f" ± {statistics.stdev(values):.2f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.2f}{spread} ({len(values)})"


def summarize(runs: list[dict], archs: list[str], protocol_name: str, machine: str,
              missing: list[tuple[str, int]]) -> str:
    """The markdown table: one row per architecture of the plan, our accuracy beside the published ones."""
    lines = [f"# MNIST INR classification — protocol `{protocol_name}` on `{machine}`", "",
             "Test accuracy (%) at the best-validation checkpoint, mean ± std over seeds (n), every architecture "
             "at GMN's parameter budget; published: on the DWS INRs at each paper's own size and full data "
             "(FashionMNIST is not measured here). Generated from the JSON beside this file.", "",
             "| model | measured MNIST | published MNIST | published FashionMNIST | parameters | hidden_dim | epochs "
             "| wall time (min) | peak memory (MB) | CPU |", "|---|---|---|---|---|---|---|---|---|---|"]
    for arch in archs:
        rs = [r for r in runs if r["arch"] == arch]
        published = [p for p in PUBLISHED if p[1] == arch]
        mnist = "; ".join(f"{p[2]} ({p[0]})" for p in published)
        fashion = "; ".join(f"{p[3]} ({p[0]})" for p in published)
        if not rs:
            lines.append(f"| {arch} | not run yet | {mnist} | {fashion} | | | | | | |")
            continue
        memory = rs[0]["peak_cuda_mb"] if rs[0]["peak_cuda_mb"] is not None else rs[0]["peak_rss_mb"]
        resumed = " (resumed)" if any(r["resumed"] for r in rs) else ""
        lines.append(f"| {arch} | {accuracy_cell(rs)} | {mnist} | {fashion} | {rs[0]['parameters']:,} "
                     f"| {rs[0]['hidden_dim']} | {rs[0]['epochs']} "
                     f"| {statistics.mean(r['wall_s'] for r in rs) / 60:.1f}{resumed} | {memory:.0f} "
                     f"| {'; '.join(sorted({r.get('cpu', 'not recorded') for r in rs}))} |")
    if missing:
        lines += ["", f"Not run yet ({len(missing)} of the protocol's runs): "
                  + ", ".join(f"{arch} seed {seed}" for arch, seed in missing) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = seeded_parser(__doc__, PROTOCOLS, METANETS, ROOT / "runs" / "benchmarks" / "inr_classification", RESULTS)
    parser.add_argument("--data-root", type=Path, default=None, help="INR folder (default: data/inrs-<protocol>)")
    args = parser.parse_args(argv)
    if args.run_one:
        run_one(args.run_one[1:], Path(args.run_one[0]))
        return 0
    protocol = PROTOCOLS[args.protocol]
    data_root = args.data_root or ROOT / "data" / f"inrs-{args.protocol}"
    plan, todo, archs = protocol_runs(protocol, args.archs, args.seeds)
    machine = machine_name()
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"inr_classification_{args.protocol}_{machine}"
    runs = load_runs(stem.with_suffix(".json"))
    settings = {arch: run_settings(protocol, arch) for arch in archs}
    save = results_saver(stem, runs, plan, lambda missing: summarize(runs, archs, args.protocol, machine, missing),
                         protocol=args.protocol, machine=machine)

    run_missing(__file__, f"[{args.protocol}]", [(arch, 1, seed) for arch, seed in todo], runs,
                lambda arch, _: settings[arch], stem.with_suffix(".json"), args.out / args.protocol,
                lambda arch, _, seed, out: run_arguments(settings[arch], seed, data_root, out), save,
                lambda result: f"test accuracy {100 * result['test_accuracy']:.2f}%", name_k=False)
    save()
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
