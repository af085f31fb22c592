"""Byte sources: ranged reads from a memory-mapped local file or an fsspec object."""

from __future__ import annotations

import errno
import random
import threading
import time
from collections.abc import Sequence
from typing import Protocol

import pyarrow as pa

from arrowshuffle._storage import Location, object_size, storage_errors
from arrowshuffle.format.errors import ShuffleIOError

#: How many times a range that failed with a transient error is fetched again.
DEFAULT_RETRIES = 3
#: Seconds before the first retry; each further retry waits twice as long (plus jitter).
DEFAULT_BACKOFF = 0.1
#: Errors that retrying cannot fix: the request itself is wrong, or the object is not there.
_PERMANENT_ERRNOS = frozenset(
    {errno.ENOENT, errno.EACCES, errno.EPERM, errno.EINVAL, errno.EISDIR, errno.ENOTDIR}
)


class ByteSource(Protocol):
    """Random access to the bytes of one object."""

    url: str
    #: True when fetching blocks on IO (worth running on an IO thread); False for memory maps.
    concurrent: bool

    @property
    def size(self) -> int:
        """Size of the object in bytes."""

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[pa.Buffer]:
        """Read each ``[start, end)`` range; one request per range on object stores."""

    def read_prefix(self, length: int) -> pa.Buffer:
        """The first ``length`` bytes, or the whole object when it is shorter."""


class MappedSource:
    """A local file, memory-mapped once; reads are zero-copy slices of the map."""

    concurrent = False

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

    def read_prefix(self, length: int) -> pa.Buffer:
        """The first ``length`` bytes of the map (all of it when the file is shorter)."""
        return self._buffer.slice(0, min(length, self._buffer.size))


class RemoteSource:
    """An object behind an fsspec file system; ranges are fetched with ``cat_ranges``.

    ``cat_ranges`` issues one ranged GET per range, concurrently on asynchronous file systems
    (s3fs, gcsfs, adlfs, http). A range that fails with a transient error (an ``OSError`` other
    than not-found, permission or a bad request) is fetched again, up to ``retries`` times
    with exponential backoff; not-found and permission errors are raised at once, naming the
    URL.

    The size is optional: readers that know it (from a manifest, or from the index) pass it
    and no metadata request is made. Requests and bytes are counted for diagnostics.
    """

    concurrent = True

    def __init__(
        self,
        location: Location,
        size: int | None = None,
        *,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
    ) -> None:
        self.url = location.url
        self._location = location
        self._size = size
        self._retries = retries
        self._backoff = backoff
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes_read = 0

    @property
    def size(self) -> int:
        """Size of the object in bytes (known up front, or from one metadata request)."""
        if self._size is None:
            self._size = object_size(self._location)
        return self._size

    @property
    def known_size(self) -> int | None:
        """The size if it is known without a request, else None."""
        return self._size

    def read_prefix(self, length: int) -> pa.Buffer:
        """Fetch up to ``length`` bytes from the start in one request.

        A shorter answer means the object is shorter; its size is then known.
        """
        end = length if self._size is None else min(length, self._size)
        (blob,) = self._fetch([(0, end)], exact=self._size is not None)
        if self._size is None and blob.size < length:
            self._size = blob.size
        return blob

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[pa.Buffer]:
        """Fetch the ranges (concurrently where the file system supports it)."""
        if not ranges:
            return []
        for start, end in ranges:
            if not 0 <= start <= end or (self._size is not None and end > self._size):
                raise ShuffleIOError(
                    f"range [{start}, {end}) is outside {self.url} ({self._size} bytes)"
                )
        return self._fetch(ranges, exact=True)

    def _fetch(self, ranges: Sequence[tuple[int, int]], *, exact: bool) -> list[pa.Buffer]:
        results: list[bytes | None] = [b"" if start == end else None for start, end in ranges]
        todo = [i for i, (start, end) in enumerate(ranges) if start != end]
        attempt = 0
        while todo:
            blobs = self._cat_ranges([ranges[i] for i in todo])
            with self._lock:
                self.requests += len(todo)
            failed: list[int] = []
            for i, blob in zip(todo, blobs, strict=True):
                if not isinstance(blob, BaseException):
                    results[i] = bytes(blob)
                elif not _transient(blob):
                    with storage_errors(self.url, "reading"):
                        raise blob
                elif attempt >= self._retries:
                    raise ShuffleIOError(
                        getattr(blob, "errno", None) or errno.EIO,
                        f"reading {self.url} bytes [{ranges[i][0]}, {ranges[i][1]}) failed "
                        f"{attempt + 1} times; last error: {blob}",
                    ) from blob
                else:
                    failed.append(i)
            if failed:
                attempt += 1
                delay = self._backoff * 2 ** (attempt - 1)
                time.sleep(delay * (1 + random.random() / 2))
            todo = failed
        out = []
        for (start, end), data in zip(ranges, results, strict=True):
            assert data is not None
            if exact and len(data) != end - start:
                raise ShuffleIOError(
                    f"short read from {self.url}: asked for bytes [{start}, {end}), "
                    f"got {len(data)} bytes (is the object truncated?)"
                )
            out.append(pa.py_buffer(data))
        with self._lock:
            self.bytes_read += sum(len(d) for d in results if d is not None)
        return out

    def _cat_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | BaseException]:
        fs = self._location.fs
        with storage_errors(self.url, "reading"):
            blobs = fs.cat_ranges(
                [self._location.path] * len(ranges),
                [start for start, _ in ranges],
                [end for _, end in ranges],
                on_error="return",
            )
        return list(blobs)


def _transient(error: BaseException) -> bool:
    """True for storage errors that a later attempt may not hit (timeouts, 5xx, resets)."""
    if not isinstance(error, OSError):
        return False
    if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    return error.errno not in _PERMANENT_ERRNOS


def open_source(location: Location, size: int | None = None) -> ByteSource:
    """A memory map for local files, ranged requests for everything else."""
    if location.is_local:
        return MappedSource(location)
    return RemoteSource(location, size)
