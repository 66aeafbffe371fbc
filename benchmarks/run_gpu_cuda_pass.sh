#!/usr/bin/env bash
# The CUDA pass of the training machinery, for a machine with one CUDA GPU and muxplm installed
# (results under benchmarks/results/gpu/ by default; the GPU throughput is run_gpu_throughput.sh):
#   1. the three stages on the tiny preset at N = 2 in bf16 (priming, MLM, sentiment fine-tuning),
#      each with the CPU recipe's steps, and `muxplm evaluate --device cuda` over 5 seeds;
#   2. exact resume on the GPU: the fine-tuning again, killed (SIGKILL) once its step-200
#      checkpoint exists, resumed with --resume, its logged losses compared with the whole run's.
# Corpus: moby_dick only (CORPUS to change), so that the data travels light.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/gpu}
RUNS=${RUNS:-runs/gpu-pass}
CORPUS=${CORPUS:-moby_dick}
mkdir -p "$OUT"
rm -rf "$RUNS"
muxplm() { python3 -m muxplm "$@"; }
COMMON=(--mixed-precision bf16 --no-progress)

muxplm pretrain --stage retrieval --preset tiny --num-instances 2 --corpus-sources $CORPUS \
    --output-dir "$RUNS/retrieval" "${COMMON[@]}"
muxplm pretrain --stage mlm --init "$RUNS/retrieval" --corpus-sources $CORPUS --output-dir "$RUNS/mlm" "${COMMON[@]}"
FINETUNE=(finetune --task sentiment --init "$RUNS/mlm" --max-steps 400 --save-steps 200 --eval-steps 200 "${COMMON[@]}")
muxplm "${FINETUNE[@]}" --output-dir "$RUNS/sentiment"
muxplm evaluate "$RUNS/sentiment" --task sentiment --device cuda --seeds 5 --output "$OUT/eval-sentiment.json"

# Exact resume: kill the same run once checkpoint-200 is whole, then resume it.
python3 -m muxplm "${FINETUNE[@]}" --output-dir "$RUNS/killed" &  # not the shell function: $! must be Python
pid=$!
until [ -f "$RUNS/killed/checkpoint-200/trainer_state.json" ]; do
    kill -0 $pid 2>/dev/null || { echo "the run to be killed ended first" >&2; exit 1; }
    sleep 0.2
done
kill -9 $pid; wait $pid 2>/dev/null || true
muxplm "${FINETUNE[@]}" --output-dir "$RUNS/killed" --resume

python3 - "$RUNS" "$OUT" <<'EOF'
import json, sys
from pathlib import Path

import torch

runs, out = Path(sys.argv[1]), Path(sys.argv[2])
def log(run, kind="train"):
    return [r for r in map(json.loads, (runs / run / "log.jsonl").read_text().splitlines()) if r["kind"] == kind]
whole, resumed = {r["step"]: r["loss"] for r in log("sentiment")}, {r["step"]: r["loss"] for r in log("killed")}
after = [step for step in whole if step > 200]
stages = {}
for run in ("retrieval", "mlm", "sentiment", "killed"):
    summary = json.loads((runs / run / "train_results.json").read_text())
    stages[run] = {key: summary.get(key) for key in ("stage", "final_step", "final_loss", "eval", "train_seconds",
                                                     "train_samples_per_s", "resumed_from_step")}
assert stages["killed"]["resumed_from_step"] == 200, "the killed run was not resumed from its step-200 checkpoint"
evaluation = json.loads((out / "eval-sentiment.json").read_text())
report = {
    "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
    "mixed_precision": "bf16", "stages": stages,
    "resume": {"killed_after_step": 200, "steps_compared": len(after),
               "max_abs_loss_difference": max(abs(whole[s] - resumed[s]) for s in after),
               "final_loss_whole": whole[max(whole)], "final_loss_resumed": resumed[max(resumed)]},
    "evaluate": {"accuracy": evaluation["summary"]["accuracy"], "changed_across_seeds": evaluation["changed_across_seeds"]},
}
(out / "cuda_pass.json").write_text(json.dumps(report, indent=1))
print(json.dumps(report, indent=1))
EOF
