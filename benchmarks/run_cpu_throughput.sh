#!/usr/bin/env bash
# The CPU throughput runs behind benchmarks/results/throughput/ (the tree keeps the three files the docs quote).
# Shared 2-core machine: one torch thread and the process-CPU-time clock keep other
# processes' load out of the ratios (wall-clock throughput is recorded too).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=benchmarks/results/throughput
COMMON="--device cpu --threads 1 --clock process --batch-size 128 --seq-len 128 --warmup 1 --trials 3"
muxplm bench throughput --sizes tiny  $COMMON --batches 2 --output $OUT/cpu-tiny.json
muxplm bench throughput --sizes small $COMMON --batches 1 --output $OUT/cpu-small.json
muxplm bench throughput --sizes tiny $COMMON --batches 2 --instances 1,2,10 --mux gaussian_hadamard --demux rsa \
    --variants default,eager,int8,compile --output $OUT/cpu-tiny-complementary.json
muxplm bench throughput --sizes base --device cpu --threads 1 --clock process --batch-size 40 --seq-len 128 \
    --warmup 1 --trials 3 --batches 1 --mux gaussian_hadamard --demux rsa --output $OUT/cpu-base-b40.json
muxplm bench throughput --sizes small --instances 1 --heads sentence,token --device cpu --threads 1 --clock process \
    --batch-size 128 --seq-len 128 --warmup 1 --trials 6 --batches 1 --output $OUT/cpu-small-n1-vs-transformers.json
muxplm bench profile --sizes tiny --instances 1,10 --mux gaussian_hadamard --demux rsa --head token --device cpu \
    --threads 1 --clock process --repeats 2 --operators --output $OUT/cpu-tiny-profile-token.json
# The longest run: the whole tiny grid on the idle machine (cpu-tiny-grid-idle.*).
muxplm bench throughput --sizes tiny $COMMON --batches 4 --trials 5 --output $OUT/cpu-tiny-grid-idle.json
