"""``muxplm reproduce``: a small-scale reproduction of the paper's Table 1.

Every model gets the same compute budget (steps, batch size, sequence length, examples) and
goes through the three training stages with :func:`muxplm.training.run_stage`:
retrieval priming (N > 1 only, unless a size primes its N = 1 rows too), MLM or ELECTRA
pre-training on the offline corpus, then fine-tuning. One pre-trained checkpoint per model is
fine-tuned on every task; each fine-tuned model is scored over several composition seeds
(:func:`muxplm.training.evaluate_checkpoint`) and all fine-tuned models are timed side by
side (round robin, the bench code's inputs and timer). Two rows start from the pretrained
MiniLM encoder instead: plain MiniLM (N = 1, fine-tuned directly) and MUX-MiniLM (N = 2,
a short priming + MLM stage first).

Outputs in the output directory: ``results.json`` (everything), ``table.md`` (Table 1 shape:
rows = models, columns = tasks, sentence/token averages, throughput gain), ``points.json``
(the schema of ``muxplm analyze pareto``) + ``pareto.png``, ``records.json`` (per-seed records)
+ ``lottery.md`` and ``ensemble.md``. Stages whose output already holds ``train_results.json``
and evaluations already on disk are reused, and a stage stopped midway continues from its last
checkpoint, so an interrupted run continues where it stopped.

The package by job:

* :mod:`.table` — the model table: every row it can train and the lists a run takes by name;
* :mod:`.targets` — the paper's targets, checked on the rows;
* :mod:`.rows` — the rows from what was measured (scores, retention, throughput gain, time);
* :mod:`.run` — running the rows: stages trained or reused, scored, timed;
* :mod:`.merge` — one table from the results folders of runs made apart (``--merge``);
* :mod:`.render` — Table 1 as markdown, the output files and the printed report.
"""

from __future__ import annotations

from .merge import MERGE_TIMING_SETTINGS, merge_reproductions
from .render import report_text, table1_markdown, write_outputs
from .rows import _baseline_of as _baseline_of, group_averages, per_seed_records, retention, summarize_results
from .run import (
    SAVE_STEPS,
    _common as _common,
    _finished_with as _finished_with,
    _run as _run,
    cut_key,
    evaluate,
    finetune_model,
    keep_configs,
    measure_side_by_side,
    pretrain_model,
    resolve_recipe,
    run_reproduction,
    timed_tasks,
    training_dir,
)
from .table import (
    CONVERT_MODELS,
    DEFAULT_MODELS,
    DEFAULT_TASKS,
    MODEL_GROUPS,
    MODELS,
    PAPER_MODELS,
    SENTENCE_TASKS,
    TOKEN_TASKS,
    ModelRecipe,
    resolve_models,
)
from .targets import RETENTION_TARGETS, STABILITY_TARGETS, TMUX_GAP_TARGET, check_targets

# The private names are the tests' (a stage's reuse and a row's baseline, checked on their own).
# A test that replaces a function the driver calls patches it where the driver looks it up: the
# :mod:`.run` module (``monkeypatch.setattr(reproduce.run, "_run", ...)``), not this package.
__all__ = [
    "CONVERT_MODELS", "DEFAULT_MODELS", "DEFAULT_TASKS", "MERGE_TIMING_SETTINGS", "MODEL_GROUPS", "MODELS",
    "PAPER_MODELS", "RETENTION_TARGETS", "SAVE_STEPS", "SENTENCE_TASKS", "STABILITY_TARGETS", "TMUX_GAP_TARGET",
    "TOKEN_TASKS", "ModelRecipe", "check_targets", "cut_key", "evaluate", "finetune_model", "group_averages",
    "keep_configs", "measure_side_by_side", "merge_reproductions", "per_seed_records", "pretrain_model",
    "report_text", "resolve_models", "resolve_recipe", "retention", "run_reproduction", "summarize_results",
    "table1_markdown", "timed_tasks", "training_dir", "write_outputs",
]
