"""Projected reads: fetch only the selected columns' buffers of each record batch.

A chunk is a run of standard IPC record-batch messages, and the data file's footer lists every
batch's block (offset, metadata length, body length). A projected read

1. finds each chunk's batches in the footer, which must tile the chunk exactly (count, start,
   adjacency, end; the chunk's rows are checked after decoding, as rule V17 asks);
2. fetches the metadata of those batches (small: a flatbuffer each) and reads from it where
   every body buffer lies;
3. fetches only the body buffers of the selected columns (coalesced like any other ranges);
4. decodes with Arrow's own reader and ``IpcReadOptions(included_fields=...)``, which reads,
   decompresses and decodes only those fields (dictionaries still decode: the dictionary
   batches the footer lists are fetched whole, once per file).

Arrow decides what it reads: the pieces fetched here are what it is expected to ask for, and a
read outside them is served by one more ranged read (counted), never by wrong bytes (the file
Arrow reads is a :class:`~arrowshuffle.readers.source.SparseFile` of those pieces).

A chunk's CRC32C covers all its bytes, so a verifying read cannot project: projection applies
only when checksums are not verified (the default for local files). Everything here is pure
(bytes in, ranges out).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from arrowshuffle.format.chunks import chunk_violation
from arrowshuffle.format.errors import CorruptFileError
from arrowshuffle.format.ipc_file import BLOCK_DTYPE, split_file_tail
from arrowshuffle.readers.source import ByteSource, MappedSource

#: The bytes a remote read first fetches from the data file's end, hoping they hold the footer.
FOOTER_GUESS = 64 * 1024

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_CONTINUATION = 0xFFFFFFFF
# Flatbuffer field numbers (Arrow's File.fbs and Message.fbs).
_FOOTER_DICTIONARIES = 2
_FOOTER_RECORD_BATCHES = 3
_MESSAGE_HEADER_TYPE = 1
_MESSAGE_HEADER = 2
_HEADER_RECORD_BATCH = 3
_BATCH_LENGTH = 0
_BATCH_BUFFERS = 2
_BATCH_VARIADIC_COUNTS = 4


class _Flatbuffer:
    """Bounds-checked reads of the few flatbuffer fields used here."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def u32(self, at: int) -> int:
        return int(_U32.unpack_from(self.data, self._at(at, 4))[0])

    def field(self, table: int, number: int) -> int | None:
        """Where field ``number`` of the table at ``table`` is stored (None when absent)."""
        vtable = table - _I32.unpack_from(self.data, self._at(table, 4))[0]
        size = _U16.unpack_from(self.data, self._at(vtable, 2))[0]
        slot = 4 + 2 * number
        if slot + 2 > size:
            return None
        offset = _U16.unpack_from(self.data, self._at(vtable + slot, 2))[0]
        return None if offset == 0 else table + offset

    def table(self, table: int, number: int) -> int | None:
        """The table that field ``number`` points at."""
        at = self.field(table, number)
        return None if at is None else at + self.u32(at)

    def vector(self, table: int, number: int, itemsize: int) -> tuple[int, int]:
        """Start and length of the vector of ``itemsize``-byte items in field ``number``."""
        at = self.field(table, number)
        if at is None:
            return 0, 0
        vector = at + self.u32(at)
        count = self.u32(vector)
        self._at(vector + 4, count * itemsize)
        return vector + 4, count

    def _at(self, at: int, size: int) -> int:
        if not 0 <= at <= len(self.data) - size:
            raise CorruptFileError(
                f"expected flatbuffer bytes [{at}, {at + size}) inside {len(self.data)} bytes"
            )
        return at


@dataclass(frozen=True)
class FileLayout:
    """What a data file's footer says: where every record batch and dictionary batch lies.

    Attributes:
        batches: the record batches' blocks (:data:`BLOCK_DTYPE`), in footer order.
        dictionaries: the dictionary batches' blocks.
        tail_offset: where the footer starts.
        tail: the file's bytes from ``tail_offset`` to its end (footer, length, magic).
    """

    batches: np.ndarray
    dictionaries: np.ndarray
    tail_offset: int
    tail: bytes

    def chunk_batches(self, offset: int, length: int, batches: int, where: str) -> range:
        """The footer positions of the ``batches`` record batches that fill a chunk exactly.

        Raises:
            CorruptFileError: (V17) the footer's batches do not tile the chunk's bytes.
        """
        starts = self.batches["offset"]
        first = int(np.searchsorted(starts, offset))
        stop = first + batches
        blocks = self.batches[first:stop]
        ends = blocks["offset"] + blocks["meta_length"] + blocks["body_length"]
        if (
            len(blocks) != batches
            or batches == 0
            or int(blocks["offset"][0]) != offset
            or not np.array_equal(blocks["offset"][1:], ends[:-1])
            or int(ends[-1]) != offset + length
        ):
            raise chunk_violation(
                where,
                f"expected {batches} record batches filling the chunk's {length} bytes in the "
                "data file's footer, found other blocks there",
            ).error()
        return range(first, stop)


def parse_layout(tail: bytes, tail_offset: int) -> FileLayout:
    """The layout of a data file from a suffix of it (``tail`` starts at ``tail_offset``).

    Raises:
        CorruptFileError: the footer cannot be read, or ``tail`` does not hold all of it.
    """
    footer, start = split_file_tail(tail)
    buf = _Flatbuffer(footer)
    try:
        root = buf.u32(0)
        lists = []
        for number in (_FOOTER_RECORD_BATCHES, _FOOTER_DICTIONARIES):
            first, count = buf.vector(root, number, BLOCK_DTYPE.itemsize)
            lists.append(np.frombuffer(footer, dtype=BLOCK_DTYPE, count=count, offset=first))
    except struct.error as exc:
        raise CorruptFileError(f"the data file's footer cannot be read: {exc}") from exc
    return FileLayout(lists[0].copy(), lists[1].copy(), tail_offset + start, tail[start:])


def read_layout(source: ByteSource) -> FileLayout:
    """The layout of a data file, read from its end (two requests at most on object stores).

    Raises:
        CorruptFileError: the footer cannot be read.
    """
    size = source.size
    # Locally the footer's length is read first, so that only the footer is touched.
    guess = 10 if isinstance(source, MappedSource) else FOOTER_GUESS
    (tail,) = source.read_ranges([(max(0, size - guess), size)])
    need = footer_length(tail.to_pybytes()) + 10
    if tail.size < need <= size:
        (tail,) = source.read_ranges([(size - need, size)])
    return parse_layout(tail.to_pybytes(), size - tail.size)


def footer_length(end: bytes) -> int:
    """The footer length stored in the file's last 10 bytes (0 when it is not one)."""
    return max(0, int(_I32.unpack_from(end, len(end) - 10)[0])) if len(end) >= 10 else 0


@dataclass(frozen=True)
class BatchBuffers:
    """Where a record batch's body buffers lie, from its metadata.

    Attributes:
        rows: the batch's declared row count.
        buffers: ``(offset, length)`` per body buffer, relative to the body (shape ``(k, 2)``).
        variadic: the data-buffer counts of the batch's view-type columns, in field order.
    """

    rows: int
    buffers: np.ndarray
    variadic: tuple[int, ...]


def parse_batch_metadata(metadata: bytes) -> BatchBuffers:
    """Read a record batch's buffer list from its encapsulated metadata (prefix included).

    Raises:
        CorruptFileError: the bytes are not a record batch message's metadata.
    """
    skip = 8 if len(metadata) >= 4 and _U32.unpack_from(metadata, 0)[0] == _CONTINUATION else 4
    buf = _Flatbuffer(bytes(metadata[skip:]))
    try:
        root = buf.u32(0)
        kind = buf.field(root, _MESSAGE_HEADER_TYPE)
        header = buf.table(root, _MESSAGE_HEADER)
        if kind is None or _U8.unpack_from(buf.data, kind)[0] != _HEADER_RECORD_BATCH:
            raise CorruptFileError("expected a record batch message, found another message")
        if header is None:
            raise CorruptFileError("expected a record batch header, found none")
        at = buf.field(header, _BATCH_LENGTH)
        rows = 0 if at is None else int(_I64.unpack_from(buf.data, at)[0])
        first, count = buf.vector(header, _BATCH_BUFFERS, 16)
        buffers = np.frombuffer(buf.data, dtype="<i8", count=2 * count, offset=first)
        first, count = buf.vector(header, _BATCH_VARIADIC_COUNTS, 8)
        variadic = np.frombuffer(buf.data, dtype="<i8", count=count, offset=first)
    except struct.error as exc:
        raise CorruptFileError(f"a record batch's metadata cannot be read: {exc}") from exc
    return BatchBuffers(rows, buffers.reshape(-1, 2).copy(), tuple(int(v) for v in variadic))


def _buffer_count(kind: pa.DataType, variadic: Iterator[int]) -> int:
    """How many body buffers a column of ``kind`` has, children included (Arrow's IPC layout)."""
    if isinstance(kind, pa.ExtensionType):
        return _buffer_count(kind.storage_type, variadic)
    if pa.types.is_dictionary(kind):
        return _buffer_count(kind.index_type, variadic)  # the values are a dictionary batch
    if pa.types.is_null(kind):
        return 0
    if pa.types.is_string_view(kind) or pa.types.is_binary_view(kind):
        return 2 + next(variadic)
    children = sum(_buffer_count(kind.field(i).type, variadic) for i in range(kind.num_fields))
    if pa.types.is_run_end_encoded(kind):
        return children
    if pa.types.is_union(kind):
        return (2 if kind.mode == "dense" else 1) + children
    if pa.types.is_list_view(kind) or pa.types.is_large_list_view(kind):
        return 3 + children
    if pa.types.is_fixed_size_list(kind) or pa.types.is_struct(kind):
        return 1 + children
    if kind.num_fields:  # list, large list, map
        return 2 + children
    if (
        pa.types.is_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_large_binary(kind)
    ):
        return 3
    return 2  # validity and values (fixed width, boolean, decimal, fixed-size binary)


def field_buffer_spans(schema: pa.Schema, variadic: Sequence[int]) -> list[range] | None:
    """Which body buffers belong to each top-level field, or None if the count is off."""
    counts = iter(variadic)
    spans: list[range] = []
    start = 0
    try:
        for column in schema:
            count = _buffer_count(column.type, counts)
            spans.append(range(start, start + count))
            start += count
    except StopIteration:
        return None
    return spans if next(counts, None) is None else None


class BufferPicker:
    """Which body buffers of a record batch hold the selected top-level fields.

    The answer depends only on the schema, the fields and the batch's variadic buffer counts
    (view-type columns), so it is computed once per distinct count.
    """

    def __init__(self, schema: pa.Schema, fields: Sequence[int]) -> None:
        self._schema = schema
        self._fields = list(fields)
        self._known: dict[tuple[int, ...], tuple[np.ndarray, int] | None] = {}

    def __call__(self, variadic: tuple[int, ...]) -> tuple[np.ndarray, int] | None:
        """The selected buffers' positions and the batch's buffer count (None: unknown)."""
        if variadic not in self._known:
            spans = field_buffer_spans(self._schema, variadic)
            if spans is None:
                self._known[variadic] = None
            else:
                picked = [np.arange(spans[f].start, spans[f].stop) for f in self._fields]
                total = spans[-1].stop if spans else 0
                self._known[variadic] = (np.concatenate([np.zeros(0, np.int64), *picked]), total)
        return self._known[variadic]


def selected_ranges(
    block: np.void, batch: BatchBuffers, picker: BufferPicker
) -> list[tuple[int, int]]:
    """The file byte ranges of the selected fields' body buffers of one record batch.

    Falls back to the whole body when the metadata's buffer list does not match the schema
    (the decoder then still reads only what it needs, from the body fetched whole).

    Raises:
        CorruptFileError: a buffer lies outside the batch's body.
    """
    body = int(block["offset"]) + int(block["meta_length"])
    body_length = int(block["body_length"])
    known = picker(batch.variadic)
    if known is None or known[1] != len(batch.buffers):
        return [(body, body + body_length)] if body_length else []
    offsets, lengths = batch.buffers[:, 0], batch.buffers[:, 1]
    if bool(((offsets < 0) | (lengths < 0) | (offsets + lengths > body_length)).any()):
        raise CorruptFileError(
            f"expected the body buffers of the record batch at byte {int(block['offset'])} "
            f"inside its {body_length} body bytes, found one outside"
        )
    picked = known[0]
    picked = picked[lengths[picked] > 0]
    starts = body + offsets[picked]
    return list(zip(starts.tolist(), (starts + lengths[picked]).tolist(), strict=True))
