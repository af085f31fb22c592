"""Byte sources: ranged reads from a memory-mapped local file or an fsspec object."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

import pyarrow as pa

from arrowshuffle._storage import Location, object_size, storage_errors
from arrowshuffle.format.errors import ShuffleIOError


class ByteSource(Protocol):
    """Random access to the bytes of one object."""

    url: str

    @property
    def size(self) -> int:
        """Size of the object in bytes."""

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[pa.Buffer]:
        """Read each ``[start, end)`` range; one request per range on object stores."""


class MappedSource:
    """A local file, memory-mapped once; reads are zero-copy slices of the map."""

    def __init__(self, location: Location) -> None:
        self.url = location.url
        with storage_errors(location.url, "opening"):
            self._buffer = pa.memory_map(location.path, "r").read_buffer()

    @property
    def size(self) -> int:
        """Size of the file in bytes."""
        return int(self._buffer.size)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[pa.Buffer]:
        """Zero-copy slices of the mapped file."""
        out = []
        for start, end in ranges:
            if not 0 <= start <= end <= self._buffer.size:
                raise ShuffleIOError(
                    f"range [{start}, {end}) is outside {self.url} ({self._buffer.size} bytes)"
                )
            out.append(self._buffer.slice(start, end - start))
        return out


class RemoteSource:
    """An object behind an fsspec file system; ranges are fetched with ``cat_ranges``.

    Counts requests and bytes, which tests and benchmarks read to measure read cost.
    """

    def __init__(self, location: Location, size: int | None = None) -> None:
        self.url = location.url
        self._location = location
        self._size = object_size(location) if size is None else size
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes_read = 0

    @property
    def size(self) -> int:
        """Size of the object in bytes (from the manifest or one metadata request)."""
        return self._size

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[pa.Buffer]:
        """Fetch the ranges (concurrently where the file system supports it)."""
        if not ranges:
            return []
        for start, end in ranges:
            if not 0 <= start <= end <= self._size:
                raise ShuffleIOError(
                    f"range [{start}, {end}) is outside {self.url} ({self._size} bytes)"
                )
        fs = self._location.fs
        path = self._location.path
        with storage_errors(self.url, "reading"):
            blobs = fs.cat_ranges(
                [path] * len(ranges),
                [start for start, _ in ranges],
                [end for _, end in ranges],
                on_error="raise",
            )
        out = []
        for (start, end), blob in zip(ranges, blobs, strict=True):
            if isinstance(blob, BaseException):
                with storage_errors(self.url, "reading"):
                    raise blob
            if len(blob) != end - start:
                raise ShuffleIOError(
                    f"short read from {self.url}: asked for bytes [{start}, {end}), "
                    f"got {len(blob)} bytes"
                )
            out.append(pa.py_buffer(blob))
        with self._lock:
            self.requests += len(ranges)
            self.bytes_read += sum(end - start for start, end in ranges)
        return out


def open_source(location: Location, size: int | None = None) -> ByteSource:
    """A memory map for local files, ranged requests for everything else."""
    if location.is_local:
        return MappedSource(location)
    return RemoteSource(location, size)
