"""Decode fetched chunk bytes into record batches, checking them against their entries."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from arrowshuffle.format.crc import crc32c
from arrowshuffle.format.errors import ChecksumMismatchError, CorruptFileError
from arrowshuffle.readers.byte_ranges import Chunk, ChunkRange, FetchBlock


def verify_chunks(buffer: pa.Buffer, base: int, chunk_range: ChunkRange, url: str) -> None:
    """Check the CRC32C of every chunk of ``chunk_range`` inside ``buffer`` (rule V16).

    ``buffer`` holds the file's bytes from offset ``base`` on.
    """
    for chunk in chunk_range.chunks:
        actual = crc32c(buffer.slice(chunk.offset - base, chunk.length))
        if actual != chunk.crc32c:
            raise ChecksumMismatchError(
                f"{url}: chunk (region {chunk_range.region}, subpartition {chunk.subpartition}) "
                f"at bytes [{chunk.offset}, {chunk.offset + chunk.length}): stored CRC32C "
                f"{chunk.crc32c:#010x}, computed {actual:#010x}",
                rule="V16",
            )


def decode_range(
    buffer: pa.Buffer, chunk_range: ChunkRange, schema: pa.Schema, url: str
) -> list[pa.RecordBatch]:
    """Decode the record batches of one chunk range from exactly its bytes (rule V17).

    Each chunk is decoded from its own bytes and must hold exactly the batches and rows its
    entry declares: totals that agree over a range could hide rows moved between chunks.
    """
    batches: list[pa.RecordBatch] = []
    for chunk in chunk_range.chunks:
        piece = buffer.slice(chunk.offset - chunk_range.offset, chunk.length)
        batches.extend(_decode_chunk(piece, chunk, chunk_range.region, schema, url))
    return batches


def _decode_chunk(
    piece: pa.Buffer, chunk: Chunk, region: int, schema: pa.Schema, url: str
) -> list[pa.RecordBatch]:
    reader = pa.BufferReader(piece)
    batches = []
    rows = 0
    where = f"{url}: chunk (region {region}, subpartition {chunk.subpartition})"
    try:
        for _ in range(chunk.batches):
            message = pa.ipc.read_message(reader)
            batch = pa.ipc.read_record_batch(message, schema)
            rows += batch.num_rows
            batches.append(batch)
    except (pa.ArrowException, EOFError, OSError) as exc:
        # Damaged bytes surface as any pyarrow error: invalid, IO, out of memory for a
        # hostile declared length, or an end of stream in the middle of a message.
        raise CorruptFileError(
            f"{where}: expected {chunk.batches} record batches, decoding batch {len(batches)} "
            f"failed: {exc}",
            rule="V17",
        ) from exc
    if rows != chunk.rows or reader.tell() != piece.size:
        raise CorruptFileError(
            f"{where}: expected {chunk.batches} batches of {chunk.rows} rows in {piece.size} "
            f"bytes, decoded {rows} rows from {reader.tell()} bytes",
            rule="V17",
        )
    return batches


def repeat(batches: list[pa.RecordBatch], times: int) -> Iterator[pa.RecordBatch]:
    """Hand out the same (immutable, zero-copy) batches ``times`` times."""
    for _ in range(times):
        yield from batches


def decode_block(
    block: FetchBlock,
    buffer: pa.Buffer,
    schema: pa.Schema,
    url: str,
    *,
    columns: list[str] | None = None,
    verify: bool = False,
) -> list[pa.RecordBatch]:
    """Decode every chunk range of one fetched block, in order, repeats expanded.

    Args:
        block: the block; ``buffer`` holds exactly its bytes.
        buffer: the fetched bytes ``[block.offset, block.end)``.
        schema: the file's schema.
        url: the data file, for error messages.
        columns: keep only these columns, in this order.
        verify: check each chunk's CRC32C first.
    """
    out: list[pa.RecordBatch] = []
    for chunk_range in block.ranges:
        if verify:
            verify_chunks(buffer, block.offset, chunk_range, url)
        piece = buffer.slice(chunk_range.offset - block.offset, chunk_range.length)
        batches = decode_range(piece, chunk_range, schema, url)
        if columns is not None:
            batches = [b.select(columns) for b in batches]
        out.extend(repeat(batches, chunk_range.repeat))
    return out
