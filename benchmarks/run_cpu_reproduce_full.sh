#!/usr/bin/env bash
# The `--full` reproduction whose results are committed under benchmarks/results/reproduce/full/,
# as run on the 2-core CPU machine: two shards of the model list side by side (one torch thread
# each, which uses both cores better than one two-thread process on these small matrices),
# sharing one runs directory; then one run over every model, which reuses the finished stages
# and evaluations and times all fine-tuned models side by side. The same results come from a
# single `muxplm reproduce --full` (about twice the wall time).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-runs/reproduce-full}
OUT=benchmarks/results/reproduce/full
mkdir -p "$RUNS/logs"
muxplm reproduce --full --threads 1 --runs-dir "$RUNS" --output-dir "$RUNS/shard-a" \
    --models bert,mux-bert-2,mux-bert-5,mux-bert-10,minilm,mux-minilm-2 > "$RUNS/logs/shard-a.log" 2>&1 &
first=$!
muxplm reproduce --full --threads 1 --runs-dir "$RUNS" --output-dir "$RUNS/shard-b" \
    --models tmux-2,tmux-5,electra,mux-electra-2,contextual-2 > "$RUNS/logs/shard-b.log" 2>&1 &
second=$!
wait "$first"  # a failed shard stops the script (set -e)
wait "$second"
muxplm reproduce --full --threads 1 --runs-dir "$RUNS" --output-dir "$OUT" | tee "$OUT.log"
mv "$OUT.log" "$OUT/log.txt"
# Muxology of the pre-trained (stage 2) checkpoints: BERT against MUX-BERT N = 2 / 5 / 10.
muxplm analyze muxology "$RUNS/bert/2-pretrain" "$RUNS/mux-bert-2/2-pretrain" "$RUNS/mux-bert-5/2-pretrain" \
    "$RUNS/mux-bert-10/2-pretrain" --num-sentences 200 --max-length 48 \
    --output benchmarks/results/muxology/full-tiny-mlm.json
# Is WNUT-16 NER learnable at all from this pre-training budget? The BERT row's encoder,
# fine-tuned 5x longer at a 5x larger learning rate than the recipe's.
muxplm finetune --task ner --init "$RUNS/bert/2-pretrain" --num-epochs 10 --lr 1e-3 --batch-size 32 \
    --max-length 48 --save-total-limit 1 --no-progress --output-dir "$RUNS/probe-ner-bert"
cp "$RUNS/probe-ner-bert/train_results.json" "$OUT/ner-probe-bert.json"
