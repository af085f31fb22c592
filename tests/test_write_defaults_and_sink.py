"""The writer's default compression, its sink and the pieces of its copy-light write path."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest

import arrowshuffle as ash
from arrowshuffle.format import parallel as _threads
from arrowshuffle.spark.options import parse_write_options
from arrowshuffle.writers.file_writer import DEFAULT_COMPRESSION
from arrowshuffle.writers.sink import SMALL_WRITE, ChecksummingSink
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


def test_sink_gathers_small_writes_and_passes_large_buffers_whole() -> None:
    raw = Recorder()
    sink = ChecksummingSink(raw)
    big = pa.py_buffer(np.arange(SMALL_WRITE, dtype=np.uint8).tobytes())
    pieces: list[Any] = [b"head", b"er", big, b"tail", b"!"]
    sink.begin_chunk(3)
    for piece in pieces:
        sink.write(piece)
    # The two small writes went out together, right before the large buffer, itself not copied.
    assert len(raw.calls) == 2 and bytes(raw.calls[0]) == b"header"
    assert raw.calls[1] is big
    sink.flush()
    expected = b"".join(bytes(memoryview(p)) for p in pieces)
    assert raw.content() == expected
    assert sink.position == sink.tell() == len(expected)
    assert sink.chunk_crc32c == google_crc32c.value(expected[3:])


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
    whole = pa.record_batch({"n": np.arange(1000)})
    slices = [whole.slice(start, 37) for start in range(0, 1000, 37)]
    groups = batch_groups(slices, 100)
    assert [sum(p.num_rows for p in g) for g in groups] == [100] * 10
    out = list(combine_ahead(groups))
    assert [b.num_rows for b in out] == [100] * 10
    assert pa.Table.from_batches(out).column("n").to_pylist() == list(range(1000))
    assert list(combine_ahead([])) == []


class ShortWriter(Recorder):
    """A raw file that takes at most ``most`` bytes per call, as an unbuffered file may."""

    def __init__(self, most: int) -> None:
        super().__init__()
        self.most = most

    def write(self, data: Any) -> int:
        taken = memoryview(data).cast("B")[: self.most]
        self.calls.append(bytes(taken))
        return taken.nbytes


def test_the_sink_writes_every_byte_to_a_file_that_takes_fewer_per_call() -> None:
    raw = ShortWriter(most=1000)
    sink = ChecksummingSink(raw)
    big = pa.py_buffer(np.arange(3 * SMALL_WRITE + 7, dtype=np.int64).tobytes())
    pieces: list[Any] = [b"head", big, b"tail"]
    for piece in pieces:
        sink.write(piece)
    sink.flush()
    expected = b"".join(bytes(memoryview(p)) for p in pieces)
    assert raw.content() == expected and sink.position == len(expected)
    assert max(len(c) for c in raw.calls) <= 1000


def test_the_sink_refuses_a_file_that_takes_nothing() -> None:
    sink = ChecksummingSink(ShortWriter(most=0))
    with pytest.raises(OSError, match="took no bytes"):
        sink.write(pa.py_buffer(bytes(SMALL_WRITE)))
