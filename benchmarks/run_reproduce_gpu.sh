#!/usr/bin/env bash
# The paper's table on one CUDA GPU (`muxplm reproduce --gpu`: the full preset's rule with every
# fine-tuning three times as long, fp32, the larger size at its own rate), where CPU-hours take
# minutes: each row's sentence tasks and, once that run has pre-trained the row, its token tasks,
# side by side (the GPU sits mostly idle under one run; at most PARALLEL runs at a time), then
# merged into a table in RESULTS, timed on the GPU (wall clock). Each row's retention is against
# the N = 1 row of its family and size in the same run, never the CPU table's.
#
#   bash benchmarks/run_reproduce_gpu.sh                       # every row of `--models paper`
#   ROWS="bert mux-bert-2" bash benchmarks/run_reproduce_gpu.sh --set finetune.consistency_weight=4
#   STABLE=1 bash benchmarks/run_reproduce_gpu.sh                # `--gpu --stable`, into paper-gpu-stable
#   STABLE=1 ROWS="bert mux-bert-2" bash benchmarks/run_reproduce_gpu.sh; STABLE=1 ROWS=... ; ...
#   STABLE=1 MERGE=1 bash benchmarks/run_reproduce_gpu.sh        # every part in RESULTS/parts, merged again
#
# A run's merge takes every part in RESULTS/parts, its own and those of earlier runs into the same
# RESULTS, so a table too long for one call of the device (at most 10 minutes a command) can be
# trained a few ROWS a call with one code, and the last call's table has them all (the merge refuses
# parts trained by another code or recipe). MERGE=1 only merges, timing every row on DEVICE.
#
# The two committed GPU tables ran the `full` preset with settings given by hand (before the
# `gpu` preset was this rule); the same runs again:
#   PRESET=full bash benchmarks/run_reproduce_gpu.sh                    # larger-gpu: BERT-small, N = 1 and 2
#   PRESET=full ROWS="bert mux-bert-5 mux-bert-10" RESULTS=benchmarks/results/reproduce/paper-full/longer-grid-gpu \
#   RUNS=runs/reproduce-longer-grid-gpu bash benchmarks/run_reproduce_gpu.sh \
#       --set finetune.max_steps=4500 --set finetune.eval_steps=750 --set finetune.save_steps=750
# (the larger size's rate, 1e-4 with NER 5e-4, then came from `--set finetune.lr=1e-4 --set
# 'task_finetune.ner={"lr": 5e-4}'`; it is now the presets' `sizes.small`.)
# A check without a GPU: DEVICE=cpu ... --set finetune.max_steps=6 (and other small settings).
set -euo pipefail
{  # parsed whole before it runs, so an edit of this file during a run cannot change the run
cd "$(dirname "$0")/.."
PRESET=${PRESET:-gpu}
STABLE=${STABLE:+-stable}
if [ "$PRESET" = gpu ]; then
    DEFAULT_ROWS=paper  # `--models paper`'s rows, listed below only when they train
    DEFAULT_RUNS=runs/reproduce-paper-gpu$STABLE
    DEFAULT_RESULTS=benchmarks/results/reproduce/paper-gpu$STABLE
else  # the first GPU table's rows and folders
    DEFAULT_ROWS="bert-small mux-bert-small-2"
    DEFAULT_RUNS=runs/reproduce-larger-gpu$STABLE
    DEFAULT_RESULTS=benchmarks/results/reproduce/paper-full/larger-gpu$STABLE
fi
ROWS=${ROWS:-$DEFAULT_ROWS}
RUNS=${RUNS:-$DEFAULT_RUNS}
RESULTS=${RESULTS:-$DEFAULT_RESULTS}
DEVICE=${DEVICE:-cuda}
PARALLEL=${PARALLEL:-16}  # runs at a time (the H200 machine has 16 CPU cores)
RECIPE=(--"$PRESET" ${STABLE:+--stable} --device "$DEVICE" --threads 1 --set 'throughput.clock="wall"')
source benchmarks/merge_parts.sh
merge() { merge_parts "$RESULTS" --device "$DEVICE"; }  # every part in RESULTS/parts, timed on DEVICE
if [ -n "${MERGE:-}" ]; then
    merge
    exit 0
fi
if [ "$ROWS" = paper ]; then  # not before: the import takes seconds a merge has no use for
    ROWS=$(python3 -c "from muxplm.bench.reproduce import PAPER_MODELS; print(*PAPER_MODELS)")
fi
mkdir -p "$RUNS/logs" "$RESULTS/parts"
started="$RUNS/logs/.started"
touch "$started"
pids=()
names=()
declare -A first
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT  # a failed part stops the others too
part() {  # KEY TASKS NAME [reproduce arguments]
    local key=$1 tasks=$2 name=$3
    shift 3
    while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n || exit 1; done
    python3 -m muxplm reproduce "${RECIPE[@]}" "$@" --runs-dir "$RUNS" --output-dir "$RUNS/part-$name" \
        --models "$key" --tasks "$tasks" > "$RUNS/logs/$name.log" 2>&1 &
    pids+=($!)
    names+=("$name")
    first[$key]=$!
}
for key in $ROWS; do part "$key" sentiment,trec "$key-sentence" "$@"; done
# A row's token run starts once its sentence run has begun fine-tuning, so the two never train
# the row's pre-training stages at once (a folder left by an earlier run, with other code or
# settings, is retrained first), or once the sentence run has ended (its status is checked below).
# A stage trains in .NAME.training until it replaces NAME.
for key in $ROWS; do
    until [ "$RUNS/$key/.3-sentiment.training" -nt "$started" ] || [ "$RUNS/$key/3-sentiment" -nt "$started" ] \
        || ! kill -0 "${first[$key]}" 2>/dev/null; do sleep 2; done
    part "$key" pos,ner "$key-token" "$@"
done
for pid in "${pids[@]}"; do wait "$pid"; done  # a failed part stops the script (set -e)
trap - EXIT
for name in "${names[@]}"; do
    rm -rf "$RESULTS/parts/$name"
    cp -r "$RUNS/part-$name" "$RESULTS/parts/$name"
    cp "$RUNS/logs/$name.log" "$RESULTS/parts/$name/log.txt"
done
python3 benchmarks/experiments/plot_length_grid.py --runs "$RUNS" --out "$RESULTS/length-grid" > /dev/null
merge
exit
}
