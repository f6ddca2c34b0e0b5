"""INR fitting speed: the batched fitter against one nn.Module + torch.optim.Adam per image.

Prints INR-steps per second for both in one run, their ratio, microseconds per INR-step and
the fraction of this CPU's large-sgemm throughput the batched fitter reaches (one INR-step of
2-32-32-1 at 784 pixels is about 5.3 MFLOP of forward+backward, plus 2 x 784 x 64 sin/cos).

    python benchmarks/inr_fit.py [--threads 1] [--inrs 128] [--steps 50]
"""
from __future__ import annotations

import argparse
import time

import torch

from neuralgraph.data.mnist import load_subset
from neuralgraph.inr import DWS_MNIST, FitConfig, Siren, fit_inrs, grid_coordinates, init_siren

FLOP_PER_INR_STEP = 5.3e6


def batched(images: torch.Tensor, steps: int, pool_size: int) -> float:
    """Seconds for ``steps`` Adam steps of every INR (no early stop)."""
    start = time.perf_counter()
    fit_inrs(images, range(len(images)), DWS_MNIST, FitConfig(steps=steps, target_psnr=float("inf"),
                                                              pool_size=pool_size))
    return time.perf_counter() - start


def per_network(images: torch.Tensor, steps: int) -> float:
    """Seconds for the straightforward loop: one module and one optimizer per image."""
    coords = grid_coordinates(28, 28, DWS_MNIST)
    weights, biases = init_siren(range(len(images)), DWS_MNIST)
    start = time.perf_counter()
    for i, image in enumerate(images):
        module = Siren(DWS_MNIST).load([w[i] for w in weights], [b[i] for b in biases])
        optimizer = torch.optim.Adam(module.parameters(), lr=5e-4)
        target = image.reshape(-1, 1)
        for _ in range(steps):
            loss = (module(coords) + DWS_MNIST.output_offset - target).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return time.perf_counter() - start


def sgemm_gflops(size: int = 1024, repeats: int = 10) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: other jobs share this CPU)")
    parser.add_argument("--inrs", type=int, default=128, help="INRs for the batched fitter")
    parser.add_argument("--loop-inrs", type=int, default=8, help="INRs for the per-network loop")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--pool-size", type=int, default=FitConfig.pool_size)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    images = torch.from_numpy(load_subset("train").images[:args.inrs]).float() / 255
    batched(images[:4], 3, args.pool_size)  # warm-up
    per_network(images[:1], 3)
    # the fitter counts a final evaluation per INR as a step's forward; count only Adam steps
    t_batched = batched(images, args.steps, args.pool_size)
    t_loop = per_network(images[:args.loop_inrs], args.steps)
    rate_batched = args.inrs * args.steps / t_batched
    rate_loop = args.loop_inrs * args.steps / t_loop
    peak = sgemm_gflops()
    achieved = rate_batched * FLOP_PER_INR_STEP / 1e9
    print(f"threads={args.threads}  batched: {args.inrs} INRs x {args.steps} steps, pool {args.pool_size}")
    print(f"{'method':<22}{'INR-steps/s':>14}{'us/INR-step':>14}")
    print(f"{'batched fit_inrs':<22}{rate_batched:>14.0f}{1e6 / rate_batched:>14.1f}")
    print(f"{'per-network loop':<22}{rate_loop:>14.0f}{1e6 / rate_loop:>14.1f}")
    print(f"speed-up batched / loop: {rate_batched / rate_loop:.1f}x")
    print(f"batched: {achieved:.1f} GFLOP/s = {achieved / peak:.0%} of this CPU's 1024^3 sgemm ({peak:.1f} GFLOP/s)")
    return {"batched_us_per_inr_step": 1e6 / rate_batched, "loop_us_per_inr_step": 1e6 / rate_loop,
            "ratio": rate_batched / rate_loop, "fraction_of_sgemm": achieved / peak, "threads": args.threads}


if __name__ == "__main__":
    main()
