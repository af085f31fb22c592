"""Arrow IPC data files written message by message.

A data file is the header pyarrow writes for its schema (magic, padding, schema message), the
record-batch messages, then the footer pyarrow writes for the same schema and number of
batches with its Blocks patched to where the messages are (:mod:`arrowshuffle.format.ipc_file`).

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

from arrowshuffle.format.arrow_types import empty_batch
from arrowshuffle.format.crc import crc32c
from arrowshuffle.format.ipc_file import (
    file_tail,
    patch_footer_blocks,
    split_file_tail,
)
from arrowshuffle.writers.sink import SMALL_WRITE, WriteOnlyStream, write_all

_PREFIX = struct.Struct("<Ii")  # continuation, metadata length


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


class _Collector(WriteOnlyStream):
    """The encoder's sink: small writes are gathered, body buffers kept (not copied)."""

    def __init__(self) -> None:
        self._pieces: list[Any] = []
        self._small = bytearray()
        self._crc = 0
        self._length = 0

    def write(self, data: Any) -> int:
        view = memoryview(data)
        n = view.nbytes
        self._crc = crc32c(data, self._crc)
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
        """The message written since the last call."""
        self._gather()
        pieces, self._pieces = tuple(self._pieces), []
        head = b"".join(bytes(memoryview(p).cast("B")[: _PREFIX.size]) for p in pieces[:2])
        marker, meta = _PREFIX.unpack_from(head)
        if marker != 0xFFFFFFFF:  # cannot happen: pyarrow writes the continuation marker
            raise AssertionError("an encoded message does not start with a continuation")
        encoded = EncodedBatch(pieces, self._length, _PREFIX.size + meta, self._crc, rows)
        self._crc = self._length = 0
        return encoded


class BatchEncoder:
    """Encodes record batches of one schema as IPC messages, on any thread.

    Each thread has its own pyarrow stream writer (they are not thread-safe); its schema
    message is dropped, so that each :meth:`encode` returns exactly one record-batch message.
    """

    def __init__(self, schema: pa.Schema, compression: str) -> None:
        self._schema = schema
        self._options = pa.ipc.IpcWriteOptions(
            compression=None if compression == "none" else compression
        )
        self._local = threading.local()

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
        try:
            writer.write_batch(batch)
        except BaseException:
            # Part of a message may be in the sink: this thread starts afresh next time.
            self._local.state = None
            raise
        return sink.take(batch.num_rows)


class _TailSink(WriteOnlyStream):
    """A write-only stream that keeps a file's first ``head`` bytes and, once asked, the rest.

    Used for the throwaway file whose header and footer a data file takes: the batches in
    between are dropped as they are written, so memory stays at the footer's size.
    """

    def __init__(self, head: int) -> None:
        self._head = head
        self.position = 0
        self.head = bytearray()
        self.tail = bytearray()
        self.capture = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if len(self.head) < self._head:
            self.head += view[: self._head - len(self.head)]
        if self.capture:
            self.tail += view
        self.position += len(view)
        return len(view)

    def tell(self) -> int:
        return self.position


def ipc_file_frame(
    schema: pa.Schema, metadata: dict[bytes, bytes], batches: int
) -> tuple[bytes, bytes]:
    """The header and footer pyarrow writes for an IPC file of ``batches`` record batches.

    Returns:
        ``(header, footer)``: the magic, padding and schema message that start the file, and
        the footer flatbuffer (its record-batch Blocks still those of zero-row batches).
    """
    sink = _TailSink(8 + schema.serialize().size)
    empty = empty_batch(schema)
    writer = pa.ipc.new_file(pa.PythonFile(sink, mode="w"), schema, metadata=metadata)
    for _ in range(batches):
        writer.write_batch(empty)
    # Only the end matters from here: end-of-stream marker, footer, its length, the magic
    # (with no batch, the header too is written now, and the tail is the whole file).
    sink.capture = True
    writer.close()
    footer, _ = split_file_tail(bytes(sink.tail))
    return bytes(sink.head), footer


class IpcFileWriter:
    """One data file written to ``out`` in order: header now, messages, footer on close.

    ``out`` may take fewer bytes per call than given (an unbuffered file): every byte is
    written (:func:`~arrowshuffle.writers.sink.write_all`). Body buffers are handed over whole,
    without a copy.
    """

    def __init__(self, out: IO[bytes], schema: pa.Schema, metadata: dict[bytes, bytes]) -> None:
        self._out = out
        self._schema = schema
        self._metadata = metadata
        self.position = 0
        self._blocks = array.array("q")  # (offset, meta_length, body_length) per message
        header, _ = ipc_file_frame(schema, metadata, 0)
        self._write(header)

    @property
    def batches(self) -> int:
        """Record-batch messages written so far."""
        return len(self._blocks) // 3

    def _write(self, data: Any) -> None:
        write_all(self._out, data)
        self.position += memoryview(data).nbytes

    def write(self, encoded: EncodedBatch) -> None:
        """Append one encoded message."""
        body = encoded.length - encoded.meta_length
        self._blocks.extend((self.position, encoded.meta_length, body))
        for piece in encoded.pieces:
            self._write(piece)

    def copy(self, data: Any, messages: Sequence[tuple[int, int, int]]) -> None:
        """Append ``data``, whole messages of another file: ``(offset, meta, body)`` in it."""
        position = self.position
        for offset, meta, body in messages:
            self._blocks.extend((position + offset, meta, body))
        self._write(data)

    def close(self) -> int:
        """Write the footer (end-of-stream marker, footer, its length, magic); return the size."""
        blocks = np.frombuffer(self._blocks, dtype=np.int64).reshape(-1, 3)
        _, footer = ipc_file_frame(self._schema, self._metadata, len(blocks))
        self._write(file_tail(patch_footer_blocks(footer, blocks)))
        return self.position
