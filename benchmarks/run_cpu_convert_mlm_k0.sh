#!/usr/bin/env bash
# Does the from-scratch recipe's second stage rescue the mixture at the bottom? MLM pre-training
# with the auxiliary retrieval loss (r = 0.2; 600 steps of 32 instances, lr 5e-4 for the fresh
# MLM head, 1e-4 for the encoder) on the N = 2 K = 0 progressive conversion of MiniLM, then the
# data8k fine-tuning (8,000 sentiment examples x 5 epochs), scored over 5 composition seeds.
# Results: benchmarks/results/convert-mlm-k0/ (compare convert-data8k's n2-prog5-k0-400-8k);
# MLM_STEPS=3000 for a longer stage (its own schedule, results in convert-mlm-k0-3000/).
set -euo pipefail
cd "$(dirname "$0")/.."
MLM_STEPS=${MLM_STEPS:-600}
SUFFIX=$([ "$MLM_STEPS" = 600 ] && echo "" || echo "-$MLM_STEPS")
RUNS=${RUNS:-runs/equal20-cpu}
R=${R:-runs/mlm-k0$SUFFIX}
OUT=benchmarks/results/convert-mlm-k0$SUFFIX
export OMP_NUM_THREADS=1
# the conversion (400 priming steps, the mixture moved from layer 5 to the embeddings)
python3 benchmarks/experiments/convert_grid.py equal20 --tasks sentiment --device cpu --jobs 1 --only n2-prog5-k0-400-ep20 \
    --out "$RUNS/out" --runs "$RUNS"
mkdir -p "$R" "$OUT"
[ -f "$R/mlm/train_results.json" ] || muxplm pretrain --stage mlm --init "$RUNS/n2-prog5-k0-400-ep20/convert" \
    --output-dir "$R/mlm" --max-steps "$MLM_STEPS" --batch-size 32 --retrieval-loss-weight 0.2 --lr 5e-4 --encoder-lr 1e-4 \
    --warmup-ratio 0.1 --max-length 48 --save-steps 200 --eval-steps $((MLM_STEPS / 2)) --logging-steps 20 --save-total-limit 1 \
    --no-progress --report-to none --dataloader-workers 0
[ -f "$R/sentiment/train_results.json" ] || muxplm finetune --task sentiment --init "$R/mlm" --output-dir "$R/sentiment" \
    --eval-steps 100000 --save-steps 100000 --save-total-limit 1 --no-progress --report-to none --dataloader-workers 0 \
    --lr=2e-4 --encoder-lr=1e-4 --max-train-examples=8000 --max-eval-examples=1000 --batch-size=32 --max-length=48 \
    --sentence-pooling=mean --warmup-ratio=0.1 --min-steps=1 --num-epochs=5
muxplm evaluate "$R/sentiment" --task sentiment --seeds 5 --max-examples 1000 --max-length 48 --device cpu \
    --output "$OUT/eval-sentiment.json"
cp "$R/mlm/log.jsonl" "$OUT/mlm-log.jsonl"
cp "$R/mlm/train_results.json" "$OUT/mlm-train_results.json"
cp "$R/sentiment/log.jsonl" "$OUT/sentiment-log.jsonl"
cp "$R/sentiment/train_results.json" "$OUT/sentiment-train_results.json"
