"""Where a training run's CPU time goes, by PyTorch operator: any `muxplm` command run under
torch.profiler, its operators ranked by their own CPU time (the profiler's overhead included,
so shares, not absolute times, are the figure to quote). For one inference forward pass of a
model, by stage and operator, `muxplm bench profile --operators` is the tool; this one covers a
whole command, training included.

    OMP_NUM_THREADS=1 python3 benchmarks/experiments/profile_step.py \\
        --output benchmarks/results/reproduce/paper-stable/bf16/step-checks/profile-bert-bf16 -- \\
        finetune --init runs/stable-bf16/bert/2-pretrain --task sentiment --max_steps 60 ...

writes OUTPUT.txt (the profiler's table) and OUTPUT.json (each operator's share of the total).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from torch import profiler


def operator_shares(work: Callable[[], object], top: int = 30) -> tuple[dict[str, float], str]:
    """Run ``work`` under the CPU profiler: the ``top`` operators' shares (percent of all self CPU
    time, largest first) and the profiler's own table of them."""
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as prof:
        work()
    events = prof.key_averages()
    total = sum(event.self_cpu_time_total for event in events)
    if total <= 0:
        raise ValueError("the profiled work ran no PyTorch operator")
    ranked = sorted(events, key=lambda event: event.self_cpu_time_total, reverse=True)[:top]
    shares = {event.key: 100.0 * event.self_cpu_time_total / total for event in ranked}
    return shares, events.table(sort_by="self_cpu_time_total", row_limit=top)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="path without suffix: OUTPUT.txt and OUTPUT.json")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then a muxplm command and its options")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the muxplm command to profile after --")
    from muxplm.cli import main as muxplm

    shares, table = operator_shares(lambda: muxplm(command), args.top)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".txt").write_text(f"muxplm {' '.join(command)}\n\n{table}\n")
    output.with_suffix(".json").write_text(json.dumps({"command": command, "self_cpu_percent": shares}, indent=1))
    for name, share in list(shares.items())[:10]:
        print(f"{share:5.1f} %  {name}")


if __name__ == "__main__":
    main()
