"""What Output Capacity Expansion costs, beside what it buys: GMN at k = 1, 2, 4, 8.

    python benchmarks/oce_cost.py [--k 1 2 4 8] [--rounds 5] [--report-only]

For each k, GMN at the ``cpu`` protocol's width (benchmarks/dilation.py: hidden 64, 3 layers,
k > 1 budget-matched to k = 1) on random SIRENs 2-32-32-1 (costs do not depend on the values):

* training seconds per epoch: the median AdamW step at batch 32, times the ``cpu`` protocol's
  32 steps (validation not included);
* peak memory (RSS) of a process of its own that builds the editor and trains;
* editor inference latency per INR (metanetwork + decoder, no gradient) at batch 1 and 32;
* render latency on the 28x28 grid of the k member networks vs the one merged network
  (``merge_ensemble``), at batch 1 and 256 INRs;
* parameters of the output network: the k members, and the merged network as dense tensors.

Times are on one thread, medians over rounds in which every call of every k is timed once
(``torch.utils.benchmark.Timer``), so that a change of load on a shared machine hits all k alike. The
quality column (test MSE of the ``cpu`` protocol, mean ± std over seeds) is read from
``dilation_cpu_<machine>.json`` where those runs exist. Results: ``oce_cost_<machine>.{json,md,png}``;
``--report-only`` rebuilds the table and plot from the JSONs (after more dilation runs).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import torch
from torch.utils.benchmark import Timer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dilation import CPU_REFERENCE, RESULTS, machine_name, write_atomic  # noqa: E402

STEPS_PER_EPOCH = 32  # the cpu protocol: 1,000 training INRs at batch 32
BATCH = 32


def random_batch(size: int, seed: int = 0):
    """``size`` random SIRENs 2-32-32-1 as an InrBatch with random images."""
    from neuralgraph.data.inr_dataset import InrBatch
    from neuralgraph.graph import mlp_to_graph
    from neuralgraph.inr import init_siren

    weights, biases = init_siren(range(seed, seed + size))
    generator = torch.Generator().manual_seed(seed)
    return InrBatch(mlp_to_graph(weights, biases), torch.rand(size, 28, 28, generator=generator),
                    torch.zeros(size, dtype=torch.long), torch.arange(size))


def seconds(fn, number: int) -> float:
    """Mean seconds of ``number`` calls (one measurement of an interleaved round)."""
    return Timer("fn()", globals={"fn": fn}).timeit(number).mean


class Editor:
    """GMN at the cpu protocol's width with k outputs, its optimiser, and the calls to time."""

    def __init__(self, k: int):
        from neuralgraph.inr import render
        from neuralgraph.nn.ensemble import merge_ensemble
        from neuralgraph.training.tasks import InrEditing

        torch.manual_seed(0)
        name, config = CPU_REFERENCE
        self.k = k
        self.task = InrEditing(metanet=name, metanet_config=config, k=k, match_budget=True, normalize_inputs=False)
        self.optimizer = torch.optim.AdamW(self.task.parameters(), lr=1e-3)
        self.batch = random_batch(BATCH)
        self.train_step()  # the first step allocates
        graphs = {size: random_batch(size).graph for size in (1, BATCH)}
        with torch.no_grad():
            weights, biases = self.task.edited_networks(graphs[1])
        self.calls = {"train_s_per_epoch": (self.train_step, 1, STEPS_PER_EPOCH)}
        for size in (1, BATCH):
            self.calls[f"edit_ms_per_inr_b{size}"] = (lambda g=graphs[size]: self.edit(g), 3, 1e3 / size)
        for size in (1, 256):  # rendering cost does not depend on the values: repeat one prediction
            w = [x.expand(size, *x.shape[1:]).contiguous() for x in weights]
            b = [x.expand(size, *x.shape[1:]).contiguous() for x in biases]
            members = ([x.flatten(0, 1) for x in w], [x.flatten(0, 1) for x in b])
            merged = merge_ensemble(w, b)
            number = 20 if size == 1 else 1
            self.calls[f"render_members_ms_b{size}"] = (
                lambda m=members, n=size: render(*m).view(n, k, 28, 28).mean(1), number, 1e3)
            self.calls[f"render_merged_ms_b{size}"] = (lambda m=merged: render(*m), number, 1e3)
        self.static = {"k": k, "hidden_dim": self.task.metanet.hidden_dim,
                       "editor_parameters": sum(p.numel() for p in self.task.parameters()),
                       "output_parameters_members": sum(x[0].numel() for x in weights + biases),
                       "output_parameters_merged": sum(x[0].numel() for x in merged[0] + merged[1])}

    def train_step(self) -> None:
        self.optimizer.zero_grad()
        self.task.loss_and_outputs(self.batch)[0].backward()
        self.optimizer.step()

    def edit(self, graph):
        with torch.no_grad():
            return self.task.edited_networks(graph)


def peak_memory(k: int) -> float:
    """Peak RSS (MB) of a process that builds the k editor and takes training steps (run in a child)."""
    editor = Editor(k)
    editor.train_step()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(ks: list[int], rounds: int) -> list[dict]:
    """Every cost of every k: per round, each call of each k once (interleaved, so that a change
    of load hits every k alike); the median over rounds."""
    editors = [Editor(k) for k in ks]
    samples: dict[tuple[int, str], list[float]] = {}
    for _ in range(rounds):
        for editor in editors:
            for key, (fn, number, scale) in editor.calls.items():
                samples.setdefault((editor.k, key), []).append(scale * seconds(fn, number))
    return [{**editor.static, **{key: statistics.median(samples[editor.k, key]) for key in editor.calls}}
            for editor in editors]


def curves(machine: str) -> dict[str, dict[int, list[float]]]:
    """Test MSE x1e-2 per architecture and k for GMN and DWS in the cpu protocol's results."""
    path = RESULTS / f"dilation_cpu_{machine}.json"
    runs = json.loads(path.read_text())["runs"] if path.exists() else []
    out: dict[str, dict[int, list[float]]] = {}
    for run in runs:
        if run["arch"] in ("gmn", "dws"):
            out.setdefault(run["arch"], {}).setdefault(run["k"], []).append(100 * run["test_mse"])
    return out


def mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def report(meta: dict, stem: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, machine = meta["costs"], meta["machine"]
    by_arch = curves(machine)
    gmn = by_arch.get(CPU_REFERENCE[0], {})
    lines = [f"# What OCE costs: GMN (cpu protocol width) at k = 1, 2, 4, 8 on `{machine}`", "",
             f"{meta['platform']}, torch {meta['torch']}, one thread, load average {meta['load']:.1f} while measured. "
             "Test MSE: the `cpu` protocol (dilation_cpu JSON), mean ± std over the seeds run; the costs: random "
             "SIRENs 2-32-32-1, batch 32 for training (x 32 steps per epoch, validation not included).", "",
             "| k | test MSE x1e-2 (seeds) | editor parameters | hidden_dim | train s/epoch | peak RSS (MB) "
             "| edit ms/INR b1 | edit ms/INR b32 | render members ms b1 | render merged ms b1 "
             "| render members ms b256 | render merged ms b256 | output params (members) | output params (merged, dense) |",
             "|" + "---|" * 14]
    for r in rows:
        mse = gmn.get(r["k"])
        quality_cell = ("not run yet" if not mse else f"{mse[0]:.3f} (1)" if len(mse) == 1
                        else "{:.3f} ± {:.3f} ({})".format(*mean_std(mse), len(mse)))
        lines.append(f"| {r['k']} | {quality_cell} | {r['editor_parameters']:,} | {r['hidden_dim']} "
                     f"| {r['train_s_per_epoch']:.1f} | {r['peak_rss_mb']:.0f} | {r['edit_ms_per_inr_b1']:.1f} "
                     f"| {r['edit_ms_per_inr_b32']:.1f} | {r['render_members_ms_b1']:.3f} | {r['render_merged_ms_b1']:.3f} "
                     f"| {r['render_members_ms_b256']:.1f} | {r['render_merged_ms_b256']:.1f} "
                     f"| {r['output_parameters_members']:,} | {r['output_parameters_merged']:,} |")
    write_atomic(stem.with_suffix(".md"), "\n".join(lines) + "\n")

    ks = [r["k"] for r in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for arch, by_k in sorted(by_arch.items()):
        points = sorted(by_k)
        stats = [mean_std(by_k[k]) for k in points]
        left.errorbar(points, [m for m, _ in stats], yerr=[s for _, s in stats], marker="o", capsize=3,
                      label=f"{arch} ({', '.join(f'k={k}: {len(by_k[k])}' for k in points)} seeds)")
    left.set(xscale="log", xticks=ks, xticklabels=ks, xlabel="k", ylabel="test MSE x1e-2",
             title="quality (cpu protocol, mean ± std)")
    if by_arch:
        left.legend(fontsize=7)
    else:
        left.text(0.5, 0.5, "no cpu-protocol runs of GMN or DWS recorded yet", ha="center", transform=left.transAxes)
    for key, label in (("train_s_per_epoch", "train s/epoch"), ("edit_ms_per_inr_b32", "edit ms/INR (b32)"),
                       ("render_members_ms_b256", "render k members ms (b256)"),
                       ("render_merged_ms_b256", "render merged ms (b256)")):
        right.plot(ks, [r[key] for r in rows], marker="o", label=label)
    right.set(xscale="log", yscale="log", xticks=ks, xticklabels=ks, xlabel="k", title=f"cost of GMN ({machine})")
    right.legend(fontsize=7)
    for axis in (left, right):
        axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    figure.tight_layout()
    figure.savefig(stem.with_suffix(".png"), dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--report-only", action="store_true", help="rebuild the table and plot from the JSONs")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians over them)")
    parser.add_argument("--peak-memory", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    machine = machine_name()  # the dilation runs' name for this machine (its thread count), read before pinning
    torch.set_num_threads(1)
    if args.peak_memory:
        print(peak_memory(args.peak_memory))
        return 0
    stem = RESULTS / f"oce_cost_{machine}"
    if args.report_only:
        report(json.loads(stem.with_suffix(".json").read_text()), stem)
        return 0
    memory = {}  # first, while this process is small: a child's peak RSS starts from its parent's at fork
    for k in args.k:
        child = subprocess.run([sys.executable, __file__, "--peak-memory", str(k)], check=True,
                               capture_output=True, text=True)
        memory[k] = float(child.stdout.strip().splitlines()[-1])
    costs = [{**row, "peak_rss_mb": memory[row["k"]]} for row in measure(args.k, args.rounds)]
    print(costs, flush=True)
    meta = {"machine": machine, "platform": platform.platform(), "torch": torch.__version__,
            "load": os.getloadavg()[0], "costs": costs}
    write_atomic(stem.with_suffix(".json"), json.dumps(meta, indent=2))
    report(meta, stem)
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
