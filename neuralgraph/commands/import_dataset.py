"""`neuralgraph import-dataset FORMAT SRC --out DIR`: a released dataset into a verified shard folder."""
from __future__ import annotations

import argparse

from neuralgraph.commands import distributed, output_folder, positive_int

# neuralgraph.data.formats.FORMATS, without importing torch
FORMATS = ("dws-inrs", "nfn-sirens", "small-cnn-zoo", "cnn-wild-park")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``import-dataset``'s arguments: the format and source, the output, each format's options
    and the worker options (:mod:`neuralgraph.commands.distributed`).

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("format", choices=FORMATS, help="layout of SRC (docs/datasets.md describes each)")
    parser.add_argument("src", help="the source folder, as its authors released it")
    parser.add_argument("--out", required=True, type=output_folder,
                        help="dataset folder to write (rerun the same command to resume)")
    parser.add_argument("--limit", type=positive_int, default=None, help="import only the first N entries of each split")
    parser.add_argument("--splits", default=None,
                        help="split file: DWSNets' JSON (dws-inrs), NFN's *_split.csv order file (small-cnn-zoo) or "
                             "neural-graphs' JSON (cnn-wild-park; default SRC/cnn_park_splits.json)")
    parser.add_argument("--images", choices=("full", "embedded", "none"), default=None,
                        help="INR formats: attach MNIST digits from the full MNIST (default where it is on disk), "
                             "the embedded subset, or none (classification only)")
    parser.add_argument("--shard-size", type=positive_int, default=1000, help="entries per safetensors shard")
    parser.add_argument("--prefix", default="randinit_smaller", help="nfn-sirens: folder prefix of the base set")
    parser.add_argument("--augmented", type=int, default=0,
                        help="nfn-sirens: also import the training INRs of {prefix}_aug0 .. aug{N-1}")
    parser.add_argument("--split-points", type=positive_int, nargs=2, default=(45000, 50000), metavar=("VAL", "TEST"),
                        help="nfn-sirens: first index of val and of test")
    parser.add_argument("--steps", type=int, nargs="+", default=[86],
                        help="small-cnn-zoo: checkpoints (metrics.csv.gz 'step') to keep")
    parser.add_argument("--activations", nargs="+", default=None,
                        help="small-cnn-zoo: keep networks of these config.activation values (e.g. relu)")
    parser.add_argument("--order-header", choices=("data", "header"), default="data",
                        help="small-cnn-zoo: the order file's first line '0' read as a row index, as NFN reads it "
                             "(data), or skipped (header)")
    distributed.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Runs ``import-dataset`` (:func:`~neuralgraph.data.importing.import_dataset`) and prints each split's count,
    or what a worker prints when its share is written.

    Args:
        args: the parsed arguments of :func:`add_arguments`.

    Returns:
        The exit status, 0.
    """
    from neuralgraph.data.importing import import_dataset
    from neuralgraph.data.shards import Worker

    options = {"prefix": args.prefix, "augmented": args.augmented, "split_points": tuple(args.split_points)} \
        if args.format == "nfn-sirens" else {}
    if args.format == "small-cnn-zoo":
        options = {"steps": tuple(args.steps), "activations": args.activations, "order_header": args.order_header}
    worker = distributed.worker_of(args)
    manifest = import_dataset(args.format, args.src, args.out, limit=args.limit, splits_file=args.splits,
                              images=args.images, shard_size=args.shard_size,
                              distributed=worker and Worker(*worker), merge=args.merge, **options)
    if worker:
        print(distributed.worker_done(args.out, worker))
        return 0
    counts = ", ".join(f"{split} {entry['count']}" for split, entry in manifest["splits"].items())
    print(f"{args.out}: {counts} ({args.format} from {args.src})")
    return 0
