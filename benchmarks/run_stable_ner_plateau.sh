#!/usr/bin/env bash
# Why a stable row ends at NER F1 0: its NER fine-tuning run again from the same pre-trained
# encoder with another data-order seed, or a lower learning rate, by the code that trained the
# row (the table's fine-tuning settings otherwise). If another seed learns NER, the row's zero is
# a plateau the run fell into; if none does, the row cannot learn the task at this scale.
#
#   ROW=contextual-10 VARIANTS="seed=1 lr=0.0003" bash benchmarks/run_stable_ner_plateau.sh
#
# Each variant: RUNS/ner-plateau/ROW-VARIANT (the fine-tuned model), and its dev curve
# (log.jsonl) and score over 5 composition seeds (eval.json) in OUT/ROW-VARIANT.
set -euo pipefail
{  # parsed whole before it runs
cd "$(dirname "$0")/.."
ROW=${ROW:?name a row of the stable table, e.g. ROW=contextual-10}
VARIANTS=${VARIANTS:-"seed=1 seed=2"}
RUNS=${RUNS:-runs/reproduce-paper-stable}
OUT=${OUT:-benchmarks/results/reproduce/paper-stable/ner-plateau}
CODE=$(git rev-parse --short=12 "${CODE:-4ca13c3}^{commit}")
SRC="$RUNS/code-$CODE"
[ -d "$SRC/src/muxplm" ] || git worktree add --detach "$SRC" "$CODE"
export PYTHONPATH="$(cd "$SRC/src" && pwd)" OMP_NUM_THREADS=${THREADS:-1}
CONFIG="$RUNS/$ROW/3-ner/train_config.json"
[ -f "$CONFIG" ] || { echo "no $CONFIG: train the row first" >&2; exit 2; }
for variant in $VARIANTS; do
    name="$ROW-${variant/=/}"
    run="$RUNS/ner-plateau/$name"
    mkdir -p "$OUT/$name"
    echo "== $name: $(date -u +%H:%M) UTC"
    python3 -m muxplm finetune --config "$CONFIG" --output_dir "$run" "--${variant%%=*}" "${variant#*=}"
    python3 -m muxplm evaluate "$run" --task ner --seeds 5 --output "$OUT/$name/eval.json"
    cp "$run/log.jsonl" "$run/train_config.json" "$OUT/$name/"
done
}
