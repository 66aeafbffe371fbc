#!/usr/bin/env bash
# Issue 10: the pretrained MiniLM converted with `muxplm convert` at N = 2, 5 and 10 against plain
# MiniLM fine-tuned on the same budget, on sentiment, trec, pos and ner, 5 composition seeds.
# About 1.5 h on the idle 2-core CPU machine. Results: benchmarks/results/reproduce/convert/.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m muxplm reproduce --convert --threads 2 --output-dir benchmarks/results/reproduce/convert \
    --runs-dir runs/reproduce-convert "$@"
