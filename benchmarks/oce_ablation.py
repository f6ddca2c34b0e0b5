"""Why OCE works, part (c): independently trained k = 1 editors averaged at inference.

    python benchmarks/oce_ablation.py [--members 8] [--groups 3]

Reads the ``cpu`` protocol's GMN k = 1 runs (``dilation_cpu_<machine>.json``; their best-
validation checkpoints under ``runs/benchmarks/cpu``), splits seeds 0, 1, ... into ``groups``
ensembles of ``members`` editors, averages the editors' renders on the test split and reports
the test MSE of each ensemble beside GMN k = 1 (one editor) and OCE k = 8 (one editor, eight
averaged outputs, the same budget as one k = 1 editor; the ensemble has ``members`` times it).
Results: ``benchmarks/results/oce_ablation_<machine>.{json,md}``; an ensemble whose runs are
not all recorded yet is listed as missing, never computed from fewer members.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dilation import PROTOCOLS, RESULTS, ROOT, machine_name, write_atomic  # noqa: E402


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
    data = {key: value for key, value in PROTOCOLS["cpu"]["data"].items() if key != "preset"}
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
        ensembles.append({"seeds": seeds, "test_mse_x1e-2": 100 * ensemble_test_mse(tasks, datamodule)})

    def cell(values: list[float]) -> str:
        if not values:
            return "not run yet"
        spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
        return f"{statistics.mean(values):.3f}{spread} ({len(values)})"

    single = [mse for (k, seed), mse in gmn.items() if k == 1 and seed < 3]
    oce = [mse for (k, seed), mse in gmn.items() if k == 8]
    lines = [f"# Why OCE works: GMN on the `cpu` protocol, `{machine}`", "",
             "Test MSE x1e-2, mean ± std (number of seeds or ensembles).", "",
             "| variant | budget | test MSE x1e-2 |", "|---|---|---|",
             f"| k = 1, one editor (seeds 0-2) | 1x | {cell(single)} |",
             f"| (a) OCE k = 8, eight averaged outputs | 1x | {cell(oce)} |",
             f"| (c) {args.members} k = 1 editors averaged at inference | {args.members}x "
             f"| {cell([e['test_mse_x1e-2'] for e in ensembles])} |"]
    lines += [f"\nEnsemble of seeds {m['seeds'][0]}-{m['seeds'][-1]} not computed: seeds {m['not_recorded']} "
              "are not recorded yet." for m in missing]
    stem = RESULTS / f"oce_ablation_{machine}"
    write_atomic(stem.with_suffix(".json"), json.dumps({"machine": machine, "ensembles": ensembles,
                                                        "missing": missing}, indent=2))
    write_atomic(stem.with_suffix(".md"), "\n".join(lines) + "\n")
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
