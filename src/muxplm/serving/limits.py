"""What the server accepts: checked option values, and the bounds put on every connection.

The argparse types here refuse, at start and naming the flag, values that would break the server
(``--max-wait-ms nan``, ``--port 99999``, ``--threads -1``). :func:`check_serve_options` checks
what no single flag can (``--max-queue`` below ``--max-batch``).

:func:`guarded_protocol` wraps uvicorn's HTTP protocol (httptools or h11, whichever uvicorn picks)
with the limits uvicorn does not have on its own: the bytes of a request head (431), the time a
connection may take to send a whole request head (idle connections and slow headers alike are
closed after ``keep_alive_s``), and the number of open connections (beyond it the longest-idle
connection is closed to make room; when none is idle the newcomer is). Bodies are bounded by the
app (:class:`muxplm.serving.server.ServerApp`): size as bytes arrive (413) and time (408).
"""

from __future__ import annotations

import argparse
import math

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


def guarded_protocol(base: type, *, max_header_bytes: int = MAX_HEADER_BYTES, keep_alive_s: float = KEEP_ALIVE_S,
                     max_connections: int = MAX_CONNECTIONS) -> type:
    """``base`` (uvicorn's ``HttpToolsProtocol`` or ``H11Protocol``) with bounds on request heads,
    idle time and open connections; a new class per server, holding that server's idle list.

    * A connection that is not serving a request (new, or between requests) must deliver a whole
      request head within ``keep_alive_s``, else it is closed: neither idle connections nor heads
      sent a byte at a time hold a file descriptor for long (uvicorn's own keep-alive timer
      restarts with every byte, and a new connection has none).
    * A request head over ``max_header_bytes`` is answered 431 and the connection closed, as the
      bytes arrive (httptools; uvicorn's h11 gets the same bound through
      ``h11_max_incomplete_event_size`` and answers 400).
    * Past ``max_connections`` open connections, each new one closes the connection idle the
      longest (no request in progress): idle connections never lock out a client with a request to
      make. When none is idle, the newcomer is closed at once.
    """

    counts_heads = hasattr(base, "on_headers_complete")  # httptools' parser callbacks

    class GuardedProtocol(base):
        _idle: dict = {}  # connections not serving a request, longest idle first (insertion order)
        _evicted: set = set()  # closed by us, not yet gone from uvicorn's list

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._head_bytes, self._in_head, self._head_timer = 0, True, None
            self._went_idle()
            live = len(self.connections) - len(self._evicted)
            if live > max_connections:
                self._make_room()

        def connection_lost(self, exc) -> None:
            self._cancel_head_timer()
            self._idle.pop(self, None)
            self._evicted.discard(self)
            super().connection_lost(exc)

        def _busy(self) -> bool:
            cycle = self.cycle
            return (cycle is not None and not cycle.response_complete) or bool(getattr(self, "pipeline", None))

        def _went_idle(self) -> None:
            self._cancel_head_timer()
            self._head_timer = self.loop.call_later(keep_alive_s, self._head_timeout)
            self._idle.pop(self, None)
            self._idle[self] = None  # to the back: idle the shortest

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timeout(self) -> None:
            self._head_timer = None
            if not self._busy():
                self._close()

        def _close(self) -> None:
            self._idle.pop(self, None)
            if not self.transport.is_closing():
                self._evicted.add(self)
                self.transport.close()

        def _make_room(self) -> None:
            while self._idle:
                oldest = next(iter(self._idle))
                del self._idle[oldest]
                if oldest is self:
                    continue
                if not oldest._busy() and not oldest.transport.is_closing():
                    oldest._close()
                    return
            self._close()  # every other connection is serving a request: the newcomer waits its turn elsewhere

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._went_idle()

        # The head's bytes are counted as they arrive (httptools: from the end of one message to the
        # end of the next head; its parser joins a header's pieces by repeated concatenation, so
        # an unbounded header would cost quadratic time). h11 bounds its own buffer.
        def data_received(self, data: bytes) -> None:
            if not counts_heads:
                return super().data_received(data)
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)  # parsed first: the same chunk may end the head and carry a body
            if self._in_head and self._head_bytes > max_header_bytes and not self.transport.is_closing():
                self._refuse_head()

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
            self._in_head, self._head_bytes = True, 0
            super().on_message_complete()

        def _refuse_head(self) -> None:
            detail = f'{{"detail": "request head over {max_header_bytes} bytes (--max-header-bytes)"}}'.encode()
            self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                                 b"content-length: " + str(len(detail)).encode() + b"\r\nconnection: close\r\n\r\n"
                                 + detail)
            self._close()

    GuardedProtocol.__name__ = f"Guarded{base.__name__}"
    return GuardedProtocol


def uvicorn_options(*, max_header_bytes: int = MAX_HEADER_BYTES, keep_alive_s: float = KEEP_ALIVE_S,
                    max_connections: int = MAX_CONNECTIONS, shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S) -> dict:
    """Keyword arguments of ``uvicorn.Config`` that put these bounds on a server."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    return {
        "http": guarded_protocol(AutoHTTPProtocol, max_header_bytes=max_header_bytes, keep_alive_s=keep_alive_s,
                                 max_connections=max_connections),
        "h11_max_incomplete_event_size": max_header_bytes,
        "timeout_keep_alive": max(1, math.ceil(keep_alive_s)),
        "timeout_graceful_shutdown": math.ceil(shutdown_timeout_s),
    }


# --------------------------------------------------------------------------- flags

_LIMIT_FLAGS = ("max_body_bytes", "body_timeout_s", "max_header_bytes", "max_connections", "keep_alive_s",
                "shutdown_timeout_s")


def add_limit_arguments(parser) -> None:
    """The ``serve`` flags of these limits."""
    group = parser.add_argument_group("limits", "what one client may send and hold (answers: 413, 408, 431)")
    group.add_argument("--max-body-bytes", type=positive_int, default=MAX_BODY_BYTES,
                       help="largest /predict body; larger: 413 as soon as the size is known (default 1 MiB)")
    group.add_argument("--body-timeout-s", type=seconds, default=BODY_TIMEOUT_S,
                       help="time to receive a whole /predict body; slower: 408 (default 10)")
    group.add_argument("--max-header-bytes", type=positive_int, default=MAX_HEADER_BYTES,
                       help="largest request line + headers; larger: 431 (default 64 KiB)")
    group.add_argument("--max-connections", type=positive_int, default=MAX_CONNECTIONS,
                       help="open connections; past it the longest-idle one is closed (default 1000)")
    group.add_argument("--keep-alive-s", type=seconds, default=KEEP_ALIVE_S,
                       help="an idle connection (new or between requests) is closed unless a whole request "
                            "head arrives within this time (default 5)")
    group.add_argument("--shutdown-timeout-s", type=seconds, default=SHUTDOWN_TIMEOUT_S,
                       help="on SIGTERM/SIGINT, longest wait for requests in flight before they are cut (default 30)")


def limit_kwargs(args) -> dict:
    """The limits parsed by :func:`add_limit_arguments`, as ``serve`` keyword arguments."""
    return {name: getattr(args, name) for name in _LIMIT_FLAGS}
