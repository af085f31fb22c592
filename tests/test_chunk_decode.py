"""Decoding a chunk's compressed batches without Arrow's threads gives the same batches (V17).

A compressed chunk is read as a stream behind its schema's message (``format/ipc_stream``);
these tests hold that path to what pyarrow's own readers decode, and to the V17 errors of
damaged chunks, with and without Arrow's threads.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arrowshuffle.format import chunks
from arrowshuffle.format.chunks import (
    THREADED_DECODE_MIN_BODY,
    ChunkBytes,
    decode_chunk,
    decode_chunks,
)
from arrowshuffle.format.errors import FormatError
from arrowshuffle.format.ipc_stream import BatchStream, _ChainedBuffers
from arrowshuffle.writers.merge import _GroupWriter, _Piece

WHERE = "chunk (region 0, subpartition 0)"


def sample_table(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    words = np.char.add("w", rng.integers(0, 1000, rows).astype(str))
    return pa.table(
        {
            "k": pa.array(rng.integers(-(2**40), 2**40, rows), pa.int64()),
            "x": pa.array(rng.random(rows)),
            "s": pa.array(words).cast(pa.string()),
            "n": pa.array([None if i % 7 == 0 else i for i in range(rows)], pa.int32()),
        }
    )


def chunk_bytes(table: pa.Table, codec: str | None, batch_rows: int) -> tuple[pa.Buffer, int]:
    """The record-batch messages of ``table`` as one chunk (a stream without its schema)."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=batch_rows)
    stream = sink.getvalue()
    head = table.schema.serialize().size
    end_of_stream = 8
    batches = len(table.to_batches(max_chunksize=batch_rows))
    return stream.slice(head, stream.size - head - end_of_stream), batches


def expected_batches(data: pa.Buffer, schema: pa.Schema, count: int) -> list[pa.RecordBatch]:
    reader = pa.BufferReader(data)
    return [pa.ipc.read_record_batch(pa.ipc.read_message(reader), schema) for _ in range(count)]


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
@pytest.mark.parametrize("threaded", [False, True])
def test_a_compressed_chunk_decodes_as_arrow_decodes_it(
    codec: str, threaded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The threshold moved so that both ways (with and without Arrow's threads) are taken.
    monkeypatch.setitem(THREADED_DECODE_MIN_BODY, codec, 0 if threaded else 1 << 40)
    table = sample_table(5000)
    data, count = chunk_bytes(table, codec, 1200)
    got = decode_chunk(data, table.schema, count, table.num_rows, WHERE, compression=codec)
    assert len(got) == count == 5
    assert pa.Table.from_batches(got).equals(table)
    want = expected_batches(data, table.schema, count)
    assert [b.num_rows for b in got] == [b.num_rows for b in want]


def test_the_threshold_chooses_threads_by_the_largest_body(monkeypatch: pytest.MonkeyPatch) -> None:
    # Below the threshold the chunk is one stream without Arrow's threads; from it on, each
    # message goes to pyarrow's read_record_batch, which decompresses on Arrow's threads.
    streams: list[bool] = []
    real = chunks.BatchStream

    def spy(schema_message: pa.Buffer, messages: list[pa.Buffer], *, use_threads: bool):  # type: ignore[no-untyped-def]
        streams.append(use_threads)
        return real(schema_message, messages, use_threads=use_threads)

    monkeypatch.setattr(chunks, "BatchStream", spy)
    table = sample_table(3000)
    data, count = chunk_bytes(table, "lz4", 1000)
    bodies = []
    reader = pa.BufferReader(data)
    for _ in range(count):
        bodies.append(pa.ipc.read_message(reader).body.size)
    monkeypatch.setitem(THREADED_DECODE_MIN_BODY, "lz4", max(bodies) + 1)
    small = decode_chunk(data, table.schema, count, table.num_rows, WHERE, compression="lz4")
    assert streams == [False]
    monkeypatch.setitem(THREADED_DECODE_MIN_BODY, "lz4", max(bodies))
    large = decode_chunk(data, table.schema, count, table.num_rows, WHERE, compression="lz4")
    assert streams == [False]
    assert pa.Table.from_batches(small).equals(pa.Table.from_batches(large))


@pytest.mark.parametrize(("stored", "declared"), [("lz4", "none"), (None, "zstd"), ("zstd", "lz4")])
def test_a_codec_the_index_misstates_still_decodes_the_same_rows(
    stored: str | None, declared: str
) -> None:
    # The index's codec flag only chooses how to decode: every body says its own codec.
    table = sample_table(2000)
    data, count = chunk_bytes(table, stored, 700)
    got = decode_chunk(data, table.schema, count, table.num_rows, WHERE, compression=declared)
    assert pa.Table.from_batches(got).equals(table)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(0, 3000),
    batch_rows=st.integers(1, 1500),
    codec=st.sampled_from(["lz4", "zstd"]),
    seed=st.integers(0, 2**16),
)
def test_round_trip_of_any_split_into_batches(
    rows: int, batch_rows: int, codec: str, seed: int
) -> None:
    table = sample_table(rows, seed)
    data, count = chunk_bytes(table, codec, batch_rows)
    got = decode_chunk(data, table.schema, count, rows, WHERE, compression=codec)
    assert len(got) == count
    assert pa.Table.from_batches(got, schema=table.schema).equals(table)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_damaged_compressed_body_breaks_v17_naming_the_batch(codec: str) -> None:
    table = sample_table(3000)
    data, count = chunk_bytes(table, codec, 1000)
    reader = pa.BufferReader(data)
    pa.ipc.read_message(reader)
    second = reader.tell()
    message = pa.ipc.read_message(reader)
    raw = bytearray(data.to_pybytes())
    # The second batch's first compressed buffer: its length prefix, then frame bytes.
    body_start = reader.tell() - message.body.size
    raw[body_start + 8 : body_start + 40] = b"\xa5" * 32
    assert body_start > second
    with pytest.raises(FormatError, match="batch 1 does not decode") as caught:
        decode_chunk(pa.py_buffer(bytes(raw)), table.schema, count, 3000, WHERE, compression=codec)
    assert caught.value.rule == "V17"


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_truncated_compressed_chunk_breaks_v17(codec: str) -> None:
    table = sample_table(3000)
    data, count = chunk_bytes(table, codec, 1000)
    cut = data.slice(0, data.size - 100)
    with pytest.raises(FormatError, match="batch 2 does not decode") as caught:
        decode_chunk(cut, table.schema, count, 3000, WHERE, compression=codec)
    assert caught.value.rule == "V17"


def test_trailing_bytes_after_the_declared_batches_break_v17() -> None:
    table = sample_table(2000)
    data, count = chunk_bytes(table, "lz4", 1000)
    with pytest.raises(FormatError, match="decoded 1000 rows from") as caught:
        decode_chunk(data, table.schema, count - 1, 1000, WHERE, compression="lz4")
    assert caught.value.rule == "V17"


def test_a_schema_message_inside_a_compressed_chunk_breaks_v17() -> None:
    table = sample_table(100)
    data, _ = chunk_bytes(table, "zstd", 100)
    mixed = pa.py_buffer(table.schema.serialize().to_pybytes() + data.to_pybytes())
    with pytest.raises(FormatError, match="batch 0 is a 'schema' message") as caught:
        decode_chunk(mixed, table.schema, 2, 100, WHERE, compression="zstd")
    assert caught.value.rule == "V17"


def _range_of_chunks(codec: str) -> tuple[pa.Schema, list[ChunkBytes], list[pa.Table]]:
    """Four consecutive chunks of one range, cut from one buffer as a reader fetches them.

    Chunk 2 holds one batch of 40,000 rows, whose body is above the threaded threshold.
    """
    tables = [sample_table(rows, seed) for seed, rows in enumerate([1700, 1, 40_000, 2500])]
    pieces = [chunk_bytes(t, codec, 1000 if t.num_rows < 10_000 else 40_000) for t in tables]
    whole = _join(*(data for data, _ in pieces))
    chunks_, offset = [], 0
    for i, ((data, count), table) in enumerate(zip(pieces, tables, strict=True)):
        where = f"chunk (region 0, subpartition {i})"
        chunks_.append(ChunkBytes(whole.slice(offset, data.size), count, table.num_rows, where))
        offset += data.size
    return tables[0].schema, chunks_, tables


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_consecutive_chunks_decode_as_each_alone_through_fewer_readers(
    codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema, range_, tables = _range_of_chunks(codec)
    assert range_[2].data.size > THREADED_DECODE_MIN_BODY[codec]  # the large one is threaded
    opened: list[int] = []
    real_open = chunks._SharedStream.open

    def counted_open(schema: pa.Schema, parts: list[pa.Buffer]) -> Any:
        opened.append(len(parts))
        return real_open(schema, parts)

    monkeypatch.setattr(chunks._SharedStream, "open", counted_open)
    together = decode_chunks(range_, schema, compression=codec)
    # Chunks 0 and 1 share a stream; the large chunk 2 is decoded on Arrow's threads, message
    # by message; chunk 3 starts a stream of its own where its bytes start.
    assert opened == [4, 1]  # over the chunks left to decode
    alone = [
        b
        for c in range_
        for b in decode_chunk(c.data, schema, c.batches, c.rows, c.where, compression=codec)
    ]
    assert [b.num_rows for b in together] == [b.num_rows for b in alone]
    assert pa.Table.from_batches(together).equals(pa.Table.from_batches(alone))
    assert pa.Table.from_batches(together).equals(pa.concat_tables(tables))


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_broken_chunk_inside_a_range_is_named_and_decoding_stops_there(codec: str) -> None:
    schema, range_, _ = _range_of_chunks(codec)
    first = range_[0]  # two batches: 1,000 and 700 rows
    # Chunk 0 declares one batch fewer: its second message becomes bytes trailing its batches.
    short = first._replace(batches=1, rows=1000)
    with pytest.raises(FormatError, match=r"subpartition 0\): expected 1 batches with 1000 rows"):
        decode_chunks([short, *range_[1:]], schema, compression=codec)
    # Rows moved between the declared counts of chunks 0 and 1: totals agree, chunk 0 does not.
    moved = [first._replace(rows=first.rows + 1), range_[1]._replace(rows=0), *range_[2:]]
    expected = r"subpartition 0\): expected 2 batches with 1701 rows"
    with pytest.raises(FormatError, match=expected) as caught:
        decode_chunks(moved, schema, compression=codec)
    assert caught.value.rule == "V17"
    # A chunk cut short in the middle of a range: the next chunk's bytes are not read as its.
    cut = range_[1]._replace(data=range_[1].data.slice(0, range_[1].data.size - 16))
    with pytest.raises(FormatError, match=r"subpartition 1\): .*batch 0 does not decode"):
        decode_chunks([range_[0], cut, *range_[2:]], schema, compression=codec)


def test_decoded_buffers_of_an_uncompressed_stream_are_not_copied() -> None:
    table = sample_table(1000)
    data, count = chunk_bytes(table, None, 1000)
    stream = BatchStream(table.schema.serialize(), [data], use_threads=False)
    # Taking the batches checks that they end exactly at the end of the messages.
    (batch,) = stream.batches(1, data.size)
    values = batch.column("k").buffers()[1]
    assert data.address <= values.address < data.address + data.size
    with pytest.raises(pa.ArrowInvalid, match="the stream ended before batch 0 of 1"):
        list(stream.batches(1, data.size))  # the end of the buffers is the end of the stream
    assert count == 1


def test_batches_that_end_before_their_bytes_are_refused() -> None:
    table = sample_table(1000)
    data, _ = chunk_bytes(table, "lz4", 1000)
    stream = BatchStream(table.schema.serialize(), [data], use_threads=False)
    with pytest.raises(pa.ArrowInvalid, match=f"end at byte {data.size} of the messages"):
        list(stream.batches(1, data.size + 8))


def test_chained_buffers_serve_reads_across_parts() -> None:
    parts = [pa.py_buffer(b"abc"), pa.py_buffer(b""), pa.py_buffer(b"defgh"), pa.py_buffer(b"ij")]
    chained = _ChainedBuffers(parts)
    assert chained.read_buffer(2).to_pybytes() == b"ab"
    assert chained.read_buffer(4).to_pybytes() == b"cdef"  # across a part (joined)
    assert chained.read(1) == b"g"
    assert chained.tell() == 7
    assert chained.read_buffer(None).to_pybytes() == b"hij"
    assert chained.read_buffer(5).to_pybytes() == b""
    assert chained.tell() == 10
    whole = _ChainedBuffers(parts[2:3]).read_buffer(5)
    assert whole.address == parts[2].address  # one part's slice is handed over as it is


class _LateExtension(pa.ExtensionType):
    """An extension type registered only after a schema holding it was read."""

    def __init__(self) -> None:
        super().__init__(pa.int64(), "arrowshuffle.test.late")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(
        cls, storage_type: pa.DataType, serialized: bytes
    ) -> pa.ExtensionType:
        return cls()


def test_both_decode_paths_keep_the_schema_they_were_given() -> None:
    # A schema read (as from an index) before its extension type was registered holds the
    # storage type; the stream would read the registered extension back. Every batch of a
    # read must carry the schema the reader holds, whichever path decodes it.
    values = pa.ExtensionArray.from_storage(_LateExtension(), pa.array(range(100), pa.int64()))
    table = pa.table({"e": values})
    data, count = chunk_bytes(table, "zstd", 50)
    read_before = pa.ipc.read_schema(table.schema.serialize())
    assert read_before.field("e").type == pa.int64()
    pa.register_extension_type(_LateExtension())
    try:
        small = decode_chunk(data, read_before, count, 100, WHERE, compression="zstd")
        per_message = decode_chunk(data, read_before, count, 100, WHERE, compression="none")
    finally:
        pa.unregister_extension_type("arrowshuffle.test.late")
    assert [b.schema for b in small] == [read_before] * count
    assert pa.Table.from_batches(per_message + small).num_rows == 200


def _piece(data: pa.Buffer, batches: int, rows: int, name: str) -> _Piece:
    return _Piece(data, batches, rows, 0, lambda: name)  # type: ignore[arg-type]


def _messages(table: pa.Table, codec: str, batch_rows: int) -> list[pa.Buffer]:
    data, count = chunk_bytes(table, codec, batch_rows)
    reader = pa.BufferReader(data)
    out = []
    for _ in range(count):
        start = reader.tell()
        pa.ipc.read_message(reader)
        out.append(data.slice(start, reader.tell() - start))
    return out


def _join(*parts: pa.Buffer) -> pa.Buffer:
    return pa.py_buffer(b"".join(p.to_pybytes() for p in parts))


END_OF_STREAM = pa.py_buffer(b"\xff\xff\xff\xff\x00\x00\x00\x00")


@pytest.mark.parametrize(
    ("case", "layout"),
    [
        (
            "bytes trail the last chunk",
            lambda m, empty: [
                (m[0], 1, 1000),
                (_join(m[1], m[2], END_OF_STREAM, pa.py_buffer(b"junk" * 4)), 2, 2000),
            ],
        ),
        (
            "a batch moved between chunks",
            lambda m, empty: [(_join(m[0], m[1]), 1, 2000), (m[2], 2, 1000)],
        ),
        (
            "a boundary moved by an empty batch",
            lambda m, empty: [(m[0], 2, 1000), (_join(empty, m[1]), 1, 1000)],
        ),
    ],
)
def test_rebatching_compaction_refuses_chunks_whose_batches_do_not_end_with_their_bytes(
    case: str, layout: Any
) -> None:
    # The run is decoded as one stream: each chunk's declared batches must end exactly where
    # its bytes do, or totals that agree would hide a moved boundary or trailing bytes.
    table = sample_table(3000)
    messages = _messages(table, "zstd", 1000)
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, table.schema, options=options) as stream:
        stream.write_batch(table.to_batches()[0].slice(0, 0))
    head = table.schema.serialize().size
    empty = sink.getvalue().slice(head, sink.getvalue().size - head - END_OF_STREAM.size)
    pieces = [_piece(d, b, r, f"chunk {i}") for i, (d, b, r) in enumerate(layout(messages, empty))]
    writer = SimpleNamespace(_schema_message=None, schema=table.schema, codec="zstd", url="u")
    with pytest.raises(FormatError) as caught:
        _GroupWriter._decode(writer, pieces)  # type: ignore[arg-type]
    assert caught.value.rule == "V17", case
    good = [
        _piece(messages[0], 1, 1000, "a"),
        _piece(_join(messages[1], messages[2]), 2, 2000, "b"),
    ]
    decoded = _GroupWriter._decode(writer, good)  # type: ignore[arg-type]
    assert pa.Table.from_batches(decoded).equals(table)
