"""Routing under load: thousands of concurrent, distinct requests through the dynamic batcher;
a retrieval-primed model reconstructs each input, so a swapped or lost response shows."""

from __future__ import annotations

import asyncio
import random

import httpx

from muxplm.serving import Predictor, create_app

from .conftest import routing_sentence

NUM_REQUESTS = 2000
CONCURRENCY = 64


def overlap(a: list[int], b: list[int]) -> float:
    return sum(x == y for x, y in zip(a, b)) / max(len(a), len(b))


def test_reconstruct_predictor(retrieval_dir):
    predictor = Predictor.from_pretrained(retrieval_dir)
    assert predictor.task == "reconstruct"
    rng = random.Random(1)
    texts = [routing_sentence(rng) for _ in range(16)]
    results = predictor.predict(texts)
    expected = predictor.tokenizer(texts)["input_ids"]
    scores = [overlap(r["token_ids"], ids) for r, ids in zip(results, expected)]
    assert sum(scores) / len(scores) > 0.9
    assert sum(r["text"] == t for r, t in zip(results, texts)) >= 12


def test_no_request_lost_or_swapped_under_load(retrieval_dir):
    predictor = Predictor.from_pretrained(retrieval_dir, max_length=32)
    app = create_app(predictor, max_batch=64, max_wait_ms=2, max_queue=4096)
    rng = random.Random(2)
    texts = []
    while len(texts) < NUM_REQUESTS:  # distinct inputs
        text = f"{routing_sentence(rng, 7)}"
        if text not in texts:
            texts.append(text)
    expected = predictor.tokenizer(texts)["input_ids"]
    responses: dict[int, list[int]] = {}
    statuses = []

    async def main():
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as client:
                queue = list(range(NUM_REQUESTS))

                async def worker():
                    while queue:
                        index = queue.pop()
                        # Some requests carry two texts, so requests of different sizes share batches.
                        batch = [texts[index]] if index % 5 else [texts[index], texts[index]]
                        reply = await client.post("/predict", json={"text": batch})
                        statuses.append(reply.status_code)
                        if reply.status_code == 200:
                            predictions = reply.json()["predictions"]
                            assert len(predictions) == len(batch)
                            responses[index] = predictions[0]["token_ids"]

                await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return app.state.metrics.render().decode()

    metrics = asyncio.run(main())
    assert statuses.count(200) == NUM_REQUESTS and len(responses) == NUM_REQUESTS  # none lost
    own = [overlap(responses[i], expected[i]) for i in range(NUM_REQUESTS)]
    assert sum(own) / NUM_REQUESTS > 0.9
    # Never another request's tokens: each response matches its own input better than the
    # input of any other request (checked against a random sample of others, and the neighbours).
    rng = random.Random(3)
    for i in range(NUM_REQUESTS):
        others = {rng.randrange(NUM_REQUESTS) for _ in range(20)} | {(i - 1) % NUM_REQUESTS, (i + 1) % NUM_REQUESTS}
        others.discard(i)
        assert own[i] > max(overlap(responses[i], expected[j]) for j in others), (i, texts[i])
    # The batcher really multiplexed many requests per forward pass.
    count = float(next(l.split()[1] for l in metrics.splitlines() if l.startswith("muxplm_batch_seconds_count")))
    assert count < NUM_REQUESTS / 4
