"""Time to turn 10,000 MLPs of layout (2, 32, 32, 1) into one PyG Batch.

Batched path (`mlp_to_graph` on stacked weights: a few tensor ops) against the straightforward
per-network `Data` + `Batch.from_data_list` loop. Prints both and their ratio in one run.

    python benchmarks/graph_build.py [--networks 10000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import time

import torch
from torch_geometric.data import Batch

from neuralgraph.graph import graph_to_mlp, mlp_to_graph

LAYOUT = (2, 32, 32, 1)


def per_network_loop(weights, biases):
    """One ``Data`` per network, built the usual way, then ``Batch.from_data_list``."""
    graphs = []
    for n in range(weights[0].shape[0]):
        graphs.append(mlp_to_graph([w[n] for w in weights], [b[n] for b in biases]))
    return Batch.from_data_list(graphs)


def best_of(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(args.networks, LAYOUT[l + 1], LAYOUT[l], generator=gen) for l in range(len(LAYOUT) - 1)]
    biases = [torch.randn(args.networks, LAYOUT[l + 1], generator=gen) for l in range(len(LAYOUT) - 1)]

    t_batched, fast = best_of(lambda: mlp_to_graph(weights, biases), args.repeats)
    t_loop, slow = best_of(lambda: per_network_loop(weights, biases), max(1, args.repeats - 2))
    t_decode, _ = best_of(lambda: graph_to_mlp(fast), args.repeats)
    assert torch.equal(fast.edge_attr, slow.edge_attr) and torch.equal(fast.edge_index, slow.edge_index)

    print(f"graph build, {args.networks} networks of layout {LAYOUT}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print("| path | seconds | networks/s | ratio |\n|---|---|---|---|")
    print(f"| batched mlp_to_graph | {t_batched:.4f} | {args.networks / t_batched:,.0f} | {t_loop / t_batched:.1f}x |")
    print(f"| per-network Data + Batch.from_data_list | {t_loop:.4f} | {args.networks / t_loop:,.0f} | 1.0x |")
    print(f"| batched graph_to_mlp (inverse) | {t_decode:.4f} | {args.networks / t_decode:,.0f} | - |")
    return {"batched_s": t_batched, "loop_s": t_loop, "decode_s": t_decode, "ratio": t_loop / t_batched}


if __name__ == "__main__":
    main()
