"""The checks of a data file's chunks (rules V16-V19). Pure: chunk bytes in, batches out.

The reader, validation and compaction all check chunks with these functions: the reader when
it verifies (on object stores by default), validation with ``--deep``, compaction before it
copies a chunk's bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from arrowshuffle.format.arrow_types import empty_batch
from arrowshuffle.format.crc import crc32c
from arrowshuffle.format.errors import ArrowShuffleError, ChecksumMismatchError
from arrowshuffle.format.ipc_stream import BatchStream
from arrowshuffle.format.partitioners import PARTITIONER_NAMES, recompute_subpartitions
from arrowshuffle.format.partitioners.registry import EXPLICIT
from arrowshuffle.format.rule_registry import Violation, implements


@implements("V16")
def check_chunk_crc(data: Any, stored: int, where: str | Callable[[], str]) -> Violation | None:
    """V16: the chunk's bytes match the CRC32C of its entry.

    Args:
        data: exactly the chunk's bytes (a pyarrow buffer or any buffer-protocol object).
        stored: the entry's ``crc32c``.
        where: names the chunk (its file, region, subpartition and byte range); a callable
            is called only when the check fails, to spare building the name of every chunk.
    """
    actual = crc32c(data)
    if actual == stored:
        return None
    if callable(where):
        where = where()
    return Violation(
        "V16",
        f"{where}: stored CRC32C {stored:#010x}, computed {actual:#010x}",
        ChecksumMismatchError,
    )


#: The compressed body from which a batch is decompressed on Arrow's threads: below it, handing
#: the batch to the pool and waiting costs more than decompressing it on one thread (which
#: also takes about half the CPU time). Measured on two cores: the crossing lies near 230 KiB
#: of LZ4 bodies and 150 KiB of ZSTD ones; 700 KiB LZ4 bodies decoded in 0.6 times the time
#: with the threads, 4k-row batches (120 KiB) in 0.6 times the time without.
THREADED_DECODE_MIN_BODY = {"lz4": 256 * 1024, "zstd": 128 * 1024}


def decodes_on_threads(compression: str, body: float) -> bool:
    """Whether batches of ``body`` compressed bytes are worth Arrow's threads to decompress.

    True for uncompressed bodies: nothing is decompressed, so no thread is involved, and
    pyarrow's per-message reader keeps them zero-copy.
    """
    threshold = THREADED_DECODE_MIN_BODY.get(compression)
    return threshold is None or body >= threshold


class ChunkBytes(NamedTuple):
    """One chunk to decode: exactly its bytes, and what its entry declares of them."""

    data: pa.Buffer
    batches: int
    rows: int
    #: Names the chunk, for messages.
    where: str


def decode_chunk(
    data: pa.Buffer,
    schema: pa.Schema,
    batches: int,
    rows: int,
    where: str,
    *,
    full: bool = True,
    compression: str = "none",
) -> list[pa.RecordBatch]:
    """V17: decode a chunk into exactly its declared record batches and rows.

    The one-chunk case of :func:`decode_chunks`, which says what is checked.

    Args:
        data: exactly the chunk's bytes.
        schema: the file's schema.
        batches: the entry's batch count.
        rows: the entry's row count.
        where: names the chunk, for messages.
        full: also run Arrow's full validation of every batch (offsets, dictionary indices,
            UTF-8), which reads all of the batch's buffers: the batches stay zero-copy but
            the check costs about as much as a CRC.
        compression: the file's body codec (its index says). It only chooses how to decode:
            a compressed chunk is decompressed on one thread unless a batch is large
            (:data:`THREADED_DECODE_MIN_BODY`); any chunk decodes to the same batches.

    Raises:
        CorruptFileError: (V17) with what was expected and what was found.
    """
    chunk = ChunkBytes(data, batches, rows, where)
    return decode_chunks([chunk], schema, full=full, compression=compression)


@implements("V17")
def decode_chunks(
    chunks: Sequence[ChunkBytes],
    schema: pa.Schema,
    *,
    full: bool = True,
    compression: str = "none",
) -> list[pa.RecordBatch]:
    """V17: decode chunks, in order, each into exactly its declared record batches and rows.

    Each chunk's bytes must be exactly ``batches`` encapsulated record-batch messages of
    ``schema`` holding ``rows`` rows; each chunk is decoded from its own bytes, since totals
    that agree over several chunks could hide rows moved between them. Decoding stops at the
    first chunk that breaks the rule.

    Consecutive compressed chunks of small batches are decoded by one stream reader, each
    chunk checked to end exactly where its bytes end: opening a reader costs more than
    decoding a chunk of a few thousand rows, and a read of many subpartitions decodes many.

    Args:
        chunks: the chunks, in the order they are read.
        schema: the file's schema.
        full: as for :func:`decode_chunk`.
        compression: as for :func:`decode_chunk`.

    Raises:
        CorruptFileError: (V17) with what was expected and what was found.
    """
    out: list[pa.RecordBatch] = []
    stream: _SharedStream | None = None
    for k, chunk in enumerate(chunks):
        reader = pa.BufferReader(chunk.data)
        messages: list[pa.ipc.Message] = []
        decoded: list[pa.RecordBatch] = []
        try:
            for _ in range(chunk.batches):
                message = pa.ipc.read_message(reader)
                if message.type != "record batch":
                    raise Violation(
                        "V17",
                        f"{chunk.where}: batch {len(messages)} is a {message.type!r} message, "
                        "expected a record batch",
                    ).error()
                messages.append(message)
            end = reader.tell()
            if messages and not decodes_on_threads(compression, max(m.body.size for m in messages)):
                if stream is None:
                    stream = _SharedStream.open(schema, [c.data for c in chunks[k:]])
            else:
                stream = None  # the next chunk decoded as a stream starts a stream of its own
            if stream is not None and stream.reader is not None:
                found = stream.next_chunk(len(messages), end, chunk.data.size)
            else:
                found = (pa.ipc.read_record_batch(m, schema) for m in messages)
            for batch in found:
                if full:
                    batch.validate(full=True)
                decoded.append(batch)
        except (pa.ArrowException, OSError, EOFError) as exc:
            # Damaged bytes surface as any pyarrow error: invalid, IO, out of memory for a
            # hostile declared length, or an end of stream in the middle of a message.
            failed = len(decoded) if len(messages) == chunk.batches else len(messages)
            raise Violation(
                "V17",
                f"{chunk.where}: expected {chunk.batches} record batches of the file's schema, "
                f"batch {failed} does not decode: {exc}",
            ).error() from exc
        rows = sum(b.num_rows for b in decoded)
        if rows != chunk.rows or end != chunk.data.size:
            raise Violation(
                "V17",
                f"{chunk.where}: expected {chunk.batches} batches with {chunk.rows} rows in "
                f"{chunk.data.size} bytes, decoded {rows} rows from {end} bytes",
            ).error()
        out.extend(decoded)
    return out


class _SharedStream:
    """One stream reader over consecutive chunks: the schema's message, then their bytes.

    Batches are decoded without Arrow's threads. ``reader`` is None when the stream's schema,
    read back from its message, differs from the file's: it does when an extension type was
    registered (or unregistered) since the file's schema was read, and every batch of a read
    must carry the one schema. Such chunks are decoded message by message.
    """

    def __init__(self, reader: BatchStream | None) -> None:
        self.reader = reader
        #: Bytes of the chunks already read through the stream.
        self.consumed = 0

    @classmethod
    def open(cls, schema: pa.Schema, parts: list[pa.Buffer]) -> _SharedStream:
        """A stream over ``parts``, the bytes of the chunks still to decode, in order."""
        reader = BatchStream(schema.serialize(), parts, use_threads=False)
        return cls(reader if reader.schema.equals(schema, check_metadata=True) else None)

    def next_chunk(self, count: int, end: int, size: int) -> Iterator[pa.RecordBatch]:
        """The next chunk's ``count`` batches, which must end ``end`` bytes into its ``size``.

        Raises:
            pyarrow.ArrowInvalid: they end elsewhere (the stream is then out of step, and
                the caller stops at this chunk).
        """
        assert self.reader is not None
        start, self.consumed = self.consumed, self.consumed + size
        return self.reader.batches(count, start + end)


def chunk_violation(where: str, detail: str) -> Violation:
    """Rule V17 broken by a chunk read in parts, as a projected read does.

    A projected read finds a chunk's batches in the footer and decodes some columns;
    ``detail`` says what was expected and what was found.
    """
    return Violation("V17", f"{where}: {detail}")


@implements("V18")
def check_footer_batches(
    chunks: np.ndarray,
    rows: int,
    footer: Callable[[], tuple[np.ndarray, int]],
) -> Violation | None:
    """V18: the data file's footer lists exactly the indexed batches, once each, in file order.

    Equal counts alone would let a footer list one batch twice in place of another of the same
    length, which a plain Arrow reader of the data file then returns twice: the footer's blocks
    must also fill every chunk in file order, each chunk with as many blocks as its batches.

    Args:
        chunks: the distinct non-empty chunks (a broadcast chunk once) in file order, as
            ``(offset, length, batches)`` integer rows, shape ``(C, 3)``.
        rows: the rows of those chunks.
        footer: the footer's record-batch blocks (fields ``offset``, ``meta_length`` and
            ``body_length``, in footer order) and the rows of its batches.
    """
    try:
        blocks, footer_rows = footer()
    except (pa.ArrowException, OSError, ArrowShuffleError) as exc:
        return Violation("V18", f"the data file's record batches cannot be listed: {exc}")
    batches = int(chunks[:, 2].sum())
    if (len(blocks), footer_rows) != (batches, rows):
        return Violation(
            "V18",
            f"the index's chunks hold {batches} record batches and {rows} rows, the data "
            f"file's footer lists {len(blocks)} batches and {footer_rows} rows",
        )
    if batches == 0:
        return None
    starts = blocks["offset"].astype(np.int64)
    ends = starts + blocks["meta_length"].astype(np.int64) + blocks["body_length"].astype(np.int64)
    # The blocks of chunk k: from the first at its offset, as many as its batches; inside a
    # chunk each starts where the previous ends (the chunks, in file order, keep them in order).
    last = np.cumsum(chunks[:, 2]) - 1
    first = last - chunks[:, 2] + 1
    inside = np.ones(batches - 1, dtype=bool)
    inside[last[:-1]] = False  # block j and j + 1 in one chunk
    tiled = (
        np.array_equal(starts[first], chunks[:, 0])
        and np.array_equal(ends[last], chunks[:, 0] + chunks[:, 1])
        and bool((starts[1:] == ends[:-1])[inside].all())
    )
    if tiled:
        return None
    return Violation(
        "V18",
        f"the data file's footer lists {batches} record batches, but not each chunk's batches "
        "once and in file order: a plain Arrow reader of the data file would return other rows",
    )


def placement_exemption(
    spec: dict[str, Any], schema: pa.Schema, num_subpartitions: int
) -> str | Violation | None:
    """Why rule V19 does not apply to a file with this partitioner, or how the spec breaks it.

    A name this version does not know (a later version's partitioner, spec.md section 9) and a
    partitioner whose rows do not determine their subpartition are exempt: the reason is
    returned. A known partitioner whose spec cannot be applied to the file's schema (an option
    of the wrong type, key columns the schema lacks, another subpartition count) breaks V19:
    its rows' placement cannot be what the spec says. None: the rows are to be checked with
    :func:`misplaced_rows`.
    """
    name = spec.get("name")
    if name != EXPLICIT and name not in PARTITIONER_NAMES:
        return f"partitioner {name!r} is not known to this version"
    empty = empty_batch(schema)
    try:
        usable = recompute_subpartitions(dict(spec), empty, num_subpartitions)
    except ArrowShuffleError as exc:
        return Violation(
            "V19",
            f"the {name} partitioner spec cannot be applied to the file's "
            f"{num_subpartitions} subpartitions and schema: {exc}",
        )
    if usable is None:
        return f"partitioner {name!r} does not determine a row's subpartition"
    return None


@implements("V19")
def misplaced_rows(
    spec: dict[str, Any],
    batch: pa.RecordBatch,
    num_subpartitions: int,
    subpartition: int,
    where: str,
) -> tuple[Violation, int] | None:
    """V19: the rows of a regular chunk's batch that its partitioner assigns elsewhere.

    A partitioner that refuses a stored row (say, an id column holding 9 in a file of 4
    subpartitions) breaks the rule too. Apply only where :func:`placement_exemption` is None.

    Returns:
        The first misplaced row's violation and how many rows are misplaced, or None.
    """
    name = spec.get("name")
    try:
        ids = np.asarray(recompute_subpartitions(spec, batch, num_subpartitions))
    except ArrowShuffleError as exc:
        return Violation("V19", f"{where}: partitioner {name!r} refuses a stored row: {exc}"), 1
    wrong = ids != subpartition
    if not wrong.any():
        return None
    row = int(np.argmax(wrong))
    return (
        Violation(
            "V19",
            f"{where}: row {row} of a batch belongs to subpartition {int(ids[row])} by "
            f"partitioner {name!r}",
        ),
        int(wrong.sum()),
    )
