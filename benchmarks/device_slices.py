"""Slices of the long runs, timed on one device: what a whole run would take there, measured in minutes.

* ``dilation``: fits of the ``full`` dilation protocol (``benchmarks/dilation.py``: its config, width
  and budget matching, batch, trainer) run for ``--epochs`` epochs on ``--limit-train``/``--limit-val``
  INRs, through Lightning as ``neuralgraph fit`` trains. Every training and validation step is timed
  (the device synchronised at its ends); from the median step of the epochs after the first (which
  pays the warm-up) come the seconds per epoch of the protocol's 55,000/5,000 INRs and the time of its
  150 epochs, beside the published 4-10 hours per run on an A100. The INRs are fitted briefly
  (``--fit-steps``) from the embedded MNIST digits: a step's computation does not depend on the weights'
  values, only on their shapes.
* ``zoo``: the CNN zoo trainer (``make_cnn_zoo``) on the device, networks x epochs per second.

Each writes its JSON (``--json``) when it is done.

    python benchmarks/device_slices.py dilation --device cuda --k 1 8 --json gmn_slice.json
    python benchmarks/device_slices.py zoo --device cuda --networks 256 --json zoo.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

from neuralgraph.bench.runner import config_file

ROOT = Path(__file__).resolve().parents[1]
FULL_SPLITS = {"train": 55_000, "val": 5_000}  # the full protocol's INRs per epoch (its test split runs once)
PUBLISHED_HOURS = (4, 10)  # the paper's time per dilation run on an A100


def dilation_module():
    """``benchmarks/dilation.py``, the protocols' definition."""
    spec = importlib.util.spec_from_file_location("dilation", ROOT / "benchmarks" / "dilation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synchronizer(device: torch.device):
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def step_timer(device: torch.device):
    """A Lightning callback recording every training and validation step's seconds, by epoch."""
    import lightning as L

    sync = synchronizer(device)

    class StepTimes(L.Callback):
        def __init__(self):
            self.steps = {"train": [], "val": []}  # (epoch, seconds)

        def _start(self):
            sync()
            self.started = time.perf_counter()

        def _end(self, trainer, stage):
            sync()
            self.steps[stage].append((trainer.current_epoch, time.perf_counter() - self.started))

        def on_train_batch_start(self, trainer, *args):
            self._start()

        def on_train_batch_end(self, trainer, *args):
            self._end(trainer, "train")

        def on_validation_batch_start(self, trainer, *args):
            if not trainer.sanity_checking:
                self._start()

        def on_validation_batch_end(self, trainer, *args):
            if not trainer.sanity_checking:
                self._end(trainer, "val")

    return StepTimes()


def fit_inrs_once(root: Path, limits: dict[str, int], fit_steps: int, device: torch.device) -> None:
    """INRs of the embedded MNIST digits in ``root``, ``limits[split]`` per split, fitted ``fit_steps`` steps."""
    from neuralgraph.data.generate import GenerationSettings, make_inrs
    from neuralgraph.inr import FitConfig

    settings = GenerationSettings(source="embedded", fit=FitConfig(steps=fit_steps))
    for split, limit in limits.items():
        make_inrs(root, (split,), limit, settings, progress=False, device=str(device))


def dilation_slice(args, device: torch.device) -> dict:
    """The ``full`` protocol's fits of ``--arch`` at each ``--k``, ``--epochs`` epochs on a slice of INRs."""
    import lightning as L
    import yaml

    from neuralgraph.training.datamodule import MnistInrDataModule
    from neuralgraph.training.tasks import InrEditing

    dilation = dilation_module()
    root = Path(args.data_root or tempfile.mkdtemp(prefix="inrs-slice-"))
    limits = {"train": args.limit_train, "val": args.limit_val, "test": args.limit_val}
    fit_inrs_once(root, limits, args.fit_steps, device)
    results = {"device": str(device), "arch": args.arch, "protocol": "full", "precision": args.precision,
               "epochs": args.epochs, "limit_train": args.limit_train, "limit_val": args.limit_val,
               "full_splits": FULL_SPLITS, "published_hours_per_run": list(PUBLISHED_HOURS), "runs": {}}
    for k in args.k:
        settings = dilation.run_settings(dilation.PROTOCOLS["full"], args.arch, k)
        config = yaml.safe_load(config_file(settings["config"], ROOT).read_text())
        metanet_config = {**settings["metanet_config"], **json.loads(args.metanet_config or "{}")}
        width = metanet_config.pop("hidden_dim")
        model_args = {**config["model"]["init_args"], "metanet": settings["metanet"], "metanet_config": metanet_config,
                      "reference_hidden_dim": width, "budget_width_multiple": settings["budget_width_multiple"]}
        batch_size = config["data"]["batch_size"]
        torch.manual_seed(0)
        task = InrEditing(**{key: value for key, value in model_args.items() if key != "class_path"})
        data = MnistInrDataModule(root=str(root), batch_size=batch_size, source="embedded", build=False,
                                  limit_train=args.limit_train, limit_val=args.limit_val, limit_test=args.limit_val)
        timer = step_timer(device)
        trainer = L.Trainer(accelerator=device.type, devices=1, max_epochs=args.epochs, precision=args.precision,
                            logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, num_sanity_val_steps=0, callbacks=[timer],
                            default_root_dir=tempfile.mkdtemp(prefix="slice-run-"))
        start = time.perf_counter()
        trainer.fit(task, data)
        wall = time.perf_counter() - start
        later = {stage: [s for epoch, s in steps if epoch > 0] or [s for _, s in steps]
                 for stage, steps in timer.steps.items()}
        step_s = {stage: statistics.median(seconds) for stage, seconds in later.items()}
        per_epoch = sum(math.ceil(FULL_SPLITS[stage] / batch_size) * step_s[stage] for stage in FULL_SPLITS)
        hours = per_epoch * settings["trainer"]["max_epochs"] / 3600
        results["runs"][f"k{k}"] = {
            "k": k, "hidden_dim": task.metanet.hidden_dim, "metanet_config": task.hparams.metanet_config,
            "batch_size": batch_size, "train_steps": len(timer.steps["train"]), "val_steps": len(timer.steps["val"]),
            "median_train_step_s": step_s["train"], "median_val_step_s": step_s["val"], "slice_wall_s": wall,
            "s_per_full_epoch": per_epoch, "full_epochs": settings["trainer"]["max_epochs"],
            "hours_per_full_run": hours,
            "peak_cuda_mib": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None}
        print(f"{args.arch} k={k} (hidden {task.metanet.hidden_dim}): train step {1e3 * step_s['train']:.1f} ms, "
              f"val step {1e3 * step_s['val']:.1f} ms -> {per_epoch:.0f} s per full epoch, {hours:.2f} h for "
              f"{settings['trainer']['max_epochs']} epochs (published: {PUBLISHED_HOURS[0]}-{PUBLISHED_HOURS[1]} h "
              "on an A100)")
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
    return results


def zoo_slice(args, device: torch.device) -> dict:
    """``make_cnn_zoo`` of ``--networks`` networks on ``device``, timed."""
    from neuralgraph.data.cnn_zoo import ZooSettings, make_cnn_zoo

    settings = ZooSettings(networks=args.networks, train_size=args.train_size, test_size=args.test_size,
                           checkpoint_epochs=tuple(args.zoo_epochs), shard_size=min(args.networks, 64),
                           source="embedded")
    sync = synchronizer(device)
    with tempfile.TemporaryDirectory(prefix="zoo-slice-") as out:
        start = time.perf_counter()
        make_cnn_zoo(out, settings, progress=False, device=device)
        sync()
        seconds = time.perf_counter() - start
    epochs = max(settings.checkpoint_epochs)
    rate = settings.networks * epochs / seconds
    print(f"make_cnn_zoo on {device}: {settings.networks} networks x {epochs} epochs of {settings.train_size} images "
          f"in {seconds:.1f} s: {rate:.2f} network-epochs/s")
    return {"device": str(device), "settings": settings.to_dict(), "seconds": seconds, "network_epochs_per_s": rate}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("slice", choices=("dilation", "zoo"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", type=Path, help="write the results here")
    dilation = parser.add_argument_group("dilation")
    dilation.add_argument("--arch", default="gmn", help="a row of the full protocol (configs/benchmarks/dilation/paper)")
    dilation.add_argument("--k", type=int, nargs="+", default=[1, 8])
    dilation.add_argument("--epochs", type=int, default=2, help="epochs of the slice (the first is warm-up)")
    dilation.add_argument("--limit-train", type=int, default=1024, help="training INRs of the slice")
    dilation.add_argument("--limit-val", type=int, default=256, help="validation (and test) INRs of the slice")
    dilation.add_argument("--fit-steps", type=int, default=20, help="fitting steps of the slice's INRs")
    dilation.add_argument("--data-root", help="folder of the slice's INRs (default: a temporary one)")
    dilation.add_argument("--precision", default="32-true", help="Lightning's trainer precision, e.g. bf16-mixed")
    dilation.add_argument("--metanet-config", help="JSON overriding the protocol's metanet_config (a smoke size)")
    zoo = parser.add_argument_group("zoo")
    zoo.add_argument("--networks", type=int, default=256)
    zoo.add_argument("--train-size", type=int, default=2000)
    zoo.add_argument("--test-size", type=int, default=500)
    zoo.add_argument("--zoo-epochs", type=int, nargs="+", default=[1, 3], help="the zoo's checkpoint epochs")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    results = dilation_slice(args, device) if args.slice == "dilation" else zoo_slice(args, device)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
