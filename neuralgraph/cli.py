"""The ``neuralgraph`` command: one entry point, one module per subcommand.

Each subcommand lives in ``neuralgraph/commands/<name>.py`` and exposes
``add_arguments(parser)`` and ``run(args)``; this file only dispatches, importing only the
module of the subcommand that runs (``neuralgraph --help`` imports no torch). The Lightning
verbs (fit/validate/test/predict) are forwarded to the LightningCLI subclass.

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

# subcommand -> (module under neuralgraph.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "the main job: INRs from the embedded MNIST subset, GMN editor k=1 vs k=4, PNG grids"),
    "edit": ("edit", "apply a trained INR editor to one INR; write a PNG and the (merged) edited INR"),
    "make-inrs": ("make_inrs", "fit one SIREN per MNIST digit into a resumable sharded dataset"),
    "make-cnn-zoo": ("make_cnn_zoo", "train a zoo of small MNIST CNNs (accuracy prediction) into resumable shards"),
    "make-transformer-zoo": ("make_transformer_zoo", "train a zoo of small MNIST ViTs (accuracy prediction) in shards"),
    "import-dataset": ("import_dataset", "import a released INR set or model zoo (DWSNets, NFN, Small CNN Zoo)"),
    "inr-stats": ("inr_stats", "per-layer weight/bias statistics and PSNR quantiles of an INR dataset"),
    "audit-gp": ("audit_gp", "percentage of networks in general position per bit width (bias-only and combined)"),
    "expressivity-report": ("expressivity_report", "dimension of equivariant linear maps vs what each metanet spans"),
}
LIGHTNING_VERBS = ("fit", "validate", "test", "predict")
# torch >= 2.14 deprecates torch.jit.script with a FutureWarning that PyG 2.8 triggers at import
# (torch_geometric/nn/pool/select/base.py); the user of this command cannot act on it.
warnings.filterwarnings("ignore", message="`torch.jit.script` is deprecated", category=FutureWarning)
DEBUG_ENV = "NEURALGRAPH_DEBUG"


def debug_requested() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (``PROG: error: argument --x: ...``), exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def build_parser(command: str | None) -> OneLineParser:
    """The parser of every subcommand; only ``command``'s module is imported to add its arguments."""
    parser = OneLineParser(
        prog="neuralgraph", description=__doc__.splitlines()[0],
        epilog="Training: neuralgraph {fit,validate,test,predict} --config CONFIG.yaml "
               "(LightningCLI; see `neuralgraph fit --help`). "
               f"Errors are one line; --debug or {DEBUG_ENV}=1 shows the traceback.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (before COMMAND)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == command:
            importlib.import_module(f"neuralgraph.commands.{module}").add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debug_requested()
    if argv[:1] == ["--debug"]:
        debug, argv = True, argv[1:]
    command = argv[0] if argv else None
    try:
        if command in LIGHTNING_VERBS:
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
