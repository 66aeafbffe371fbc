"""Idle-connection flood against `muxplm serve`: many clients connect and send nothing while an
innocent client keeps sending requests. Measures whether the innocent requests are still served,
and their latency before and during the flood, with the server's default limits.

Open connections are spread over several client processes (a process here may hold at most
`ulimit -n` descriptors); the server keeps at most `--max-connections` of them and closes the
longest idle one to admit a new one.

    python3 benchmarks/experiments/idle_flood.py --connections 25000 --out benchmarks/results/serve/idle_flood.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from serving_testing import start_server  # noqa: E402  (the tests' way of running `muxplm serve`)


def tiny_model(folder: Path) -> None:
    import torch

    from muxplm import MuxBertConfig, MuxBertForSequenceClassification

    torch.manual_seed(0)
    config = MuxBertConfig.from_preset("tiny", num_instances=2, num_labels=2, num_hidden_layers=2)
    MuxBertForSequenceClassification(config).save_pretrained(folder)


def hold_idle(port: int, count: int, hold_s: float, opened) -> None:
    """Open ``count`` connections that never send a byte, keep them for ``hold_s`` seconds."""
    sockets = []
    for _ in range(count):
        try:
            sockets.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except OSError:
            break
    with opened.get_lock():
        opened.value += len(sockets)
    time.sleep(hold_s)
    for sock in sockets:
        sock.close()


def latencies(url: str, seconds: float) -> tuple[list[float], int]:
    """Innocent requests one after another for ``seconds``: their latencies and the failures."""
    times, failures = [], 0
    end = time.monotonic() + seconds
    with httpx.Client(timeout=10) as client:
        while time.monotonic() < end:
            start = time.perf_counter()
            try:
                answer = client.post(url + "/predict", json={"text": ["an innocent request"]})
                if answer.status_code == 200:
                    times.append(time.perf_counter() - start)
                else:
                    failures += 1
            except httpx.HTTPError:
                failures += 1
    return times, failures


def summary(times: list[float], failures: int) -> dict:
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else None
    return dict(served=len(times), failed=failures, p50_ms=1000 * statistics.median(ordered) if ordered else None,
                p99_ms=1000 * p99 if p99 is not None else None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=25_000)
    parser.add_argument("--processes", type=int, default=4, help="client processes holding the idle connections")
    parser.add_argument("--seconds", type=float, default=20.0, help="innocent traffic before and during the flood")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        tiny_model(Path(folder))
        server, port, url = start_server(folder)
        try:
            before = latencies(url, args.seconds)
            opened = multiprocessing.Value("i", 0)
            share = -(-args.connections // args.processes)
            holders = [multiprocessing.Process(target=hold_idle, args=(port, share, args.seconds + 30, opened))
                       for _ in range(args.processes)]
            for holder in holders:
                holder.start()
            time.sleep(5)  # the flood under way
            during = latencies(url, args.seconds)
            flooded = opened.value
            for holder in holders:
                holder.terminate()
                holder.join()
            alive = server.poll() is None
        finally:
            server.terminate()
            server.wait(30)
    result = dict(
        connections_asked=args.connections, connections_opened=flooded, server_alive_after=alive,
        before=summary(*before), during=summary(*during),
        machine=dict(platform=platform.platform(), cpus=os.cpu_count()),
        date=time.strftime("%Y-%m-%d"),
        commit=subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
        limits="muxplm serve defaults (--max-connections, --keep-alive-s)",
    )
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0 if alive and result["during"]["served"] else 1


if __name__ == "__main__":
    sys.exit(main())
