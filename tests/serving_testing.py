"""Helpers of the serving tests: a predictor with injectable delays and faults, a way to
run an app inside its lifespan, and ``muxplm serve`` in a process of its own."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time

import httpx


class GatedPredictor:
    """Wraps a predictor: ``run`` waits for ``gate``, sleeps ``delay`` and raises for "boom"."""

    def __init__(self, inner, delay: float = 0.0):
        self.inner, self.delay = inner, delay
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.seen = 0  # distinct instances handed to run() (the batcher adds copies)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run(self, encoded, *, ensemble=False):
        self.started.set()
        self.seen += len({id(item) for item in encoded})
        self.gate.wait(30)
        time.sleep(self.delay)
        boom = self.inner.tokenizer.convert_tokens_to_ids("boom")
        if any(boom in item.input_ids for item in encoded):
            raise RuntimeError("the model exploded")
        return self.inner.run(encoded, ensemble=ensemble)


def run_app(app, scenario):
    """Run ``scenario(client)`` against the ASGI app inside its lifespan (batcher started/drained)."""

    async def main():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as client:
                return await scenario(client)

    return asyncio.run(main())


def start_server(model_dir, *flags) -> tuple[subprocess.Popen, int, str]:
    """``muxplm serve MODEL_DIR FLAGS`` on a free loopback port, once /health answers: the
    process, its port and its URL (raises with the server's stderr if it does not come up)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "muxplm.cli", "serve", str(model_dir), "--port", str(port), "--threads", "1",
         "--log-level", "warning", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline, up = time.monotonic() + 180, False
    while not up and time.monotonic() < deadline and server.poll() is None:
        try:
            up = httpx.get(url + "/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            time.sleep(0.2)
    if not up:
        server.kill()
        raise AssertionError(f"the server did not start: {server.communicate()[1].decode()[-2000:]}")
    return server, port, url
