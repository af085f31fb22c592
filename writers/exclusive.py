"""Create an object only if none has its name: the one atomic step of a dataset commit.

Two committers that both want to create manifest version ``n + 1`` must not both succeed, so a
commit is a create-if-absent, never a check followed by a write:

* local disks: the bytes are written and flushed to a hidden temporary file, which is then
  hard-linked to the name (a link fails when the name exists, and never shows a partial file);
* S3 and stores that speak its API: one PUT with ``If-None-Match: *`` (AWS S3, MinIO, R2 and
  others honour it; a store that ignores the header would let two commits overwrite each other,
  see the README);
* ``memory://``: the file system's own exclusive create, under a lock of this process.

Other file systems cannot create an object exclusively through fsspec; committing to them is
refused rather than left to a race.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading

from arrowshuffle.format.errors import InvalidOptionError
from arrowshuffle.format.naming import temp_name
from arrowshuffle.readers.storage import Location, is_precondition_failed, storage_errors

#: fsspec protocols whose ``pipe_file(..., mode="create")`` is a conditional PUT.
_CONDITIONAL_PUT = frozenset({"s3", "s3a"})
_MEMORY_LOCK = threading.Lock()
#: What a file system without hard links answers to ``link`` (others are storage failures).
_NO_LINKS = frozenset(
    code
    for code in (
        errno.EPERM,
        errno.ENOTSUP,
        getattr(errno, "EOPNOTSUPP", errno.ENOTSUP),
        errno.ENOSYS,
        errno.EMLINK,
        errno.EXDEV,
    )
)


def protocols(location: Location) -> tuple[str, ...]:
    """The protocol names of the file system ``location`` lives on."""
    names = location.fs.protocol
    return (names,) if isinstance(names, str) else tuple(names)


def check_exclusive_create(location: Location) -> None:
    """Refuse, before anything is written, a store where commits cannot be made safely.

    Raises:
        InvalidOptionError: the file system has no create-if-absent this package can use.
    """
    names = set(protocols(location))
    if location.is_local or "memory" in names or names & _CONDITIONAL_PUT:
        return
    raise InvalidOptionError(
        f"cannot commit to {location.url}: a dataset commit needs a create-if-absent (an "
        f"exclusive create or a conditional PUT) and {'/'.join(sorted(names))}:// offers none "
        "that arrowshuffle can use; local disks, memory:// and S3-compatible stores (s3://) are "
        "supported"
    )


def create_exclusive(location: Location, payload: bytes) -> bool:
    """Create the object at ``location`` holding ``payload``, only if no object has its name.

    Returns:
        True when this call created it; False when the name was already taken (on object
        stores, possibly by this very request's first attempt, retried after its answer was
        lost: the caller tells by reading the object).

    Raises:
        InvalidOptionError: the store cannot create exclusively (:func:`check_exclusive_create`).
        ShuffleIOError: the storage failed; on object stores the object may or may not exist.
    """
    check_exclusive_create(location)
    with storage_errors(location.url, "committing"):
        try:
            if location.is_local:
                _link_into_place(location.path, payload)
            elif "memory" in protocols(location):
                with _MEMORY_LOCK:
                    location.fs.pipe_file(location.path, payload, mode="create")
            else:
                location.fs.pipe_file(location.path, payload, mode="create")
        except Exception as exc:
            if is_precondition_failed(exc):
                return False
            raise
    return True


def _link_into_place(path: str, payload: bytes) -> None:
    """Write ``payload`` durably under a temporary name, then hard-link it to ``path``."""
    directory, name = os.path.split(path)
    try:
        os.makedirs(directory or ".", exist_ok=True)
    except FileExistsError as exc:  # not a name another commit took: a file, not a directory
        raise NotADirectoryError(
            errno.ENOTDIR, "expected the versions directory, found a file", directory
        ) from exc
    temp = os.path.join(directory, temp_name(name))
    try:
        with open(temp, "wb") as file:
            file.write(payload)
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(temp, path)
        except OSError as exc:
            if isinstance(exc, FileExistsError) and os.path.isdir(path):
                raise IsADirectoryError(
                    errno.EISDIR, "expected a version file or none, found a directory", path
                ) from exc
            if exc.errno not in _NO_LINKS:
                raise  # taken (FileExistsError), or a storage failure such as a full disk
            raise InvalidOptionError(
                f"cannot commit to {path}: its file system refused a hard link ({exc}); a "
                "dataset commit needs one to create a manifest version exclusively"
            ) from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)
    _sync_directory(directory)


def _sync_directory(directory: str) -> None:
    """Make a new name in ``directory`` durable (best effort: not every system can)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
