"""`neuralgraph make-inrs`: fit one SIREN per MNIST digit into resumable safetensors shards."""
from __future__ import annotations

import argparse
import dataclasses

import torch

from neuralgraph.commands import distributed, output_folder, positive_int
from neuralgraph.data.generate import GenerationSettings, make_inrs
from neuralgraph.data.shards import SPLITS, Worker
from neuralgraph.inr import DEFAULT_PRESET, INITS, PRESETS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``make-inrs``'s arguments: output, splits, MNIST source, seeds, SIREN preset and fitting
    options, and the worker options.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("--out", required=True, type=output_folder,
                        help="dataset folder (created; rerun the same command to resume)")
    parser.add_argument("--split", choices=SPLITS + ("all",), default="all")
    parser.add_argument("--limit", type=positive_int, default=None, help="keep the first N digits of each split")
    parser.add_argument("--shard-size", type=positive_int, default=1000, help="INRs per safetensors shard")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (bitwise determinism is guaranteed on cpu)")
    parser.add_argument("--source", choices=("full", "embedded"), default="full",
                        help="full MNIST files, or the subset embedded in the package (offline)")
    parser.add_argument("--mnist", default=None, help="folder of the MNIST IDX files (default: $NEURALGRAPH_MNIST, cache)")
    parser.add_argument("--seed", type=int, default=0, help="base seed of the INR initialisations")
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the train/val partition")
    parser.add_argument("--preset", choices=sorted(PRESETS), default=DEFAULT_PRESET,
                        help="SIREN convention and fitting recipe (docs/inr.md); dws-1000 is the pre-calibration one")
    parser.add_argument("--init", choices=INITS, default=None, help="SIREN initialisation (default: the preset's)")
    parser.add_argument("--steps", type=positive_int, default=None, help="Adam steps at most per INR (default: the preset's)")
    parser.add_argument("--pool-size", type=positive_int, default=PRESETS[DEFAULT_PRESET].fit.pool_size,
                        help="INRs optimised together (speed only)")
    parser.add_argument("--threads", type=positive_int, default=None,
                        help="CPU cores to use (default: torch's thread count); on cpu, more than one "
                             "fits in that many processes of one thread each")
    distributed.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Runs ``make-inrs``: fits the INRs into ``--out`` and prints each split's count and shards.

    Args:
        args: the parsed arguments of :func:`add_arguments`.

    Returns:
        The exit status, 0.
    """
    if args.threads:
        torch.set_num_threads(args.threads)
    settings = GenerationSettings.from_preset(
        args.preset, seed=args.seed, split_seed=args.split_seed, source=args.source, shard_size=args.shard_size)
    settings = dataclasses.replace(
        settings, convention=dataclasses.replace(settings.convention, init=args.init or settings.convention.init),
        fit=dataclasses.replace(settings.fit, steps=args.steps or settings.fit.steps, pool_size=args.pool_size))
    splits = SPLITS if args.split == "all" else (args.split,)
    worker = distributed.worker_of(args)
    manifest = make_inrs(args.out, splits, args.limit, settings, args.device, args.mnist,
                         workers=torch.get_num_threads(), distributed=worker and Worker(*worker), merge=args.merge)
    if worker:
        print(distributed.worker_done(args.out, worker))
        return 0
    for split in splits:
        print(f"{split}: {manifest['splits'][split]['count']} INRs in {len(manifest['splits'][split]['shards'])} shards")
    return 0
