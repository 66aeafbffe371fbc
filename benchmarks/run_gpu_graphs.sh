#!/usr/bin/env bash
# Against the kernel-launch floor of a GPU (one CUDA GPU, muxplm installed; results under
# benchmarks/results/gpu/ by default):
#   1. the base model in bf16 at the paper's batch of 128 x 128, N = 1 / 2 / 5 / 10, run eagerly,
#      through torch.compile and replayed as CUDA graphs (compile's reduce-overhead mode), timed
#      side by side: the speed-up over N = 1 with and without graphs;
#   2. the server on the GPU (base, bf16, its default batch of N x 128) at N = 1 / 2 / 5 / 10.
# About 10 minutes on an H100, most of it compiling.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/gpu}
mkdir -p "$OUT"
muxplm() { python3 -m muxplm "$@"; }
muxplm bench throughput --device cuda --dtype bfloat16 --sizes base --heads sentence --mux gaussian_hadamard \
    --demux rsa --batches 50 --variants default,compile,graphs --output "$OUT/graphs-base-bf16-b128.json"
SERVE=(serve-bench --preset base --layers 12 --words 40 --threads 4 --max-batch auto --concurrency 64,256,512
       --requests 4000 --time-limit 30 --out-dir "$OUT")
muxplm "${SERVE[@]}" --server-flags "--device cuda --dtype bfloat16" --tag serve-gpu-base-bf16
