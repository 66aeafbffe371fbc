"""What the server accepts: checked option values, and the bounds put on every connection.

The argparse types here refuse, at start and naming the flag, values that would break the server
(``--max-wait-ms nan``, ``--port 99999``, ``--threads -1``). :func:`check_serve_options` checks
what no single flag can (``--max-queue`` below ``--max-batch``).

:func:`guarded_protocol` wraps uvicorn's HTTP protocol (httptools or h11, whichever uvicorn picks)
with the limits uvicorn does not have on its own: the bytes of a request head (431), the time a
connection may take to send a whole request head (idle connections and slow headers alike are
closed after ``keep_alive_s``), and the number of open connections (beyond it the connection that
has waited on its client the longest, idle or stalled in a head or body, gives its place up, with
an answer when it sent a request). Bodies are bounded by the app
(:class:`muxplm.serving.server.ServerApp`): size as bytes arrive (413) and time (408). Every
request the server answers early is followed by a lingering close, so that the answer arrives.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import os
from http import HTTPStatus

MAX_WAIT_MS = 60_000.0  # a batch waits at most a minute; beyond, requests would time out anyway
MAX_PORT = 65_535

# Defaults of the server's limits (flags of ``muxplm serve``; arguments of ``serve`` and ``create_app``).
MAX_BODY_BYTES = 1 << 20  # 1 MiB: 64 texts of 16 KiB
BODY_TIMEOUT_S = 10.0
MAX_HEADER_BYTES = 64 << 10
MAX_CONNECTIONS = 1000
KEEP_ALIVE_S = 5.0
SHUTDOWN_TIMEOUT_S = 30.0


def _number(text: str, kind):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None


def positive_int(text: str) -> int:
    value = _number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def port(text: str) -> int:
    value = _number(text, int)
    if not 0 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"must lie in 0..{MAX_PORT} (0: any free port), got {value}")
    return value


def wait_ms(text: str) -> float:
    try:
        return check_wait_ms(_number(text, float))
    except ValueError:  # the flag's wording: argparse names the flag
        raise argparse.ArgumentTypeError(f"must be a finite number of milliseconds in 0..{MAX_WAIT_MS:g}, "
                                         f"got {text!r}") from None


def seconds(text: str) -> float:
    """A positive, finite duration of at most a day."""
    value = _number(text, float)
    if not (math.isfinite(value) and 0 < value <= 86_400):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds in (0, 86400], got {text!r}")
    return value


LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's
SERVE_DEVICES = ("cpu", "cuda")


def most_threads() -> int:
    """The most torch threads a server may ask for: this machine's CPUs (more only slow each pass)."""
    return os.cpu_count() or 1


def threads(text: str) -> int:
    value = positive_int(text)
    if value > most_threads():
        raise argparse.ArgumentTypeError(f"must lie in 1..{most_threads()} (this machine's CPUs; more threads only "
                                         f"slow each pass), got {value}")
    return value


def serve_device(text: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:K``: the devices a server runs on."""
    try:
        check_serve_device(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("device ")) from None
    return text


def check_serve_device(device) -> None:
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        kind = None
    if kind not in SERVE_DEVICES:
        raise ValueError(f"device {str(device)!r}: the server runs on cpu, cuda or cuda:K")


def is_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` is reachable from this machine only. A host name other
    than ``localhost`` counts as exposed: it may name any interface."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def open_files_limit() -> int | None:
    """This process's soft limit on open files (``None``: unknown)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def raise_open_files_limit() -> int | None:
    """Raise this process's soft limit on open files to its hard limit (a server holds a socket
    per connection; the soft limit is often 1,024); returns the limit now in force."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft


def check_wait_ms(value: float) -> float:
    """The Python API's check of ``max_wait_ms`` (the same bounds as the flag's)."""
    value = float(value)
    if not (math.isfinite(value) and 0 <= value <= MAX_WAIT_MS):
        raise ValueError(f"max_wait_ms must be finite and in 0..{MAX_WAIT_MS:g} ms, got {value!r}")
    return value


def default_max_queue(max_batch: int) -> int:
    """Queued instances before 429 when ``--max-queue`` is not given: 1,024, and at least four
    full batches (a GPU's batch of N x 128 is larger than a CPU's 64)."""
    return max(1024, 4 * max_batch)


def check_serve_options(*, max_batch: int, max_queue: int) -> None:
    """What no single flag can check; raises ``ValueError`` naming the flags."""
    if max_queue < max_batch:
        raise ValueError(f"--max-queue {max_queue} is below --max-batch {max_batch}: a request of {max_batch} texts "
                         f"could never be queued; raise --max-queue or lower --max-batch")


# --------------------------------------------------------------------------- connections

# A connection that opened (or got its last answer) less than this long ago may have a request on
# its way that the server has not read yet: when its capacity is taken back, that request is read
# and answered 503, not cut off unanswered.
FRESH_S = 1.0
# A request answered before it was read whole (413, 408, 431, 503): the rest of it is read and
# dropped for at most this long after the answer. Closing a socket on unread bytes sends a reset,
# which can discard the answer just written before the client reads it.
LINGER_S = 2.0
# Retry-After of a 503 for want of a connection: capacity comes back as connections are answered.
CONNECTION_RETRY_AFTER_S = 1


def raw_response(status: int, detail: str, retry_after: int | None = None) -> bytes:
    """A whole HTTP/1.1 answer with a JSON ``{"detail": ...}`` body, closing the connection."""
    body = json.dumps({"detail": detail}).encode()
    head = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n" \
           f"content-length: {len(body)}\r\n"
    if retry_after is not None:
        head += f"retry-after: {retry_after}\r\n"
    return (head + "connection: close\r\n\r\n").encode() + body


_NO_ROOM = "the server is at its connection limit (--max-connections); retry"


def _refusing_app(on_refused):
    """The ASGI app of a connection whose capacity was taken back while its request was on its
    way: reads (drains) the request, then answers 503 with Retry-After and closes."""
    answer = raw_response(503, _NO_ROOM)  # only for its body
    body = answer[answer.index(b"\r\n\r\n") + 4:]
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"retry-after", str(CONNECTION_RETRY_AFTER_S).encode()), (b"connection", b"close")]

    async def refuse(scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # gone, or answered by the protocol at its deadline
            more = message.get("more_body", False)
        if on_refused is not None:
            on_refused(503)
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return refuse


class _Transport:
    """A connection's transport as uvicorn sees it: closing it goes through the protocol, which
    may first linger (read and drop the rest of a request it answered early)."""

    __slots__ = ("_real", "_protocol")

    def __init__(self, real, protocol):
        self._real, self._protocol = real, protocol

    def __getattr__(self, name):
        return getattr(self._real, name)

    def close(self) -> None:
        self._protocol._close_transport()

    def is_closing(self) -> bool:
        return self._protocol._lingering or self._real.is_closing()


def guarded_protocol(base: type, *, max_header_bytes: int = MAX_HEADER_BYTES, keep_alive_s: float = KEEP_ALIVE_S,
                     max_connections: int = MAX_CONNECTIONS, on_refused=None) -> type:
    """``base`` (uvicorn's ``HttpToolsProtocol`` or ``H11Protocol``) with bounds on request heads,
    idle time and open connections; a new class per server, holding that server's lists.
    ``on_refused(status)`` is called for every request the connection layer answers itself (431,
    408, 503), so that the server's metrics count them.

    * A connection that is not serving a request (new, or between requests) must deliver a whole
      request head within ``keep_alive_s``, else it is closed (408 when part of a head came):
      neither idle connections nor heads sent a byte at a time hold a file descriptor for long
      (uvicorn's own keep-alive timer restarts with every byte, and a new connection has none).
    * A request head over ``max_header_bytes`` is answered 431 and the connection closed, as the
      bytes arrive (httptools; uvicorn's h11 gets the same bound through
      ``h11_max_incomplete_event_size`` and answers 400).
    * Past ``max_connections`` open connections, each new one takes back the capacity of the
      connection that has waited on its client the longest: idle, or stalled in a request head or
      body. Connections holding a whole request (queued, being answered) are never taken. Taken
      back: an idle one is closed; a stalled one is answered 503 with Retry-After; one younger
      than ``FRESH_S`` (a burst, whose requests may not be read yet) has its request read and
      answered 503 within ``FRESH_S``, or is closed if none comes. When every other connection
      holds a whole request, the newcomer is that one. Connections taken back are held while they
      are answered up to what the open-files limit allows (at least ``max_connections`` more);
      past that (a flood no answer can keep up with) they are cut.
    * An answer given before the request was read whole (413, 408, 431, 503) is followed by a
      lingering close: the server stops sending, reads and drops what still comes for up to
      ``LINGER_S``, then closes, so that no reset discards the answer.

    Capacity is taken by what a connection does, not by who opened it: a flood and innocent
    clients behind one address (a NAT, a proxy) are told apart by their progress.
    """

    counts_heads = hasattr(base, "on_headers_complete")  # httptools' parser callbacks
    fresh_s = min(FRESH_S, keep_alive_s)
    refused_app = _refusing_app(on_refused)
    # Connections held past max_connections while they are answered (each for about a second at
    # most): as many as the open-files limit leaves room for, and never fewer than max_connections.
    most_leaving = max(max_connections, (open_files_limit() or 0) - max_connections - 128)

    class GuardedProtocol(base):
        _waiting: dict = {}  # connections waiting on their client (no whole request in hand), longest first
        _leaving: set = set()  # taken back, closing or lingering: not counted against max_connections

        def connection_made(self, transport) -> None:
            self._real_transport, self._lingering, self._mid_request = transport, False, False
            self._head_bytes, self._in_head = 0, True
            self._head_timer = self._leave_timer = self._linger_timer = None
            super().connection_made(_Transport(transport, self))
            self._went_idle()
            if len(self.connections) - len(self._leaving) > max_connections:
                self._make_room()

        def connection_lost(self, exc) -> None:
            super().connection_lost(exc)
            self._cancel_timers()
            self._waiting.pop(self, None)
            self._leaving.discard(self)

        def _cancel_timers(self) -> None:
            for name in ("_head_timer", "_leave_timer", "_linger_timer"):
                timer = getattr(self, name)
                if timer is not None:
                    timer.cancel()
                    setattr(self, name, None)

        def _busy(self) -> bool:
            """Holding a whole request that is not answered yet (queued, run, being answered)."""
            cycle = self.cycle
            return bool(getattr(self, "pipeline", None)) or (
                cycle is not None and not cycle.response_complete and not cycle.more_body)

        def _went_idle(self) -> None:
            """Waiting on the client again (new, or answered): a whole head is due within keep_alive_s."""
            self._since = self.loop.time()
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(keep_alive_s, self._head_timeout)
            self._waiting.pop(self, None)
            self._waiting[self] = None  # to the back: waiting the shortest

        def _head_timeout(self) -> None:
            self._head_timer = None
            cycle = self.cycle
            if self.transport.is_closing() or self._busy() or (cycle is not None and not cycle.response_complete):
                return  # its head arrived: the body has its own deadline (--body-timeout-s)
            if self._mid_request:
                self._answer_and_close(408, f"request head not received within {keep_alive_s:g} s (--keep-alive-s)")
            else:
                self.transport.close()

        def _make_room(self) -> None:
            """Past max_connections: take back the capacity of the connection that has waited on its
            client the longest; when every other one holds a whole request, the newcomer's own."""
            while self._waiting:
                oldest = next(iter(self._waiting))
                if oldest is self:
                    break
                del self._waiting[oldest]  # a busy one comes back when it is answered
                if not (oldest._busy() or oldest.transport.is_closing() or oldest in self._leaving):
                    return oldest._reclaim()
            self._reclaim()

        def _reclaim(self) -> None:
            self._waiting.pop(self, None)
            if len(self._leaving) >= most_leaving:  # a flood past any answer: cut at once
                self._leaving.add(self)
                self._cancel_timers()
                return self._real_transport.close()
            self._leaving.add(self)
            wait = self._since + fresh_s - self.loop.time()
            if wait <= 0:
                return self._leave()
            # Fresh: its request may be on its way, unread. Read it, answer 503, close.
            self.app = refused_app  # for a head still to come
            if self.cycle is not None and not self.cycle.response_complete:
                self.cycle.keep_alive = False  # a request under way is answered as usual, then closed
            self._leave_timer = self.loop.call_later(wait, self._leave_after_a_read)

        def _leave_after_a_read(self) -> None:
            # Once more round the event loop first: bytes that arrived while it was busy are read
            # before the deadline acts on the connection (uvloop runs due timers before reading).
            self._leave_timer = self.loop.call_later(0.05, self._leave)

        def _leave(self) -> None:
            self._leave_timer = None
            if self.transport.is_closing():
                return
            if self._busy():  # its request came whole: answered, then closed
                self.cycle.keep_alive = False
            elif self._mid_request:  # stalled in a head or a body
                self._answer_and_close(503, _NO_ROOM, CONNECTION_RETRY_AFTER_S)
            else:
                self.transport.close()

        def _answer_and_close(self, status: int, detail: str, retry_after: int | None = None) -> None:
            """Answer the request under way now (its app, if any, gets a disconnect and its writes
            are dropped), then close with a linger."""
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                if cycle.response_started:  # the app is answering already
                    return self.transport.close()
                cycle.disconnected = True
                cycle.message_event.set()
            if on_refused is not None:
                on_refused(status)
            self._real_transport.write(raw_response(status, detail, retry_after))
            self.transport.close()

        def _close_transport(self) -> None:
            """Every close goes here: mid-request, a lingering close (see the class); else at once."""
            real = self._real_transport
            if self._lingering or real.is_closing():
                return
            self._cancel_timers()
            self._waiting.pop(self, None)
            linger = self._mid_request and real.can_write_eof() and \
                len(self._leaving) - (self in self._leaving) < most_leaving
            self._leaving.add(self)
            if not linger:
                return real.close()
            self._lingering = True
            real.write_eof()  # after what is buffered: the answer goes out whole, then a FIN
            real.resume_reading()
            self._linger_timer = self.loop.call_later(LINGER_S, real.close)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not counts_heads and self.cycle is not None and not self.cycle.more_body:
                self._mid_request = False
            if not self.transport.is_closing():
                self._went_idle()

        # The head's bytes are counted as they arrive (httptools: from the end of one message to the
        # end of the next head; its parser joins a header's pieces by repeated concatenation, so
        # an unbounded header would cost quadratic time). h11 bounds its own buffer.
        def data_received(self, data: bytes) -> None:
            if self._lingering:
                return  # the rest of a request answered early: read and dropped
            if not counts_heads:
                self._mid_request = True
                return super().data_received(data)
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)  # parsed first: the same chunk may end the head and carry a body
            if self._in_head and self._head_bytes > max_header_bytes and not self.transport.is_closing():
                self._refuse_head()

        def on_message_begin(self) -> None:
            self._mid_request = True
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._in_head = False
            # A head that arrived whole in one read: its size, from what the parser handed over.
            size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
            if size > max_header_bytes:
                self._head_too_large = True
                raise ValueError("request head too large")  # parsing stops; uvicorn calls send_400_response
            super().on_headers_complete()

        def send_400_response(self, msg: str) -> None:
            if getattr(self, "_head_too_large", False):
                return self._refuse_head()
            super().send_400_response(msg)

        def on_message_complete(self) -> None:
            self._in_head, self._head_bytes, self._mid_request = True, 0, False
            super().on_message_complete()

        def _refuse_head(self) -> None:
            self._answer_and_close(431, f"request head over {max_header_bytes} bytes (--max-header-bytes)")

    GuardedProtocol.__name__ = f"Guarded{base.__name__}"
    return GuardedProtocol


def uvicorn_options(*, max_header_bytes: int = MAX_HEADER_BYTES, keep_alive_s: float = KEEP_ALIVE_S,
                    max_connections: int = MAX_CONNECTIONS, shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
                    on_refused=None) -> dict:
    """Keyword arguments of ``uvicorn.Config`` that put these bounds on a server; ``on_refused``:
    see :func:`guarded_protocol`."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    return {
        "http": guarded_protocol(AutoHTTPProtocol, max_header_bytes=max_header_bytes, keep_alive_s=keep_alive_s,
                                 max_connections=max_connections, on_refused=on_refused),
        "h11_max_incomplete_event_size": max_header_bytes,
        "timeout_keep_alive": max(1, math.ceil(keep_alive_s)),
        "timeout_graceful_shutdown": math.ceil(shutdown_timeout_s),
    }


# --------------------------------------------------------------------------- flags

_LIMIT_FLAGS = ("max_body_bytes", "body_timeout_s", "max_header_bytes", "max_connections", "keep_alive_s",
                "shutdown_timeout_s")


def add_limit_arguments(parser) -> None:
    """The ``serve`` flags of these limits."""
    group = parser.add_argument_group("limits", "what one client may send and hold (answers: 413, 408, 431, 503)")
    group.add_argument("--max-body-bytes", type=positive_int, default=MAX_BODY_BYTES,
                       help="largest /predict body; larger: 413 as soon as the size is known (default 1 MiB)")
    group.add_argument("--body-timeout-s", type=seconds, default=BODY_TIMEOUT_S,
                       help="time to receive a whole /predict body; slower: 408 (default 10)")
    group.add_argument("--max-header-bytes", type=positive_int, default=MAX_HEADER_BYTES,
                       help="largest request line + headers; larger: 431 (default 64 KiB)")
    group.add_argument("--max-connections", type=positive_int, default=MAX_CONNECTIONS,
                       help="open connections; past it the one that has waited on its client the longest (idle, "
                       "or stalled in a request) gives its place up, answered 503 if it sent a request "
                       "(default 1000)")
    group.add_argument("--keep-alive-s", type=seconds, default=KEEP_ALIVE_S,
                       help="an idle connection (new or between requests) is closed unless a whole request "
                            "head arrives within this time (default 5)")
    group.add_argument("--shutdown-timeout-s", type=seconds, default=SHUTDOWN_TIMEOUT_S,
                       help="on SIGTERM/SIGINT, longest wait for requests in flight before they are cut (default 30)")


def limit_kwargs(args) -> dict:
    """The limits parsed by :func:`add_limit_arguments`, as ``serve`` keyword arguments."""
    return {name: getattr(args, name) for name in _LIMIT_FLAGS}
