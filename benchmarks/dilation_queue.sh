#!/bin/sh
# The evidence queue of docs/benchmarks.md in priority order, one run at a time, resumable:
# rerun it to continue (recorded runs are skipped, a killed fit resumes from its last.ckpt).
#   nohup sh benchmarks/dilation_queue.sh >> benchmarks/results/dilation_queue.log 2>&1 &
# A failed run is retried twice (e.g. a module being edited in the working tree) before the queue stops.
cd "$(dirname "$0")/.." || exit 1
# the shared MNIST folder beside the checkout, as the Makefile finds it (else the package's own sources)
if [ -z "$NEURALGRAPH_MNIST" ] && [ -d ../shared/data/mnist ]; then
    NEURALGRAPH_MNIST="$(cd ../shared/data/mnist && pwd)"
    export NEURALGRAPH_MNIST
fi
dilation() {
    for attempt in 1 2 3; do
        .venv/bin/python benchmarks/dilation.py --protocol "$@" && return 0
        sleep 60
    done
    return 1
}
# the OCE curve (GMN and DWS, k = 1, 2, 4, 8, three seeds); the ablation's decoder variants; the
# table's remaining rows; GMN trained in bf16-mixed; the first ensemble of eight k = 1 editors
# (seeds 0-7) and the ablation report; cpu-large (DWS first, it is ~4x cheaper than GMN); then the
# other two ensembles (seeds 8-23) and the report again; then seeds 1 and 2 of the table's
# single-seed systems, cheapest first
dilation cpu --archs gmn dws --k 1 2 4 8 --seeds 0 1 2 || exit 1
dilation cpu --archs gmn_coupled gmn_tied --k 8 --seeds 0 1 2 || exit 1
dilation cpu --archs scalegmn_b ng_gnn_probe16 gmn_grad16 scalegmn_b_grad16 --k 1 8 --seeds 0 || exit 1
dilation cpu --archs gmn_bf16 --k 1 8 --seeds 0 || exit 1
dilation cpu --archs gmn --k 1 --seeds 3 4 5 6 7 || exit 1
.venv/bin/python benchmarks/oce_ablation.py && .venv/bin/python benchmarks/oce_cost.py --report-only
dilation cpu-large --archs dws || exit 1
dilation cpu-large || exit 1
dilation cpu || exit 1
.venv/bin/python benchmarks/oce_ablation.py
dilation cpu --archs nft nfn_np nfn_hnp ng_t scalegmn scalegmn_b ng_gnn --k 1 8 --seeds 1 2 || exit 1
