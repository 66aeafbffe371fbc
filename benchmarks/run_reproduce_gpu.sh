#!/usr/bin/env bash
# Rows of the paper's table under its fine-tuning rule (`muxplm reproduce --full`), trained on one
# CUDA GPU in fp32, where CPU-hours take minutes: each row's sentence tasks and, once that run has
# pre-trained the row, its token tasks, all side by side (the GPU sits mostly idle under one
# run), then merged into a table of their own in RESULTS, timed on the GPU (wall clock). The rows'
# retention is against the N = 1 row of the same size in the same run, never the CPU table's.
#
# The larger size (BERT-small L4/H512 N = 1 and MUX-BERT-small N = 2), at fine-tuning rate 1e-4
# (NER 5e-4, the tiny rows' 5x ratio kept) for both rows: at the tiny rows' 2e-4 its N = 1 row
# never left chance on sentiment, and the probe in paper-full/small-lr-probe chose 1e-4:
#   bash benchmarks/run_reproduce_gpu.sh --set finetune.lr=1e-4 --set 'task_finetune.ner={"lr": 5e-4}'
# The tiny rows on a three times longer grid (4,500 steps, the best of six dev evaluations),
# to tell whether N = 5 / 10 miss their targets for want of fine-tuning:
#   ROWS="bert mux-bert-5 mux-bert-10" RESULTS=benchmarks/results/reproduce/paper-full/longer-grid-gpu \
#   RUNS=runs/reproduce-longer-grid-gpu bash benchmarks/run_reproduce_gpu.sh \
#       --set finetune.max_steps=4500 --set finetune.eval_steps=750 --set finetune.save_steps=750
# A check without a GPU: DEVICE=cpu ... --set finetune.max_steps=6 (and other small settings).
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS=${ROWS:-bert-small mux-bert-small-2}
RUNS=${RUNS:-runs/reproduce-larger-gpu}
RESULTS=${RESULTS:-benchmarks/results/reproduce/paper-full/larger-gpu}
DEVICE=${DEVICE:-cuda}
RECIPE=(--full --device "$DEVICE" --set 'throughput.clock="wall"')
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
for key in $ROWS; do
    until [ "$RUNS/$key/3-sentiment" -nt "$started" ] || ! kill -0 "${first[$key]}" 2>/dev/null; do sleep 2; done
    part "$key" pos,ner "$key-token" "$@"
done
for pid in "${pids[@]}"; do wait "$pid"; done  # a failed part stops the script (set -e)
trap - EXIT
parts=()
for name in "${names[@]}"; do
    rm -rf "$RESULTS/parts/$name"
    cp -r "$RUNS/part-$name" "$RESULTS/parts/$name"
    cp "$RUNS/logs/$name.log" "$RESULTS/parts/$name/log.txt"
    parts+=("$RESULTS/parts/$name")
done
python3 benchmarks/experiments/plot_length_grid.py --runs "$RUNS" --out "$RESULTS/length-grid" > /dev/null
python3 -m muxplm reproduce --merge "${parts[@]}" --output-dir "$RESULTS" | tee "$RESULTS/log.txt"
