"""INR fitting speed: fit_inrs (its default ``auto``, the compiled kernel, the pure-torch path)
against one nn.Module + Adam per image.

For each thread count, times them in one process, interleaved over ``--repeats`` rounds, and
prints medians: microseconds per INR-step, the ratios to the per-network loop and to the torch
path, and the fraction of this CPU's large-sgemm throughput the fitter reaches (one INR-step of
2-32-32-1 at 784 pixels is about 5.3 MFLOP of forward+backward, plus 2 x 784 x 64 sin/cos).
The CPU (model and vector instruction sets) and the load average are printed beside every row:
other jobs on the CPU slow every method. ``--kernel-variant NAME=FLAGS`` also times the kernel
built with extra compiler flags, e.g. ``avx2=-mno-avx512f``: the AVX2 path on an AVX-512 CPU.

    python benchmarks/inr_fit.py [--threads 1 2] [--inrs 128] [--steps 50] [--kernel-variant avx2=-mno-avx512f]
                                 [--out results.md]

On another device (``--device cuda``) only the pure-torch path applies (``--backends torch``; the compiled
kernel is CPU code), the INRs and the per-network loop run there, and ``--json`` keeps the rates
(INR-steps/s) for ``benchmarks/gpu.sh``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from neuralgraph.bench.machine import cpu_description, cpu_short
from neuralgraph.data.mnist import load_subset
from neuralgraph.inr import DWS_MNIST, FitConfig, Siren, calibrated_backend, fit_inrs, grid_coordinates, init_siren

FLOP_PER_INR_STEP = 5.3e6
BACKENDS = ("auto", "cpp", "torch")


def batched(images: torch.Tensor, steps: int, pool_size: int, backend: str, kernel_flags: str = "") -> float:
    """Seconds for ``steps`` Adam steps of every INR (no early stop); the kernel built with
    ``kernel_flags`` ($NEURALGRAPH_KERNEL_FLAGS) where it is used."""
    saved = os.environ.get("NEURALGRAPH_KERNEL_FLAGS")
    os.environ["NEURALGRAPH_KERNEL_FLAGS"] = kernel_flags
    try:
        start = time.perf_counter()
        fit_inrs(images, range(len(images)), DWS_MNIST, FitConfig(steps=steps, target_psnr=float("inf"),
                                                                  pool_size=pool_size), backend=backend)
        if images.device.type == "cuda":
            torch.cuda.synchronize(images.device)
        return time.perf_counter() - start
    finally:
        if saved is None:
            del os.environ["NEURALGRAPH_KERNEL_FLAGS"]
        else:
            os.environ["NEURALGRAPH_KERNEL_FLAGS"] = saved


def per_network(images: torch.Tensor, steps: int) -> float:
    """Seconds for the straightforward loop: one module and one optimizer per image."""
    coords = grid_coordinates(28, 28, DWS_MNIST, device=images.device)
    weights, biases = init_siren(range(len(images)), DWS_MNIST)
    start = time.perf_counter()
    for i, image in enumerate(images):
        module = Siren(DWS_MNIST).load([w[i] for w in weights], [b[i] for b in biases]).to(images.device)
        optimizer = torch.optim.Adam(module.parameters(), lr=5e-4)
        target = image.reshape(-1, 1)
        for _ in range(steps):
            loss = (module(coords) + DWS_MNIST.output_offset - target).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    if images.device.type == "cuda":
        torch.cuda.synchronize(images.device)
    return time.perf_counter() - start


def sgemm_gflops(size: int = 1024, repeats: int = 10) -> float:
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


def measure(images: torch.Tensor, args, threads: int) -> dict:
    """Median us/INR-step of each method and of the loop at ``threads``, interleaved."""
    torch.set_num_threads(threads)
    methods = {backend: (backend, "") for backend in args.backends}
    methods.update({f"cpp [{name}]": ("cpp", flags) for name, flags in args.kernel_variant})
    for backend, flags in methods.values():  # warm-up (the kernel's build and auto's calibration, if not cached)
        batched(images[:4], 3, args.pool_size, backend, flags)
    per_network(images[:1], 3)
    samples = {name: [] for name in (*methods, "loop")}
    for _ in range(args.repeats):
        for name, (backend, flags) in methods.items():
            samples[name].append(1e6 * batched(images, args.steps, args.pool_size, backend, flags)
                                 / (len(images) * args.steps))
        samples["loop"].append(1e6 * per_network(images[:args.loop_inrs], args.steps) / (args.loop_inrs * args.steps))
    us = {name: statistics.median(values) for name, values in samples.items()}
    auto = calibrated_backend(DWS_MNIST, 28, 28)["choice"] if "auto" in methods else None
    return {"threads": threads, "us": us, "spread": {k: (min(v), max(v)) for k, v in samples.items()},
            "auto": auto, "sgemm_gflops": sgemm_gflops(), "load": os.getloadavg()[0]}


def table(rows: list[dict], args) -> str:
    lines = [f"CPU: {cpu_description()}; torch {torch.__version__}", "",
             f"batched: {args.inrs} INRs x {args.steps} Adam steps, pool {args.pool_size}; "
             f"loop: {args.loop_inrs} INRs; medians of {args.repeats} interleaved rounds (min-max)", "",
             "| CPU | threads | load avg | method | us/INR-step | vs loop | vs torch path | of sgemm |",
             "|---|---|---|---|---|---|---|---|"]
    labels = {"cpp": "fit_inrs, compiled kernel", "torch": "fit_inrs, pure-torch path",
              "loop": "nn.Module + Adam per image"}
    for row in rows:
        for name in row["us"]:
            label = labels.get(name, f"fit_inrs, compiled kernel {name[4:]}" if name.startswith("cpp [") else name)
            if name == "auto":
                label = f"fit_inrs default (auto: {row['auto']})"
            us, (low, high) = row["us"][name], row["spread"][name]
            sgemm = FLOP_PER_INR_STEP / us / 1e3 / row["sgemm_gflops"]
            torch_path = f"{row['us']['torch'] / us:.2f}x" if "torch" in row["us"] else ""
            lines.append(f"| {cpu_short()} | {row['threads']} | {row['load']:.2f} | {label} | "
                         f"{us:.0f} ({low:.0f}-{high:.0f}) | {row['us']['loop'] / us:.1f}x | "
                         f"{torch_path} | {sgemm:.0%} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1],
                        help="torch thread counts (1: other jobs share this CPU)")
    parser.add_argument("--inrs", type=int, default=128, help="INRs for the batched fitter")
    parser.add_argument("--loop-inrs", type=int, default=8, help="INRs for the per-network loop")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pool-size", type=int, default=FitConfig.pool_size)
    parser.add_argument("--kernel-variant", type=lambda text: tuple(text.split("=", 1)), nargs="*", default=[],
                        metavar="NAME=FLAGS", help="also time the kernel built with these extra compiler flags")
    parser.add_argument("--out", type=Path, help="also write the table (markdown) here")
    parser.add_argument("--device", default="cpu", help="where the INRs are fitted (another than cpu: torch path only)")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=None,
                        help="fit_inrs backends to time (default: all three on cpu, torch elsewhere)")
    parser.add_argument("--json", type=Path, help="also write the rates (JSON) here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    args.backends = args.backends or (list(BACKENDS) if device.type == "cpu" else ["torch"])
    images = (torch.from_numpy(load_subset("train").images[:args.inrs]).float() / 255).to(device)
    rows = [measure(images, args, threads) for threads in args.threads]
    text = table(rows, args)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        command = " ".join(sys.argv[1:] if argv is None else argv)
        args.out.write_text(f"# INR fitting speed\n\n`python benchmarks/inr_fit.py {command}`\n\n{text}")
    last = rows[-1]
    if args.json:
        import json

        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "device": str(device), "inrs": args.inrs, "steps": args.steps, "pool_size": args.pool_size,
            "rows": [{**row, "inr_steps_per_s": {name: 1e6 / us for name, us in row["us"].items()}} for row in rows],
        }, indent=1) + "\n")
    if "auto" not in last["us"]:
        return {"device": str(device), "us_per_inr_step": last["us"], "threads": last["threads"]}
    return {"batched_us_per_inr_step": last["us"]["auto"], "torch_us_per_inr_step": last["us"]["torch"],
            "loop_us_per_inr_step": last["us"]["loop"], "ratio": last["us"]["loop"] / last["us"]["auto"],
            "threads": last["threads"]}


if __name__ == "__main__":
    main()
