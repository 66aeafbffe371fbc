#!/bin/bash
# Composition churn against speed for the paper's table: every MUX row, BERT's cuts and the
# table's re-runs with composition consistency or one unmuxed layer, timed side by side in one run
# of their fine-tuned checkpoints, then drawn by plot_churn.py into RESULTS (churn.png / .md / .json).
# Inputs: those runs' checkpoints under runs/ (never committed) and the results.json files of the
# table, its cuts and re-runs, which are in the lab notebook commit 8c644a7 only.
#   bash benchmarks/run_churn.sh
#   REUSE_TIMING=1 bash benchmarks/run_churn.sh   # re-plot from OUT_DIR/timing.json (8c644a7 has it)
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS:-benchmarks/results/reproduce/paper-full}
TABLE_RUNS=${TABLE_RUNS:-runs/reproduce-paper-full}
OUT_DIR="$RESULTS/churn"
models=()
for row in bert bert-cut1 bert-cut2 mux-bert-2 mux-bert-5 mux-bert-10 mux-electra-2 mux-electra-5 mux-electra-10 \
           tmux-2 tmux-5 tmux-10 prefix-2 prefix-5 prefix-10 contextual-2 contextual-5 contextual-10; do
    models+=(--model "$TABLE_RUNS/$row/3-sentiment")
done
for checkpoint in runs/consistency-rule/mux-bert-2/3-sentiment runs/consistency-rule/mux-bert-5/3-sentiment \
                  runs/consistency-longer/mux-bert-2/3-sentiment runs/consistency-longer/mux-bert-5/3-sentiment \
                  runs/consistency-contextual/contextual-5/3-trec \
                  runs/unmuxed-k1/mux-bert-2/3-sentiment runs/unmuxed-k1/mux-bert-5/3-sentiment \
                  runs/unmuxed-k1/mux-bert-10/3-sentiment \
                  runs/unmuxed-k1-electra/mux-electra-2/3-sentiment runs/unmuxed-k1-electra/mux-electra-5/3-sentiment \
                  runs/unmuxed-k1-consistency/mux-bert-2/3-trec; do
    models+=(--model "$checkpoint")
done
mkdir -p "$OUT_DIR"
if [ -z "${REUSE_TIMING:-}" ]; then
    python3 -m muxplm bench throughput --threads 1 --clock process --batch-size 128 --seq-len 48 --trials 5 \
        --batches 3 "${models[@]}" --output "$OUT_DIR/timing.json"
fi
variant() { echo "$1=$2:$(IFS=,; shift 2; echo "$*")"; }
python3 benchmarks/experiments/plot_churn.py --table "$RESULTS/results.json" \
    --cuts "$RESULTS/frontier-bert/results.json" --speeds "$OUT_DIR/timing.json" --output-dir "$OUT_DIR" \
    --variant "$(variant 'consistency 4' mux-bert-2 "$RESULTS"/consistency-rule/n2/results.json "$RESULTS"/consistency-rule/n2-trec/results.json)" \
    --variant "$(variant 'consistency 4' mux-bert-5 "$RESULTS"/consistency-rule/n5/results.json "$RESULTS"/consistency-rule/n5-trec/results.json)" \
    --variant "$(variant 'consistency 4, 4,500 steps' mux-bert-2 "$RESULTS"/consistency-longer/n2-{sentiment,trec}/results.json)" \
    --variant "$(variant 'consistency 4, 4,500 steps' mux-bert-5 "$RESULTS"/consistency-longer/n5-{sentiment,trec}/results.json)" \
    --variant "$(variant 'trec with consistency 4' contextual-5 "$RESULTS"/consistency-contextual/n5-trec/results.json)" \
    --variant "$(variant '1 unmuxed layer' mux-bert-2 "$RESULTS"/unmuxed-k1/n2/results.json "$RESULTS"/unmuxed-k1-token/n2/results.json)" \
    --variant "$(variant '1 unmuxed layer' mux-bert-5 "$RESULTS"/unmuxed-k1/n5/results.json "$RESULTS"/unmuxed-k1-token/n5/results.json)" \
    --variant "$(variant '1 unmuxed layer' mux-bert-10 "$RESULTS"/unmuxed-k1/n10/results.json "$RESULTS"/unmuxed-k1-token/n10/results.json)" \
    --variant "$(variant '1 unmuxed layer, trec with consistency 4' mux-bert-2 "$RESULTS"/unmuxed-k1/n2/results.json "$RESULTS"/unmuxed-k1-token/n2/results.json "$RESULTS"/unmuxed-k1-consistency/n2-trec/results.json)" \
    --variant "$(variant '1 unmuxed layer, trec with consistency 2' mux-bert-2 "$RESULTS"/unmuxed-k1/n2/results.json "$RESULTS"/unmuxed-k1-token/n2/results.json "$RESULTS"/unmuxed-k1-consistency2/n2-trec/results.json)" \
    --variant "$(variant '1 unmuxed layer, trec with consistency 8' mux-bert-2 "$RESULTS"/unmuxed-k1/n2/results.json "$RESULTS"/unmuxed-k1-token/n2/results.json "$RESULTS"/unmuxed-k1-consistency8/n2-trec/results.json)" \
    --variant "$(variant '1 unmuxed layer, trec with consistency 2' mux-bert-5 "$RESULTS"/unmuxed-k1/n5/results.json "$RESULTS"/unmuxed-k1-token/n5/results.json "$RESULTS"/unmuxed-k1-consistency2/n5-trec/results.json)" \
    --variant "$(variant '1 unmuxed layer, trec with consistency 4' mux-bert-5 "$RESULTS"/unmuxed-k1/n5/results.json "$RESULTS"/unmuxed-k1-token/n5/results.json "$RESULTS"/unmuxed-k1-consistency/n5-trec/results.json)" \
    --variant "$(variant '1 unmuxed layer' mux-electra-2 "$RESULTS"/unmuxed-k1-electra{,-token}/n2/results.json)" \
    --variant "$(variant '1 unmuxed layer' mux-electra-5 "$RESULTS"/unmuxed-k1-electra{,-token}/n5/results.json)" \
    --variant "$(variant '1 unmuxed layer, consistency 4' mux-electra-2 "$RESULTS"/unmuxed-k1-electra{,-token}/n2/results.json "$RESULTS"/unmuxed-k1-electra-consistency/n2/results.json)" \
    --variant "$(variant '1 unmuxed layer, trec with consistency 4' mux-electra-5 "$RESULTS"/unmuxed-k1-electra{,-token}/n5/results.json "$RESULTS"/unmuxed-k1-electra-consistency/n5-trec/results.json)" \
    | tee "$OUT_DIR/log.txt"
