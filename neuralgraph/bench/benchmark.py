"""A benchmark as a description, and the one :func:`main` that runs every such description.

A :class:`Benchmark` says what a benchmark of ``neuralgraph fit`` runs is: its protocols (which
(system, [k,] seed) runs, on what data, for how long), its systems, the result fields each run
records from the fit's metrics, and the columns of its markdown table. :func:`main` gives every
benchmark the same command line (``--protocol``, ``--archs``, ``[--k]``, ``--seeds``, its data
folder, ``--out``, ``--results``), fits the runs the results JSON does not hold yet, one child
process each (:mod:`neuralgraph.bench.runner`), and writes
``<results>/<name>_<protocol>_<machine>.{json,md}`` after every run.

docs/benchmarks.md ("Adding a benchmark") has a whole benchmark in a screenful.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from neuralgraph.bench.machine import cpu_description, machine_name
from neuralgraph.bench.runner import (
    benchmark_configs,
    check_same_data,
    config_file,
    config_name,
    count_flops,
    fit_arguments,
    load_runs,
    merge_recorded,
    recorded,
    results_lock,
    run_missing,
    select_runs,
    write_atomic,
)
from neuralgraph.bench.tables import Cell, Column, Group, header, row


@dataclass(frozen=True)
class Data:
    """Where a benchmark's runs read their data: the command-line option naming the folder, its default,
    what makes the folder before the runs, and what each run is given of it.

    Attributes:
        option: the command-line option naming the folder.
        default: a folder under the checkout, ``{protocol}`` replaced by the protocol's name (or a
            function of that name).
        help: the option's help.
        prepare: ``prepare(protocol, folder, systems)`` makes or verifies the data of the systems
            about to run and returns what the table and the runs need of it (None: the folder).
        root: ``root(prepared, system)``, a system's ``--data.root`` (None: the folder).
        fit: ``fit(settings)``, the ``--data.*`` overrides of a run, from its settings.
        build: pass ``--data.build true`` (the MNIST-INR data module fits the INRs the folder lacks,
            on first use).
        fingerprint: ``fingerprint(prepared)``, a name for the data's bytes (e.g.
            :func:`~neuralgraph.data.shards.folder_sha256`), recorded with every run as ``data_sha256``
            and its run folders kept apart by it: a table never mixes runs on different data, such
            as a zoo rebuilt on another CPU model (None: not recorded).
    """

    option: str = "--data-root"
    default: Union[str, Callable[[str], str]] = "data/inrs-{protocol}"
    help: str = "INR folder (default: data/inrs-<protocol>)"
    prepare: Optional[Callable[[Mapping[str, Any], Path, set], Any]] = None
    root: Optional[Callable[[Any, str], Path]] = None
    fit: Callable[[dict], dict] = lambda settings: settings["data"]
    build: bool = False
    fingerprint: Optional[Callable[[Any], str]] = None

    def folder(self, checkout: Path, protocol: str) -> Path:
        default = self.default(protocol) if callable(self.default) else self.default.format(protocol=protocol)
        return checkout / default


#: MNIST INRs fitted on first use (the protocol's ``data`` entry, with limits, preset and source).
INR_DATA = Data(build=True)


@dataclass(frozen=True)
class Report:
    """What a benchmark's table is written from: the recorded runs and the protocol's systems, in order.

    Attributes:
        benchmark: the benchmark.
        protocol_name: the protocol run.
        machine: the machine's name (:func:`~neuralgraph.bench.machine.machine_name`).
        runs: the recorded runs.
        systems: the protocol's systems, in the order of the table.
        data: what ``Data.prepare`` returned, else the data folder.
    """

    benchmark: "Benchmark"
    protocol_name: str
    machine: str
    runs: list[dict]
    systems: list[str]
    data: Any  # what ``Data.prepare`` returned, else the data folder

    @property
    def protocol(self) -> Mapping[str, Any]:
        return self.benchmark.protocols[self.protocol_name]


@dataclass(frozen=True)
class Benchmark:
    """A benchmark of ``neuralgraph fit`` runs, as :func:`main` runs it.

    Attributes:
        name: the results files' stem, ``<name>_<protocol>_<machine>``.
        title: the table's heading.
        doc: the script's docstring (its first line is ``--help``'s).
        script: the script's path (``__file__``): the checkout is its folder's parent (configs,
            data, runs, results).
        protocols: name -> settings; the settings' ``plan`` holds tuples ``(systems, seeds)``
            (``(systems, ks, seeds)`` with ``per_k``), run in order. The other entries are the
            benchmark's own (what ``recorded`` names is recorded with every run; ``metanet_config``
            overrides the config's; ``system_trainer``, ``{system: trainer options}``, overrides the
            recorded ``trainer`` for one system, e.g. its epochs in a protocol sized by time;
            ``system_settings``, ``{system: settings}``, overrides ``system_settings(system)``, e.g. a
            learning rate one protocol measures).
        systems: what ``--archs`` may name.
        result_fields: result field -> the fit's metric (``"test/mse"``; ``"test/psnr?"``: null when
            not logged).
        columns: the table's (:class:`~neuralgraph.bench.tables.Column`).
        progress: ``progress(result)``, the line printed after a run.
        intro: paragraphs between heading and table (strings, or functions of the :class:`Report`).
        extra_rows: ``extra_rows(report)``, rows after the runs' (published numbers).
        every_system: a row for every system of the plan (``not run yet`` where none is recorded),
            else a row for every recorded (system, k), sorted.
        per_k: the plan and the runs have a k (ensemble members) besides system and seed.
        configs: the benchmark's folder of configs: each system's is ``configs/benchmarks/<configs>/<system>.yaml``
            (shipped as ``benchmarks/<configs>/<system>``, the name its runs record).
        recorded: the protocol entries recorded with every run.
        system_settings: ``system_settings(system)``, settings of a system recorded with its runs.
        task_settings: the settings passed to the task as ``--model.init_args.<name>`` (so that the
            value recorded is the value run, whatever the config says).
        settings: ``settings(protocol, system, k)``, what determines a run but its seed (None: the
            system's config, ``recorded`` protocol entries and ``system_settings(system)``).
        arguments: ``arguments(settings, seed, data_root, out)``, a run's ``neuralgraph fit``
            arguments (None: :func:`~neuralgraph.bench.runner.fit_arguments` of those, ``data``
            saying which ``--data.*``).
        data: where the runs read their data (:class:`Data`).
        runs_folder: run folders under ``runs/benchmarks/<runs_folder>`` (None: ``name``).
        recorded_before: the value of each setting that a run recorded before the setting existed
            ran with.
        write_configs: ``write_configs()`` writes the configs (``--write-configs``) and returns
            their paths; None when the benchmark has none to write.
        systems_help: ``--archs``' help.
        curve: ``(metric, scale)``: each run's per-epoch history of this metric (``"val/accuracy"``) is
            drawn into ``<name>_<protocol>_<machine>_curves.png`` beside the table
            (:func:`~neuralgraph.bench.curves.plot_curves`), its values times ``scale``; None: no figure.

    Raises:
        ValueError: neither ``configs`` nor ``settings`` is given.
    """

    name: str
    title: str
    doc: str
    script: str
    protocols: Mapping[str, Mapping[str, Any]]
    systems: Sequence[str]
    result_fields: Mapping[str, str]
    columns: Sequence[Column]
    progress: Callable[[dict], str]
    intro: Sequence[Union[str, Callable[[Report], str]]] = ()
    extra_rows: Callable[[Report], list[Sequence[Cell]]] = lambda report: []
    every_system: bool = True
    per_k: bool = False
    configs: Optional[str] = None
    recorded: Sequence[str] = ("data", "trainer")
    system_settings: Callable[[str], dict] = lambda system: {}
    task_settings: Sequence[str] = ()
    settings: Optional[Callable[[Mapping[str, Any], str, int], dict]] = None
    arguments: Optional[Callable[[dict, int, Path, Path], list[str]]] = None
    data: Data = INR_DATA
    runs_folder: Optional[str] = None
    recorded_before: Mapping[str, Any] = field(default_factory=dict)
    write_configs: Optional[Callable[[], list[Path]]] = None
    systems_help: Optional[str] = None
    curve: Optional[tuple[str, float]] = None

    def __post_init__(self) -> None:
        if self.settings is None and self.configs is None:
            raise ValueError(f"benchmark {self.name!r}: give its systems' configs (configs=FOLDER) or its settings")

    @property
    def checkout(self) -> Path:
        """The checkout the script is in (its folder's parent), which holds configs, data, runs and results."""
        return Path(self.script).resolve().parents[1]

    @property
    def config_folder(self) -> Optional[Path]:
        """The folder of the systems' configs, ``configs/benchmarks/<configs>`` of the checkout (None without)."""
        return None if self.configs is None else benchmark_configs(self.checkout, self.configs)

    def plan(self, protocol: Mapping[str, Any]) -> list[tuple]:
        """The protocol's runs in its order, each once: ``(system, k, seed)`` with ``per_k``, else ``(system, seed)``."""
        runs = []
        for systems, *values in protocol["plan"]:
            ks, seeds = values if self.per_k else ((1,), *values)
            runs += [(system, k, seed) if self.per_k else (system, seed)
                     for system in systems for k in ks for seed in seeds]
        return list(dict.fromkeys(runs))

    def run_settings(self, protocol: Mapping[str, Any], system: str, k: int = 1) -> dict:
        """What determines a run but its seed (``settings``, or the system's config and the recorded entries)."""
        if self.settings is not None:
            return self.settings(protocol, system, k)
        path = self.config_folder / f"{system}.yaml"
        if not path.is_file():
            hint = " (--write-configs writes them)" if self.write_configs else ""
            raise FileNotFoundError(f"{path.relative_to(self.checkout)}: no config for {system}{hint}")
        import yaml

        init_args = yaml.safe_load(path.read_text())["model"]["init_args"]
        settings = {"config": config_name(path, self.checkout), "metanet": init_args["metanet"],
                    "metanet_config": {**init_args["metanet_config"], **protocol.get("metanet_config", {})},
                    **{key: protocol[key] for key in self.recorded}, **self.system_settings(system),
                    **protocol.get("system_settings", {}).get(system, {})}
        if system in protocol.get("system_trainer", {}):
            settings["trainer"] = {**settings["trainer"], **protocol["system_trainer"][system]}
        return settings

    def run_arguments(self, settings: dict, seed: int, data_root: Path, out: Path) -> list[str]:
        """``neuralgraph fit`` arguments of one run (resuming from ``out``'s last checkpoint if any)."""
        if self.arguments is not None:
            return self.arguments(settings, seed, data_root, out)
        return fit_arguments(config_file(settings["config"], self.checkout), seed, data_root, out, settings["metanet"],
                             settings["metanet_config"], self.data.fit(settings), settings["trainer"],
                             model={key: settings[key] for key in self.task_settings if key in settings},
                             build=self.data.build)

    def run_name(self, run: tuple) -> str:
        """A planned run as the table's "not run yet" line names it."""
        return f"{run[0]} k={run[1]} seed {run[2]}" if self.per_k else f"{run[0]} seed {run[1]}"

    def table(self, report: Report, missing: Sequence[tuple] = (), curves: Optional[str] = None) -> str:
        """The markdown table of ``report``; ``missing``: the protocol's runs not recorded yet; ``curves``:
        the file name of the learning-curve figure beside it, if written."""
        lines = [f"# {self.title} — protocol `{report.protocol_name}` on `{report.machine}`", ""]
        for block in self.intro:
            lines += [block(report) if callable(block) else block, ""]
        lines += header(self.columns)
        for group in self.groups(report):
            lines.append(row(self.cells(group)))
        lines += [row(cells) for cells in self.extra_rows(report)]
        if missing:
            lines += ["", f"Not run yet ({len(missing)} of the protocol's runs): "
                      + ", ".join(self.run_name(run) for run in missing) + "."]
        if curves is not None:
            lines += ["", f"{self.curve[0]} per epoch of every run that recorded one ({curves}):", "",
                      f"![{self.curve[0]} per epoch]({curves})"]
        return "\n".join(lines) + "\n"

    def groups(self, report: Report) -> list[Group]:
        if self.every_system:
            return [Group(system, 1, [r for r in report.runs if r["arch"] == system], report)
                    for system in report.systems]
        keys = sorted(dict.fromkeys((r["arch"], r["k"]) for r in report.runs))
        return [Group(arch, k, [r for r in report.runs if (r["arch"], r["k"]) == (arch, k)], report)
                for arch, k in keys]

    def cells(self, group: Group) -> list[Cell]:
        if group.runs:
            return [column.cell(group) for column in self.columns]
        first = next((i for i, column in enumerate(self.columns) if not column.always), None)
        return [column.cell(group) if column.always else "not run yet" if i == first else None
                for i, column in enumerate(self.columns)]

    def parser(self) -> argparse.ArgumentParser:
        """The command line every benchmark shares."""
        parser = argparse.ArgumentParser(description=self.doc.splitlines()[0])
        parser.add_argument("--protocol", choices=sorted(self.protocols),
                            default="smoke" if "smoke" in self.protocols else sorted(self.protocols)[0])
        parser.add_argument("--archs", nargs="+", choices=sorted(self.systems), help=self.systems_help)
        if self.per_k:
            parser.add_argument("--k", nargs="+", type=int)
        parser.add_argument("--seeds", nargs="+", type=int)
        parser.add_argument(self.data.option, dest="data", type=Path, default=None, help=self.data.help)
        parser.add_argument("--out", type=Path, default=self.checkout / "runs" / "benchmarks" / (
            self.name if self.runs_folder is None else self.runs_folder), help="run folders (checkpoints, logs)")
        parser.add_argument("--results", type=Path, default=self.checkout / "benchmarks" / "results",
                            help="folder of the results JSON and table")
        parser.add_argument("--count-flops", action="store_true",
                            help="count the FLOPs per prediction of recorded runs that lack them (from their "
                                 "settings, without fitting), rewrite the table and exit")
        if self.write_configs is not None:
            parser.add_argument("--write-configs", action="store_true",
                                help=f"write configs/benchmarks/{self.configs}/<system>.yaml and exit")
        return parser


def main(benchmark: Benchmark, argv: Optional[list[str]] = None) -> int:
    """Run ``benchmark``'s command line: fit the selected runs its results JSON lacks, write JSON and table.

    Args:
        benchmark: the benchmark.
        argv: its command line (None: ``sys.argv[1:]``).

    Returns:
        The exit status, 0 (the table is printed).
    """
    args = benchmark.parser().parse_args(argv)
    if benchmark.write_configs is not None and args.write_configs:
        for path in benchmark.write_configs():
            print(path.relative_to(benchmark.checkout))
        return 0
    protocol = benchmark.protocols[args.protocol]
    plan = benchmark.plan(protocol)
    todo = select_runs(plan, args.archs, *([args.k] if benchmark.per_k else []), args.seeds)
    todo = [run if benchmark.per_k else (run[0], 1, run[1]) for run in todo]
    systems = list(dict.fromkeys([run[0] for run in plan] + [run[0] for run in todo]))
    settings = {(system, k): benchmark.run_settings(protocol, system, k)
                for system, k in dict.fromkeys((system, k) for system, k, _ in todo)}
    folder = args.data or benchmark.data.folder(benchmark.checkout, args.protocol)
    prepared = (benchmark.data.prepare(protocol, folder, {system for system, _, _ in todo})
                if benchmark.data.prepare is not None else folder)

    def data_root(system: str) -> Path:
        return benchmark.data.root(prepared, system) if benchmark.data.root is not None else folder

    machine = machine_name()
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"{benchmark.name}_{args.protocol}_{machine}"
    runs = load_runs(stem.with_suffix(".json"))
    out = args.out / args.protocol
    if benchmark.data.fingerprint is not None:
        fingerprint = benchmark.data.fingerprint(prepared)
        check_same_data(runs, fingerprint, folder, stem.with_suffix(".json"), benchmark.recorded_before)
        for run_settings in settings.values():
            run_settings["data_sha256"] = fingerprint
        out = out / fingerprint[:12]
    report = Report(benchmark, args.protocol, machine, runs, systems, prepared)

    def save() -> None:
        import torch

        with results_lock(args.results):
            merge_recorded(runs, stem.with_suffix(".json"))
            done = {(r["arch"], r["k"], r["seed"]) if benchmark.per_k else (r["arch"], r["seed"]) for r in runs}
            record = {"protocol": args.protocol, "machine": machine, "cpu": cpu_description(),
                      "platform": platform.platform(), "torch": torch.__version__, "runs": runs}
            write_atomic(stem.with_suffix(".json"), json.dumps(record, indent=2))
            curves = write_curves(benchmark, report, stem.with_name(stem.name + "_curves.png"))
            write_atomic(stem.with_suffix(".md"), benchmark.table(report, [run for run in plan if run not in done],
                                                                  curves))

    if args.count_flops:
        count_missing_flops(benchmark, protocol, runs, stem.with_suffix(".json"), data_root)
        save()
        print(stem.with_suffix(".md").read_text())
        return 0

    run_missing(f"[{args.protocol}]", todo, runs, benchmark.result_fields, lambda system, k: settings[system, k],
                stem.with_suffix(".json"), out,
                lambda system, k, seed, out: benchmark.run_arguments(settings[system, k], seed, data_root(system), out),
                save, benchmark.progress, name_k=benchmark.per_k, recorded_before=benchmark.recorded_before)
    save()
    print(stem.with_suffix(".md").read_text())
    return 0


def count_missing_flops(benchmark: Benchmark, protocol: Mapping[str, Any], runs: list[dict], results: Path,
                        data_root: Callable[[str], Path]) -> None:
    """Count the FLOPs per prediction of every recorded run that lacks them, from its settings
    (:func:`~neuralgraph.bench.runner.count_flops`), into ``runs``.

    Args:
        benchmark: the benchmark.
        protocol: its protocol's settings.
        runs: the recorded runs, updated in place.
        results: the results JSON, named by the error of a run recorded with other settings.
        data_root: ``data_root(system)``, the data folder of a system's runs.

    Raises:
        ValueError: a run lacking the count was recorded with settings other than the protocol's now
            (its model may differ), naming the field.
    """
    for run in runs:
        if run.get("flops_per_prediction") is not None:
            continue
        system, k, seed = run["arch"], run["k"], run["seed"]
        settings = benchmark.run_settings(protocol, system, k)
        recorded([run], system, k, seed, settings, results, benchmark.recorded_before)
        with tempfile.TemporaryDirectory() as out:
            run["flops_per_prediction"] = count_flops(benchmark.run_arguments(settings, seed, data_root(system),
                                                                              Path(out)))
        print(f"{benchmark.run_name((system, k, seed) if benchmark.per_k else (system, seed))}: "
              f"{run['flops_per_prediction'] / 1e6:,.2f} MFLOPs per prediction", flush=True)


def write_curves(benchmark: Benchmark, report: Report, path: Path) -> Optional[str]:
    """Draw the benchmark's learning curve of every recorded run into ``path`` (when it declares one
    and a run recorded a history); the file's name, or None when there is none to draw or matplotlib
    is missing (said on stderr: the table is complete without it).

    Args:
        benchmark: the benchmark.
        report: its recorded runs.
        path: the PNG.

    Returns:
        ``path``'s name, or None.
    """
    if benchmark.curve is None or not any(benchmark.curve[0] in (run.get("history") or {}) for run in report.runs):
        return None
    try:
        import matplotlib  # noqa: F401  (the bench extra)
    except ImportError:
        print(f"{path.name} not written: matplotlib is not installed (pip install -e '.[bench]'); "
              "the table is complete without it", file=sys.stderr)
        return None
    from neuralgraph.bench.curves import plot_curves

    metric, scale = benchmark.curve
    temporary = path.with_name(path.stem + ".tmp.png")  # then a rename: a kill leaves the previous figure
    plot_curves(report.runs, metric, f"{benchmark.title}, protocol {report.protocol_name} ({report.machine})",
                temporary, scale)
    os.replace(temporary, path)
    return path.name


def load_script(path: Union[str, Path]) -> ModuleType:
    """A benchmark script imported as a module by its path (once: a second call returns the same module),
    for a script that reads another's functions and for the tests.

    Args:
        path: the script.

    Returns:
        The module, ``benchmarks.<stem>`` in ``sys.modules``.

    Raises:
        ImportError: ``path`` is not a Python script.
    """
    path = Path(path).resolve()
    name = f"benchmarks.{path.stem}"
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__file__", None) == str(path):
        return module
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path}: not a Python script")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def write_fit_config(path: Path, header: str, task: str, init_args: dict, datamodule: Optional[str], data: dict,
                     trainer: dict) -> Path:
    """A ``neuralgraph fit`` config (seed 0) under the comment lines ``header``, as ``--write-configs`` writes one.

    Args:
        path: the YAML file to write (its folder is created).
        header: comment lines written first.
        task: the task's class path.
        init_args: the task's init arguments.
        datamodule: the data module's class path, or None for the INR data module (the default of
            ``neuralgraph fit``: ``data`` is then written as its options, without a class path).
        data: its init arguments.
        trainer: the trainer's options.

    Returns:
        ``path``.
    """
    import yaml

    config = {"seed_everything": 0, "model": {"class_path": task, "init_args": init_args},
              "data": data if datamodule is None else {"class_path": datamodule, "init_args": data}, "trainer": trainer}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(config, sort_keys=False))
    return path
