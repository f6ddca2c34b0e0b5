"""`neuralgraph inr-stats DIR`: per-layer weight/bias statistics and PSNR quantiles of a dataset."""
from __future__ import annotations

import argparse

import torch

from neuralgraph.data.generate import INR_FOLDER
from neuralgraph.data.inr_dataset import InrDataset
from neuralgraph.data.shards import read_manifest

# Per-layer std of the DWS MNIST INRs (weights, biases), printed for comparison.
DWS_REFERENCE_STD = {"weight": (0.063, 0.018, 0.118), "bias": (0.021, 0.011, 0.100)}
QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``inr-stats``'s arguments: the dataset folder and ``--split``.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("root", help="dataset folder made by make-inrs")
    parser.add_argument("--split", default=None, help="one split (default: every split in the manifest)")


def run(args: argparse.Namespace) -> int:
    """Runs ``inr-stats``: per split, each layer's weight and bias mean and std (beside the DWS INRs'
    std), the PSNR quantiles and the fitting steps.

    Args:
        args: the parsed arguments of :func:`add_arguments`.

    Returns:
        The exit status, 0.
    """
    splits = [args.split] if args.split else sorted(read_manifest(args.root, INR_FOLDER)["splits"])
    for split in splits:
        data = InrDataset(args.root, split)
        print(f"== {split}: {len(data)} INRs, convention {data.convention.to_dict()}")
        print(f"{'param':<14}{'mean':>10}{'std':>10}{'DWS std':>10}")
        for kind, tensors in (("weight", data.weights), ("bias", data.biases)):
            for l, t in enumerate(tensors, start=1):
                reference = DWS_REFERENCE_STD[kind][l - 1] if l <= len(DWS_REFERENCE_STD[kind]) else float("nan")
                print(f"{f'layer{l}.{kind}':<14}{t.mean().item():>10.4f}{t.std().item():>10.4f}{reference:>10.3f}")
        q = torch.quantile(data.psnrs.double(), torch.tensor(QUANTILES, dtype=torch.float64))
        print("PSNR dB quantiles: " + "  ".join(f"q{int(p * 100)}={v:.2f}" for p, v in zip(QUANTILES, q.tolist())))
        steps = data.steps.double()
        print(f"Adam steps: mean {steps.mean().item():.0f}, median {steps.median().item():.0f}, "
              f"max {int(steps.max().item())}")
    return 0
