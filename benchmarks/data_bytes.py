"""Which CPU makes which bytes: the same small generated folders under the kernel choices torch lets one force.

A folder rewritten on one machine is byte-identical, but trained data runs through torch's CPU kernels,
which torch and its libraries pick by the CPU: ATen's vectorised kernels by instruction set
(``ATEN_CPU_CAPABILITY``), MKL's matrix products by vendor and instruction set (``MKL_ENABLE_INSTRUCTIONS``
caps it, ``MKL_CBWR`` fixes a reproducible branch), oneDNN's convolutions by instruction set
(``ONEDNN_MAX_CPU_ISA``). Each folder of :data:`FOLDERS` (a 4-network transformer zoo, a 4-network
Small-CNN-Zoo preset zoo, 4 INRs; on the MNIST subset embedded in the package, one thread) is written
in a fresh process under each variant of :data:`VARIANTS`, and the sha256 of its data files recorded
per machine in ``benchmarks/results/data_bytes.json``; the markdown beside it puts the machines side
by side. Two machines whose row of a variant agrees build the same zoos under it (docs/datasets.md).

    python benchmarks/data_bytes.py                  # about 2 minutes; adds or replaces this machine's rows
    python benchmarks/data_bytes.py --folders inrs --variants "as is" "written again" --out /tmp/bytes
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from neuralgraph.bench.machine import cpu_description
from neuralgraph.bench.runner import write_atomic

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "data_bytes"
SMALL = ["--source", "embedded", "--threads", "1"]
# folder -> the neuralgraph command that writes it into the folder given after it
FOLDERS = {
    "transformer zoo": ["make-transformer-zoo", "--recipe", "small-transformer-zoo", "--networks", "4", "--epochs", "1",
                        "2", "--train-size", "2000", "--test-size", "500", "--batch-size", "128", "--shard-size", "4",
                        *SMALL, "--out"],
    "cnn zoo": ["make-cnn-zoo", "--preset", "small-cnn-zoo", "--networks", "4", "--epochs", "1", "2", "--train-size",
                "2000", "--test-size", "500", "--batch-size", "128", "--shard-size", "4", *SMALL, "--out"],
    "inrs": ["make-inrs", "--split", "train", "--limit", "4", "--shard-size", "4", *SMALL, "--out"],
}
# variant -> the environment it adds; "written again" checks that the folder is deterministic at all
VARIANTS = {
    "as is": {},
    "written again": {},
    "ATen AVX2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "MKL and oneDNN at most AVX2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "MKL CNR AVX2": {"MKL_CBWR": "AVX2"},
    "ATen AVX2, MKL CNR COMPATIBLE, oneDNN at most AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE",
                                                           "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")


def folder_bytes(folder: Path) -> str:
    """The sha256 of a written folder's data: of every file but ``manifest.json``, by name."""
    files = sorted(path for path in folder.iterdir() if path.is_file() and path.name != "manifest.json")
    if not files:
        raise FileNotFoundError(f"{folder}: no data files were written")
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.name}:{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


def write_folder(name: str, variant: str, scratch: Path) -> dict:
    """Write folder ``name`` under ``variant`` in a fresh process; its record (sha256, seconds).

    Raises:
        subprocess.CalledProcessError: the command failed (its output is shown).
    """
    out = scratch / f"{name}-{variant}".replace(" ", "_").replace(",", "")
    environment = {key: value for key, value in os.environ.items() if key not in KERNEL_VARIABLES}
    environment.update(VARIANTS[variant], OMP_NUM_THREADS="1")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "neuralgraph.cli", *FOLDERS[name], str(out)], env=environment, check=True,
                   stdout=subprocess.DEVNULL)
    return {"folder": name, "variant": variant, "environment": VARIANTS[variant], "sha256": folder_bytes(out),
            "seconds": round(time.perf_counter() - start, 1)}


def table(records: list[dict]) -> str:
    """The markdown: one row per (folder, variant), one column per machine, each cell the sha256's first
    12 digits, ``=`` where it equals the same machine's ``as is``."""
    machines = list(dict.fromkeys(record["machine"] for record in records))
    cell = {(r["machine"], r["folder"], r["variant"]): r["sha256"] for r in records}
    lines = ["# Which CPU makes which bytes", "",
             "Written by `benchmarks/data_bytes.py` from `data_bytes.json` beside this file: the sha256 of each small "
             "folder (first 12 digits) written in a fresh process under each kernel choice, per machine (CPU, torch); "
             "`= as is` where a variant left the machine's bytes unchanged. Machines whose cells of one variant agree "
             "build the same data under it. docs/datasets.md reads it.", "",
             "| folder | variant | " + " | ".join(machines) + " |",
             "|---|---|" + "---|" * len(machines)]
    for name in FOLDERS:
        for variant in VARIANTS:
            cells = []
            for machine in machines:
                sha = cell.get((machine, name, variant))
                same = variant != "as is" and sha is not None and sha == cell.get((machine, name, "as is"))
                cells.append("not run" if sha is None else f"`{sha[:12]}`" + (" = as is" if same else ""))
            if any(c != "not run" for c in cells):
                lines.append(f"| {name} | {variant} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folders", nargs="+", choices=tuple(FOLDERS), default=list(FOLDERS))
    parser.add_argument("--variants", nargs="+", choices=tuple(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--out", type=Path, default=RESULTS, help="results stem (.json and .md are written)")
    args = parser.parse_args(argv)
    machine = f"{cpu_description()}, torch {torch.__version__}"
    json_path, md_path = args.out.with_suffix(".json"), args.out.with_suffix(".md")
    records = json.loads(json_path.read_text())["records"] if json_path.exists() else []
    print(machine, flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.folders:
            for variant in args.variants:
                record = {"machine": machine, **write_folder(name, variant, Path(scratch))}
                records = [r for r in records if (r["machine"], r["folder"], r["variant"]) != (machine, name, variant)]
                records.append(record)
                print(f"{name}, {variant}: {record['sha256'][:12]} ({record['seconds']} s)", flush=True)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(json_path, json.dumps({"records": records}, indent=1))
                write_atomic(md_path, table(records))
    print(md_path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
