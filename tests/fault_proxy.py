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
#: Response headers not passed on: they describe the upstream connection, not the object.
_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "server", "date"}
)


class _QuietServer(ThreadingHTTPServer):
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
        self.counts: collections.Counter[str] = collections.Counter()
        #: ``(fault, method, path, range)`` of every request, in arrival order.
        self.log: list[tuple[str, str, str, str | None]] = []
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

    def _choose(self, method: str, path: str, byte_range: str | None) -> str:
        with self._lock:
            fault = "forwarded"
            eligible = method == "GET" and (self.path_filter is None or self.path_filter(path))
            budget_left = self.max_faults is None or self._injected() < self.max_faults
            if eligible and budget_left and self._rng.random() < self.rate:
                fault = self._rng.choice(self.faults)
            self.counts[fault] += 1
            self.log.append((fault, method, path, byte_range))
            return fault

    def _position(self, size: int) -> int:
        with self._lock:
            return self._rng.randrange(size // 4, max(size // 4 + 1, 3 * size // 4))

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: tests read the counts instead

            def do_GET(self) -> None:
                self._proxy()

            do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

            def _proxy(self) -> None:
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                fault = proxy._choose(self.command, path, self.headers.get("Range"))
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
