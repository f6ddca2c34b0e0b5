"""The ``neuralgraph`` command: one entry point, one module per subcommand.

Each subcommand lives in ``neuralgraph/commands/<name>.py`` and exposes
``add_arguments(parser)`` and ``run(args)``; this file only dispatches, importing only the
module of the subcommand that runs (``neuralgraph --help`` and ``--version`` import no torch).
The Lightning verbs (fit/validate/test/predict) are forwarded to the LightningCLI subclass, with
a ``--config NAME`` of a shipped config (``neuralgraph configs``) resolved to its file first.

An expected error (bad argument, file or checkpoint, missing data) is one line on stderr,
``neuralgraph COMMAND: error: ...``, with exit code 2; ``--debug`` (before the command) or
``NEURALGRAPH_DEBUG=1`` shows the traceback instead.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from neuralgraph.commands import one_line

DISTRIBUTION = "neuralgraph-pyg"  # the name pip knows the package by; it is imported as `neuralgraph`
DESCRIPTION = """\
Learn on the weights of neural networks. neuralgraph turns trained networks (MLPs, SIRENs, CNNs,
transformers) into graphs and trains metanetworks on them: models that read a network's weights
to predict its accuracy or its class, or that edit it (e.g. dilate the digit an INR draws).
Start with `neuralgraph demo`; train with `neuralgraph fit --config NAME`, NAME one of the
configs `neuralgraph configs` lists."""
# the Lightning verbs, run by LightningCLI (`neuralgraph fit --help` shows its options)
LIGHTNING_HELP = {
    "fit": "train a model of a config (LightningCLI), then test it at its best-validation checkpoint",
    "validate": "evaluate a checkpoint on the validation split",
    "test": "evaluate a checkpoint on the test split",
    "predict": "write a checkpoint's outputs on the test split to predictions.safetensors",
}
# subcommand -> (module under neuralgraph.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "configs": ("configs", "list the configs shipped with the package (run one with `fit --config NAME`)"),
    "demo": ("demo", "end to end in minutes on a CPU: INRs of embedded MNIST digits, GMN editor k=1 vs k=4, PNGs"),
    "edit": ("edit", "apply a trained INR editor to one INR; write a PNG and the (merged) edited INR"),
    "make-inrs": ("make_inrs", "fit one SIREN per MNIST digit into a resumable sharded dataset"),
    "make-cnn-zoo": ("make_cnn_zoo", "train a zoo of small MNIST CNNs (accuracy prediction) into resumable shards"),
    "make-transformer-zoo": ("make_transformer_zoo", "train a zoo of small MNIST ViTs (accuracy prediction) in shards"),
    "import-dataset": ("import_dataset", "import a released INR set or model zoo (DWSNets, NFN, Small CNN Zoo)"),
    "inr-stats": ("inr_stats", "per-layer weight/bias statistics and PSNR quantiles of an INR dataset"),
    "zoo-report": ("zoo_report", "test accuracy of a zoo's networks per checkpoint epoch: quartiles and a histogram"),
    "audit-gp": ("audit_gp", "percentage of networks in general position per bit width (bias-only and combined)"),
    "expressivity-report": ("expressivity_report", "dimension of equivariant linear maps vs what each metanet spans"),
}
LIGHTNING_VERBS = tuple(LIGHTNING_HELP)
# torch >= 2.14 deprecates torch.jit.script with a FutureWarning that PyG 2.8 triggers at import
# (torch_geometric/nn/pool/select/base.py); the user of this command cannot act on it.
warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated", category=FutureWarning)
DEBUG_ENV = "NEURALGRAPH_DEBUG"


def debug_requested() -> bool:
    """Whether ``NEURALGRAPH_DEBUG`` asks for tracebacks instead of one-line errors.

    Returns:
        True when the variable is set to anything but ``""`` or ``"0"``.
    """
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def version() -> str:
    """The package's version, for ``--version``.

    Returns:
        The installed distribution's version (``neuralgraph-pyg``), or ``neuralgraph.__version__``
        when the package runs from a source tree without being installed.
    """
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version(DISTRIBUTION)
    except PackageNotFoundError:
        from neuralgraph import __version__

        return __version__


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (``PROG: error: argument --x: ...``), exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Help that ends each option with its default, except where there is none to show (required
    options, flags, ``None``) or the help already gives it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if (action.default in (None, argparse.SUPPRESS) or action.required or action.nargs == 0
                or "%(default)" in help_text or "(default" in help_text):
            return help_text
        default = action.default
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{help_text} (default: {shown.replace('%', '%%')})"


def build_parser(command: str | None) -> OneLineParser:
    """The parser of every subcommand; only ``command``'s module is imported to add its arguments.

    Args:
        command: the subcommand about to run (None: none, as for ``neuralgraph --help``).

    Returns:
        The ``neuralgraph`` parser.
    """
    parser = OneLineParser(
        prog="neuralgraph", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="`neuralgraph COMMAND --help` describes a command (for fit/validate/test/predict, LightningCLI's "
               f"options). Errors are one line; --debug (before COMMAND) or {DEBUG_ENV}=1 shows the traceback.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()} ({DISTRIBUTION})")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (before COMMAND)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    for name, help_text in LIGHTNING_HELP.items():  # listed here, run by main() through LightningCLI
        sub.add_parser(name, help=help_text, description=help_text, add_help=False)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=DefaultsHelpFormatter)
        p.set_defaults(_module=module)
        if name == command:
            importlib.import_module(f"neuralgraph.commands.{module}").add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs ``neuralgraph``: a Lightning verb through LightningCLI, any other command through its module.

    Args:
        argv: the arguments after ``neuralgraph`` (default: ``sys.argv[1:]``).

    Returns:
        The exit status, 0 or 2 after a one-line error (with ``--debug`` the exception propagates).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debug_requested()
    if argv[:1] == ["--debug"]:
        debug, argv = True, argv[1:]
    command = argv[0] if argv else None
    try:
        if command in LIGHTNING_VERBS:
            from neuralgraph.commands.configs import resolve_config_arguments

            argv = resolve_config_arguments(argv)  # before torch is imported: a wrong name fails at once
            from neuralgraph.training.cli import run_lightning_cli

            run_lightning_cli(argv)
            return 0
        args = build_parser(command).parse_args(argv)
        return importlib.import_module(f"neuralgraph.commands.{args._module}").run(args) or 0
    except (ValueError, OSError) as err:
        if debug:
            raise
        print(f"neuralgraph {command}: error: {one_line(err)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
