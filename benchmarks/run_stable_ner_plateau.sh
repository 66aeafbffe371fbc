#!/usr/bin/env bash
# Why a stable row ends at NER F1 0: its NER fine-tuning run again from the same pre-trained
# encoder with another data-order seed, or a lower learning rate, by the code that trained the
# row (the table's fine-tuning settings otherwise). If another seed learns NER, the row's zero is
# a plateau that one run fell into; if only a lower learning rate does, the rule's rate is too high
# for the row; if none does, the row cannot learn the task at this scale.
#
#   ROW=contextual-10 VARIANTS="seed=1 lr=0.0003" bash benchmarks/run_stable_ner_plateau.sh
#
# Each variant: RUNS/ner-plateau/ROW-VARIANT (the fine-tuned model); in OUT its log (dev curve and
# training loss, ROW-VARIANT.jsonl, beside the table's own run, ROW-table.jsonl), its settings and
# its score over 5 composition seeds (ROW-VARIANT-config.json, -eval.json), and the curves of every
# run in OUT plotted (ner-f1.png, ner-train-loss.png).
set -euo pipefail
{  # parsed whole before it runs
cd "$(dirname "$0")/.."
ROW=${ROW:?name a row of the stable table, e.g. ROW=contextual-10}
VARIANTS=${VARIANTS:-"seed=1 seed=2"}
RUNS=${RUNS:-runs/reproduce-paper-stable}
OUT=${OUT:-benchmarks/results/reproduce/paper-stable/ner-plateau}
CODE=${CODE-4ca13c3}  # the commit that trained the stable table; CODE= runs this checkout's code
if [ -n "$CODE" ]; then
    source benchmarks/pinned_code.sh
    use_pinned_code "$CODE" "$RUNS"
fi
export OMP_NUM_THREADS=${THREADS:-1}
CONFIG="$RUNS/$ROW/3-ner/train_config.json"
[ -f "$CONFIG" ] || { echo "no $CONFIG: train the row first" >&2; exit 2; }
mkdir -p "$OUT"
cp "$RUNS/$ROW/3-ner/log.jsonl" "$OUT/$ROW-table.jsonl"
for variant in $VARIANTS; do
    name="$ROW-${variant/=/}"
    run="$RUNS/ner-plateau/$name"
    echo "== $name: $(date -u +%H:%M) UTC"
    python3 -m muxplm finetune --config "$CONFIG" --output_dir "$run" "--${variant%%=*}" "${variant#*=}"
    python3 -m muxplm evaluate "$run" --task ner --seeds 5 --output "$OUT/$name-eval.json"
    cp "$run/log.jsonl" "$OUT/$name.jsonl"
    cp "$run/train_config.json" "$OUT/$name-config.json"
done
python3 benchmarks/experiments/plot_curves.py "$OUT" --metric f1 --title "NER dev F1" --output "$OUT/ner-f1.png"
python3 benchmarks/experiments/plot_curves.py "$OUT" --kind train --metric loss --title "NER training loss" \
    --output "$OUT/ner-train-loss.png"
}
