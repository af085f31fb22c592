"""Arrow IPC data files written message by message.

A data file is the header pyarrow writes for its schema (magic, padding, schema message), the
record-batch messages, then the footer pyarrow writes for the same schema, made to list where
the messages are (:func:`~arrowshuffle.format.ipc_file.footer_with_blocks`).

Messages are encoded apart from the file, on any thread (:class:`BatchEncoder`), and their
CRC32C is computed there while their bytes are in cache: the thread that owns the file only
writes them, and combines their checksums into its chunks'. A merged file also copies messages
of other files as they are (:meth:`IpcFileWriter.copy`).
"""

from __future__ import annotations

import array
import struct
import threading
from collections.abc import Sequence
from typing import IO, Any, NamedTuple

import numpy as np
import pyarrow as pa

from arrowshuffle.format.arrow_types import compact_views, empty_batch, holds_views
from arrowshuffle.format.crc import crc32c, crc32c_combine
from arrowshuffle.format.ipc_file import file_tail, footer_with_blocks, split_file_tail
from arrowshuffle.writers.sink import SMALL_WRITE, WriteOnlyStream, write_all

_PREFIX = struct.Struct("<Ii")  # continuation, metadata length
#: Messages at least this long have their checksum combined into a chunk's; shorter ones are
#: checksummed again, which costs less than combining (tens of microseconds in Python).
COMBINE_FROM = 256 * 1024


class EncodedBatch(NamedTuple):
    """One record batch as an encapsulated IPC message, ready to be written."""

    #: The message's bytes in order: gathered small writes and pyarrow's body buffers.
    pieces: tuple[Any, ...]
    #: Bytes of the whole message.
    length: int
    #: Bytes before the body: prefix, flatbuffer metadata and padding (a Block's metaDataLength).
    meta_length: int
    #: CRC32C of the whole message.
    crc32c: int
    rows: int

    def continue_crc32c(self, crc: int) -> int:
        """The CRC32C of the bytes ``crc`` covers followed by this message."""
        if crc == 0:
            return self.crc32c  # nothing before, or bytes whose checksum is zero: the same
        if self.length < COMBINE_FROM:
            for piece in self.pieces:
                crc = crc32c(piece, crc)
            return crc
        return crc32c_combine(crc, self.crc32c, self.length)


class _Collector(WriteOnlyStream):
    """The encoder's sink: small writes are gathered, body buffers kept (not copied).

    A message starts with its prefix, a small write: the first piece taken is always gathered
    bytes that hold it.
    """

    def __init__(self) -> None:
        self._pieces: list[Any] = []
        self._small = bytearray()
        self._length = 0

    def write(self, data: Any) -> int:
        view = memoryview(data)
        n = view.nbytes
        self._length += n
        if n < SMALL_WRITE:
            self._small += view
        else:
            self._gather()
            self._pieces.append(data)  # pyarrow's buffer: it stays valid while referenced
        return n

    def _gather(self) -> None:
        if self._small:
            self._pieces.append(bytes(self._small))
            self._small = bytearray()

    def take(self, rows: int) -> EncodedBatch:
        """The message written since the last call, checksummed (its bytes are in cache)."""
        self._gather()
        pieces, self._pieces = tuple(self._pieces), []
        marker, meta = _PREFIX.unpack_from(pieces[0])
        if marker != 0xFFFFFFFF:  # cannot happen: pyarrow writes the continuation marker
            raise AssertionError("an encoded message does not start with a continuation")
        crc = 0
        for piece in pieces:
            crc = crc32c(piece, crc)
        encoded = EncodedBatch(pieces, self._length, _PREFIX.size + meta, crc, rows)
        self._length = 0
        return encoded


class BatchEncoder:
    """Encodes record batches of one schema as IPC messages, on any thread.

    Each thread has its own pyarrow stream writer (they are not thread-safe); its schema
    message is dropped, so that each :meth:`encode` returns exactly one record-batch message.
    Columns that hold view types are compacted first (:func:`compact_views`): the writer
    would otherwise write every data buffer a slice's views point into, whole.
    """

    def __init__(self, schema: pa.Schema, compression: str) -> None:
        self._schema = schema
        self._options = pa.ipc.IpcWriteOptions(
            compression=None if compression == "none" else compression
        )
        self._local = threading.local()
        self._views = [i for i, t in enumerate(schema.types) if holds_views(t)]

    def encode(self, batch: pa.RecordBatch) -> EncodedBatch:
        """``batch`` as one encapsulated message, with its length and CRC32C."""
        state = getattr(self._local, "state", None)
        if state is None:
            sink = _Collector()
            writer = pa.ipc.new_stream(
                pa.PythonFile(sink, mode="w"), self._schema, options=self._options
            )
            # The stream starts with its schema message: written (with an empty batch) and
            # dropped here.
            writer.write_batch(empty_batch(self._schema))
            sink.take(0)
            state = self._local.state = (sink, writer)
        sink, writer = state
        for i in self._views:
            batch = batch.set_column(i, self._schema.field(i), compact_views(batch.column(i)))
        try:
            writer.write_batch(batch)
            return sink.take(batch.num_rows)
        except BaseException:
            # Part of a message may be in the sink: this thread starts afresh next time.
            self._local.state = None
            raise


def ipc_file_frame(schema: pa.Schema, metadata: dict[bytes, bytes]) -> tuple[bytes, bytes]:
    """The header and footer pyarrow writes for an IPC file of ``schema`` without batches.

    Returns:
        ``(header, footer)``: the magic, padding and schema message that start the file, and
        the footer flatbuffer (:func:`~arrowshuffle.format.ipc_file.footer_with_blocks` lists
        the batches in it).
    """
    sink = pa.BufferOutputStream()
    pa.ipc.new_file(sink, schema, metadata=metadata).close()
    data = sink.getvalue().to_pybytes()
    footer, _ = split_file_tail(data)
    return data[: 8 + schema.serialize().size], footer


class IpcFileWriter:
    """One data file written to ``out`` in order: header now, messages, footer on close.

    Small pieces (message prefixes and metadata, small bodies) are gathered and written
    together before the next large one; large body buffers are handed over whole, without a
    copy. ``out`` may take fewer bytes per call than given (an unbuffered file): every byte is
    written (:func:`~arrowshuffle.writers.sink.write_all`).
    """

    def __init__(self, out: IO[bytes], schema: pa.Schema, metadata: dict[bytes, bytes]) -> None:
        self._out = out
        self.position = 0
        self._pending = bytearray()
        self._blocks = array.array("q")  # (offset, meta_length, body_length) per message
        header, self._footer = ipc_file_frame(schema, metadata)
        self._write(header)

    @property
    def batches(self) -> int:
        """Record-batch messages written so far."""
        return len(self._blocks) // 3

    def _write(self, data: Any) -> None:
        view = memoryview(data)
        n = view.nbytes
        if n < SMALL_WRITE:
            self._pending += view.cast("B")
        else:
            self._drain()
            write_all(self._out, data)
        self.position += n

    def _drain(self) -> None:
        if self._pending:
            write_all(self._out, self._pending)
            self._pending = bytearray()

    def write(self, encoded: EncodedBatch) -> None:
        """Append one encoded message."""
        start = self.position
        for piece in encoded.pieces:
            self._write(piece)
        self._blocks.extend((start, encoded.meta_length, encoded.length - encoded.meta_length))

    def copy(self, data: Any, messages: Sequence[tuple[int, int, int]]) -> None:
        """Append ``data``, whole messages of another file: ``(offset, meta, body)`` in it."""
        start = self.position
        self._write(data)
        for offset, meta, body in messages:
            self._blocks.extend((start + offset, meta, body))

    def close(self) -> int:
        """Write the footer (end-of-stream marker, footer, its length, magic); return the size."""
        blocks = np.frombuffer(self._blocks, dtype=np.int64).reshape(-1, 3)
        self._write(file_tail(footer_with_blocks(self._footer, blocks)))
        self._drain()
        return self.position
