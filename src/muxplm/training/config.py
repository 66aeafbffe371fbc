"""Training configuration: one dataclass for all three stages, its defaults and config files.

Unset hyper-parameters (``None``) are filled in by :func:`resolve` from the recipe of the
stage and model size: the paper's values (docs/training.md) for the ``small``/``base``/``large``
presets, and a CPU recipe for ``tiny`` that learns something within minutes.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..choices import DEMUX_TYPES, FAMILY_NAMES, MUX_TYPES, RETRIEVAL_SOFTMAX, SENTENCE_POOLING, SIZE_PRESETS
from .recipes import TRAINING_RECIPES, for_instances, stage_defaults

STAGES = ("retrieval", "mlm", "electra", "finetune")
PRETRAIN_STAGES = ("retrieval", "mlm", "electra")
FAMILIES = FAMILY_NAMES
MIXED_PRECISION = ("no", "bf16", "fp16", "auto")

# The commands that train, each with its own parser built from the fields below: a field is a
# flag (and a --config key) of the commands it applies to, and of no other.
PRETRAIN, FINETUNE, CONVERT = "pretrain", "finetune", "convert"
TRAINING_COMMANDS = (PRETRAIN, FINETUNE, CONVERT)
PRIMING = (PRETRAIN, CONVERT)  # the commands that pre-train (convert runs retrieval priming)
CHOSEN_MODEL = (PRETRAIN, FINETUNE)  # the commands that start from the model the user names (convert: its own)

# The sections of a training command's --help, in this order (as run_glue.py's Model / Data /
# Training arguments).
HELP_SECTIONS = {
    "run": "run arguments",
    "model": "model arguments",
    "multiplexing": "multiplexing arguments",
    "data": "data arguments",
    "objective": "objective arguments",
    "training": "training arguments",
    "logging": "evaluation, checkpoint and logging arguments",
}


class JSONObject(dict):
    """A mapping that a flag gives as JSON text (``--model-overrides '{"num_hidden_layers": 2}'``)."""

    def __init__(self, value=(), /, **kwargs):
        if isinstance(value, str):
            value = json.loads(value)  # a ValueError: argparse reports the flag's value as invalid
            if not isinstance(value, dict):
                raise ValueError("expected a JSON object")
        super().__init__(value, **kwargs)


def setting(default: Any = None, help: str | dict[str, str] | None = None, *, group: str,
            commands: tuple[str, ...] = TRAINING_COMMANDS, **flag: Any) -> Any:
    """A :class:`TrainConfig` field and its flag: the ``commands`` it applies to, its ``group``
    (a key of :data:`HELP_SECTIONS`), its help (one text, or one per command or tuple of commands) and argparse
    options such as ``choices`` and ``metavar`` (``muxplm.training.cli`` builds the flags)."""
    if group not in HELP_SECTIONS or not set(commands) <= set(TRAINING_COMMANDS):
        raise ValueError(f"a setting's group is one of {', '.join(HELP_SECTIONS)} and its commands among "
                         f"{', '.join(TRAINING_COMMANDS)}; got {group!r} and {commands!r}")
    metadata = {"help": help, "group": group, "commands": commands, **flag}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class TrainConfig:
    """Everything one training run needs. Field names match the CLI flags (``--max-steps`` ->
    ``max_steps``; the flags are built from these fields) and the keys of a ``--config`` file.
    ``None`` means the recipe's value for the stage and model size (:func:`resolve`)."""

    stage: str = setting("finetune", "the pre-training stage: retrieval (priming), mlm (every family but ELECTRA) "
                                     "or electra (MUX-ELECTRA)",
                         group="run", commands=(PRETRAIN,), choices=STAGES, flag_choices=PRETRAIN_STAGES)
    output_dir: str = setting("runs/muxplm", "where checkpoints, logs and the final model go (required)", group="run",
                              metavar="DIR")
    recipe: str | None = setting(
        help={FINETUNE: "a named recipe: paper (the paper's fine-tuning: lr 5e-5, 32 groups a step, 128 tokens, "
                        "steps by GLUE task), demo (muxplm demo's), convert (a converted encoder's: lr 2e-4, "
                        "encoder 1e-4); default: the one the --init checkpoint was trained with (the paper's for "
                        "its released checkpoints)",
              PRETRAIN: "a named recipe: demo (muxplm demo's); the checkpoint records it and the next stage "
                        "started from it takes it too"},
        group="run", commands=(PRETRAIN, FINETUNE), choices=tuple(TRAINING_RECIPES))
    # model: a size preset (fresh weights), a MUX checkpoint, or a plain encoder
    preset: str | None = setting(help="a fresh model of this size", group="model", commands=CHOSEN_MODEL,
                                 choices=tuple(SIZE_PRESETS))
    init: str | None = setting(help="start from this MUX checkpoint (a folder, or a hub name)", group="model",
                               commands=CHOSEN_MODEL, metavar="DIR")
    init_encoder: str | None = setting(help="warm-start from a plain encoder folder (BERT, ELECTRA, RoBERTa / "
                                            "XLM-R / CamemBERT, DistilBERT or MPNet; its model_type decides)",
                                       group="model", commands=CHOSEN_MODEL, metavar="DIR")
    keep_layers: int | None = setting(
        help={CHOSEN_MODEL: "with --init-encoder or --init: keep only the encoder's first k layers (a cut encoder: "
                            "fewer layers, faster, and stackable with N)",
              CONVERT: "keep only the plain encoder's first k layers (a cut encoder: fewer layers, faster, and "
                       "stackable with N)"},
        group="model", metavar="K")
    family: str | None = setting(help="encoder family of a fresh --preset model (default: from --init / "
                                      "--init-encoder, else electra for --stage electra, else bert)",
                                 group="model", commands=CHOSEN_MODEL, choices=FAMILIES)
    num_instances: int | None = setting(
        help={CHOSEN_MODEL: "N, inputs per forward pass (1 = plain baseline; default: the --init checkpoint's, else 2)",
              CONVERT: "N >= 2, inputs per forward pass (required)"}, group="multiplexing")
    # No fixed choices: any registered variant is accepted (the model config checks the registries).
    mux_type: str | None = setting(help=f"multiplexer ({', '.join(MUX_TYPES)}, or a registered one)",
                                   group="multiplexing")
    demux_type: str | None = setting(help=f"demultiplexer ({', '.join(DEMUX_TYPES)}, or a registered one)",
                                     group="multiplexing")
    retrieval_loss_weight: float | None = setting(
        help="--stage mlm / electra: weight r of the auxiliary retrieval loss, (1 - r) x task + r x retrieval "
             "(tiny recipe: 0.2 for N > 1)", group="objective", commands=(PRETRAIN,))
    retrieval_softmax: str | None = setting(
        help="retrieval loss over the vocabulary or over the batch's tokens (cheaper; training only)",
        group="objective", commands=PRIMING, choices=RETRIEVAL_SOFTMAX)
    sentence_pooling: str | None = setting(
        help="sentence heads read the first position or each instance's mean over its tokens",
        group="model", commands=(FINETUNE,), choices=SENTENCE_POOLING)
    num_unmuxed_layers: int | None = setting(
        help="partial multiplexing: leading encoder layers run on each instance before the mixture",
        group="multiplexing")
    start_unmuxed_layers: int | None = setting(
        help="progressive multiplexing: start with this many unmuxed layers (a --init checkpoint's own count) and "
             "move the mixture down one layer at a time over the first 3/4 of the steps to --num-unmuxed-layers",
        group="multiplexing")
    regroup_instances: bool = setting(
        False, "with --init and another --num-instances than the checkpoint's (a curriculum over N): keep its "
               "encoder and start only the per-instance keys of its multiplexer and demultiplexer afresh",
        group="multiplexing", commands=CHOSEN_MODEL)
    mux_key_norm: float | None = setting(help="L2 norm of the multiplexing keys (new MUX models)",
                                         group="multiplexing")
    dropout: float | None = setting(help="hidden and attention dropout", group="model")
    model_overrides: JSONObject = setting(JSONObject(), 'JSON model config overrides, e.g. \'{"num_hidden_layers": 2}\'',
                                          group="model", metavar="JSON")
    tokenizer: str | None = setting(help="tokenizer folder (default: the checkpoint's, else MiniLM's vocabulary)",
                                    group="model", metavar="DIR")
    teacher: str | None = setting(
        help={FINETUNE: "distil from this fine-tuned plain (N = 1) classifier (its soft labels)",
              PRETRAIN: "--stage retrieval: distil from this plain (N = 1) encoder (its per-instance states)",
              CONVERT: "distil from this plain (N = 1) encoder (its per-instance states)"},
        group="objective", metavar="DIR")
    distill_temperature: float = setting(2.0, "softmax temperature of the teacher's soft labels", group="objective",
                                         commands=(FINETUNE,))
    distill_weight: float = setting(0.5, "weight w of the distillation term", group="objective")
    distill_pooling: str = setting("tokens", "with a teacher: match every token's states ('tokens') or each "
                                             "instance's mean over its tokens ('mean', the sentence vector)",
                                   group="objective", commands=PRIMING, choices=("tokens", "mean"))
    consistency_weight: float | None = setting(
        help="encode every batch in two compositions and add this weight x the disagreement of their "
             "predictions (steadier predictions whatever the companions; tiny recipe: 4 for N > 1; 0 = off)",
        group="objective", commands=(FINETUNE,))
    # data
    task: str | None = setting(help="built-in (sentiment, trec, pos, ner), hub (glue/sst2, conll2003, ud/en_ewt), "
                                    "or a name for --train-file data", group="data", commands=(FINETUNE,))
    task_kind: str | None = setting(help="kind of local --train-file data (default: by file extension)",
                                    group="data", commands=(FINETUNE,), choices=("sentence", "token"))
    train_file: list[str] = setting(
        [], {FINETUNE: "the task's training data: a CSV/JSONL/CoNLL file",
             PRETRAIN: "pre-training text: .txt files, or .jsonl / .parquet with a text column; several, or globs "
                       "(default: the built-in corpus)",
             CONVERT: "priming text: .txt files, or .jsonl / .parquet with a text column; several, or globs "
                      "(default: the built-in corpus)"},
        group="data", metavar="FILE")
    dataset: list[str] = setting(
        [], "hub datasets of pre-training text, by name (NAME or NAME:CONFIG; their train split, a text column), "
            "with or instead of --train-file; several are read one after the other, e.g. --dataset "
            "wikimedia/wikipedia:20231101.en bookcorpus", group="data", commands=PRIMING, metavar="NAME")
    streaming: bool = setting(
        False, "read --train-file / --dataset as a stream (nothing prepared or cached first): for corpora too large "
               "to prepare; blocks are shuffled within windows of 10,000, and a resume continues the stream exactly",
        group="data", commands=PRIMING)
    preprocessing_num_workers: int | None = setting(
        help="processes that read and tokenize the pre-training text, once per corpus (default: every core)",
        group="data", commands=PRIMING)
    validation_file: str | None = setting(help="the task's evaluation data (CSV/JSONL/CoNLL)", group="data",
                                          commands=(FINETUNE,), metavar="FILE")
    cache_dir: str | None = setting(help="data cache (default: $MUXPLM_CACHE or the user cache)", group="data",
                                    metavar="DIR")
    max_train_examples: int | None = setting(help="use at most this many training examples", group="data",
                                             commands=(FINETUNE,))
    max_eval_examples: int | None = setting(help="evaluate on a fixed subset of this many examples", group="data",
                                            commands=(FINETUNE,))
    corpus_max_words: int | None = setting(help="cap on the built-in pre-training corpus", group="data",
                                           commands=PRIMING)
    corpus_sources: list[str] | None = setting(help="parts of the built-in corpus to use (default: all)",
                                               group="data", commands=PRIMING, metavar="NAME")
    mlm_steps: int | None = setting(
        help="after the priming, this many steps of MLM on mixtures (with the auxiliary retrieval loss) into "
             "--output-dir; the priming goes to OUTPUT_DIR/priming", group="objective", commands=(CONVERT,))
    mlm_probability: float = setting(0.15, "--stage mlm: share of each instance's tokens masked (electra replaces "
                                           "its model config's replace_probability)",
                                     group="objective", commands=(PRETRAIN,))
    # optimisation
    lr: float | None = setting(help="peak learning rate (fresh modules and heads)", group="training")
    encoder_lr: float | None = setting(help="learning rate of a warm-started encoder's embeddings and layers "
                                            "(default: --lr)", group="training")
    batch_size: int | None = setting(help="per process, in instances", group="training")
    batch_groups: int | None = setting(help="per process, in multiplexed groups (batch = groups x N; used when "
                                            "--batch-size is unset)", group="training")
    eval_batch_size: int | None = setting(help="evaluation batch size, in instances", group="training")
    gradient_accumulation_steps: int = setting(1, "micro-batches per optimizer step", group="training")
    max_steps: int | None = setting(help="optimizer steps (instead of --num-epochs)", group="training")
    num_epochs: float | None = setting(help="passes over the training data", group="training")
    min_steps: int | None = setting(help="with --num-epochs: train at least this many steps (small data: more epochs)",
                                    group="training")
    warmup_ratio: float | None = setting(help="share of the steps over which the learning rate rises",
                                         group="training")
    warmup_steps: int | None = setting(help="warm-up as a step count (instead of --warmup-ratio)", group="training")
    weight_decay: float | None = setting(help="AdamW weight decay", group="training")
    adam_eps: float | None = setting(help="AdamW epsilon (default 1e-6; the paper recipe's 1e-8)", group="training")
    max_grad_norm: float = setting(1.0, "gradient clipping norm", group="training")
    group_by_length: bool | None = setting(
        help="batches of similar lengths: less padding, a cheaper step (sorted within pools of 50 batches, "
             "then shuffled; default: off)", group="training", commands=(FINETUNE,))
    max_length: int | None = setting(help="sequence length in tokens", group="data")
    seed: int = setting(42, "seed of the data order, the masking and new weights", group="training")
    mixed_precision: str = setting("no", "bf16 on CPU or GPU, fp16 on GPU (auto: bf16 where supported)",
                                   group="training", choices=MIXED_PRECISION)
    dataloader_workers: int | None = setting(
        help="processes that collate batches ahead of the step (default: 2 on a GPU, 0 on a CPU)", group="training")
    # bookkeeping
    eval_steps: int | None = setting(help="evaluate every this many steps", group="logging")
    save_steps: int | None = setting(help="checkpoint every this many steps", group="logging")
    logging_steps: int | None = setting(help="log the training loss every this many steps", group="logging")
    save_total_limit: int | None = setting(2, "keep this many newest checkpoints (the best-scoring one is kept "
                                              "as well)", group="logging")
    load_best_at_end: bool | None = setting(help="end with the weights of the checkpoint that scored best on the "
                                                 "evaluation set (default: off; on in the paper recipe)",
                                            group="logging")
    early_stopping_patience: int | None = setting(
        help="stop when this many evaluations in a row have not improved on the best score, and end with "
             "the best checkpoint's weights (implies --load-best-at-end; default: train every step)", group="logging")
    resume: bool = setting(False, "continue from the latest checkpoint in --output-dir", group="run")
    report_to: list[str] | None = setting(
        help="experiment trackers that also get the training curves: tensorboard, wandb, mlflow, ... (any "
             "Accelerate tracker), all (every installed one) or none (default: tensorboard when installed)",
        group="logging", metavar="TRACKER")
    progress: bool = setting(True, "no progress bar (by default one that redraws in a terminal and prints a line "
                                   "every few percent into a file)", group="logging")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELD_NAMES = {f.name for f in dataclasses.fields(TrainConfig)}
LIST_FIELDS = {f.name for f in dataclasses.fields(TrainConfig) if str(f.type).startswith("list")}


def command_settings(command: str) -> list[dataclasses.Field]:
    """The fields of :class:`TrainConfig` that ``command`` takes (as flags and --config keys)."""
    return [f for f in dataclasses.fields(TrainConfig) if command in f.metadata["commands"]]


def setting_help(setting_field: dataclasses.Field, command: str) -> str:
    """The help of a setting's flag in ``command``."""
    text = setting_field.metadata["help"]
    if isinstance(text, dict):
        return next(help for owners, help in text.items() if command in ((owners,) if isinstance(owners, str) else owners))
    return text


def refuse_foreign_settings(settings: dict[str, Any], command: str, source: str) -> None:
    """A ``ValueError`` for the first of ``settings`` that ``command`` does not take, naming it,
    where it came from (``source``) and the commands it belongs to."""
    commands = {f.name: f.metadata["commands"] for f in dataclasses.fields(TrainConfig)}
    for name in settings:
        if name in commands and command not in commands[name]:
            owners = " and ".join(f"`muxplm {owner}`" for owner in commands[name])
            raise ValueError(f"{source}: {name} is a setting of {owners}, not of `muxplm {command}`")

def recipe_for(stage: str, size: str | None, name: str | None = None, task: str | None = None) -> dict[str, Any]:
    """The settings a run takes from its recipe: the named one (``--recipe``), else the one of
    its stage for the model's size (the paper's, or the CPU one for ``tiny``)."""
    if name is not None:
        return TRAINING_RECIPES[name](stage, task, size)
    return stage_defaults(stage, size)


def resolve(config: TrainConfig, size: str | None, num_instances: int = 1, default_recipe: str | None = None,
            world_size: int = 1) -> TrainConfig:
    """A copy of ``config`` with every unset hyper-parameter taken from its recipe: ``--recipe``
    (else ``default_recipe``, the one a checkpoint calls for), else the one for its stage and
    model size (``size`` = the preset name, or the preset the loaded model matches);
    ``num_instances`` turns a batch given in groups into instances, ``world_size`` a recipe's
    global batch into one per process."""
    check_choices(config)  # the stage and recipe pick what fills the rest
    values = config.to_dict()
    values["recipe"] = config.recipe or default_recipe
    recipe = for_instances(recipe_for(config.stage, size, values["recipe"], config.task), num_instances)
    global_batch = recipe.pop("global_batch_size", None)  # sequences a step over all processes
    if values["batch_size"] is None and values["batch_groups"] is None and global_batch:
        if global_batch % world_size:
            raise ValueError(f"the {values['recipe']} recipe's global batch of {global_batch} does not split over "
                             f"{world_size} processes: give --batch-size (per process)")
        values["batch_size"] = global_batch // world_size
    if values["batch_size"] is None and values["batch_groups"] is None:
        values["batch_groups"] = recipe.pop("batch_groups", None)
    if values["batch_size"] is None and values["batch_groups"] is not None:
        values["batch_size"] = values["batch_groups"] * num_instances
    epochs_cap = recipe.pop("epochs_scale_with_instances", None)
    if epochs_cap and values["num_epochs"] is None and values["max_steps"] is None:
        values["num_epochs"] = min(recipe["num_epochs"] * num_instances, epochs_cap)
    # So is the run's length: steps or epochs the user gave are not overridden by the recipe's.
    if values["max_steps"] is not None or values["num_epochs"] is not None:
        recipe.pop("max_steps", None)
        recipe.pop("num_epochs", None)
    # Warm-up is one setting given two ways: a ratio the user chose is not overridden by the
    # recipe's step count (nor the reverse).
    if values["warmup_ratio"] is not None or values["warmup_steps"] is not None:
        recipe.pop("warmup_ratio", None)
        recipe.pop("warmup_steps", None)
    for key, value in recipe.items():
        if values.get(key) is None:
            values[key] = value
    if values["max_steps"] is None and values["num_epochs"] is None:
        values["num_epochs"] = 1.0
    if values["warmup_steps"] is None and values["warmup_ratio"] is None:
        values["warmup_ratio"] = 0.0
    fallbacks = {"consistency_weight": 0.0, "group_by_length": False, "load_best_at_end": False, "adam_eps": 1e-6,
                 "eval_batch_size": max(values["batch_size"] or 0, 64)}  # what no recipe sets
    values.update({key: value for key, value in fallbacks.items() if values[key] is None})
    resolved = TrainConfig(**values)
    check_values(resolved)
    return resolved


def validate(config: TrainConfig) -> None:
    """Raise ``ValueError`` for settings that cannot work, naming the setting."""
    check_choices(config)
    check_values(config)


def check_choices(config: TrainConfig) -> None:
    """The flags' choices hold for config files and Python callers too."""
    for setting_field in dataclasses.fields(config):
        allowed, value = setting_field.metadata.get("choices"), getattr(config, setting_field.name)
        if allowed and value is not None and value not in allowed:
            raise ValueError(f"{setting_field.name} must be one of {', '.join(allowed)}, got {value!r}")


def model_source(config: TrainConfig) -> str | None:
    """The one of ``preset``, ``init`` and ``init_encoder`` that names the model to train (``None``
    if none does); two are refused."""
    sources = [name for name in ("preset", "init", "init_encoder") if getattr(config, name)]
    if len(sources) > 1:
        raise ValueError(f"give only one of --preset, --init, --init-encoder (got {', '.join(sources)})")
    return sources[0] if sources else None


def check_values(config: TrainConfig) -> None:
    """The checks of :func:`validate` besides the choices."""
    model_source(config)
    if config.keep_layers is not None and (config.keep_layers < 1 or not (config.init_encoder or config.init)):
        raise ValueError(f"keep_layers cuts the encoder given with --init-encoder or --init (or convert) to its first "
                         f"k >= 1 layers, got keep_layers={config.keep_layers}"
                         + ("" if config.init_encoder or config.init else " with neither"))
    if config.start_unmuxed_layers is not None and not (
            config.num_unmuxed_layers is not None and 0 <= config.num_unmuxed_layers <= config.start_unmuxed_layers):
        raise ValueError(f"progressive multiplexing moves the mixture down from start_unmuxed_layers to "
                         f"num_unmuxed_layers: give both, with 0 <= num_unmuxed_layers <= start_unmuxed_layers (got "
                         f"{config.num_unmuxed_layers} and {config.start_unmuxed_layers})")
    if config.stage == "finetune" and not (config.task or config.train_file):
        raise ValueError("fine-tuning needs --task NAME or --train-file FILE")
    positive = ("lr", "batch_groups", "batch_size", "eval_batch_size", "max_length", "gradient_accumulation_steps",
                "preprocessing_num_workers")
    for name in positive:
        value = getattr(config, name)
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    for name in ("max_steps", "min_steps", "eval_steps", "save_steps", "logging_steps", "mlm_steps"):
        value = getattr(config, name)
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if config.dataloader_workers is not None and config.dataloader_workers < 0:
        raise ValueError(f"dataloader_workers must be >= 0, got {config.dataloader_workers}")
    if config.num_epochs is not None and config.num_epochs <= 0:
        raise ValueError(f"num_epochs must be positive, got {config.num_epochs}")
    if config.warmup_ratio is not None and not 0 <= config.warmup_ratio <= 1:
        # 1: the learning rate rises over the whole run (the conversion recipe's schedule)
        raise ValueError(f"warmup_ratio must lie in [0, 1], got {config.warmup_ratio}")
    if config.save_total_limit is not None and config.save_total_limit < 1:
        raise ValueError(f"save_total_limit must be >= 1 (or unset for no limit), got {config.save_total_limit}")
    if config.early_stopping_patience is not None and config.early_stopping_patience < 1:
        raise ValueError(f"early_stopping_patience must be >= 1 (or unset), got {config.early_stopping_patience}")
    if (config.load_best_at_end or config.early_stopping_patience) and config.eval_steps and config.save_steps \
            and config.save_steps % config.eval_steps:
        raise ValueError(f"load_best_at_end compares the evaluations made when checkpoints are saved: save_steps "
                         f"({config.save_steps}) must be a multiple of eval_steps ({config.eval_steps})")
    if config.consistency_weight is not None and config.consistency_weight < 0:
        raise ValueError(f"consistency_weight must be >= 0, got {config.consistency_weight}")
    if not 0 < config.mlm_probability < 1:
        raise ValueError(f"mlm_probability must lie in (0, 1), got {config.mlm_probability}")


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Settings from a JSON or YAML file (YAML needs pyyaml); keys may use ``-`` or ``_``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file {path} not found")
    text = path.read_text()
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ValueError(f"{path}: reading YAML needs pyyaml (pip install pyyaml), or use JSON") from None
        data = yaml.safe_load(text) or {}
    else:
        try:
            data = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON ({error.msg} at line {error.lineno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config file must hold a mapping of settings")
    settings = {str(key).replace("-", "_"): value for key, value in data.items()}
    unknown = sorted(set(settings) - FIELD_NAMES)
    if unknown:
        raise ValueError(f"{path}: unknown setting(s) {', '.join(unknown)}")
    for name in LIST_FIELDS:  # one value where a list is expected
        if isinstance(settings.get(name), str):
            settings[name] = [settings[name]]
    return settings


def build_config(file_settings: dict[str, Any] | None = None, **flags) -> TrainConfig:
    """File settings first, then every flag that was given (not ``None``) on top. Validated with
    the rest of the run's settings, once they are resolved (:func:`resolve`)."""
    values = dict(file_settings or {})
    values.update({key: value for key, value in flags.items() if value is not None})
    unknown = sorted(set(values) - FIELD_NAMES)
    if unknown:
        raise ValueError(f"unknown setting(s) {', '.join(unknown)}")
    return TrainConfig(**values)
