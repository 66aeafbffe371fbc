"""Fault injection into the serving path: each fault fails at most its own request, innocent
requests batched with it succeed, and the worker keeps serving afterwards."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from muxplm.serving import DynamicBatcher, Predictor, create_app
from muxplm.serving.predictor import CHARS_PER_TOKEN, InvalidTextError

from serving_testing import GatedPredictor, run_app, start_server


@pytest.fixture(scope="module")
def predictor(sentence_dir):
    return Predictor.from_pretrained(sentence_dir, max_length=32)


def burst(app, bodies):
    """Post every body at once (one batch: the app waits 200 ms for companions), then ask /health."""

    async def scenario(client):
        # json.dumps escapes lone surrogates (\\ud800) as a client's JSON library would
        answers = await asyncio.gather(*(client.post("/predict", content=json.dumps(body).encode(),
                                                     headers={"content-type": "application/json"})
                                         for body in bodies))
        return answers, await client.get("/health"), await client.post("/predict", json={"text": "after"})

    return run_app(app, scenario)


INNOCENT = [{"text": f"an innocent request number {i}"} for i in range(12)]


def test_a_poisoned_text_fails_alone(predictor):
    app = create_app(predictor, max_batch=64, max_wait_ms=200)
    answers, health, after = burst(app, [{"text": "abc \ud800"}, *INNOCENT, {"text": ["fine", "x \udfff y"]}])
    # The server's JSON parser refuses a lone surrogate (not valid Unicode) before any batching.
    for answer in (answers[0], answers[-1]):
        assert answer.status_code == 422 and "Invalid JSON" in answer.json()["detail"], answer.text
    assert [a.status_code for a in answers[1:-1]] == [200] * len(INNOCENT)
    assert health.status_code == 200 and after.status_code == 200
    # Texts that reach the batcher another way (the Python API) fail alone in the worker.
    batcher = DynamicBatcher(predictor, max_batch=64, max_wait_ms=200).start()
    try:
        futures = [batcher.submit_texts(["abc \ud800"]), *(batcher.submit_texts([b["text"]]) for b in INNOCENT),
                   batcher.submit_texts(["fine", "x \udfff y"])]
        with pytest.raises(InvalidTextError, match="input 0 is not valid text"):
            futures[0].result(30)
        with pytest.raises(InvalidTextError, match="input 1 is not valid text"):
            futures[-1].result(30)
        assert all(len(future.result(30)) == 1 for future in futures[1:-1])
    finally:
        batcher.close()


def test_a_huge_text_is_refused_before_tokenizing(predictor, monkeypatch):
    huge = "word " * 1_000_000  # 5 MB
    too_many = CHARS_PER_TOKEN * predictor.max_length
    tokenizer, longest = predictor.tokenizer, []

    def counting(texts, *args, **kwargs):  # the longest text the tokenizer is handed
        longest.append(max(map(len, texts), default=0))
        return tokenizer(texts, *args, **kwargs)

    monkeypatch.setattr(predictor, "tokenizer", counting)
    (refused,) = predictor.encode([huge], raise_too_long=False)
    assert max(longest, default=0) < len(huge)  # no tokenizer pass over the 5 MB
    assert f"more than the {too_many}" in str(refused)
    monkeypatch.setattr(predictor, "tokenizer", tokenizer)
    (cut,) = predictor.encode([huge], truncate=True)
    assert len(cut) == predictor.max_length and cut.truncated
    app = create_app(predictor, max_batch=64, max_wait_ms=200)
    answers, _, _ = burst(app, [{"text": huge}, *INNOCENT])
    assert answers[0].status_code == 413 and [a.status_code for a in answers[1:]] == [200] * len(INNOCENT)


class ExplodingDecode(GatedPredictor):
    def decode(self, item, output):
        if self.inner.tokenizer.convert_tokens_to_ids("thunder") in item.input_ids:
            raise RuntimeError("decode exploded")
        return self.inner.decode(item, output)


def test_an_exploding_decode_fails_its_request_and_the_worker_lives(predictor):
    app = create_app(ExplodingDecode(predictor), max_batch=64, max_wait_ms=200)
    answers, health, after = burst(app, [{"text": "thunder here"}, *INNOCENT])
    assert answers[0].status_code == 500 and "decode exploded" in answers[0].json()["detail"]
    assert [a.status_code for a in answers[1:]] == [200] * len(INNOCENT)
    assert health.status_code == 200 and after.status_code == 200


def test_an_exploding_metrics_callback_costs_nothing(predictor):
    app = create_app(predictor, max_batch=64, max_wait_ms=50)

    def explode(stats):
        raise RuntimeError("metrics exploded")

    app.state.batcher.on_batch = explode
    answers, health, after = burst(app, INNOCENT)
    assert [a.status_code for a in answers] == [200] * len(INNOCENT)
    assert health.status_code == 200 and after.status_code == 200


def test_an_exploding_tokenizer_fails_only_the_culprit(predictor):
    class Picky(GatedPredictor):
        def encode(self, texts, pairs=None, **kwargs):
            if any("poison" in text for text in texts):
                raise InvalidTextError(0, "poisoned")
            return self.inner.encode(texts, pairs, **kwargs)

    batcher = DynamicBatcher(Picky(predictor), max_batch=64, max_wait_ms=200).start()
    try:
        futures = [batcher.submit_texts(["a poison pill"]), *(batcher.submit_texts([b["text"]]) for b in INNOCENT)]
        with pytest.raises(InvalidTextError):
            futures[0].result(30)
        assert all(len(f.result(30)) == 1 for f in futures[1:])
    finally:
        batcher.close(30)


def test_a_worker_fault_outside_the_model_answers_the_batch_and_keeps_serving(predictor):
    batcher = DynamicBatcher(predictor, max_batch=8, max_wait_ms=0).start()
    original = batcher._tokenize
    calls = []

    def broken_once(batch):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected fault")
        return original(batch)

    batcher._tokenize = broken_once
    try:
        with pytest.raises(RuntimeError, match="injected fault"):
            batcher.submit_texts(["first"]).result(30)
        assert batcher.running
        assert len(batcher.submit_texts(["second"]).result(30)) == 1
    finally:
        batcher.close(30)
    assert not batcher.running  # shutdown completes


def test_retry_after_on_a_cold_server_uses_the_batch_size_prior(predictor):
    gated = GatedPredictor(predictor)
    gated.gate.clear()
    batcher = DynamicBatcher(gated, max_batch=16, max_wait_ms=0, max_queue=32).start()
    try:
        first = batcher.submit_texts(["holds the worker"])
        while not gated.started.is_set():
            time.sleep(0.01)
        queued = [batcher.submit_texts(["waiting"] * 16) for _ in range(2)]
        assert batcher._retry_after() == 2  # 32 queued / 16 a second, not 32 s
        gated.gate.set()
        for future in (first, *queued):
            future.result(30)
    finally:
        batcher.close(30)


def test_a_client_that_gives_up_costs_nobody_else(predictor):
    gated = GatedPredictor(predictor)
    gated.gate.clear()
    app = create_app(gated, max_batch=1, max_wait_ms=0, companions=0)  # copies: seen counts requests

    async def scenario(client):
        first = asyncio.create_task(client.post("/predict", json={"text": "holds the worker"}))
        while not gated.started.is_set():
            await asyncio.sleep(0.01)
        quitter = asyncio.create_task(client.post("/predict", json={"text": "gives up"}))
        while app.state.batcher.queue_depth < 1:
            await asyncio.sleep(0.01)
        quitter.cancel()  # the client disconnects while its request is queued
        await asyncio.sleep(0.05)
        gated.gate.set()
        return await first, await client.post("/predict", json={"text": "after"}), await client.get("/health")

    first, after, health = run_app(app, scenario)
    assert first.status_code == 200 and after.status_code == 200 and health.status_code == 200
    assert gated.seen == 2  # the abandoned request never reached the model


def test_sigterm_mid_burst_answers_every_accepted_request_and_exits_cleanly(sentence_dir):
    import signal
    import threading

    import httpx

    server, _, url = start_server(sentence_dir, "--max-wait-ms", "50", "--max-batch", "8")
    try:
        outcomes = []

        def client(i):
            try:
                outcomes.append(httpx.post(url + "/predict", json={"text": f"request {i} " * 20}, timeout=30).status_code)
            except httpx.HTTPError:  # refused: the server had stopped accepting
                outcomes.append("not accepted")

        clients = [threading.Thread(target=client, args=(i,)) for i in range(40)]
        for thread in clients:
            thread.start()
        arriving = time.monotonic() + 30
        while not outcomes and time.monotonic() < arriving:  # the burst has reached the server (a loaded
            time.sleep(0.01)                                  # machine may take longer than a fixed wait)
        server.send_signal(signal.SIGTERM)
        for thread in clients:
            thread.join(40)
        code = server.wait(40)
    finally:
        if server.poll() is None:
            server.kill()
    assert code == 0, server.stderr.read().decode()[-2000:]
    assert len(outcomes) == 40 and 200 in outcomes
    assert all(outcome in (200, 503, "not accepted") for outcome in outcomes), outcomes
