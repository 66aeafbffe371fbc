#!/usr/bin/env bash
# Issue 10, the conversion recipe: MiniLM converted with three of its six layers run on each
# instance alone (num_unmuxed_layers 3) at N = 2, 5 and 10, against plain MiniLM, with the same
# fine-tuning budget and seeds as run_cpu_reproduce_convert.sh (whose rows pin two layers; the
# plain row's stages are reused from that run's --runs-dir when their settings are unchanged).
# 90 min on the idle 2-core CPU machine. Results: benchmarks/results/reproduce/convert-k3/.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m muxplm reproduce --convert --threads 2 --output-dir benchmarks/results/reproduce/convert-k3 \
    --runs-dir runs/reproduce-convert \
    --models minilm,convert-minilm-2-k3,convert-minilm-5-k3,convert-minilm-10-k3 "$@"
