"""What Output Capacity Expansion costs, beside what it buys: GMN at k = 1, 2, 4, 8.

    python benchmarks/oce_cost.py [--k 1 2 4 8] [--rounds 5] [--report-only]
    python benchmarks/oce_cost.py --step [--rounds 9]

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

``--step`` times the training step alone (forward, backward, AdamW; batch 32) of k = 1 and k = 8,
before and after budget matching aligned widths to 8 and ``render`` took its batched pixel-last
pass, every combination interleaved in one run at 2 and at 1 thread, with a profile of the k = 8
step. Results: ``oce_step_<machine>.json`` and a section appended to ``oce_curve_<machine>.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import torch
from torch.utils.benchmark import Timer

from neuralgraph.bench import load_script
from neuralgraph.bench.machine import cpu_description, machine_name
from neuralgraph.bench.runner import write_atomic
from neuralgraph.bench.widths import REFERENCE

RESULTS = Path(__file__).resolve().parent / "results"

STEPS_PER_EPOCH = 32  # the cpu protocol: 1,000 training INRs at batch 32
BATCH = 32
STEP_THREADS = (2, 1)
STEP_SECTION = "## Training step, k = 8 against k = 1"  # the section --step appends to oce_curve_<machine>.md


def random_batch(size: int, seed: int = 0):
    """``size`` random SIRENs 2-32-32-1 as an InrBatch with random images."""
    from neuralgraph.data.inr_dataset import InrBatch
    from neuralgraph.graph import mlp_to_graph
    from neuralgraph.inr import init_siren

    weights, biases = init_siren(range(seed, seed + size))
    generator = torch.Generator().manual_seed(seed)
    return InrBatch(mlp_to_graph(weights, biases), torch.rand(size, 28, 28, generator=generator),
                    torch.zeros(size, dtype=torch.long), torch.arange(size))


def autograd_render(weights, biases, resolution=28, convention=None):
    """``render`` as it was before its batched pass (the ``--step`` baseline): autograd through
    ``[B, P, d]`` activations, a matmul, a bias and ``sin(w0 .)`` per layer."""
    from neuralgraph.inr import DWS_MNIST, grid_coordinates

    convention = convention or DWS_MNIST
    height, width = (resolution, resolution) if isinstance(resolution, int) else resolution
    h = grid_coordinates(height, width, convention, weights[0].device, weights[0].dtype)
    for l, (w, b) in enumerate(zip(weights, biases), start=1):
        h = torch.matmul(h, w.transpose(1, 2)) + b.unsqueeze(1)
        if l < len(weights):
            h = torch.sin(convention.w0 * h)
    return (h.squeeze(-1) + convention.output_offset).view(-1, height, width)


def seconds(fn, number: int) -> float:
    """Mean seconds of ``number`` calls (one measurement of an interleaved round)."""
    return Timer("fn()", globals={"fn": fn}).timeit(number).mean


class TrainingStep:
    """One AdamW step at batch 32 of GMN at the cpu protocol's width with k outputs, budget-matched
    with ``width_multiple``; with ``baseline`` the task renders with :func:`autograd_render`."""

    def __init__(self, k: int, width_multiple: int | None = None, baseline: bool = False):
        from neuralgraph.nn.budget import WIDTH_MULTIPLE
        from neuralgraph.training import tasks

        torch.manual_seed(0)
        name, config = REFERENCE
        shared = {key: value for key, value in config.items() if key != "hidden_dim"}
        self.task = tasks.InrEditing(metanet=name, metanet_config=shared, k=k, reference_hidden_dim=config["hidden_dim"],
                                     normalize_inputs=False, budget_width_multiple=width_multiple or WIDTH_MULTIPLE)
        self.optimizer = torch.optim.AdamW(self.task.parameters(), lr=1e-3)
        self.batch = random_batch(BATCH)
        self.render = mock.patch.object(tasks, "render", autograd_render) if baseline else contextlib.nullcontext()
        self()  # the first step allocates

    def __call__(self) -> None:
        with self.render:
            self.optimizer.zero_grad()
            self.task.loss_and_outputs(self.batch)[0].backward()
            self.optimizer.step()


class Editor:
    """GMN at the cpu protocol's width with k outputs, its optimiser, and the calls to time."""

    def __init__(self, k: int):
        from neuralgraph.inr import render
        from neuralgraph.nn.ensemble import merge_ensemble

        self.k = k
        self.train_step = TrainingStep(k)
        self.task = self.train_step.task
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


def step_contenders() -> dict[str, TrainingStep]:
    """k = 1 and k = 8 steps: before (exact budget width, autograd render), after (width a multiple
    of 8, batched render), and the two halfway points, which split the gain between the two changes."""
    contenders = {}
    for k, width_multiple, baseline in ((1, 1, True), (1, 8, False), (8, 1, True), (8, 1, False), (8, 8, True),
                                        (8, 8, False)):
        step = TrainingStep(k, width_multiple, baseline)
        render = "autograd render" if baseline else "batched render"
        contenders[f"k={k} h={step.task.metanet.hidden_dim} {render}"] = step
    return contenders


def profile_table(step: TrainingStep, rows: int = 8) -> str:
    """torch.profiler's ops by self CPU time over 3 steps, the ``rows`` largest."""
    from torch.profiler import profile

    with profile() as prof:
        for _ in range(3):
            step()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def measure_steps(rounds: int) -> dict:
    """Median step seconds of every contender at each of :data:`STEP_THREADS` (interleaved rounds), the
    before/after ratios k = 8 / k = 1, and profiles of the k = 8 steps before and after at 1 thread."""
    contenders = step_contenders()
    names = list(contenders)
    before, after = (names[0], names[2]), (names[1], names[5])
    result = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_description(), "platform": platform.platform(),
              "torch": torch.__version__, "rounds": rounds, "threads": {},
              "hidden_dim_after": contenders[after[1]].task.metanet.hidden_dim}
    for threads in STEP_THREADS:
        torch.set_num_threads(threads)
        load = os.getloadavg()[0]
        samples = {name: [] for name in names}
        for _ in range(rounds):
            for name, step in contenders.items():
                samples[name].append(seconds(step, 1))
        medians = {name: statistics.median(times) for name, times in samples.items()}
        result["threads"][threads] = {
            "step_s": medians, "load": [load, os.getloadavg()[0]],
            "ratio_before": medians[before[1]] / medians[before[0]],
            "ratio_after": medians[after[1]] / medians[after[0]]}
        print(f"{threads} thread(s), {result['cpu']}: {result['threads'][threads]}", flush=True)
    result["profiles"] = {name: profile_table(contenders[name]) for name in (before[1], after[1])}
    return result


def step_section(result: dict, costs: dict | None) -> str:
    """The ``--step`` results as the markdown section appended to ``oce_curve_<machine>.md``; it says
    when the ``costs`` (``oce_cost_<machine>.json``) above it were measured at other widths."""
    names = list(next(iter(result["threads"].values()))["step_s"])
    older = sorted({row["hidden_dim"] for row in (costs or {}).get("costs", [])
                    if row["k"] > 1 and row["hidden_dim"] != result["hidden_dim_after"]})
    note = (f" The cost columns above are the older measurement (hidden_dim {', '.join(map(str, older))} at k > 1, "
            f"the autograd render), not re-measured." if older else "")
    lines = [STEP_SECTION, "",
             f"Measured {result['date']} on {result['cpu']}, {result['platform']}, torch {result['torch']} "
             f"(benchmarks/oce_cost.py --step): GMN at the `cpu` width, AdamW step at batch 32 (forward, backward, "
             f"update), medians of {result['rounds']} rounds in which every step is timed once, interleaved. "
             f"*Before*: the exact budget width and the autograd render; *after*: the width a multiple of 8 "
             f"(`match_budget`) and `render`'s batched pixel-last pass.{note}", "",
             "| threads | load (start, end) | " + " | ".join(f"{n} (ms)" for n in names)
             + " | k=8 / k=1 before | k=8 / k=1 after |",
             "|---" * (len(names) + 4) + "|"]
    for threads, row in result["threads"].items():
        times = " | ".join(f"{1e3 * row['step_s'][n]:.0f}" for n in names)
        load = ", ".join(f"{x:.1f}" for x in row["load"])
        lines.append(f"| {threads} | {load} | {times} | {row['ratio_before']:.2f} | {row['ratio_after']:.2f} |")
    return "\n".join(lines) + "\n"


def write_step_section(machine: str) -> Path:
    """Append (or replace) the section of ``oce_step_<machine>.json`` in ``oce_curve_<machine>.md``."""
    report, costs = RESULTS / f"oce_curve_{machine}.md", RESULTS / f"oce_cost_{machine}.json"
    text = report.read_text() if report.exists() else ""
    kept = text.split(STEP_SECTION)[0].rstrip("\n")
    section = step_section(json.loads((RESULTS / f"oce_step_{machine}.json").read_text()),
                           json.loads(costs.read_text()) if costs.exists() else None)
    write_atomic(report, (kept + "\n\n" if kept else "") + section)
    return report


def write_reports(machine: str) -> str:
    """oce_curve's table and plot, then the ``--step`` section when measured; the table's text."""
    report = load_script(Path(__file__).with_name("oce_curve.py")).write_report(RESULTS, machine).with_suffix(".md")
    if (RESULTS / f"oce_step_{machine}.json").exists():
        write_step_section(machine)
    return report.read_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", nargs="+", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--report-only", action="store_true", help="rebuild oce_curve's table and plot from the JSONs")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians over them)")
    parser.add_argument("--step", action="store_true", help="time the k = 8 and k = 1 training steps, before and after")
    parser.add_argument("--peak-memory", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    machine = machine_name()  # the dilation runs' name for this machine (its thread count), read before pinning
    if args.step:
        result = measure_steps(args.rounds)
        write_atomic(RESULTS / f"oce_step_{machine}.json", json.dumps(result, indent=2))
        for name, table in result["profiles"].items():
            print(f"profile of {name}, 1 thread:\n{table}")
        print(write_step_section(machine).read_text().split(STEP_SECTION)[1])
        return 0
    torch.set_num_threads(1)
    if args.peak_memory:
        print(peak_memory(args.peak_memory))
        return 0
    if args.report_only:
        print(write_reports(machine))
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
    print(write_reports(machine))
    return 0


if __name__ == "__main__":
    sys.exit(main())
