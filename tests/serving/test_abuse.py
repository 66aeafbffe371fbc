"""The server probed as hostile or unlucky clients and operators would: options that would break
it are refused at start, oversized or stalled input is cut off as it arrives, connections are
bounded in number and time, shutdown meets its deadline, and one client's traffic never decides
another's answer unless the operator asks for shared groups. Everything talks to 127.0.0.1 only,
with bounded request counts and timeouts."""

from __future__ import annotations

import asyncio
import json
import math
import select
import socket
import threading
import time

import httpx
import pytest

from muxplm.cli import main as muxplm_main
from muxplm.serving import DynamicBatcher, Predictor, create_app
from muxplm.serving import limits
from muxplm.serving.server import TENANT_HEADER as TENANT

from serving_testing import GatedPredictor, run_app, start_server

pytestmark = pytest.mark.usefixtures("builtin_data")  # trains or scores on the built-in data


@pytest.fixture(scope="module")
def predictor(sentence_dir):
    return Predictor.from_pretrained(sentence_dir, max_length=32)


# ------------------------------------------------------------------ options that would break the server


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--max-queue", "16"], "--max-queue 16 is below --max-batch 64"),
        (["--max-batch", "8", "--max-queue", "7"], "--max-queue 7 is below --max-batch 8"),
        (["--max-wait-ms", "nan"], "--max-wait-ms"),
        (["--max-wait-ms", "inf"], "--max-wait-ms"),
        (["--max-wait-ms", "1e13"], "--max-wait-ms"),
        (["--max-wait-ms=-1"], "--max-wait-ms"),
        (["--threads", "-1"], "--threads"),
        (["--threads", "0"], "--threads"),
        (["--port", "99999"], "--port"),
        (["--port=-1"], "--port"),
        (["--max-batch", "0"], "--max-batch"),
        (["--max-body-bytes", "0"], "--max-body-bytes"),
        (["--body-timeout-s", "nan"], "--body-timeout-s"),
        (["--shutdown-timeout-s", "-1"], "--shutdown-timeout-s"),
        (["--companion-texts", "/no/such/file.txt"], "--companion-texts /no/such/file.txt: cannot read it"),
        (["--deterministic", "--companions", "4"], "--deterministic cannot take companions"),
        (["--threads", "100000"], "--threads: must lie in 1.."),
        (["--device", "meta"], "--device: 'meta': the server runs on cpu, cuda or cuda:K"),
        (["--log-level", "nonsense"], "--log-level: invalid choice: 'nonsense'"),
        (["--share-groups", "--isolate-tenants"], "--share-groups"),
        (["--share-groups", "--deterministic"], "--share-groups"),
    ],
)
def test_options_that_would_break_the_server_are_refused_at_start(tmp_path, capsys, flags, named):
    # Refused before the model is read (the folder does not exist): the message names the flag, not the folder.
    try:
        code = muxplm_main(["serve", str(tmp_path / "no-model"), *flags])
    except SystemExit as exit_:  # argparse's own refusal
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err, err


@pytest.mark.parametrize("wait", [math.nan, math.inf, 1e13, -1.0])
def test_the_batcher_refuses_a_wait_that_would_hang_or_kill_its_worker(predictor, wait):
    with pytest.raises(ValueError, match="max_wait_ms"):
        DynamicBatcher(predictor, max_wait_ms=wait)


def test_the_batcher_refuses_a_queue_shorter_than_a_batch(predictor):
    with pytest.raises(ValueError, match="max_queue"):
        DynamicBatcher(predictor, max_batch=33, max_queue=32)
    DynamicBatcher(predictor, max_batch=32, max_queue=32)  # a full request fits


# ------------------------------------------------------------------ bodies: bounded as they arrive

MiB = 1 << 20


def scope_of(path="/predict", headers=()):
    return {"type": "http", "method": "POST", "path": path, "headers": [(k.encode(), v.encode()) for k, v in headers],
            "query_string": b"", "raw_path": path.encode(), "root_path": "", "scheme": "http", "http_version": "1.1",
            "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 1)}


def call_app(app, scope, receive, timeout=30.0):
    """Call the ASGI app inside its lifespan; returns (status, headers, body)."""
    sent = []

    async def send(message):
        sent.append(message)

    async def main():
        async with app.router.lifespan_context(app):
            await asyncio.wait_for(app(scope, receive, send), timeout)

    asyncio.run(main())
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict((k.decode(), v.decode()) for k, v in start["headers"]), json.loads(body)


def streamed(total, chunk=64 << 10):
    """A receive() that hands out ``total`` bytes of body in chunks, counting what was taken."""
    taken = {"bytes": 0}

    async def receive():
        size = min(chunk, total - taken["bytes"])
        taken["bytes"] += size
        return {"type": "http.request", "body": b"x" * size, "more_body": taken["bytes"] < total}

    return receive, taken


def test_an_oversized_body_is_refused_as_it_arrives_not_after(predictor):
    app = create_app(predictor, max_batch=8, max_body_bytes=MiB)
    receive, taken = streamed(20 * MiB)  # no Content-Length (chunked): counted as the chunks arrive
    status, headers, reply = call_app(app, scope_of(), receive)
    assert status == 413 and "at most 1048576 bytes" in reply["detail"]
    assert taken["bytes"] <= MiB + (64 << 10)  # read to just past the limit, not the 20 MB
    assert headers["connection"] == "close"
    receive, taken = streamed(20 * MiB)  # a Content-Length over the limit: refused before any byte is read
    status, _, reply = call_app(app, scope_of(headers=[("content-length", str(20 * MiB))]), receive)
    assert status == 413 and taken["bytes"] == 0 and f"{20 * MiB} bytes" in reply["detail"]


def test_a_body_that_never_arrives_is_answered_408(predictor):
    app = create_app(predictor, max_batch=8, body_timeout_s=0.3)
    calls = []

    async def receive():
        calls.append(1)
        if len(calls) == 1:
            return {"type": "http.request", "body": b'{"text": ', "more_body": True}
        await asyncio.Event().wait()  # the rest of the announced body never comes

    started = time.monotonic()
    status, _, reply = call_app(app, scope_of(headers=[("content-length", "100")]), receive)
    assert status == 408 and "--body-timeout-s" in reply["detail"]
    assert time.monotonic() - started < 10  # generous: the bound is 0.3 s


def test_a_body_in_many_chunks_is_read_in_linear_time_and_served(predictor):
    app = create_app(predictor, max_batch=8)
    body = json.dumps({"text": "a fine film " + "x" * 50_000, "truncate": True}).encode()
    chunks = [body[i : i + 7] for i in range(0, len(body), 7)]  # ~7,000 tiny chunks

    async def receive():
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    status, _, reply = call_app(app, scope_of(), receive)
    assert status == 200 and len(reply["predictions"]) == 1


# ------------------------------------------------------------------ over loopback: heads, connections, timeouts


class LiveServer:
    """The app behind uvicorn with the server's limits, in a thread, on 127.0.0.1."""

    def __init__(self, app, **limit_options):
        import uvicorn

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                **limits.uvicorn_options(on_refused=app.count_refused, **limit_options))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.server.started
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(60)

    def connect(self, timeout=10.0) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def innocent(self) -> int:
        return httpx.post(self.url + "/predict", json={"text": "an innocent request"}, timeout=30).status_code

    def counted(self) -> dict[str, int]:
        """``muxplm_requests_total`` by status, from /metrics."""
        counts = {}
        for line in httpx.get(self.url + "/metrics", timeout=30).text.splitlines():
            if line.startswith("muxplm_requests_total{"):
                counts[line.split('status="', 1)[1].split('"', 1)[0]] = int(float(line.rsplit(" ", 1)[1]))
        return counts


def read_response(sock) -> tuple[int | None, bytes]:
    """Status and raw bytes of the response on ``sock`` (None: closed without one)."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    if not data.startswith(b"HTTP/1.1 "):
        return None, data
    return int(data.split(b" ", 2)[1]), data


def closed_by_server(sock, within: float) -> bool:
    sock.settimeout(within)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_oversized_bodies_and_heads_over_loopback_are_refused_and_innocents_served(predictor):
    app = create_app(predictor, max_batch=8, max_wait_ms=1, max_body_bytes=MiB, body_timeout_s=1.0)
    with LiveServer(app, max_header_bytes=16 << 10) as live:
        assert live.innocent() == 200
        # A 20 MB Content-Length: refused on the head alone, the connection closed.
        with live.connect() as sock:
            sock.sendall(b"POST /predict HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 20000000\r\n\r\n")
            status, raw = read_response(sock)
            assert status == 413 and b"connection: close" in raw.lower()
            assert closed_by_server(sock, 10)
        # A chunked 20 MB body: refused once the first MiB has passed, long before the 20 MB are sent;
        # the client, still sending, gets the answer whole (no reset: the server reads and drops the rest).
        with live.connect() as sock:
            sock.sendall(b"POST /predict HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")
            chunk, sent = b"%x\r\n%s\r\n" % (64 << 10, b"x" * (64 << 10)), 0
            sock.settimeout(10)
            while sent < 20 * MiB and not select.select([sock], [], [], 0)[0]:  # until the answer comes
                sock.sendall(chunk)
                sent += 64 << 10
            assert sent < 20 * MiB
            for _ in range(8):  # and a little more, as a client that has not read yet would
                sock.sendall(chunk)
            status, _ = read_response(sock)
            assert status == 413
        # A 1 MB header: 431 before it is all parsed.
        with live.connect() as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: a\r\nX-Big: ")
            sock.settimeout(10)
            try:
                for _ in range(16):
                    sock.sendall(b"y" * (64 << 10))
            except (BrokenPipeError, ConnectionResetError):
                pass
            status, _ = read_response(sock)
            assert status in (431, None)
            assert closed_by_server(sock, 10)
        # A head over the limit that arrives whole in one read; a long URL is a large head too.
        for head in (b"GET /health HTTP/1.1\r\nHost: a\r\nX-Big: " + b"y" * (20 << 10) + b"\r\n\r\n",
                     b"GET /health?" + b"q" * (20 << 10) + b" HTTP/1.1\r\nHost: a\r\n\r\n"):
            with live.connect() as sock:
                sock.sendall(head)
                assert read_response(sock)[0] == 431
        with live.connect() as sock:  # just under the limit: served
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: a\r\nX-Big: " + b"y" * (15 << 10) + b"\r\n\r\n")
            assert read_response(sock)[0] == 200
        # A body announced and never sent whole: 408 after --body-timeout-s.
        with live.connect() as sock:
            sock.sendall(b"POST /predict HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100\r\n\r\n{\"text\": ")
            assert read_response(sock)[0] == 408
        assert live.innocent() == 200
        assert httpx.get(live.url + "/health", timeout=10).status_code == 200


def test_idle_connections_are_bounded_in_number_and_time(predictor):
    app = create_app(predictor, max_batch=8, max_wait_ms=1)
    with LiveServer(app, max_connections=20, keep_alive_s=1.0) as live:
        idle = [live.connect() for _ in range(60)]  # three times the limit, none sends a byte
        try:
            assert live.innocent() == 200  # makes room by closing an idle connection
            # The oldest idle connections were closed to make room for the newer ones.
            assert closed_by_server(idle[0], 5)
            # Every idle connection is closed within --keep-alive-s (generous margin).
            deadline = time.monotonic() + 10
            assert all(closed_by_server(sock, max(0.1, deadline - time.monotonic())) for sock in idle[-10:])
            # A head sent a byte at a time is idle too: answered 408 and closed, not kept open by the trickle.
            with live.connect() as slow:
                started = time.monotonic()
                for byte in b"GET /health HTTP/1.1\r\nHost: a\r\nX-Slow: " + b"z" * 100:
                    slow.sendall(bytes([byte]))  # the server reads and drops the rest: no reset
                    time.sleep(0.05)
                    if select.select([slow], [], [], 0)[0] or time.monotonic() - started > 8:
                        break
                assert read_response(slow)[0] == 408
                assert closed_by_server(slow, 5)
                assert time.monotonic() - started < 8
            assert live.innocent() == 200
        finally:
            for sock in idle:
                sock.close()


SLOW_BODY = b"POST /predict HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"


@pytest.fixture
def many_sockets():
    """Room for a few hundred sockets at both ends of loopback, in this one process (the soft
    limit on open files may be 1,024)."""
    limits.raise_open_files_limit()


def test_a_slow_body_flood_does_not_lock_out_another_connection(predictor, many_sockets):
    # The flood at a thirtieth of its full size: 1.5 x --max-connections connections from the innocent
    # client's own address, each announcing 100 bytes of body and sending one, and more coming. Before,
    # a connection receiving a body was never reclaimed: every newcomer was refused, by a reset.
    app = create_app(predictor, max_batch=8, max_wait_ms=1)
    flood = []

    def open_more(count):
        for _ in range(count):
            sock = live.connect()
            sock.sendall(SLOW_BODY)
            flood.append(sock)

    with LiveServer(app, max_connections=50) as live:
        try:
            open_more(75)
            statuses = []
            with httpx.Client(timeout=30) as client:  # another connection, kept alive
                for index in range(20):
                    if index == 10:  # the flood is no longer fresh (its requests are surely read)
                        time.sleep(limits.FRESH_S + 0.2)
                    open_more(5)
                    statuses.append(client.post(live.url + "/predict", json={"text": f"innocent {index}"}).status_code)
            assert statuses == [200] * 20
            # The stalled connections gave their capacity back, oldest first, each with an answer (503
            # and Retry-After), counted; the newest still wait.
            answered = [read_response(sock) for sock in flood[:20]]
            assert all(status == 503 and b"retry-after: 1" in raw.lower() for status, raw in answered), answered
            assert not closed_by_server(flood[-1], 0.2)
            assert live.counted().get("503", 0) >= 20
        finally:
            for sock in flood:
                sock.close()


def test_a_burst_past_max_connections_gets_an_answer_for_every_request(predictor, many_sockets):
    # The burst at a tenth of its full size: 300 connections at once, 6 x --max-connections, each sending
    # one request. Before, the connections evicted to make room had sent requests not yet read: closed
    # without an answer, and not counted.
    app = create_app(predictor, max_batch=4, max_wait_ms=1, max_queue=8)

    async def one(index):
        reader, writer = await asyncio.open_connection("127.0.0.1", live.port)
        try:
            body = json.dumps({"text": f"burst request {index}"}).encode()
            writer.write(b"POST /predict HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)  # closed first: IncompleteReadError
            return int(head.split(b" ", 2)[1]), b"retry-after:" in head.lower()
        finally:
            writer.close()

    async def everyone():
        return await asyncio.gather(*(one(index) for index in range(300)), return_exceptions=True)

    with LiveServer(app, max_connections=50) as live:
        replies = asyncio.run(everyone())
        unanswered = [reply for reply in replies if isinstance(reply, BaseException)]
        assert not unanswered, unanswered[:3]
        statuses = {status for status, _ in replies}
        assert statuses <= {200, 429, 503} and 503 in statuses, statuses
        assert all(retry_after for status, retry_after in replies if status != 200)
        assert sum(live.counted().values()) == 300  # every request counted, whoever answered it


# ------------------------------------------------------------------ shutdown meets its deadline




def test_a_stalled_client_does_not_hold_shutdown_past_its_deadline(sentence_dir):
    import signal

    server, port, url = start_server(sentence_dir, "--shutdown-timeout-s", "2", "--body-timeout-s", "60")
    stalled = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        # Announces 100 bytes of body, sends 9, then nothing: its request is in flight until the deadline.
        stalled.sendall(b"POST /predict HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 100\r\n\r\n{\"text\": ")
        assert httpx.post(url + "/predict", json={"text": "served meanwhile"}, timeout=30).status_code == 200
        started = time.monotonic()
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(2 + 20)  # the deadline plus a generous margin for a loaded machine
        except Exception:
            server.kill()
            raise AssertionError("shutdown waited on the stalled client past its deadline") from None
        took = time.monotonic() - started
        status, raw = read_response(stalled)
    finally:
        stalled.close()
        if server.poll() is None:
            server.kill()
            server.wait()
    assert code == 0, server.stderr.read().decode()[-2000:]
    assert took >= 1.5  # it did wait for the request in flight, up to the deadline
    assert status == 503 and b"retry-after" in raw.lower(), raw  # cut: a 503 to retry, not a 500


def test_a_request_in_the_model_at_the_shutdown_deadline_is_answered_503(predictor):
    gated = GatedPredictor(predictor)
    gated.gate.clear()  # its pass outlasts the deadline
    app = create_app(gated, max_batch=8, max_wait_ms=0, shutdown_timeout_s=30)
    try:
        with LiveServer(app, shutdown_timeout_s=1) as live, live.connect(timeout=30) as sock:
            body = b'{"text": "a slow pass"}'
            sock.sendall(b"POST /predict HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            assert gated.started.wait(30)
            live.server.should_exit = True
            status, raw = read_response(sock)
            gated.gate.set()  # the pass ends; the server drains and stops
    finally:
        gated.gate.set()
    assert status == 503 and b"retry-after: 1" in raw.lower() and b"--shutdown-timeout-s" in raw, raw


# ------------------------------------------------------------------ one client's traffic is not another's answer


@pytest.fixture(scope="module")
def pair_predictor(tmp_path_factory):
    """An N = 2 sentence classifier, the smallest N where a spare slot is an issue."""
    import torch

    from muxplm import MuxBertConfig, MuxBertForSequenceClassification

    from .conftest import SMALL

    torch.manual_seed(7)
    folder = tmp_path_factory.mktemp("pair")
    MuxBertForSequenceClassification(MuxBertConfig.from_preset("tiny", **SMALL, num_instances=2,
                                                               num_labels=2)).save_pretrained(folder)
    return Predictor.from_pretrained(folder, max_length=32)


PROBE = "a fixed probe sentence"
SECRETS = [f"patient {name} was diagnosed with {illness}" for name, illness in
           [("anna", "flu"), ("bob", "asthma"), ("carl", "cancer"), ("dora", "measles"), ("emil", "gout")]]


def probe_after_each(app, secrets, headers=None):
    """The probe's logit score sent alone right after each secret (light load: one request at a time)."""

    async def scenario(client):
        scores = []
        for secret in secrets:
            assert (await client.post("/predict", json={"text": secret})).status_code == 200
            reply = await client.post("/predict", json={"text": PROBE}, headers=headers or {})
            scores.append(reply.json()["predictions"][0]["score"])
        return scores

    return run_app(app, scenario)


def test_a_probe_learns_nothing_of_the_previous_request_by_default(pair_predictor):
    scores = probe_after_each(create_app(pair_predictor, max_batch=8, max_wait_ms=0), SECRETS)
    assert len(set(scores)) == 1, scores  # exactly the same answer whatever came before
    # The opt-in recent-traffic companions do leak it: the reason they are off by default.
    leaky = probe_after_each(create_app(pair_predictor, max_batch=8, max_wait_ms=0, companions=8), SECRETS)
    assert len(set(leaky)) == len(SECRETS)


def test_fixed_companion_texts_fill_spare_slots_and_leak_nothing(pair_predictor):
    app = create_app(pair_predictor, max_batch=8, max_wait_ms=0, companion_texts=["an ordinary calibration text"])
    scores = probe_after_each(app, SECRETS)
    assert len(set(scores)) == 1
    alone = pair_predictor.predict([PROBE, "an ordinary calibration text"])[0]["score"]
    assert scores[0] == pytest.approx(alone, abs=1e-6)


class Recorder:
    """Wraps a predictor and records the rows of every forward pass."""

    def __init__(self, inner):
        self.inner, self.passes = inner, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run(self, encoded, *, ensemble=False):
        self.passes.append((list(encoded), ensemble))
        return self.inner.run(encoded, ensemble=ensemble)


def burst(app, bodies_and_headers):
    async def scenario(client):
        return await asyncio.gather(*(client.post("/predict", json=body, headers=headers)
                                      for body, headers in bodies_and_headers))

    return run_app(app, scenario)


def test_isolated_tenants_never_share_a_group_under_load(pair_predictor):
    recorder = Recorder(pair_predictor)
    app = create_app(recorder, max_batch=64, max_wait_ms=200, isolate_tenants=True)
    marks = {"apple": "a", "river": "b", "stone": "c"}  # the word each tenant's texts carry
    requests = []
    for i in range(30):
        word = list(marks)[i % 3]
        texts = [f"{word} number {i}"] + ([f"{word} again {i}"] if i % 4 == 0 else [])
        requests.append(({"text": texts, "mode": "ensemble" if i % 7 == 0 else "throughput"},
                         {"X-Muxplm-Tenant": marks[word]}))
    requests += [({"text": f"apple without a tenant {i}"}, {}) for i in range(3)]  # each a tenant of its own
    replies = burst(app, requests)
    assert [r.status_code for r in replies] == [200] * len(requests)
    ids = {word: pair_predictor.tokenizer.convert_tokens_to_ids(word) for word in marks}
    n, mixed_batches = pair_predictor.num_instances, 0
    for rows, ensemble in recorder.passes:
        owners = [next((w for w, t in ids.items() if t in row.input_ids), None) if len(row) else None for row in rows]
        untenanted = ["without" in pair_predictor.tokenizer.decode(row.input_ids) for row in rows]
        if len({o for o in owners if o}) > 1:
            mixed_batches += 1  # tenants may share a forward pass, never a group
        assert not ensemble or len({o for o in owners if o}) == 1  # ensembling lays out copies across the pass
        for g in range(0, len(rows), n):
            group = [(o, u) for o, u in zip(owners[g : g + n], untenanted[g : g + n]) if o is not None]
            assert len(set(group)) <= 1 or all(not u for _, u in group) and len({o for o, _ in group}) == 1, group
            if any(u for _, u in group):  # a request without a tenant shares with nobody but itself
                texts = {pair_predictor.tokenizer.decode(rows[g + k].input_ids) for k in range(n) if len(rows[g + k])}
                assert len(texts) == 1
    assert mixed_batches >= 1  # the burst really was served together


def test_an_isolated_tenants_probe_is_independent_of_other_tenants_under_load(pair_predictor):
    app = create_app(pair_predictor, max_batch=64, max_wait_ms=200, isolate_tenants=True)
    scores = []
    for secret in SECRETS:  # the probe shares each batch with another tenant's secrets
        replies = burst(app, [({"text": [secret] * 3}, {"X-Muxplm-Tenant": "other"}),
                              ({"text": PROBE}, {"X-Muxplm-Tenant": "prober"}),
                              ({"text": secret + " too"}, {"X-Muxplm-Tenant": "other"})])
        scores.append(replies[1].json()["predictions"][0]["score"])
    alone = probe_after_each(create_app(pair_predictor, max_batch=8, max_wait_ms=0), SECRETS[:1])[0]
    # Up to float rounding (the pass's shape varies with the batch), the probe's answer is its own.
    assert max(scores) - min(scores) < 1e-5 and abs(scores[0] - alone) < 1e-5
    shared = []  # without isolation the same bursts do move the probe's score
    for secret in SECRETS:
        replies = burst(create_app(pair_predictor, max_batch=64, max_wait_ms=200),
                        [({"text": PROBE}, {}), ({"text": secret}, {})])
        shared.append(replies[0].json()["predictions"][0]["score"])
    assert max(shared) - min(shared) > 1e-4


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True),
                                            ("127.0.0.2", True), ("0.0.0.0", False), ("::", False),
                                            ("10.1.2.3", False), ("myhost.example", False)])
def test_which_addresses_count_as_loopback(host, loopback):
    assert limits.is_loopback(host) is loopback


def test_a_server_bound_beyond_loopback_shares_groups_only_when_told(sentence_dir, monkeypatch, capsys):
    import uvicorn

    from muxplm.serving.server import serve

    served = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.update(app=app, options=options))

    def grouping(**flags):
        serve(str(sentence_dir), port=0, **flags)
        health = run_app(served["app"], lambda client: client.get("/health")).json()
        return health["grouping"], served["app"].state.batcher.isolate_tenants

    assert grouping(host="0.0.0.0") == ("tenants", True)  # exposed: private unless told otherwise
    assert "--share-groups" in capsys.readouterr().err  # and the operator is told how to share
    assert grouping(host="0.0.0.0", share_groups=True) == ("shared", False)
    assert grouping(host="0.0.0.0", deterministic=True)[0] == "deterministic"
    assert grouping(host="127.0.0.1") == ("shared", False)  # loopback: the operator's own machine
    assert grouping(host="127.0.0.1", isolate_tenants=True) == ("tenants", True)
    assert "--share-groups" not in capsys.readouterr().err
    with pytest.raises(ValueError, match="--share-groups"):
        serve(str(sentence_dir), host="0.0.0.0", share_groups=True, isolate_tenants=True)


def test_a_flooding_tenant_gets_the_refusals_and_a_light_one_a_short_pass(predictor):
    from muxplm.serving.batcher import QueueFullError

    gated = GatedPredictor(predictor)
    gated.gate.clear()
    recorder = Recorder(gated)
    batcher = DynamicBatcher(recorder, max_batch=8, max_wait_ms=0, max_queue=16).start()
    try:
        first = batcher.submit_texts(["a first"], tenant="a")
        assert gated.started.wait(30)  # the worker holds a's first pass
        flood = [batcher.submit_texts([f"a {i}", f"a {i} again"], tenant="a") for i in range(8)]  # the queue is full
        with pytest.raises(QueueFullError):
            batcher.submit_texts(["a one more"], tenant="a")  # the tenant holding the most is refused
        light = batcher.submit_texts(["b gentle"], tenant="b")  # another takes the place of a's newest request
        with pytest.raises(QueueFullError) as pushed:
            flood[-1].result(5)
        assert pushed.value.retry_after >= 1
        gated.gate.set()
        assert len(light.result(30)) == 1 and len(first.result(30)) == 1
        assert all(len(future.result(30)) == 2 for future in flood[:-1])
    finally:
        gated.gate.set()
        batcher.close(30)
    tokenizer = predictor.tokenizer
    passes = [{tokenizer.decode(row.input_ids, skip_special_tokens=True) for row in rows} for rows, _ in recorder.passes]
    # b's request ran right after the pass under way, in a pass of its own (copies fill its group):
    # not behind a's queue, nor in a pass a's flood fills. Then a's requests, in turn.
    assert passes[1] == {"b gentle"}
    assert all("b gentle" not in texts for texts in passes[2:]) and len(passes) >= 4


def test_a_request_pushed_out_for_another_tenant_is_answered_429(predictor):
    gated = GatedPredictor(predictor)
    gated.gate.clear()
    app = create_app(gated, max_batch=4, max_wait_ms=0, max_queue=4, isolate_tenants=True)

    async def until(condition):
        deadline = time.monotonic() + 30
        while not condition() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        assert condition()

    async def scenario(client):
        def post(text, tenant):
            return asyncio.create_task(client.post("/predict", json={"text": text}, headers={TENANT: tenant}))

        try:
            first = post("a first", "a")
            await until(gated.started.is_set)
            flood = []
            for index in range(4):
                flood.append(post(f"a {index}", "a"))
                await until(lambda: app.state.batcher.queue_depth == index + 1)
            light = post("b gentle", "b")
            pushed = await flood[-1]
        finally:
            gated.gate.set()
        return pushed, await light, await first, await asyncio.gather(*flood[:-1])

    pushed, light, first, rest = run_app(app, scenario)
    assert pushed.status_code == 429 and int(pushed.headers["retry-after"]) >= 1, pushed.text
    assert [r.status_code for r in (light, first, *rest)] == [200] * 5


def test_deterministic_mode_gives_one_answer_per_text_under_concurrent_load(pair_predictor):
    import random

    rng = random.Random(0)
    words = "the a film good bad plot long short actor music dull fine gripping tedious".split()
    app = create_app(pair_predictor, max_batch=16, max_wait_ms=5, deterministic=True)
    bodies = []
    for i in range(60):
        if i % 3 == 0:
            bodies.append(({"text": PROBE, "mode": "ensemble" if i % 2 else "throughput"}, {}))
        else:  # other traffic, of other lengths and sizes
            texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 25))) for _ in range(rng.randint(1, 3))]
            bodies.append(({"text": texts}, {}))
    replies = burst(app, bodies)
    assert [r.status_code for r in replies] == [200] * len(bodies)
    probes = {replies[i].json()["predictions"][0]["score"] for i in range(0, 60, 3)}
    assert len(probes) == 1, probes  # to the bit, in throughput and ensemble mode alike
    alone = run_app(app, lambda client: client.post("/predict", json={"text": PROBE}))
    assert alone.json()["predictions"][0]["score"] in probes
    # The same with fixed companion texts, and for a text's place inside a multi-text request.
    fixed = create_app(pair_predictor, max_batch=16, max_wait_ms=5, deterministic=True,
                       companion_texts=["an ordinary calibration text"])
    replies = burst(fixed, [({"text": [PROBE, f"filler {i}"][:: 1 if i % 2 else -1]}, {}) for i in range(12)])
    scores = {r.json()["predictions"][0 if i % 2 else 1]["score"] for i, r in enumerate(replies)}
    assert len(scores) == 1


# ------------------------------------------------------------------ lesser faults


def test_weights_with_nan_are_refused_by_serve_and_evaluate(sentence_dir, tokenizer, tmp_path, capsys):
    import torch

    from muxplm import MuxBertForSequenceClassification
    from muxplm.training.evaluate import evaluate_checkpoint

    model = MuxBertForSequenceClassification.from_pretrained(sentence_dir)
    with torch.no_grad():
        list(model.parameters())[-1].view(-1)[0] = float("nan")  # one weight of the head
    broken = tmp_path / "broken"
    model.save_pretrained(broken)
    tokenizer.save_pretrained(broken)
    with pytest.raises(ValueError, match="NaN or infinite"):
        Predictor.from_pretrained(broken)
    assert muxplm_main(["serve", str(broken), "--port", "0"]) == 2  # refused at load, never listening
    assert "NaN or infinite" in capsys.readouterr().err
    with pytest.raises(ValueError, match=f"{broken}.*NaN or infinite"):
        evaluate_checkpoint(broken, task="sentiment", seeds=1)


def test_a_non_finite_output_is_a_500_not_invalid_json(predictor):
    import torch

    class NaNPredictor(Recorder):
        def run(self, encoded, *, ensemble=False):
            return [torch.full_like(out, float("nan")) for out in self.inner.run(encoded, ensemble=ensemble)]

    app = create_app(NaNPredictor(predictor), max_batch=8, max_wait_ms=0)

    async def scenario(client):
        return await client.post("/predict", json={"text": "fine"}), await client.get("/health")

    reply, health = run_app(app, scenario)
    assert reply.status_code == 500 and "not finite" in reply.json()["detail"]  # valid JSON
    assert health.status_code == 200


def test_csv_files_long_fields_and_other_encodings(tmp_path):
    from muxplm.data.local_files import load_local_sentence_task

    long_text = "word " * 40_000  # 200,000 characters: over the csv module's default field limit
    rows = "\n".join(f'"{long_text if i == 0 else f"text {i}"}",{i % 2}' for i in range(20))
    (tmp_path / "long.csv").write_text("text,label\n" + rows + "\n", encoding="utf-8")
    spec, data = load_local_sentence_task(tmp_path / "long.csv")
    assert max(len(t) for split in data.values() for t in split["text"]) >= len(long_text.strip())
    assert sum(len(split) for split in data.values()) == 20
    (tmp_path / "latin.csv").write_bytes("text,label\ncaf\xe9 au lait,1\nthe rest,0\n".encode("latin-1"))
    with pytest.raises(ValueError, match="latin.csv: not UTF-8"):
        load_local_sentence_task(tmp_path / "latin.csv")


def test_texts_empty_after_tokenization_are_refused_with_422(predictor, token_dir):
    from muxplm.serving.predictor import InvalidTextError

    app = create_app(predictor, max_batch=64, max_wait_ms=50)
    bodies = [{"text": "\u0000"}, {"text": "\u200b\u200c\ufeff"}, {"text": ["a fine film", "\u200b"]},
              {"text": "a fine film", "text_pair": "\u2060"}, {"text": "a fine film"}, {"text": "\U0001F600"}]
    replies = burst(app, [(body, {}) for body in bodies])
    assert [reply.status_code for reply in replies] == [422, 422, 422, 422, 200, 200], [r.text for r in replies]
    assert "input 0" in replies[0].json()["detail"] and "nothing is left" in replies[0].json()["detail"]
    assert "input 1" in replies[2].json()["detail"] and "text_pair" in replies[3].json()["detail"]
    with pytest.raises(InvalidTextError, match="nothing is left"):  # the token task too
        Predictor.from_pretrained(token_dir, max_length=32).encode(["\u200b \u0000"])


def test_a_non_json_body_is_415_and_the_slash_redirect_is_relative(predictor):
    app = create_app(predictor, max_batch=8, max_wait_ms=0)

    async def scenario(client):
        body = json.dumps({"text": "fine"})
        plain = await client.post("/predict", content=body, headers={"content-type": "text/plain"})
        form = await client.post("/predict", content=body,
                                 headers={"content-type": "application/x-www-form-urlencoded"})
        charset = await client.post("/predict", content=body,
                                    headers={"content-type": "application/json; charset=utf-8"})
        bare = await client.post("/predict", content=body)  # no content type at all
        slash = await client.post("/predict/", content=body, headers={"host": "evil.example"},
                                  follow_redirects=False)
        health = await client.get("/health/?x=1", headers={"host": "evil.example"}, follow_redirects=False)
        return plain, form, charset, bare, slash, health

    plain, form, charset, bare, slash, health = run_app(app, scenario)
    assert plain.status_code == 415 and "application/json" in plain.json()["detail"]
    assert form.status_code == 415 and charset.status_code == 200
    assert bare.status_code == 200, bare.text  # read as JSON, as before
    assert slash.status_code == 307 and slash.headers["location"] == "/predict"
    assert health.status_code == 307 and health.headers["location"] == "/health?x=1"


def test_batch_and_queue_defaults_follow_the_predictor(predictor):
    from muxplm.serving import create_app
    from muxplm.serving.limits import default_max_queue

    app = create_app(predictor)  # no --max-batch: the predictor's own (64 on this CPU)
    batcher = app.api.state.batcher
    assert batcher.max_batch == predictor.batch_size == 64 and batcher.max_queue == 1024
    assert default_max_queue(1280) == 5120  # N = 10 on a GPU: 1,280 a batch, four batches queued
