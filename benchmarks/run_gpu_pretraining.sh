#!/usr/bin/env bash
# The pre-training GPU measurements in one script of under 10 minutes (one CUDA GPU, muxplm installed;
# results under benchmarks/results/gpu/ by default):
#   (a) inference throughput of the base model in bf16 at the paper's batch of 128 x 128,
#       N = 1 / 2 / 5 / 10, eager and replayed as CUDA graphs, side by side;
#   (b) pre-training tokens/s on the Trainer path at base, 512 tokens, bf16, N = 1 and 5, and the
#       GPU-hours of the paper's runs at that rate on 8 such GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/gpu}
mkdir -p "$OUT"
python3 -m muxplm bench throughput --device cuda --dtype bfloat16 --sizes base --heads sentence \
    --mux gaussian_hadamard --demux rsa --batches 50 --variants default,graphs --output "$OUT/graphs-base-bf16-b128.json"
python3 benchmarks/pretrain_tokens.py --size base --length 512 --batch-size 64 --steps 40 --device cuda \
    --precision bf16 --instances 1 5 --output "$OUT/pretrain-tokens-base-bf16.json"
