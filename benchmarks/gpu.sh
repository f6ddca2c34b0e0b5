#!/usr/bin/env bash
# The device checks in one script, for a GPU machine with torch, PyG, lightning and torchmetrics already
# installed and no internet:
#
#   bash benchmarks/gpu.sh [--smoke]
#
# 0. installs this checkout without its dependencies (torch is never touched; a failed install falls back
#    to running from the source tree) and records the versions: env.json, install.log;
# a. the tests that take a device, on $NEURALGRAPH_DEVICE (default cuda), CPU-only tests skipped with
#    their reason: tests.xml (JUnit), tests.log;
# b. benchmarks/metanet_speed.py per architecture: graphs/s and peak memory at batch 32 and 256, float32
#    and bf16-mixed: metanet_speed_<arch>.json;
# c. the SIREN fitter's torch path: INR-steps/s: inr_fit.json;
# d. a slice of the full dilation protocol, GMN at k = 1 and 8: s/epoch and the extrapolated 150-epoch
#    time, beside the published 4-10 h per run on an A100: dilation_slice.json;
# e. the CNN zoo trainer: network-epochs/s: zoo.json.
#
# Every result file is written to $OUT (default benchmarks/results/gpu_<date>) as soon as its step ends; a
# step that fails (or outlives its time limit, TIMEOUT_<STEP> seconds) leaves its file holding the failure
# and its log's last lines, and the next step runs. summary.tsv grows a line per step. --smoke runs
# every step at toy sizes (tests/test_gpu_script.py runs it on the CPU with NEURALGRAPH_DEVICE=cpu);
# GPU_STEPS="tests zoo" runs those steps only (of install, tests, metanet_speed, inr_fit, dilation_slice,
# zoo), e.g. to rerun one within a machine's time limit.
set -euo pipefail

SMOKE=0
for argument in "$@"; do
    case "$argument" in
        --smoke) SMOKE=1 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "gpu.sh: unknown argument $argument (expected --smoke)" >&2; exit 2 ;;
    esac
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python}"
export NEURALGRAPH_DEVICE="${NEURALGRAPH_DEVICE:-cuda}"
DEVICE="$NEURALGRAPH_DEVICE"
OUT="${OUT:-benchmarks/results/gpu_$(date +%Y%m%d_%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
STEPS="${GPU_STEPS:-install tests metanet_speed inr_fit dilation_slice zoo}"

# wanted STEP: whether STEP is one of $STEPS
wanted() {
    [[ " $STEPS " == *" $1 "* ]]
}

# record_failure FILE NAME STATUS LOG: FILE (when the step left none, or an empty one) says the step failed
record_failure() {
    local file="$1" name="$2" status="$3" log="$4"
    if [[ ! -s "$file" ]]; then
        "$PYTHON" - "$file" "$name" "$status" "$log" <<'EOF'
import json, sys
from pathlib import Path
file, name, status, log = sys.argv[1:]
tail = Path(log).read_text(errors="replace").splitlines()[-40:] if Path(log).exists() else []
Path(file).write_text(json.dumps({"step": name, "status": status, "log_tail": tail}, indent=1) + "\n")
EOF
    fi
}

# step NAME SECONDS FILE COMMAND...: runs COMMAND (output in NAME.log) for at most SECONDS (a shell function:
# without a limit); FILE is its result. A failed step whose FILE holds something keeps it (the failing tests'
# report, the configurations measured before a crash); one that left nothing gets the failure recorded there.
step() {
    local name="$1" seconds="$2" file="$3"
    shift 3
    local log="$OUT/$name.log" start=$SECONDS status=ok code=0
    echo "== $name ($*)"
    if declare -F "$1" >/dev/null; then
        "$@" >"$log" 2>&1 || code=$?
    else
        timeout --kill-after=30 "$seconds" "$@" >"$log" 2>&1 || code=$?
    fi
    if [[ $code -eq 124 || $code -eq 137 ]]; then
        status="timed out after ${seconds}s"
    elif [[ $code -ne 0 ]]; then
        status="failed (exit $code)"
    elif [[ ! -s "$file" ]]; then
        status="failed (no result file)"
    fi
    if [[ $status != ok ]]; then
        record_failure "$file" "$name" "$status" "$log"
    fi
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - start))" "$(basename "$file")" >>"$OUT/summary.tsv"
    echo "   $status in $((SECONDS - start)) s -> $file"
}

printf 'step\tstatus\tseconds\tfile\n' >"$OUT/summary.tsv"

# 0. the package, installed without touching torch (or any other installed package)
install_package() {
    if "$PYTHON" -c "import neuralgraph, pathlib, sys; sys.exit(pathlib.Path(neuralgraph.__file__).resolve().parents[1] != pathlib.Path('$ROOT'))" 2>/dev/null; then
        echo "neuralgraph already imports from $ROOT: not reinstalled"
    elif "$PYTHON" -m pip install --no-deps --no-build-isolation -e "$ROOT"; then
        echo "installed with pip --no-deps --no-build-isolation -e"
    else
        echo "pip install failed: running from the source tree (PYTHONPATH)"
    fi
    "$PYTHON" -m pip check || true  # missing dependencies, said here; the steps that need them fail alone
    "$PYTHON" - "$OUT/env.json" "$ROOT" <<'EOF'
import importlib, json, platform, sys
from pathlib import Path
versions = {}
for name in ("torch", "torch_geometric", "lightning", "torchmetrics", "jsonargparse", "safetensors", "numpy",
             "pytest", "hypothesis", "scipy", "neuralgraph"):
    try:
        module = importlib.import_module(name)
        versions[name] = getattr(module, "__version__", "present")
    except Exception as error:  # recorded, not fatal: the steps that need it fail alone
        versions[name] = f"missing ({type(error).__name__}: {error})"
import torch
cuda = torch.cuda.is_available()
Path(sys.argv[1]).write_text(json.dumps({
    "root": sys.argv[2], "python": sys.version.split()[0], "platform": platform.platform(), "versions": versions,
    "cuda": cuda, "cuda_version": torch.version.cuda, "devices": [torch.cuda.get_device_name(i) for i in
                                                                  range(torch.cuda.device_count())] if cuda else [],
    "neuralgraph_device": __import__("os").environ.get("NEURALGRAPH_DEVICE")}, indent=1) + "\n")
EOF
}
if wanted install; then
    step install "${TIMEOUT_INSTALL:-300}" "$OUT/env.json" install_package
fi
if ! "$PYTHON" -c "import neuralgraph" 2>/dev/null; then
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi

# a. the tests that take a device (and the CPU-only ones, skipped with their reason off the CPU)
if [[ $SMOKE -eq 1 ]]; then
    TESTS=(tests/test_heads.py tests/test_inr.py -m device -k "read_the_batch or differentiable or autograd")
else
    TESTS=(tests -m "device or cpu_only")
fi
if wanted tests; then
    step tests "${TIMEOUT_TESTS:-420}" "$OUT/tests.xml" \
        "$PYTHON" -m pytest -q -rs -p no:cacheprovider --junitxml "$OUT/tests.xml" "${TESTS[@]}"
fi

# b. training-step throughput and peak memory per architecture (every registered metanetwork)
if wanted metanet_speed; then
    if [[ $SMOKE -eq 1 ]]; then
        SPEED=(--batches 2 --precisions 32 bf16-mixed --hidden-dim 8 --num-layers 1 --repeats 1)
    else
        SPEED=(--batches 32 256 --precisions 32 bf16-mixed --repeats 5)
    fi
    names="$("$PYTHON" -c "from neuralgraph.nn import METANETS; print(*sorted(METANETS))" 2>"$OUT/metanet_speed.log")" || true
    read -r -a ARCHS <<<"$names"
    ARCH_GROUPS=()
    if [[ ${#ARCHS[@]} -eq 0 ]]; then
        record_failure "$OUT/metanet_speed.json" metanet_speed "no architectures: neuralgraph.nn did not import" \
            "$OUT/metanet_speed.log"
        printf 'metanet_speed\tfailed (no architectures)\t0\tmetanet_speed.json\n' >>"$OUT/summary.tsv"
    elif [[ $SMOKE -eq 1 ]]; then
        ARCH_GROUPS=("${ARCHS[*]}")  # one process for all: the step's plumbing at toy size
    else
        ARCH_GROUPS=("${ARCHS[@]}")  # one process per architecture: its own memory, and a crash stays its own
    fi
    for group in "${ARCH_GROUPS[@]}"; do
        read -r -a archs <<<"$group"
        if [[ ${#archs[@]} -gt 1 ]]; then name="metanet_speed"; else name="metanet_speed_${archs[0]}"; fi
        step "$name" "${TIMEOUT_SPEED:-120}" "$OUT/metanet_speed_${archs[-1]}.json" \
            "$PYTHON" benchmarks/metanet_speed.py --only-rates --device "$DEVICE" --archs "${archs[@]}" \
            "${SPEED[@]}" --json-dir "$OUT"
        for arch in "${archs[@]}"; do  # an architecture the process did not reach
            record_failure "$OUT/metanet_speed_$arch.json" "$name" "not measured" "$OUT/$name.log"
        done
    done
fi

# c. the SIREN fitter's torch path
if [[ $SMOKE -eq 1 ]]; then
    FIT=(--inrs 4 --loop-inrs 1 --steps 2 --repeats 1)
else
    FIT=(--inrs 1024 --loop-inrs 4 --steps 50 --repeats 3)
fi
if wanted inr_fit; then
    step inr_fit "${TIMEOUT_INR_FIT:-180}" "$OUT/inr_fit.json" \
        "$PYTHON" benchmarks/inr_fit.py --device "$DEVICE" --backends torch "${FIT[@]}" --json "$OUT/inr_fit.json"
fi

# d. the full dilation protocol's GMN at k = 1 and 8, a slice
if [[ $SMOKE -eq 1 ]]; then
    SLICE=(--limit-train 16 --limit-val 8 --fit-steps 2 --metanet-config '{"hidden_dim": 8, "num_layers": 1}')
else
    SLICE=(--limit-train 2048 --limit-val 512 --fit-steps 20)
fi
if wanted dilation_slice; then
    step dilation_slice "${TIMEOUT_DILATION:-420}" "$OUT/dilation_slice.json" \
        "$PYTHON" benchmarks/device_slices.py dilation --device "$DEVICE" --arch gmn --k 1 8 --epochs 2 \
        "${SLICE[@]}" --json "$OUT/dilation_slice.json"
fi

# e. the CNN zoo trainer
if [[ $SMOKE -eq 1 ]]; then
    ZOO=(--networks 4 --train-size 64 --test-size 32 --zoo-epochs 1)
else
    ZOO=(--networks 256 --train-size 2000 --test-size 500 --zoo-epochs 1 3)
fi
if wanted zoo; then
    step zoo "${TIMEOUT_ZOO:-300}" "$OUT/zoo.json" \
        "$PYTHON" benchmarks/device_slices.py zoo --device "$DEVICE" "${ZOO[@]}" --json "$OUT/zoo.json"
fi

echo "results in $OUT:"
column -t -s $'\t' "$OUT/summary.tsv" 2>/dev/null || cat "$OUT/summary.tsv"
