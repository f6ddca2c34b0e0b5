"""The ``neuralgraph`` command: one entry point, one module per subcommand.

Each subcommand lives in ``neuralgraph/commands/<name>.py`` and exposes
``add_arguments(parser)`` and ``run(args)``; this file only dispatches. The Lightning
verbs (fit/validate/test/predict) are forwarded to the LightningCLI subclass.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module under neuralgraph.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("demo", "the main job: INRs from the embedded MNIST subset, GMN editor k=1 vs k=4, PNG grids"),
    "edit": ("edit", "apply a trained INR editor to one INR; write a PNG and the (merged) edited INR"),
    "make-inrs": ("make_inrs", "fit one SIREN per MNIST digit into a resumable sharded dataset"),
    "inr-stats": ("inr_stats", "per-layer weight/bias statistics and PSNR quantiles of an INR dataset"),
    "audit-gp": ("audit_gp", "percentage of networks in general position per bit width (bias-only and combined)"),
    "expressivity-report": ("expressivity_report", "dimension of equivariant linear maps vs what each metanet spans"),
}
LIGHTNING_VERBS = ("fit", "validate", "test", "predict")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in LIGHTNING_VERBS:
        from neuralgraph.training.cli import run_lightning_cli

        run_lightning_cli(argv)
        return 0
    parser = argparse.ArgumentParser(
        prog="neuralgraph", description=__doc__.splitlines()[0],
        epilog="Training: neuralgraph {fit,validate,test,predict} --config CONFIG.yaml "
               "(LightningCLI; see `neuralgraph fit --help`).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        importlib.import_module(f"neuralgraph.commands.{module}").add_arguments(p)
    args = parser.parse_args(argv)
    return importlib.import_module(f"neuralgraph.commands.{args._module}").run(args) or 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
