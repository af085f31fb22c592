"""The writer's default compression, its encoder and file output, and its copy-light write path."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest

import arrowshuffle as ash
from arrowshuffle.format import parallel as _threads
from arrowshuffle.format.crc import crc32c_combine
from arrowshuffle.spark.options import parse_write_options
from arrowshuffle.writers.file_writer import DEFAULT_COMPRESSION
from arrowshuffle.writers.ipc_output import BatchEncoder, IpcFileWriter
from arrowshuffle.writers.sink import SMALL_WRITE, write_all
from arrowshuffle.writers.sort_buffer import SortBuffer, batch_groups, combine_ahead

SCHEMA = pa.schema([("key", pa.int64()), ("name", pa.string())])


def table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "key": rng.integers(0, 1000, rows),
            "name": [f"name-{i % 97}" for i in range(rows)],
        },
        schema=SCHEMA,
    )


# ---------------------------------------------------------------------- default compression


def test_the_default_compression_is_zstd_everywhere(tmp_path: Path) -> None:
    assert DEFAULT_COMPRESSION == "zstd"
    data = table(5000)
    with ash.ShuffleFileWriter(tmp_path / "w.arrow", SCHEMA, 4) as writer:
        writer.write(data, subpartitions=np.arange(5000) % 4)
    assert writer.compression == "zstd"
    assert ash.open_file(tmp_path / "w.arrow").compression == "zstd"

    ash.write(data, tmp_path / "f.arrow", num_subpartitions=4, by="key")
    assert ash.open_file(tmp_path / "f.arrow").compression == "zstd"

    ash.write_dataset(data, tmp_path / "ds", num_subpartitions=4, by="key")
    dataset = ash.open_dataset(tmp_path / "ds")
    assert dataset.read().num_rows == 5000
    (name,) = [p.name for p in (tmp_path / "ds").glob("*.arrow")]
    assert ash.open_file(tmp_path / "ds" / name).compression == "zstd"

    # The Spark writer's options take the same default, and an explicit codec wins.
    assert (
        parse_write_options(
            {"path": "x", "num_subpartitions": "4", "partition_by": "key"}
        ).compression
        == "zstd"
    )
    explicit = {"path": "x", "num_subpartitions": "4", "partition_by": "key", "compression": "none"}
    assert parse_write_options(explicit).compression == "none"


def test_none_still_writes_plain_bytes_that_read_back_the_same(tmp_path: Path) -> None:
    data = table(3000)
    ids = np.arange(3000) % 3
    for codec in ("none", None, "zstd"):
        path = tmp_path / f"{codec}.arrow"
        with ash.ShuffleFileWriter(path, SCHEMA, 3, compression=codec) as writer:
            writer.write(data, subpartitions=ids)
        f = ash.open_file(path)
        assert f.compression == ("zstd" if codec == "zstd" else "none")
        for s in range(3):
            assert f.read(s).equals(data.filter(pa.array(ids == s)))
    # Uncompressed files hold the values' bytes as they are; compressed ones do not.
    assert b"name-96" in (tmp_path / "none.arrow").read_bytes()
    assert (tmp_path / "zstd.arrow").stat().st_size < (tmp_path / "none.arrow").stat().st_size


# ---------------------------------------------------------------------- the sink


class Recorder(io.RawIOBase):
    """An unbuffered stream that keeps every object it was handed."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.calls.append(data)
        return memoryview(data).nbytes

    def content(self) -> bytes:
        return b"".join(bytes(memoryview(c)) for c in self.calls)


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_encoded_batches_make_a_file_pyarrow_reads_with_their_checksums(
    compression: str,
) -> None:
    batches = [table(rows, seed=rows).to_batches()[0] for rows in (100_000, 1, 7_000)]
    batches.insert(1, pa.RecordBatch.from_pylist([], schema=SCHEMA))
    encoder = BatchEncoder(SCHEMA, compression)
    raw = Recorder()
    out = IpcFileWriter(raw, SCHEMA, {b"k": b"v"})
    crc = 0
    start = out.position
    for batch in batches:
        encoded = encoder.encode(batch)
        assert encoded.rows == batch.num_rows
        message = b"".join(bytes(memoryview(p).cast("B")) for p in encoded.pieces)
        assert len(message) == encoded.length
        assert encoded.crc32c == google_crc32c.value(message)
        assert message[:4] == b"\xff\xff\xff\xff"
        assert pa.ipc.read_message(pa.py_buffer(message)).metadata.size + 8 <= encoded.meta_length
        crc = crc32c_combine(crc, encoded.crc32c, encoded.length)
        out.write(encoded)
    end = out.position
    size = out.close()
    data = raw.content()
    assert size == len(data) == out.position and out.batches == len(batches)
    # The messages' checksums combine into the checksum of their bytes in the file.
    assert crc == google_crc32c.value(data[start:end])
    reader = pa.ipc.open_file(pa.py_buffer(data))
    assert reader.metadata == {b"k": b"v"}
    assert reader.num_record_batches == len(batches)
    assert reader.read_all().equals(pa.Table.from_batches(batches, schema=SCHEMA))


def test_the_file_output_passes_body_buffers_whole_and_gathers_small_writes() -> None:
    encoder = BatchEncoder(SCHEMA, "none")
    tiny = [encoder.encode(table(3, seed=i).to_batches()[0]) for i in range(5)]
    big = encoder.encode(table(50_000).to_batches()[0])
    raw = Recorder()
    out = IpcFileWriter(raw, SCHEMA, {})
    for encoded in tiny:
        out.write(encoded)
    assert raw.calls == []  # the header and five small messages wait for something large
    out.write(big)
    small = [p for p in big.pieces if memoryview(p).nbytes < SMALL_WRITE]
    large = [p for p in big.pieces if memoryview(p).nbytes >= SMALL_WRITE]
    assert large and all(isinstance(p, pa.Buffer) for p in large)
    # One write for everything small before the first large buffer, then that buffer itself.
    first_large = next(i for i, p in enumerate(big.pieces) if p is large[0])
    assert raw.calls[1] is large[0]
    assert bytes(raw.calls[0]).endswith(b"".join(bytes(p) for p in big.pieces[:first_large]))
    assert all(any(c is p for c in raw.calls) for p in large)
    size = out.close()
    assert size == len(raw.content()) and len(small) >= 1
    assert pa.ipc.open_file(pa.py_buffer(raw.content())).num_record_batches == 6


def test_an_encoder_that_failed_encodes_the_next_batch_alone() -> None:
    encoder = BatchEncoder(SCHEMA, "none")
    good = table(10).to_batches()[0]
    expected = encoder.encode(good)
    with pytest.raises(pa.ArrowInvalid):
        encoder.encode(pa.record_batch({"other": [1, 2]}))
    again = encoder.encode(good)
    assert again.length == expected.length and again.crc32c == expected.crc32c


def test_encoders_on_several_threads_give_the_bytes_of_one() -> None:
    from concurrent.futures import ThreadPoolExecutor

    batches = [table(5_000, seed=i).to_batches()[0] for i in range(16)]
    encoder = BatchEncoder(SCHEMA, "zstd")
    alone = [encoder.encode(b) for b in batches]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(BatchEncoder(SCHEMA, "zstd").encode, batches))

    def joined(e: Any) -> bytes:
        return b"".join(bytes(memoryview(p).cast("B")) for p in e.pieces)

    assert [joined(e) for e in threaded] == [joined(e) for e in alone]


def test_a_one_subpartition_file_reads_back_whole_with_pyarrow(tmp_path: Path) -> None:
    # One subpartition, ids in order: the writer's batches are the input's, so pyarrow alone
    # must read the data file back as the input (the sink neither drops nor reorders bytes).
    data = table(200_000, seed=3)
    path = tmp_path / "one.arrow"
    with ash.ShuffleFileWriter(path, SCHEMA, 1, compression="none") as writer:
        writer.write(data, subpartitions=np.zeros(data.num_rows, dtype=np.int64))
    got = pa.ipc.open_file(path).read_all()
    assert got.equals(data)
    index = ash.open_file(path).stats()
    assert index.num_rows == 1


# ---------------------------------------------------------------------- sorting and combining


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_sorting_on_the_pool_keeps_arrival_order_and_ignores_reused_ids(
    monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    monkeypatch.setenv(_threads.NUM_THREADS_ENV, str(threads))
    monkeypatch.setattr("arrowshuffle.writers.sort_buffer.MIN_ROWS_PER_THREAD", 1)
    buffer = SortBuffer(5)
    ids = np.empty(1000, dtype=np.int64)  # one array, reused for every batch
    expected: list[list[int]] = [[] for _ in range(5)]
    for b in range(12):
        rng = np.random.default_rng(b)
        ids[:] = rng.integers(0, 5, 1000)
        keys = np.arange(b * 1000, (b + 1) * 1000)
        buffer.add(pa.record_batch({"key": keys}), ids)
        for s in range(5):
            expected[s] += keys[ids == s].tolist()
        ids[:] = 4  # the caller reuses its array at once: the buffer must have copied it
    got = {
        s: [k for piece in slices for k in piece["key"].to_pylist()]
        for s, slices in buffer.chunks()
    }
    assert got == dict(enumerate(expected))
    assert not buffer and buffer.nbytes == 0


@pytest.mark.parametrize("threads", [1, 2])
def test_combine_ahead_yields_each_group_in_order(
    monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    monkeypatch.setenv(_threads.NUM_THREADS_ENV, str(threads))
    monkeypatch.setattr("arrowshuffle.writers.sort_buffer.MIN_ROWS_PER_THREAD", 100)
    whole = pa.record_batch({"n": np.arange(1000)})
    slices = [whole.slice(start, 37) for start in range(0, 1000, 37)]
    groups = batch_groups(slices, 100)
    assert [sum(p.num_rows for p in g) for g in groups] == [100] * 10

    def finish(batch: pa.RecordBatch) -> tuple[int, pa.RecordBatch]:
        return threading.get_ident(), batch

    out = list(combine_ahead(((f"g{i}", g) for i, g in enumerate(groups)), finish))
    assert [key for key, _ in out] == [f"g{i}" for i in range(10)]
    assert [b.num_rows for _, (_, b) in out] == [100] * 10
    rows = pa.Table.from_batches([b for _, (_, b) in out]).column("n").to_pylist()
    assert rows == list(range(1000))
    # With a pool thread, groups are combined and finished there; without, here.
    elsewhere = {t for _, (t, _) in out} - {threading.get_ident()}
    assert bool(elsewhere) == (threads > 1)
    assert list(combine_ahead([], finish)) == []


class ShortWriter(Recorder):
    """A raw file that takes at most ``most`` bytes per call, as an unbuffered file may."""

    def __init__(self, most: int) -> None:
        super().__init__()
        self.most = most

    def write(self, data: Any) -> int:
        taken = memoryview(data).cast("B")[: self.most]
        self.calls.append(bytes(taken))
        return taken.nbytes


def test_the_file_output_writes_every_byte_to_a_file_that_takes_fewer_per_call() -> None:
    raw = ShortWriter(most=1000)
    out = IpcFileWriter(raw, SCHEMA, {})
    batch = table(30_000).to_batches()[0]
    out.write(BatchEncoder(SCHEMA, "none").encode(batch))
    assert out.close() == len(raw.content())
    assert max(len(c) for c in raw.calls) <= 1000
    assert pa.ipc.open_file(pa.py_buffer(raw.content())).read_all().equals(pa.table(batch))


def test_writing_refuses_a_file_that_takes_nothing() -> None:
    with pytest.raises(OSError, match="took no bytes"):
        write_all(ShortWriter(most=0), pa.py_buffer(bytes(SMALL_WRITE)))


@pytest.mark.parametrize(
    ("ids", "bad"),
    [
        (np.array([0, -1, 2], np.int32), -1),
        (np.array([0, 5, 2], np.int64), 5),
        (np.array([3, 4], np.uint8), 4),
        (np.array([0, -3], ">i8"), -3),
        (np.array([-(2**63), 9], np.int64), -(2**63)),
    ],
)
def test_ids_outside_the_subpartitions_are_named(tmp_path: Path, ids: np.ndarray, bad: int) -> None:
    writer = ash.ShuffleFileWriter(tmp_path / "w.arrow", SCHEMA, 4)
    with pytest.raises(
        ash.InvalidOptionError, match=rf"ids must be in \[0, 4\), found {bad} at row"
    ):
        writer.write(table(len(ids)), subpartitions=ids)
    writer.write(table(2), subpartitions=np.array([1, 3], ">i4"))  # big-endian ids in range
    assert writer.close().rows == 2


class FullDisk:
    """A data file whose ``fail_at``-th write raises ENOSPC, as a full disk does."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.calls = 0
        self.fail_at: int | None = None

    def write(self, data: Any) -> int:
        self.calls += 1
        if self.calls == self.fail_at:
            raise OSError(28, "No space left on device")
        return self.file.write(data)  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)


@pytest.mark.parametrize("broadcast", [False, True])
def test_a_region_that_failed_to_write_aborts_the_writer_and_publishes_nothing(
    tmp_path: Path, broadcast: bool
) -> None:
    path = tmp_path / "w.arrow"
    data = table(200_000)
    ids = np.arange(data.num_rows) % 4
    writer = ash.ShuffleFileWriter(path, SCHEMA, 4, compression="none", max_batch_rows=50_000)
    disk = FullDisk(writer._data.file)
    writer._data.file = disk
    writer._file._out = disk
    writer.write(data, subpartitions=ids)
    writer.flush_region()  # a whole region on disk
    disk.fail_at = disk.calls + 3  # part of the next one
    with pytest.raises(OSError, match="No space left"):
        if broadcast:
            writer.write_broadcast(data)
        else:
            writer.write(data, subpartitions=ids)
        writer.flush_region()
    # The region's rows are lost: nothing more is taken and nothing is published.
    with pytest.raises(ash.InvalidOptionError, match="aborted when writing a region failed"):
        writer.write(data, subpartitions=ids)
    with pytest.raises(ash.InvalidOptionError, match="No space left"):
        writer.close()
    assert list(tmp_path.iterdir()) == []


def test_empty_subpartitions_between_and_after_written_ones_start_where_the_last_ended(
    tmp_path: Path,
) -> None:
    from arrowshuffle.readers.file_reader import open_file

    ids = np.array([3, 3, 1, 5, 1], dtype=np.int64)
    batch = pa.record_batch({"key": pa.array(range(5), pa.int64())})
    with ash.ShuffleFileWriter(str(tmp_path / "e.arrow"), batch.schema, 8) as w:
        w.write(batch, subpartitions=ids)
    f = open_file(str(tmp_path / "e.arrow"))
    entries = f.entries()[:, 0]
    ends = entries["offset"] + entries["length"]
    # Every chunk starts where the one before it ended; the empty ones hold nothing.
    assert (entries["offset"][1:] == ends[:-1]).all()
    assert entries["rows"].tolist() == [0, 2, 0, 2, 0, 1, 0, 0]
    assert [f.read(s).num_rows for s in range(8)] == [0, 2, 0, 2, 0, 1, 0, 0]
    assert f.read(3).column("key").to_pylist() == [0, 1]
