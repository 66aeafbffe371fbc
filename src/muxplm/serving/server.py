"""HTTP server: FastAPI app over a :class:`DynamicBatcher`, with ``POST /predict`` answered
by a raw ASGI path in front of it (:class:`ServerApp`).

Endpoints: ``POST /predict`` (one or many texts, optional text pairs), ``GET /health``,
``GET /metrics`` (Prometheus text format). Errors are answered, never hung on:
422 invalid body or text the tokenizer cannot read, 413 too many texts, tokens or characters, 429 + Retry-After when the queue is
full, 500 when the model fails on the batch holding the request, 503 while shutting down; 413 /
408 for a body too large or too slow (:mod:`.limits`), 415 for one that is not JSON.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from contextlib import asynccontextmanager
from typing import Annotated, Literal, Optional, Union

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError, model_validator
from pydantic_core import to_json

from ..devices import CPU_BATCH_SIZE
from ..quantization import check_quantize
from .batcher import BatcherClosedError, DynamicBatcher, QueueFullError
from . import limits
from .limits import MAX_PORT, check_serve_options, check_wait_ms
from .metrics import ServingMetrics
from .predictor import InputTooLongError, InvalidTextError, Predictor, load_predictor

# Requests are multiplexed only with requests carrying the same value of this header when the
# server isolates tenants (--isolate-tenants); set it in the proxy that authenticates clients.
TENANT_HEADER = "X-Muxplm-Tenant"
_TENANT_HEADER = TENANT_HEADER.lower().encode()

Texts = Union[StrictStr, Annotated[list[StrictStr], Field(min_length=1)]]


class PredictRequest(BaseModel):
    """One text or a list of texts; ``text_pair`` (same shape) makes sentence pairs."""

    model_config = ConfigDict(extra="forbid")

    text: Texts = Field(description="a text or a list of texts", examples=["a gripping, funny film"])
    text_pair: Optional[Texts] = Field(None, description="second sentence of each pair (sentence tasks)")
    mode: Literal["throughput", "ensemble"] = Field(
        "throughput", description="throughput: N inputs share a pass; ensemble: each input N times, averaged"
    )
    truncate: StrictBool = Field(False, description="cut inputs longer than the server's max length")

    @model_validator(mode="after")
    def _check(self):
        texts = self.texts()
        for index, text in enumerate(texts):
            if not text.strip():
                raise ValueError(f"text {index} is empty")
        if self.text_pair is not None:
            pairs = self.pairs()
            if isinstance(self.text, str) != isinstance(self.text_pair, str):
                raise ValueError("text and text_pair must both be strings or both be lists")
            if len(pairs) != len(texts):
                raise ValueError(f"{len(texts)} texts but {len(pairs)} text pairs")
            for index, pair in enumerate(pairs):
                if not pair.strip():
                    raise ValueError(f"text_pair {index} is empty")
        return self

    def texts(self) -> list[str]:
        return [self.text] if isinstance(self.text, str) else list(self.text)

    def pairs(self) -> list[str] | None:
        if self.text_pair is None:
            return None
        return [self.text_pair] if isinstance(self.text_pair, str) else list(self.text_pair)


class Prediction(BaseModel):
    """Fields present depend on the task: ``label``/``score`` (classification), ``score``
    (regression), ``words``/``tags``/``scores`` (token tasks), ``token_ids``/``text`` (reconstruct)."""

    label: Optional[str] = None
    score: Optional[float] = None
    words: Optional[list[str]] = None
    tags: Optional[list[Optional[str]]] = None
    scores: Optional[list[Optional[float]]] = None
    token_ids: Optional[list[int]] = None
    text: Optional[str] = None


class PredictResponse(BaseModel):
    predictions: list[Prediction]
    task: str
    num_instances: int
    mode: str


def create_app(
    predictor: Predictor,
    *,
    max_batch: int | None = None,
    max_wait_ms: float = 5.0,
    max_queue: int | None = None,
    fill_slots: bool = True,
    companions: int = 0,
    companion_texts: list[str] | None = None,
    isolate_tenants: bool = False,
    deterministic: bool = False,
    max_body_bytes: int = limits.MAX_BODY_BYTES,
    body_timeout_s: float = limits.BODY_TIMEOUT_S,
    shutdown_timeout_s: float | None = None,
) -> "ServerApp":
    """The ASGI app (a FastAPI app behind a fast path for /predict, see :class:`ServerApp`); its
    batcher starts with the app's lifespan and drains on shutdown (for at most
    ``shutdown_timeout_s``). A /predict body over ``max_body_bytes`` is answered 413 as soon as
    its size is known, one not received whole within ``body_timeout_s`` 408. ``companions``,
    ``companion_texts``, ``isolate_tenants`` (by the ``X-Muxplm-Tenant`` header) and
    ``deterministic``: who shares a multiplexed group with whom (:class:`DynamicBatcher`).
    ``max_batch`` defaults to the predictor's batch size, ``max_queue`` to
    :func:`~muxplm.serving.limits.default_max_queue` of it."""
    max_batch = predictor.batch_size if max_batch is None else max_batch
    max_queue = limits.default_max_queue(max_batch) if max_queue is None else max_queue
    batcher = DynamicBatcher(
        predictor, max_batch=max_batch, max_wait_ms=max_wait_ms, max_queue=max_queue, fill_slots=fill_slots,
        companions=companions, companion_texts=companion_texts, isolate_tenants=isolate_tenants,
        deterministic=deterministic,
    )
    metrics = ServingMetrics(max_batch, lambda: batcher.queue_depth)
    batcher.on_batch = metrics.observe_batch

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        try:
            yield
        finally:
            # Uvicorn has already waited for open requests; finish anything still queued.
            await asyncio.to_thread(batcher.close, shutdown_timeout_s)

    app = FastAPI(
        title="muxplm server",
        description="Predictions from a multiplexed language model (N inputs per forward pass).",
        version="1",
        lifespan=lifespan,
        redirect_slashes=False,  # ServerApp redirects "/predict/" itself, to a relative Location
    )
    app.state.batcher, app.state.metrics, app.state.predictor = batcher, metrics, predictor

    def reply_error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
        metrics.requests.labels(status=str(status)).inc()
        return JSONResponse({"detail": message}, status_code=status, headers=headers)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, error: HTTPException):
        return reply_error(error.status_code, str(error.detail), error.headers)

    from fastapi.exceptions import RequestValidationError

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError):
        return reply_error(422, invalid_message(error.errors()))

    answered = metrics.requests.labels(status="200")

    def refuse(status: int, message: str, headers: dict[str, str] | None = None):
        metrics.requests.labels(status=str(status)).inc()
        return status, to_json({"detail": message}), headers

    async def answer(body: bytes, tenant: str | None = None) -> tuple[int, bytes, dict[str, str] | None]:
        """A /predict body (and the request's tenant key) -> (status, JSON reply, extra headers);
        every outcome counted."""
        started = time.perf_counter()
        try:
            request = PredictRequest.model_validate_json(body)
        except ValidationError as error:
            return refuse(422, invalid_message(error.errors(include_url=False)))
        texts = request.texts()
        if len(texts) > max_batch:
            return refuse(413, f"request holds {len(texts)} texts; at most {max_batch} per request (--max-batch)")
        if request.mode == "ensemble" and predictor.task == "reconstruct":
            return refuse(422, "the reconstruct task supports only mode='throughput'")
        try:
            predictor.check_pairs_supported(request.pairs())
        except ValueError as error:
            return refuse(422, str(error))
        try:
            # The batcher's worker tokenizes (one call per batch) and decodes.
            future = batcher.submit_texts(texts, request.pairs(), truncate=request.truncate,
                                          ensemble=request.mode == "ensemble", tenant=tenant)
        except QueueFullError as error:
            return refuse(429, str(error), {"Retry-After": str(error.retry_after)})
        except BatcherClosedError as error:
            return refuse(503, str(error))
        try:
            predictions = await asyncio.wrap_future(future)
        except QueueFullError as error:  # taken out of the queue for another tenant's request
            return refuse(429, str(error), {"Retry-After": str(error.retry_after)})
        except InputTooLongError as error:
            return refuse(413, f"{error} (server --max-length {predictor.max_length})")
        except InvalidTextError as error:
            return refuse(422, str(error))
        except Exception as error:  # the model failed on this request's batch
            return refuse(500, f"model error: {type(error).__name__}: {error}")
        metrics.instances.inc(len(texts))
        answered.inc()
        metrics.latency.observe(time.perf_counter() - started)
        # Built here, not through response_model validation: the decoder already produces
        # exactly the documented fields.
        return 200, to_json({"predictions": predictions, "task": predictor.task,
                             "num_instances": predictor.num_instances, "mode": request.mode}), None

    @app.post(
        "/predict",
        response_model=PredictResponse,
        response_model_exclude_none=True,
        responses={413: {"description": "too many texts or tokens"}, 422: {"description": "invalid request"},
                   429: {"description": "queue full"}, 500: {"description": "model error"},
                   503: {"description": "shutting down"}},
        # Documents the endpoint (requests reach `answer` through ServerApp, below); the schema
        # is declared here since the body is parsed by pydantic directly.
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
            "schema": PredictRequest.model_json_schema()}}}},
    )
    async def predict(request: Request):
        status, reply, headers = await answer(await request.body(), request.headers.get(TENANT_HEADER))
        return Response(reply, status_code=status, headers=headers, media_type="application/json")

    @app.get("/health")
    async def health():
        status = "ok" if batcher.running else "stopped"
        grouping = "deterministic" if deterministic else "tenants" if isolate_tenants else "shared"
        return JSONResponse(
            {"status": status, "queue_depth": batcher.queue_depth, "max_queue": max_queue, "grouping": grouping,
             "model": predictor.describe()},
            status_code=200 if batcher.running else 503,
        )

    @app.get("/metrics")
    async def prometheus_metrics():
        return Response(metrics.render(), media_type=metrics.content_type)

    def count_refusal(status: int) -> None:
        metrics.requests.labels(status=str(status)).inc()

    return ServerApp(app, answer, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s,
                     on_refused=count_refusal)


def grouping_for_host(host: str, *, isolate_tenants: bool, deterministic: bool, share_groups: bool) -> bool:
    """Whether a server bound to ``host`` isolates tenants. On a loopback address the operator's
    choice stands (shared groups by default). Bound to any other address, where clients the
    operator does not know can reach it, different clients' texts never share a group unless the
    operator says so: ``share_groups`` (``--share-groups``), else tenants are isolated (requests
    share groups only when they carry the same ``X-Muxplm-Tenant`` value)."""
    if share_groups and (isolate_tenants or deterministic):
        raise ValueError("--share-groups lets every request share groups; --isolate-tenants and --deterministic "
                         "forbid it: choose one")
    if isolate_tenants or deterministic or share_groups or limits.is_loopback(host):
        return isolate_tenants
    print(f"muxplm serve: bound to {host}, not a loopback address: requests share multiplexed groups only with "
          f"requests of the same {TENANT_HEADER} header value (none: with nobody); --share-groups lets every "
          f"client's requests share groups", file=sys.stderr)
    return True


def read_companion_texts(path) -> list[str]:
    """The operator's companion texts: one per line of a UTF-8 file, blank lines skipped."""
    try:
        with open(path, encoding="utf-8") as handle:
            texts = [line.strip() for line in handle if line.strip()]
    except UnicodeDecodeError as error:
        raise ValueError(f"--companion-texts {path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise ValueError(f"--companion-texts {path}: cannot read it ({error.strerror or error})") from None
    if not texts:
        raise ValueError(f"--companion-texts {path} holds no text")
    return texts


def invalid_message(errors) -> str:
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in errors)
    return f"invalid request: {problems}"


class ServerApp:
    """The ASGI app that is served: ``POST /predict`` goes straight to its handler, everything
    else (health, metrics, docs, lifespan) to the FastAPI app, whose attributes this object
    shows as its own. On a small model the FastAPI/Starlette middleware and routing cost as
    much per request as parsing, queueing and answering it (serve-bench profile)."""

    def __init__(self, api: FastAPI, answer, *, max_body_bytes: int = limits.MAX_BODY_BYTES,
                 body_timeout_s: float = limits.BODY_TIMEOUT_S, on_refused=None):
        if max_body_bytes < 1 or not body_timeout_s > 0:
            raise ValueError("max_body_bytes must be >= 1 and body_timeout_s > 0")
        self.api, self._answer = api, answer
        self.max_body_bytes, self.body_timeout_s = max_body_bytes, body_timeout_s
        self._on_refused = on_refused

    def __getattr__(self, name):  # only for names this object lacks: state, openapi, routes, ...
        if name == "api":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.api, name)

    def count_refused(self, status: int) -> None:
        """Count a request answered outside this app (the connection layer's 431, 408 and 503)."""
        if self._on_refused is not None:
            self._on_refused(status)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] != "/predict" or scope["method"] != "POST":
            path = scope.get("path", "")
            if scope["type"] == "http" and len(path) > 1 and path.endswith("/") and path.rstrip("/") in self._routes():
                return await self._redirect(send, path.rstrip("/"), scope.get("query_string", b""))
            return await self.api(scope, receive, send)
        declared = tenant = content_type = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value
            elif name == _TENANT_HEADER:
                tenant = value.decode("latin-1")
            elif name == b"content-type":
                content_type = value
        if content_type is not None and not _is_json(content_type):
            return await self._refuse(send, 415, f"the body must be JSON (Content-Type: application/json), not "
                                                 f"{content_type.decode('latin-1')[:100]!r}")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                return await self._refuse(send, 400, "invalid Content-Length")
            if size > self.max_body_bytes:  # refused before a byte of it is read
                return await self._refuse(send, 413, self._too_large(size))
        try:
            try:
                body = await self._read_body(receive)
            except _BodyRefused as refusal:
                return await self._refuse(send, refusal.status, refusal.message)
            if body is None:
                return  # the client left before sending its request: nobody to answer
            try:
                status, reply, headers = await self._answer(body, tenant)
            except Exception as error:  # a bug of ours: still an answer, never a dropped connection
                status, reply, headers = 500, to_json({"detail": f"server error: {type(error).__name__}"}), None
        except asyncio.CancelledError:
            # Cut at the shutdown deadline (--shutdown-timeout-s): a 503 the client may retry
            # (elsewhere, or once the server is back), not the 500 of a crashed handler. The
            # handler then ends as asked, without the traceback uvicorn would log for it.
            task = asyncio.current_task()
            if hasattr(task, "uncancel"):  # Python 3.11+
                task.uncancel()
            self.count_refused(503)
            return await self._reply(send, 503, to_json({"detail": "the server is shutting down: the request was "
                                                                   "cut at its deadline (--shutdown-timeout-s)"}),
                                     {"Retry-After": "1", "Connection": "close"})
        await self._reply(send, status, reply, headers)

    def _routes(self) -> set[str]:
        routes = self.__dict__.get("_route_paths")
        if routes is None:
            routes = self._route_paths = {getattr(route, "path", None) for route in self.api.routes} - {None}
        return routes

    @staticmethod
    async def _redirect(send, location: str, query: bytes) -> None:
        """307 to the path without its trailing slash: a relative Location, never one built from
        the client's Host header."""
        target = location.encode("latin-1") + (b"?" + query if query else b"")
        await send({"type": "http.response.start", "status": 307,
                    "headers": [(b"location", target), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    def _too_large(self, size: int | None) -> str:
        told = f"{size} bytes" if size is not None else "more"
        return f"request body of {told}; at most {self.max_body_bytes} bytes (--max-body-bytes)"

    async def _read_body(self, receive) -> bytes | None:
        """The whole body, or ``None`` when the client left; refused (413) as soon as it passes
        ``max_body_bytes`` and (408) when it is not whole within ``body_timeout_s``. Chunks are
        collected and joined once: the read costs time linear in the body."""
        chunks, size, more = [], 0, True
        try:
            async with _deadline(self.body_timeout_s):
                while more:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        raise _BodyRefused(413, self._too_large(None))
                    chunks.append(chunk)
                    more = message.get("more_body", False)
        except TimeoutError:
            raise _BodyRefused(408, f"request body not received within {self.body_timeout_s:g} s "
                                    f"(--body-timeout-s)") from None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _refuse(self, send, status: int, message: str) -> None:
        """An answer to a request whose body was not (wholly) read: the connection is closed after it."""
        self.count_refused(status)
        await self._reply(send, status, to_json({"detail": message}), {"Connection": "close"})

    @staticmethod
    async def _reply(send, status: int, reply: bytes, headers: dict[str, str] | None) -> None:
        raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(reply)).encode())]
        raw_headers += [(key.lower().encode(), value.encode()) for key, value in (headers or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": reply})


def _is_json(content_type: bytes) -> bool:
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


class _BodyRefused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


if hasattr(asyncio, "timeout"):  # Python 3.11+
    _deadline = asyncio.timeout
else:  # pragma: no cover - Python 3.10
    @asynccontextmanager
    async def _deadline(seconds: float):
        task = asyncio.current_task()
        handle = asyncio.get_running_loop().call_later(seconds, task.cancel)
        try:
            yield
        except asyncio.CancelledError:
            raise TimeoutError from None
        finally:
            handle.cancel()


def serve(
    model_dir: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_batch: int | None = None,
    max_wait_ms: float = 5.0,
    max_queue: int | None = None,
    max_length: int = 128,
    fill_slots: bool = True,
    companions: int = 0,
    threads: int | None = None,
    backend: str = "torch",
    log_level: str = "info",
    device: str = "cpu",
    dtype: str = "float32",
    quantize: str = "none",
    compile: str = "none",
    max_body_bytes: int = limits.MAX_BODY_BYTES,
    body_timeout_s: float = limits.BODY_TIMEOUT_S,
    max_header_bytes: int = limits.MAX_HEADER_BYTES,
    max_connections: int = limits.MAX_CONNECTIONS,
    keep_alive_s: float = limits.KEEP_ALIVE_S,
    shutdown_timeout_s: float = limits.SHUTDOWN_TIMEOUT_S,
    companion_texts: str | None = None,
    isolate_tenants: bool = False,
    deterministic: bool = False,
    share_groups: bool = False,
) -> None:
    """Load ``model_dir`` onto ``device`` in ``dtype`` and serve it with uvicorn until
    interrupted (SIGINT/SIGTERM drain in-flight requests before exiting, for at most
    ``shutdown_timeout_s``). ``backend="onnx"`` runs the forward pass in ONNX
    Runtime (exported into ``model_dir/onnx`` on first use). ``quantize="int8"``: int8 dynamic
    quantisation, of the PyTorch model or of the exported graph (CPU only). The limits on bodies,
    heads, connections and idle time: :mod:`muxplm.serving.limits`. ``companion_texts``: a UTF-8
    file of fixed companion texts, one per line (see :class:`DynamicBatcher` for them,
    ``isolate_tenants`` and ``deterministic``). Bound to an address other than loopback, the
    server isolates tenants unless ``share_groups`` (or ``deterministic``) says otherwise
    (:func:`grouping_for_host`). ``max_batch`` left unset follows the device
    (:func:`muxplm.devices.default_batch_size`: 64 on a CPU, N x 128 on a GPU) and
    ``max_queue`` then holds at least 1,024 instances and four batches; ``compile``: see
    :class:`Predictor`."""
    import torch
    import uvicorn

    if backend == "torch":
        limits.check_serve_device(device)
    check_quantize(quantize, device, dtype)  # refused before anything loads
    # What no single flag can check, before the model loads (a GPU's default batch waits for the model's N).
    early_batch = max_batch if max_batch is not None else \
        CPU_BATCH_SIZE if backend == "onnx" or str(device) == "cpu" else None
    if early_batch is not None:
        check_serve_options(max_batch=early_batch,
                            max_queue=limits.default_max_queue(early_batch) if max_queue is None else max_queue)
    check_wait_ms(max_wait_ms)
    if not 0 <= port <= MAX_PORT:
        raise ValueError(f"port must lie in 0..{MAX_PORT}, got {port}")
    if threads is not None and not 1 <= threads <= limits.most_threads():
        raise ValueError(f"--threads must lie in 1..{limits.most_threads()} (this machine's CPUs), got {threads}")
    if log_level not in limits.LOG_LEVELS:
        raise ValueError(f"--log-level must be one of {', '.join(limits.LOG_LEVELS)}, got {log_level!r}")
    isolate_tenants = grouping_for_host(host, isolate_tenants=isolate_tenants, deterministic=deterministic,
                                        share_groups=share_groups)
    fixed = read_companion_texts(companion_texts) if companion_texts else None
    if deterministic and companions:
        raise ValueError("--deterministic cannot take companions from recent traffic (--companions); "
                         "use --companion-texts or copies")
    if companions and fixed:
        raise ValueError("--companions (recent traffic) and --companion-texts are exclusive: choose one")
    if threads:
        torch.set_num_threads(threads)
    predictor = load_predictor(model_dir, backend=backend, threads=threads, device=device, dtype=dtype,
                               quantize=quantize, compile=compile, max_length=max_length, batch_size=max_batch)
    max_batch = predictor.batch_size
    max_queue = limits.default_max_queue(max_batch) if max_queue is None else max_queue
    check_serve_options(max_batch=max_batch, max_queue=max_queue)
    app = create_app(predictor, max_batch=max_batch, max_wait_ms=max_wait_ms, max_queue=max_queue,
                     fill_slots=fill_slots, companions=companions, companion_texts=fixed,
                     isolate_tenants=isolate_tenants, deterministic=deterministic, max_body_bytes=max_body_bytes,
                     body_timeout_s=body_timeout_s, shutdown_timeout_s=shutdown_timeout_s)
    # Uvicorn drains on SIGINT/SIGTERM, then re-raises the signal to the handler that was in
    # place before it started; a no-op one there makes a drained shutdown exit with status 0.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    open_files = limits.raise_open_files_limit()
    if open_files is not None and open_files < 2 * max_connections + 64:
        print(f"muxplm serve: warning: this process may open {open_files} files, fewer than the "
              f"{2 * max_connections + 64} that --max-connections {max_connections} may need at a peak "
              f"(raise `ulimit -n`)", file=sys.stderr)
    try:
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False,
                    **limits.uvicorn_options(max_header_bytes=max_header_bytes, keep_alive_s=keep_alive_s,
                                             max_connections=max_connections, shutdown_timeout_s=shutdown_timeout_s,
                                             on_refused=app.count_refused))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
