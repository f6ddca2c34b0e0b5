"""One network at real size: peak memory and time of a metanetwork's forward+backward at batch 1.

Rows: ``gmn`` and ``ng_gnn`` (hidden 64, 4 layers) on the parameter graph of one network, a SIREN
of layout (2, 1024, 2048, 3), (2, 2048, 4096, 3) or (2, 4096, 4096, 3) (random weights,
``mlp_to_graph``: the dense path) or an ImageNet-size ResNet-18 (torchvision's layout, written
below: 7x7 stem with BatchNorm, basic blocks [2, 2, 2, 2], 1000 classes, eval mode,
``module_to_graph`` at 224x224: the general path, skip and shortcut edges, every edge padded to
the stem's 49 kernel features), with the memory options of ``Metanet``: none, ``checkpoint``,
``edge_chunk``, both, both under bfloat16 autocast, and ``edge_chunk`` with the edge states kept in
bfloat16 between layers (``edge_dtype``, float32 arithmetic). The loss is the squared output of an
``InvariantReadout`` (pooled node and edge features), so no per-edge output is kept for backward.

Each case runs in a fresh child process limited to ``--limit-gib`` of address space
(``RLIMIT_AS``), so a case too big fails there with an allocation error ("out of memory")
instead of taking the machine's memory from other jobs. Reported: the child's peak resident
memory (``ru_maxrss`` after the first step: graph, model and one step, the whole process), its
resident memory before the first step (graph and model), and the median seconds of the steps
it could afford (1 for a first step over ``--one-step-s``). Results go to
``benchmarks/results/graph_size_<machine>.{json,md}`` as each case finishes; a rerun skips the
recorded cases.

    python benchmarks/graph_size.py [--models gmn ng_gnn] [--inputs siren1024 resnet18] [--options plain checkpoint]
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

from neuralgraph.bench.machine import cpu_description, cpu_short, machine_name
from neuralgraph.bench.published import GRAPH_SIZE_LIMITS
from neuralgraph.bench.runner import load_runs, write_atomic
from neuralgraph.graph import GraphSpec, mlp_to_graph, module_to_graph
from neuralgraph.nn import build_metanet

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
HIDDEN_DIM, NUM_LAYERS = 64, 4
EDGE_CHUNK = 2**18
SIRENS = {"siren1024": (2, 1024, 2048, 3), "siren2048": (2, 2048, 4096, 3), "siren4096": (2, 4096, 4096, 3)}
INPUTS = (*SIRENS, "resnet18")
OPTIONS = {
    "plain": {},
    "checkpoint": {"checkpoint": True},
    "edge_chunk": {"edge_chunk": EDGE_CHUNK},
    "checkpoint+edge_chunk": {"checkpoint": True, "edge_chunk": EDGE_CHUNK},
    "checkpoint+edge_chunk+bf16": {"checkpoint": True, "edge_chunk": EDGE_CHUNK},
    "edge_chunk+bf16_edges": {"edge_chunk": EDGE_CHUNK, "edge_dtype": torch.bfloat16},
}
MODELS = ("gmn", "ng_gnn")
# Where each input stands against the largest SIREN each anchor ran at batch 1 (GRAPH_SIZE_LIMITS).
ANCHORS = {"siren1024": "NG-GNN and NFN: their limit", "siren2048": "DWS: its limit (NG-GNN, NFN: beyond)",
           "siren4096": "beyond every anchor", "resnet18": ""}
OUT_OF_MEMORY = ("can't allocate memory", "MemoryError", "out of memory", "std::bad_alloc")
# The float32 option that keeps the least: an input it cannot run within the limit, the other float32 options cannot
# either (the bf16 ones keep less and are run).
LEANEST = "edge_chunk"


def conv(in_channels: int, out_channels: int, kernel: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel, stride, padding=kernel // 2, bias=False)


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block: two 3x3 convolutions with BatchNorm, identity or 1x1 projection shortcut."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1):
        super().__init__()
        self.conv1, self.bn1 = conv(in_channels, channels, 3, stride), nn.BatchNorm2d(channels)
        self.conv2, self.bn2 = conv(channels, channels, 3), nn.BatchNorm2d(channels)
        self.downsample = None
        if stride != 1 or in_channels != channels:
            self.downsample = nn.Sequential(conv(in_channels, channels, 1, stride), nn.BatchNorm2d(channels))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    """torchvision's ``resnet18`` layout: 7x7 stride-2 stem, max pooling, basic blocks [2, 2, 2, 2] of 64-512
    channels, global average pooling, 1000 classes (11.7M parameters)."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        blocks, channels = [], 64
        for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(channels, width, stride), BasicBlock(width, width)]
            channels = width
        self.layers = nn.Sequential(*blocks)
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(512, classes)

    def forward(self, x):
        x = self.maxpool(torch.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(self.avgpool(self.layers(x)), 1))


def input_graph(name: str):
    """The parameter graph of one network (a ``Data``)."""
    generator = torch.Generator().manual_seed(0)
    if name in SIRENS:
        layout = SIRENS[name]
        weights = [torch.randn(o, i, generator=generator) / i**0.5 for i, o in zip(layout, layout[1:])]
        return mlp_to_graph(weights, [torch.randn(o, generator=generator) for o in layout[1:]])
    torch.manual_seed(0)
    return module_to_graph(ResNet18().eval(), example_input=torch.randn(1, 3, 224, 224))


def current_rss_gib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**30


def peak_address_space_gib() -> float:
    """``VmPeak``: the most address space the process held, what ``RLIMIT_AS`` limits (above its resident memory)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmPeak:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def run_case(model: str, input_name: str, option: str, one_step_s: float, max_steps: int) -> dict:
    """One case in this process: the graph, the metanet and readout, then forward+backward steps."""
    graph = input_graph(input_name)
    spec = GraphSpec.of(graph)
    # one node_type per output neuron: ResNet-18's 1000 classes need more than the default 128 embeddings
    metanet = build_metanet(model, spec=spec, hidden_dim=HIDDEN_DIM, num_layers=NUM_LAYERS,
                            max_node_types=max(128, int(graph.node_type.max()) + 1), **OPTIONS[option])
    readout = metanet.readout(10)
    parameters = list(metanet.parameters()) + list(readout.parameters())
    context = metanet.context(graph)
    dense = context.widths is not None
    before = current_rss_gib()

    def step() -> float:
        start = time.perf_counter()
        for parameter in parameters:
            parameter.grad = None
        with torch.autocast(graph.x.device.type, dtype=torch.bfloat16, enabled=option.endswith("bf16")):
            loss = readout(graph, *metanet(graph, context), context).float().square().sum()
        loss.backward()
        return time.perf_counter() - start

    seconds = [step()]
    peak, address_space = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, peak_address_space_gib()
    while len(seconds) < max_steps and seconds[0] < one_step_s and sum(seconds) < 3 * one_step_s:
        seconds.append(step())
    return {"model": model, "input": input_name, "option": option, "status": "ok", "edges": graph.num_edges,
            "edge_rows": context.edge_index.shape[1], "nodes": graph.num_nodes, "edge_features": spec.edge_features,
            "path": "dense" if dense else "general", "rss_before_gib": before, "peak_rss_gib": peak,
            "peak_address_space_gib": address_space,
            "seconds_per_step": statistics.median(seconds), "steps": len(seconds), "threads": torch.get_num_threads(),
            "cpu": cpu_short()}


def child(arguments: list[str], result: Path, limit_gib: float) -> None:
    """``--run-one``: one case under an address-space limit; its record (or the allocation failure) to ``result``."""
    limit = int(limit_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    model, input_name, option, one_step_s, max_steps = arguments
    try:
        record = run_case(model, input_name, option, float(one_step_s), int(max_steps))
    except (MemoryError, RuntimeError) as error:
        if isinstance(error, RuntimeError) and not any(text in str(error) for text in OUT_OF_MEMORY):
            raise
        record = {"model": model, "input": input_name, "option": option, "status": "out of memory",
                  "error": str(error).splitlines()[0][:200], "cpu": cpu_short()}
    result.write_text(json.dumps(record))


def implied_out_of_memory(runs: list[dict], model: str, input_name: str, option: str) -> str | None:
    """Why ``(model, input, option)`` runs out of memory without running it: a smaller SIREN did with that
    option, or this input did with :data:`LEANEST`; ``None`` when neither is recorded."""
    failed = {(r["model"], r["input"], r["option"]) for r in runs if r["status"] != "ok"}
    if input_name in SIRENS:
        for smaller in list(SIRENS)[:list(SIRENS).index(input_name)]:
            if (model, smaller, option) in failed:
                return f"out of memory (as at {smaller})"
    if option != LEANEST and "bf16" not in option and (model, input_name, LEANEST) in failed:
        return f"out of memory (as {LEANEST})"
    return None


def cell(run: dict | None, key: str, digits: int = 1) -> str:
    if run is None:
        return "not run yet"
    if run["status"] != "ok":
        return f"out of memory (limit {run['limit_gib']:g} GiB)"
    return f"{run[key]:.{digits}f}"


def summarize(runs: list[dict], machine: str) -> str:
    """The size table: one row per model, input and option, next to the anchors' limits."""
    by_case = {(r["model"], r["input"], r["option"]): r for r in runs}
    edges = {r["input"]: r["edges"] for r in runs if r["status"] == "ok"}
    lines = [f"# Graph size: one network at batch 1 ({machine})", "",
             f"Each row's CPU in its last column (this file written on {cpu_description()}); torch "
             f"{torch.__version__}. Hidden {HIDDEN_DIM}, {NUM_LAYERS} layers, "
             f"forward+backward of a readout's squared output; `edge_chunk` = {EDGE_CHUNK:,} edge rows. Peak RSS: "
             "the whole child process after its first step; before: after building graph and model. "
             "Written by `benchmarks/graph_size.py`.", "",
             "| model | input | edges | anchor at this size | option | peak RSS (GiB) | before step (GiB) | s/step "
             "| steps | CPU |", "|---|---|---|---|---|---|---|---|---|---|"]
    for model in MODELS:
        for input_name in INPUTS:
            for option in OPTIONS:
                run = by_case.get((model, input_name, option))
                if run is None and option.endswith("bf16"):  # measured where it was asked for, not planned everywhere
                    continue
                size = f"{edges[input_name]:,}" if input_name in edges else ""
                steps = "" if run is None or run["status"] != "ok" else str(run["steps"])
                memory = (implied_out_of_memory(runs, model, input_name, option) if run is None else None) or cell(
                    run, "peak_rss_gib")
                before = "" if run is None or run["status"] != "ok" else f"{run['rss_before_gib']:.1f}"
                lines.append(f"| {model} | {input_name} | {size} | {ANCHORS[input_name]} | {option} | {memory} | "
                             f"{before} | {'' if run is None or run['status'] != 'ok' else cell(run, 'seconds_per_step')}"
                             f" | {steps} | {'' if run is None else run['cpu']} |")
    lines += ["", "\"out of memory (as ...)\": not run, since a smaller SIREN with that option, or this input with "
              f"`{LEANEST}` (which keeps the least), ran out of memory.",
              "", "Anchors' limits at batch 1 (neural-graphs' rebuttal): "
              + "; ".join(f"{name} {layout}" for name, layout in GRAPH_SIZE_LIMITS) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--inputs", nargs="+", choices=INPUTS, default=list(INPUTS))
    parser.add_argument("--options", nargs="+", choices=list(OPTIONS), default=list(OPTIONS))
    parser.add_argument("--limit-gib", type=float, default=17.0, help="address-space limit of each child")
    parser.add_argument("--one-step-s", type=float, default=60.0, help="a first step longer than this is the only one")
    parser.add_argument("--max-steps", type=int, default=3)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--run-one", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one:
        child(args.run_one[1:], Path(args.run_one[0]), args.limit_gib)
        return 0
    machine = machine_name("cpu")  # the cases run on the CPU, a GPU or not
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"graph_size_{machine}"
    runs = load_runs(stem.with_suffix(".json"))
    print(f"graph size benchmark on {cpu_description()}, torch {torch.__version__}", flush=True)

    def save() -> None:
        meta = {"machine": machine, "platform": platform.platform(), "torch": torch.__version__,
                "hidden_dim": HIDDEN_DIM, "num_layers": NUM_LAYERS, "edge_chunk": EDGE_CHUNK, "runs": runs}
        write_atomic(stem.with_suffix(".json"), json.dumps(meta, indent=2))
        write_atomic(stem.with_suffix(".md"), summarize(runs, machine))

    recorded = {(r["model"], r["input"], r["option"]) for r in runs}
    options = sorted(args.options, key=lambda option: option != LEANEST)  # the leanest first: it may rule out the rest
    for input_name in args.inputs:
        for model in args.models:
            for option in options:
                if (model, input_name, option) in recorded:
                    print(f"{model} {input_name} {option}: recorded, skipped", flush=True)
                    continue
                implied = implied_out_of_memory(runs, model, input_name, option)
                if implied:
                    print(f"{model} {input_name} {option}: {implied}, skipped", flush=True)
                    continue
                result = stem.with_name(f"{stem.name}_case.json")
                result.unlink(missing_ok=True)
                start = time.perf_counter()
                process = subprocess.run([sys.executable, __file__, "--limit-gib", str(args.limit_gib), "--run-one",
                                          str(result), model, input_name, option, str(args.one_step_s),
                                          str(args.max_steps)], cwd=ROOT)
                if process.returncode or not result.exists():
                    print(f"{model} {input_name} {option}: child failed (exit {process.returncode}), not recorded",
                          flush=True)
                    continue
                record = {**json.loads(result.read_text()), "limit_gib": args.limit_gib,
                          "wall_s": time.perf_counter() - start}
                result.unlink()
                runs.append(record)
                save()
                print(f"{model} {input_name} {option}: " + (
                    f"peak {record['peak_rss_gib']:.2f} GiB, {record['seconds_per_step']:.1f} s/step "
                    f"({record['steps']} steps)" if record["status"] == "ok" else record["status"]), flush=True)
    save()
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
