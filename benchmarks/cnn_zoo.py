"""Generalization prediction on a CNN zoo: Kendall's tau and R^2 of each metanetwork vs StatNN.

Fits every ``configs/examples/generalization_prediction/cnn_zoo_*.yaml`` on the zoo (``neuralgraph make-cnn-zoo``) through the CLI
(test at the best-validation checkpoint), and StatNN (Unterthiner et al., 2020): per-layer
weight and bias statistics (:func:`~neuralgraph.data.cnn_zoo.weight_statistics`), standardised,
into an MLP trained with the same data split, MSE loss and best-validation epoch. Writes a
markdown table with the zoo's size and accuracy spread to ``--out``.

    python benchmarks/cnn_zoo.py --zoo data/cnn_zoo --epochs 30 --out benchmarks/results/cnn_zoo.md
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torchmetrics
from torch import nn

from neuralgraph.bench.machine import cpu_description
from neuralgraph.data.cnn_zoo import ZOO_FOLDER, CnnZooDataset, weight_statistics
from neuralgraph.data.shards import read_manifest
from neuralgraph.training.cli import run_lightning_cli

CONFIG_PREFIX = "cnn_zoo_"  # of the example configs that read a make-cnn-zoo folder; a row is named by the rest
CONFIGS = sorted(Path(__file__).resolve().parent.parent.joinpath("configs", "examples", "generalization_prediction")
                 .glob(f"{CONFIG_PREFIX}*.yaml"))


def scores(prediction: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    return {"kendall_tau": float(torchmetrics.functional.kendall_rank_corrcoef(prediction, target)),
            "r2": float(torchmetrics.functional.r2_score(prediction, target))}


def statnn(zoo: str, epochs: int, hidden: int = 64, seed: int = 0) -> dict[str, float]:
    """StatNN's test scores: an MLP on weight statistics, kept at its best validation epoch."""
    torch.manual_seed(seed)
    data = {split: CnnZooDataset(zoo, split) for split in ("train", "val", "test")}
    features = {s: weight_statistics(d.weights, d.biases) for s, d in data.items()}
    mean, std = features["train"].mean(0), features["train"].std(0).clamp(min=1e-12)
    features = {s: (f - mean) / std for s, f in features.items()}
    model = nn.Sequential(nn.Linear(features["train"].shape[1], hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                          nn.ReLU(), nn.Linear(hidden, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-3)
    best, best_state = float("inf"), None
    for _ in range(epochs):
        for index in torch.randperm(len(data["train"])).split(32):
            loss = nn.functional.mse_loss(model(features["train"][index]).squeeze(-1), data["train"].accuracy[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            val = float(nn.functional.mse_loss(model(features["val"]).squeeze(-1), data["val"].accuracy))
        if val < best:
            best, best_state = val, {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    with torch.no_grad():
        return scores(model(features["test"]).squeeze(-1), data["test"].accuracy)


def metanet(config: Path, zoo: str, epochs: int, root: Path) -> dict[str, float]:
    cli = run_lightning_cli(["fit", "--config", str(config), "--data.init_args.root", zoo,
                             "--trainer.max_epochs", str(epochs), "--trainer.default_root_dir", str(root / config.stem),
                             "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
                             "--trainer.logger", "false"])
    metrics = cli.trainer.callback_metrics
    return {"kendall_tau": float(metrics["test/kendall_tau"]), "r2": float(metrics["test/r2"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", default="data/cnn_zoo")
    parser.add_argument("--epochs", type=int, default=30, help="training epochs of every model (StatNN too)")
    parser.add_argument("--statnn-seeds", type=int, default=5, help="StatNN initialisation seeds (mean and std)")
    parser.add_argument("--configs", nargs="+", type=Path, default=CONFIGS)
    parser.add_argument("--runs", type=Path, default=Path("runs/bench_cnn_zoo"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/cnn_zoo.md"))
    args = parser.parse_args()
    manifest = read_manifest(args.zoo, ZOO_FOLDER)
    data = {split: CnnZooDataset(args.zoo, split) for split in ("train", "val", "test")}
    accuracy = torch.cat([d.accuracy for d in data.values()])
    rows = []
    start = time.perf_counter()
    runs = [statnn(args.zoo, args.epochs, seed=seed) for seed in range(args.statnn_seeds)]
    rows.append((f"StatNN (MLP on weight statistics), mean of {args.statnn_seeds} seeds",
                 {key: sum(r[key] for r in runs) / len(runs) for key in runs[0]},
                 (time.perf_counter() - start) / len(runs)))
    spread = {key: torch.tensor([r[key] for r in runs]).std().item() for key in runs[0]}
    for config in args.configs:
        start = time.perf_counter()
        rows.append((config.stem.removeprefix(CONFIG_PREFIX), metanet(config, args.zoo, args.epochs, args.runs), time.perf_counter() - start))
    q = torch.quantile(accuracy, torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0])).tolist()
    lines = [
        f"# Generalization prediction on a CNN zoo ({manifest['networks']} networks x "
        f"{len(manifest['checkpoint_epochs'])} checkpoints, epochs {manifest['checkpoint_epochs']})",
        "",
        f"Zoo: `neuralgraph make-cnn-zoo` (layout 1-{manifest['channels']}-{manifest['channels']}-"
        f"{manifest['channels']}-10, {manifest['train_size']} MNIST train / {manifest['test_size']} test images, "
        f"{manifest['source']} MNIST). Entries train/val/test: {len(data['train'])}/{len(data['val'])}/"
        f"{len(data['test'])} (split by network). Test accuracy quantiles 0/25/50/75/100%: "
        + " / ".join(f"{v:.3f}" for v in q) + ".",
        f"Every model trains {args.epochs} epochs and is tested at its best validation epoch; "
        f"{cpu_description()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads.",
        "",
        f"StatNN's std over its seeds: Kendall tau {spread['kendall_tau']:.3f}, R^2 {spread['r2']:.3f} "
        "(per seed: " + ", ".join(f"{r['kendall_tau']:.3f}" for r in runs) + "). The metanetworks: seed 0.",
        "",
        "| model | Kendall tau | R^2 | time per run (s) |",
        "|---|---|---|---|",
    ] + [f"| {name} | {r['kendall_tau']:.3f} | {r['r2']:.3f} | {t:.1f} |" for name, r, t in rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
