"""Why OCE works: capacity or averaging? GMN on the ``cpu`` protocol, four variants beside k = 1.

    python benchmarks/oce_ablation.py [--members 8] [--groups 3]

At GMN k = 1's parameter budget (seeds 0-2 of ``dilation_cpu_<machine>.json``):

* (a) OCE k = 8: eight members averaged (``gmn`` k = 8);
* (b) one output network of width 8 x 32 decoded directly, cross-copy weights free, no averaging
  (``gmn_coupled``: ``WeightDecoder(members="coupled")``);
* (d) k = 8 with members forced identical, a control that should equal k = 1 (``gmn_tied``);

and (c), at ``members`` times the budget: the ``cpu`` protocol's GMN k = 1 editors (their best-
validation checkpoints under ``runs/benchmarks/cpu``), seeds 0, 1, ... split into ``groups``
ensembles of ``members``, their renders averaged on the test split their runs recorded. Results:
``benchmarks/results/oce_ablation_<machine>.{json,md}``; a variant's seeds and an ensemble's editors
that are not recorded yet are listed as such, never computed from fewer members.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from neuralgraph.bench.machine import machine_name
from neuralgraph.bench.runner import write_atomic
from neuralgraph.bench.tables import seeds_cell

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

SEEDS = (0, 1, 2)  # of the variants trained as runs of the cpu protocol: row, system, k
VARIANTS = (("k = 1, one editor", "gmn", 1), ("(a) OCE k = 8, eight members averaged", "gmn", 8),
            ("(b) one network of width 8 x 32 decoded directly (`gmn_coupled`)", "gmn_coupled", 8),
            ("(d) k = 8, members forced identical (`gmn_tied`)", "gmn_tied", 8))


def best_checkpoint(run_dir: Path) -> Path:
    """The one ``best-*.ckpt`` of a run; FileNotFoundError naming the folder otherwise."""
    found = sorted((run_dir / "checkpoints").glob("best-*.ckpt"))
    if len(found) != 1:
        raise FileNotFoundError(f"{run_dir / 'checkpoints'}: expected one best-*.ckpt, found {len(found)}")
    return found[0]


def ensemble_test_mse(tasks, datamodule) -> float:
    """Pixel MSE on the test split of the average of the tasks' (averaged) renders."""
    datamodule.setup("test")
    squared, count = 0.0, 0
    with torch.no_grad():
        for batch in datamodule.test_dataloader():
            outputs = [task.loss_and_outputs(batch)[1] for task in tasks]
            prediction = torch.stack([o["prediction"] for o in outputs]).mean(0)
            squared += float(((prediction - outputs[0]["target"]) ** 2).sum())
            count += outputs[0]["target"].numel()
    return squared / count


def report(runs: list[dict], ensembles: list[dict], missing_ensembles: list[dict], members: int,
           machine: str) -> tuple[str, dict]:
    """The ablation's markdown table and JSON from the cpu protocol's ``runs`` and the computed ``ensembles``."""
    recorded = {(r["arch"], r["k"], r["seed"]): r for r in runs}
    variants = []
    for label, arch, k in VARIANTS:
        found = [recorded[arch, k, seed] for seed in SEEDS if (arch, k, seed) in recorded]
        variants.append({"variant": label, "arch": arch, "k": k, "budget": "1x",
                         "parameters": found[0]["parameters"] if found else None,
                         "test_mse_x1e-2": [100 * r["test_mse"] for r in found],
                         "not_recorded": [seed for seed in SEEDS if (arch, k, seed) not in recorded]})
    editor = recorded.get(("gmn", 1, 0))
    variants.insert(3, {"variant": f"(c) {members} k = 1 editors averaged at inference", "budget": f"{members}x",
                        "parameters": members * editor["parameters"] if editor else None,
                        "test_mse_x1e-2": [e["test_mse_x1e-2"] for e in ensembles]})
    lines = [f"# Why OCE works: GMN on the `cpu` protocol, `{machine}`", "",
             "Test MSE x1e-2, mean ± std (number of seeds, or of ensembles for (c)); parameters: metanetwork + "
             "decoder, all editors' for (c).", "",
             "| variant | budget | parameters | test MSE x1e-2 |", "|---|---|---|---|"]
    lines += [f"| {v['variant']} | {v['budget']} | {'' if v['parameters'] is None else format(v['parameters'], ',')} "
              f"| {seeds_cell(v['test_mse_x1e-2'])} |" for v in variants]
    notes = [f"Ensemble of seeds {e['seeds'][0]}-{e['seeds'][-1]}: {e['test_mse_x1e-2']:.3f} against its editors "
             f"alone {seeds_cell(e['members_x1e-2'])}, best {min(e['members_x1e-2']):.3f}: averaging gains "
             f"{1 - e['test_mse_x1e-2'] / statistics.mean(e['members_x1e-2']):.1%} over the editors' mean."
             for e in ensembles]
    notes += [f"{v['arch']} k={v['k']}: seeds {v['not_recorded']} not run yet." for v in variants if v.get("not_recorded")]
    notes += [f"Ensemble of seeds {m['seeds'][0]}-{m['seeds'][-1]} not computed: seeds {m['not_recorded']} "
              "are not recorded yet." for m in missing_ensembles]
    markdown = "\n".join(lines + [""] + notes) + "\n"
    return markdown, {"machine": machine, "variants": variants, "ensembles": ensembles, "missing": missing_ensembles}


def main(argv: list[str] | None = None) -> int:
    from neuralgraph.training.datamodule import MnistInrDataModule
    from neuralgraph.training.tasks import InrEditing

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--data-root", type=Path, default=ROOT / "data" / "inrs-cpu")
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "benchmarks" / "cpu")
    args = parser.parse_args(argv)
    machine = machine_name()
    source = RESULTS / f"dilation_cpu_{machine}.json"
    runs = json.loads(source.read_text())["runs"] if source.exists() else []
    gmn = {(r["k"], r["seed"]): 100 * r["test_mse"] for r in runs if r["arch"] == "gmn"}
    # the INRs the editors were tested on: the data settings their runs recorded (the folder holds its INRs' recipe)
    data = next(({key: value for key, value in r["settings"]["data"].items() if key != "preset"}
                 for r in runs if (r["arch"], r["k"]) == ("gmn", 1)), {})
    datamodule = MnistInrDataModule(root=str(args.data_root), **data)
    ensembles, missing = [], []
    for group in range(args.groups):
        seeds = list(range(group * args.members, (group + 1) * args.members))
        absent = [seed for seed in seeds if (1, seed) not in gmn]
        if absent:
            missing.append({"seeds": seeds, "not_recorded": absent})
            continue
        tasks = [InrEditing.load_from_checkpoint(best_checkpoint(args.runs / f"gmn_k1_s{seed}"), map_location="cpu",
                                                 weights_only=True).eval() for seed in seeds]
        ensembles.append({"seeds": seeds, "test_mse_x1e-2": 100 * ensemble_test_mse(tasks, datamodule),
                          "members_x1e-2": [gmn[1, seed] for seed in seeds]})

    markdown, results = report(runs, ensembles, missing, args.members, machine)
    stem = RESULTS / f"oce_ablation_{machine}"
    write_atomic(stem.with_suffix(".json"), json.dumps(results, indent=2))
    write_atomic(stem.with_suffix(".md"), markdown)
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
