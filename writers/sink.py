"""Write-only streams for pyarrow's IPC writers, and writing every byte to a file."""

from __future__ import annotations

from typing import IO, Any

#: Writes smaller than this are gathered in memory and written together; larger ones (the
#: body buffers of record batches) are passed on as they are, without a copy.
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


def write_all(raw: IO[bytes], data: Any) -> None:
    """Write all of ``data`` to ``raw``, however many calls the file takes.

    An unbuffered file may take fewer bytes per call (Linux writes at most about 2 GiB at
    once); what it did not take would be lost unnoticed. The first call gets ``data`` itself
    (a pyarrow buffer is handed over without a copy).
    """
    view = memoryview(data).cast("B")
    taken = raw.write(data)
    while taken is not None and taken < view.nbytes:  # None: a file object that takes all
        if taken <= 0:
            raise OSError(f"the file took no bytes of {view.nbytes} still to write")
        view = view[taken:]
        taken = raw.write(view)
