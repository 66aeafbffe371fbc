#!/usr/bin/env bash
# The from-scratch rows of the `--full` reproduction at the issue-9 recipe (unbinding demux,
# priming on 32 groups a step with the in-batch softmax, NER fine-tuned 10 epochs at 1e-3):
# BERT and MUX-BERT N = 2 / 5 / 10, two shards side by side (one torch thread each) sharing
# one runs directory, then one collecting run that reuses their stages and times all models.
# Results: benchmarks/results/reproduce/issue9/.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-runs/reproduce-issue9}
OUT=benchmarks/results/reproduce/issue9
MODELS=bert,mux-bert-2,mux-bert-5,mux-bert-10
mkdir -p "$RUNS/logs" "$OUT"
shard() { muxplm reproduce --full --threads 1 --runs-dir "$RUNS" --output-dir "$RUNS/shard-$1" --models "$2" \
    > "$RUNS/logs/shard-$1.log" 2>&1; }
if [ -z "${SHARD:-}" ]; then
    shard a bert,mux-bert-10 & first=$!
    shard b mux-bert-2,mux-bert-5 & second=$!
    wait "$first"; wait "$second"
else  # SHARD=a|b runs just that shard
    case "$SHARD" in a) shard a bert,mux-bert-10 ;; b) shard b mux-bert-2,mux-bert-5 ;; esac
    exit 0
fi
# Any other split works the same way (stages are shared through $RUNS): the committed record's
# last stages ran as `muxplm reproduce --full --threads 1 --runs-dir $RUNS --models mux-bert-10
# --tasks sentiment` and `... --tasks trec` side by side.
muxplm reproduce --full --threads 2 --runs-dir "$RUNS" --output-dir "$OUT" --models "$MODELS" | tee "$OUT.log"
mv "$OUT.log" "$OUT/log.txt"
