"""Forward+backward throughput of every registered metanetwork, in one run, as ratios side by side.

* graphs/s at batch 32 of (2, 32, 32, 1) graphs for each architecture (reductions through PyG's
  ``utils.scatter``, which uses torch-scatter where it is installed and faster);
* the weight-space layer stacks (``dws``, ``nfn_hnp``, ``nfn_np``) on their dense path and on
  the general index path, against the ``nfn`` package's ``HNPLinear`` / ``NPLinear`` (dense
  ``[B, C, d_out, d_in]`` tensors) at equal width ``C`` in and out, equal depth and batch, ReLU
  between layers, from the same ``C``-channel input (encoders excluded on both sides). ``nfn``
  is optional (``pip install -e .[bench]``, see pyproject.toml); without it that table is skipped;
* the whole weight-space metanetworks as a user trains them, encoder included
  (``build_metanet(name, hidden_dim=C, num_layers=4)`` on the batch as built, fwd+bwd), against
  ``nfn``'s input layer (``C_in = 1 -> C``, on nfn's dense ``WeightSpaceFeatures`` of the same
  weights) then the same 4 layers, ReLU between, both outputs readout-free, at each width of
  ``--whole-widths`` and thread count of ``--whole-threads`` (``--only-whole``: this table alone);
  the CPU model, its AVX-512/AVX2 flags and the load average head each table;
* the sparse GMN layer stack against a dense implementation of the same layers, with a
  ``[B, N, N, d]`` edge tensor as some public code does (same parameters, outputs checked equal);
* the message-passing metanetworks (``gmn``, ``ng_gnn``, ``ng_t``, ``nft``) at the widths of
  their configs (``configs/benchmarks/dilation/<name>_k1.yaml``) on the path selected automatically (dense
  blocks on this one-layout batch) against the baseline every batch can take, the same model
  forced onto the general path (``encoder.dense = False``), same parameters, outputs checked
  equal (``--only-baseline``: this alone);
  with ``--compile``, also the model with each layer compiled by ``torch.compile`` in place (as
  the tasks' ``compile`` option does), its compilation time (the first fwd+bwd step) reported apart;
  with ``--bf16``, also the automatic path (and, with ``--compile``, the compiled layers) under bfloat16
  autocast, as ``--trainer.precision bf16-mixed`` trains (fast where the CPU multiplies bfloat16
  natively, e.g. AMX; not equal to float32, its output difference is printed);
* parameter counts at the configurations of the papers (GMN d=128, 10 layers; DWS hidden 32,
  4 layers, when registered).

Every contender is timed interleaved with the others in the same process (one step of each,
then the next repetition), and the median over repetitions is reported, because the machine
may be shared. Everything timed here is the code of this checkout (or the ``nfn`` package): two
versions of neuralgraph (before and after a change) are compared by running this script in a
checkout of each, alternately (docs/benchmarks.md, "Adding a benchmark", says how).

Run: ``python benchmarks/metanet_speed.py [--threads 1] [--repeats 5] [--widths 32 64 128]``; the whole-metanet
table alone: ``--only-whole [--whole-widths 64 128] [--whole-threads 1 2]``.

``--only-rates`` times training steps on ``--device`` (default: CUDA when present) instead: per architecture
of ``--archs``, batch of ``--batches`` and precision of ``--precisions`` (``32``, ``bf16-mixed``), graphs/s of a
fwd+bwd step as a training step takes it (the batch's weights and facts read on the CPU, then moved) and the
peak memory (CUDA's peak allocation; on the CPU the process's peak resident memory), each architecture's
results written to ``--json-dir`` as soon as they exist (``benchmarks/gpu.sh`` runs it).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor, nn
from torch_geometric.typing import WITH_TORCH_SCATTER

from neuralgraph.bench.machine import cpu_description
from neuralgraph.bench.runner import benchmark_configs
from neuralgraph.graph import GraphSpec, mlp_to_graph
from neuralgraph.nn import METANETS, build_metanet
from neuralgraph.nn.budget import count_trainable
from neuralgraph.nn.gmn import GMN, GMNLayer

LAYOUT = (2, 32, 32, 1)
#: The data facts of networks of ``LAYOUT`` that the models are built for (NG-GNN's degree histogram, ...).
SPEC = GraphSpec.of(mlp_to_graph([torch.zeros(o, i) for i, o in zip(LAYOUT, LAYOUT[1:])],
                                 [torch.zeros(o) for o in LAYOUT[1:]]))
PAPER_CONFIGS = {"gmn": {"hidden_dim": 128, "num_layers": 10}, "dws": {"hidden_dim": 32, "num_layers": 4}}
NFN_PEERS = {"dws": "HNPLinear", "nfn_hnp": "HNPLinear", "nfn_np": "NPLinear"}
BASELINE_METANETS = ("gmn", "ng_gnn", "ng_t", "nft")  # timed on their automatic path against the general one
REPO = Path(__file__).resolve().parents[1]


def config_width(name: str) -> int:
    """``hidden_dim`` of ``configs/benchmarks/dilation/<name>_k1.yaml``, the width the architecture trains at."""
    import yaml

    path = benchmark_configs(REPO, "dilation") / f"{name}_k1.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: no config width for {name!r}; pass --baseline-width")
    return int(yaml.safe_load(path.read_text())["model"]["init_args"]["metanet_config"]["hidden_dim"])


def baseline_steps(name: str, graph, cfg: dict, sync, compiled: bool = False,
                   bf16: bool = False) -> tuple[dict, dict]:
    """Fwd+bwd steps of ``name`` on the path chosen automatically (``new``) and forced onto the general
    path (``general``, ``encoder.dense = False``: the baseline), same parameters; with ``compiled`` the
    automatic path with its layers compiled, lazily (the first step compiles); with ``bf16`` the
    automatic path (and the compiled one) under bfloat16 autocast. Also the max |output difference|
    of each from the general path's output."""
    general = build_metanet(name, spec=SPEC, **cfg).to(graph.x.device)
    general.encoder.dense = False
    models = {"new": build_metanet(name, spec=SPEC, **cfg).to(graph.x.device), "general": general}
    models["new"].load_state_dict(general.state_dict())
    if compiled:
        models["compiled"] = build_metanet(name, spec=SPEC, **cfg).to(graph.x.device)
        models["compiled"].load_state_dict(general.state_dict())
        for layer in models["compiled"].layers:
            layer.compile()
    forwards = {path: (lambda model=model: model(graph)) for path, model in models.items()}
    if bf16:
        for path in [path for path in ("new", "compiled") if path in models]:
            forwards[f"{path}_bf16"] = lambda model=models[path]: bf16_forward(model, graph)
    with torch.no_grad():
        reference = general(graph)
        differences = {path: max((a - b).abs().max().item() for a, b in zip(forward(), reference))
                       for path, forward in forwards.items() if path != "general"}
    return {path: backward_step(forward, sync) for path, forward in forwards.items()}, differences


def bf16_forward(model: nn.Module, graph) -> tuple[Tensor, ...]:
    """``model(graph)`` under the autocast that Lightning's ``precision="bf16-mixed"`` wraps a step in."""
    with torch.autocast(graph.x.device.type, dtype=torch.bfloat16):
        return model(graph)


def baseline_comparison(graph, args, sync) -> dict:
    """Throughput of :data:`BASELINE_METANETS` on their automatic path against the general path, interleaved."""
    steps, differences, widths, compile_seconds = {}, {}, {}, {}
    for name in args.baseline_metanets:
        widths[name] = args.baseline_width or config_width(name)
        cfg = {"hidden_dim": widths[name], "num_layers": args.num_layers, "max_layers": len(LAYOUT) - 1}
        paths, differences[name] = baseline_steps(name, graph, cfg, sync, args.compile, args.bf16)
        if args.compile:  # the first training step compiles forward and backward (again under autocast)
            start = time.perf_counter()
            paths["compiled"]()
            compile_seconds[name] = time.perf_counter() - start
            if args.bf16:
                paths["compiled_bf16"]()
        steps.update({(name, path): step for path, step in paths.items()})
    rates = interleaved_rates(steps, args.batch, args.repeats)
    print(f"\nmessage-passing metanets, automatic path (dense blocks) vs the general path, {args.num_layers} layers, "
          f"fwd+bwd, batch {args.batch}, median of {args.repeats} interleaved repetitions (graphs/s); "
          "max |output - general path's output|")
    compiled_header = f"{'compiled':>9}{'comp/gen':>9}{'comp/new':>9}{'comp diff':>10}{'compile s':>10}" if args.compile else ""
    bf16_header = f"{'bf16':>9}{'bf16/gen':>9}{'bf16/new':>9}{'bf16 diff':>10}" if args.bf16 else ""
    if args.bf16 and args.compile:
        bf16_header += f"{'comp+bf16':>10}{'c+b/new':>9}"
    print(f"{'metanet':<9}{'d':>5}{'new':>9}{'general':>9}{'new/gen':>9}{'new diff':>10}{compiled_header}{bf16_header}")
    table = {}
    for name in args.baseline_metanets:
        new, general = rates[(name, "new")], rates[(name, "general")]
        table[name] = {"hidden_dim": widths[name], "new": new, "general": general,
                       "difference": differences[name]["new"]}
        row = f"{name:<9}{widths[name]:>5}{new:>9.1f}{general:>9.1f}{new / general:>8.2f}x{differences[name]['new']:>10.1e}"
        if args.compile:
            compiled = rates[(name, "compiled")]
            table[name].update(compiled=compiled, compiled_difference=differences[name]["compiled"],
                               compile_s=compile_seconds[name])
            row += (f"{compiled:>9.1f}{compiled / general:>8.2f}x{compiled / new:>8.2f}x"
                    f"{differences[name]['compiled']:>10.1e}{compile_seconds[name]:>10.1f}")
        if args.bf16:
            bf16 = rates[(name, "new_bf16")]
            table[name].update(bf16=bf16, bf16_difference=differences[name]["new_bf16"])
            row += f"{bf16:>9.1f}{bf16 / general:>8.2f}x{bf16 / new:>8.2f}x{differences[name]['new_bf16']:>10.1e}"
            if args.compile:
                both = rates[(name, "compiled_bf16")]
                table[name].update(compiled_bf16=both, compiled_bf16_difference=differences[name]["compiled_bf16"])
                row += f"{both:>10.1f}{both / new:>8.2f}x"
        print(row)
    return table


def baseline_profile(graph, args, sync, top: int = 12) -> dict:
    """Where the time of one fwd+bwd step goes, automatic path (``new``) against the general path:
    ``torch.profiler`` self CPU time of the ``top`` costliest operators, with their share of the step."""
    from torch.profiler import ProfilerActivity, profile

    shares = {}
    for name in args.baseline_metanets:
        width = args.baseline_width or config_width(name)
        cfg = {"hidden_dim": width, "num_layers": args.num_layers, "max_layers": len(LAYOUT) - 1}
        steps, _ = baseline_steps(name, graph, cfg, sync)
        times = {}
        for path in ("new", "general"):
            steps[path]()  # warm-up
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                steps[path]()
            times[path] = {event.key: event.self_cpu_time_total / 1e3 for event in prof.key_averages()}
        totals = {path: sum(times[path].values()) for path in times}
        ops = sorted(set(times["new"]) | set(times["general"]),
                     key=lambda op: -max(t.get(op, 0.0) for t in times.values()))
        print(f"\n{name} (d={width}) one fwd+bwd step, self CPU ms (share): automatic path {totals['new']:.0f}, "
              f"general path {totals['general']:.0f}")
        for op in ops[:top]:
            print(f"  {op[:40]:<42}" + "".join(f"{times[path].get(op, 0.0):>9.1f} ({100 * times[path].get(op, 0.0) / totals[path]:>4.1f}%)"
                                              for path in ("new", "general")))
        shares[name] = {path: {op: times[path].get(op, 0.0) / totals[path] for op in ops[:top]} for path in times}
    return shares


def dense_gmn_layer(layer: GMNLayer, node: Tensor, edge: Tensor, adjacency: Tensor) -> tuple[Tensor, Tensor]:
    """``layer`` on dense tensors: node ``[B, N, d]``, edge ``[B, N, N, d]`` (row = target i, column = source j)."""
    update = layer.edge_mlp
    hidden = update.edge_lin(edge) + update.source_lin(node)[:, None, :, :] + update.target_lin(node)[:, :, None, :]
    edge = update.residual(edge, update.out_lin(nn.functional.silu(hidden))) * adjacency
    in_degree = adjacency.sum(2).clamp(min=1)  # [B, N, 1]
    out_degree = adjacency.sum(1).clamp(min=1)
    forward_msg = nn.functional.silu(layer.forward_node(node)[:, None, :, :] + layer.forward_edge(edge)) * adjacency
    backward_msg = nn.functional.silu(layer.backward_node(node)[:, :, None, :] + layer.backward_edge(edge)) * adjacency
    forward_agg = forward_msg.sum(2) / in_degree
    backward_agg = backward_msg.sum(1) / out_degree
    hidden = nn.functional.silu(layer.node_lin(torch.cat([node, forward_agg, backward_agg], dim=-1)))
    return layer.residual(node, layer.out(hidden)), edge


def to_dense(graph, node: Tensor, edge: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Node ``[B, N, d]``, edge ``[B, N, N, d]`` and adjacency ``[B, N, N, 1]`` of a one-layout batch."""
    B, d = graph.num_graphs, node.shape[1]
    N = graph.num_nodes // B
    src, dst = graph.edge_index
    graph_id, i, j = graph.batch[dst], dst % N, src % N
    dense_edge = edge.new_zeros(B, N, N, d)
    dense_edge[graph_id, i, j] = edge
    adjacency = edge.new_zeros(B, N, N, 1)
    adjacency[graph_id, i, j] = 1.0
    return node.view(B, N, d), dense_edge, adjacency


def peak_memory_mib(device: torch.device) -> tuple[float, str]:
    """The peak memory since the last reset: CUDA's peak allocation, else the process's peak resident set."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10, "process_max_rss"


def device_rates(args, device: torch.device, sync) -> dict:
    """``--only-rates``: graphs/s and peak memory of fwd+bwd steps per architecture, batch and precision (module
    docstring); a configuration that fails (e.g. out of memory) is recorded with its error, the others go on."""
    import json

    from neuralgraph.graph.blocks import WeightBlocks, graph_facts

    results = {}
    for name in args.archs:
        rows = {}
        for batch in args.batches:
            generator = torch.Generator().manual_seed(0)
            weights = [torch.randn(batch, o, i, generator=generator) * 0.1 for i, o in zip(LAYOUT, LAYOUT[1:])]
            biases = [torch.randn(batch, o, generator=generator) * 0.1 for o in LAYOUT[1:]]
            cpu_graph, cpu_blocks = mlp_to_graph(weights, biases), WeightBlocks.of_mlps(weights, biases)
            facts = graph_facts(cpu_graph, cpu_blocks.layout)  # read on the CPU, as the batch builders do
            graph = cpu_graph.to(device)
            blocks = WeightBlocks.of_mlps([w.to(device) for w in weights], [b.to(device) for b in biases])
            for precision in args.precisions:
                key = f"batch{batch}_{precision}"
                try:
                    model = build_metanet(name, spec=SPEC, hidden_dim=args.hidden_dim, num_layers=args.num_layers,
                                          max_layers=len(LAYOUT) - 1).to(device)

                    def forward(model=model):
                        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
                            return model(graph, model.context(graph, blocks, facts))

                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                        torch.cuda.reset_peak_memory_stats(device)
                    rate = interleaved_rates({key: backward_step(forward, sync)}, batch, args.repeats)[key]
                    peak, kind = peak_memory_mib(device)
                    rows[key] = {"graphs_per_s": rate, "peak_mib": peak, "peak_kind": kind}
                except (RuntimeError, ValueError) as error:  # torch.cuda.OutOfMemoryError is a RuntimeError
                    rows[key] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
                row = rows[key]
                print(f"{name:<11}{key:<22}" + (row["error"] if "error" in row else
                                                f"{row['graphs_per_s']:>12.1f} graphs/s {row['peak_mib']:>10.1f} MiB"))
        results[name] = {"device": str(device), "hidden_dim": args.hidden_dim, "num_layers": args.num_layers,
                         "layout": list(LAYOUT), "repeats": args.repeats, "threads": args.threads, "rates": rows}
        if args.json_dir is not None:
            args.json_dir.mkdir(parents=True, exist_ok=True)
            (args.json_dir / f"metanet_speed_{name}.json").write_text(json.dumps(results[name], indent=1) + "\n")
    return results


def interleaved_rates(steps: dict[str, Callable[[], None]], batch: int, repeats: int) -> dict[str, float]:
    """Graphs/s of each step: one warm-up each, then ``repeats`` rounds of one step each; medians."""
    for step in steps.values():
        step()
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            seconds[name].append(time.perf_counter() - start)
    return {name: batch / statistics.median(times) for name, times in seconds.items()}


def backward_step(forward: Callable[[], tuple[Tensor, ...]], sync: Callable[[], None]) -> Callable[[], None]:
    """A step that runs ``forward`` and back-propagates the mean square of its outputs."""
    def step():
        sum(out.square().mean() for out in forward()).backward()
        sync()

    return step


def layer_stack_step(name: str, graph, channels: int, num_layers: int, dense: bool, sync) -> Callable[[], None]:
    """Forward+backward of the layers of ``name`` (encoder run once, outside the step), dense or general path
    (``Metanet.dense_stack`` / ``general_stack``)."""
    model = build_metanet(name, spec=SPEC, hidden_dim=channels, num_layers=num_layers, max_layers=len(LAYOUT) - 1)
    model = model.to(graph.x.device)
    with torch.no_grad():
        node0, edge0, context = model.encoder(graph)
    stack = model.dense_stack if dense else model.general_stack

    def forward():
        return stack(node0.requires_grad_(), edge0.requires_grad_(), context)

    return backward_step(forward, sync)


def nfn_step(peer: str, batch: int, channels: int, num_layers: int, device, sync) -> Callable[[], None]:
    """Forward+backward of ``num_layers`` ``nfn`` layers of class ``peer`` with ReLU between, ``channels`` in and out."""
    from nfn import layers as nfn_layers
    from nfn.common import ArraySpec, NetworkSpec, WeightSpaceFeatures

    spec = NetworkSpec([ArraySpec((o, i)) for i, o in zip(LAYOUT, LAYOUT[1:])], [ArraySpec((o,)) for o in LAYOUT[1:]])
    stack = [getattr(nfn_layers, peer)(spec, channels, channels).to(device) for _ in range(num_layers)]
    features = WeightSpaceFeatures(
        [torch.randn(batch, channels, o, i, device=device, requires_grad=True) for i, o in zip(LAYOUT, LAYOUT[1:])],
        [torch.randn(batch, channels, o, device=device, requires_grad=True) for o in LAYOUT[1:]],
    )

    def forward():
        out = features
        for i, layer in enumerate(stack):
            out = layer(out)
            if i < num_layers - 1:
                out = out.map(torch.relu)
        return (*out.weights, *out.biases)

    return backward_step(forward, sync)


def nfn_whole_step(peer: str, weights: list[Tensor], biases: list[Tensor], channels: int, num_layers: int,
                   sync) -> Callable[[], None]:
    """Forward+backward of ``nfn``'s input layer (1 -> ``channels``) and ``num_layers`` layers of class ``peer``,
    ReLU between, on nfn's ``WeightSpaceFeatures`` ``[B, 1, d_out, d_in]`` of ``weights`` and ``biases``."""
    from nfn import layers as nfn_layers
    from nfn.common import ArraySpec, NetworkSpec, WeightSpaceFeatures

    spec = NetworkSpec([ArraySpec(tuple(w.shape[1:])) for w in weights], [ArraySpec(tuple(b.shape[1:])) for b in biases])
    device = weights[0].device
    stack = [getattr(nfn_layers, peer)(spec, c_in, channels).to(device) for c_in in [1] + [channels] * num_layers]
    features = WeightSpaceFeatures([w.unsqueeze(1) for w in weights], [b.unsqueeze(1) for b in biases])

    def forward():
        out = features
        for i, layer in enumerate(stack):
            out = layer(out)
            if i < num_layers:
                out = out.map(torch.relu)
        return (*out.weights, *out.biases)

    return backward_step(forward, sync)


def whole_comparison(graph, weights: list[Tensor], biases: list[Tensor], args, sync) -> dict:
    """Whole metanets, encoder included, against ``nfn``'s input layer and layer stack, per thread count and width."""
    try:
        import nfn  # noqa: F401
    except ImportError:
        print("\nnfn package absent: the whole-metanet comparison with nfn is skipped "
              "(pip install --no-deps nfn einops, see the bench extra in pyproject.toml)")
        return {}
    table, threads_before = {}, torch.get_num_threads()
    for threads in args.whole_threads:
        torch.set_num_threads(threads)
        print(f"\nwhole metanets, encoder included, vs nfn input layer + {args.num_layers} layers, fwd+bwd, batch "
              f"{args.batch}, {threads} threads, median of {args.repeats} interleaved repetitions (graphs/s); "
              f"{cpu_description()}; load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
        print(f"{'metanet':<9}{'C':>5}{'ours':>9}{'nfn':>9}  {'peer':<10}{'ours/nfn':>9}")
        for channels in args.whole_widths:
            steps = {}
            for name in NFN_PEERS:
                model = build_metanet(name, hidden_dim=channels, num_layers=args.num_layers,
                                      max_layers=len(weights)).to(graph.x.device)
                steps[name] = backward_step(lambda model=model: model(graph), sync)
            for peer in sorted(set(NFN_PEERS.values())):
                steps[peer] = nfn_whole_step(peer, weights, biases, channels, args.num_layers, sync)
            rates = interleaved_rates(steps, args.batch, args.repeats)
            for name, peer in NFN_PEERS.items():
                ours, other = rates[name], rates[peer]
                table[f"{name}_C{channels}_t{threads}"] = {"ours": ours, "nfn": other, "peer": peer, "threads": threads,
                                                           "load": os.getloadavg()[0]}
                print(f"{name:<9}{channels:>5}{ours:>9.1f}{other:>9.1f}  {peer:<10}{ours / other:>8.2f}x")
    torch.set_num_threads(threads_before)
    return table


def nfn_comparison(graph, args, device, sync) -> dict:
    """Ours (dense and general path) against the ``nfn`` package per architecture and width."""
    try:
        import nfn  # noqa: F401
    except ImportError:
        print("\nnfn package absent: the comparison with nfn's HNPLinear/NPLinear is skipped "
              "(pip install --no-deps nfn einops, see the bench extra in pyproject.toml)")
        return {}
    print(f"\nweight-space layer stacks, {args.num_layers} layers, fwd+bwd, batch {args.batch}, median of "
          f"{args.repeats} interleaved repetitions (graphs/s)")
    print(f"{'metanet':<9}{'C':>5}{'dense':>9}{'general':>9}{'nfn':>9}  {'peer':<10}{'dense/nfn':>10}{'dense/general':>14}")
    table = {}
    for channels in args.widths:
        steps = {}
        for name in NFN_PEERS:
            for dense in (True, False):
                steps[(name, dense)] = layer_stack_step(name, graph, channels, args.num_layers, dense, sync)
        for peer in sorted(set(NFN_PEERS.values())):
            steps[peer] = nfn_step(peer, args.batch, channels, args.num_layers, device, sync)
        rates = interleaved_rates(steps, args.batch, args.repeats)
        for name, peer in NFN_PEERS.items():
            dense, general, other = rates[(name, True)], rates[(name, False)], rates[peer]
            table[f"{name}_C{channels}"] = {"dense": dense, "general": general, "nfn": other, "peer": peer}
            print(f"{name:<9}{channels:>5}{dense:>9.1f}{general:>9.1f}{other:>9.1f}  {peer:<10}"
                  f"{dense / other:>9.2f}x{dense / general:>13.2f}x")
    return table


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden-dim", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--widths", type=int, nargs="+", default=[32, 64, 128],
                        help="channel widths C of the comparison with the nfn package")
    parser.add_argument("--whole-widths", type=int, nargs="+", default=[64, 128],
                        help="channel widths C of the whole-metanet comparison with the nfn package")
    parser.add_argument("--whole-threads", type=int, nargs="+", default=[1, 2],
                        help="thread counts of the whole-metanet comparison (each its own table)")
    parser.add_argument("--only-whole", action="store_true", help="run the whole-metanet comparison with nfn only")
    parser.add_argument("--baseline-metanets", nargs="*", default=list(BASELINE_METANETS),
                        help="message-passing metanetworks timed on their automatic path against the general path "
                             "(none: skip the comparison)")
    parser.add_argument("--baseline-width", type=int,
                        help="hidden_dim of that comparison (default: each architecture's configs/benchmarks/dilation width)")
    parser.add_argument("--only-baseline", action="store_true",
                        help="run the comparison of the automatic path with the general path only")
    parser.add_argument("--compile", action="store_true",
                        help="add to that comparison the automatic path with its layers torch.compile'd")
    parser.add_argument("--bf16", action="store_true",
                        help="add to that comparison the automatic path under bfloat16 autocast "
                             "(--trainer.precision bf16-mixed; not equal to float32, its difference is printed)")
    parser.add_argument("--profile", action="store_true",
                        help="with --only-baseline: also print where one step's time goes, automatic vs general path")
    parser.add_argument("--device", default=None, help="where to time (default: cuda when present, else cpu)")
    parser.add_argument("--only-rates", action="store_true",
                        help="time training steps per architecture, batch and precision only (module docstring)")
    parser.add_argument("--archs", nargs="+", default=sorted(METANETS), choices=sorted(METANETS),
                        help="with --only-rates: the architectures")
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 256], help="with --only-rates: batch sizes")
    parser.add_argument("--precisions", nargs="+", default=["32", "bf16-mixed"], choices=["32", "bf16-mixed"],
                        help="with --only-rates: float32, or bfloat16 autocast as --trainer.precision bf16-mixed")
    parser.add_argument("--json-dir", type=Path, default=None,
                        help="with --only-rates: write metanet_speed_<arch>.json here as each architecture finishes")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    if args.only_rates:
        print(f"device {device}, {args.threads} threads, {LAYOUT} graphs, hidden_dim {args.hidden_dim}, "
              f"{args.num_layers} layers, fwd+bwd, median of {args.repeats}; {cpu_description()}")
        return {"device": device.type, "rates": device_rates(args, device, sync)}
    torch.manual_seed(0)
    weights = [torch.randn(args.batch, o, i, device=device) * 0.1 for i, o in zip(LAYOUT, LAYOUT[1:])]
    biases = [torch.randn(args.batch, o, device=device) * 0.1 for o in LAYOUT[1:]]
    graph = mlp_to_graph(weights, biases)
    print(f"device {device}, {args.threads} threads, batch {args.batch} x {LAYOUT}: "
          f"{graph.num_nodes} nodes, {graph.num_edges} edges; hidden_dim {args.hidden_dim}, {args.num_layers} layers")

    print(f"torch-scatter {'present' if WITH_TORCH_SCATTER else 'absent'}; {cpu_description()}")
    results = {"rates": {}, "device": device.type, "threads": args.threads}
    if args.only_whole:
        results["whole"] = whole_comparison(graph, weights, biases, args, sync)
        return results
    results["baseline"] = baseline_comparison(graph, args, sync) if args.baseline_metanets else {}
    if args.only_baseline:
        if args.profile:
            results["profile"] = baseline_profile(graph, args, sync)
        return results
    print(f"\n{'metanet':<10}{'params':>10}{'graphs/s':>12}")
    models = {name: build_metanet(name, spec=SPEC, hidden_dim=args.hidden_dim, num_layers=args.num_layers,
                                  max_layers=len(LAYOUT) - 1).to(device) for name in sorted(METANETS)}
    results["rates"] = interleaved_rates(
        {name: backward_step(lambda model=model: model(graph), sync) for name, model in models.items()},
        args.batch, args.repeats)
    for name, model in models.items():
        print(f"{name:<10}{count_trainable(model):>10}{results['rates'][name]:>12.1f}")
    results["nfn"] = nfn_comparison(graph, args, device, sync)
    results["whole"] = whole_comparison(graph, weights, biases, args, sync)

    gmn = GMN(args.hidden_dim, args.num_layers).to(device)
    node0, edge0, context = gmn.encoder(graph)
    node0, edge0 = node0.detach(), edge0.detach()
    dense0 = to_dense(graph, node0, edge0)

    def sparse_layers():
        return gmn.general_stack(node0, edge0, context)

    def dense_layers():
        node, edge, adjacency = dense0
        for layer in gmn.layers:
            node, edge = dense_gmn_layer(layer, node, edge, adjacency)
        return node, edge

    with torch.no_grad():
        sparse_out, dense_out = sparse_layers(), dense_layers()
        difference = (sparse_out[0] - dense_out[0].reshape_as(sparse_out[0])).abs().max().item()
    print(f"\nGMN layer stack, sparse (scatter over edge_index) vs dense [B, N, N, d] edge tensor; "
          f"max |node difference| {difference:.1e}")

    layer_rates = interleaved_rates({"sparse": backward_step(sparse_layers, sync),
                                     "dense": backward_step(dense_layers, sync)}, args.batch, args.repeats)
    sparse_rate, dense_rate = layer_rates["sparse"], layer_rates["dense"]
    dense_edges = args.batch * (graph.num_nodes // args.batch) ** 2
    print(f"{'':<10}{'graphs/s':>12}{'edge rows':>12}")
    print(f"{'sparse':<10}{sparse_rate:>12.1f}{graph.num_edges:>12}")
    print(f"{'dense':<10}{dense_rate:>12.1f}{dense_edges:>12}")
    print(f"sparse/dense speed ratio {sparse_rate / dense_rate:.2f}, edge memory ratio {dense_edges / graph.num_edges:.1f}x")
    results.update(sparse_rate=sparse_rate, dense_rate=dense_rate, edge_memory_ratio=dense_edges / graph.num_edges)

    print("\nparameter counts at the papers' configurations")
    for name, cfg in PAPER_CONFIGS.items():
        if name in METANETS:
            print(f"{name:<10}{str(cfg):<40}{count_trainable(build_metanet(name, **cfg, max_layers=len(LAYOUT) - 1)):>12}")
        else:
            print(f"{name:<10}{str(cfg):<40}{'not registered':>12}")
    return results


if __name__ == "__main__":
    main()
