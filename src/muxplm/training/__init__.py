"""Training, evaluation and the end-to-end demo of MUX-PLMs (DESIGN.md §2-3).

Three stages: token-retrieval priming -> MLM / ELECTRA pre-training -> fine-tuning, each a
:func:`run_stage` call (or ``muxplm pretrain`` / ``muxplm finetune``) on a compact Accelerate
loop that also runs under ``accelerate launch`` / ``torchrun``; :func:`evaluate_checkpoint`
scores a fine-tuned model over several composition seeds.
"""

from .config import TrainConfig, build_config, load_config_file, resolve
from .evaluate import evaluate_checkpoint, evaluate_model, measure_throughput, summarize
from .inputs import load_task_features
from .loop import TrainingDiverged
from .models import load_classifier
from .stages import finetune, pretrain, run_stage

__all__ = [
    "TrainConfig",
    "TrainingDiverged",
    "build_config",
    "evaluate_checkpoint",
    "evaluate_model",
    "finetune",
    "load_classifier",
    "load_config_file",
    "load_task_features",
    "measure_throughput",
    "pretrain",
    "resolve",
    "run_stage",
    "summarize",
]
