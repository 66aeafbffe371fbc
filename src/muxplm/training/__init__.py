"""Training, evaluation and the end-to-end demo of MUX-PLMs.

Three stages: token-retrieval priming -> MLM / ELECTRA pre-training -> fine-tuning, each a
:func:`run_stage` call (or ``muxplm pretrain`` / ``muxplm finetune``) on :class:`MuxTrainer`,
transformers' Trainer with the multiplexing parts added (it runs under ``accelerate launch`` /
``torchrun``); :func:`evaluate_checkpoint`
scores a fine-tuned model over several composition seeds.

The names are imported on first use, so that the command line's parsers (:mod:`.cli`, which
read :class:`TrainConfig`) do not import PyTorch.
"""

from __future__ import annotations

from ..lazy import lazy_exports

# The module of this package that defines each exported name.
_EXPORTS = {
    **dict.fromkeys(("TrainConfig", "build_config", "load_config_file", "resolve"), "config"),
    **dict.fromkeys(("evaluate_checkpoint", "evaluate_model", "measure_throughput", "summarize"), "evaluate"),
    "load_task_features": "inputs",
    **dict.fromkeys(("MuxTrainer", "MuxTrainingArguments", "TrainingDiverged"), "trainer"),
    "load_classifier": "models",
    **dict.fromkeys(("finetune", "pretrain", "run_stage"), "stages"),
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
