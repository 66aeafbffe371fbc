#!/usr/bin/env bash
# Every system of the paper under one recipe (`muxplm reproduce --models paper`: BERT, MUX-BERT,
# ELECTRA, MUX-ELECTRA, T-MUX, the prefix-demultiplexer and contextual-multiplexer ablations at
# N = 2 / 5 / 10, and a larger size at N = 2), sharded to fit the machine. Shards train side by
# side into one runs directory (PARALLEL at a time, one torch thread each on a CPU); a last run
# over every model reuses their stages (reuse is exact: same settings, same code) and evaluates
# and times all of them side by side into OUT.
#
#   PRESET=full bash benchmarks/run_reproduce_paper.sh    # the CPU recipe (about 10 hours on 2 cores)
#   PRESET=gpu bash benchmarks/run_reproduce_paper.sh     # bf16 on a GPU; its larger size is base
#   ONLY=0,1 bash benchmarks/run_reproduce_paper.sh       # those shards side by side (a session's worth), collected into OUT
#   CODE=COMMIT bash benchmarks/run_reproduce_paper.sh    # train with that commit's code (see below)
#
# A shard cut short loses only its unfinished stage: run the same command again to go on. A stage
# is reused only by the code that trained it (its source hash), so a run that spans several
# sessions while the repository moves on names its code: CODE=COMMIT checks that commit out once
# into RUNS/code-COMMIT and runs every stage, and the collecting run, from there.
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${PRESET:-full}
RUNS=${RUNS:-runs/reproduce-paper-$PRESET}
ONLY=${ONLY:-}
OUT=${OUT:-benchmarks/results/reproduce/paper-$PRESET${ONLY:+-shards-${ONLY//,/-}}}
PARALLEL=${PARALLEL:-2}
CODE=${CODE:-}
muxplm() { python3 -m muxplm "$@"; }
if [ -n "$CODE" ]; then
    CODE=$(git rev-parse --short=12 "$CODE^{commit}")
    SRC="$RUNS/code-$CODE"
    [ -d "$SRC/src/muxplm" ] || { mkdir -p "$RUNS"; git worktree add --detach "$SRC" "$CODE"; }
    export PYTHONPATH="$(cd "$SRC/src" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
    python3 -c "import muxplm, sys; sys.exit(not muxplm.__file__.startswith('$(cd "$SRC/src" && pwd)'))" \
        || { echo "run_reproduce_paper.sh: muxplm is not imported from $SRC" >&2; exit 1; }
fi
if [ "$PRESET" = gpu ]; then LARGER=base; THREADS=(); else LARGER=small; THREADS=(--threads 1); fi
# Shards in pairs of about equal cost, each pair to run side by side (one torch thread each).
# Estimated from fine-tuning steps timed two at a time on the 2-core CPU (tiny: 0.86 / 0.47 / 0.27 /
# 0.20 s at N = 1 / 2 / 5 / 10; small: 2.6 s at N = 1) for 4 tasks x 1,500 steps, plus the
# pre-training stages; in core-minutes: 120, 90 | 120, 90 | 270, 230 | 125, 125, about 10 hours
# on 2 cores. A session of about 3 hours runs one pair (ONLY=0,1).
SHARDS=(
    "bert,mux-bert-10"
    "mux-bert-2,mux-bert-5"
    "electra,mux-electra-10"
    "mux-electra-2,mux-electra-5"
    "bert-$LARGER"
    "mux-bert-$LARGER-2,tmux-2,tmux-5,tmux-10"
    "prefix-2,prefix-5,prefix-10"
    "contextual-2,contextual-5,contextual-10"
)
mkdir -p "$RUNS/logs"
shard() {
    muxplm reproduce "--$PRESET" "${THREADS[@]}" --runs-dir "$RUNS" --output-dir "$RUNS/shard-$1" \
        --models "${SHARDS[$1]}" > "$RUNS/logs/shard-$1.log" 2>&1
}
if [ -n "$ONLY" ]; then
    IFS=, read -r -a WANTED <<< "$ONLY"
    for index in "${WANTED[@]}"; do
        [ -n "${SHARDS[$index]+set}" ] || { echo "ONLY must list shard indices, 0 to $((${#SHARDS[@]} - 1))" >&2; exit 2; }
    done
else
    WANTED=("${!SHARDS[@]}")
fi
running=0
for index in "${WANTED[@]}"; do
    if [ "$running" -ge "$PARALLEL" ]; then
        wait -n  # a failed shard stops the script (set -e)
        running=$((running - 1))
    fi
    shard "$index" &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n
    running=$((running - 1))
done
ALL=$(for index in "${WANTED[@]}"; do echo "${SHARDS[$index]}"; done | paste -sd,)
mkdir -p "$OUT"
muxplm reproduce "--$PRESET" "${THREADS[@]}" --runs-dir "$RUNS" --output-dir "$OUT" --models "$ALL" | tee "$RUNS/logs/collect.log"
cp "$RUNS/logs/collect.log" "$OUT/log.txt"
# The analyses that need more than the collecting run wrote (lottery, ensembling and Pareto are in
# OUT already): every row's dev curve over its fine-tuning, and the muxology of the pre-trained
# checkpoints, BERT against MUX-BERT N = 2 / 5 / 10, when they were run.
python3 benchmarks/experiments/plot_length_grid.py --runs "$RUNS" --out "$OUT" > /dev/null
for key in bert mux-bert-2 mux-bert-5 mux-bert-10; do [ -d "$RUNS/$key/2-pretrain" ] || exit 0; done
muxplm analyze muxology "$RUNS/bert/2-pretrain" "$RUNS/mux-bert-2/2-pretrain" "$RUNS/mux-bert-5/2-pretrain" \
    "$RUNS/mux-bert-10/2-pretrain" --num-sentences 200 --max-length 48 --output "$OUT/muxology.json"
