"""HTTP server: endpoints, every error path, back-pressure, model-error isolation, shutdown."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import pytest
import uvicorn

from muxplm.serving import DynamicBatcher, Predictor, create_app
from muxplm.serving.batcher import BatcherClosedError

from serving_testing import GatedPredictor, run_app


@pytest.fixture(scope="module")
def predictor(sentence_dir):
    return Predictor.from_pretrained(sentence_dir, max_length=32)


def test_predict_health_metrics_and_schema(predictor):
    app = create_app(predictor, max_batch=8, max_wait_ms=2)

    async def scenario(client):
        one = await client.post("/predict", json={"text": "a gripping film"})
        many = await client.post("/predict", json={"text": ["good", "bad", "fine"]})
        pairs = await client.post("/predict", json={"text": ["a", "b"], "text_pair": ["c", "d"], "mode": "ensemble"})
        return one, many, pairs, await client.get("/health"), await client.get("/metrics"), await client.get("/openapi.json")

    one, many, pairs, health, metrics, schema = run_app(app, scenario)
    assert one.status_code == 200 and one.json()["predictions"][0]["label"] in {"neg", "neu", "pos"}
    assert one.json()["num_instances"] == 5 and one.json()["task"] == "sentence"
    assert len(many.json()["predictions"]) == 3
    assert pairs.status_code == 200 and pairs.json()["mode"] == "ensemble"
    assert health.json()["status"] == "ok" and health.json()["model"]["labels"] == ["neg", "neu", "pos"]
    text = metrics.text
    assert 'muxplm_requests_total{status="200"} 3.0' in text
    assert "muxplm_instances_total 6.0" in text
    for name in ("muxplm_batch_fill_ratio_bucket", "muxplm_queue_depth", "muxplm_request_latency_seconds_bucket",
                 "muxplm_slot_fill_ratio_count", "muxplm_ensemble_copies_total"):
        assert name in text
    assert {"/predict", "/health", "/metrics"} <= set(schema.json()["paths"])


def test_predict_fast_path_answers_its_own_faults_and_leaves_other_routes_to_fastapi(predictor):
    app = create_app(predictor, max_batch=8, max_wait_ms=2)

    async def broken(body, tenant=None):
        raise RuntimeError("a bug in the handler")

    async def scenario(client):
        wrong_method = await client.get("/predict")
        good = await client.post("/predict", json={"text": "fine"})
        app._answer = broken
        bad = await client.post("/predict", json={"text": "fine"})
        return wrong_method, good, bad, await client.get("/health")

    wrong_method, good, bad, health = run_app(app, scenario)
    assert wrong_method.status_code == 405  # FastAPI's routing, as before
    assert good.status_code == 200 and good.headers["content-type"] == "application/json"
    assert int(good.headers["content-length"]) == len(good.content)
    assert bad.status_code == 500 and bad.json() == {"detail": "server error: RuntimeError"}
    assert health.status_code == 200  # the server goes on


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"text": ""}, 422, "text 0 is empty"),
        ({"text": ["fine", "  "]}, 422, "text 1 is empty"),
        ({"text": []}, 422, "at least 1"),
        ({"text": 7}, 422, "valid string"),
        ({"text": "x", "mode": "fast"}, 422, "mode"),
        ({"text": "x", "truncate": "yes"}, 422, "truncate"),
        ({"text": "x", "colour": "red"}, 422, "colour"),
        ({"text": ["a", "b"], "text_pair": ["c"]}, 422, "2 texts but 1 text pairs"),
        ({"text": "a", "text_pair": ["c"]}, 422, "both be strings or both be lists"),
        ({"text": "word " * 40}, 413, "more than the maximum of 32"),
        ({"text": ["x"] * 9}, 413, "at most 8 per request"),
        ({"text": "word " * 40, "truncate": True}, 200, ""),
    ],
)
def test_validation_errors(predictor, body, status, message):
    app = create_app(predictor, max_batch=8, max_wait_ms=1)

    async def scenario(client):
        return await client.post("/predict", json=body)

    response = run_app(app, scenario)
    assert response.status_code == status, response.text
    assert message in response.json().get("detail", "")


def test_full_queue_answers_429_with_retry_after(predictor):
    gated = GatedPredictor(predictor)
    gated.gate.clear()
    app = create_app(gated, max_batch=1, max_wait_ms=0, max_queue=2)

    async def scenario(client):
        first = asyncio.create_task(client.post("/predict", json={"text": "first"}))
        while not gated.started.is_set():  # the worker holds "first"
            await asyncio.sleep(0.01)
        queued = [asyncio.create_task(client.post("/predict", json={"text": t})) for t in ("second", "third")]
        while app.state.batcher.queue_depth < 2:
            await asyncio.sleep(0.01)
        rejected = await client.post("/predict", json={"text": "fourth"})
        gated.gate.set()
        return rejected, await first, await asyncio.gather(*queued)

    rejected, first, queued = run_app(app, scenario)
    assert rejected.status_code == 429
    assert int(rejected.headers["Retry-After"]) >= 1
    assert "busy" in rejected.json()["detail"]
    assert [r.status_code for r in (first, *queued)] == [200, 200, 200]


def test_model_error_fails_only_its_batch(predictor):
    app = create_app(GatedPredictor(predictor), max_batch=8, max_wait_ms=0)

    async def scenario(client):
        bad = await client.post("/predict", json={"text": "boom goes the model"})
        good = await client.post("/predict", json={"text": "a calm request"})
        return bad, good, await client.get("/health")

    bad, good, health = run_app(app, scenario)
    assert bad.status_code == 500 and "the model exploded" in bad.json()["detail"]
    assert good.status_code == 200 and health.json()["status"] == "ok"


def test_batcher_close_drains_queue_and_refuses_new_work(predictor):
    gated = GatedPredictor(predictor)
    gated.gate.clear()
    batcher = DynamicBatcher(gated, max_batch=2, max_wait_ms=0).start()
    futures = [batcher.submit(predictor.encode([f"request {i}"])) for i in range(5)]
    closer = threading.Thread(target=batcher.close)
    closer.start()
    time.sleep(0.05)
    with pytest.raises(BatcherClosedError):
        batcher.submit(predictor.encode(["too late"]))
    gated.gate.set()
    closer.join(30)
    assert all(len(f.result(timeout=1)) == 1 for f in futures)
    assert not batcher.running


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_graceful_shutdown_completes_in_flight_requests(predictor):
    slow = GatedPredictor(predictor, delay=0.3)
    app = create_app(slow, max_batch=2, max_wait_ms=0)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)

    results = []

    def client(i):
        results.append(httpx.post(url + "/predict", json={"text": f"in flight {i}"}, timeout=30).status_code)

    clients = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for c in clients:
        c.start()
    deadline = time.monotonic() + 20
    while app.state.batcher.queue_depth + slow.seen < 6 and time.monotonic() < deadline:
        time.sleep(0.005)
    # All six are in flight (queued or running); at 2 per 0.3 s pass, most are still queued.
    assert app.state.batcher.queue_depth >= 2
    server.should_exit = True
    for c in clients:
        c.join(30)
    thread.join(30)
    assert sorted(results) == [200] * 6
    assert not app.state.batcher.running
    with pytest.raises(httpx.ConnectError):
        httpx.post(url + "/predict", json={"text": "after shutdown"}, timeout=2)


def test_oversized_input_fails_only_its_own_request(predictor):
    gated = GatedPredictor(predictor)
    app = create_app(gated, max_batch=8, max_wait_ms=200)  # long wait: both land in one batch

    async def scenario(client):
        return await asyncio.gather(
            client.post("/predict", json={"text": ["fine", "word " * 40]}),
            client.post("/predict", json={"text": "also fine"}),
        )

    too_long, fine = run_app(app, scenario)
    assert too_long.status_code == 413 and "input 1 has 42 tokens" in too_long.json()["detail"]
    assert fine.status_code == 200


def test_token_server_tags_words_and_refuses_pairs(token_dir):
    app = create_app(Predictor.from_pretrained(token_dir), max_batch=4, max_wait_ms=1)

    async def scenario(client):
        return (await client.post("/predict", json={"text": "Paris is nice"}),
                await client.post("/predict", json={"text": "a", "text_pair": "b"}))

    tagged, paired = run_app(app, scenario)
    (prediction,) = tagged.json()["predictions"]
    assert prediction["words"] == ["Paris", "is", "nice"] and len(prediction["tags"]) == 3
    assert set(prediction["tags"]) <= {"O", "B-X", "I-X"}
    assert paired.status_code == 422 and "sentence tasks" in paired.json()["detail"]
