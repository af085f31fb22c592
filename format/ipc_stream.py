"""Decode record-batch messages as an Arrow IPC stream, with or without Arrow's threads.

pyarrow decodes a lone message (``read_record_batch``) only with its default read options,
which decompress a batch's buffers on Arrow's thread pool. Handing a small batch to that
pool and waiting for it costs about 60 µs, more than decompressing a few thousand rows: a
read of many small compressed batches spent half its time waking threads. A stream reader
takes ``IpcReadOptions(use_threads=False)``, so the messages are read here as a stream: the
schema's message, then the messages' bytes, served without a copy by :class:`_ChainedBuffers`.

Pure: buffers in, record batches out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa

#: The options of a stream read without Arrow's threads, and with them.
_SERIAL = pa.ipc.IpcReadOptions(use_threads=False)
_THREADED = pa.ipc.IpcReadOptions(use_threads=True)


class _ChainedBuffers:
    """A read-only, forward-only file over buffers one after another, read without copying.

    pyarrow's ``PythonFile`` asks ``read_buffer`` for what it reads: a slice of one buffer is
    handed over as it is; a read across two buffers (which a stream of whole messages never
    asks for) is joined.
    """

    closed = False

    def __init__(self, parts: Sequence[pa.Buffer]) -> None:
        self._parts = [p for p in parts if p.size]
        self._index = 0
        self._offset = 0  # inside the current part
        self._position = 0

    def readable(self) -> bool:
        """Always True."""
        return True

    def seekable(self) -> bool:
        """Always False: a stream is read forward."""
        return False

    def writable(self) -> bool:
        """Always False."""
        return False

    def tell(self) -> int:
        """Bytes read so far."""
        return self._position

    def close(self) -> None:
        """Mark closed (the buffers belong to the caller)."""
        self.closed = True

    def read_buffer(self, nbytes: int | None = None) -> pa.Buffer:
        """The next ``nbytes`` bytes (all that is left for None or -1), fewer at the end."""
        wanted = None if nbytes is None or nbytes < 0 else nbytes
        pieces: list[pa.Buffer] = []
        while self._index < len(self._parts) and (wanted is None or wanted > 0):
            part = self._parts[self._index]
            left = part.size - self._offset
            take = left if wanted is None else min(left, wanted)
            pieces.append(part.slice(self._offset, take))
            self._offset += take
            self._position += take
            if wanted is not None:
                wanted -= take
            if self._offset == part.size:
                self._index += 1
                self._offset = 0
        if len(pieces) == 1:
            return pieces[0]
        return pa.py_buffer(b"".join(pieces))

    def read(self, nbytes: int | None = None) -> bytes:
        """The next ``nbytes`` bytes as ``bytes`` (pyarrow reads through :meth:`read_buffer`)."""
        return bytes(self.read_buffer(nbytes).to_pybytes())  # typed: pyarrow returns Any


class BatchStream:
    """An Arrow IPC stream reader over a schema's message followed by record-batch messages.

    Args:
        schema_message: the schema as one encapsulated message (``schema.serialize()``).
        messages: buffers holding whole encapsulated record-batch messages, in order.
        use_threads: let Arrow decompress each batch's buffers on its thread pool; worth it
            only for large batches, and never when the caller already decodes on every core.

    Raises:
        pyarrow.ArrowException: the schema message does not decode.
    """

    def __init__(
        self, schema_message: pa.Buffer, messages: Sequence[pa.Buffer], *, use_threads: bool
    ) -> None:
        self._chained = _ChainedBuffers([schema_message, *messages])
        self._head = schema_message.size
        options = _THREADED if use_threads else _SERIAL
        self._reader = pa.ipc.open_stream(pa.PythonFile(self._chained, mode="r"), options=options)

    @property
    def schema(self) -> pa.Schema:
        """The schema read back from the schema's message."""
        return self._reader.schema

    def batches(self, count: int, end: int) -> Iterator[pa.RecordBatch]:
        """The next ``count`` batches, whose messages must end ``end`` bytes into ``messages``.

        Raises:
            pyarrow.ArrowInvalid: the stream ends before ``count`` batches, or they end
                elsewhere (a batch boundary moved, or bytes trail them).
        """
        for i in range(count):
            try:
                batch = self._reader.read_next_batch()
            except StopIteration:  # inside a generator it would become a RuntimeError
                raise pa.ArrowInvalid(f"the stream ended before batch {i} of {count}") from None
            yield batch
        read = self._chained.tell() - self._head
        if read != end:
            raise pa.ArrowInvalid(f"the batches end at byte {read} of the messages, expected {end}")
