"""The ``muxplm`` command line: a thin layer over the Python API.

Each feature area owns its sub-commands in its own module, which exposes
``add_command(subparsers, name, help)``. This file only lists them (:data:`COMMANDS`) and
imports a command's module when that command is parsed: ``muxplm --help`` imports none, and
no parser imports PyTorch or Transformers, so every help screen comes up at once (the commands
import them when they run).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence
from typing import NamedTuple


class Command(NamedTuple):
    module: str  # defines the command's parser (add_command)
    help: str  # its line in `muxplm --help`
    runs: str | None = None  # what it imports to run: imported before the process freezes its modules


# Every command, in the order of `muxplm --help`.
COMMANDS = {
    "data": Command("muxplm.training.cli", "fetch the offline corpora and tasks"),
    "pretrain": Command("muxplm.training.cli", "stage 1 (retrieval priming) or 2 (mlm / electra)",
                        "muxplm.training.stages"),
    "finetune": Command("muxplm.training.cli", "stage 3: fine-tune on a task", "muxplm.training.stages"),
    "convert": Command("muxplm.training.cli", "multiplex a plain pretrained encoder (BERT, ELECTRA, RoBERTa, "
                       "DistilBERT, MPNet): warm start + priming", "muxplm.training.stages"),
    "evaluate": Command("muxplm.training.cli", "score a fine-tuned checkpoint over composition seeds",
                        "muxplm.training.evaluate"),
    "demo": Command("muxplm.training.cli", "all three stages on the tiny preset, N=1 vs N=2 vs N=5 (--quick: N=1 "
                    "vs N=2), on CPU", "muxplm.training.demo"),
    "frontier": Command("muxplm.frontier.cli", "which speed-up to ship: cuts, N, int8 and ONNX Runtime fine-tuned, "
                        "scored and timed on your data within a budget", "muxplm.frontier.run"),
    "bench": Command("muxplm.bench.cli", "benchmarks (throughput, profiling)", "muxplm.bench.throughput"),
    "analyze": Command("muxplm.bench.cli", "analyses: pareto, muxology, ensemble, lottery", "muxplm.bench.analysis"),
    "reproduce": Command("muxplm.bench.cli", "small-scale reproduction of the paper's Table 1 (train, evaluate, "
                         "time, compare)", "muxplm.bench.reproduce"),
    "predict": Command("muxplm.predict.cli", "label files of any size (CSV, JSONL, Parquet, text) into one JSONL or "
                       "Parquet file: resumable, on every core, or on a Ray cluster", "muxplm.predict.run"),
    "serve": Command("muxplm.serving.cli", "serve a checkpoint over HTTP with dynamic multiplexed batching",
                     "muxplm.serving.predictor"),
    "export": Command("muxplm.serving.cli", "export a checkpoint to another format", "muxplm.serving.predictor"),
    "serve-bench": Command("muxplm.serving.cli", "loopback load benchmark of the server for N = 1, 2, 5, 10",
                           "muxplm.serving.predictor"),
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``muxplm`` parser. With ``argv``, only the command it names gets its whole parser (its
    module imported); the others are listed by name and help line. Without, every command is
    built."""
    parser = argparse.ArgumentParser(
        prog="muxplm",
        description="Multiplexed pre-trained language models: build, train, evaluate, benchmark and serve.",
    )
    parser.add_argument("--version", action="version", version=f"muxplm {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = COMMANDS.keys() if argv is None else {command_of(argv)}
    for name, command in COMMANDS.items():
        if name in named and _module(command) is not None:
            _module(command).add_command(subparsers, name, command.help)
        else:
            subparsers.add_parser(name, help=command.help)
    return parser


def command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (``muxplm`` itself takes
    only -h, --help and --version, none with a value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def _module(command: Command):
    """The module of ``command``, or None where its feature area is not part of this build."""
    try:
        return importlib.import_module(command.module)
    except ModuleNotFoundError as error:
        if error.name != command.module:
            raise
        return None


def _version() -> str:
    from . import __version__

    return __version__


def main(argv: Sequence[str] | None = None, *, before_running=None) -> int:
    """Run ``muxplm ARGV`` (default: this process's arguments) and return its exit status.
    ``before_running(args)`` is called between parsing and running the command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if before_running is not None:
        before_running(args)
    try:
        result = args.func(args)
    except (ValueError, FileNotFoundError) as error:
        # Bad input is the user's to fix: one clear line, no traceback.
        print(f"muxplm {args.command}: error: {error}", file=sys.stderr)
        return 2
    return int(result or 0)


def _freeze_imports(args: argparse.Namespace) -> None:
    """What a command runs with (torch, Transformers, datasets) is imported first and then frozen:
    those modules live until the process ends, and frozen, the collector no longer walks them at
    each full collection or at exit, where that took about a second of every command on a
    2-core CPU."""
    runs = COMMANDS[args.command].runs
    if runs:
        importlib.import_module(runs)
    gc.freeze()


def entry_point() -> int:
    """The ``muxplm`` process (the console script and ``python -m muxplm``): :func:`main`, with
    the command's modules frozen before it runs. Not in :func:`main` itself, which a Python
    caller may run in a process whose objects are its own; nor for ``--help``, which imports
    nothing heavy."""
    return main(before_running=_freeze_imports)


if __name__ == "__main__":
    sys.exit(entry_point())
