"""Byte sources: ranged reads from a memory-mapped local file or an fsspec object."""

from __future__ import annotations

import bisect
import errno
import io
import logging
import mmap
import os
import random
import stat
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from arrowshuffle.format.errors import ArrowShuffleError, ShuffleIOError
from arrowshuffle.readers.storage import (
    Location,
    classify_error,
    object_size,
    storage_error,
    storage_errors,
)

#: How many times a range that failed with a transient error, or whose bytes failed their
#: checksum, is fetched again.
DEFAULT_RETRIES = 3
#: Seconds before the first retry; each further retry waits twice as long (plus jitter).
DEFAULT_BACKOFF = 0.1

logger = logging.getLogger("arrowshuffle.readers")


@dataclass(frozen=True)
class ReadStats:
    """What reading cost so far: requests, bytes, and the attempts that had to be repeated.

    Attributes:
        requests: ranged requests issued (each retry and refetch included).
        bytes_read: bytes received.
        retries: requests repeated after a transient storage error (timeout, reset, 5xx,
            throttling, truncated body).
        refetches: ranges fetched again because their bytes failed a checksum.
    """

    requests: int = 0
    bytes_read: int = 0
    retries: int = 0
    refetches: int = 0

    def __add__(self, other: ReadStats) -> ReadStats:
        return ReadStats(
            self.requests + other.requests,
            self.bytes_read + other.bytes_read,
            self.retries + other.retries,
            self.refetches + other.refetches,
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
    """A local file, memory-mapped once; reads are zero-copy slices of the map.

    A file of at most ``read_at_most`` bytes (an index, say) is read whole with one call
    instead: a map costs more than copying a few KiB, and the bytes then cannot change under
    the reader (:attr:`private`). ``bytes_read`` counts the bytes of the slices handed out:
    what reads plan to touch.
    """

    concurrent = False

    def __init__(self, location: Location, *, read_at_most: int = 0) -> None:
        self.url = location.url
        self.bytes_read = 0
        with storage_errors(location.url, "opening"):
            self._buffer, self.private = _load(location.path, read_at_most)

    @property
    def mapped(self) -> pa.Buffer:
        """The whole map (not counted: the caller reads only what it planned)."""
        return self._buffer

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
            self.bytes_read += end - start
        return out

    def read_prefix(self, length: int) -> pa.Buffer:
        """The first ``length`` bytes of the map (all of it when the file is shorter)."""
        return self._buffer.slice(0, min(length, self._buffer.size))


def _load(path: str, read_at_most: int) -> tuple[pa.Buffer, bool]:
    """A local file's bytes: read whole (a private copy, True) or memory-mapped (False).

    ``mmap`` directly rather than ``pyarrow.memory_map``, which costs several times more per
    open, where it can be done without holding a descriptor (see :func:`_map`); the buffer
    keeps the map alive, and the map is released with the last slice of it.
    """
    # O_NONBLOCK: opening a named pipe must not wait for a writer (it is refused below);
    # reads of a regular file ignore it.
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if stat.S_ISFIFO(info.st_mode) or stat.S_ISSOCK(info.st_mode):
            # Neither can be mapped, and reopening one by name would wait for a writer.
            kind = "named pipe" if stat.S_ISFIFO(info.st_mode) else "socket"
            raise OSError(errno.ENODEV, f"expected a regular file, found a {kind}", path)
        if not stat.S_ISREG(info.st_mode):
            # A device: Arrow's own map says what it makes of it.
            return pa.memory_map(path, "r").read_buffer(), False
        size = info.st_size
        if size <= read_at_most or size == 0:
            return pa.py_buffer(_read_whole(fd, size)), True
        return _map(fd, size, path), False
    finally:
        os.close(fd)


def _map(fd: int, size: int, path: str) -> pa.Buffer:
    """A read-only map of the first ``size`` bytes of open file ``fd`` (named ``path``).

    The map must not hold a file descriptor: it lives as long as any slice of it, and the
    tables of a zero-copy read keep slices, so a descriptor per map would be one per file
    read, and reading more files than the descriptor limit would fail. Before Python 3.13
    ``mmap`` keeps a duplicate of the descriptor for its whole life; Arrow's map does not.
    """
    if sys.version_info >= (3, 13):
        return pa.py_buffer(mmap.mmap(fd, size, access=mmap.ACCESS_READ, trackfd=False))
    return pa.memory_map(path, "r").read_buffer()


def _read_whole(fd: int, size: int) -> bytes:
    """The first ``size`` bytes of a file just opened (as a map of that size would hold).

    One call for a regular file; a shorter answer means the file shrank meanwhile: what is
    there is returned, and the checks of its contents say what is wrong with it.
    """
    data = os.read(fd, size)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size and (more := os.read(fd, size - got)):
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class RemoteSource:
    """An object behind an fsspec file system; ranges are fetched with ``cat_ranges``.

    ``cat_ranges`` issues one ranged GET per range, concurrently on asynchronous file systems
    (s3fs, gcsfs, adlfs, http). A range that fails with a transient error (see
    :func:`arrowshuffle.readers.storage.classify_error`: a timeout, a reset, a truncated or
    checksum-failed transfer, a 5xx answer, throttling) or comes back shorter than asked is
    fetched again, up to ``retries`` times with exponential backoff; not-found, permission and
    bad-request errors are raised at once, naming the URL. Every error is raised as a
    :class:`ShuffleIOError`. Readers that find fetched bytes damaged ask for them again with
    :meth:`refetch`, within the same budget.

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
        #: How many times one range is fetched again (after errors, or after damage).
        self.retry_budget = retries
        self._backoff = backoff
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes_read = 0
        self.retries = 0
        self.refetches = 0

    def stats(self) -> ReadStats:
        """Requests, bytes, retries and refetches of this source so far."""
        with self._lock:
            return ReadStats(self.requests, self.bytes_read, self.retries, self.refetches)

    def note_refetch(self, what: str, attempt: int, reason: BaseException) -> None:
        """Wait out the backoff of refetch ``attempt`` (from 1) of ``what``, count and log it."""
        with self._lock:
            self.refetches += 1
        logger.warning(
            "%s: fetching %s again (refetch %d of at most %d) after damaged bytes: %s",
            self.url,
            what,
            attempt,
            self.retry_budget,
            reason,
        )
        self._pause(attempt)

    def refetch(self, start: int, end: int, attempt: int, reason: BaseException) -> pa.Buffer:
        """Fetch ``[start, end)`` again because its bytes failed a checksum (see above)."""
        self.note_refetch(f"bytes [{start}, {end})", attempt, reason)
        return self._fetch([(start, end)], exact=True)[0]

    def _pause(self, attempt: int) -> None:
        delay = self._backoff * 2 ** (attempt - 1)
        time.sleep(delay * (1 + random.random() / 2))

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
            last: BaseException | None = None
            received = 0
            for i, blob in zip(todo, blobs, strict=True):
                start, end = ranges[i]
                error: BaseException
                if isinstance(blob, BaseException):
                    error = blob
                elif exact and len(blob) != end - start:
                    # A body cut short (or a server ignoring the range): ask again.
                    received += len(blob)
                    error = ShuffleIOError(
                        errno.EIO,
                        f"short read: asked for bytes [{start}, {end}) ({end - start} bytes), "
                        f"got {len(blob)} (a body cut short, or the object is shorter)",
                    )
                else:
                    received += len(blob)
                    results[i] = bytes(blob)
                    continue
                if not _transient(error):
                    mapped = storage_error(error, self.url, "reading")
                    raise mapped from (None if mapped is error else error)
                if attempt >= self.retry_budget:
                    raise ShuffleIOError(
                        getattr(error, "errno", None) or errno.EIO,
                        f"reading {self.url} bytes [{start}, {end}) failed "
                        f"{attempt + 1} times; last error: {_describe(error)}",
                    ) from error
                failed.append(i)
                last = error
            with self._lock:
                self.bytes_read += received
                self.retries += len(failed)
            if failed:
                attempt += 1
                logger.info(
                    "%s: %d ranged reads failed (%s); retry %d of %d",
                    self.url,
                    len(failed),
                    _describe(last) if last is not None else "",
                    attempt,
                    self.retry_budget,
                )
                self._pause(attempt)
            todo = failed
        return [pa.py_buffer(data or b"") for data in results]

    def _cat_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | BaseException]:
        fs = self._location.fs
        try:
            blobs = fs.cat_ranges(
                [self._location.path] * len(ranges),
                [start for start, _ in ranges],
                [end for _, end in ranges],
                on_error="return",
            )
        except (ArrowShuffleError, MemoryError):
            raise
        except Exception as exc:
            # The call as a whole failed (a synchronous file system, fsspec's loop timeout):
            # every range failed with it, and is retried as such when it is transient.
            return [exc] * len(ranges)
        return list(blobs)


def _describe(error: BaseException) -> str:
    text = str(error)
    if isinstance(error, OSError) and text:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _transient(error: BaseException) -> bool:
    """True for storage errors that a later attempt may not hit (timeouts, 5xx, resets)."""
    return classify_error(error) == "transient"


def open_source(
    location: Location, size: int | None = None, *, read_at_most: int = 0
) -> ByteSource:
    """A memory map for local files, ranged requests for everything else.

    A local file of at most ``read_at_most`` bytes is read whole instead of mapped.
    """
    if location.is_local:
        return MappedSource(location, read_at_most=read_at_most)
    return RemoteSource(location, size)


class PrefetchedSource:
    """A source of which some ranges were fetched already, as ``(offset, bytes)`` pieces.

    A range inside one piece is a zero-copy slice of it; the others are fetched from
    ``source``, together in one call. Checks of a remote data file fetch its two ends in one
    round trip and then read them through this: its magic, schema prefix and footer.
    """

    concurrent = True

    def __init__(self, source: ByteSource, pieces: Sequence[tuple[int, pa.Buffer]]) -> None:
        self.url = source.url
        self._source = source
        self._pieces = list(pieces)

    @property
    def size(self) -> int:
        """Size of the object in bytes."""
        return self._source.size

    def _held(self, start: int, end: int) -> pa.Buffer | None:
        for offset, piece in self._pieces:
            if offset <= start and end <= offset + piece.size:
                return piece.slice(start - offset, end - start)
        return None

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[pa.Buffer]:
        """Each range from a piece that holds it; the rest from the source, in one call."""
        out: list[pa.Buffer | None] = [self._held(b, e) for b, e in ranges]
        todo = [i for i, buffer in enumerate(out) if buffer is None]
        if todo:
            fetched = self._source.read_ranges([ranges[i] for i in todo])
            for i, buffer in zip(todo, fetched, strict=True):
                out[i] = buffer
        return [b for b in out if b is not None]

    def read_prefix(self, length: int) -> pa.Buffer:
        """The first ``length`` bytes (all of them when the object is shorter)."""
        (prefix,) = self.read_ranges([(0, min(length, self.size))])
        return prefix


class SparseFile(io.RawIOBase):
    """A read-only, seekable file of ``size`` bytes for pyarrow, of which some pieces are known.

    A read inside a known piece is served from it; any other read is fetched with ``fetch``
    (one ranged read). Without pieces, pyarrow reads only what it needs of a remote file; with
    the pieces a plan fetched, a wrong guess of what Arrow reads costs a request, never a
    wrong byte.
    """

    def __init__(
        self,
        size: int,
        pieces: Sequence[tuple[int, Any]],
        fetch: Callable[[int, int], bytes],
    ) -> None:
        super().__init__()
        self._size = size
        # Pieces may overlap (a batch's metadata inside a merged body range): keeping only those
        # not inside another leaves starts and ends both ascending, so the last piece starting
        # at or before a read is the one that reaches furthest.
        views = sorted(
            ((start, memoryview(data).cast("B")) for start, data in pieces),
            key=lambda p: (p[0], -len(p[1])),
        )
        kept: list[tuple[int, memoryview]] = []
        for start, view in views:
            if not kept or start + len(view) > kept[-1][0] + len(kept[-1][1]):
                kept.append((start, view))
        self._starts = [start for start, _ in kept]
        self._pieces = [view for _, view in kept]
        self._fetch = fetch
        self._position = 0

    def readable(self) -> bool:
        """True."""
        return True

    def seekable(self) -> bool:
        """True."""
        return True

    def tell(self) -> int:
        """The current position."""
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to ``offset`` from ``whence``."""
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}
        self._position = max(0, base[whence] + offset)
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the current position."""
        start = self._position
        end = self._size if size is None or size < 0 else min(self._size, start + size)
        if end <= start:
            return b""
        self._position = end
        i = bisect.bisect_right(self._starts, start) - 1
        if i >= 0:
            piece = self._pieces[i]
            at = start - self._starts[i]
            if at + (end - start) <= len(piece):
                return bytes(piece[at : at + end - start])
        return self._fetch(start, end)

    def readinto(self, buffer: Any) -> int:
        """Read into ``buffer``; returns the bytes read."""
        data = self.read(len(memoryview(buffer)))
        memoryview(buffer).cast("B")[: len(data)] = data
        return len(data)
