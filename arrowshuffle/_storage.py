"""Where bytes live: local paths and fsspec URLs, with errors mapped to ours.

Readers and writers share this module so that a path means the same thing everywhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from arrowshuffle.format.errors import InvalidOptionError, MissingObjectError, ShuffleIOError

#: The suffix of the index sidecar: ``part-0.arrow`` has its index in ``part-0.arrow.idx``.
INDEX_SUFFIX = ".idx"


@dataclass(frozen=True)
class Location:
    """A file or directory on some file system."""

    fs: fsspec.AbstractFileSystem
    path: str
    url: str

    @property
    def is_local(self) -> bool:
        """True for the local file system, where files are memory-mapped."""
        return isinstance(self.fs, LocalFileSystem)

    def child(self, name: str) -> Location:
        """The location of ``name`` inside this directory."""
        return Location(self.fs, posixpath.join(self.path, name), _join_url(self.url, name))

    def sibling(self, suffix: str) -> Location:
        """The location whose name is this one's plus ``suffix``."""
        return Location(self.fs, self.path + suffix, self.url + suffix)

    @property
    def name(self) -> str:
        """The last component of the path."""
        return posixpath.basename(self.path.rstrip("/"))


def _join_url(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


def resolve(
    path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> Location:
    """Turn a local path or an fsspec URL (``s3://bucket/key``) into a :class:`Location`."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise InvalidOptionError(f"expected a path or URL string, found {path!r}")
    try:
        fs, fs_path = fsspec.core.url_to_fs(path, **(storage_options or {}))
    except (ImportError, ValueError) as exc:
        scheme = path.split("://", 1)[0] if "://" in path else "file"
        hint = " (pip install 'arrowshuffle[s3]')" if scheme in ("s3", "s3a") else ""
        raise InvalidOptionError(f"cannot open {path!r}: {exc}{hint}") from exc
    if isinstance(fs, LocalFileSystem):
        fs_path = os.path.abspath(fs_path)
        url = fs_path
    else:
        url = path
    return Location(fs, fs_path, url)


@contextlib.contextmanager
def storage_errors(url: str, action: str) -> Iterator[None]:
    """Re-raise storage errors as :class:`ShuffleIOError` naming the URL and the action."""
    try:
        yield
    except MissingObjectError:
        raise
    except FileNotFoundError as exc:
        raise MissingObjectError(errno.ENOENT, f"{action}: {url} does not exist") from exc
    except PermissionError as exc:
        raise ShuffleIOError(errno.EACCES, f"{action}: permission denied for {url}") from exc
    except ShuffleIOError:
        raise
    except OSError as exc:
        raise ShuffleIOError(exc.errno or errno.EIO, f"{action} {url}: {exc}") from exc


def object_size(location: Location) -> int:
    """Size in bytes of the object at ``location``."""
    with storage_errors(location.url, "reading the size of"):
        return int(location.fs.size(location.path))


def read_bytes(location: Location, start: int | None = None, end: int | None = None) -> bytes:
    """Read ``[start, end)`` of an object (the whole object by default)."""
    with storage_errors(location.url, "reading"):
        data = location.fs.cat_file(location.path, start=start, end=end)
    return bytes(data)


class AtomicOutput:
    """A file that becomes visible under its name only on :meth:`commit`.

    Locally it is written under a hidden temporary name in the same directory and renamed. On
    object stores an object appears only when its upload completes, so it is written in place
    and :meth:`discard` aborts the upload (or deletes what was uploaded).
    """

    def __init__(self, location: Location, *, block_size: int = 8 * 1024 * 1024) -> None:
        self.location = location
        self._temp_path: str | None = None
        with storage_errors(location.url, "creating"):
            if location.is_local:
                directory, name = os.path.split(location.path)
                os.makedirs(directory or ".", exist_ok=True)
                self._temp_path = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
                self.file: IO[bytes] = open(self._temp_path, "wb", buffering=block_size)  # noqa: SIM115
            else:
                self.file = location.fs.open(location.path, "wb", block_size=block_size)
        self._done = False

    def commit(self) -> None:
        """Close the file and publish it under its final name."""
        if self._done:
            return
        with storage_errors(self.location.url, "writing"):
            self.file.close()
            if self._temp_path is not None:
                os.replace(self._temp_path, self.location.path)
        self._done = True

    def discard(self) -> None:
        """Drop the file: nothing stays visible under its name or a temporary one."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(Exception):
            if self._temp_path is not None:
                self.file.close()
                os.unlink(self._temp_path)
                return
            discard: Callable[[], None] | None = getattr(self.file, "discard", None)
            if discard is not None:
                discard()
            else:
                self.file.close()
                self.location.fs.rm(self.location.path)


def remove_quietly(location: Location) -> None:
    """Delete an object if it exists; errors are ignored (used to clean up after failures)."""
    with contextlib.suppress(Exception):
        location.fs.rm(location.path)
