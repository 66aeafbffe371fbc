#!/usr/bin/env bash
# A stable row's fine-tuning on one task run again from the same pre-trained encoder with some
# settings changed, by the code that trained the row (the table's settings otherwise), and scored
# beside the row's own run by the same evaluation. Two uses:
#  - why a row ends at NER F1 0: another data-order seed (if it learns NER, the zero is a plateau
#    one run fell into) or a lower learning rate (the rule's rate too high for the row);
#  - how much of a row's composition churn is the consistency weight and how much the run: the
#    weight changed, each at several seeds.
#
#   ROW=contextual-10 VARIANTS="seed=1 lr=0.0003" bash benchmarks/run_stable_finetune_again.sh
#   ROW=mux-bert-2 TASK=trec OUT=benchmarks/results/reproduce/paper-stable/trec-consistency \
#       VARIANTS="seed=1 consistency_weight=2 consistency_weight=2,seed=1" bash benchmarks/run_stable_finetune_again.sh
#
# A variant is one or more `setting=value` joined by commas (`muxplm finetune` options). Each:
# RUNS/again-TASK/ROW-VARIANT (the fine-tuned model); in OUT its log (dev curve and training loss,
# ROW-VARIANT.jsonl, beside the row's own run, ROW-table.jsonl: the fine-tuning RUNS/ROW/3-TASK did,
# the table's when RUNS holds the table's stages, a probe's when a probe's), its settings and its
# score over 5 composition seeds (ROW-VARIANT-config.json, -eval.json; the row's own run scored the
# same way, ROW-table-eval.json), every run's score and churn in one table (TASK-again.md, by
# benchmarks/experiments/finetune_again_table.py) and the curves of every run in OUT plotted
# (TASK-METRIC.png, TASK-train-loss.png).
set -euo pipefail
{  # parsed whole before it runs
cd "$(dirname "$0")/.."
ROW=${ROW:?name a row of the stable table, e.g. ROW=contextual-10}
TASK=${TASK:-ner}
VARIANTS=${VARIANTS:-"seed=1 seed=2"}
RUNS=${RUNS:-runs/reproduce-paper-stable}
OUT=${OUT:-benchmarks/results/reproduce/paper-stable/ner-plateau}
METRIC=${METRIC:-$([ "$TASK" = ner ] && echo f1 || echo accuracy)}
CODE=${CODE-4ca13c3}  # the commit that trained the stable table; CODE= runs this checkout's code
if [ -n "$CODE" ]; then
    source benchmarks/pinned_code.sh
    use_pinned_code "$CODE" "$RUNS"
fi
export OMP_NUM_THREADS=${THREADS:-1}
STAGE="$RUNS/$ROW/3-$TASK"
CONFIG="$STAGE/train_config.json"
[ -f "$CONFIG" ] || { echo "no $CONFIG: train the row first" >&2; exit 2; }
mkdir -p "$OUT"
# scored as the table scores it: its sequence length and evaluation subset
read -r MAX_LENGTH MAX_EXAMPLES < <(python3 -c "import json, sys; c = json.load(open(sys.argv[1]));
print(c['max_length'], c['max_eval_examples'] or 0)" "$CONFIG")
score() {
    local limit=()
    [ "$MAX_EXAMPLES" = 0 ] || limit=(--max-examples "$MAX_EXAMPLES")
    python3 -m muxplm evaluate "$1" --task "$TASK" --seeds 5 --max-length "$MAX_LENGTH" "${limit[@]}" --output "$2"
}
cp "$STAGE/log.jsonl" "$OUT/$ROW-table.jsonl"
cp "$CONFIG" "$OUT/$ROW-table-config.json"
[ "$OUT/$ROW-table-eval.json" -nt "$STAGE/train_results.json" ] || score "$STAGE" "$OUT/$ROW-table-eval.json"
for variant in $VARIANTS; do
    name="$ROW-$(tr -d '=' <<< "${variant//,/-}")"
    run="$RUNS/again-$TASK/$name"
    settings=()
    IFS=, read -r -a pairs <<< "$variant"
    for pair in "${pairs[@]}"; do settings+=("--${pair%%=*}" "${pair#*=}"); done
    echo "== $name: $(date -u +%H:%M) UTC"
    python3 -m muxplm finetune --config "$CONFIG" --output_dir "$run" "${settings[@]}"
    score "$run" "$OUT/$name-eval.json"
    cp "$run/log.jsonl" "$OUT/$name.jsonl"
    cp "$run/train_config.json" "$OUT/$name-config.json"
done
python3 benchmarks/experiments/finetune_again_table.py "$OUT" --output "$OUT/$TASK-again.md"
python3 benchmarks/experiments/plot_curves.py "$OUT" --metric "$METRIC" --title "$TASK dev $METRIC" \
    --output "$OUT/$TASK-$METRIC.png"
python3 benchmarks/experiments/plot_curves.py "$OUT" --kind train --metric loss --title "$TASK training loss" \
    --output "$OUT/$TASK-train-loss.png"
}
