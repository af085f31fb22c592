"""Write-only streams for pyarrow's IPC writer; one tracks position and chunk checksums."""

from __future__ import annotations

from typing import IO, Any

from arrowshuffle.format.crc import crc32c

#: Writes smaller than this are gathered in memory and written together; larger ones (the
#: body buffers of record batches) go to the wrapped stream as they are, without a copy.
SMALL_WRITE = 64 * 1024


class WriteOnlyStream:
    """What pyarrow asks of a write-only file object besides ``write`` and ``tell``."""

    closed = False

    def writable(self) -> bool:
        """Always True: this is a write-only stream."""
        return True

    def seekable(self) -> bool:
        """Always False: the IPC writer must only append."""
        return False

    def readable(self) -> bool:
        """Always False: this is a write-only stream."""
        return False

    def flush(self) -> None:
        """Nothing is held back."""

    def close(self) -> None:
        """Mark the stream closed."""
        self.closed = True


class ChecksummingSink(WriteOnlyStream):
    """Pass bytes through to ``raw`` while counting them and checksumming the current chunk.

    pyarrow writes a record batch as several ``write`` calls that all finish before
    ``write_batch`` returns, so the position between two batches is exact. The IPC writer emits
    the file header lazily, inside the first ``write_batch``; :meth:`begin_chunk` therefore takes
    the position the chunk will start at and bytes before it stay out of the checksum.

    Body buffers arrive as pyarrow buffers: they are checksummed in place and handed to ``raw``
    whole, so ``raw`` may be unbuffered. The small pieces between them (message lengths,
    flatbuffer metadata, padding) are gathered here and written in one call before the next
    large buffer, at :meth:`flush` and at :meth:`drain`.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self.position = 0
        self._chunk_start = 0
        self._crc = 0
        self._pending = bytearray()

    def begin_chunk(self, start: int) -> None:
        """Start a new chunk checksum that covers bytes from ``start`` on."""
        self._chunk_start = start
        self._crc = 0

    @property
    def chunk_crc32c(self) -> int:
        """CRC32C of the bytes written since the current chunk started."""
        return self._crc

    def write(self, data: Any) -> int:
        """Write ``data`` through, updating position and the chunk checksum."""
        view = memoryview(data)
        n = view.nbytes
        skip = self._chunk_start - self.position
        if skip <= 0:
            self._crc = crc32c(data, self._crc)
        elif skip < n:
            self._crc = crc32c(view.cast("B")[skip:], self._crc)
        self.position += n
        if n < SMALL_WRITE:
            self._pending += view
        else:
            self.drain()
            self._write_all(data)
        return n

    def drain(self) -> None:
        """Write the gathered small pieces to the wrapped stream."""
        if self._pending:
            self._write_all(self._pending)
            self._pending = bytearray()

    def _write_all(self, data: Any) -> None:
        """Write all of ``data``, however many calls the file takes.

        An unbuffered file may take fewer bytes per call (Linux writes at most about 2 GiB at
        once); what it did not take would be lost unnoticed. The first call gets ``data``
        itself (a pyarrow buffer is handed over without a copy).
        """
        view = memoryview(data).cast("B")
        taken = self._raw.write(data)
        while taken is not None and taken < view.nbytes:  # None: a file object that takes all
            if taken <= 0:
                raise OSError(f"the file took no bytes of {view.nbytes} still to write")
            view = view[taken:]
            taken = self._raw.write(view)

    def tell(self) -> int:
        """Bytes written so far."""
        return self.position

    def flush(self) -> None:
        """Write what is gathered and flush the wrapped stream."""
        self.drain()
        self._raw.flush()

    def close(self) -> None:
        """Write what is gathered and mark closed.

        The owner closes the wrapped stream (it decides commit or discard).
        """
        self.drain()
        self.closed = True
