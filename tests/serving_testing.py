"""Helpers of the serving tests: a predictor with injectable delays and faults, and a way to
run an app inside its lifespan."""

from __future__ import annotations

import asyncio
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
