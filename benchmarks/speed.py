"""All speed ratios of the project in one run and one markdown table, with the machine described.

    python benchmarks/speed.py [--quick] [--out benchmarks/results/speed_<machine>.md]
    python benchmarks/speed.py --only-baseline [--metanets gmn ng_gnn] --out ...

Runs benchmarks/graph_build.py, inr_fit.py and metanet_speed.py in this process, one after the
other (each prints its own detail), then prints the summary table and writes it to ``--out``.
``--only-baseline`` runs only metanet_speed.py's comparison of the message-passing metanetworks'
automatic path with the general path (short enough for a quiet window) and replaces those rows of
an existing ``--out`` table, keeping the others.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from neuralgraph.bench import load_script
from neuralgraph.bench.machine import machine_description

HERE = Path(__file__).resolve().parent
graph_build, inr_fit, metanet_speed = (load_script(HERE / f"{name}.py") for name in ("graph_build", "inr_fit",
                                                                                     "metanet_speed"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a sanity run, noisier ratios)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only-baseline", action="store_true",
                        help="only the message-passing metanets' automatic path against their general path")
    parser.add_argument("--metanets", nargs="+", default=list(metanet_speed.BASELINE_METANETS),
                        help="with --only-baseline: the metanets compared")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compile", action="store_true",
                        help="with --only-baseline: also the layers compiled by torch.compile (metanet_speed.py --compile)")
    parser.add_argument("--bf16", action="store_true",
                        help="with --only-baseline: also under bfloat16 autocast (metanet_speed.py --bf16)")
    args = parser.parse_args(argv)
    if args.only_baseline:
        meta = metanet_speed.main(["--only-baseline", "--repeats", str(args.repeats), "--baseline-metanets",
                                   *args.metanets, *(["--compile"] if args.compile else []),
                                   *(["--bf16"] if args.bf16 else [])])
        return write_rows(baseline_rows(meta), args.out, meta["threads"], replace=True)
    quick = args.quick
    graph = graph_build.main(["--networks", "2000" if quick else "10000", "--repeats", "2" if quick else "3"])
    fit = inr_fit.main(["--inrs", "32" if quick else "128", "--loop-inrs", "4" if quick else "8",
                        "--steps", "10" if quick else "50"])
    meta = metanet_speed.main(["--repeats", "1" if quick else "5"] + (["--widths", "32"] if quick else []))

    rows = [
        ("graph build, 10k MLPs (2,32,32,1)" if not quick else "graph build, 2k MLPs (2,32,32,1)",
         "batched mlp_to_graph", f"{graph['batched_s']:.3f} s", "Data + Batch.from_data_list",
         f"{graph['loop_s']:.3f} s", graph["ratio"]),
        (f"INR fitting ({fit['threads']} thread)", "fit_inrs (auto)", f"{fit['batched_us_per_inr_step']:.0f} us/INR-step",
         "per-network nn.Module + Adam", f"{fit['loop_us_per_inr_step']:.0f} us/INR-step", fit["ratio"]),
        ("GMN layers, batch 32", "sparse scatter", f"{meta['sparse_rate']:.1f} graphs/s", "dense [B,N,N,d]",
         f"{meta['dense_rate']:.1f} graphs/s", meta["sparse_rate"] / meta["dense_rate"]),
    ]
    for key, row in meta["nfn"].items():
        name, width = key.rsplit("_C", 1)
        rows.append((f"{name} layers C={width}, batch 32", "dense path", f"{row['dense']:.1f} graphs/s",
                     f"nfn {row['peer']}", f"{row['nfn']:.1f} graphs/s", row["dense"] / row["nfn"]))
        rows.append((f"{name} layers C={width}, batch 32", "dense path", f"{row['dense']:.1f} graphs/s",
                     "general index path", f"{row['general']:.1f} graphs/s", row["dense"] / row["general"]))
    gmn_rate = meta["rates"]["gmn"]
    for name, rate in sorted(meta["rates"].items()):
        rows.append((f"{name} fwd+bwd, batch 32", name, f"{rate:.1f} graphs/s", "gmn", f"{gmn_rate:.1f} graphs/s",
                     rate / gmn_rate))
    return write_rows(rows + baseline_rows(meta), args.out, meta["threads"], title_suffix=" (quick run)" if quick else "")


def baseline_rows(meta: dict) -> list[tuple]:
    """Rows of metanet_speed.py's comparison of the message-passing metanets' paths: the path chosen
    automatically (and the compiled layers and bfloat16 autocast, when timed), each against the general path."""
    rows = []
    for name, row in meta["baseline"].items():
        label = f"{name} d={row['hidden_dim']} fwd+bwd, batch 32"
        for path, ours in (("new", "automatic (dense blocks)"), ("compiled", "compiled layers (torch.compile)"),
                           ("bf16", "automatic, bf16 autocast"),
                           ("compiled_bf16", "compiled layers, bf16 autocast")):
            if path in row:
                rows.append((label, ours, f"{row[path]:.1f} graphs/s", "general path", f"{row['general']:.1f} graphs/s",
                             row[path] / row["general"]))
    return rows


def write_rows(rows: list[tuple], out, threads: int, title_suffix: str = "", replace: bool = False) -> int:
    """Print the table of ``rows`` and write it to ``out``; ``replace``: only swap the rows of the same
    benchmark and contender in the existing ``out``, keeping its other rows."""
    lines = [f"| {a} | {b} | {c} | {d} | {e} | {r:.2f}x |" for a, b, c, d, e, r in rows]
    if replace:
        if out is None or not out.exists():
            raise SystemExit(f"--only-baseline replaces rows of an existing table; {out} does not exist")
        keys = {tuple(line.split(" | ")[:2]) for line in lines}
        kept = [line for line in out.read_text().splitlines() if tuple(line.split(" | ")[:2]) not in keys]
        text = "\n".join(kept + lines) + "\n"
    else:
        text = "\n".join([f"# Speed ratios{title_suffix}", "", machine_description(),
                          f"metanetworks: {threads} thread, medians of interleaved repetitions", "",
                          "| benchmark | ours | measured | baseline | measured | ratio |", "|---|---|---|---|---|---|",
                          *lines]) + "\n"
    print("\n" + text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
