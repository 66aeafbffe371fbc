"""``muxplm frontier``: the parser (importing nothing heavy) and the command."""

from __future__ import annotations

import argparse
import json

from ..serving.limits import positive_int
from .plan import format_seconds, parse_budget

DESCRIPTION = (
    "Which speed-up to ship: fine-tune the plain encoder, cuts of it (its first k layers), multiplexed "
    "conversions at each N of it and of its best cut, and int8 copies of each (PyTorch, and ONNX Runtime where "
    "installed) on your data, within a time budget; score them over composition seeds, time them side by side on "
    "this device, and recommend the fastest model that keeps --min-retention of the plain model's score. Writes "
    "frontier.md, frontier.json and frontier.png to --output-dir; a re-run with the same settings goes on where a "
    "killed run stopped."
)


def _budget(text: str) -> float:
    try:
        return parse_budget(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _retention(text: str) -> float:
    """``0.97`` or ``97%``."""
    value = text.strip()
    try:
        share = float(value[:-1]) / 100 if value.endswith("%") else float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share such as 0.97 or 97%, got {text!r}") from None
    if not 0 < share <= 1:
        raise argparse.ArgumentTypeError(f"a share of the plain model's score in (0, 1] (0.97 or 97%), got {text!r}")
    return share


def _ints(text: str) -> list[int]:
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of whole numbers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one number")
    return values


def _int8(text: str) -> list[str]:
    chosen = [item.strip() for item in text.split(",") if item.strip()]
    if chosen == ["none"]:
        return []
    if "none" in chosen:
        raise argparse.ArgumentTypeError(f"none means no int8 copies: give it alone, not with {text!r}")
    unknown = set(chosen) - {"torch", "onnx"}
    if unknown:
        unknown = ", ".join(sorted(unknown))
        raise argparse.ArgumentTypeError(f"int8 runtimes are torch and onnx (or none), got {unknown}")
    return chosen


def _setting(text: str) -> tuple[str, object]:
    """``KEY=VALUE``, the value read as JSON where it parses (``num_epochs=20``, ``corpus_sources=["brown"]``),
    else as text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip().replace("-", "_"), json.loads(value)
    except json.JSONDecodeError:
        return key.strip().replace("-", "_"), value


def add_command(subparsers, name: str, help: str) -> None:
    """The parser of ``muxplm frontier`` (``muxplm.cli.COMMANDS`` lists it)."""
    parser = subparsers.add_parser(
        name, help=help, description=DESCRIPTION,
        usage="%(prog)s MODEL (--train-file FILE --validation-file FILE | --task NAME) [--budget 1h] "
              "[--min-retention 0.97] [--instances 2,5] [--output-dir DIR] [options]")
    parser.add_argument("model", metavar="MODEL",
                        help="the plain pretrained encoder: a folder (BERT, ELECTRA, RoBERTa, DistilBERT or MPNet), or "
                             "a hub name")
    data = parser.add_argument_group("data")
    data.add_argument("--train-file", metavar="FILE", help="your training data: CSV or JSONL (text, label) or CoNLL")
    data.add_argument("--validation-file", metavar="FILE", help="your validation data, scored for every candidate")
    data.add_argument("--task", metavar="NAME", help="a built-in or hub task instead of files (sentiment, trec, "
                                                     "glue/sst2, ...)")
    data.add_argument("--task-kind", choices=("sentence", "token"),
                      help="kind of the --train-file data (default: by file extension)")
    data.add_argument("--max-train-examples", type=positive_int, metavar="N",
                      help="train every candidate on at most this many examples (default: all)")
    data.add_argument("--max-eval-examples", type=positive_int, metavar="N",
                      help="score every candidate on at most this many validation examples (default: all)")
    plan = parser.add_argument_group("plan")
    plan.add_argument("--budget", type=_budget, default=3600.0, metavar="DURATION",
                      help="time for the whole run: 90s, 15m, 1h, 1h30m or seconds (default: 1h); the plan drops "
                           "optional candidates, then trains on fewer examples and steps, to fit it")
    plan.add_argument("--min-retention", type=_retention, default=0.97, metavar="SHARE",
                      help="the share of the plain model's score the recommended model must keep: 0.97 or 97%% "
                           "(default: 0.97)")
    plan.add_argument("--instances", type=_ints, default=[2, 5], metavar="N,N",
                      help="the N to multiplex at, each on the whole encoder and on the best cut (default: 2,5)")
    plan.add_argument("--cuts", type=_ints, default=None, metavar="K,K",
                      help="the cut depths, in layers kept (default: 1, a third, half and two thirds of the layers)")
    plan.add_argument("--int8", type=_int8, default=["torch", "onnx"], metavar="RUNTIMES",
                      help="int8 copies of every candidate to score and time: torch, onnx, both (default) or none "
                           "(CPU only; onnx where onnxruntime is installed)")
    plan.add_argument("--seeds", type=positive_int, default=5, metavar="N",
                      help="composition seeds each multiplexed model is scored over (default: 5)")
    plan.add_argument("--finetune-setting", dest="finetune_settings", type=_setting, action="append", default=[],
                      metavar="KEY=VALUE",
                      help="a `muxplm finetune` setting over the frontier's rule, for every candidate alike, e.g. "
                           "num_epochs=20 (repeatable)")
    plan.add_argument("--convert-setting", dest="convert_settings", type=_setting, action="append", default=[],
                      metavar="KEY=VALUE",
                      help="a `muxplm convert` setting over its recipe, for every conversion alike, e.g. "
                           "max_steps=400 (repeatable; fixes the priming steps the budget would scale)")
    run = parser.add_argument_group("run")
    run.add_argument("--output-dir", default="runs/frontier", metavar="DIR",
                     help="where the candidates, the table and the plot go (default: runs/frontier)")
    run.add_argument("--device", help="where models are scored and timed: cpu or cuda (default: cuda when there is "
                                      "one); training runs where `muxplm finetune` does")
    run.add_argument("--threads", type=positive_int, metavar="N", help="torch CPU threads (default: torch's choice)")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(func=_run)


def _run(args) -> int:
    import torch

    from .run import run_frontier

    if args.threads:
        torch.set_num_threads(args.threads)
    report = run_frontier(
        args.model, args.output_dir, task=args.task, train_file=args.train_file, validation_file=args.validation_file,
        task_kind=args.task_kind, budget=args.budget, min_retention=args.min_retention, instances=args.instances,
        cuts=args.cuts, max_train_examples=args.max_train_examples, max_eval_examples=args.max_eval_examples,
        seeds=args.seeds, int8=args.int8, device=args.device, finetune_overrides=dict(args.finetune_settings),
        conversion_overrides=dict(args.convert_settings), progress=not args.no_progress,
    )
    print(f"wrote frontier.md, frontier.json and frontier.png to {args.output_dir} "
          f"(spent {format_seconds(report['plan']['spent_seconds'])} of {format_seconds(args.budget)})")
    return 0
