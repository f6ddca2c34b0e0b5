"""The OCE curve: test MSE vs k of GMN and DWS beside the published curve, and what each k costs.

    python benchmarks/oce_curve.py [--results DIR] [--machine NAME]

Reads the ``cpu`` protocol's runs (``dilation_cpu_<machine>.json``, benchmarks/dilation.py: GMN and
DWS at k = 1, 2, 4, 8, each k budget-matched to its k = 1, three seeds) and GMN's costs per k
(``oce_cost_<machine>.json``, benchmarks/oce_cost.py), and writes ``oce_curve_<machine>.md``, one
table with quality and cost side by side, and ``oce_curve_<machine>.png``: test MSE vs k (mean ±
std over seeds, the published full-protocol curve dashed beside) and GMN's costs vs k. Points not
run yet are said in the table and absent from the plot. benchmarks/oce_cost.py rebuilds both after
measuring, and with ``--report-only`` (the benchmark queue's last step).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from neuralgraph.bench.machine import machine_name
from neuralgraph.bench.published import DILATION_MSE
from neuralgraph.bench.runner import write_atomic
from neuralgraph.bench.tables import seeds_cell

RESULTS = Path(__file__).resolve().parent / "results"

ARCHS = ("gmn", "dws")
KS = (1, 2, 4, 8)
# GMN's costs in the table: oce_cost JSON key -> column
COST_COLUMNS = {"editor_parameters": "editor parameters", "hidden_dim": "hidden_dim",
                "train_s_per_epoch": "train s/epoch", "peak_rss_mb": "peak RSS (MB)",
                "edit_ms_per_inr_b32": "edit ms/INR (b32)", "render_members_ms_b256": "render k members ms (b256)",
                "render_merged_ms_b256": "render merged ms (b256)",
                "output_parameters_merged": "output parameters (merged)"}


def measured_curves(runs: list[dict]) -> dict[str, dict[int, list[float]]]:
    """Test MSE x1e-2 per architecture (GMN, DWS) and k, one value per recorded seed."""
    out: dict[str, dict[int, list[float]]] = {arch: {} for arch in ARCHS}
    for run in runs:
        if run["arch"] in ARCHS:
            out[run["arch"]].setdefault(run["k"], []).append(100 * run["test_mse"])
    return out


def published_curves() -> dict[str, dict[int, float]]:
    """The OCE paper's test MSE x1e-2 per architecture and k (full protocol)."""
    out: dict[str, dict[int, float]] = {arch: {} for arch in ARCHS}
    for name, arch, k, mse in DILATION_MSE:
        if name.startswith("OCE"):
            out[arch][k] = mse
    return out


def ratio(numerator: float | None, denominator: float | None) -> str:
    return f"{numerator / denominator:.2f}" if numerator is not None and denominator else ""


def number(value) -> str:
    if value is None:
        return ""
    return f"{value:,}" if isinstance(value, int) else f"{value:.1f}"


def table(measured: dict, costs: dict | None, machine: str) -> str:
    """One row per architecture and k: measured and published test MSE, their k/k1, GMN's costs."""
    published = published_curves()
    by_k = {row["k"]: row for row in costs["costs"]} if costs else {}
    cost_note = (f"GMN's costs (benchmarks/oce_cost.py): {costs['platform']}, torch {costs['torch']}, one thread, "
                 f"load average {costs['load']:.1f} while measured; medians of interleaved rounds on random SIRENs "
                 "2-32-32-1, training at batch 32 x 32 steps per epoch (validation not included)."
                 if costs else "GMN's costs: `oce_cost_<machine>.json` not measured yet (benchmarks/oce_cost.py).")
    lines = [f"# The OCE curve: test MSE vs k and what k costs, `cpu` protocol on `{machine}`", "",
             "Test MSE x1e-2 at the best-validation checkpoint, mean ± std (seeds), each k budget-matched to "
             "the architecture's k = 1 (benchmarks/dilation.py); k/k1: ratio of means. Published: the OCE "
             "paper's full protocol (55k INRs, 150 epochs), for the shape of the curve, not its level. " + cost_note,
             "", "| model | k | test MSE x1e-2 (seeds) | k/k1 | published | published k/k1 | "
             + " | ".join(COST_COLUMNS.values()) + " |", "|" + "---|" * (6 + len(COST_COLUMNS))]
    for arch in ARCHS:
        means = {k: statistics.mean(values) for k, values in measured[arch].items()}
        for k in KS:
            row = by_k.get(k, {}) if arch == "gmn" else {}
            cost_cells = " | ".join(number(row.get(key)) for key in COST_COLUMNS)
            lines.append(f"| {arch} | {k} | {seeds_cell(measured[arch].get(k, []))} | "
                         f"{ratio(means.get(k), means.get(1)) if k > 1 else ''} | {published[arch].get(k, '')} | "
                         f"{ratio(published[arch].get(k), published[arch].get(1)) if k > 1 else ''} | {cost_cells} |")
    return "\n".join(lines) + "\n"


def plot(measured: dict, costs: dict | None, machine: str, path: Path) -> None:
    """Left: test MSE vs k, measured (error bars) and published (dashed); right: GMN's costs vs k."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    published = published_curves()
    figure, (quality, cost) = plt.subplots(1, 2, figsize=(11, 4.2))
    for arch, colour in zip(ARCHS, ("tab:blue", "tab:orange")):
        ks = sorted(measured[arch])
        if ks:
            values = [measured[arch][k] for k in ks]
            quality.errorbar(ks, [statistics.mean(v) for v in values],
                             yerr=[statistics.stdev(v) if len(v) > 1 else 0.0 for v in values], marker="o",
                             capsize=3, color=colour,
                             label=f"{arch}, cpu protocol (seeds per k: {', '.join(str(len(v)) for v in values)})")
        quality.plot(sorted(published[arch]), [published[arch][k] for k in sorted(published[arch])], "--",
                     marker="s", mfc="none", color=colour, label=f"{arch}, published (full protocol)")
    quality.set(xlabel="k", ylabel="test MSE x1e-2", title="quality (mean ± std over seeds)")
    quality.legend(fontsize=7)
    if costs:
        rows = sorted(costs["costs"], key=lambda row: row["k"])
        for key in ("train_s_per_epoch", "edit_ms_per_inr_b32", "render_members_ms_b256", "render_merged_ms_b256"):
            cost.plot([row["k"] for row in rows], [row[key] for row in rows], marker="o", label=COST_COLUMNS[key])
        cost.set(yscale="log")
        cost.legend(fontsize=7)
    else:
        cost.text(0.5, 0.5, "costs not measured yet\n(benchmarks/oce_cost.py)", ha="center", transform=cost.transAxes)
    cost.set(xlabel="k", title=f"cost of GMN ({machine})")
    for axis in (quality, cost):
        axis.set(xscale="log", xticks=KS, xticklabels=KS)
        axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_report(results: Path = RESULTS, machine: str | None = None) -> Path:
    """Read the dilation and cost JSONs in ``results``, write ``oce_curve_<machine>.{md,png}`` there."""
    machine = machine or machine_name()
    runs_path, costs_path = results / f"dilation_cpu_{machine}.json", results / f"oce_cost_{machine}.json"
    measured = measured_curves(json.loads(runs_path.read_text())["runs"] if runs_path.exists() else [])
    costs = json.loads(costs_path.read_text()) if costs_path.exists() else None
    stem = results / f"oce_curve_{machine}"
    write_atomic(stem.with_suffix(".md"), table(measured, costs, machine))
    try:
        import matplotlib  # noqa: F401  (the bench extra)
    except ImportError:
        print(f"{stem.with_suffix('.png').name} not written: matplotlib is not installed "
              "(pip install -e '.[bench]'); the table is complete without it", file=sys.stderr)
    else:
        plot(measured, costs, machine, stem.with_suffix(".png"))
    return stem


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of the JSONs and of the outputs")
    parser.add_argument("--machine", help="the results' machine name (default: this machine's, e.g. cpu2)")
    args = parser.parse_args(argv)
    stem = write_report(args.results, args.machine)
    print(stem.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
