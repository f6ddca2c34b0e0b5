"""Generalization prediction on a zoo of small ViTs: Kendall's tau and R^2 of GMN, NG-GNN, NG-T and StatNN.

    python benchmarks/transformer_zoo.py --protocol smoke|cpu [--archs ...] [--seeds 0 1 2] [--zoo DIR]
    python benchmarks/transformer_zoo.py --write-configs     # configs/transformer_zoo/<system>.yaml

The zoo is ``neuralgraph make-transformer-zoo`` (docs/transformer_zoo.md: ViT-style MNIST
classifiers of 1-2 pre-norm blocks, 2-4 heads, GELU or SiLU MLPs, hyperparameters sampled per
network, checkpoints at several epochs), written here when its folder is missing or unfinished
(resumable). Every entry is read as the general parameter graph of ``module_to_graph`` (LayerNorm,
attention heads, positional embedding: docs/architectures.md), so the metanetworks see graphs of
two depths with skip, norm, attention and position edges, and StatNN the statistics of every node
layer's parameters (``general=True``).

Each (system, seed) is one ``neuralgraph fit`` of ``GeneralizationPrediction`` (MSE on the test
accuracy) in a subprocess, tested at its best-validation checkpoint, with the resumable
bookkeeping of ``benchmarks/generalization.py`` (``benchmarks/runner.py``): results in
``benchmarks/results/transformer_zoo_<protocol>_<machine>.{json,md}``, a rerun skips recorded runs.
Every system runs at the width whose model (metanetwork + readout) has the parameter count nearest
GMN's at hidden 64 and 3 layers on the zoo's graphs, within 5%.

Protocols:

* ``cpu``: the zoo's default settings (512 networks x 3 checkpoints, 2,000 MNIST training images),
  its network-level split (70/15/15%), every system 10 epochs, batch 32, seed 0, then seeds 1-2.
* ``smoke``: 8 networks on the embedded MNIST subset, width 8, 1 layer, 1 epoch: plumbing only.

Anchor: Transformer-NFN's Small Transformer Zoo (MNIST and AGNews ViT/transformer zoos, their Kendall
tau tables); that zoo is larger and differently made, so its numbers are not a column here.
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import torch
import yaml

from dilation import CPU_DEPTH, machine_name, matched_width
from generalization import BUDGET_TOLERANCE, cell, run_one
from machine import cpu_description
from runner import fit_arguments, load_runs, protocol_runs, results_saver, run_missing, seeded_parser

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CONFIGS = ROOT / "configs" / "transformer_zoo"
REFERENCE = ("gmn", {"hidden_dim": 64, **CPU_DEPTH})
SYSTEMS = {"statnn": {"num_layers": 2, "dropout": 0.0}, "gmn": {}, "ng_gnn": {}, "ng_t": {}}
ORDER = ("statnn", "gmn", "ng_gnn", "ng_t")

PROTOCOLS = {
    "cpu": {
        "plan": ((ORDER, (0,)), (ORDER, (1, 2))),
        "zoo": {},  # TransformerZooSettings' defaults
        "trainer": {"max_epochs": 10},
        "batch_size": 32,
    },
    "smoke": {
        "plan": ((ORDER, (0,)),),
        "zoo": {"networks": 8, "checkpoint_epochs": [1, 2], "train_size": 128, "test_size": 64, "batch_size": 32,
                "shard_size": 8, "source": "embedded"},
        "trainer": {"max_epochs": 1},
        "batch_size": 4,
        "metanet_config": {"hidden_dim": 8, "num_layers": 1},
    },
}


@functools.lru_cache(maxsize=None)
def zoo_spec():
    """The GraphSpec of the zoo's graphs: one ViT of each depth (the parameter counts depend on the depth,
    through the layer embeddings, and on the edge features)."""
    from torch_geometric.data import Batch

    from neuralgraph.data.transformer_zoo import ARCHITECTURE, ZooViT
    from neuralgraph.graph import GraphSpec, module_to_graph

    size = ARCHITECTURE["image_size"]
    probe = torch.randn(2, 1, size, size)
    graphs = [module_to_graph(ZooViT(**ARCHITECTURE, depth=depth, heads=heads).eval(), example_input=probe)
              for depth, heads in ((1, 2), (2, 4))]
    return GraphSpec.of(Batch.from_data_list(graphs))


def model_parameters(metanet: str, config: dict) -> int:
    """Trainable parameters of ``GeneralizationPrediction``'s model on the zoo: the metanetwork and its readout."""
    from neuralgraph.nn import build_metanet
    from neuralgraph.nn.budget import count_trainable

    model = build_metanet(metanet, spec=zoo_spec(), **config)
    return count_trainable(model) + count_trainable(model.readout(1))


def budget_config(system: str) -> dict:
    return matched_width(system, system, SYSTEMS[system], model_parameters(*REFERENCE), BUDGET_TOLERANCE,
                         count=model_parameters)


def write_configs() -> list[Path]:
    """``configs/transformer_zoo/<system>.yaml`` for every system, at the matched width."""
    CONFIGS.mkdir(parents=True, exist_ok=True)
    written = []
    for system in SYSTEMS:
        config = {
            "seed_everything": 0,
            "model": {"class_path": "neuralgraph.training.tasks.GeneralizationPrediction",
                      "init_args": {"metanet": system, "metanet_config": budget_config(system)}},
            "data": {"class_path": "neuralgraph.training.transformer_zoo_datamodule.TransformerZooDataModule",
                     "init_args": {"root": "data/transformer_zoo", "batch_size": 32}},
            "trainer": {"max_epochs": PROTOCOLS["cpu"]["trainer"]["max_epochs"],
                        "default_root_dir": f"runs/transformer_zoo/{system}"},
        }
        path = CONFIGS / f"{system}.yaml"
        header = (f"# Generalization prediction on the transformer zoo (benchmarks/transformer_zoo.py): {system} at "
                  "GMN's hidden-64 budget on the zoo's graphs.\n"
                  "# The zoo: neuralgraph make-transformer-zoo --out data/transformer_zoo (docs/transformer_zoo.md).\n")
        path.write_text(header + yaml.safe_dump(config, sort_keys=False))
        written.append(path)
    return written


def run_settings(protocol: dict, system: str) -> dict:
    config = CONFIGS / f"{system}.yaml"
    if not config.is_file():
        raise FileNotFoundError(f"{config.relative_to(ROOT)}: no config for {system} (--write-configs writes them)")
    init_args = yaml.safe_load(config.read_text())["model"]["init_args"]
    return {"config": str(config.relative_to(ROOT)), "metanet": init_args["metanet"],
            "metanet_config": {**init_args["metanet_config"], **protocol.get("metanet_config", {})},
            "zoo": protocol["zoo"], "batch_size": protocol["batch_size"], "trainer": protocol["trainer"]}


def prepare_zoo(protocol: dict, zoo: Path) -> None:
    from neuralgraph.data.transformer_zoo import TransformerZooSettings, make_transformer_zoo

    settings = dict(protocol["zoo"])
    if "checkpoint_epochs" in settings:
        settings["checkpoint_epochs"] = tuple(settings["checkpoint_epochs"])
    make_transformer_zoo(zoo, TransformerZooSettings(**settings), progress=False)


def zoo_description(zoo: Path) -> str:
    from neuralgraph.data.transformer_zoo import TransformerZooDataset

    sizes = {split: len(TransformerZooDataset(zoo, split)) for split in ("train", "val", "test")}
    accuracy = TransformerZooDataset(zoo, "test").accuracy.double()
    q = torch.quantile(accuracy, torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0], dtype=torch.float64)).tolist()
    manifest = json.loads((zoo / "manifest.json").read_text())
    return (f"Zoo `{zoo.name}`: {manifest['networks']:,} ViTs x checkpoints at epochs {manifest['checkpoint_epochs']} "
            f"(trained on the first {manifest['train_size']:,} {manifest['source']} MNIST training images, tested on "
            f"{manifest['test_size']:,}); {sizes['train']}/{sizes['val']}/{sizes['test']} train/val/test entries "
            "(split by network); test-split accuracy min / quartiles / max " + " / ".join(f"{v:.3f}" for v in q) + ".")


def summarize(runs: list[dict], systems: list[str], protocol_name: str, machine: str, zoo: Path,
              missing: list[tuple[str, int]]) -> str:
    protocol = PROTOCOLS[protocol_name]
    lines = [f"# Generalization prediction on a transformer zoo — protocol `{protocol_name}` on `{machine}`", "",
             zoo_description(zoo), "",
             f"Every model trains {protocol['trainer']['max_epochs']} epoch(s) (batch {protocol['batch_size']}) and is "
             "tested at its best-validation checkpoint (lowest validation MSE); mean ± std over seeds (n); every "
             "system at the width whose model (metanetwork + readout) is nearest GMN's at hidden 64 on the zoo's "
             "graphs, within 5%"
             + (f"; this protocol overrides {protocol['metanet_config']}" if "metanet_config" in protocol else "")
             + f". Each row's CPU (its runs') and threads beside its wall time; this file written on "
             f"{cpu_description()}, torch {torch.__version__}. Generated from the JSON beside this file.", "",
             "| system | Kendall tau | R^2 | parameters | hidden_dim | epochs | wall time per run (min) | CPU, threads |",
             "|---|---|---|---|---|---|---|---|"]
    for system in systems:
        rs = [r for r in runs if r["arch"] == system]
        if not rs:
            lines.append(f"| {system} | not run yet | | | | | | |")
            continue
        resumed = " (resumed)" if any(r["resumed"] for r in rs) else ""
        lines.append(f"| {system} | {cell([r['kendall_tau'] for r in rs])} | {cell([r['r2'] for r in rs])} "
                     f"| {rs[0]['parameters']:,} | {rs[0]['hidden_dim']} | {rs[0]['epochs']} "
                     f"| {sum(r['wall_s'] for r in rs) / len(rs) / 60:.1f}{resumed} "
                     f"| {' / '.join(sorted({r['cpu'] for r in rs if 'cpu' in r}) or ['CPU not recorded'])}, {rs[0]['threads']} |")
    if missing:
        lines += ["", f"Not run yet ({len(missing)} of the protocol's runs): "
                  + ", ".join(f"{system} seed {seed}" for system, seed in missing) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = seeded_parser(__doc__, PROTOCOLS, SYSTEMS, ROOT / "runs" / "benchmarks" / "transformer_zoo", RESULTS)
    parser.add_argument("--zoo", type=Path, default=None, help="zoo folder (default: data/transformer_zoo, "
                                                               "data/transformer_zoo_smoke for the smoke protocol)")
    parser.add_argument("--write-configs", action="store_true", help="write configs/transformer_zoo/*.yaml and exit")
    args = parser.parse_args(argv)
    if args.run_one:
        run_one(args.run_one[1:], Path(args.run_one[0]))
        return 0
    if args.write_configs:
        for path in write_configs():
            print(path.relative_to(ROOT))
        return 0
    protocol = PROTOCOLS[args.protocol]
    plan, todo, systems = protocol_runs(protocol, args.archs, args.seeds)
    settings = {system: run_settings(protocol, system) for system in systems}
    zoo = args.zoo or ROOT / "data" / ("transformer_zoo" if args.protocol == "cpu" else f"transformer_zoo_{args.protocol}")
    prepare_zoo(protocol, zoo)
    machine = machine_name()
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"transformer_zoo_{args.protocol}_{machine}"
    runs = load_runs(stem.with_suffix(".json"))
    save = results_saver(stem, runs, plan, lambda missing: summarize(runs, systems, args.protocol, machine, zoo, missing),
                         protocol=args.protocol, machine=machine, cpu=cpu_description())

    def arguments(system: str, _, seed: int, out: Path) -> list[str]:
        s = settings[system]
        return fit_arguments(ROOT / s["config"], seed, zoo, out, s["metanet"], s["metanet_config"],
                             {"batch_size": s["batch_size"]}, s["trainer"])

    run_missing(__file__, f"[{args.protocol}]", [(system, 1, seed) for system, seed in todo], runs,
                lambda system, _: settings[system], stem.with_suffix(".json"), args.out / args.protocol, arguments,
                save, lambda result: f"Kendall tau {result['kendall_tau']:.3f}, R^2 {result['r2']:.3f}", name_k=False)
    save()
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
