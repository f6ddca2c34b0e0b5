"""INR data fidelity: statistics of our fitted MNIST INRs against the INRs DWSNets released.

For each recipe, fits the INRs of the first ``N`` digits of the ``train`` split (the same
digits and seeds as ``neuralgraph make-inrs --split train --limit N``) and prints, beside the
released set's published numbers and their ratio:

* per-layer std of the weights and of the biases (over all INRs, as ``neuralgraph inr-stats``);
* the share of INRs in bias general position after quantization to 16 / 12 / 8 bits, under
  three schemes of ``neuralgraph.theory.quantize.quantize_mlp``: IEEE half precision (``fp16``,
  16 bits only), uniform symmetric with one scale per tensor (``tensor``, the default of
  ``neuralgraph audit-gp``) and one scale per layer (``layer``);
* PSNR quantiles, the share of INRs stopped early, and the fitting time.

Each finished recipe is appended as one JSON line to ``--out`` (a killed run loses only the
recipe in progress) and its table is printed.

    python benchmarks/inr_fidelity.py --n 200 --recipes dws-1000 lr1e-3-2000 --out benchmarks/results/x.jsonl
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

import torch

from neuralgraph.bench.machine import cpu_short
from neuralgraph.bench.published import DWS_INRS_GP
from neuralgraph.commands.inr_stats import DWS_REFERENCE_STD
from neuralgraph.data.generate import INR_FOLDER, inr_seed, split_digits
from neuralgraph.data.inr_dataset import InrDataset
from neuralgraph.data.shards import read_manifest
from neuralgraph.inr import DWS_MNIST, PRESETS, FitConfig, FitResult, SirenConvention, fit_inrs
from neuralgraph.theory.gp import audit_gp
from neuralgraph.theory.quantize import quantize_mlp

# The INR set released with DWSNets (60,000 MNIST SIRENs): per-layer std (as inr-stats prints
# it), and the share of INRs in bias GP after quantization (published table; 16, 12, 8 bits).
RELEASED_STD = DWS_REFERENCE_STD
RELEASED_GP = DWS_INRS_GP
SCHEMES = ("fp16", "tensor", "layer")
QUANTILES = (0.05, 0.5, 0.95)

# Recipes screened besides the named presets: (convention changes, fit changes, dtype).
CANDIDATES = {
    "lr1e-3-1000": ({}, {"lr": 1e-3}, "float32"),
    "lr5e-4-2000": ({}, {"steps": 2000}, "float32"),
    "lr1e-3-1500": ({}, {"lr": 1e-3, "steps": 1500}, "float32"),
    "lr1e-3-1500-fp64": ({}, {"lr": 1e-3, "steps": 1500}, "float64"),
    "lr1e-3-1750": ({}, {"lr": 1e-3, "steps": 1750}, "float32"),
    "lr1e-3-2000": ({}, {"lr": 1e-3, "steps": 2000}, "float32"),
    "lr5e-4-5000": ({}, {"steps": 5000}, "float32"),
    "siren-1000": ({"init": "siren"}, {}, "float32"),
}


def recipes() -> dict:
    """Every recipe by name: the presets, then the screened candidates (based on ``dws-1000``)."""
    table = {name: (preset.convention, preset.fit, "float32") for name, preset in PRESETS.items()}
    for name, (conv, fit, dtype) in CANDIDATES.items():
        table[name] = (dataclasses.replace(DWS_MNIST, **conv), dataclasses.replace(FitConfig(), **fit), dtype)
    return table


def gp_percent(weights, biases, bits: int, scheme: str) -> float:
    granularity = "ieee" if scheme == "fp16" else scheme
    return 100 * audit_gp(*quantize_mlp(weights, biases, bits, granularity)).in_gp.double().mean().item()


def fit(name: str, n: int, source: str) -> tuple[FitResult, SirenConvention, FitConfig, str, float]:
    """Fit the first ``n`` train digits with recipe ``name``; also the seconds it took."""
    convention, config, dtype = recipes()[name]
    digits = split_digits("train", source, split_seed=0, limit=n)
    images = (torch.from_numpy(digits.images).to(getattr(torch, dtype)) / 255)
    seeds = [inr_seed(0, "train", i) for i in digits.indices]
    start = time.perf_counter()
    result = fit_inrs(images, seeds, convention, config)
    return result, convention, config, dtype, time.perf_counter() - start


def load(root: Path, n: int) -> tuple[FitResult, SirenConvention, FitConfig, str, float]:
    """The first ``n`` train INRs of a ``make-inrs`` folder (no fitting time: NaN)."""
    data, manifest = InrDataset(root, "train"), read_manifest(root, INR_FOLDER)
    if len(data) < n:
        raise ValueError(f"{root}: {len(data)} train INRs, fewer than --n {n}")
    result = FitResult([w[:n] for w in data.weights], [b[:n] for b in data.biases], data.psnrs[:n], data.steps[:n])
    return result, data.convention, FitConfig.from_dict(manifest["fit"]), str(data.weights[0].dtype)[6:], math.nan


def measure(name: str, result: FitResult, convention: SirenConvention, config: FitConfig, dtype: str,
            seconds: float) -> dict:
    """One JSON row: std, GP rates per scheme and bit width, PSNR quantiles, steps and time."""
    n = len(result.psnr)
    weights, biases = [w.double() for w in result.weights], [b.double() for b in result.biases]
    gp = {scheme: {bits: gp_percent(weights, biases, bits, scheme) for bits in RELEASED_GP
                   if scheme != "fp16" or bits == 16} for scheme in SCHEMES}
    return {
        "recipe": name, "n": n, "dtype": dtype, "convention": convention.to_dict(), "fit": config.to_dict(),
        "weight_std": [w.std().item() for w in weights], "bias_std": [b.std().item() for b in biases],
        "gp": gp, "psnr_quantiles": dict(zip(map(str, QUANTILES), torch.quantile(
            result.psnr.double(), torch.tensor(QUANTILES, dtype=torch.float64)).tolist())),
        "stopped_early": (result.steps < config.steps).double().mean().item(),
        "mean_steps": result.steps.double().mean().item(), "seconds": seconds,
        "threads": torch.get_num_threads(), "machine": cpu_short(),
    }


def table(row: dict) -> str:
    """The markdown table of one recipe beside the released set."""
    lines = [f"### {row['recipe']} (N = {row['n']}, {row['dtype']}, lr {row['fit']['lr']}, "
             f"{row['fit']['steps']} steps, stop at {row['fit']['target_psnr']} dB)", "",
             "| statistic | released | ours | ratio |", "|---|---|---|---|"]
    for kind in ("weight", "bias"):
        for l, (ref, ours) in enumerate(zip(RELEASED_STD[kind], row[f"{kind}_std"]), start=1):
            lines.append(f"| layer {l} {kind} std | {ref:.3f} | {ours:.4f} | {ours / ref:.3f} |")
    for scheme, rates in row["gp"].items():
        for bits, ours in rates.items():
            ref = RELEASED_GP[int(bits)]
            lines.append(f"| GP {bits} bit, {scheme} | {ref:.2f}% | {ours:.2f}% | {ours - ref:+.2f} pt |")
    q = row["psnr_quantiles"]
    lines += [f"| PSNR 5/50/95% | not published | {q['0.05']:.1f} / {q['0.5']:.1f} / {q['0.95']:.1f} dB | |",
              f"| stopped early | | {100 * row['stopped_early']:.1f}% (mean {row['mean_steps']:.0f} steps) | |",
              f"| time | | {row['seconds']:.0f} s on {row['threads']} thread(s) | |" if math.isfinite(row["seconds"])
              else "| time | | read from a make-inrs folder | |"]
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    """One line per recipe: std ratios (ours / released) and GP rates, uniform per tensor and fp16."""
    lines = ["| recipe | N | weight std ratio L1 / L2 / L3 | bias std ratio L1 / L2 / L3 | GP 16 / 12 / 8 bit, per tensor "
             "| GP 16 bit fp16 | GP 12 bit per layer | median PSNR | time |", "|---|---|---|---|---|---|---|---|---|"]
    lines.append("| released set | 60,000 | 1 / 1 / 1 | 1 / 1 / 1 | " + " / ".join(f"{v:.2f}" for v in RELEASED_GP.values())
                 + " | | | | |")
    for row in rows:
        ratios = {kind: " / ".join(f"{ours / ref:.3f}" for ours, ref in zip(row[f"{kind}_std"], RELEASED_STD[kind]))
                  for kind in ("weight", "bias")}
        tensor = " / ".join(f"{row['gp']['tensor'][str(bits)]:.1f}" for bits in RELEASED_GP)
        seconds = f"{row['seconds']:.0f} s" if math.isfinite(row["seconds"]) else ""
        lines.append(f"| {row['recipe']} | {row['n']} | {ratios['weight']} | {ratios['bias']} | {tensor} "
                     f"| {row['gp']['fp16']['16']:.1f} | {row['gp']['layer']['12']:.1f} "
                     f"| {row['psnr_quantiles']['0.5']:.1f} dB | {seconds} |")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=["dws-released"], choices=sorted(recipes()))
    parser.add_argument("--n", type=int, default=500, help="INRs per recipe (500 reads a std to 1-2%%)")
    parser.add_argument("--source", choices=("full", "embedded"), default="full", help="MNIST files or the subset")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: other jobs share this CPU)")
    parser.add_argument("--out", type=Path, default=None, help="JSON lines file to append each recipe's row to")
    parser.add_argument("--from", dest="folder", type=Path, default=None,
                        help="measure the train INRs of this make-inrs folder instead of fitting")
    parser.add_argument("--summarize", type=Path, default=None, help="print the one-line-per-recipe table of a JSON "
                        "lines file written by --out, and exit")
    args = parser.parse_args(argv)
    if args.summarize is not None:
        rows = [json.loads(line) for line in args.summarize.read_text().splitlines() if line.strip()]
        print(summary(rows))
        return rows
    torch.set_num_threads(args.threads)
    rows = []
    if args.folder is not None:
        runs = [(str(args.folder), lambda: load(args.folder, args.n))]
    else:
        runs = [(name, lambda name=name: fit(name, args.n, args.source)) for name in args.recipes]
    for name, make in runs:
        row = measure(name, *make())
        if args.out is not None:
            with open(args.out, "a") as f:
                f.write(json.dumps(row) + "\n")
        print(table(row) + "\n", flush=True)
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
