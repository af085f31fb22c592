"""The data file's own checks (rules V13-V15), shared by the reader and the validator."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa

from arrowshuffle.format.index import FILE_ID_KEY, IndexHeader
from arrowshuffle.format.rules import Violation
from arrowshuffle.readers.source import ByteSource, MappedSource

#: Magic bytes at both ends of an Arrow IPC file.
ARROW_MAGIC = b"ARROW1"


def check_data_file(
    header: IndexHeader, schema: pa.Schema, data: ByteSource
) -> tuple[pa.ipc.RecordBatchFileReader | None, list[Violation]]:
    """Rules V13-V15: the data file's length, magic, footer, file id and schema.

    Reads only the file's two ends and its footer. Returns the opened footer (None when the
    file is not an Arrow IPC file) and the rules broken, in rule order.
    """
    found: list[Violation] = []
    size = data.size
    declared = header.data_length
    if size != declared:
        found.append(
            Violation(
                "V13",
                f"the index declares a data file of {declared} bytes, found {size} bytes",
            )
        )
    if size < 2 * len(ARROW_MAGIC):
        found.append(Violation("V13", f"the data file is {size} bytes, too short for Arrow IPC"))
        return None, found
    head, tail = data.read_ranges([(0, len(ARROW_MAGIC)), (size - len(ARROW_MAGIC), size)])
    if head.to_pybytes() != ARROW_MAGIC or tail.to_pybytes() != ARROW_MAGIC:
        found.append(
            Violation(
                "V13",
                f"the data file is not an Arrow IPC file: expected {ARROW_MAGIC!r} at both ends, "
                f"found {head.to_pybytes()!r} and {tail.to_pybytes()!r}",
            )
        )
        return None, found
    try:
        footer = pa.ipc.open_file(_random_access(data))
    except (pa.ArrowException, OSError) as exc:
        found.append(Violation("V13", f"the data file's Arrow footer does not decode: {exc}"))
        return None, found
    expected_id = header.file_id.hex().encode()
    found_id = (footer.metadata or {}).get(FILE_ID_KEY)
    if found_id != expected_id:
        what = "no file id" if found_id is None else f"file id {found_id.decode(errors='replace')}"
        found.append(
            Violation(
                "V14",
                f"the index has file id {expected_id.decode()}, the data file's footer has {what}: "
                "the two files do not belong together",
            )
        )
    if not footer.schema.equals(schema, check_metadata=True):
        found.append(Violation("V15", _schema_difference(expected=schema, found=footer.schema)))
    return footer, found


def _schema_difference(*, expected: pa.Schema, found: pa.Schema) -> str:
    """Name the first difference between the index's and the data file's schemas."""
    prefix = "the data file's schema differs from the index's: "
    if len(expected) != len(found):
        return prefix + f"expected {len(expected)} fields {expected.names}, found {found.names}"
    for i, (want, got) in enumerate(zip(expected, found, strict=True)):
        if not want.equals(got, check_metadata=True):
            return prefix + f"field {i}: expected {want}, found {got}"
    return prefix + f"expected metadata {expected.metadata!r}, found {found.metadata!r}"


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
