#!/usr/bin/env bash
# The conversion Pareto table: plain MiniLM, its cuts to 1-5 layers, the conversion recipe at
# N = 2 / 5 / 10, K = 1 at N = 5, the 3-layer cut converted at N = 2 / 5, and an int8 copy of each,
# on sentiment, trec, pos and ner (5 composition seeds), then every shape timed side by side on this
# CPU (fp32 and int8) and the table, plot and verdicts written to benchmarks/results/convert-pareto.
#   bash benchmarks/run_convert_pareto.sh            # on a machine with a CUDA GPU: about 6 min there
#   DEVICE=cpu JOBS=2 bash benchmarks/run_convert_pareto.sh   # CPU only: many hours on two cores
# SKIP_TRAINING=1: the second step alone, re-timing and re-assembling a rows.jsonl already in OUT.
# The committed table's rows.jsonl (the first step, on one H100) is in the lab notebook commit 8c644a7.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/convert-pareto}
DEVICE=${DEVICE:-cuda}
if [ -z "${SKIP_TRAINING:-}" ]; then
    python3 benchmarks/experiments/convert_grid.py pareto+finetune --tasks sentiment,trec,pos,ner --int8 \
        --out "${RUNS:-runs/convert-pareto}/out" --runs "${RUNS:-runs/convert-pareto}" --device "$DEVICE" \
        --jobs "${JOBS:-16}"
    cp "${RUNS:-runs/convert-pareto}/out/rows.jsonl" "$OUT/rows.jsonl"
fi
python3 benchmarks/experiments/pareto.py --rows "$OUT/rows.jsonl" --out "$OUT"
