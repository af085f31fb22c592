"""The byte-level pieces of copying record batches between Arrow IPC files."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from arrowshuffle.format.errors import CorruptFileError
from arrowshuffle.format.ipc_file import (
    file_tail,
    footer_blocks_range,
    footer_with_blocks,
    split_file_tail,
    walk_messages,
)
from arrowshuffle.writers.ipc_output import ipc_file_frame

SCHEMA = pa.schema([("a", pa.int64()), ("s", pa.string())])


def _batch(i: int, rows: int) -> pa.RecordBatch:
    return pa.record_batch(
        [pa.array(range(i, i + rows)), pa.array([f"x{j}" for j in range(rows)])], schema=SCHEMA
    )


def _messages(batches: list[pa.RecordBatch], compression: str | None) -> bytes:
    """Encapsulated record-batch messages, as a chunk of a data file holds them."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, SCHEMA, options=options) as writer:
        for b in batches:
            writer.write_batch(b)
    data = sink.getvalue().to_pybytes()
    start = SCHEMA.serialize().size
    return data[start : len(data) - 8]  # without the schema message and end-of-stream


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_copied_messages_make_a_valid_file(compression):
    batches = [_batch(i * 10, rows) for i, rows in enumerate([3, 0, 7, 1])]
    chunk = _messages(batches, compression)
    found = walk_messages(chunk, expected=len(batches))
    assert found[0][0] == 0
    assert sum(m + b for _, m, b in found) == len(chunk)
    metadata = {b"k": b"v"}
    header, footer = ipc_file_frame(SCHEMA, metadata)
    blocks = np.array([(len(header) + o, m, b) for o, m, b in found], dtype=np.int64)
    data = header + chunk + file_tail(footer_with_blocks(footer, blocks))
    reader = pa.ipc.open_file(pa.py_buffer(data))
    assert reader.num_record_batches == len(batches)
    assert reader.metadata == metadata
    assert reader.read_all().equals(pa.Table.from_batches(batches))


def test_footer_of_no_batch():
    header, footer = ipc_file_frame(SCHEMA, {})
    assert footer_blocks_range(footer)[1] - footer_blocks_range(footer)[0] == 0
    data = header + file_tail(footer_with_blocks(footer, np.zeros((0, 3), dtype=np.int64)))
    assert pa.ipc.open_file(pa.py_buffer(data)).read_all().num_rows == 0


def test_listing_blocks_again_replaces_those_listed_and_keeps_them_aligned():
    header, footer = ipc_file_frame(SCHEMA, {})
    batches = [_batch(0, 4), _batch(4, 2)]
    chunk = _messages(batches, None)
    blocks = [(len(header) + o, m, b) for o, m, b in walk_messages(chunk, expected=2)]
    once = footer_with_blocks(footer, blocks[:1])
    twice = footer_with_blocks(once, blocks)
    start, stop = footer_blocks_range(twice)
    assert (stop - start) // 24 == 2 and start % 8 == 0
    table = pa.ipc.open_file(pa.py_buffer(header + chunk + file_tail(twice))).read_all()
    assert table.equals(pa.Table.from_batches(batches))


def test_listing_blocks_refuses_bytes_that_are_no_footer():
    with pytest.raises(CorruptFileError):
        footer_with_blocks(b"\x00" * 3, [(8, 16, 0)])
    with pytest.raises(CorruptFileError):
        footer_with_blocks(b"\xff" * 64, [(8, 16, 0)])


def test_walk_refuses_broken_chunks():
    chunk = _messages([_batch(0, 5), _batch(5, 5)], None)
    with pytest.raises(CorruptFileError, match="expected 3 IPC messages"):
        walk_messages(chunk, expected=3)
    with pytest.raises(CorruptFileError, match="body of"):
        walk_messages(chunk[:-8])
    with pytest.raises(CorruptFileError, match="continuation"):
        walk_messages(b"\x00" * 16)
    assert walk_messages(b"") == []


def test_split_file_tail():
    data = b"ARROW1\x00\x00" + b"\xff" * 8 + file_tail(b"F" * 16)
    footer, start = split_file_tail(data)
    assert footer == b"F" * 16 and data[start : start + 16] == footer
    with pytest.raises(CorruptFileError, match="ARROW1"):
        split_file_tail(b"nope" * 4)
