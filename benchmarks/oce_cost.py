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
(``torch.utils.benchmark.Timer``), so that a change of load on a shared machine hits all k alike.
Results: ``oce_cost_<machine>.json``; then benchmarks/oce_curve.py's table and plot, which put these
costs beside the ``cpu`` protocol's test MSE per k (``oce_curve_<machine>.{md,png}``).
``--report-only`` rebuilds that table and plot from the JSONs (after more dilation runs).
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
from oce_curve import write_report  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--report-only", action="store_true", help="rebuild oce_curve's table and plot from the JSONs")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians over them)")
    parser.add_argument("--peak-memory", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    machine = machine_name()  # the dilation runs' name for this machine (its thread count), read before pinning
    torch.set_num_threads(1)
    if args.peak_memory:
        print(peak_memory(args.peak_memory))
        return 0
    if args.report_only:
        print(write_report(RESULTS, machine).with_suffix(".md").read_text())
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
    write_atomic(RESULTS / f"oce_cost_{machine}.json", json.dumps(meta, indent=2))
    print(write_report(RESULTS, machine).with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
