"""``neuralgraph configs [FILTER]``: the LightningCLI configs shipped with the package.

Every YAML file under ``neuralgraph/configs/`` is installed with the package; its name is its
path there without ``.yaml`` (``benchmarks/dilation/gmn_k4``). The configs lie in two folders:
``examples/<task>/`` holds the hand-written examples of each task (the task class in snake case:
``examples/inr_classification/gmn`` runs ``InrClassification``), ``benchmarks/<benchmark>/`` the
configs that each benchmark program writes and runs (``python benchmarks/<benchmark>.py
--write-configs``, ``scripts/generate_dilation.py``). ``neuralgraph fit --config NAME`` (and
``validate``/``test``/``predict``, ``demo --config``) accept such a name wherever no file of that
name exists; :func:`resolve_config` does the lookup. Imports no torch.
"""
from __future__ import annotations

import argparse
import difflib
from importlib.resources import files
from pathlib import Path

SUFFIX = ".yaml"
#: The folder of the hand-written examples, with one folder per task (``examples/<task>/<name>.yaml``).
EXAMPLES = "examples"
#: The folder of the generated configs, with one folder per benchmark (``benchmarks/<benchmark>/<system>.yaml``).
BENCHMARKS = "benchmarks"


def configs_folder() -> Path:
    """The folder of the shipped configs.

    Returns:
        ``neuralgraph/configs`` of the installed package (of the source tree, in a clone).
    """
    return Path(str(files("neuralgraph") / "configs"))


def shipped_configs() -> dict[str, Path]:
    """Every shipped config by name.

    Returns:
        Name (the path under :func:`configs_folder`, with ``/``, without ``.yaml``) -> file, the
        examples first, then the benchmarks' configs, each sorted by name.
    """
    folder = configs_folder()
    found = {path.relative_to(folder).with_suffix("").as_posix(): path for path in folder.rglob(f"*{SUFFIX}")}
    return dict(sorted(found.items(), key=lambda item: (not item[0].startswith(f"{EXAMPLES}/"), item[0])))


def header(path: Path) -> str:
    """What a config runs, as its first comment line says.

    Args:
        path: a YAML config file.

    Returns:
        Its first non-blank line without the ``#`` when that line is a comment, else ``""``.
    """
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                return line.strip().lstrip("#").strip() if line.lstrip().startswith("#") else ""
    return ""


def close_names(name: str, names: list[str], count: int = 5) -> list[str]:
    """The shipped names that ``name`` may have meant.

    Args:
        name: a config name that matched none.
        names: the shipped names.
        count: how many to return at most.

    Returns:
        Up to ``count`` of ``names``, closest first, that are spelled alike as a whole or in the file
        name alone (``gmn_k3`` finds ``benchmarks/dilation/gmn_k4``), at a similarity of 0.6 or more.
    """
    stem = name.rsplit("/", 1)[-1]

    def likeness(candidate: str) -> tuple[float, float]:
        whole = difflib.SequenceMatcher(None, name, candidate).ratio()
        return max(whole, difflib.SequenceMatcher(None, stem, candidate.rsplit("/", 1)[-1]).ratio()), whole

    ranked = sorted(names, key=likeness, reverse=True)
    return [candidate for candidate in ranked if likeness(candidate)[0] >= 0.6][:count]


def resolve_config(text: str, option: str = "--config") -> Path:
    """The config file that ``text`` names.

    Args:
        text: a path, or the name of a shipped config (``benchmarks/dilation/gmn_k4``, ``.yaml`` optional).
        option: the command-line option ``text`` came from, for the error.

    Returns:
        ``text`` itself when it is a file, else the shipped config of that name.

    Raises:
        ValueError: ``text`` is a folder, or neither a file nor a shipped name; one line naming
            ``option`` and the closest shipped names.
    """
    path = Path(text)
    if path.is_file():
        return path
    if path.is_dir():
        raise ValueError(f"{option} {text}: a folder, not a config file")
    shipped = shipped_configs()
    name = text[: -len(SUFFIX)] if text.endswith(SUFFIX) else text
    if name in shipped:
        return shipped[name]
    suggestions = close_names(name, list(shipped))
    hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
    raise ValueError(f"{option} {text}: no such file, nor a shipped config of that name "
                     f"(`neuralgraph configs` lists them){hint}")


def resolve_config_arguments(argv: list[str]) -> list[str]:
    """Resolves the configs of a Lightning verb's command line before LightningCLI reads it.

    Args:
        argv: the arguments of ``neuralgraph fit`` (``validate``, ``test``, ``predict``), verb first.

    Returns:
        A copy of ``argv`` with every ``--config``/``-c``/``--config=`` value resolved by
        :func:`resolve_config`.
    """
    out = list(argv)
    for i, arg in enumerate(out):
        if arg in ("--config", "-c") and i + 1 < len(out):
            out[i + 1] = str(resolve_config(out[i + 1], arg))
        elif arg.startswith("--config="):
            out[i] = "--config=" + str(resolve_config(arg.split("=", 1)[1]))
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the command's arguments.

    Args:
        parser: the ``neuralgraph configs`` parser.
    """
    parser.add_argument("filter", nargs="?", default=None,
                        help="list only the configs whose name contains this text (e.g. examples, dilation, gmn_k4)")


def run(args: argparse.Namespace) -> int:
    """Prints the shipped configs (those whose name contains ``args.filter``): name, then header.

    Args:
        args: the parsed command line.

    Returns:
        The exit status, 0.
    """
    shipped = shipped_configs()
    if args.filter:
        shipped = {name: path for name, path in shipped.items() if args.filter.lower() in name.lower()}
        if not shipped:
            raise ValueError(f"no shipped config's name contains {args.filter!r} (`neuralgraph configs` lists all)")
    width = max((len(name) for name in shipped), default=0)
    for name, path in shipped.items():
        print(f"{name:<{width}}  {header(path)}".rstrip())
    print(f"\n{len(shipped)} configs in {configs_folder()}: {EXAMPLES}/<task>/ hand-written, {BENCHMARKS}/<benchmark>/ "
          "written by the benchmark programs; run one with `neuralgraph fit --config NAME`")
    return 0
