"""Reads through a faulty network never return wrong rows: they return the right ones or fail.

A reverse proxy (tests/fault_proxy.py) in front of moto's S3 server answers some GETs with a
503 SlowDown, a reset connection, a body cut short, a delay, a flipped byte or a wrong transfer
checksum. Readers run with their default options (``verify="auto"``: on for object stores).
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
import threading
import time
from collections import Counter
from typing import Any

import fsspec
import pytest
from dataset_factory import canonical, expected_rows, read_whole_file, write_dataset
from fault_proxy import FaultProxy

from arrowshuffle.format.errors import (
    ArrowShuffleError,
    ChecksumMismatchError,
    FormatError,
    MissingObjectError,
    ShuffleIOError,
)
from arrowshuffle.readers.dataset import open_dataset
from arrowshuffle.readers.file_reader import open_file
from arrowshuffle.readers.scheduler import ReadOptions
from arrowshuffle.readers.storage import classify_error, storage_errors

pytestmark = pytest.mark.s3

N = 6
#: Every read of the fault run must end within this many seconds.
READ_TIMEOUT = 60.0


def proxied(endpoint: Any, url: str, **extra: Any) -> dict[str, Any]:
    """s3fs options through ``url``: a fresh client each time (no cached instance hides a
    fault) and timeouts, so that no request can wait forever."""
    config = {"connect_timeout": 5, "read_timeout": 5, **extra.pop("config_kwargs", {})}
    return endpoint.storage_options(
        endpoint_url=url, skip_instance_cache=True, config_kwargs=config, **extra
    )


@pytest.fixture
def dataset(s3_endpoint, s3_bucket):
    # Small objects (moto's ranged GETs cost more as objects grow), several regions per file.
    options = s3_endpoint.storage_options()
    ds = write_dataset(
        f"{s3_bucket}/ds",
        num_files=3,
        num_subpartitions=N,
        batches_per_file=4,
        rows_per_batch=40,
        memory=3000,
        broadcast_batches=[2],
        storage_options=options,
    )
    assert min(f.regions for f in ds.manifest.files) >= 2
    tables = [read_whole_file(u, options) for u in ds.data_urls]
    s3_endpoint.log.clear()
    return ds, tables


def is_data(path: str) -> bool:
    return path.endswith(".arrow")


def warnings_of(caplog: Any) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "arrowshuffle.readers"]


# ---------------------------------------------------------------------- the fault run


def test_reads_through_a_faulty_network_are_right_or_fail_cleanly(s3_endpoint, dataset):
    ds, tables = dataset
    direct = s3_endpoint.storage_options()
    selections: list[dict[str, Any]] = [{"subpartitions": s} for s in range(N)]
    selections += [{"subpartitions": range(1, 4)}, {"subpartitions": [0, 5]}]
    selections += [{"consumer": c, "num_consumers": 3} for c in range(3)]
    truth = [open_dataset(ds.url, direct).read(**sel) for sel in selections]
    for sel, table in zip(selections[:N], truth[:N], strict=True):
        # The truth itself agrees with an oracle that reads the files with plain pyarrow.
        want = expected_rows(tables, [sel["subpartitions"]])
        assert canonical(table).equals(canonical(want))

    reads = 36
    outcomes: list[str | None] = [None] * reads
    errors: list[BaseException | None] = [None] * reads

    def one_read(i: int, url: str) -> None:
        sel = selections[i % len(selections)]
        try:
            got = open_dataset(ds.url, proxied(s3_endpoint, url)).read(**sel)
        except ArrowShuffleError as exc:
            outcomes[i], errors[i] = "library error", exc
        except BaseException as exc:
            outcomes[i], errors[i] = "raw error", exc
        else:
            outcomes[i] = "right" if got.equals(truth[i % len(truth)]) else "wrong"

    start = time.monotonic()
    with FaultProxy(s3_endpoint.url, rate=0.25, seed=20240611) as proxy:
        # Four reads at a time: enough to keep the run short, few enough not to starve moto.
        for first in range(0, reads, 4):
            threads = [
                threading.Thread(target=one_read, args=(i, proxy.url), daemon=True)
                for i in range(first, min(first + 4, reads))
            ]
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + READ_TIMEOUT
            for thread in threads:
                thread.join(max(0.0, deadline - time.monotonic()))
        counts = dict(proxy.counts)
    elapsed = time.monotonic() - start
    summary = Counter(o or "hung" for o in outcomes)
    print(f"\nfault run: {dict(summary)} in {elapsed:.1f}s; proxy: {counts}")
    for error in errors:
        if error is not None:
            print(f"  {type(error).__name__}: {str(error)[:200]}")

    assert summary["hung"] == 0, "a read did not end within its time bound"
    assert summary["wrong"] == 0, "a read returned wrong rows"
    assert summary["raw error"] == 0, [e for e in errors if not isinstance(e, ArrowShuffleError)]
    assert summary["right"] >= 0.9 * reads, dict(summary)
    assert sum(n for kind, n in counts.items() if kind != "forwarded") >= reads, counts


# ---------------------------------------------------------------------- refetch after damage


def test_a_flipped_byte_in_a_data_range_is_fetched_again(s3_endpoint, dataset, caplog):
    ds, tables = dataset
    with FaultProxy(
        s3_endpoint.url, rate=1.0, faults=["flip"], path_filter=is_data, max_faults=1
    ) as proxy:
        reader = open_dataset(ds.url, proxied(s3_endpoint, proxy.url))
        with caplog.at_level(logging.WARNING, logger="arrowshuffle.readers"):
            # One GET per chunk range, so that the flipped middle byte lies in a chunk.
            got = reader.read(2, options=ReadOptions(max_gap=0))
    assert proxy.counts["flip"] == 1
    assert canonical(got).equals(canonical(expected_rows(tables, [2])))
    stats = reader.read_stats()
    assert stats.refetches >= 1, stats
    assert any("again" in r.getMessage() for r in warnings_of(caplog)), caplog.records


def test_a_flipped_byte_in_an_index_is_fetched_again(s3_endpoint, dataset, caplog):
    ds, tables = dataset
    with FaultProxy(
        s3_endpoint.url,
        rate=1.0,
        faults=["flip"],
        path_filter=lambda p: p.endswith(".idx"),
        max_faults=1,
    ) as proxy:
        reader = open_dataset(ds.url, proxied(s3_endpoint, proxy.url))
        with caplog.at_level(logging.WARNING, logger="arrowshuffle.readers"):
            got = reader.read(4)
    assert proxy.counts["flip"] == 1
    assert canonical(got).equals(canonical(expected_rows(tables, [4])))
    assert reader.read_stats().refetches == 1
    assert [r.levelname for r in warnings_of(caplog)] == ["WARNING"]


def _overwrite(endpoint: Any, url: str, edit: Any) -> None:
    fs = fsspec.filesystem("s3", **endpoint.storage_options(skip_instance_cache=True))
    data = bytearray(fs.cat_file(url))
    edit(data)
    fs.pipe_file(url, bytes(data))


def test_a_damaged_stored_chunk_raises_checksum_mismatch(s3_endpoint, dataset, caplog):
    ds, _ = dataset
    url = ds.data_urls[1]
    stats = open_file(url, s3_endpoint.storage_options()).stats().to_pylist()
    chunk = next(r for r in stats if r["subpartition"] == 3 and r["bytes"] > 0)

    def flip(data: bytearray) -> None:
        data[chunk["offset"] + chunk["bytes"] // 2] ^= 0x40

    _overwrite(s3_endpoint, url, flip)
    s3_endpoint.log.clear()
    reader = open_dataset(ds.url, proxied(s3_endpoint, s3_endpoint.url))
    damaged = pytest.raises(ChecksumMismatchError, match=r"V16.*same bytes")
    with caplog.at_level(logging.WARNING, logger="arrowshuffle.readers"), damaged as info:
        reader.read(3, options=ReadOptions(max_gap=0))
    assert posixpath.basename(url) in str(info.value)
    # Fetched once more: the same bytes came back, so the stored object is damaged.
    assert reader.read_stats().refetches == 1
    assert len(warnings_of(caplog)) == 1
    # Other subpartitions do not touch the damaged chunk and still read.
    other = next(s for s in range(N) if s != 3)
    reader.read(other, options=ReadOptions(max_gap=0))


def test_a_damaged_stored_index_raises_after_one_more_fetch(s3_endpoint, dataset, caplog):
    ds, _ = dataset
    index = ds.data_urls[0] + ".idx"

    def flip(data: bytearray) -> None:
        data[len(data) // 2] ^= 0x01

    _overwrite(s3_endpoint, index, flip)
    s3_endpoint.log.clear()
    reader = open_dataset(ds.url, proxied(s3_endpoint, s3_endpoint.url))
    damaged = pytest.raises(FormatError, match=posixpath.basename(index))
    with caplog.at_level(logging.WARNING, logger="arrowshuffle.readers"), damaged:
        reader.read(0)
    assert len(warnings_of(caplog)) == 1, "refetched once, then the same bytes proved the damage"
    gets = [r for r in s3_endpoint.log.requests("GET") if r["path"].endswith(".idx")]
    assert Counter(posixpath.basename(r["path"]) for r in gets)[posixpath.basename(index)] == 2


# ---------------------------------------------------------------------- storage errors


def test_a_missing_object_raises_missing_object_error_without_retries(s3_endpoint, dataset):
    ds, _ = dataset
    gone = ds.data_urls[2]
    fsspec.filesystem("s3", **s3_endpoint.storage_options()).rm(gone)
    s3_endpoint.log.clear()
    reader = open_dataset(ds.url, proxied(s3_endpoint, s3_endpoint.url))
    with pytest.raises(MissingObjectError, match=rf"{gone} does not exist"):
        reader.read(1, options=ReadOptions(max_gap=10**9))
    gets = [r for r in s3_endpoint.log.requests("GET") if r["path"].endswith(gone[5:])]
    assert [r["status"] for r in gets] == [404]
    assert reader.read_stats().retries == 0


@pytest.mark.parametrize(
    ("fault", "faults"),
    # s3fs retries a cut body and SlowDown 5 times itself: 6 and 7 faults in a row get past
    # it, so that the reader's own retry is what recovers. It does not retry botocore's
    # FlexibleChecksumError at all.
    [("truncate", 6), ("slowdown", 7), ("badsum", 2)],
)
def test_failed_transfers_are_retried(s3_endpoint, dataset, fault, faults):
    ds, tables = dataset
    # No retries inside botocore, so that each fault reaches s3fs.
    no_retries = {"retries": {"total_max_attempts": 1}}
    with FaultProxy(
        s3_endpoint.url, rate=1.0, faults=[fault], path_filter=is_data, max_faults=faults
    ) as proxy:
        shuffle = open_file(
            ds.data_urls[0], proxied(s3_endpoint, proxy.url, config_kwargs=no_retries)
        )
        got = shuffle.read(5, options=ReadOptions(max_gap=10**9))  # every region in one GET
    assert proxy.counts[fault] == faults
    assert canonical(got).equals(canonical(expected_rows(tables[:1], [5])))
    stats = shuffle.read_stats()
    assert stats.retries >= 1, stats


def test_too_many_failed_transfers_raise_a_shuffle_io_error(s3_endpoint, dataset):
    ds, _ = dataset
    no_retries = {"retries": {"total_max_attempts": 1}}
    with FaultProxy(s3_endpoint.url, rate=1.0, faults=["badsum"], path_filter=is_data) as proxy:
        shuffle = open_file(
            ds.data_urls[0], proxied(s3_endpoint, proxy.url, config_kwargs=no_retries)
        )
        with pytest.raises(ShuffleIOError, match=r"failed 4 times.*FlexibleChecksumError"):
            shuffle.read(5, options=ReadOptions(max_gap=10**9))
    assert proxy.counts["badsum"] == 4
    assert shuffle.read_stats().retries == 3


def _client_error(code: str, status: int) -> BaseException:
    botocore_exceptions = pytest.importorskip("botocore.exceptions")
    response = {
        "Error": {"Code": code, "Message": code},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore_exceptions.ClientError(response, "GetObject")


def _library_errors() -> list[tuple[str, Any, str]]:
    pytest.importorskip("botocore")
    pytest.importorskip("aiohttp")
    import aiohttp
    import botocore.exceptions as be

    return [
        (
            "FlexibleChecksumError",
            lambda: be.FlexibleChecksumError(error_msg="bad crc"),
            "transient",
        ),
        ("ReadTimeoutError", lambda: be.ReadTimeoutError(endpoint_url="http://x"), "transient"),
        (
            "EndpointConnectionError",
            lambda: be.EndpointConnectionError(endpoint_url="http://x"),
            "transient",
        ),
        (
            "ConnectionClosedError",
            lambda: be.ConnectionClosedError(endpoint_url="http://x"),
            "transient",
        ),
        (
            "IncompleteReadError",
            lambda: be.IncompleteReadError(actual_bytes=1, expected_bytes=2),
            "transient",
        ),
        ("ResponseStreamingError", lambda: be.ResponseStreamingError(error="cut"), "transient"),
        ("SlowDown", lambda: _client_error("SlowDown", 503), "transient"),
        ("InternalError", lambda: _client_error("InternalError", 500), "transient"),
        ("NoSuchKey", lambda: _client_error("NoSuchKey", 404), "missing"),
        ("AccessDenied", lambda: _client_error("AccessDenied", 403), "denied"),
        ("InvalidRange", lambda: _client_error("InvalidRange", 416), "permanent"),
        ("NoCredentialsError", lambda: be.NoCredentialsError(), "denied"),
        ("ClientPayloadError", lambda: aiohttp.ClientPayloadError("cut"), "transient"),
        ("ServerDisconnectedError", lambda: aiohttp.ServerDisconnectedError(), "transient"),
        ("ClientConnectionError", lambda: aiohttp.ClientConnectionError("reset"), "transient"),
        ("asyncio.TimeoutError", lambda: asyncio.TimeoutError(), "transient"),
        ("s3fs SlowDown", lambda: OSError(16, "Please reduce your request rate."), "transient"),
        (
            "s3fs InvalidRange",
            lambda: OSError(22, "The requested range is not satisfiable"),
            "permanent",
        ),
        (
            "s3fs NoSuchKey",
            lambda: FileNotFoundError(2, "The specified key does not exist."),
            "missing",
        ),
    ]


@pytest.mark.parametrize("case", range(19))
def test_every_library_error_is_classified_and_mapped(case):
    name, make, kind = _library_errors()[case]
    error = make()
    assert classify_error(error) == kind, name
    mapped = pytest.raises(ShuffleIOError)  # never the raw library error
    with mapped as info, storage_errors("s3://bucket/key", "reading"):
        raise error
    assert "s3://bucket/key" in str(info.value)
    assert isinstance(info.value, MissingObjectError) == (kind == "missing")
    assert info.value.__cause__ is error


def test_the_core_imports_without_the_optional_libraries():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for name in ('botocore', 'aiohttp', 's3fs', 'aiobotocore'):\n"
        "    sys.modules[name] = None\n"
        "import arrowshuffle, arrowshuffle.readers.dataset, arrowshuffle.readers.storage\n"
        "assert arrowshuffle.readers.storage.classify_error(TimeoutError()) == 'transient'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_verify_auto_leaves_local_files_unchecked(tmp_path, s3_endpoint, dataset):
    ds, _ = dataset
    url = ds.data_urls[0]
    stats = open_file(url, s3_endpoint.storage_options()).stats().to_pylist()
    chunk = next(r for r in stats if r["subpartition"] == 1 and r["bytes"] > 0)
    local = tmp_path / "part.arrow"
    fs = fsspec.filesystem("s3", **s3_endpoint.storage_options())
    fs.get(url, str(local))
    fs.get(url + ".idx", str(local) + ".idx")
    # Damage the middle of one string value's bytes: still decodable, so only a CRC sees it.
    raw = bytearray(local.read_bytes())
    raw[chunk["offset"] + chunk["bytes"] - 9] ^= 0x01
    local.write_bytes(bytes(raw))
    assert open_file(str(local)).read(1).num_rows > 0  # auto: local files are not checked
    with pytest.raises(ChecksumMismatchError):
        open_file(str(local)).read(1, verify=True)
    with pytest.raises(ArrowShuffleError, match="verify"):
        open_file(str(local)).read(1, verify="yes")  # type: ignore[arg-type]


def test_the_verify_option_reads_the_same_everywhere():
    from arrowshuffle.cli import build_parser
    from arrowshuffle.spark.options import parse_read_options

    def parsed(*extra: str) -> Any:
        args = ["read", "f.arrow", "--subpartitions", "0", "--out", "o.arrow", *extra]
        return build_parser().parse_args(args).verify

    assert [parsed(), parsed("--verify"), parsed("--verify", "off")] == ["on", "on", "off"]
    assert [parsed("--verify", "auto"), parsed("--no-verify")] == ["auto", "off"]
    with pytest.raises(SystemExit):
        parsed("--verify", "sometimes")
    spark = [parse_read_options({"path": "p", **o}).verify for o in ({}, {"verify": "AUTO"})]
    spark += [parse_read_options({"path": "p", "verify": v}).verify for v in ("true", "0")]
    assert spark == ["auto", "auto", True, False]
    with pytest.raises(ArrowShuffleError, match=r"verify must be auto, true or false.*maybe"):
        parse_read_options({"path": "p", "verify": "maybe"})


# ---------------------------------------------------------------------- shaping writes


def _s3_client(endpoint: Any, url: str) -> Any:
    """A plain botocore client through ``url``: signed requests (moto answers a conditional
    request without a signature with a bare 403), no retries."""
    session = pytest.importorskip("botocore.session").get_session()
    config = pytest.importorskip("botocore.config").Config(
        retries={"total_max_attempts": 1}, connect_timeout=5, read_timeout=30
    )
    return session.create_client(
        "s3",
        region_name="eu-west-1",
        endpoint_url=url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=config,
    )


def _status(call: Any) -> int:
    from botocore.exceptions import ClientError

    try:
        return int(call()["ResponseMetadata"]["HTTPStatusCode"])
    except ClientError as exc:
        return int(exc.response["ResponseMetadata"]["HTTPStatusCode"])


def _create_at_once(clients: list[Any], bucket: str, key: str) -> list[int]:
    """Each client PUTs ``key`` with ``If-None-Match: *``, all released at the same moment."""
    barrier = threading.Barrier(len(clients))
    statuses: list[int] = []

    def create(client: Any, body: bytes) -> None:
        def put() -> Any:
            return client.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")

        barrier.wait()
        statuses.append(_status(put))

    threads = [
        threading.Thread(target=create, args=(c, bytes([i]) * 100_000), daemon=True)
        for i, c in enumerate(clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return statuses


def test_serialized_conditional_puts_let_exactly_one_create_through(s3_endpoint, s3_bucket):
    bucket = s3_bucket.removeprefix("s3://")
    with FaultProxy(s3_endpoint.url, rate=0.0, serialize_conditional=True) as proxy:
        clients = [_s3_client(s3_endpoint, proxy.url) for _ in range(2)]
        for round_ in range(5):
            statuses = _create_at_once(clients, bucket, f"manifest-{round_}.json")
            assert sorted(statuses) == [200, 412], (round_, statuses)
        assert proxy.counts == {"forwarded": 10}


def test_write_delay_holds_every_write_back(s3_endpoint, s3_bucket):
    bucket = s3_bucket.removeprefix("s3://")
    with FaultProxy(s3_endpoint.url, rate=0.0, write_delay=(0.4, 0.5)) as proxy:
        client = _s3_client(s3_endpoint, proxy.url)
        start = time.monotonic()
        assert _status(lambda: client.put_object(Bucket=bucket, Key="k", Body=b"x")) == 200
        assert time.monotonic() - start >= 0.4
        assert _status(lambda: client.get_object(Bucket=bucket, Key="k")) == 200
        assert proxy.delayed_writes == 1  # reads pass at once
    with pytest.raises(ValueError, match="write_delay"):
        FaultProxy(s3_endpoint.url, write_delay=(0.5, 0.1))
