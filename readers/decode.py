"""Decode fetched chunk bytes into record batches, checking them against their entries.

The checks are those of validation (:mod:`arrowshuffle.format.chunks`): V16 (CRC32C) and V17
(decoding), here stopping at the first broken one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pyarrow as pa

from arrowshuffle.format.chunks import (
    ChunkBytes,
    check_chunk_crc,
    chunk_violation,
    decode_chunks,
)
from arrowshuffle.readers.byte_ranges import Chunk, ChunkRange, FetchBlock


def _where(url: str, region: int, chunk: Chunk) -> str:
    return (
        f"{url}: chunk (region {region}, subpartition {chunk.subpartition}) at bytes "
        f"[{chunk.offset}, {chunk.offset + chunk.length})"
    )


def verify_chunks(buffer: pa.Buffer, base: int, chunk_range: ChunkRange, url: str) -> None:
    """Check the CRC32C of every chunk of ``chunk_range`` inside ``buffer`` (rule V16).

    ``buffer`` holds the file's bytes from offset ``base`` on.
    """
    for chunk in chunk_range.chunks:
        piece = buffer.slice(chunk.offset - base, chunk.length)
        found = check_chunk_crc(piece, chunk.crc32c, _where(url, chunk_range.region, chunk))
        if found is not None:
            raise found.error()


def decode_range(
    buffer: pa.Buffer,
    chunk_range: ChunkRange,
    schema: pa.Schema,
    url: str,
    *,
    full: bool,
    compression: str = "none",
) -> list[pa.RecordBatch]:
    """Decode the record batches of one chunk range from exactly its bytes (rule V17).

    Each chunk is decoded from its own bytes and must hold exactly the batches and rows its
    entry declares. ``full`` adds Arrow's full validation of every batch; ``compression`` is
    the file's codec (it chooses how batches are decompressed, see ``decode_chunks``).
    """
    chunks = [
        ChunkBytes(
            buffer.slice(chunk.offset - chunk_range.offset, chunk.length),
            chunk.batches,
            chunk.rows,
            _where(url, chunk_range.region, chunk),
        )
        for chunk in chunk_range.chunks
    ]
    return decode_chunks(chunks, schema, full=full, compression=compression)


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
    compression: str = "none",
) -> list[pa.RecordBatch]:
    """Decode every chunk range of one fetched block, in order, repeats expanded.

    Args:
        block: the block; ``buffer`` holds exactly its bytes.
        buffer: the fetched bytes ``[block.offset, block.end)``.
        schema: the file's schema.
        url: the data file, for error messages.
        columns: keep only these columns, in this order.
        verify: check each chunk's CRC32C first, and validate every decoded batch fully.
        compression: the file's body codec, as its index says.
    """
    out: list[pa.RecordBatch] = []
    for chunk_range in block.ranges:
        if verify:
            verify_chunks(buffer, block.offset, chunk_range, url)
        piece = buffer.slice(chunk_range.offset - block.offset, chunk_range.length)
        # A verifying read (the default for bytes that crossed a network) also runs Arrow's
        # full validation, as validation does (V17); an unverified local read stays zero-copy
        # and touches no more than the batches' headers.
        batches = decode_range(
            piece, chunk_range, schema, url, full=verify, compression=compression
        )
        if columns is not None and columns != schema.names:  # all of them, in order: as is
            batches = [b.select(columns) for b in batches]
        out.extend(repeat(batches, chunk_range.repeat))
    return out


def decode_projected(
    block: FetchBlock,
    reader: pa.ipc.RecordBatchFileReader,
    positions: Mapping[int, range],
    columns: list[str],
    url: str,
) -> list[pa.RecordBatch]:
    """Decode the selected columns of every chunk range of one projected block (rule V17).

    Args:
        block: the block.
        reader: the data file opened with ``included_fields`` of the selected columns; it
            reads each batch's metadata and those columns' buffers only.
        positions: the footer positions of each chunk's batches, by the chunk's offset
            (proven to tile the chunk exactly).
        columns: the selected columns, in the order wanted.
        url: the data file, for error messages.
    """
    out: list[pa.RecordBatch] = []
    for chunk_range in block.ranges:
        batches: list[pa.RecordBatch] = []
        for chunk in chunk_range.chunks:
            try:
                found = [reader.get_batch(i) for i in positions[chunk.offset]]
            except (pa.ArrowException, OSError, EOFError) as exc:
                where = _where(url, chunk_range.region, chunk)
                raise chunk_violation(
                    where,
                    f"expected {chunk.batches} record batches of the file's schema, "
                    f"one does not decode: {exc}",
                ).error() from exc
            rows = sum(b.num_rows for b in found)
            if rows != chunk.rows:
                where = _where(url, chunk_range.region, chunk)
                raise chunk_violation(
                    where, f"expected {chunk.rows} rows in {chunk.batches} batches, decoded {rows}"
                ).error()
            batches.extend(b.select(columns) for b in found)
        out.extend(repeat(batches, chunk_range.repeat))
    return out
