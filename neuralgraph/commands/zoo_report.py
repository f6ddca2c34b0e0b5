"""`neuralgraph zoo-report DIR`: a zoo's test accuracy per checkpoint epoch, as a table and a histogram PNG."""
from __future__ import annotations

import argparse
from pathlib import Path

from neuralgraph.commands import check_output_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds ``zoo-report``'s arguments: the zoo folder, ``--png`` and ``--markdown``.

    Args:
        parser: the subcommand's parser.
    """
    parser.add_argument("root", help="a zoo folder: the Small CNN Zoo's format (make-cnn-zoo --preset small-cnn-zoo, "
                                     "or the released zoo's folder), or make-cnn-zoo's or make-transformer-zoo's")
    parser.add_argument("--png", default=None, help="write the histograms (one panel per checkpoint epoch) here")
    parser.add_argument("--markdown", default=None, help="write the table here (it is always printed)")
    parser.add_argument("--title", default=None, help="the histogram's title (default: the folder)")
    parser.add_argument("--force", action="store_true", help="overwrite --png/--markdown files that exist")


def run(args: argparse.Namespace) -> int:
    """Runs ``zoo-report``: prints the table, writes the PNG and markdown where asked.

    Args:
        args: the parsed arguments of :func:`add_arguments`.

    Returns:
        The exit status, 0.
    """
    from neuralgraph.data.zoo_report import accuracy_summary, histogram_png, read_metrics, summary_markdown

    outputs = [(option, getattr(args, option)) for option in ("png", "markdown") if getattr(args, option)]
    for option, path in outputs:
        check_output_file(Path(path), f"--{option}", args.force)
    epochs, accuracies = read_metrics(args.root)
    table = summary_markdown(accuracy_summary(epochs, accuracies))
    print(table, end="")
    if args.markdown:
        Path(args.markdown).write_text(table)
    if args.png:
        Path(args.png).write_bytes(histogram_png(epochs, accuracies, args.title or f"test accuracy: {args.root}"))
        print(f"wrote {args.png}")
    return 0
