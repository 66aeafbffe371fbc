"""Sub-commands ``data``, ``pretrain``, ``finetune``, ``convert``, ``evaluate`` and ``demo``.

Hyper-parameters come from flags or a ``--config`` file (JSON, or YAML with pyyaml); a flag
given on the command line overrides the file. Unset values take the recipe for the stage and
model size (see :mod:`muxplm.training.config`).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..configuration import DEMUX_TYPES, MUX_TYPES, RETRIEVAL_SOFTMAX, SENTENCE_POOLING, SIZE_PRESETS
from .config import FAMILIES, MIXED_PRECISION, PRETRAIN_STAGES, build_config, load_config_file
from .loop import TrainingDiverged


def register(subparsers) -> None:
    data = subparsers.add_parser("data", help="fetch the offline corpora and tasks")
    data_commands = data.add_subparsers(dest="data_command", metavar="ACTION")
    fetch = data_commands.add_parser("fetch", help="download and unpack the data sources (idempotent)")
    fetch.add_argument("--cache-dir", help="where to keep them (default: $MUXPLM_CACHE or the user cache)")
    fetch.add_argument("--only", nargs="+", metavar="NAME", help="fetch only these sources")
    fetch.set_defaults(func=_fetch)
    data.set_defaults(func=lambda args: (data.print_help(), 2)[1])

    pretrain = subparsers.add_parser("pretrain", help="stage 1 (retrieval priming) or 2 (mlm / electra)")
    pretrain.add_argument("--stage", choices=PRETRAIN_STAGES, help="retrieval, mlm (MUX-BERT) or electra (MUX-ELECTRA)")
    _training_flags(pretrain)
    pretrain.set_defaults(func=_train, default_stage=None)

    finetune = subparsers.add_parser("finetune", help="stage 3: fine-tune on a task")
    finetune.add_argument("--task", help="built-in (sentiment, trec, pos, ner), hub (glue/sst2, conll2003, ud/en_ewt), "
                                         "or a name for --train-file data")
    finetune.add_argument("--task-kind", choices=("sentence", "token"),
                          help="kind of local --train-file data (default: by file extension)")
    _training_flags(finetune)
    finetune.set_defaults(func=_train, default_stage="finetune")

    convert = subparsers.add_parser(
        "convert", help="multiplex a plain pretrained BERT/ELECTRA: warm start + priming with self-distillation"
    )
    convert.add_argument("plain_model_dir", help="a plain BERT/ELECTRA checkpoint directory")
    _training_flags(convert)
    convert.set_defaults(func=_convert)

    evaluate = subparsers.add_parser("evaluate", help="score a fine-tuned checkpoint over composition seeds")
    evaluate.add_argument("checkpoint", help="a directory written by `muxplm finetune`")
    evaluate.add_argument("--task", help="task name (as for finetune); or give --validation-file")
    evaluate.add_argument("--validation-file", help="local evaluation data (CSV/JSONL or CoNLL)")
    evaluate.add_argument("--task-kind", choices=("sentence", "token"))
    evaluate.add_argument("--split", default="validation")
    evaluate.add_argument("--seeds", type=int, default=5, help="number of composition seeds (default 5)")
    evaluate.add_argument("--ensemble", action="store_true", help="also score ensembled predictions")
    evaluate.add_argument("--batch-size", type=int, default=64)
    evaluate.add_argument("--max-length", type=int)
    evaluate.add_argument("--max-examples", type=int, help="score only a fixed subset of this many examples")
    evaluate.add_argument("--cache-dir")
    evaluate.add_argument("--device", help="cpu (default), cuda or cuda:K")
    evaluate.add_argument("--output", help="results JSON (default: CHECKPOINT/eval_results.json)")
    evaluate.set_defaults(func=_evaluate)

    demo = subparsers.add_parser("demo", help="all three stages on the tiny preset, N=1 vs N=2, on CPU")
    demo.add_argument("--quick", action="store_true", help="a one-minute version (what the tests run)")
    demo.add_argument("--output-dir", default="runs/demo")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--no-progress", action="store_true")
    demo.set_defaults(func=_demo)


def _training_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--config", help="JSON or YAML file of settings (flags override it)")
    add("--output-dir", help="where checkpoints, logs and the final model go")
    model = parser.add_argument_group("model")
    model.add_argument("--preset", choices=tuple(SIZE_PRESETS), help="fresh model of this size")
    model.add_argument("--init", help="start from this MUX checkpoint directory")
    model.add_argument("--init-encoder", help="warm-start from a plain BERT/ELECTRA directory")
    model.add_argument("--family", choices=FAMILIES, help="bert or electra (default: from --init, else by stage)")
    model.add_argument("--num-instances", type=int, help="N, inputs per forward pass (1 = plain baseline)")
    # No fixed choices: any registered variant (built-in: see the help) is accepted by the config.
    model.add_argument("--mux-type", help=f"multiplexer ({', '.join(MUX_TYPES)}, or a registered one)")
    model.add_argument("--demux-type", help=f"demultiplexer ({', '.join(DEMUX_TYPES)}, or a registered one)")
    model.add_argument("--retrieval-loss-weight", type=float, help="auxiliary retrieval loss weight r")
    model.add_argument("--retrieval-softmax", choices=RETRIEVAL_SOFTMAX,
                       help="retrieval loss over the vocabulary or over the batch's tokens (cheaper)")
    model.add_argument("--sentence-pooling", choices=SENTENCE_POOLING,
                       help="sentence heads read the first position or each instance's mean over its tokens")
    model.add_argument("--num-unmuxed-layers", type=int,
                       help="partial multiplexing: leading encoder layers run on each instance before the mixture")
    model.add_argument("--mux-key-norm", type=float, help="L2 norm of the multiplexing keys (new MUX models)")
    model.add_argument("--dropout", type=float, help="hidden and attention dropout")
    model.add_argument("--model-overrides", type=json.loads, help='JSON config overrides, e.g. \'{"num_hidden_layers": 2}\'')
    model.add_argument("--teacher", help="distil from this plain (N = 1) model: a fine-tuned classifier when "
                       "fine-tuning (soft labels), a plain encoder when priming (its per-instance states)")
    model.add_argument("--distill-temperature", type=float, help="softmax temperature of the soft labels (2)")
    model.add_argument("--distill-weight", type=float, help="weight w of the distillation term (0.5)")
    model.add_argument("--consistency-weight", type=float,
                       help="fine-tuning: encode every batch in two compositions and add this weight x the "
                       "disagreement of their predictions (steadier predictions whatever the companions; "
                       "tiny recipe: 4 for N > 1; 0 = off)")
    model.add_argument("--tokenizer", help="tokenizer directory (default: the checkpoint's, else MiniLM's vocab)")
    data = parser.add_argument_group("data")
    data.add_argument("--train-file", nargs="+", help="pre-training text files, or a task's CSV/JSONL/CoNLL file")
    data.add_argument("--validation-file")
    data.add_argument("--cache-dir")
    data.add_argument("--max-train-examples", type=int)
    data.add_argument("--max-eval-examples", type=int)
    data.add_argument("--corpus-max-words", type=int, help="cap on the built-in pre-training corpus")
    data.add_argument("--corpus-sources", nargs="+", help="parts of the built-in corpus to use")
    data.add_argument("--mlm-probability", type=float)
    optim = parser.add_argument_group("optimisation")
    optim.add_argument("--lr", type=float)
    optim.add_argument("--encoder-lr", type=float,
                       help="learning rate of the embeddings and encoder layers (default: --lr)")
    optim.add_argument("--batch-size", type=int, help="per process, in instances")
    optim.add_argument("--batch-groups", type=int, help="per process, in multiplexed groups (batch = groups x N)")
    optim.add_argument("--eval-batch-size", type=int)
    optim.add_argument("--gradient-accumulation-steps", type=int)
    optim.add_argument("--max-steps", type=int)
    optim.add_argument("--num-epochs", type=float)
    optim.add_argument("--min-steps", type=int, help="with --num-epochs: train at least this many steps")
    optim.add_argument("--warmup-ratio", type=float)
    optim.add_argument("--warmup-steps", type=int)
    optim.add_argument("--weight-decay", type=float)
    optim.add_argument("--adam-eps", type=float)
    optim.add_argument("--max-grad-norm", type=float)
    optim.add_argument("--max-length", type=int, help="sequence length in tokens")
    optim.add_argument("--seed", type=int)
    optim.add_argument("--mixed-precision", choices=MIXED_PRECISION)
    optim.add_argument("--group-by-length", action="store_const", const=True,
                       help="batches of similar lengths: less padding, a cheaper step (order still random)")
    optim.add_argument("--dataloader-workers", type=int,
                       help="processes that collate batches ahead of the step (default: 2 on a GPU, 0 on a CPU)")
    run = parser.add_argument_group("run")
    run.add_argument("--eval-steps", type=int)
    run.add_argument("--save-steps", type=int)
    run.add_argument("--logging-steps", type=int)
    run.add_argument("--save-total-limit", type=int,
                     help="keep this many newest checkpoints (the best-scoring one is kept as well)")
    run.add_argument("--load-best-at-end", action="store_const", const=True,
                     help="end with the weights of the checkpoint that scored best on the evaluation set")
    run.add_argument("--resume", action="store_const", const=True, help="continue from the latest checkpoint")
    run.add_argument("--no-progress", dest="progress", action="store_const", const=False)


_NOT_SETTINGS = {"command", "func", "config", "default_stage", "data_command", "plain_model_dir"}


def config_from_args(args: argparse.Namespace):
    """The :class:`TrainConfig` of a ``pretrain`` / ``finetune`` invocation."""
    file_settings = load_config_file(args.config) if args.config else {}
    flags = {key: value for key, value in vars(args).items() if key not in _NOT_SETTINGS}
    if args.default_stage:
        if file_settings.get("stage", "finetune") != "finetune":
            raise ValueError(f"the config file sets stage={file_settings['stage']!r}; use `muxplm pretrain`")
        flags["stage"] = "finetune"
    else:
        stage = flags.get("stage") or file_settings.get("stage")
        if stage not in PRETRAIN_STAGES:
            raise ValueError(f"give --stage {'|'.join(PRETRAIN_STAGES)} (got {stage!r})")
        flags["stage"] = stage
    if not (flags.get("output_dir") or file_settings.get("output_dir")):
        raise ValueError("give --output-dir (where the checkpoints and final model go)")
    return build_config(file_settings, **flags)


def _train(args) -> int:
    from .stages import run_stage

    config = config_from_args(args)
    try:
        summary = run_stage(config)
    except TrainingDiverged as error:
        print(f"muxplm {args.command}: training diverged: {error}", file=sys.stderr)
        return 1
    from accelerate import PartialState

    if PartialState().is_main_process:
        shown = {k: summary[k] for k in ("stage", "final_step", "final_loss", "eval", "train_samples_per_s") if k in summary}
        print(json.dumps(shown, indent=1))
        print(f"model saved to {config.output_dir}")
    return 0


def _convert(args) -> int:
    from .convert import conversion_config
    from .stages import run_stage

    flags = {key: value for key, value in vars(args).items() if key not in _NOT_SETTINGS}
    if not flags.get("output_dir"):
        raise ValueError("give --output-dir (where the converted model goes)")
    file_settings = load_config_file(args.config) if args.config else {}
    instances = flags.pop("num_instances", None) or file_settings.pop("num_instances", None)
    config = conversion_config(args.plain_model_dir, instances, flags.pop("output_dir"), file_settings, **flags)
    summary = run_stage(config)
    from accelerate import PartialState

    if PartialState().is_main_process:
        shown = {k: summary[k] for k in ("final_step", "final_loss", "eval", "train_samples_per_s") if k in summary}
        print(json.dumps(shown, indent=1))
        print(f"converted N={config.num_instances} model saved to {config.output_dir}; fine-tune it with "
              f"`muxplm finetune --init {config.output_dir} --task ... --lr 2e-4 --encoder-lr 1e-4` (the measured "
              f"recipe: the converted encoder needs the larger encoder learning rate)")
    return 0


def _fetch(args) -> int:
    from ..data import fetch

    folders = fetch(args.only, cache_dir=args.cache_dir)
    for name, folder in folders.items():
        print(f"{name}: {folder}")
    return 0


def _evaluate(args) -> int:
    from pathlib import Path

    from rich.console import Console

    from .evaluate import evaluate_checkpoint, results_table

    output = args.output or str(Path(args.checkpoint) / "eval_results.json")
    result = evaluate_checkpoint(
        args.checkpoint, args.task, seeds=args.seeds, ensemble=args.ensemble, batch_size=args.batch_size,
        max_length=args.max_length, split=args.split, validation_file=args.validation_file,
        task_kind=args.task_kind, max_examples=args.max_examples, cache_dir=args.cache_dir, output_file=output,
        device=args.device,
    )
    Console().print(results_table(result))
    print(f"results written to {output}")
    return 0


def _demo(args) -> int:
    from .demo import run_demo

    run_demo(args.output_dir, quick=args.quick, seed=args.seed, progress=not args.no_progress)
    return 0
