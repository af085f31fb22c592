"""Outputs that appear under their name only when complete, and clean-up after failures.

Every writer (shuffle files, manifests, compaction, the CLI's exports) publishes through
:class:`AtomicOutput`, so a reader never sees a half-written object.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from typing import IO

from arrowshuffle.format.errors import MissingObjectError
from arrowshuffle.format.naming import temp_name
from arrowshuffle.readers.storage import Location, storage_errors


class AtomicOutput:
    """A file that becomes visible under its name only on :meth:`commit`.

    Locally it is written under a hidden temporary name in the same directory and renamed. On
    object stores an object appears only when its upload completes, so it is written in place
    and :meth:`discard` aborts the upload (or deletes what was uploaded).

    ``buffered=False`` opens a local file without Python's write buffer, for a writer that
    gathers small writes itself and hands large buffers over whole (they would otherwise be
    copied into the buffer first); object stores keep their upload buffer of ``block_size``.
    """

    def __init__(
        self, location: Location, *, block_size: int = 8 * 1024 * 1024, buffered: bool = True
    ) -> None:
        self.location = location
        self._temp_path: str | None = None
        if location.is_local:
            check_parent_exists(location)
        with storage_errors(location.url, "creating"):
            if location.is_local:
                directory, name = os.path.split(location.path)
                self._temp_path = os.path.join(directory, temp_name(name))
                buffering = block_size if buffered else 0
                self.file: IO[bytes] = open(self._temp_path, "wb", buffering=buffering)  # noqa: SIM115
            else:
                self.file = location.fs.open(location.path, "wb", block_size=block_size)
        self._done = False

    def finish(self) -> None:
        """Write out everything locally, under the temporary name, without publishing it.

        Two outputs that must appear together (a data file and its index) are both finished
        before either is committed, so that only two renames lie between them. On object stores
        finishing is committing (closing completes the upload), so this does nothing there.
        """
        if self._temp_path is not None and not self._done:
            with storage_errors(self.location.url, "writing"):
                self.file.close()

    def commit(self) -> None:
        """Close the file and publish it under its final name."""
        if self._done:
            return
        with storage_errors(self.location.url, "writing"):
            self.file.close()  # a no-op after finish()
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
                # The discarded file must not try to finish its upload when it is collected.
                self.file.closed = True  # type: ignore[misc]
            else:
                self.file.close()
                self.location.fs.rm(self.location.path)


def check_parent_exists(location: Location) -> None:
    """Refuse a local file whose directory does not exist, as ``open`` and pyarrow's writers do.

    Single files are not written into directories that nobody made: a typo in a path should
    not create a tree (datasets create their own directory, as Spark's writers do).

    Raises:
        MissingObjectError: the directory does not exist, naming it.
    """
    directory = os.path.dirname(location.path) or "."
    if not os.path.isdir(directory):
        raise MissingObjectError(
            errno.ENOENT,
            f"cannot write {location.url}: the directory {directory} does not exist (create it "
            "first)",
        )


def remove_quietly(location: Location) -> None:
    """Delete an object if it exists; errors are ignored (used to clean up after failures)."""
    with contextlib.suppress(Exception):
        location.fs.rm(location.path)
