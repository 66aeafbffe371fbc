#!/bin/bash
# The one-unmuxed-layer rows (benchmarks/README.md, "The stability targets") against the cuts and
# int8 copies of their family, every shape timed side by side in one run (reproduce_frontier.py).
# Needs the table's checkpoints and those of the re-runs under runs/ (they are not committed). A
# stage is reused only by the code that trained it: CODE=a checkout of the commit that fine-tuned
# the cuts (727a5a6 for the table's) runs with that code's package, else the cuts train again.
#   CODE=runs/reproduce-paper-full/code-727a5a6 bash benchmarks/run_frontier_unmuxed.sh [bert|electra]
set -euo pipefail
cd "$(dirname "$0")/.."
FAMILY=${1:-bert}
RESULTS=${RESULTS:-benchmarks/results/reproduce/paper-full}
variants=()
add() {  # add RUNS RESULTS_SUBFOLDER: every N the re-run has results for
    for folder in "$RESULTS/$2"/n*; do
        [ -f "$folder/results.json" ] && variants+=(--variant "k1=$1:$folder")
    done
}
if [ "$FAMILY" = bert ]; then
    add runs/unmuxed-k1 unmuxed-k1
    add runs/unmuxed-k1-token unmuxed-k1-token
else
    add runs/unmuxed-k1-electra unmuxed-k1-electra
    add runs/unmuxed-k1-electra-token unmuxed-k1-electra-token
fi
[ -n "${CODE:-}" ] && export PYTHONPATH="$CODE/src"
OUT_DIR="$RESULTS/frontier-$FAMILY-k1"
mkdir -p "$OUT_DIR"
python3 benchmarks/experiments/reproduce_frontier.py --runs runs/reproduce-paper-full --results "$RESULTS" \
    --family "$FAMILY" --keep 2,1 --out "$OUT_DIR" "${variants[@]}" "${@:2}" | tee "$OUT_DIR/log.txt"
