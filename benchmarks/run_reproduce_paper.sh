#!/usr/bin/env bash
# Every system of the paper under one recipe (`muxplm reproduce --models paper`: BERT, MUX-BERT,
# ELECTRA, MUX-ELECTRA, T-MUX, the prefix-demultiplexer and contextual-multiplexer ablations at
# N = 2 / 5 / 10, and a larger size at N = 2), in shards that train side by side (PARALLEL at a
# time, one torch thread each on a CPU). Each shard's own run evaluates and times its models into
# a part, OUT/parts/shard-I; the parts merge into one table in OUT (`muxplm reproduce --merge`:
# one recipe and one source hash required, every row timed again side by side).
#
#   CODE=cc53eb0 ONLY=2,3 bash benchmarks/run_reproduce_paper.sh    # one pair of CPU shards: a session's worth
#   MERGE=1 bash benchmarks/run_reproduce_paper.sh                  # the parts in so far, merged again
#   CODE=4ca13c3 PRESET=stable ONLY=3,7 bash benchmarks/run_reproduce_paper.sh  # the stable recipe (then 1,500 steps), a row a shard
#   PRESET=stable bash benchmarks/run_reproduce_paper.sh --set mixed_precision=bf16  # today's stable grid, every row:
#       3.2 hours measured on 2-core CPUs with native bf16, over two starts (paper-stable/from-scratch)
#   TASKS=sentiment,trec ... bash benchmarks/run_reproduce_paper.sh --set pretrain.max_steps=2000
#       # shards on some tasks only, with recipe settings changed (into their own RUNS and OUT)
#
# On a GPU the whole table is one run instead: bash benchmarks/run_reproduce_gpu.sh (the `gpu` preset).
#
# On the 2-core CPU the full preset takes about 11 hours, more than a session, and a session's
# checkpoints do not outlive it. So a session trains one pair of shards with the pinned code
# (CODE=cc53eb0: every stage trained by one commit, checked out once into RUNS/code-COMMIT), commits
# its parts, and the table in OUT grows by their rows. The larger size's N = 1 row is too slow for
# one session: its tasks are split over two shards (`MODELS@TASKS`), each pre-training it again
# (the merge checks both ended the same). A shard cut short: run the same command again; its
# unfinished stage continues from its last checkpoint (code from commit 98ce4ac on; the pinned
# 4ca13c3 trains that stage again).
set -euo pipefail
{  # parsed whole before it runs, so an edit of this file during a run cannot change the run
cd "$(dirname "$0")/.."
PRESET=${PRESET:-full}
RUNS=${RUNS:-runs/reproduce-paper-$PRESET}
OUT=${OUT:-benchmarks/results/reproduce/paper-$PRESET}
ONLY=${ONLY:-}
TASKS=${TASKS:-}  # a shard's tasks where its spec names none (MODELS@TASKS); empty: every task
PARALLEL=${PARALLEL:-2}
CODE=${CODE:-}
CHECKOUT_PYTHONPATH=${PYTHONPATH:-}
[ "$PRESET" != gpu ] || { echo "on a GPU: bash benchmarks/run_reproduce_gpu.sh" >&2; exit 2; }
muxplm() { python3 -m muxplm "$@"; }
source benchmarks/merge_parts.sh
merge() {  # with this checkout's code, whatever commit trained the parts
    # Nine round-robin trials a row and their median: on a shared 2-core VM the recipe's three trials'
    # mean can move a row's speed-up by up to a third between merges.
    PYTHONPATH="$CHECKOUT_PYTHONPATH" merge_parts "$OUT" --threads 1 \
        --set throughput.trials=9 --set throughput.statistic=median
}
if [ -n "${MERGE:-}" ]; then
    merge
    exit 0
fi
if [ -n "$CODE" ]; then
    source benchmarks/pinned_code.sh
    use_pinned_code "$CODE" "$RUNS"
fi
THREADS=(--threads 1)
RECIPE_OVERRIDES=("$@")  # the script's arguments go to every shard's training (the merge reads them from the parts)
# Pairs of shards of about equal cost, each pair side by side in one session: 0,1 | 2,3 | 4,6 |
# 5,7 | 8,9 (the larger size's N = 1 row is shards 4 and 6: the merge refuses it while one half is
# missing). Fine-tuning steps timed two at a time on the 2-core CPU: tiny 0.86 / 0.47 / 0.27 /
# 0.20 s at N = 1 / 2 / 5 / 10, small 2.6 s at N = 1; 1,500 steps a task. Estimated minutes:
# 120, 90 | 120, 90 | 145, 145 | 115, 160 | 125, 125.
if [ "$PRESET" = stable ]; then
    # One row a shard: a session runs what fits, PARALLEL at a time, and the parts accumulate.
    # At 900 steps in bf16 (AVX-512 BF16, two side by side) a tiny row trains in 11-15 min, a
    # contextual row in 21-23, the larger size's in 34-36 (its N = 1 row over two shards).
    # The larger size (17-19) as under `full`: its N = 1 row's tasks over two shards.
    SHARDS=(bert mux-bert-2 mux-bert-5 mux-bert-10 electra mux-electra-2 mux-electra-5 mux-electra-10
            tmux-2 tmux-5 tmux-10 prefix-2 prefix-5 prefix-10 contextual-2 contextual-5 contextual-10
            "bert-small@sentiment,trec" "bert-small@pos,ner" mux-bert-small-2)
else
    SHARDS=(
        "bert,mux-bert-10"
        "mux-bert-2,mux-bert-5"
        "electra,mux-electra-10"
        "mux-electra-2,mux-electra-5"
        "bert-small@sentiment,trec"
        "tmux-2,tmux-5,tmux-10"
        "bert-small@pos,ner"
        "mux-bert-small-2"
        "prefix-2,prefix-5,prefix-10"
        "contextual-2,contextual-5,contextual-10"
    )
fi
mkdir -p "$RUNS/logs" "$OUT/parts"
shard() {  # trains, evaluates and times the shard's models, then keeps its results as a part
    local spec=${SHARDS[$1]} tasks=()
    if [[ $spec == *@* ]]; then tasks=(--tasks "${spec#*@}"); elif [ -n "$TASKS" ]; then tasks=(--tasks "$TASKS"); fi
    muxplm reproduce "--$PRESET" "${THREADS[@]}" --runs-dir "$RUNS" --output-dir "$RUNS/shard-$1" \
        --models "${spec%@*}" "${tasks[@]}" "${RECIPE_OVERRIDES[@]}" > "$RUNS/logs/shard-$1.log" 2>&1
    rm -rf "$OUT/parts/shard-$1"
    cp -r "$RUNS/shard-$1" "$OUT/parts/shard-$1"
    cp "$RUNS/logs/shard-$1.log" "$OUT/parts/shard-$1/log.txt"
}
if [ -n "$ONLY" ]; then
    IFS=, read -r -a WANTED <<< "$ONLY"
    for index in "${WANTED[@]}"; do
        [ -n "${SHARDS[$index]+set}" ] || { echo "ONLY must list shard indices, 0 to $((${#SHARDS[@]} - 1))" >&2; exit 2; }
    done
else
    WANTED=("${!SHARDS[@]}")
fi
# A failed shard stops the script (set -e at `wait -n`) and, through this trap, the shards still
# training: each shard is a subshell whose training process is its child.
stop_shards() { for pid in $(jobs -p); do pkill -TERM -P "$pid" 2>/dev/null; kill "$pid" 2>/dev/null; done; true; }
trap stop_shards EXIT
running=0
for index in "${WANTED[@]}"; do
    if [ "$running" -ge "$PARALLEL" ]; then
        wait -n
        running=$((running - 1))
    fi
    shard "$index" &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n
    running=$((running - 1))
done
trap - EXIT
# Every row's dev curve over its fine-tuning (this session's rows) first: the merge refuses a row
# with a task missing, as the larger size's N = 1 row is until both of its shards are in.
GRID="$OUT/length-grid/shards-${ONLY//,/-}"
python3 benchmarks/experiments/plot_length_grid.py --runs "$RUNS" --out "${GRID%-}" > /dev/null
merge
# The muxology of the pre-trained checkpoints, BERT against MUX-BERT N = 2 / 5 / 10, when they
# were trained here; with this checkout's code, as the merge (an analysis trains nothing).
for key in bert mux-bert-2 mux-bert-5 mux-bert-10; do [ -d "$RUNS/$key/2-pretrain" ] || exit 0; done
PYTHONPATH="$CHECKOUT_PYTHONPATH" python3 -m muxplm analyze muxology "$RUNS/bert/2-pretrain" "$RUNS/mux-bert-2/2-pretrain" "$RUNS/mux-bert-5/2-pretrain" \
    "$RUNS/mux-bert-10/2-pretrain" --num-sentences 200 --max-length 48 --output "$OUT/muxology.json"
exit
}
