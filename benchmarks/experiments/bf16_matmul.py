"""Whether bf16 pays on this CPU: one training step's matrix products timed in bf16 and in float32,
side by side, at the shapes of the tiny, small and base presets (a batch of 32 sequences of 48
tokens) and of the vocabulary head's backward pass.

    python3 benchmarks/experiments/bf16_matmul.py --output benchmarks/results/bf16-matmul/$(hostname).json

bf16 autocast (`--mixed-precision bf16`) only helps where PyTorch multiplies bf16 matrices in
oneDNN (x86 with AVX-512 or AMX, Arm with BF16: `muxplm.devices.cpu_runs_bf16_natively`).
Elsewhere its products fall back to a reference kernel, and muxplm refuses bf16 on such a CPU.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch
from torch.utils import benchmark

# (name, rows, inner, columns): the product rows x inner @ inner x columns.
SHAPES = (
    ("tiny feed-forward (256 -> 1024)", 1536, 256, 1024),
    ("small feed-forward (512 -> 2048)", 1536, 512, 2048),
    ("base feed-forward (768 -> 3072)", 1536, 768, 3072),
    ("vocabulary head backward (30522 -> 256)", 1024, 30522, 256),
)


def time_product(rows: int, inner: int, columns: int, dtype: torch.dtype, min_run_time: float) -> float:
    """Median seconds of one ``rows x inner @ inner x columns`` product in ``dtype``."""
    left, right = torch.randn(rows, inner, dtype=dtype), torch.randn(inner, columns, dtype=dtype)
    timer = benchmark.Timer("left @ right", globals=dict(left=left, right=right), num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True)
    parser.add_argument("--scale", type=float, default=1.0, help="every shape's rows scaled by this (tests: small)")
    parser.add_argument("--min-run-time", type=float, default=1.0, help="seconds each timing runs at least")
    args = parser.parse_args(argv)

    from muxplm.devices import cpu_runs_bf16_natively

    native = cpu_runs_bf16_natively()
    rows = []
    for name, m, k, n in SHAPES:
        m = max(1, int(m * args.scale))
        fp32 = time_product(m, k, n, torch.float32, args.min_run_time)
        bf16 = time_product(m, k, n, torch.bfloat16, args.min_run_time)
        rows.append(dict(product=name, shape=[m, k, n], float32_s=fp32, bf16_s=bf16, bf16_over_float32=bf16 / fp32))
        print(f"{name} [{m} x {k} @ {k} x {n}]: float32 {1e3 * fp32:.1f} ms, bf16 {1e3 * bf16:.1f} ms, "
              f"bf16 / float32 = {bf16 / fp32:.2f}", flush=True)
    print(f"native bf16 on this CPU: {native} (torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"capability {torch.backends.cpu.get_cpu_capability()})")
    report = dict(native_bf16=native, torch=torch.__version__, threads=torch.get_num_threads(),
                  cpu_capability=torch.backends.cpu.get_cpu_capability(), machine=platform.processor() or platform.machine(),
                  products=rows)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
