"""A fault-injecting HTTP reverse proxy for tests against a local S3 endpoint (moto).

``FaultProxy(upstream)`` listens on 127.0.0.1 (a free port) in a background thread and forwards
every request to ``upstream``. At a configurable rate, drawn from a seeded RNG, it answers a GET
with a fault instead:

* ``slowdown``: ``503 SlowDown`` with an S3 XML error body;
* ``reset``: the connection is reset (``SO_LINGER`` 0) before any response;
* ``truncate``: the full ``Content-Length``, half the body, then the connection is closed;
* ``delay``: the right answer, after ``delay`` seconds;
* ``flip``: the right status, one byte in the middle half of the body flipped (a random one:
  a flip is not repeated in the same place), and no ``x-amz-checksum-*``
  headers (S3 sends none for most ranged GETs), so that only the reader's own checks can see it;
* ``badsum``: the right body, with an ``x-amz-checksum-crc32`` header that does not match it
  (botocore then raises its ``FlexibleChecksumError``, when it validates response checksums).

Two options shape writes rather than fault them (they apply at any ``rate``, ``0`` included):

* ``write_delay=(lo, hi)``: every PUT, POST and DELETE waits a uniform random time in
  ``[lo, hi]`` seconds before it is forwarded, which widens the window between a writer's read
  of a manifest and its write, as a slow or distant store does;
* ``serialize_conditional=True``: requests that carry ``If-None-Match`` or ``If-Match`` are
  forwarded one at a time. moto checks a condition and then writes, in two steps, so two
  conditional PUTs of one key at the same moment can both succeed there, where S3 lets one
  through; serialized, moto's check-and-write is atomic, and a race a test sees is not moto's.

What it did is counted in :attr:`FaultProxy.counts`. Use it as a context manager::

    with FaultProxy(endpoint.url, rate=0.25, seed=1) as proxy:
        options = endpoint.storage_options(endpoint_url=proxy.url)
"""

from __future__ import annotations

import base64
import collections
import http.client
import random
import socket
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULTS = ("slowdown", "reset", "truncate", "delay", "flip", "badsum")

_SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message>"
    b"<RequestId>fault-proxy</RequestId><HostId>fault-proxy</HostId></Error>"
)
#: The methods ``write_delay`` holds back.
_WRITE_METHODS = frozenset({"PUT", "POST", "DELETE"})
#: Request headers that make a request conditional (``serialize_conditional``).
_CONDITIONAL_HEADERS = ("If-None-Match", "If-Match")
#: Response headers not passed on: they describe the upstream connection, not the object.
_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}
)


class _QuietServer(ThreadingHTTPServer):
    request_queue_size = 128  # many clients at once (several processes) are not refused

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a connection this proxy reset or cut on purpose fails to finish: expected


class FaultProxy:
    """The proxy: start it with ``with``; :attr:`url` is its endpoint.

    Args:
        upstream: the endpoint to forward to (``http://127.0.0.1:port``).
        rate: the share of eligible GETs that get a fault.
        faults: the faults to draw from (see the module docstring).
        seed: the RNG seed.
        delay: seconds a ``delay`` fault waits.
        path_filter: GETs whose (decoded) path it rejects are never faulted.
        max_faults: stop injecting after this many faults (no limit by default).
        write_delay: ``(lo, hi)``: delay every PUT, POST and DELETE by a uniform random time in
            that range (seconds) before forwarding it; None (the default) forwards at once.
        serialize_conditional: forward requests carrying ``If-None-Match`` or ``If-Match`` one
            at a time, so that moto's check of the condition and its write are atomic.
    """

    def __init__(
        self,
        upstream: str,
        *,
        rate: float = 0.25,
        faults: Sequence[str] = FAULTS,
        seed: int = 0,
        delay: float = 2.0,
        path_filter: Callable[[str], bool] | None = None,
        max_faults: int | None = None,
        write_delay: tuple[float, float] | None = None,
        serialize_conditional: bool = False,
    ) -> None:
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {FAULTS}")
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.rate = rate
        self.faults = tuple(faults)
        self.delay = delay
        self.path_filter = path_filter
        self.max_faults = max_faults
        if write_delay is not None:
            lo, hi = (float(x) for x in write_delay)
            if not 0 <= lo <= hi:
                raise ValueError(f"write_delay must be (lo, hi) with 0 <= lo <= hi: {write_delay}")
            write_delay = (lo, hi)
        self.write_delay = write_delay
        self.serialize_conditional = serialize_conditional
        #: Writes delayed by ``write_delay`` so far.
        self.delayed_writes = 0
        self._conditional_lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        #: ``(fault, method, path, range)`` of every request, in arrival order.
        self.log: list[tuple[str, str, str, str | None]] = []
        #: The (decoded) query string of each request in :attr:`log`, in the same order.
        self.queries: list[str] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def injected(self) -> int:
        """Faults injected so far."""
        with self._lock:
            return self._injected()

    def _injected(self) -> int:
        return sum(n for kind, n in self.counts.items() if kind != "forwarded")

    def __enter__(self) -> FaultProxy:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fault-proxy", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _choose(self, method: str, path: str, byte_range: str | None, query: str = "") -> str:
        with self._lock:
            fault = "forwarded"
            eligible = method == "GET" and (self.path_filter is None or self.path_filter(path))
            budget_left = self.max_faults is None or self._injected() < self.max_faults
            if eligible and budget_left and self._rng.random() < self.rate:
                fault = self._rng.choice(self.faults)
            self.counts[fault] += 1
            self.log.append((fault, method, path, byte_range))
            self.queries.append(query)
            return fault

    def _write_delay(self, method: str) -> float:
        """Seconds to hold a request before forwarding it (0 but for delayed writes)."""
        if self.write_delay is None or method not in _WRITE_METHODS:
            return 0.0
        with self._lock:
            self.delayed_writes += 1
            return self._rng.uniform(*self.write_delay)

    def _position(self, size: int) -> int:
        with self._lock:
            return self._rng.randrange(size // 4, max(size // 4 + 1, 3 * size // 4))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in separate writes: with Nagle's algorithm on, the body
            # waits for the client's delayed ACK (some 40 ms per response).
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: tests read the counts instead

            def do_GET(self) -> None:
                self._proxy()

            do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

            def _proxy(self) -> None:
                parts = urllib.parse.urlsplit(self.path)
                path = urllib.parse.unquote(parts.path)
                query = urllib.parse.unquote(parts.query)
                fault = proxy._choose(self.command, path, self.headers.get("Range"), query)
                if fault == "reset":
                    self._reset()
                    return
                if fault == "slowdown":
                    self._send(
                        503, "Slow Down", [("Content-Type", "application/xml")], _SLOWDOWN_BODY
                    )
                    return
                if fault == "delay":
                    time.sleep(proxy.delay)
                hold = proxy._write_delay(self.command)
                if hold:
                    time.sleep(hold)
                conditional = proxy.serialize_conditional and any(
                    self.headers.get(h) is not None for h in _CONDITIONAL_HEADERS
                )
                if conditional:
                    with proxy._conditional_lock:
                        status, reason, headers, body = self._forward()
                else:
                    status, reason, headers, body = self._forward()
                ok = 200 <= status < 300 and body and self.command == "GET"
                if fault in ("flip", "badsum") and ok:
                    headers = [
                        (k, v) for k, v in headers if not k.lower().startswith("x-amz-checksum")
                    ]
                if fault == "flip" and ok:
                    position = proxy._position(len(body))
                    body = body[:position] + bytes([body[position] ^ 0x01]) + body[position + 1 :]
                elif fault == "badsum" and ok:
                    wrong = base64.b64encode(struct.pack(">I", 0x12345678)).decode()
                    headers.append(("x-amz-checksum-crc32", wrong))
                elif fault == "truncate" and ok and len(body) > 1:
                    self._send(status, reason, headers, body, cut=len(body) // 2)
                    return
                self._send(status, reason, headers, body)

            def _forward(self) -> tuple[int, str, list[tuple[str, str]], bytes]:
                length = int(self.headers.get("Content-Length") or 0)
                payload = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                connection = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                try:
                    connection.request(self.command, self.path, body=payload, headers=headers)
                    response = connection.getresponse()
                    body = response.read()
                    kept = [
                        (k, v) for k, v in response.getheaders() if k.lower() not in _HOP_HEADERS
                    ]
                    return response.status, response.reason, kept, body
                finally:
                    connection.close()

            def _send(
                self,
                status: int,
                reason: str,
                headers: list[tuple[str, str]],
                body: bytes,
                *,
                cut: int | None = None,
            ) -> None:
                self.send_response(status, reason)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                if cut is not None:
                    self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body if cut is None else body[:cut])
                self.wfile.flush()
                if cut is not None:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)

            def _reset(self) -> None:
                # Drain the request body so the reset is not mistaken for a refused upload.
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True
                self.connection.close()

        return Handler
