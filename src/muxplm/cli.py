"""The ``muxplm`` command line: a thin layer over the Python API.

Each feature area owns its sub-commands in its own module, which exposes
``register(subparsers)``; this file only assembles them.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys

# Modules that contribute sub-commands, in the order they appear in --help.
COMMAND_MODULES = (
    "muxplm.training.cli",  # data, pretrain, finetune, evaluate, demo
    "muxplm.bench.cli",  # bench, analyze, reproduce
    "muxplm.serving.cli",  # serve, export
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muxplm",
        description="Multiplexed pre-trained language models: build, train, evaluate, benchmark and serve.",
    )
    parser.add_argument("--version", action="version", version=f"muxplm {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        module.register(subparsers)
    return parser


def _command_modules() -> list:
    modules = []
    for name in COMMAND_MODULES:
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as error:
            if error.name != name:  # else a feature area not present in this build
                raise
    return modules


def _version() -> str:
    from . import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        result = args.func(args)
    except (ValueError, FileNotFoundError) as error:
        # Bad input is the user's to fix: one clear line, no traceback.
        print(f"muxplm {args.command}: error: {error}", file=sys.stderr)
        return 2
    return int(result or 0)


def entry_point() -> int:
    """The ``muxplm`` process (the console script and ``python -m muxplm``): :func:`main`, with
    the modules it imports frozen first. They (torch, Transformers, datasets) live until the
    process ends; frozen, the collector no longer walks them at each full collection or at exit,
    where that took about a second of every command on a 2-core CPU. Not in :func:`main`, which
    a Python caller may run in a process whose objects are its own."""
    _command_modules()
    gc.freeze()
    return main()


if __name__ == "__main__":
    sys.exit(entry_point())
