"""`muxplm serve` under abuse, at full size: a slow-body flood, a burst of connections, a tenant
flooding the queue, and the throughput of ordinary traffic, each against the server's targets.

* slow bodies: ``--connections-flood`` connections from one client process each send a
  ``POST /predict`` head announcing 100 bytes of body and one byte of it, then nothing, and more
  keep coming (``--flood-rate`` a second); meanwhile another connection sends ``--innocents``
  requests one after another. Target: at least 18 of 20 served within 10 s each (default flags).
* burst: ``--burst`` connections opened at once, each sending one request (``--max-batch 16
  --max-queue 64``, default connection limits). Target: every request answered with an HTTP
  status (200, or 429 / 503 with Retry-After), and ``/metrics`` counting every one.
* tenants (``--isolate-tenants --max-queue 64``): tenant B sends one-text requests at
  ``--tenant-rate`` a second, first alone, then while tenant A sends ten times as many requests,
  each of ``--flood-texts`` texts (a flood past the server's capacity). Target: B's 429s at most
  1 % and its median latency within 2x of B alone.
* throughput: the ``serve-bench`` model (tiny preset, 4 layers, N = 5, 40-word texts,
  ``--max-batch 64``) at 64 and 256 clients, this checkout and, with ``--baseline-src``, an older
  one, alternated round by round on the same machine. Target: within 5 %.

Every server runs as ``muxplm serve`` in a process of its own on 127.0.0.1, with one torch thread.
``--baseline-src DIR`` (a ``src`` folder of another commit, e.g. from ``git archive``) runs every
scenario against it too, side by side.

    git archive bd9e0b3 src | tar -x -C /tmp/base
    python3 benchmarks/experiments/serve_abuse.py --baseline-src /tmp/base/src \\
        --out benchmarks/results/serve/abuse.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def raise_open_files_limit() -> int:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ------------------------------------------------------------------ servers


def tiny_model(folder: Path) -> Path:
    """The tiny N = 2 model of the reproductions (2 layers; MiniLM's tokenizer by default)."""
    import torch

    from muxplm import MuxBertConfig, MuxBertForSequenceClassification

    torch.manual_seed(0)
    config = MuxBertConfig.from_preset("tiny", num_instances=2, num_labels=2, num_hidden_layers=2)
    MuxBertForSequenceClassification(config).save_pretrained(folder)
    return folder


class Server:
    """``muxplm serve MODEL FLAGS`` from the code in ``src`` (None: this checkout) on a free port."""

    def __init__(self, model_dir: Path, flags: list[str], src: str | None = None):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        if src:
            env["PYTHONPATH"] = src
        self.process = subprocess.Popen(
            [sys.executable, "-m", "muxplm.cli", "serve", str(model_dir), "--port", str(self.port), "--threads", "1",
             "--log-level", "error", *flags], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {self.process.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError("the server did not start")

    def counted(self) -> dict[str, float]:
        """``muxplm_requests_total`` by status, from /metrics."""
        counts = {}
        for line in httpx.get(self.url + "/metrics", timeout=30).text.splitlines():
            if line.startswith("muxplm_requests_total{"):
                status = line.split('status="', 1)[1].split('"', 1)[0]
                counts[status] = float(line.rsplit(" ", 1)[1])
        return counts

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# ------------------------------------------------------------------ a minimal HTTP client


async def request(host: str, port: int, body: bytes, headers: dict[str, str] | None = None, *,
                  reader=None, writer=None, timeout: float = 60.0):
    """One ``POST /predict`` (on a new connection unless one is given): ``(status or None,
    retry_after or None, keep_open, reader, writer, error)``."""
    try:
        async with asyncio.timeout(timeout):
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port)
            extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
            writer.write(f"POST /predict HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}"
                         f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            await writer.drain()
            line = await reader.readline()
            if not line:
                writer.close()
                return None, None, False, None, None, "closed without an answer"
            status, retry_after, length, keep = int(line.split()[1]), None, 0, True
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                name, value = name.strip().lower(), value.strip()
                if name == "content-length":
                    length = int(value)
                elif name == "retry-after":
                    retry_after = value
                elif name == "connection" and value.lower() == "close":
                    keep = False
            await reader.readexactly(length)
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError, IndexError) as error:
        if writer is not None:
            writer.close()
        return None, None, False, None, None, type(error).__name__
    if not keep:
        writer.close()
        reader = writer = None
    return status, retry_after, keep, reader, writer, None


async def open_loop(port: int, rate: float, seconds: float, body_of, headers: dict[str, str], results: list,
                    start_at: float) -> None:
    """Requests at a fixed ``rate`` from ``start_at`` for ``seconds`` (open loop, keep-alive
    connections reused, as a client library would: one found closed as it was reused is replaced
    once): ``results`` gets ``(status, retry_after, latency from the scheduled time, error)``."""
    idle = []

    async def one(index: int, scheduled: float) -> None:
        reader = writer = None
        while idle and writer is None:
            reader, writer = idle.pop()
            if reader.at_eof() or writer.is_closing():  # closed by the server while idle
                writer.close()
                reader = writer = None
        reused = writer is not None
        status, retry_after, keep, reader, writer, error = await request(
            "127.0.0.1", port, body_of(index), headers, reader=reader, writer=writer)
        again = status is None and reused
        if again:  # the keep-alive race: closed as it was reused; again, on a new connection
            status, retry_after, keep, reader, writer, error = await request(
                "127.0.0.1", port, body_of(index), headers)
        results.append((status, retry_after, time.perf_counter() - scheduled, error, again))
        if keep and writer is not None:
            idle.append((reader, writer))

    tasks = []
    for index in range(int(rate * seconds)):
        scheduled = start_at + index / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(index, scheduled)))
    await asyncio.gather(*tasks)
    for _, writer in idle:
        writer.close()


# ------------------------------------------------------------------ slow bodies

SLOW_HEAD = (b"POST /predict HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")


def hold_slow_bodies(port: int, count: int, rate: float, stop, opened, answers) -> None:
    """Open ``count`` slow-body connections at once, then ``rate`` more a second until ``stop``;
    at the end, what each was answered (a status, or closed without one, or still open)."""
    raise_open_files_limit()
    sockets = []

    def open_one() -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(SLOW_HEAD)
            sockets.append(sock)
        except OSError:
            pass
        with opened.get_lock():
            opened.value += 1

    for _ in range(count):
        open_one()
    while not stop.wait(1.0 / rate):
        open_one()
    tally = {}
    for sock in sockets:
        sock.setblocking(False)
        try:
            data = sock.recv(4096)
            outcome = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else "closed, no answer"
        except BlockingIOError:
            outcome = "still open"
        except OSError:
            outcome = "reset"
        tally[outcome] = tally.get(outcome, 0) + 1
        sock.close()
    answers.put(tally)


def slow_body_flood(model_dir: Path, src: str | None, connections: int, innocents: int, rate: float) -> dict:
    server = Server(model_dir, [], src)
    try:
        opened, stop, answers = multiprocessing.Value("i", 0), multiprocessing.Event(), multiprocessing.Queue()
        flood = multiprocessing.Process(target=hold_slow_bodies, args=(server.port, connections, rate, stop,
                                                                       opened, answers))
        flood.start()
        deadline = time.monotonic() + 120
        while opened.value < connections and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # the flood settled
        outcomes = []
        with httpx.Client(timeout=10) as client:  # another connection (kept alive, reopened when closed)
            for index in range(innocents):
                started = time.perf_counter()
                try:
                    status = client.post(server.url + "/predict", json={"text": f"an innocent request {index}"}
                                         ).status_code
                except httpx.HTTPError as error:
                    status = type(error).__name__
                outcomes.append((status, time.perf_counter() - started))
                time.sleep(0.25)
        stop.set()
        tally = answers.get(timeout=120)
        flood.join(60)
        alive = server.process.poll() is None
    finally:
        server.stop()
    served = sum(1 for status, seconds in outcomes if status == 200 and seconds <= 10)
    latencies = sorted(seconds for status, seconds in outcomes if status == 200)
    return dict(flood_connections=connections, flood_rate_per_s=rate, flood_opened=opened.value,
                innocents=innocents, served_within_10s=served,
                innocent_statuses={str(s): sum(1 for o, _ in outcomes if o == s) for s in {o for o, _ in outcomes}},
                innocent_p50_ms=1000 * statistics.median(latencies) if latencies else None,
                innocent_max_ms=1000 * latencies[-1] if latencies else None,
                flood_connections_answered=tally, server_alive=alive,
                target_met=served >= 18 * innocents / 20)


# ------------------------------------------------------------------ burst


def burst(model_dir: Path, src: str | None, connections: int) -> dict:
    server = Server(model_dir, ["--max-batch", "16", "--max-queue", "64"], src)
    try:
        before = server.counted()

        async def everyone():
            return await asyncio.gather(*(request("127.0.0.1", server.port,
                                                  json.dumps({"text": f"burst request {i}"}).encode(), timeout=120)
                                          for i in range(connections)))

        started = time.perf_counter()
        replies = asyncio.run(everyone())
        seconds = time.perf_counter() - started
        time.sleep(0.5)
        after = server.counted()
        alive = server.process.poll() is None
    finally:
        server.stop()
    statuses: dict[str, int] = {}
    without_retry_after = 0
    for status, retry_after, _, _, _, error in replies:
        key = str(status) if status is not None else f"no answer ({error})"
        statuses[key] = statuses.get(key, 0) + 1
        if status in (429, 503) and retry_after is None:
            without_retry_after += 1
    answered = sum(1 for reply in replies if reply[0] is not None)
    counted = sum(after.values()) - sum(before.values())
    ok = all(reply[0] in (200, 429, 503) for reply in replies) and without_retry_after == 0
    return dict(connections=connections, seconds=seconds, statuses=statuses, answered=answered,
                refusals_without_retry_after=without_retry_after, metrics_counted=counted,
                metrics_by_status={k: after.get(k, 0) - before.get(k, 0) for k in after}, server_alive=alive,
                target_met=ok and answered == connections and counted == connections)


# ------------------------------------------------------------------ tenants

_WORDS = "the a film story actor scene music plot slow quick bright dark funny sad long short river city".split()


def text(rng: random.Random, words: int = 16) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def summary(results: list) -> dict:
    ok = sorted(latency for status, _, latency, *_ in results if status == 200)
    statuses = {}
    for status, _, _, error, _ in results:
        key = str(status) if status is not None else f"no answer ({error})"
        statuses[key] = statuses.get(key, 0) + 1
    refused = sum(1 for status, *_ in results if status == 429)
    return dict(requests=len(results), statuses=statuses, rate_429=refused / max(1, len(results)),
                retried_after_a_keep_alive_close=sum(1 for *_, again in results if again),
                p50_ms=1000 * statistics.median(ok) if ok else None,
                p99_ms=1000 * ok[min(len(ok) - 1, int(0.99 * len(ok)))] if ok else None)


def flood_tenant(port: int, rate: float, seconds: float, bodies: list[bytes], out) -> None:
    """Tenant A's client, in a process of its own (as another client would be)."""
    results = []
    asyncio.run(open_loop(port, rate, seconds, lambda i: bodies[i % len(bodies)], {"X-Muxplm-Tenant": "a"}, results,
                          time.perf_counter()))
    out.put(results)


def tenants(model_dir: Path, src: str | None, rate: float, factor: float, flood_texts: int, seconds: float) -> dict:
    server = Server(model_dir, ["--isolate-tenants", "--max-queue", "64"], src)
    rng = random.Random(0)
    gentle = [json.dumps({"text": text(rng)}).encode() for _ in range(1000)]
    heavy = [json.dumps({"text": [text(rng) for _ in range(flood_texts)]}).encode() for _ in range(200)]

    def tenant_b(start_in: float) -> list:
        results = []
        asyncio.run(open_loop(server.port, rate, seconds, lambda i: gentle[i % len(gentle)], {"X-Muxplm-Tenant": "b"},
                              results, time.perf_counter() + start_in))
        return results

    try:
        alone = tenant_b(0.5)
        out = multiprocessing.Queue()
        flood = multiprocessing.Process(target=flood_tenant, args=(server.port, factor * rate, seconds + 4.0, heavy, out))
        flood.start()  # A starts first and outlasts B
        shared = tenant_b(2.0)
        flooded = out.get(timeout=120)
        flood.join(60)
    finally:
        server.stop()
    b_alone, b_flooded, a_flooded = summary(alone), summary(shared), summary(flooded)
    ratio = b_flooded["p50_ms"] / b_alone["p50_ms"] if b_flooded["p50_ms"] and b_alone["p50_ms"] else None
    return dict(b_rate_per_s=rate, a_rate_per_s=factor * rate, a_texts_per_request=flood_texts, seconds=seconds,
                b_alone=b_alone, b_with_a=b_flooded, a=a_flooded, b_p50_ratio=ratio,
                target_met=b_flooded["rate_429"] <= 0.01 and ratio is not None and ratio <= 2.0)


# ------------------------------------------------------------------ throughput


def throughput(versions: dict[str, str | None], rounds: int, levels: tuple[int, ...], requests: int) -> dict:
    from muxplm.serving.loadgen import _fire, build_model_dir, make_texts

    texts = make_texts(max(levels) * 4 + requests, 40)
    rates: dict[str, dict[int, list[float]]] = {name: {level: [] for level in levels} for name in versions}
    with tempfile.TemporaryDirectory() as scratch:
        folder = build_model_dir(5, Path(scratch), "tiny", 4)
        for _ in range(rounds):
            for name, src in versions.items():
                server = Server(folder, ["--max-batch", "64", "--max-queue", str(max(levels) * 4)], src)
                try:
                    asyncio.run(_fire(server.url, texts[:32], 16, 10.0))  # warm-up
                    for level in levels:
                        start = (level * 7) % (len(texts) - requests)
                        result = asyncio.run(_fire(server.url, texts[start:start + requests], level, 30.0))
                        rates[name][level].append(result["requests_per_s"])
                        print(f"  throughput {name:<10} c={level:<4} {result['requests_per_s']:7.1f} req/s", flush=True)
                finally:
                    server.stop()
    out = {"model": "tiny preset, 4 layers, N = 5, 40-word texts, --max-batch 64, one torch thread",
           "rounds": rounds, "requests_per_level": requests,
           "requests_per_s": {name: {str(level): values for level, values in by_level.items()}
                              for name, by_level in rates.items()}}
    if len(versions) == 2:
        new, old = list(versions)
        out["ratio_of_medians"] = {str(level): statistics.median(rates[new][level]) / statistics.median(rates[old][level])
                                   for level in levels}
        out["target_met"] = all(abs(ratio - 1) <= 0.05 or ratio > 1 for ratio in out["ratio_of_medians"].values())
    return out


# ------------------------------------------------------------------ main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-src", help="a src folder of another commit, run side by side")
    parser.add_argument("--baseline-name", default="baseline")
    parser.add_argument("--scenarios", default="slow_bodies,burst,tenants,throughput")
    parser.add_argument("--connections-flood", type=int, default=1500)
    parser.add_argument("--flood-rate", type=float, default=100.0, help="slow-body connections a second after the first")
    parser.add_argument("--innocents", type=int, default=20)
    parser.add_argument("--burst", type=int, default=3000)
    parser.add_argument("--tenant-rate", type=float, default=20.0, help="tenant B's requests a second")
    parser.add_argument("--flood-texts", type=int, default=32, help="texts in each of tenant A's requests")
    parser.add_argument("--tenant-seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=3, help="throughput: rounds of every version")
    parser.add_argument("--requests", type=int, default=3000, help="throughput: requests per level")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    print(f"open files: {raise_open_files_limit()}", flush=True)
    # The checkout measured, as it was when the run began.
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "src/muxplm/serving"], capture_output=True, text=True,
                           cwd=ROOT).stdout.strip()
    versions = {"this": None}
    if args.baseline_src:
        versions[args.baseline_name] = str(Path(args.baseline_src).resolve())
    scenarios = args.scenarios.split(",")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as folder:
        model = tiny_model(Path(folder))
        for name, src in versions.items():
            if "slow_bodies" in scenarios:
                results.setdefault("slow_bodies", {})[name] = row = slow_body_flood(
                    model, src, args.connections_flood, args.innocents, args.flood_rate)
                print(f"slow bodies, {name}: {json.dumps(row)}", flush=True)
            if "burst" in scenarios:
                results.setdefault("burst", {})[name] = row = burst(model, src, args.burst)
                print(f"burst, {name}: {json.dumps(row)}", flush=True)
            if "tenants" in scenarios:
                results.setdefault("tenants", {})[name] = row = tenants(
                    model, src, args.tenant_rate, 10.0, args.flood_texts, args.tenant_seconds)
                print(f"tenants, {name}: {json.dumps(row)}", flush=True)
    if "throughput" in scenarios:
        results["throughput"] = throughput(versions, args.rounds, (64, 256), args.requests)
        print(f"throughput: {json.dumps(results['throughput'])}", flush=True)
    report = dict(
        benchmark="muxplm serve under abuse (benchmarks/experiments/serve_abuse.py)",
        command=" ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit=commit + (" (serving code uncommitted)" if dirty else ""),
        versions={name: src or "this checkout" for name, src in versions.items()},
        machine=dict(platform=platform.platform(), processor=platform.processor(), cpus=os.cpu_count(),
                     load_average_at_end=os.getloadavg()),
        results=results,
    )
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
