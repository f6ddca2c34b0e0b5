"""Forward+backward throughput of every registered metanetwork, in one run, as ratios side by side.

* graphs/s at batch 32 of (2, 32, 32, 1) graphs for each architecture (reductions through PyG's
  ``utils.scatter``, which uses torch-scatter where it is installed and faster);
* the sparse GMN layer stack against a dense implementation of the same layers, with a
  ``[B, N, N, d]`` edge tensor as some public code does (same parameters, outputs checked equal);
* parameter counts at the configurations of the papers (GMN d=128, 10 layers; DWS hidden 32,
  4 layers, when registered).

Run: ``python benchmarks/metanet_speed.py [--threads 2] [--repeats 3]``.
"""
from __future__ import annotations

import argparse
import time

import torch
from torch import Tensor, nn
from torch_geometric.typing import WITH_TORCH_SCATTER

from neuralgraph.graph import mlp_to_graph
from neuralgraph.nn import METANETS, build_metanet
from neuralgraph.nn.budget import count_trainable
from neuralgraph.nn.gmn import GMN, GMNLayer

LAYOUT = (2, 32, 32, 1)
PAPER_CONFIGS = {"gmn": {"hidden_dim": 128, "num_layers": 10}, "dws": {"hidden_dim": 32, "num_layers": 4}}


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


def seconds_per_step(step, repeats: int) -> float:
    step()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) / repeats


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden-dim", type=int, default=64)
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    weights = [torch.randn(args.batch, o, i, device=device) * 0.1 for i, o in zip(LAYOUT, LAYOUT[1:])]
    biases = [torch.randn(args.batch, o, device=device) * 0.1 for o in LAYOUT[1:]]
    graph = mlp_to_graph(weights, biases)
    print(f"device {device}, {args.threads} threads, batch {args.batch} x {LAYOUT}: "
          f"{graph.num_nodes} nodes, {graph.num_edges} edges; hidden_dim {args.hidden_dim}, {args.num_layers} layers")

    print(f"torch-scatter {'present' if WITH_TORCH_SCATTER else 'absent'}")
    print(f"{'metanet':<10}{'params':>10}{'graphs/s':>12}")
    results = {"rates": {}, "device": device.type}
    for name in sorted(METANETS):
        model = build_metanet(name, hidden_dim=args.hidden_dim, num_layers=args.num_layers, max_layers=len(LAYOUT) - 1)
        model = model.to(device)

        def step():
            node, edge = model(graph)
            (node.square().mean() + edge.square().mean()).backward()
            sync()

        results["rates"][name] = args.batch / seconds_per_step(step, args.repeats)
        print(f"{name:<10}{count_trainable(model):>10}{results['rates'][name]:>12.1f}")

    gmn = GMN(args.hidden_dim, args.num_layers).to(device)
    node0, edge0, context = gmn.encoder(graph)
    node0, edge0 = node0.detach(), edge0.detach()
    dense0 = to_dense(graph, node0, edge0)

    def sparse_layers():
        node, edge = node0, edge0
        for layer in gmn.layers:
            node, edge = layer(node, context.edge_index, edge)
        return node, edge

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

    def timed(layers):
        def step():
            node, edge = layers()
            (node.square().mean() + edge.square().mean()).backward()
            sync()

        return args.batch / seconds_per_step(step, args.repeats)

    sparse_rate, dense_rate = timed(sparse_layers), timed(dense_layers)
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
