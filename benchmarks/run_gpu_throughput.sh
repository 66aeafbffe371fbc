#!/usr/bin/env bash
# Inference throughput on one CUDA GPU in the paper's protocol: batch 128 x 128 tokens, 3 trials
# of 200 mini-batches after warm-up, inputs on the device; sizes small / base / large (one
# results file each, so that a cut-short session keeps the sizes it finished) at
# N = 1 / 2 / 5 / 10 with the Gaussian-Hadamard and contextual multiplexers and the RSA
# demultiplexer, both heads, against transformers.BertModel; in bf16 (how a GPU serves).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/gpu}
mkdir -p "$OUT"
for size in ${SIZES:-small base large}; do
    python3 -m muxplm bench throughput --device cuda --dtype bfloat16 --sizes "$size" \
        --mux gaussian_hadamard,contextual --demux rsa --output "$OUT/throughput-cuda-bf16-$size.json"
done
# Why the bf16 speed-ups above are small (base, sentence head, 50 batches a trial): the same
# models in fp32 at batch 128, and in bf16 at batch 1280 (128 groups at N = 10).
DIAG=(python3 -m muxplm bench throughput --device cuda --sizes base --heads sentence --mux gaussian_hadamard
      --demux rsa --batches 50)
"${DIAG[@]}" --dtype float32 --output "$OUT/diag-base-fp32-b128.json"
"${DIAG[@]}" --dtype bfloat16 --batch-size 1280 --output "$OUT/diag-base-bf16-b1280.json"
