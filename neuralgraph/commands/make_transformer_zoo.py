"""`neuralgraph make-transformer-zoo`: train a zoo of small MNIST ViTs into resumable safetensors shards."""
from __future__ import annotations

import argparse

import torch

from neuralgraph.commands import distributed, positive_int
from neuralgraph.data.shards import Worker
from neuralgraph.data.transformer_zoo import TransformerZooSettings, make_transformer_zoo

DEFAULTS = TransformerZooSettings()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="zoo folder (created; rerun the same command to resume)")
    parser.add_argument("--networks", type=positive_int, default=DEFAULTS.networks, help="networks to train")
    parser.add_argument("--epochs", type=positive_int, nargs="+", default=list(DEFAULTS.checkpoint_epochs),
                        help="epochs at which each network is recorded (increasing; training runs to the last)")
    parser.add_argument("--train-size", type=positive_int, default=DEFAULTS.train_size,
                        help="first N MNIST training images (each network trains on its own fraction of them)")
    parser.add_argument("--test-size", type=positive_int, default=DEFAULTS.test_size, help="first N MNIST test images")
    parser.add_argument("--batch-size", type=positive_int, default=DEFAULTS.batch_size, help="images per step")
    parser.add_argument("--shard-size", type=positive_int, default=DEFAULTS.shard_size,
                        help="networks trained together and stored per safetensors shard")
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed, help="base seed of hyperparameters and initialisations")
    parser.add_argument("--source", choices=("full", "embedded"), default=DEFAULTS.source,
                        help="full MNIST files, or the subset embedded in the package (offline: 2,000 train / 500 test)")
    parser.add_argument("--mnist", default=None, help="folder of the MNIST IDX files (default: $NEURALGRAPH_MNIST, cache)")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's)")
    distributed.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    settings = TransformerZooSettings(networks=args.networks, checkpoint_epochs=tuple(args.epochs),
                                      train_size=args.train_size, test_size=args.test_size,
                                      batch_size=args.batch_size, shard_size=args.shard_size, seed=args.seed,
                                      source=args.source)
    worker = distributed.worker_of(args)
    manifest = make_transformer_zoo(args.out, settings, args.mnist, distributed=worker and Worker(*worker),
                                    merge=args.merge)
    if worker:
        print(distributed.worker_done(args.out, worker))
        return 0
    print(f"{args.out}: {sum(s['networks'] for s in manifest['shards'])} networks x {len(settings.checkpoint_epochs)} "
          f"checkpoints in {len(manifest['shards'])} shards")
    return 0
