"""`neuralgraph make-cnn-zoo`: train a zoo of small MNIST CNNs into resumable safetensors shards."""
from __future__ import annotations

import argparse

import torch

from neuralgraph.commands import distributed, nonnegative_int, output_folder, positive_int
from neuralgraph.data import small_cnn_zoo_preset as preset
from neuralgraph.data.cnn_zoo import ZooSettings, make_cnn_zoo
from neuralgraph.data.shards import Worker

DEFAULTS = ZooSettings()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``make-cnn-zoo``'s arguments: those of :func:`add_zoo_arguments` (epoch 0, the
    initialisation, may be recorded), ``--channels`` and ``--preset``.

    Args:
        parser: the subcommand's parser.
    """
    add_zoo_arguments(parser, DEFAULTS, nonnegative_int)
    parser.add_argument("--channels", type=positive_int, default=DEFAULTS.channels, help="channels of each convolution")
    parser.add_argument("--preset", choices=(preset.PRESET,), default=None,
                        help="the Small CNN Zoo's architecture, hyperparameters and file format (docs/cnn_zoo.md); "
                             "--epochs, --train-size, --test-size and --batch-size default to its protocol "
                             "(0 1 2 3 20 40 60 80 86, 60000, 10000, 512); it trains on one machine (--worker-index, "
                             "--num-workers and --merge are refused)")
    preset.mark_defaults(parser)


def add_zoo_arguments(parser: argparse.ArgumentParser, defaults, epochs_type=positive_int) -> None:
    """The options every zoo generator takes, the worker options among them.

    Args:
        parser: the generator's parser.
        defaults: its settings dataclass' defaults, the options' defaults.
        epochs_type: the argparse type of each ``--epochs`` value.
    """
    parser.add_argument("--out", required=True, type=output_folder,
                        help="zoo folder (created; rerun the same command to resume)")
    parser.add_argument("--networks", type=positive_int, default=defaults.networks, help="networks to train")
    parser.add_argument("--epochs", type=epochs_type, nargs="+", default=list(defaults.checkpoint_epochs),
                        help="epochs at which each network is recorded (increasing; training runs to the last)")
    parser.add_argument("--train-size", type=positive_int, default=defaults.train_size,
                        help="first N MNIST training images (each network trains on its own fraction of them)")
    parser.add_argument("--test-size", type=positive_int, default=defaults.test_size, help="first N MNIST test images")
    parser.add_argument("--batch-size", type=positive_int, default=defaults.batch_size, help="images per step")
    parser.add_argument("--shard-size", type=positive_int, default=defaults.shard_size,
                        help="networks trained together and stored per safetensors shard")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="base seed of hyperparameters and initialisations")
    parser.add_argument("--source", choices=("full", "embedded"), default=defaults.source,
                        help="full MNIST files, or the subset embedded in the package (offline: 2,000 train / 500 test)")
    parser.add_argument("--mnist", default=None, help="folder of the MNIST IDX files (default: $NEURALGRAPH_MNIST, cache)")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's)")
    distributed.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Runs ``make-cnn-zoo``: trains the zoo (or the ``--preset`` one) into ``--out`` and says what it wrote.

    Args:
        args: the parsed arguments of :func:`add_arguments`.

    Returns:
        The exit status, 0.
    """
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.preset:
        given = [flag for flag, value in (("--worker-index", args.worker_index), ("--num-workers", args.num_workers),
                                          ("--merge", args.merge or None)) if value is not None]
        if given or distributed.worker_of(args):
            raise ValueError(f"--preset {preset.PRESET} trains on one machine (its folder is written part by part, "
                             f"resumable): drop {', '.join(given) or 'the launcher environment (torchrun, SLURM array)'}")
        manifest = preset.make_small_cnn_zoo(args.out, preset.preset_settings(args), args.mnist)
        print(f"{args.out}: {sum(p['rows'] for p in manifest['parts'])} rows (networks x checkpoints) in "
              f"{', '.join(preset.FILES)}: neuralgraph import-dataset {preset.PRESET} {args.out} --steps "
              f"{manifest['checkpoint_epochs'][-1]} --out DIR")
        return 0
    settings = ZooSettings(networks=args.networks, channels=args.channels, checkpoint_epochs=tuple(args.epochs),
                           train_size=args.train_size, test_size=args.test_size, batch_size=args.batch_size,
                           shard_size=args.shard_size, seed=args.seed, source=args.source)
    worker = distributed.worker_of(args)
    manifest = make_cnn_zoo(args.out, settings, args.mnist, distributed=worker and Worker(*worker), merge=args.merge)
    if worker:
        print(distributed.worker_done(args.out, worker))
        return 0
    print(f"{args.out}: {sum(s['networks'] for s in manifest['shards'])} networks x {len(settings.checkpoint_epochs)} "
          f"checkpoints in {len(manifest['shards'])} shards")
    return 0
