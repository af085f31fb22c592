"""Shared fixtures: one local SparkSession per test session, a local S3 endpoint.

Both skip the tests that use them when their optional packages (or Java) are absent, so the
suite collects and runs with only the core installed.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local SparkSession shared by every Spark test (starting one takes seconds).

    Skips the test without pyspark or without Java: both are optional (``[spark]`` extra).
    """
    pytest.importorskip("pyspark", reason="Spark tests need pyspark: pip install '.[spark]'")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark tests need Java 17: install a JDK (apt-get install openjdk-17-jre)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the test session listens on loopback
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("arrowshuffle-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# ---------------------------------------------------------------------- object storage (S3)
#
# A real S3 HTTP endpoint: moto's ThreadedMotoServer on 127.0.0.1. Requests are counted on the
# server side, by a WSGI layer in front of moto's application, so that tests do not have to
# trust the client's own counters; the same layer can make chosen requests fail with a 500.

_AWS_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


class S3RequestLog:
    """WSGI middleware: records every HTTP request moto serves; injects failures on demand."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._lock = threading.Lock()
        self.records: list[dict[str, Any]] = []
        self._failures: list[list[Any]] = []  # [key substring, remaining count, method]
        self._lost: list[list[Any]] = []  # [key substring, remaining count]
        self._put_delay: tuple[float, float] = (0.0, 0.0)
        # moto checks If-None-Match and then stores the object in two steps: two conditional
        # PUTs of one key at once could both succeed, which S3 never lets happen. Requests that
        # carry the header are served one at a time.
        self._conditional = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self.records.clear()
            self._failures.clear()
            self._lost.clear()
            self._put_delay = (0.0, 0.0)

    def fail_next(self, key_part: str, times: int, method: str = "GET") -> None:
        """Answer the next ``times`` ``method`` requests whose path ends with ``key_part`` with a
        500, without letting moto see them."""
        with self._lock:
            self._failures.append([key_part, times, method])

    def lose_next_answer(self, key_part: str, times: int = 1) -> None:
        """Let moto serve the next ``times`` PUTs whose path ends with ``key_part``, then answer
        each with a 500 instead of moto's answer: the object was written but the client thinks
        the request failed (and retries it)."""
        with self._lock:
            self._lost.append([key_part, times])

    def delay_puts(self, low: float, high: float) -> None:
        """Hold every PUT a random ``low`` to ``high`` seconds before moto serves it."""
        with self._lock:
            self._put_delay = (low, high)

    def requests(self, method: str | None = None, contains: str = "") -> list[dict[str, Any]]:
        with self._lock:
            return [
                r
                for r in self.records
                if (method is None or r["method"] == method) and contains in r["path"]
            ]

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        from urllib.parse import unquote

        record: dict[str, Any] = {
            "method": environ["REQUEST_METHOD"],
            "path": unquote(environ.get("PATH_INFO", "")),
            "query": environ.get("QUERY_STRING", ""),
            "range": environ.get("HTTP_RANGE"),
            "if_none_match": environ.get("HTTP_IF_NONE_MATCH"),
            "status": None,
            "bytes": 0,
        }
        with self._lock:
            self.records.append(record)
            failure = next(
                (
                    f
                    for f in self._failures
                    if f[1] > 0 and record["method"] == f[2] and record["path"].endswith(f[0])
                ),
                None,
            )
            if failure is not None:
                failure[1] -= 1
            lost = next(
                (
                    f
                    for f in self._lost
                    if f[1] > 0 and record["method"] == "PUT" and record["path"].endswith(f[0])
                ),
                None,
            )
            if lost is not None and failure is None:
                lost[1] -= 1
            delay = self._put_delay if record["method"] == "PUT" else (0.0, 0.0)
        if failure is not None:
            record["status"] = 500
            return self._internal_error(start_response)
        if delay[1] > 0:
            time.sleep(random.uniform(*delay))
        conditional = "HTTP_IF_NONE_MATCH" in environ or "HTTP_IF_MATCH" in environ
        if lost is not None:
            with self._conditional if conditional else contextlib.nullcontext():
                served = self.app(environ, lambda *args: None)
                try:
                    for _ in served:
                        pass
                finally:
                    close = getattr(served, "close", None)
                    if close is not None:
                        close()
            record["status"] = 500
            record["lost"] = True
            return self._internal_error(start_response)

        def counting_start_response(status: str, headers: Any, *args: Any) -> Any:
            record["status"] = int(status.split()[0])
            return start_response(status, headers, *args)

        def body() -> Iterator[bytes]:
            with self._conditional if conditional else contextlib.nullcontext():
                result = self.app(environ, counting_start_response)
                try:
                    for chunk in result:
                        record["bytes"] += len(chunk)
                        yield chunk
                finally:
                    close = getattr(result, "close", None)
                    if close is not None:
                        close()

        return body()

    @staticmethod
    def _internal_error(start_response: Any) -> list[bytes]:
        body = (
            b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
            b"<Message>injected failure</Message><RequestId>0</RequestId></Error>"
        )
        start_response(
            "500 Internal Server Error",
            [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
        )
        return [body]


class S3Endpoint:
    """The running endpoint: its URL, its request log and s3fs options that point at it."""

    def __init__(self, url: str, log: S3RequestLog) -> None:
        self.url = url
        self.log = log

    def storage_options(self, **extra: Any) -> dict[str, Any]:
        options: dict[str, Any] = {
            "endpoint_url": self.url,
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"region_name": "eu-west-1"},
            "use_listings_cache": False,
        }
        options.update(extra)
        return options


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    """moto's S3 server on a free port of 127.0.0.1, with no AWS settings of the machine."""
    pytest.importorskip("s3fs", reason="S3 tests need s3fs: pip install '.[s3]'")
    pytest.importorskip("moto.server", reason="S3 tests need moto's server: pip install '.[dev]'")
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    with pytest.MonkeyPatch.context() as patch:
        for name in _AWS_ENV:
            patch.delenv(name, raising=False)
        patch.setenv("AWS_CONFIG_FILE", os.devnull)
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        patch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            wsgi_server = server._server
            assert wsgi_server is not None
            log = S3RequestLog(wsgi_server.app)
            wsgi_server.app = log
            yield S3Endpoint(f"http://{host}:{port}", log)
        finally:
            server.stop()


@pytest.fixture
def s3_bucket(s3_endpoint: S3Endpoint) -> Iterator[str]:
    """A fresh, empty bucket for one test: yields its ``s3://`` URL; the log starts empty."""
    import uuid

    import fsspec

    name = f"test-{uuid.uuid4().hex[:12]}"
    fs = fsspec.filesystem("s3", **s3_endpoint.storage_options())
    fs.mkdir(name)
    s3_endpoint.log.clear()
    yield f"s3://{name}"
    s3_endpoint.log.clear()
