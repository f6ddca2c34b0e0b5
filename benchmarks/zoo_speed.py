"""How fast the zoo generators train, beside the trainer they replaced and the machine's float32 GEMM rate.

For the Small-CNN-Zoo preset (``make-cnn-zoo --preset small-cnn-zoo``) and the transformer zoo
(``make-transformer-zoo``), one shard of ``--networks`` networks (the zoo's own first networks,
their hyperparameters drawn by the recipe) is set up and trained for one epoch, without
evaluation, by

* the shared trainer (``neuralgraph.data.zoo_trainer``, this working tree, in this process), and
* the trainer before it: the package at ``--baseline`` (default: the parent of the commit that
  added ``neuralgraph/data/zoo_trainer.py``, or ``HEAD`` while that file is not committed),
  extracted with ``git archive`` into a temporary folder and run in a subprocess with that folder
  first on ``PYTHONPATH``; its ``train_shard`` runs with its evaluation replaced by zeros.

Reported per trainer: network-image passes per second (forward, backward and update of one
network on one image; the old transformer trainer runs every network on every image of a batch
and masks the loss, so its passes are those it computes), achieved GFLOP/s (the passes times the
FLOPs of one pass of the plain module, ``ZooNetwork`` / ``ZooViT``, forward and backward, counted
by ``torch.utils.flop_counter.FlopCounterMode``), that rate as a fraction of a 2048 x 2048 float32
matrix product's rate measured in the same run with the same thread count, and the wall time of
the epoch. Every timed part runs with ``torch.set_num_threads(--threads)`` (the new trainer: one
thread per operation, ``--threads`` networks side by side). The two trainers run one after the
other, so the machine's load (printed before and after) may differ between them.

    python benchmarks/zoo_speed.py                      # writes benchmarks/results/zoo_speed_<cpu>.md
    python benchmarks/zoo_speed.py --threads 2 --out /tmp/zoo_speed.md
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import neuralgraph
from neuralgraph.data import small_cnn_zoo_preset as preset
from neuralgraph.data import transformer_zoo
from neuralgraph.data import zoo_trainer as zt
from neuralgraph.data.cnn_zoo import ZooNetwork, _mnist, network_seed

REPO = Path(neuralgraph.__file__).resolve().parents[1]
TRAINER = "neuralgraph/data/zoo_trainer.py"

# The trainer before neuralgraph/data/zoo_trainer.py, run from its own package in a subprocess:
# argv: kind ("preset" | "transformer"), settings (JSON), threads. Prints one JSON line.
BASELINE_SCRIPT = r'''
import json, sys, time
import torch
kind, settings, threads = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
import neuralgraph
from neuralgraph.data.cnn_zoo import network_seed
if kind == "preset":
    from neuralgraph.data import small_cnn_zoo_preset as zoo
    settings = zoo.PresetSettings(**{**settings, "checkpoint_epochs": tuple(settings["checkpoint_epochs"])})
    train = zoo._mnist("train", settings.train_size, settings.source, None)
    test = zoo._mnist("test", settings.test_size, settings.source, None)
    zoo._evaluate = lambda params, *args, **kwargs: (torch.zeros(len(params), dtype=torch.float64),) * 2
    hypers = [zoo.sample_hyperparameters(network_seed(settings.seed, i)) for i in range(settings.networks)]
    passes = sum(int(h["train_fraction"] * settings.train_size) // settings.batch_size * settings.batch_size
                 for h in hypers)
else:
    from neuralgraph.data import transformer_zoo as zoo
    from neuralgraph.data.cnn_zoo import _mnist
    settings = zoo.TransformerZooSettings(**{**settings, "checkpoint_epochs": tuple(settings["checkpoint_epochs"])})
    train = _mnist("train", settings.train_size, settings.source, None)
    test = _mnist("test", settings.test_size, settings.source, None)
    zoo.ZooTraining.evaluate = lambda self, images, labels, mask: (torch.zeros(len(self)),) * 2
    passes = settings.networks * settings.train_size  # every network runs on every image (masked loss)
start, cpu = time.perf_counter(), time.process_time()
zoo.train_shard(0, settings.networks, settings, train, test)
print(json.dumps({"seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu,
                  "passes": passes, "package": neuralgraph.__file__}))
'''


def cpu_model() -> str:
    """The CPU's model name, as /proc/cpuinfo (or the platform) gives it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def cpu_isa() -> str:
    """The vector extensions that decide the float32 GEMM and bf16 paths: AMX, AVX-512 or AVX2."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return "unknown ISA"
    names = [name for flag, name in (("avx512f", "AVX-512"), ("amx_bf16", "AMX"), ("avx2", "AVX2"))
             if f" {flag}" in flags]
    return "+".join(names[:2]) if "AVX-512" in names else (names[-1] if names else "no AVX2")


def slug(text: str) -> str:
    text = re.sub(r"\((R|TM)\)|\bCPU\b|@.*$", "", text, flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def clock(threads: int):
    """The clock of every rate: with one thread the process's CPU time (the time it ran on a core,
    which other processes' turns on that core do not lengthen), with more the wall time."""
    return time.process_time if threads == 1 else time.perf_counter


def gemm_rate(threads: int, size: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of the best of ``repeats`` float32 ``size x size`` matrix products (on :func:`clock`)."""
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    now = clock(threads)
    best = math.inf
    for _ in range(repeats):
        start = now()
        a @ b
        best = min(best, now() - start)
    return 2 * size ** 3 / best / 1e9


def flops_per_pass(module: torch.nn.Module, images: torch.Tensor) -> float:
    """FLOPs of one forward and backward of ``module`` per image (FlopCounterMode; attention as math)."""
    labels = torch.zeros(len(images), dtype=torch.long)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(module(images), labels).backward()
    return counter.get_total_flops() / len(images)


def in_place_addmm_flops(self, mat1, mat2, *args, out_val=None, **kwargs) -> int:
    """FLOPs of ``self.addmm_(mat1, mat2)`` (FlopCounterMode counts ``addmm``, not its in-place form,
    in which the trainer accumulates its weight gradients)."""
    return 2 * mat1.shape[0] * mat1.shape[1] * mat2.shape[1]


in_place_addmm_flops._get_raw = True  # called with the tensors, as FlopCounterMode's own formulas after unwrapping


def new_epoch(stack, batches, train, threads: int, repeats: int) -> dict:
    """One epoch of every network of ``stack`` (its own batches), timed ``repeats`` times (the
    fastest kept: the machine is shared); the passes it ran."""
    inputs = stack.prepare(train[0]), train[1]
    epochs = [batches.epoch(i) for i in range(stack.n)]
    steps = [[(i, epochs[i][s]) for i in range(stack.n) if len(epochs[i]) > s] for s in range(max(map(len, epochs)))]
    stack.workers = zt._Workers(threads)
    with zt.op_threads(1):
        stack.step(steps[0], *inputs)  # buffers are made on the first step: not timed
        best = {"wall_seconds": math.inf, "cpu_seconds": math.inf}
        key = "cpu_seconds" if threads == 1 else "wall_seconds"
        for _ in range(repeats):
            start, cpu = time.perf_counter(), time.process_time()
            for step in steps:
                stack.step(step, *inputs)
            timed = {"wall_seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu}
            best = min(best, timed, key=lambda r: r[key])
        stack.workers = zt._Workers(1)
        with FlopCounterMode(display=False, custom_mapping={torch.ops.aten.addmm_: in_place_addmm_flops}) as counter:
            stack.step(steps[0], *inputs)
    passes = sum(len(index) for step in steps for _, index in step)
    return {**best, "seconds": best[key], "passes": passes,
            "counted_flops_per_pass": counter.get_total_flops() / sum(len(index) for _, index in steps[0])}


def baseline_revision(requested: str | None) -> str:
    """``requested``, else the parent of the commit that added the trainer, else ``HEAD``."""
    if requested:
        return requested
    added = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "--", TRAINER], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    return f"{added[-1]}^" if added else "HEAD"


def old_epoch(revision: str, kind: str, settings: dict, threads: int) -> dict:
    """The trainer of ``revision``: one epoch of ``settings``' shard in a subprocess (see the docstring)."""
    commit = subprocess.run(["git", "rev-parse", "--short", revision], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="zoo-speed-baseline-") as folder:
        archive = subprocess.run(["git", "archive", "--format=tar", revision, "neuralgraph"], cwd=REPO,
                                 capture_output=True, check=True).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        env = {**os.environ, "PYTHONPATH": folder + os.pathsep + os.environ.get("PYTHONPATH", "")}
        done = subprocess.run([sys.executable, "-c", BASELINE_SCRIPT, kind, json.dumps(settings), str(threads)],
                              cwd=folder, env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"the baseline trainer ({commit}) failed:\n{done.stderr[-3000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        result["wall_seconds"] = result["seconds"]
        result["seconds"] = result["cpu_seconds"] if threads == 1 else result["wall_seconds"]
        if not result.pop("package").startswith(folder):
            raise RuntimeError("the baseline subprocess imported this working tree's package, not the extracted one")
    return {**result, "commit": commit}


def preset_run(args, threads: int) -> tuple[dict, dict, float]:
    settings = preset.PresetSettings(networks=args.networks, shard_size=args.networks, checkpoint_epochs=(1,),
                                     train_size=args.cnn_train_size, test_size=100, batch_size=args.cnn_batch_size,
                                     source=args.source)
    train = preset._mnist("train", settings.train_size, settings.source, None)
    flops = flops_per_pass(ZooNetwork(preset.CHANNELS, "relu"), train[0][:16])
    torch.set_num_threads(threads)
    stack, batches, _ = preset.stack_networks(range(settings.networks), settings, settings.train_size)
    new = new_epoch(stack, batches, train, threads, args.repeats)
    new["path"] = "compiled kernels" if stack.kernels is not None else "torch operations"
    old = old_epoch(args.baseline, "preset", settings.to_dict(), threads) if not args.skip_baseline else None
    return new, old, flops


def transformer_run(args, threads: int) -> tuple[dict, dict, float]:
    settings = transformer_zoo.TransformerZooSettings(networks=args.networks, shard_size=args.networks,
                                                      checkpoint_epochs=(1,), train_size=args.vit_train_size,
                                                      test_size=100, batch_size=args.vit_batch_size, source=args.source)
    train = _mnist("train", settings.train_size, settings.source, None)
    hypers = [transformer_zoo.sample_hyperparameters(network_seed(settings.seed, i)) for i in range(settings.networks)]
    per_arch = {}
    for h in hypers:
        key = tuple(sorted(transformer_zoo.architecture(h).items()))
        if key not in per_arch:
            per_arch[key] = flops_per_pass(transformer_zoo.ZooViT(**dict(key)), train[0][:8])
    flops = [per_arch[tuple(sorted(transformer_zoo.architecture(h).items()))] for h in hypers]
    torch.set_num_threads(threads)
    stack, batches, order = transformer_zoo.stack_networks(range(settings.networks), settings, settings.train_size)
    new = new_epoch(stack, batches, train, threads, args.repeats)
    new["path"] = "bmm per architecture, autograd"
    # FLOPs of the passes run: each network's own passes times its architecture's FLOPs
    new["flops"] = sum(flops[order[r]] * len(batches.subsets[r]) for r in range(stack.n))
    old = old_epoch(args.baseline, "transformer", settings.to_dict(), threads) if not args.skip_baseline else None
    if old is not None:
        old["flops"] = sum(flops) * settings.train_size
    return new, old, new["flops"] / new["passes"]


def row(name: str, result: dict, flops_per: float, gemm: float, reference: dict | None) -> str:
    rate = result["passes"] / result["seconds"]
    flops = result.get("flops", flops_per * result["passes"]) / result["seconds"] / 1e9
    speedup = "" if reference is None else f"{rate / (reference['passes'] / reference['seconds']):.1f}x"
    epoch = "" if reference is None else f"{reference['seconds'] / result['seconds']:.1f}x"
    return (f"| {name} | {result['passes']:,} | {result['wall_seconds']:.2f} | {result['cpu_seconds']:.2f} | "
            f"{rate:,.0f} | "
            f"{speedup} | {epoch} | {flops:.1f} | {flops / gemm:.1%} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every timed part")
    parser.add_argument("--networks", type=int, default=64, help="networks of the shard")
    parser.add_argument("--cnn-train-size", type=int, default=6000)
    parser.add_argument("--cnn-batch-size", type=int, default=512)
    parser.add_argument("--vit-train-size", type=int, default=2000)
    parser.add_argument("--vit-batch-size", type=int, default=64)
    parser.add_argument("--source", choices=("full", "embedded"), default="full", help="MNIST images")
    parser.add_argument("--baseline", default=None, help="git revision of the trainer before (default: see above)")
    parser.add_argument("--skip-baseline", action="store_true", help="time the shared trainer only")
    parser.add_argument("--only", choices=("preset", "transformer"), default=None)
    parser.add_argument("--repeats", type=int, default=3, help="epochs timed per shared-trainer row (fastest kept)")
    parser.add_argument("--out", default=None, help="markdown file (default benchmarks/results/zoo_speed_<cpu>.md)")
    args = parser.parse_args(argv)
    if not args.skip_baseline:
        args.baseline = baseline_revision(args.baseline)
    model, isa = cpu_model(), cpu_isa()
    load_before = os.getloadavg()
    gemm_start = gemm_rate(args.threads)
    print(f"{model} ({isa}), {args.threads} thread(s): float32 GEMM 2048^3 {gemm_start:.1f} GFLOP/s", flush=True)
    runs = [("preset", "Small-CNN-Zoo preset", preset_run,
             f"{args.cnn_train_size:,} images, batches of {args.cnn_batch_size}"),
            ("transformer", "transformer zoo", transformer_run,
             f"{args.vit_train_size:,} images, batches of {args.vit_batch_size}")]
    rows, notes = [], []
    for key, name, run, data in runs:
        if args.only and args.only != key:
            continue
        new, old, flops = run(args, args.threads)
        if old is not None:
            rows.append((f"{name} ({data}), before ({old['commit']})", old, flops, None))
        rows.append((f"{name} ({data}), shared trainer ({new['path']})", new, flops, old))
        print(f"{name}: {new['passes'] / new['seconds']:,.0f} passes/s"
              + (f" (before: {old['passes'] / old['seconds']:,.0f})" if old else ""), flush=True)
        notes.append(f"* {name}: {flops / 1e3:,.0f} kFLOP per pass (the plain module's forward and backward, "
                     "FlopCounterMode); FlopCounterMode over one step of the shared trainer counts "
                     f"{new['counted_flops_per_pass'] / 1e3:,.0f} kFLOP per pass (its torch matrix products"
                     + ("; the compiled kernels' first convolution is not seen)." if key == "preset" else ")."))
        if key == "transformer" and old is not None:
            notes.append(f"* transformer zoo, before: every network ran on every image of the shard's shared batches "
                         f"(its training fraction a mask on its loss): {old['passes']:,} passes an epoch, where the "
                         f"shared trainer runs each network on its own images ({new['passes']:,}). Passes/s compares "
                         "the work done per second; the epoch time, the time to train the shard.")
    gemm_end = gemm_rate(args.threads)
    gemm = max(gemm_start, gemm_end)  # the machine's rate drifts: the higher is the reference (the harder one)
    load_after = os.getloadavg()
    lines = [f"# Zoo trainer speed: {model} ({isa}), {args.threads} thread(s)", "",
             f"Written by `{' '.join(['python benchmarks/zoo_speed.py', *(sys.argv[1:] if argv is None else argv)])}`"
             f" (torch {torch.__version__}). One epoch of one shard of {args.networks} networks, no evaluation "
             f"(the shared trainer: the fastest of {args.repeats} epochs). Every rate is per "
             + ("CPU second of the process (one thread: the time it ran on a core; wall seconds beside)"
                if args.threads == 1 else "wall second") +
             f". Float32 GEMM (2048 x 2048) in the same run: {gemm_start:.1f} GFLOP/s at the start, "
             f"{gemm_end:.1f} at the end; the fractions are of the higher, **{gemm:.1f} GFLOP/s**."
             + (" Before: the trainer of the commit named in its rows, the parent of the one that added "
                "`neuralgraph/data/zoo_trainer.py`, extracted with `git archive` into a temporary folder and run in "
                "a subprocess, its `train_shard`'s evaluation replaced by zeros." if not args.skip_baseline else ""),
             "", "| zoo, trainer | passes | wall s | CPU s | passes/s | passes/s vs before | epoch time vs before "
             "| GFLOP/s | of GEMM |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [row(name, result, flops, gemm, reference) for name, result, flops, reference in rows]
    lines += ["", *notes, f"* Load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f} "
              f"({os.cpu_count()} CPUs): the machine was shared; compare rows of one run.", ""]
    print("\n".join(lines[6:6 + len(rows)]))
    out = Path(args.out) if args.out else REPO / "benchmarks" / "results" / f"zoo_speed_{slug(model)}-{slug(isa)}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
