"""Loopback load generator: serve equally sized models with N = 1, 2, 5, 10 and measure
requests/s and latency percentiles at several concurrency levels.

Each server runs in its own process (``muxplm serve`` on 127.0.0.1) so the client's event
loop does not share the server's interpreter; every run is bounded in requests and time.
Results (with machine, torch version, date and git commit) go to JSON and a PNG plot.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from ..provenance import git

_WORDS = (
    "the a film story actor scene music plot slow quick bright dark funny sad long short "
    "river city night morning friend stranger quiet loud old new strange simple brave tired "
    "garden window letter journey winter summer table doctor teacher market ocean mountain"
).split()


def make_texts(count: int, words: int, seed: int = 0) -> list[str]:
    """Distinct pseudo-sentences of ``words`` words."""
    rng = random.Random(seed)
    return [f"request {i} " + " ".join(rng.choice(_WORDS) for _ in range(words - 2)) for i in range(count)]


def build_model_dir(num_instances: int, out_dir: Path, preset: str = "tiny", num_layers: int = 4, seed: int = 0) -> Path:
    """A randomly initialised sentence classifier of the given size (speed does not depend on
    the weights), saved with the default tokenizer."""
    from muxplm import MuxBertConfig, MuxBertForSequenceClassification
    from muxplm.serving.predictor import default_tokenizer_path
    from transformers import AutoTokenizer

    mux = {} if num_instances > 1 else {"mux_type": "identity", "demux_type": "identity"}
    config = MuxBertConfig.from_preset(
        preset, num_hidden_layers=num_layers, vocab_size=30522, num_instances=num_instances, num_labels=2, **mux
    )
    torch.manual_seed(seed)
    model = MuxBertForSequenceClassification(config)
    folder = out_dir / f"n{num_instances}"
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(default_tokenizer_path()).save_pretrained(folder)
    return folder


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``muxplm serve`` in a child process on 127.0.0.1; stopped with SIGTERM (graceful)."""

    def __init__(self, model_dir: Path, *, threads: int, max_batch: int | None, max_wait_ms: float,
                 max_queue: int | None, max_length: int, backend: str = "torch", server_flags: tuple[str, ...] = ()):
        """``max_batch`` / ``max_queue`` ``None``: the server's defaults, which follow its device."""
        self.port = _free_port()
        bounds = [] if max_batch is None else ["--max-batch", str(max_batch)]
        bounds += [] if max_queue is None else ["--max-queue", str(max_queue)]
        command = [
            sys.executable, "-m", "muxplm.cli", "serve", str(model_dir), "--host", "127.0.0.1",
            "--port", str(self.port), "--threads", str(threads), *bounds,
            "--max-wait-ms", str(max_wait_ms), "--max-length", str(max_length),
            "--backend", backend, "--log-level", "warning", *server_flags,
        ]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 120.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.process.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError("server did not become healthy")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class _Connection:
    """A minimal keep-alive HTTP/1.1 client for POSTing JSON: the load generator shares the
    CPU with the server, so it must cost far less per request than a full client library."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader = self.writer = None

    async def post(self, path: str, payload: dict) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        body = json.dumps(payload).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        await self.writer.drain()
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length, close = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "connection" and value.strip().lower() == "close":
                close = True
        data = await self.reader.readexactly(length)
        if close:
            await self.close()
        return status, data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


def steady_rate(completions: list[float], concurrency: int, first_idle: float) -> float | None:
    """Requests/s while every client was busy: from the ``concurrency``-th completion (the
    pipeline is full) to the moment the first client ran out of work (the drain begins).
    Counting the ramp and the drain in would charge a fast server the same fixed latencies
    over a shorter run. ``None`` when too few requests completed inside that window."""
    if len(completions) <= concurrency:
        return None
    start = completions[concurrency - 1]
    inside = sum(1 for t in completions[concurrency:] if t <= first_idle)
    if inside < concurrency or first_idle <= start:
        return None
    return inside / (first_idle - start)


async def _fire(url: str, texts: list[str], concurrency: int, time_limit: float) -> dict:
    """Send ``texts`` (one per request) over ``concurrency`` clients; stop early at ``time_limit``."""
    host, port = url.removeprefix("http://").split(":")
    latencies: list[float] = []
    completions: list[float] = []
    errors = 0
    next_index = 0
    first_idle = None
    started = time.perf_counter()
    deadline = started + time_limit

    async def worker():
        nonlocal next_index, errors, first_idle
        connection = _Connection(host, int(port))
        try:
            while next_index < len(texts) and time.perf_counter() < deadline:
                text = texts[next_index]
                next_index += 1
                sent = time.perf_counter()
                status, _ = await connection.post("/predict", {"text": text})
                done = time.perf_counter()
                if status == 200:
                    latencies.append(done - sent)
                    completions.append(done)
                else:
                    errors += 1
        finally:
            if first_idle is None:
                first_idle = time.perf_counter()
            await connection.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    overall = len(latencies) / elapsed
    steady = steady_rate(completions, concurrency, first_idle)

    def percentile(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else float("nan")

    return {
        "concurrency": concurrency,
        "requests": len(latencies),
        "errors": errors,
        "seconds": elapsed,
        "requests_per_s": steady if steady is not None else overall,  # steady state where measurable
        "requests_per_s_overall": overall,  # ramp and drain included
        "p50_ms": percentile(0.50),
        "p99_ms": percentile(0.99),
    }


def _scrape_fill(url: str) -> float | None:
    """Mean batch fill ratio from the server's /metrics."""
    import httpx

    text = httpx.get(url + "/metrics", timeout=5).text
    values = {}
    for line in text.splitlines():
        for key in ("muxplm_batch_fill_ratio_sum", "muxplm_batch_fill_ratio_count"):
            if line.startswith(key + " "):
                values[key] = float(line.split()[1])
    count = values.get("muxplm_batch_fill_ratio_count")
    return values["muxplm_batch_fill_ratio_sum"] / count if count else None


def run_serve_bench(
    out_dir: str | os.PathLike = "runs/serve-bench",
    *,
    num_instances: tuple[int, ...] = (1, 2, 5, 10),
    concurrency: tuple[int, ...] = (1, 16, 64, 256),
    requests_per_level: int = 3000,
    time_limit: float = 30.0,
    words: int = 40,
    preset: str = "tiny",
    num_layers: int = 4,
    threads: int = 1,
    max_batch: int | None = 64,
    max_wait_ms: float = 5.0,
    max_length: int = 128,
    backends: tuple[str, ...] = ("torch",),
    model_dirs: dict[int, str] | None = None,
    tag: str = "serve_bench",
    server_flags: tuple[str, ...] = (),
) -> dict:
    """Run the benchmark and save ``{tag}.json`` and ``{tag}.png`` under ``out_dir``.
    ``server_flags``: more ``muxplm serve`` flags for every server (e.g. ``("--deterministic",)``, or
    ``("--device", "cuda", "--dtype", "bfloat16")``); ``max_batch=None``: each server's default
    batch and queue (on a GPU N x 128 instances a pass)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = make_texts(max(concurrency) * 4 + requests_per_level, words)
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for n in num_instances:
            folder = Path(model_dirs[n]) if model_dirs and n in model_dirs else build_model_dir(
                n, Path(scratch), preset, num_layers)
            for backend in backends:
                server = ServerProcess(folder, threads=threads, max_batch=max_batch, max_wait_ms=max_wait_ms,
                                       max_queue=None if max_batch is None else max(max(concurrency) * 4, max_batch),
                                       max_length=max_length, backend=backend,
                                       server_flags=tuple(server_flags))
                try:
                    server.wait_ready()
                    asyncio.run(_fire(server.url, texts[:max(32, 4 * n)], min(16, 4 * n), 10.0))  # warm-up
                    for level in concurrency:
                        start = (level * 7) % max(1, len(texts) - requests_per_level)
                        result = asyncio.run(_fire(server.url, texts[start:start + requests_per_level], level, time_limit))
                        result.update(num_instances=n, backend=backend)
                        runs.append(result)
                        print(f"N={n:<3} {backend:<5} c={level:<4} {result['requests_per_s']:8.1f} req/s  "
                              f"p50 {result['p50_ms']:7.1f} ms  p99 {result['p99_ms']:7.1f} ms  "
                              f"errors {result['errors']}", flush=True)
                    fill = _scrape_fill(server.url)
                    for result in runs:
                        if result["num_instances"] == n and result["backend"] == backend:
                            result["mean_batch_fill_ratio_all_levels"] = fill
                finally:
                    server.stop()
    summary = _summarize(runs, backends)
    report = {
        "benchmark": "muxplm serve-bench (loopback HTTP, one text per request)",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git("rev-parse", "HEAD"),
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpu_count": os.cpu_count(), "python": platform.python_version()},
        "torch_version": torch.__version__,
        "settings": {"preset": preset, "num_layers": num_layers, "words_per_text": words, "server_threads": threads,
                     "max_batch": max_batch, "max_wait_ms": max_wait_ms, "requests_per_level": requests_per_level,
                     "server_flags": list(server_flags),
                     "time_limit_s": time_limit, "concurrency": list(concurrency), "backends": list(backends),
                     "requests_per_s": "steady state: from the concurrency-th answer until the first client "
                                       "runs out of work (requests_per_s_overall: the whole run)"},
        "runs": runs,
        "summary": summary,
    }
    (out / f"{tag}.json").write_text(json.dumps(report, indent=2))
    _plot(runs, out / f"{tag}.png")
    return report


def _summarize(runs: list[dict], backends) -> dict:
    """Per backend and N: requests/s and p99 at the highest concurrency (saturating load), and
    the peak requests/s over the saturating levels (concurrency >= 16, less sensitive to noise
    on a shared machine); speed-ups and p99 ratios relative to N=1 of the same backend."""
    summary = {}
    for backend in backends:
        mine = [r for r in runs if r["backend"] == backend]
        if not mine:
            continue
        top = max(r["concurrency"] for r in mine)
        saturating = [r for r in mine if r["concurrency"] >= min(16, top)]
        at_top = {r["num_instances"]: r for r in mine if r["concurrency"] == top}
        peak = {n: max(r["requests_per_s"] for r in saturating if r["num_instances"] == n) for n in at_top}
        base = at_top.get(1)
        rows = {}
        for n, r in sorted(at_top.items()):
            rows[str(n)] = {
                "requests_per_s": r["requests_per_s"],
                "p99_ms": r["p99_ms"],
                "speedup_vs_n1": r["requests_per_s"] / base["requests_per_s"] if base else None,
                "p99_ratio_vs_n1": r["p99_ms"] / base["p99_ms"] if base else None,
                "peak_requests_per_s": peak[n],
                "peak_speedup_vs_n1": peak[n] / peak[1] if 1 in peak else None,
            }
        summary[backend] = {"saturating_concurrency": top, "by_num_instances": rows}
    return summary


def _plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = {n: f"C{i}" for i, n in enumerate(sorted({r["num_instances"] for r in runs}))}
    for key in sorted({(r["backend"], r["num_instances"]) for r in runs}):
        rows = sorted((r for r in runs if (r["backend"], r["num_instances"]) == key), key=lambda r: r["concurrency"])
        label = f"N={key[1]}" + ("" if key[0] == "torch" else f" ({key[0]})")
        style = "-o" if key[0] == "torch" else "--s"
        colour = colours[key[1]]
        left.plot([r["concurrency"] for r in rows], [r["requests_per_s"] for r in rows], style, color=colour, label=label)
        right.plot([r["concurrency"] for r in rows], [r["p99_ms"] for r in rows], style, color=colour, label=label)
    for axis, title in ((left, "throughput (requests/s)"), (right, "p99 latency (ms)")):
        axis.set_xscale("log", base=2)
        axis.set_xlabel("concurrent clients")
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend()
    right.set_yscale("log")
    fig.suptitle("muxplm server on loopback, one text per request")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
