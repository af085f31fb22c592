"""Fetch what rules V13-V15 judge: the data file's two ends and its footer.

The checks are :mod:`arrowshuffle.format.data_file`; shared by the reader and the validator.
"""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa

from arrowshuffle.format.data_file import (
    ARROW_MAGIC,
    check_arrow_file,
    check_file_id,
    check_footer_schema,
)
from arrowshuffle.format.index import IndexHeader
from arrowshuffle.format.rules import Violation
from arrowshuffle.readers.source import ByteSource, MappedSource


def check_data_file(
    header: IndexHeader, schema: pa.Schema, data: ByteSource
) -> tuple[pa.ipc.RecordBatchFileReader | None, list[Violation]]:
    """Rules V13-V15: the data file's length, magic, footer, file id and schema.

    Reads only the file's two ends and its footer. Returns the opened footer (None when the
    file is not an Arrow IPC file) and the rules broken, in rule order.
    """
    size = data.size

    def ends() -> tuple[bytes, bytes]:
        head, tail = data.read_ranges([(0, len(ARROW_MAGIC)), (size - len(ARROW_MAGIC), size)])
        return head.to_pybytes(), tail.to_pybytes()

    footer, found = check_arrow_file(
        header.data_length, size, ends, lambda: pa.ipc.open_file(_random_access(data))
    )
    if footer is None:
        return None, found
    for other in (
        check_file_id(header.file_id, footer.metadata),
        check_footer_schema(schema, footer.schema),
    ):
        if other is not None:
            found.append(other)
    return footer, found


class _RangeFile(io.RawIOBase):
    """A read-only, seekable file over a byte source, so pyarrow reads only what it needs."""

    def __init__(self, source: ByteSource) -> None:
        super().__init__()
        self._source = source
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._source.size}
        self._position = max(0, base[whence] + offset)
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        end = self._source.size if size is None or size < 0 else self._position + size
        end = min(end, self._source.size)
        if end <= self._position:
            return b""
        (chunk,) = self._source.read_ranges([(self._position, end)])
        self._position = end
        return bytes(chunk.to_pybytes())

    def readinto(self, buffer: Any) -> int:
        chunk = self.read(len(memoryview(buffer)))
        memoryview(buffer).cast("B")[: len(chunk)] = chunk
        return len(chunk)


def _random_access(data: ByteSource) -> pa.NativeFile:
    """A pyarrow file over the data: zero-copy for a memory map, ranged reads otherwise."""
    if isinstance(data, MappedSource):
        (whole,) = data.read_ranges([(0, data.size)])
        return pa.BufferReader(whole)
    return pa.PythonFile(_RangeFile(data), mode="r")
