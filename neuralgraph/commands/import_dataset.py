"""`neuralgraph import-dataset FORMAT SRC --out DIR`: a released dataset into a verified shard folder.

The formats and their flags come from :data:`neuralgraph.data.formats.FORMATS`: each format's
``OPTIONS`` become flags (an option several formats share, such as ``--splits``, is one flag), and
a flag of another format than the one named is refused. Importing the formats imports torch, which
only this command's parser does (``neuralgraph --help`` does not).
"""
from __future__ import annotations

import argparse

from neuralgraph.commands import distributed, output_folder, positive_int


def shared_options(formats: dict) -> dict:
    """The options of every format, one entry per option name, each with the formats that declare it.

    Args:
        formats: the formats by name (:data:`~neuralgraph.data.formats.FORMATS`).

    Returns:
        Option name -> ``(option, {format name: that format's option})``, the first declaration standing for all.

    Raises:
        ValueError: two formats declare one option name with different flags, types, counts or choices,
            or two option names with one flag.
    """
    found: dict = {}
    flags: dict = {}
    for name, fmt in formats.items():
        for option in fmt.OPTIONS:
            first, owners = found.setdefault(option.name, (option, {}))
            spec = (option.option_string, option.parser_arguments())
            if spec != (first.option_string, first.parser_arguments()):
                other = next(iter(owners))
                raise ValueError(f"option {option.name!r}: formats {other} and {name} declare it differently")
            if flags.setdefault(option.option_string, option.name) != option.name:
                raise ValueError(f"{option.option_string}: the flag of options {flags[option.option_string]!r} and "
                                 f"{option.name!r} (format {name})")
            owners[name] = option
    return found


def help_text(owners: dict) -> str:
    """The help of a flag that several formats may share: each format's own help and default.

    Args:
        owners: format name -> its declaration of the option.

    Returns:
        ``"<format>: <help> (default: <value>); ..."``, no default shown where it is None.
    """
    parts = []
    for name, option in owners.items():
        default = option.default
        shown = "" if default is None else \
            f" (default: {' '.join(map(str, default)) if isinstance(default, (list, tuple)) else default})"
        parts.append(f"{name}: {option.help}{shown}".replace("%", "%%"))
    return "; ".join(parts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``import-dataset``'s arguments: the format and source, the output, every format's options
    (built from their ``OPTIONS``) and the worker options (:mod:`neuralgraph.commands.distributed`).

    Args:
        parser: the subcommand's parser.
    """
    from neuralgraph.data.formats import FORMATS
    from neuralgraph.data.importing import IMAGE_SOURCES

    parser.add_argument("format", choices=list(FORMATS),
                        help="layout of SRC: " + ", ".join(f"{name} ({fmt.KIND})" for name, fmt in FORMATS.items())
                        + " (docs/datasets.md describes each)")
    parser.add_argument("src", help="the source folder, as its authors released it")
    parser.add_argument("--out", required=True, type=output_folder,
                        help="dataset folder to write (rerun the same command to resume)")
    parser.add_argument("--limit", type=positive_int, default=None, help="import only the first N entries of each split")
    parser.add_argument("--images", choices=IMAGE_SOURCES, default=None,
                        help="INR formats: attach MNIST digits from the full MNIST (default where it is on disk), "
                             "the embedded subset, or none (classification only)")
    parser.add_argument("--shard-size", type=positive_int, default=1000, help="entries per safetensors shard")
    for option, owners in shared_options(FORMATS).values():
        parser.add_argument(option.option_string, default=argparse.SUPPRESS, help=help_text(owners),
                            **option.parser_arguments())
    distributed.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Runs ``import-dataset`` (:func:`~neuralgraph.data.importing.import_dataset`) with the options given
    on the command line, and prints each split's count, or what a worker prints when its share is written.

    Args:
        args: the parsed arguments of :func:`add_arguments`.

    Returns:
        The exit status, 0.

    Raises:
        ValueError: a flag of another format than ``args.format``.
    """
    from neuralgraph.data.formats import FORMATS
    from neuralgraph.data.importing import import_dataset
    from neuralgraph.data.shards import Worker

    options = {}
    for name, (option, owners) in shared_options(FORMATS).items():
        if name not in vars(args):
            continue
        if args.format not in owners:
            raise ValueError(f"{option.option_string}: not an option of {args.format} (only of {', '.join(owners)})")
        options[name] = getattr(args, name)
    worker = distributed.worker_of(args)
    manifest = import_dataset(args.format, args.src, args.out, limit=args.limit, images=args.images,
                              shard_size=args.shard_size, distributed=worker and Worker(*worker), merge=args.merge,
                              **options)
    if worker:
        print(distributed.worker_done(args.out, worker))
        return 0
    counts = ", ".join(f"{split} {entry['count']}" for split, entry in manifest["splits"].items())
    print(f"{args.out}: {counts} ({args.format} from {args.src})")
    return 0
