"""The MNIST INR dilation benchmark: our measured numbers beside the published ones.

    python benchmarks/dilation.py --protocol smoke|cpu|full [--archs ...] [--k 1 2 4 8] [--seeds 0 1 2]

Each (architecture, k, seed) is trained by ``neuralgraph fit`` (one subprocess per run, so that
its peak memory is its own) from ``configs/<folder>/<arch>_k<k>.yaml`` with the protocol's
overrides, and tested at its best-validation checkpoint. Results: a JSON of raw runs and a
markdown table in ``benchmarks/results/dilation_<protocol>_<machine>.{json,md}``.

Protocols (see docs/benchmarks.md for why they are sized as they are):

* ``full``: the paper's: 55k/5k/10k INRs, 150 epochs, batch 32, 3 seeds, every row of the
  paper's table at its published size (``configs/dilation/paper``), k in 1, 2, 4, 8. For a GPU;
  the device is chosen automatically.
* ``cpu``: DWS and GMN (``configs/dilation``) at k=1 and k=8 (budget-matched), one seed, about
  an hour on 2 cores.
* ``smoke``: every paper row at k=1 and k=2, tiny data and widths, one epoch: plumbing only.

``cpu`` and ``full`` fit their INRs (in ``data/inrs-<protocol>`` unless ``--data-root`` says
otherwise) with the ``dws-released`` preset, calibrated to the INR set the published numbers
were measured on (docs/inr.md); ``--preset dws-1000`` gives the INRs of earlier results.
"""
from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
ARCHS = ("gmn", "ng_gnn", "ng_t", "nft", "dws", "nfn_hnp", "nfn_np")
# The systems of the paper's dilation table at their published sizes: configs/dilation/paper/<row>_k<k>.yaml.
PAPER_ROWS = ("nft", "np_nfn", "ng_gnn64", "ng_t64", "scalegmn_b", "scalegmn_b_gradmetanet", "gmn_gradmetanet", "dws",
              "gmn")

PROTOCOLS = {
    "full": {
        "archs": PAPER_ROWS, "configs": "dilation/paper", "k": (1, 2, 4, 8), "seeds": (0, 1, 2),
        "data": {"limit_train": None, "limit_val": None, "limit_test": None, "preset": "dws-released"},
        "trainer": {"max_epochs": 150},
        "metanet_config": {},
    },
    "cpu": {
        "archs": ("dws", "gmn"), "configs": "dilation", "k": (1, 8), "seeds": (0,),
        "data": {"limit_train": 1000, "limit_val": 300, "limit_test": 300, "preset": "dws-released"},
        "trainer": {"max_epochs": 12},
        "metanet_config": {"gmn": {"hidden_dim": 64, "num_layers": 3}, "dws": {"hidden_dim": 32, "num_layers": 3}},
    },
    "smoke": {
        "archs": PAPER_ROWS, "configs": "dilation/paper", "k": (1, 2), "seeds": (0,),
        "data": {"limit_train": 64, "limit_val": 32, "limit_test": 32},
        "trainer": {"max_epochs": 1},
        "metanet_config": {row: {"hidden_dim": 8, "num_layers": 1} for row in PAPER_ROWS},
    },
}

# Published test MSE x1e-2 on MNIST INR dilation (2026 OCE paper and the works it compares to).
PUBLISHED = [
    ("NFT", "nft", 1, 5.10), ("NP-NFN", "np_nfn", 1, 2.55), ("NG-GNN-64", "ng_gnn64", 1, 2.06),
    ("ScaleGMN-B", "scalegmn_b", 1, 1.89), ("NG-T-64", "ng_t64", 1, 1.75),
    ("ScaleGMN + GradMetaNet++", "scalegmn_b_gradmetanet", 1, 1.60),
    ("OCE DWS k=1", "dws", 1, 2.29), ("OCE DWS k=2", "dws", 2, 2.01), ("OCE DWS k=4", "dws", 4, 1.58),
    ("OCE DWS k=8", "dws", 8, 1.36), ("OCE GMN k=1", "gmn", 1, 1.96), ("OCE GMN k=2", "gmn", 2, 1.69),
    ("OCE GMN k=4", "gmn", 4, 1.19), ("OCE GMN k=8", "gmn", 8, 1.06),
]


def machine_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0).replace(" ", "-").lower()
    return f"cpu{torch.get_num_threads()}"


def run_arguments(protocol: dict, arch: str, k: int, seed: int, data_root: Path, out: Path) -> list[str]:
    """``neuralgraph fit`` arguments of one run."""
    args = ["fit", "--config", str(config_path(protocol, arch, k)),
            "--seed_everything", str(seed), "--data.root", str(data_root),
            "--trainer.default_root_dir", str(out),
            "--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir", str(out),
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
    for key, value in protocol["data"].items():
        args += [f"--data.{key}", "null" if value is None else str(value)]
    for key, value in protocol["trainer"].items():
        args += [f"--trainer.{key}", str(value)]
    overrides = protocol["metanet_config"].get(arch)
    if overrides:
        base = _config_metanet(protocol, arch, k)
        args += ["--model.init_args.metanet_config", json.dumps({**base, **overrides})]
    return args


def config_path(protocol: dict, arch: str, k: int) -> Path:
    """``configs/<protocol's folder>/<arch>_k<k>.yaml``; FileNotFoundError naming it when absent."""
    path = ROOT / "configs" / protocol["configs"] / f"{arch}_k{k}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path.relative_to(ROOT)}: no config for {arch} at k={k} in this protocol")
    return path


def _config_metanet(protocol: dict, arch: str, k: int) -> dict:
    import yaml

    config = yaml.safe_load(config_path(protocol, arch, k).read_text())
    return dict(config["model"]["init_args"]["metanet_config"])


def run_one(argv: list[str], result_path: Path) -> None:
    """Child process: one fit (+ test at best validation), results to ``result_path``."""
    from neuralgraph.nn.budget import count_trainable
    from neuralgraph.training.cli import run_lightning_cli

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    cli = run_lightning_cli(argv)
    metrics = {k: float(v) for k, v in cli.trainer.callback_metrics.items()}
    result = {
        "test_mse": metrics["test/mse"],
        "test_psnr": metrics.get("test/psnr"),
        "best_val_loss": float(cli.trainer.checkpoint_callback.best_model_score),
        "parameters": count_trainable(cli.model),
        "hidden_dim": cli.model.metanet.hidden_dim,
        "epochs": cli.trainer.current_epoch,
        "wall_s": time.perf_counter() - start,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_cuda_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
    }
    result_path.write_text(json.dumps(result, indent=2))


def summarize(runs: list[dict], protocol_name: str, machine: str) -> str:
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["arch"], r["k"]), []).append(r)
    lines = [f"# MNIST INR dilation — protocol `{protocol_name}` on `{machine}`", "",
             "Test MSE x1e-2 at the best-validation checkpoint (mean ± std over seeds).", "",
             "| source | model | k | test MSE x1e-2 | parameters | hidden_dim | epochs | wall time (min) | peak memory (MB) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for (arch, k), rs in sorted(groups.items()):
        mses = [100 * r["test_mse"] for r in rs]
        spread = f" ± {statistics.stdev(mses):.3f}" if len(mses) > 1 else ""
        memory = rs[0]["peak_cuda_mb"] if rs[0]["peak_cuda_mb"] is not None else rs[0]["peak_rss_mb"]
        lines.append(f"| measured ({protocol_name}, {len(rs)} seed{'s' * (len(rs) > 1)}) | {arch} | {k} "
                     f"| {statistics.mean(mses):.3f}{spread} | {rs[0]['parameters']:,} | {rs[0]['hidden_dim']} "
                     f"| {rs[0]['epochs']} | {statistics.mean(r['wall_s'] for r in rs) / 60:.1f} | {memory:.0f} |")
    for name, arch, k, mse in PUBLISHED:
        lines.append(f"| published (full protocol) | {name} | {k} | {mse:.2f} | | | 150 | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=sorted(PROTOCOLS), default="smoke")
    parser.add_argument("--archs", nargs="+", choices=sorted(set(ARCHS) | set(PAPER_ROWS)),
                        help="architectures (cpu) or paper rows (full, smoke)")
    parser.add_argument("--k", nargs="+", type=int)
    parser.add_argument("--seeds", nargs="+", type=int)
    parser.add_argument("--data-root", type=Path, default=None, help="INR folder (default: data/inrs-<protocol>)")
    parser.add_argument("--preset", default=None,
                        help="INR preset, instead of the protocol's (dws-1000: the INRs of results made before it)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "benchmarks")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--run-one", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_one:
        run_one(args.run_one[1:], Path(args.run_one[0]))
        return 0
    protocol = PROTOCOLS[args.protocol]
    if args.preset:
        protocol = {**protocol, "data": {**protocol["data"], "preset": args.preset}}
    data_root = args.data_root or ROOT / "data" / f"inrs-{args.protocol}"
    archs, ks, seeds = args.archs or protocol["archs"], args.k or protocol["k"], args.seeds or protocol["seeds"]
    machine = machine_name()
    runs = []
    for arch in archs:
        for k in ks:
            for seed in seeds:
                out = args.out / args.protocol / f"{arch}_k{k}_s{seed}"
                out.mkdir(parents=True, exist_ok=True)
                result_path = out / "result.json"
                fit_args = run_arguments(protocol, arch, k, seed, data_root, out)
                print(f"[{args.protocol}] {arch} k={k} seed={seed}", flush=True)
                subprocess.run([sys.executable, __file__, "--run-one", str(result_path), *fit_args], check=True)
                result = json.loads(result_path.read_text())
                runs.append({"arch": arch, "k": k, "seed": seed, **result})
                print(f"    test MSE x1e-2 {100 * result['test_mse']:.3f}, {result['parameters']:,} parameters, "
                      f"{result['wall_s'] / 60:.1f} min", flush=True)
    args.results.mkdir(parents=True, exist_ok=True)
    stem = args.results / f"dilation_{args.protocol}_{machine}"
    meta = {"protocol": args.protocol, "settings": protocol, "machine": machine, "platform": platform.platform(),
            "torch": torch.__version__, "runs": runs}
    stem.with_suffix(".json").write_text(json.dumps(meta, indent=2, default=list))
    table = summarize(runs, args.protocol, machine)
    stem.with_suffix(".md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
