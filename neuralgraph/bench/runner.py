"""The fit runs of a benchmark: their ``neuralgraph fit`` arguments, the child process that fits, tests at
the best-validation checkpoint and records what every result table reports, and the resumable
bookkeeping of a results JSON.

Each (system, k, seed) fits in a child process of its own, so that its peak memory is its own
(``python -m neuralgraph.bench --run-one RESULT FIELDS fit ...``, :func:`run_one`); each finished
run is appended to the results JSON as it completes (:func:`run_missing`): a kill leaves the
previous file whole, a rerun skips the recorded runs, and a recorded run made with other settings
is an error naming the field.

A run records its config by its shipped name (``benchmarks/dilation/gmn_k1``, what ``neuralgraph
configs`` lists and ``--config`` takes), the file ``configs/benchmarks/dilation/gmn_k1.yaml`` of the
checkout. Runs recorded before the configs were split into ``examples/`` and ``benchmarks/`` hold
the path ``configs/dilation/gmn_k1.yaml``: :func:`config_name_of_record` reads it as the name it
has now, so that a rerun of such a results file skips its runs.
"""
from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Sequence

from neuralgraph.bench.machine import cpu_short
from neuralgraph.commands.configs import BENCHMARKS, SUFFIX

#: A checkout's configs folder (a link to ``neuralgraph/configs``).
CONFIGS = "configs"
#: How runs recorded their config before the split into ``examples/`` and ``benchmarks/``.
RECORDED_CONFIG_PREFIX = f"{CONFIGS}/"


def benchmark_configs(checkout: Path, benchmark: str) -> Path:
    """The folder of the configs a benchmark runs.

    Args:
        checkout: the checkout holding ``configs``.
        benchmark: the benchmark's folder name (``dilation``, ``dilation/paper``, ``inr_classification``).

    Returns:
        ``<checkout>/configs/benchmarks/<benchmark>``.
    """
    return checkout / CONFIGS / BENCHMARKS / benchmark


def config_name(path: Path, checkout: Path) -> str:
    """The shipped name of a config file of the checkout, as a run records it.

    Args:
        path: a file under ``<checkout>/configs``.
        checkout: the checkout.

    Returns:
        Its path under ``configs`` without ``.yaml`` (``benchmarks/dilation/gmn_k1``).
    """
    return path.relative_to(checkout / CONFIGS).with_suffix("").as_posix()


def config_file(name: str, checkout: Path) -> Path:
    """The file of a config that a run records by name (:func:`config_name`).

    Args:
        name: the shipped name.
        checkout: the checkout.

    Returns:
        ``<checkout>/configs/<name>.yaml``.
    """
    return checkout / CONFIGS / f"{name}{SUFFIX}"


def config_name_of_record(recorded_config: str) -> str:
    """The config a run recorded, as the shipped name it has now.

    Args:
        recorded_config: the run's ``config`` setting: a name (``benchmarks/dilation/gmn_k1``), or the
            path a run recorded before the configs were split into ``examples/`` and ``benchmarks/``
            (``configs/dilation/gmn_k1.yaml``: every config a benchmark ran then is now under
            ``benchmarks/`` at the same path).

    Returns:
        The shipped name.
    """
    if recorded_config.startswith(RECORDED_CONFIG_PREFIX) and recorded_config.endswith(SUFFIX):
        return f"{BENCHMARKS}/{recorded_config[len(RECORDED_CONFIG_PREFIX):-len(SUFFIX)]}"
    return recorded_config


def fit_arguments(config: Path, seed: int, data_root: Path, out: Path, metanet: str, metanet_config: dict,
                  data: dict, trainer: dict, model: dict | None = None, build: bool = False) -> list[str]:
    """``neuralgraph fit`` arguments of one run, resuming from ``out``'s last checkpoint if any.

    Args:
        config: the run's config file.
        seed: its seed (``--seed_everything``).
        data_root: the dataset folder.
        out: the run's folder: logs and checkpoints.
        metanet: the registered metanetwork or baseline.
        metanet_config: its options, passed as JSON.
        data: data module options overriding the config's; a ``None`` value is passed as ``null``.
        trainer: trainer options overriding the config's.
        model: the task's init arguments overriding the config's, or None.
        build: pass ``--data.build true``: the MNIST-INR data module (``MnistInrDataModule``) fits
            the INRs missing from ``data_root`` on first use (the zoo data modules have no such option).

    Returns:
        The arguments after ``neuralgraph``.
    """
    args = ["fit", "--config", str(config), "--seed_everything", str(seed),
            "--data.root", str(data_root), "--trainer.default_root_dir", str(out), "--ckpt_path", "last",
            "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(out),
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--model.init_args.metanet", metanet, "--model.init_args.metanet_config", json.dumps(metanet_config)]
    for key, value in (model or {}).items():
        args += [f"--model.init_args.{key}", str(value)]
    for key, value in data.items():
        args += [f"--data.{key}", "null" if value is None else str(value)]
    if build:
        args += ["--data.build", "true"]
    for key, value in trainer.items():
        args += [f"--trainer.{key}", str(value)]
    return args


def count_flops(argv: list[str]) -> float:
    """FLOPs per prediction of the model a run's ``neuralgraph fit`` arguments configure, on the
    first test batch, as :func:`fit_and_record` counts them, without fitting: for runs recorded
    before the count existed (the count depends on the settings, not on the trained weights).

    Args:
        argv: the run's arguments (:func:`fit_arguments`).

    Returns:
        The FLOPs per prediction.
    """
    from neuralgraph.training.cli import run_lightning_cli

    if argv[:1] != ["fit"]:
        raise ValueError(f"count_flops: expected `fit` arguments, got {argv[:1]}")
    options = argv[1:]
    if "--ckpt_path" in options:  # the verb's own option: nothing is resumed here
        at = options.index("--ckpt_path")
        options = options[:at] + options[at + 2:]
    cli = run_lightning_cli(options, run=False)
    cli.datamodule.setup("test")
    return flops_on_test_batch(cli)


def flops_on_test_batch(cli) -> float:
    """FLOPs per prediction of a CLI's model on its data module's first test batch (the one count
    :func:`fit_and_record` and :func:`count_flops` share).

    Args:
        cli: a :class:`~neuralgraph.training.cli.NeuralgraphCLI` whose data module is set up for testing.

    Returns:
        The FLOPs per prediction.
    """
    from neuralgraph.nn.flops import flops_per_prediction

    return flops_per_prediction(cli.model.cpu(), next(iter(cli.datamodule.test_dataloader())))


def fit_and_record(argv: list[str]) -> tuple[dict[str, float], dict]:
    """Run ``neuralgraph fit`` (+ test at the best-validation checkpoint) in this process.

    Args:
        argv: the ``neuralgraph fit`` arguments (:func:`fit_arguments`).

    Returns:
        The final callback metrics, and the record every table reports (best validation loss,
        trainable parameters, width, FLOPs per prediction (on the first test batch), epochs, wall time, whether it
        resumed, peak memory, device, CPU, threads, and the per-epoch training and validation metrics of every
        start of the fit, :func:`~neuralgraph.bench.curves.epoch_history`).
    """
    import torch

    from neuralgraph.bench.curves import epoch_history
    from neuralgraph.nn.budget import count_trainable
    from neuralgraph.training.cli import checkpoint_dir, last_checkpoint, run_lightning_cli

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    resumed = last_checkpoint(checkpoint_dir(argv[argv.index("--trainer.default_root_dir") + 1])) is not None
    start = time.perf_counter()
    cli = run_lightning_cli(argv)
    metrics = {k: float(v) for k, v in cli.trainer.callback_metrics.items()}
    return metrics, {
        "best_val_loss": float(cli.trainer.checkpoint_callback.best_model_score),
        "parameters": count_trainable(cli.model),
        "hidden_dim": cli.model.metanet.hidden_dim,
        "flops_per_prediction": flops_on_test_batch(cli),
        "epochs": cli.trainer.current_epoch,
        "wall_s": time.perf_counter() - start,
        "resumed": resumed,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_cuda_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "cpu": cpu_short(),
        "threads": torch.get_num_threads(),
        "history": epoch_history(Path(cli.trainer.logger.root_dir)) if cli.trainer.logger is not None else {},
    }


def result_of(metrics: Mapping[str, float], fields: Mapping[str, str]) -> dict:
    """The result fields of a run from its metrics.

    Args:
        metrics: the run's final metrics.
        fields: result field -> metric; a metric ending in ``?`` may be missing (recorded as null).

    Returns:
        Result field -> the metric's value.

    Raises:
        KeyError: naming a metric the fit did not log (without ``?``).
    """
    result = {}
    for field, metric in fields.items():
        if metric.endswith("?"):
            result[field] = metrics.get(metric[:-1])
        elif metric in metrics:
            result[field] = metrics[metric]
        else:
            raise KeyError(f"result field {field!r}: the fit logged no {metric!r}; it logged {sorted(metrics)}")
    return result


def run_one(result_path: Path, fields: Mapping[str, str], argv: list[str]) -> None:
    """The child process: one fit (+ test at best validation); its result fields and record to ``result_path``.

    Args:
        result_path: the JSON file written.
        fields: result field -> metric (:func:`result_of`).
        argv: the ``neuralgraph fit`` arguments.
    """
    metrics, record = fit_and_record(argv)
    write_atomic(result_path, json.dumps({**result_of(metrics, fields), **record}, indent=2))


def select_runs(plan: Sequence[tuple], *choices: Optional[Sequence]) -> list[tuple]:
    """The planned runs whose every field is among its choice (``None``: any). With every choice
    given, exactly their product, in that order: a full selection may ask for runs beyond the plan.

    Args:
        plan: the planned runs, tuples of fields (system, k, seed).
        *choices: per field, the values chosen, or None for any.

    Returns:
        The selected runs.
    """
    if all(choices):
        return list(itertools.product(*choices))
    return [run for run in plan if all(choice is None or value in choice for value, choice in zip(run, choices))]


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (a kill leaves the old file).

    Args:
        path: the file to write.
        text: its content.
    """
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def load_runs(path: Path) -> list[dict]:
    """The runs recorded in a results JSON (none when it does not exist yet).

    Args:
        path: the results JSON.

    Returns:
        Its ``runs``.

    Raises:
        ValueError: the file is not a results file.
    """
    if not path.exists():
        return []
    try:
        return json.loads(path.read_text())["runs"]
    except (json.JSONDecodeError, KeyError) as err:
        raise ValueError(f"{path}: not a results file of this benchmark ({err})") from err


def merge_recorded(runs: list[dict], path: Path) -> None:
    """Append to ``runs`` the runs ``path`` records that it lacks (by arch, k and seed).

    Two invocations may fill one results file side by side (other systems or seeds each): each
    merges what the other recorded before it writes, so neither overwrites the other's runs.

    Args:
        runs: the recorded runs, appended to.
        path: the results JSON (none yet: nothing is added).
    """
    held = {(run["arch"], run.get("k", 1), run["seed"]) for run in runs}
    runs.extend(run for run in load_runs(path) if (run["arch"], run.get("k", 1), run["seed"]) not in held)


@contextlib.contextmanager
def results_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on a results folder (``flock`` on the folder itself, released on exit
    or when the process dies), so one invocation at a time reads, merges and writes its files.

    Args:
        folder: the results folder.

    Yields:
        Nothing; the lock is held inside the ``with`` block.
    """
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def check_same_data(runs: list[dict], fingerprint: str, data: Path, path: Path,
                    recorded_before: Optional[dict] = None) -> None:
    """Refuse to add runs on ``data`` to a results file whose runs read other data (their ``data_sha256``).

    Args:
        runs: the recorded runs.
        fingerprint: the ``data_sha256`` of ``data``.
        data: the data folder, named by the error.
        path: the results file, named by the error.
        recorded_before: what a run recorded before ``data_sha256`` existed read, or None.

    Raises:
        ValueError: a recorded run read other data.
    """
    read = {run["settings"].get("data_sha256", (recorded_before or {}).get("data_sha256")) for run in runs}
    read.discard(fingerprint)
    if read:
        other = ", ".join(sorted(str(value)[:80] for value in read))
        raise ValueError(f"{path}: its runs read other data ({other}), not {data} (data_sha256 {fingerprint[:12]}); "
                         "pass --results DIR for a table of this data")


def recorded(runs: list[dict], arch: str, k: int, seed: int, settings: dict, path: Path,
             recorded_before: Optional[dict] = None) -> bool:
    """Whether ``runs`` holds (arch, k, seed); ValueError naming the field when it ran with other settings.

    A recorded ``config`` is compared as the name it has now (:func:`config_name_of_record`).

    Args:
        runs: the recorded runs.
        arch: the system.
        k: its number of ensemble members.
        seed: the seed.
        settings: the settings this protocol runs with.
        path: the results file, named by the error.
        recorded_before: the value of each setting a run recorded before the setting existed ran
            with, or None.

    Returns:
        True when the run is recorded with these settings, False when it is not recorded.

    Raises:
        ValueError: the run is recorded with other settings.
    """
    for run in runs:
        if (run["arch"], run["k"], run["seed"]) == (arch, k, seed):
            for key, value in settings.items():
                ran = run["settings"].get(key, (recorded_before or {}).get(key))
                if key == "config" and isinstance(ran, str):
                    ran = config_name_of_record(ran)
                if ran != value:
                    raise ValueError(f"{path}: {arch} k={k} seed={seed} was run with {key}={ran}, "
                                     f"this protocol asks {value}; move the file away or pass --results DIR")
            return True
    return False


def run_missing(label: str, todo: Sequence[tuple[str, int, int]], runs: list[dict], fields: Mapping[str, str],
                settings: Callable[[str, int], dict], results: Path, out: Path,
                arguments: Callable[[str, int, int, Path], list[str]], save: Callable[[], None],
                describe: Callable[[dict], str], name_k: bool = True, recorded_before: Optional[dict] = None) -> None:
    """Fit every (arch, k, seed) of ``todo`` that ``results`` does not hold, one child process each.

    Each run fits in ``out/<arch>[_k<k>]_s<seed>`` (its ``last.ckpt`` resumes a killed fit); its
    record is appended to ``runs``, then ``save()`` writes the JSON and table.

    Args:
        label: the benchmark's label in the progress lines.
        todo: the runs, ``(arch, k, seed)``.
        runs: the recorded runs, appended to.
        fields: result field -> metric (:func:`result_of`).
        settings: ``settings(arch, k)``, the settings recorded with a run.
        results: the results JSON, to check recorded runs against.
        out: the folder of the run folders.
        arguments: ``arguments(arch, k, seed, run_dir)``, the ``neuralgraph fit`` arguments of a run.
        save: writes the results JSON and table.
        describe: the progress line's summary of a run's result.
        name_k: whether k is in the run folder's name.
        recorded_before: the value of each setting a run recorded before the setting existed ran
            with, or None (:func:`recorded`).
    """
    for arch, k, seed in todo:
        run_label = f"{label} {arch}{f' k={k}' if name_k else ''} seed={seed}"
        merge_recorded(runs, results)
        if recorded(runs, arch, k, seed, settings(arch, k), results, recorded_before):
            print(f"{run_label}: in {results.name}, skipped", flush=True)
            continue
        run_dir = out / f"{arch}{f'_k{k}' if name_k else ''}_s{seed}"
        run_dir.mkdir(parents=True, exist_ok=True)
        result_path = run_dir / "result.json"
        print(run_label, flush=True)
        subprocess.run([sys.executable, "-m", "neuralgraph.bench", "--run-one", str(result_path), json.dumps(fields),
                        *arguments(arch, k, seed, run_dir)], check=True)
        result = json.loads(result_path.read_text())
        runs.append({"arch": arch, "k": k, "seed": seed, "settings": settings(arch, k), **result})
        save()
        print(f"    {describe(result)}, {result['parameters']:,} parameters, {result['wall_s'] / 60:.1f} min", flush=True)
