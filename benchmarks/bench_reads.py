"""Read one subpartition: arrowshuffle vs a whole-file IPC scan vs hive-partitioned Parquet.

One run generates the data, writes three layouts and measures:

* local, warm page cache: the median time to read one subpartition with
  - arrowshuffle (pyarrow tables) and arrowshuffle through polars,
  - polars ``scan_ipc(data files).filter(pl.col("sp") == s)`` over the same data files (they are
    plain Arrow IPC files, so this is the same bytes without the index),
  - a hive-partitioned Parquet dataset (one directory per subpartition, one file per writer
    task in each) read with polars and with pyarrow;
* object storage (moto's S3 server on 127.0.0.1, a smaller copy of the data): per read, the
  HTTP requests (every method: GET, HEAD, LIST) and response bytes the server saw; the read
  amplification, bytes transferred / bytes of the subpartition in that layout's own encoding
  (its chunk bytes in the data files; the files of its ``sp=<s>`` directory for Parquet), once
  over all bytes (manifest, indexes, listings and footers included) and once over the bytes of
  data objects only; and a modeled time of ``requests x latency + bytes / bandwidth``
  (20 ms, 100 MB/s by default), a serial model that ignores concurrency.

Usage::

    python benchmarks/bench_reads.py                    # default size, table + JSON
    python benchmarks/bench_reads.py --rows 500000 --skip-s3
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

import arrowshuffle.polars as asp
from arrowshuffle.format.naming import new_file_name
from arrowshuffle.readers.dataset import open_dataset
from arrowshuffle.readers.file_reader import open_file
from arrowshuffle.readers.scheduler import ReadOptions
from arrowshuffle.readers.selection import Selection
from arrowshuffle.writers.dataset_writer import commit_dataset, prepare_directory
from arrowshuffle.writers.file_writer import ShuffleFileWriter
from benchmarks.output import add_skip_s3, write_results

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("sp", pa.int32()),
        ("key", pa.int64()),
        ("value", pa.float64()),
        ("score", pa.float32()),
        ("name", pa.string()),
    ]
)
MB = 1_000_000


# ---------------------------------------------------------------------- data and layouts


def generate(rows: int, files: int, subpartitions: int, seed: int) -> Iterator[pa.Table]:
    """One table per writer task; ``sp`` is each row's subpartition (uniform)."""
    rng = np.random.default_rng(seed)
    per_file = rows // files
    for f in range(files):
        first = f * per_file
        ids = np.arange(first, first + per_file, dtype=np.int64)
        names = pc.binary_join_element_wise(
            "user-", pc.cast(pa.array(rng.integers(0, 1_000_000, per_file)), pa.string()), ""
        )
        yield pa.table(
            [
                pa.array(ids),
                pa.array(rng.integers(0, subpartitions, per_file).astype(np.int32)),
                pa.array(rng.integers(0, 1 << 40, per_file)),
                pa.array(rng.standard_normal(per_file)),
                pa.array(rng.random(per_file).astype(np.float32)),
                names,
            ],
            schema=SCHEMA,
        )


def write_shuffle(
    url: str,
    tables: list[pa.Table],
    subpartitions: int,
    region_bytes: int,
    storage_options: dict[str, Any] | None = None,
) -> None:
    directory = prepare_directory(url, storage_options)
    written = []
    for f, table in enumerate(tables):
        path = directory.child(new_file_name(f)).url
        with ShuffleFileWriter(
            path, SCHEMA, subpartitions, memory=region_bytes, storage_options=storage_options
        ) as writer:
            for batch in table.to_batches(max_chunksize=8192):
                writer.write(batch, subpartitions=batch.column("sp"))
        assert writer.written is not None
        written.append(writer.written)
    commit_dataset(
        directory,
        written,
        schema=SCHEMA,
        num_subpartitions=subpartitions,
        partitioner={"name": "explicit"},
    )


def write_hive(
    root: str, tables: list[pa.Table], subpartitions: int, open_output: Callable[[str], Any]
) -> None:
    """``root/sp=<s>/part-<f>.parquet``: every task writes one file per subpartition."""
    for f, table in enumerate(tables):
        order = pc.sort_indices(table, [("sp", "ascending")])
        table = table.take(order)
        sp = table.column("sp").to_numpy()
        bounds = np.searchsorted(sp, np.arange(subpartitions + 1))
        body = table.drop_columns(["sp"])
        for s in range(subpartitions):
            part = body.slice(int(bounds[s]), int(bounds[s + 1] - bounds[s]))
            with open_output(f"{root}/sp={s}/part-{f:05d}.parquet") as out:
                pq.write_table(part, out)


def chunk_bytes(url: str, s: int, storage_options: dict[str, Any] | None = None) -> int:
    """Bytes of subpartition ``s`` in the data files (what a perfect reader transfers)."""
    dataset = open_dataset(url, storage_options)
    total = 0
    for read in dataset.reads(Selection(s)):
        ranges = dataset.file(read.file).chunk_ranges(read.subpartitions)
        total += sum(c.length for c in ranges)
    return total


# ---------------------------------------------------------------------- local timings


def local_methods(root: Path, data_files: list[str]) -> dict[str, Callable[[int], int]]:
    shuffle = str(root / "shuffle")
    hive = str(root / "hive")

    def arrowshuffle_pyarrow(s: int) -> int:
        return open_dataset(shuffle).read(s).num_rows

    def arrowshuffle_polars(s: int) -> int:
        return asp.scan(shuffle, s).collect().height

    def polars_scan_ipc(s: int) -> int:
        return pl.scan_ipc(data_files).filter(pl.col("sp") == s).collect().height

    def polars_hive_parquet(s: int) -> int:
        frame = pl.scan_parquet(f"{hive}/**/*.parquet", hive_partitioning=True)
        return frame.filter(pl.col("sp") == s).collect().height

    def pyarrow_hive_parquet(s: int) -> int:
        dataset = pads.dataset(hive, format="parquet", partitioning="hive")
        return dataset.to_table(filter=pads.field("sp") == s).num_rows

    return {
        "arrowshuffle (pyarrow)": arrowshuffle_pyarrow,
        "arrowshuffle (polars)": arrowshuffle_polars,
        "polars scan_ipc + filter": polars_scan_ipc,
        "hive parquet (polars)": polars_hive_parquet,
        "hive parquet (pyarrow)": pyarrow_hive_parquet,
    }


def time_local(
    methods: dict[str, Callable[[int], int]], ids: list[int], repeat: int
) -> dict[str, dict[str, Any]]:
    times: dict[str, list[float]] = {name: [] for name in methods}
    rows: dict[int, dict[str, int]] = {s: {} for s in ids}
    for method in methods.values():
        method(ids[0])  # warm-up: imports, page cache, thread pools
    for _ in range(repeat):
        for s in ids:
            for name, method in methods.items():  # interleaved, so drift hits all alike
                start = time.perf_counter()
                rows[s][name] = method(s)
                times[name].append(time.perf_counter() - start)
    for s, by_method in rows.items():
        if len(set(by_method.values())) != 1:
            raise SystemExit(f"methods disagree on subpartition {s}: {by_method}")
    base = statistics.median(times["arrowshuffle (pyarrow)"])
    return {
        name: {
            "median_s": statistics.median(t),
            "min_s": min(t),
            "max_s": max(t),
            "ratio_vs_arrowshuffle": statistics.median(t) / base,
            "rows_per_read": statistics.mean(rows[s][name] for s in ids),
        }
        for name, t in times.items()
    }


def local_bytes(root: Path, ids: list[int], data_files: list[str]) -> dict[str, Any]:
    """Planned bytes of an arrowshuffle read (memory-mapped: what the read may touch)."""
    shuffle = str(root / "shuffle")
    dataset = open_dataset(shuffle)
    planned = needed = 0
    for s in ids:
        for read in dataset.reads(Selection(s)):
            ranges = dataset.file(read.file).chunk_ranges(read.subpartitions)
            needed += sum(c.length for c in ranges)
            blocks = dataset.file(read.file).blocks(s)
            planned += sum(b.end - b.offset for b in blocks)
    data_total = sum(os.path.getsize(p) for p in data_files)
    hive_total = sum(p.stat().st_size for p in (root / "hive").rglob("*.parquet"))
    return {
        "needed_bytes_per_read": needed / len(ids),
        "arrowshuffle_planned_bytes_per_read": planned / len(ids),
        "arrowshuffle_amplification": planned / needed,
        "data_files_bytes": data_total,
        "hive_parquet_bytes": hive_total,
        "hive_parquet_files": sum(1 for _ in (root / "hive").rglob("*.parquet")),
    }


# ---------------------------------------------------------------------- small reads, projection


def _per_call(fn: Callable[[], object], calls: int) -> float:
    """Mean seconds of ``calls`` back-to-back calls (one sample of a sub-millisecond cost)."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def _interleaved(
    methods: dict[str, Callable[[], object]], repeats: int, calls: int
) -> dict[str, dict[str, float]]:
    """Median, min and max over ``repeats`` rounds; each round runs every method in turn."""
    for fn in methods.values():
        fn()  # warm-up: page cache, imports
    samples: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, fn in methods.items():
            samples[name].append(_per_call(fn, calls))
    return {
        name: {"median_s": statistics.median(t), "min_s": min(t), "max_s": max(t)}
        for name, t in samples.items()
    }


def _write_file(
    path: Path,
    table: pa.Table,
    ids: np.ndarray,
    n: int,
    memory: int | None,
    compression: str | None = "none",
) -> None:
    """Write ``table`` as a shuffle file; ``None`` leaves the writer's default in place."""
    options: dict[str, Any] = {}
    if memory is not None:
        options["memory"] = memory
    if compression is not None:
        options["compression"] = compression
    with ShuffleFileWriter(path, table.schema, n, overwrite=True, **options) as writer:
        start = 0
        for batch in table.to_batches(max_chunksize=65536):
            writer.write(batch, subpartitions=ids[start : start + batch.num_rows])
            start += batch.num_rows


def _write_plain(path: Path, table: pa.Table, compression: str = "none") -> None:
    _write_batches(path, table.to_batches(max_chunksize=65536), table.schema, compression)


def _write_batches(
    path: Path, batches: list[pa.RecordBatch], schema: pa.Schema, compression: str
) -> None:
    options = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
    with (
        pa.OSFile(str(path), "wb") as sink,
        pa.ipc.new_file(sink, schema, options=options) as writer,
    ):
        for batch in batches:
            writer.write_batch(batch)


def _read_plain(path: Path) -> int:
    with pa.memory_map(str(path)) as source:
        return int(pa.ipc.open_file(source).read_all().num_rows)


def _get_batches(reader: pa.ipc.RecordBatchFileReader) -> int:
    batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
    return int(pa.Table.from_batches(batches).num_rows)


#: The small-read cases: the writer's defaults (its memory share and codec), and a sort buffer
#: of ``--small-region-bytes`` (several regions) with each codec named.
SMALL_CASES = ("defaults", "lz4", "none")


def measure_small_reads(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Reads of one and of four subpartitions against standalone IPC files of just those rows.

    One file of ``--small-rows`` rows is written per case of ``--small-cases``: ``defaults``
    writes with the writer's defaults (a share of the default memory pool, which holds these
    rows in one region, and the default codec); a codec name writes with a sort buffer of
    ``--small-region-bytes`` (several regions) and that codec. Each case times three pairs in
    the same rounds: open + read + consume one subpartition vs memory-mapping and reading a
    standalone Arrow IPC file of its rows; the same for a range of four; and one subpartition
    of a file already open vs ``get_batch`` of every batch of the standalone file, already open.

    Both sides decode the same rows with the same codec (the standalone files are written with
    the case's codec too) and Arrow's default threads (``use_threads``: pyarrow's
    ``read_record_batch`` on our side, its file reader on the other). The standalone file
    holds its rows in as few batches as it can, while a shuffle file holds one batch per
    region at least; so the same rounds also time standalone files of exactly the batches our
    read returns ("same batches"): what the reader costs apart from the batch count.
    """
    rows, n = args.small_rows, args.small_subpartitions
    rng = np.random.default_rng(args.seed)
    table = next(generate(rows, 1, n, args.seed)).drop_columns(["sp"])
    ids = rng.integers(0, n, rows).astype(np.int32)
    cases = [_small_case(root / case, table, ids, case, args) for case in args.small_cases]
    return {"rows": rows, "subpartitions": n, "cases": cases}


def _small_case(
    root: Path, table: pa.Table, ids: np.ndarray, case: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One case of :func:`measure_small_reads`: its file written, its pairs timed."""
    root.mkdir()
    n = args.small_subpartitions
    path = root / "small.arrow"
    if case == "defaults":
        _write_file(path, table, ids, n, None, None)
    else:
        _write_file(path, table, ids, n, args.small_region_bytes, case)
    opened = open_file(path)
    codec = opened.compression
    s = n // 2
    wanted = {1: range(s, s + 1), 4: range(s, s + 4)}
    alone: dict[int, Path] = {}
    same: dict[int, Path] = {}
    sizes: dict[str, int] = {}
    for count, run in wanted.items():
        mask = (ids >= run.start) & (ids < run.stop)
        alone[count] = root / f"alone-{count}.arrow"
        _write_plain(alone[count], table.filter(pa.array(mask)), codec)
        same[count] = root / f"same-batches-{count}.arrow"
        ours = opened.read(run)
        sizes[f"chunk_bytes_{count}"] = sum(c.length for c in opened.chunk_ranges(run))
        _write_batches(same[count], ours.to_batches(), ours.schema, codec)
        sizes[f"standalone_bytes_{count}"] = alone[count].stat().st_size
        sizes[f"same_batches_bytes_{count}"] = same[count].stat().st_size
        expect = int(mask.sum())
        if ash_rows(path, run) != expect or _read_plain(alone[count]) != expect:
            raise SystemExit(f"small reads disagree on subpartitions {run}")
    plain = pa.ipc.open_file(pa.memory_map(str(alone[1])))
    plain_same = pa.ipc.open_file(pa.memory_map(str(same[1])))
    methods: dict[str, Callable[[], object]] = {
        "open + read 1 subpartition": lambda: ash_rows(path, wanted[1]),
        "standalone IPC of its rows (mmap)": lambda: _read_plain(alone[1]),
        "open + read 4 subpartitions": lambda: ash_rows(path, wanted[4]),
        "standalone IPC of their rows (mmap)": lambda: _read_plain(alone[4]),
        "read 1 subpartition, file open": lambda: opened.read(s).num_rows,
        "get_batch, standalone file open": lambda: _get_batches(plain),
    }
    same_methods: dict[str, Callable[[], object]] = {
        "standalone IPC of its rows, same batches (mmap)": lambda: _read_plain(same[1]),
        "standalone IPC of their rows, same batches (mmap)": lambda: _read_plain(same[4]),
        "get_batch, standalone file of the same batches open": lambda: _get_batches(plain_same),
    }
    timings = _interleaved(methods | same_methods, args.repeats, args.small_calls)
    names = list(methods)
    ratios = {
        f"{names[i]} / {names[i + 1]}": timings[names[i]]["median_s"]
        / timings[names[i + 1]]["median_s"]
        for i in (0, 2, 4)
    }
    same_ratios = {
        f"{ours} / {peer}": timings[ours]["median_s"] / timings[peer]["median_s"]
        for ours, peer in zip(names[0::2], same_methods, strict=True)
    }
    memory = "the writer's default" if case == "defaults" else f"{args.small_region_bytes} bytes"
    return {
        "case": case,
        "label": f"{opened.num_regions} region(s), {codec}, sort buffer {memory}",
        "sort_buffer": memory,
        "compression": codec,
        "threads": "Arrow's default (use_threads) on both sides",
        "regions": opened.num_regions,
        "rows_per_subpartition": table.num_rows / n,
        "batches": {
            "ours_1": len(opened.read(wanted[1]).to_batches()),
            "standalone_1": plain.num_record_batches,
            "ours_4": len(opened.read(wanted[4]).to_batches()),
            "standalone_4": pa.ipc.open_file(pa.memory_map(str(alone[4]))).num_record_batches,
        },
        "bytes": sizes,
        "methods": {name: timings[name] for name in methods},
        "ratios": ratios,
        "same_batches": {name: timings[name] for name in same_methods},
        "same_batches_ratios": same_ratios,
    }


def ash_rows(path: Path, run: range) -> int:
    """Open a shuffle file, read ``run`` and count the rows (what a small consumer does)."""
    with open_file(path) as shuffle:
        return int(shuffle.read(run).num_rows)


def measure_projection(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One subpartition of a 16-column file: 4 columns against all 16, per compression."""
    return {compression: _projection(root, args, compression) for compression in ("none", "lz4")}


def _projection(root: Path, args: argparse.Namespace, compression: str) -> dict[str, Any]:
    """Open + read one subpartition: 4 columns against all 16 (time, and bytes touched)."""
    rows, n = args.projection_rows, 16
    rng = np.random.default_rng(args.seed)
    columns: dict[str, pa.Array] = {}
    for i in range(16):
        kind = i % 4
        if kind == 3:
            values = rng.integers(0, 1_000_000, rows).astype(str)
            columns[f"c{i}"] = pa.array(np.char.add("user-", values).astype(object), pa.string())
        elif kind == 2:
            columns[f"c{i}"] = pa.array(rng.standard_normal(rows))
        else:
            columns[f"c{i}"] = pa.array(rng.integers(0, 1 << 40, rows))
    table = pa.table(columns)
    ids = rng.integers(0, n, rows).astype(np.int32)
    path = root / "wide16.arrow"
    _write_file(path, table, ids, n, args.region_bytes, compression)
    selected = ["c0", "c2", "c7", "c11"]  # int, float, string, string
    s = n // 2

    def full() -> pa.Table:
        with open_file(path) as shuffle:
            return shuffle.read(s)

    def projected() -> pa.Table:
        with open_file(path) as shuffle:
            return shuffle.read(s, columns=selected)

    if not projected().equals(full().select(selected)):
        raise SystemExit("the projected read differs from the full read")
    touched = {}
    for name, call in (("full", {}), ("projected", {"columns": selected})):
        shuffle = open_file(path)
        shuffle.read(s, **call)  # type: ignore[arg-type]
        touched[name] = shuffle.data_bytes_read
    timings = _interleaved(
        {"4 of 16 columns": projected, "all 16 columns": full}, args.repeats, calls=5
    )
    return {
        "compression": compression,
        "rows": rows,
        "columns": 16,
        "selected": selected,
        "bytes_full": touched["full"],
        "bytes_projected": touched["projected"],
        "bytes_ratio": touched["projected"] / touched["full"],
        "methods": timings,
        "time_ratio": timings["4 of 16 columns"]["median_s"]
        / timings["all 16 columns"]["median_s"],
    }


# ---------------------------------------------------------------------- object storage (moto)


class RequestCounter:
    """WSGI middleware in front of moto: counts requests and response bytes, per method.

    A request is recorded when it arrives and its bytes are counted before each is sent, so
    that a client holding its answer finds it counted (a count taken when the server finished
    sending could come after the client went on).
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()
        self.records: list[list[Any]] = []

    def take(self) -> list[tuple[str, str, int]]:
        with self.lock:
            out, self.records = self.records, []
        return [(method, path, sent) for method, path, sent in out]

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        record: list[Any] = [environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""), 0]
        with self.lock:
            self.records.append(record)

        def body() -> Iterator[bytes]:
            result = self.app(environ, start_response)
            try:
                for chunk in result:
                    with self.lock:
                        record[2] += len(chunk)
                    yield chunk
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()

        return body()


def moto_options(endpoint: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Storage options that reach a moto server: for fsspec (s3fs) and for polars."""
    fsspec_options = {
        "endpoint_url": endpoint,
        "key": "bench",
        "secret": "bench",
        "client_kwargs": {"region_name": "eu-west-1"},
        "use_listings_cache": False,
    }
    polars_options = {
        "aws_endpoint_url": endpoint,
        "aws_access_key_id": "bench",
        "aws_secret_access_key": "bench",
        "aws_region": "eu-west-1",
        "aws_allow_http": "true",
    }
    return fsspec_options, polars_options


@contextlib.contextmanager
def moto_server() -> Iterator[tuple[str, RequestCounter]]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    for name in list(os.environ):
        if name.startswith("AWS_"):
            del os.environ[name]
    os.environ["AWS_CONFIG_FILE"] = os.devnull
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        wsgi = server._server
        assert wsgi is not None
        counter = RequestCounter(wsgi.app)
        wsgi.app = counter
        yield f"http://{host}:{port}", counter
    finally:
        server.stop()


def measure_s3(args: argparse.Namespace, ids: list[int]) -> dict[str, Any]:
    import fsspec
    from pyarrow import fs as pafs

    with moto_server() as (endpoint, counter):
        options, polars_options = moto_options(endpoint)
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        s3 = fsspec.filesystem("s3", **options)
        s3.mkdir(bucket)
        tables = list(generate(args.s3_rows, args.files, args.subpartitions, args.seed))
        shuffle = f"s3://{bucket}/shuffle"
        write_shuffle(shuffle, tables, args.subpartitions, args.s3_region_bytes, options)
        hive = f"{bucket}/hive"
        write_hive(hive, tables, args.subpartitions, lambda p: s3.open(p, "wb"))
        data_files = [f"s3://{p}" for p in sorted(s3.glob(f"{bucket}/shuffle/*.arrow"))]
        host = endpoint.removeprefix("http://")
        arrow_s3 = pafs.S3FileSystem(
            access_key="bench",
            secret_key="bench",
            endpoint_override=host,
            scheme="http",
            region="eu-west-1",
        )
        needed = {s: chunk_bytes(shuffle, s, options) for s in ids}
        hive_needed = {
            s: sum(int(e["size"]) for e in s3.ls(f"{hive}/sp={s}", detail=True)) for s in ids
        }
        counter.take()

        methods: dict[str, tuple[Callable[[int], int], dict[int, int]]] = {
            "arrowshuffle (pyarrow)": (
                lambda s: open_dataset(shuffle, options).read(s).num_rows,
                needed,
            ),
            "arrowshuffle (pyarrow, max_gap=0)": (
                lambda s: (
                    open_dataset(shuffle, options).read(s, options=ReadOptions(max_gap=0)).num_rows
                ),
                needed,
            ),
            "arrowshuffle (pyarrow, max_gap=2MB)": (
                lambda s: (
                    open_dataset(shuffle, options)
                    .read(s, options=ReadOptions(max_gap=2 * MB))
                    .num_rows
                ),
                needed,
            ),
            "arrowshuffle (polars)": (
                lambda s: asp.scan(shuffle, s, storage_options=options).collect().height,
                needed,
            ),
            "polars scan_ipc + filter": (
                lambda s: (
                    pl.scan_ipc(data_files, storage_options=polars_options)
                    .filter(pl.col("sp") == s)
                    .collect()
                    .height
                ),
                needed,
            ),
            "hive parquet (polars)": (
                lambda s: (
                    pl.scan_parquet(
                        f"s3://{hive}/**/*.parquet",
                        hive_partitioning=True,
                        storage_options=polars_options,
                    )
                    .filter(pl.col("sp") == s)
                    .collect()
                    .height
                ),
                hive_needed,
            ),
            "hive parquet (pyarrow)": (
                lambda s: (
                    pads.dataset(hive, format="parquet", partitioning="hive", filesystem=arrow_s3)
                    .to_table(filter=pads.field("sp") == s)
                    .num_rows
                ),
                hive_needed,
            ),
        }
        results: dict[str, Any] = {}
        rows_seen: dict[int, set[int]] = {s: set() for s in ids}
        for name, (method, wanted) in methods.items():
            requests = gets = transferred = data_bytes = 0
            need = 0
            for s in ids:
                counter.take()
                rows_seen[s].add(method(s))
                records = counter.take()
                requests += len(records)
                gets += sum(1 for m, _, _ in records if m == "GET")
                transferred += sum(n for _, _, n in records)
                data_bytes += sum(n for _, p, n in records if p.endswith((".arrow", ".parquet")))
                need += wanted[s]
            n = len(ids)
            modeled = (requests / n) * args.latency_ms / 1000 + (transferred / n) / (
                args.bandwidth_mbps * MB
            )
            results[name] = {
                "requests_per_read": requests / n,
                "gets_per_read": gets / n,
                "bytes_per_read": transferred / n,
                "needed_bytes_per_read": need / n,
                "data_bytes_per_read": data_bytes / n,
                "amplification": transferred / need,
                "data_amplification": data_bytes / need,
                "modeled_s": modeled,
            }
        for s, counts in rows_seen.items():
            if len(counts) != 1:
                raise SystemExit(f"object-store methods disagree on subpartition {s}: {counts}")
        base = results["arrowshuffle (pyarrow)"]["modeled_s"]
        for entry in results.values():
            entry["modeled_ratio_vs_arrowshuffle"] = entry["modeled_s"] / base
        return {
            "rows": args.s3_rows,
            "data_file_bytes": sum(int(s3.size(p)) for p in data_files),
            "regions_per_file": [f.regions for f in open_dataset(shuffle, options).manifest.files],
            "hive_parquet_files": args.files * args.subpartitions,
            "methods": results,
        }


# ---------------------------------------------------------------------- report


def print_tables(result: dict[str, Any]) -> None:
    local = result.get("local")
    if local is not None:
        _print_local(result, local)
    _print_rest(result)


def _print_local(result: dict[str, Any], local: dict[str, Any]) -> None:
    print(
        f"\nLocal (warm cache): {result['config']['rows']:,} rows, {result['config']['files']} "
        f"files, {result['config']['subpartitions']} subpartitions, "
        f"regions per file {local['regions_per_file']}"
    )
    print(f"{'method':36} {'median ms':>10} {'min ms':>8} {'x arrowshuffle':>15} {'rows':>9}")
    for name, m in local["methods"].items():
        print(
            f"{name:36} {m['median_s'] * 1000:10.1f} {m['min_s'] * 1000:8.1f} "
            f"{m['ratio_vs_arrowshuffle']:15.2f} {m['rows_per_read']:9.0f}"
        )
    b = local["bytes"]
    print(
        f"arrowshuffle planned bytes/read {b['arrowshuffle_planned_bytes_per_read'] / MB:.2f} MB, "
        f"needed {b['needed_bytes_per_read'] / MB:.2f} MB (amplification "
        f"{b['arrowshuffle_amplification']:.2f}); data files {b['data_files_bytes'] / MB:.1f} MB; "
        f"hive parquet {b['hive_parquet_bytes'] / MB:.1f} MB in {b['hive_parquet_files']} files"
    )


def _print_rest(result: dict[str, Any]) -> None:
    small = result.get("small_reads")
    for case in small["cases"] if small else []:
        print(
            f"\nSmall reads: {small['rows']:,} rows, {small['subpartitions']} subpartitions, "
            f"{case['label']}"
        )
        for name, m in (case["methods"] | case["same_batches"]).items():
            print(f"{name:52} {m['median_s'] * 1000:8.3f} ms (min {m['min_s'] * 1000:.3f})")
        for name, ratio in (case["ratios"] | case["same_batches_ratios"]).items():
            print(f"  {name}: {ratio:.2f}x")
        print(f"  batches: {case['batches']}; bytes: {case['bytes']}")
    for projection in result.get("projection", {}).values():
        print(
            f"\nProjection ({projection['compression']}), one subpartition of "
            f"{projection['rows']:,} rows x 16 columns: 4 columns touch "
            f"{projection['bytes_ratio']:.3f}x the bytes of all 16 "
            f"({projection['bytes_projected'] / MB:.2f} / {projection['bytes_full'] / MB:.2f} MB), "
            f"take {projection['time_ratio']:.2f}x the time"
        )
        for name, m in projection["methods"].items():
            print(f"  {name:20} {m['median_s'] * 1000:8.2f} ms (min {m['min_s'] * 1000:.2f})")
    if "s3" not in result:
        return
    s3 = result["s3"]
    config = result["config"]
    print(
        f"\nObject storage (moto, counted at the server): {s3['rows']:,} rows, data files "
        f"{s3['data_file_bytes'] / MB:.2f} MB, regions per file {s3['regions_per_file']}; "
        f"modeled time = requests x {config['latency_ms']} ms + bytes / "
        f"{config['bandwidth_mbps']} MB/s"
    )
    print(
        f"{'method':36} {'requests':>9} {'GETs':>6} {'KB/read':>9} {'needed KB':>10} "
        f"{'ampl.':>6} {'data ampl.':>10} {'model ms':>9} {'x arrowshuffle':>15}"
    )
    for name, m in s3["methods"].items():
        print(
            f"{name:36} {m['requests_per_read']:9.1f} {m['gets_per_read']:6.1f} "
            f"{m['bytes_per_read'] / 1000:9.1f} {m['needed_bytes_per_read'] / 1000:10.1f} "
            f"{m['amplification']:6.2f} {m['data_amplification']:10.2f} "
            f"{m['modeled_s'] * 1000:9.1f} "
            f"{m['modeled_ratio_vs_arrowshuffle']:15.2f}"
        )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows (local)")
    parser.add_argument("--files", type=int, default=8, help="writer tasks = data files")
    parser.add_argument("--subpartitions", type=int, default=64)
    parser.add_argument("--region-bytes", type=int, default=2 << 20, help="sort buffer")
    parser.add_argument("--repeats", type=int, default=5, help="rounds over the sample ids")
    # The former spelling, so that older commands still run.
    parser.add_argument(
        "--repeat", dest="repeats", type=int, default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    parser.add_argument("--samples", type=int, default=4, help="subpartitions read per round")
    add_skip_s3(parser)
    parser.add_argument("--s3-rows", type=int, default=200_000, help="rows (object store)")
    parser.add_argument("--s3-region-bytes", type=int, default=256 << 10)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--bandwidth-mbps", type=float, default=100.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--small-rows", type=int, default=4_000_000, help="rows (small reads)")
    parser.add_argument("--small-subpartitions", type=int, default=64)
    parser.add_argument("--small-region-bytes", type=int, default=64 << 20)
    parser.add_argument("--small-calls", type=int, default=20, help="calls per timing sample")
    parser.add_argument(
        "--small-cases",
        default=",".join(SMALL_CASES),
        help="small-read files, comma-separated: defaults (the writer's defaults) or a codec "
        "(none, lz4, zstd) with a sort buffer of --small-region-bytes",
    )
    # The former option: one case, a sort buffer of --small-region-bytes and this codec.
    parser.add_argument(
        "--small-compression",
        dest="small_cases",
        choices=("none", "lz4", "zstd"),
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--projection-rows", type=int, default=1_000_000)
    parser.add_argument("--skip-small", action="store_true", help="skip small reads and projection")
    parser.add_argument(
        "--small-only",
        action="store_true",
        help="run only the small reads (no dataset layouts, projection or object store)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "reads.json",
        help="JSON output",
    )
    args = parser.parse_args(argv)
    # Checked before anything is timed; the former --small-compression gives one case.
    cases = [c for c in args.small_cases.split(",") if c]
    for case in cases:
        if case not in ("defaults", "none", "lz4", "zstd"):
            parser.error(f"--small-cases: expected defaults, none, lz4 or zstd, found {case!r}")
    args.small_cases = cases
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    ids = sorted(int(s) for s in rng.choice(args.subpartitions, args.samples, replace=False))
    result: dict[str, Any] = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        | {
            "subpartition_ids": ids,
            "python": sys.version.split()[0],
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "pyarrow": pa.__version__,
            "polars": pl.__version__,
        },
    }
    with tempfile.TemporaryDirectory(prefix="bench-reads-") as tmp:
        root = Path(tmp)
        if args.small_only:
            result["small_reads"] = measure_small_reads(root, args)
            print_tables(result)
            write_results(args.out, result)
            return 0
        tables = list(generate(args.rows, args.files, args.subpartitions, args.seed))
        write_shuffle(str(root / "shuffle"), tables, args.subpartitions, args.region_bytes)
        write_hive(str(root / "hive"), tables, args.subpartitions, _local_output)
        del tables
        data_files = sorted(str(p) for p in (root / "shuffle").glob("*.arrow"))
        methods = local_methods(root, data_files)
        result["local"] = {
            "regions_per_file": [
                f.regions for f in open_dataset(str(root / "shuffle")).manifest.files
            ],
            "methods": time_local(methods, ids, args.repeats),
            "bytes": local_bytes(root, ids, data_files),
        }
        if not args.skip_small:
            result["small_reads"] = measure_small_reads(root, args)
            result["projection"] = measure_projection(root, args)
    if not args.skip_s3:
        result["s3"] = measure_s3(args, ids)
    print_tables(result)
    write_results(args.out, result)
    return 0


def _local_output(path: str) -> Any:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return open(path, "wb")


if __name__ == "__main__":
    raise SystemExit(main())
