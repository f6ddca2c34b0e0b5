"""`neuralgraph make-transformer-zoo`: train a zoo of small MNIST ViTs into resumable safetensors shards."""
from __future__ import annotations

import argparse

import torch

from neuralgraph.commands import distributed
from neuralgraph.commands.make_cnn_zoo import add_zoo_arguments
from neuralgraph.data.shards import Worker
from neuralgraph.data.transformer_zoo import RECIPES, TransformerZooSettings, make_transformer_zoo

DEFAULTS = TransformerZooSettings()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``make-transformer-zoo``'s arguments, those of
    :func:`~neuralgraph.commands.make_cnn_zoo.add_zoo_arguments`.

    Args:
        parser: the subcommand's parser.
    """
    add_zoo_arguments(parser, DEFAULTS)
    parser.add_argument("--recipe", choices=list(RECIPES), default=DEFAULTS.recipe,
                        help="the networks and their training: 'mixed' (architectures and continuous ranges drawn per "
                             "network) or 'small-transformer-zoo' (Transformer-NFN's MNIST grid; docs/transformer_zoo.md)")


def run(args: argparse.Namespace) -> int:
    """Runs ``make-transformer-zoo``: trains the zoo into ``--out`` and says what it wrote.

    Args:
        args: the parsed arguments of :func:`add_arguments`.

    Returns:
        The exit status, 0.
    """
    if args.threads:
        torch.set_num_threads(args.threads)
    settings = TransformerZooSettings(networks=args.networks, checkpoint_epochs=tuple(args.epochs),
                                      train_size=args.train_size, test_size=args.test_size,
                                      batch_size=args.batch_size, shard_size=args.shard_size, seed=args.seed,
                                      source=args.source, recipe=args.recipe)
    worker = distributed.worker_of(args)
    manifest = make_transformer_zoo(args.out, settings, args.mnist, distributed=worker and Worker(*worker),
                                    merge=args.merge)
    if worker:
        print(distributed.worker_done(args.out, worker))
        return 0
    print(f"{args.out}: {sum(s['networks'] for s in manifest['shards'])} networks x {len(settings.checkpoint_epochs)} "
          f"checkpoints in {len(manifest['shards'])} shards")
    return 0
