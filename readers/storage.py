"""Where bytes live: local paths and fsspec URLs, with errors mapped to ours.

Readers and writers share this module so that a path means the same thing everywhere.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import functools
import os
import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

import fsspec
from fsspec.implementations.local import LocalFileSystem

from arrowshuffle.format.errors import (
    ArrowShuffleError,
    FormatError,
    InvalidOptionError,
    MissingExtraError,
    MissingObjectError,
    ShuffleIOError,
)
from arrowshuffle.format.manifest import check_resolved_inside


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


def member(directory: Location, name: str) -> Location:
    """The location of ``name``, a file a manifest lists, inside the dataset ``directory``.

    On the local file system the name must also resolve inside the directory: a symbolic
    link (the file's own or a subdirectory's) that leads out of it is refused, as a ``..``
    name is; a link that stays inside is followed. Object stores have no links: a key is
    the name, which the manifest's own check (M3) already keeps inside.

    Raises:
        FormatError: (M3) the name resolves outside the directory; the message names the
            link and where it points.
    """
    location = directory.child(name)
    if location.is_local and _links(directory.path, name):
        # Only a link on the way can lead a plain name out: without one, a stat per component.
        root = os.path.realpath(directory.path)
        resolved = os.path.realpath(location.path)
        if os.path.commonpath([root, resolved]) != root:
            check_resolved_inside(name, resolved, root, _link_out(directory.path, name, root))
    return location


def _links(directory: str, name: str) -> list[str]:
    """The paths of the symbolic links on the way from ``directory`` to ``name``."""
    found = []
    path = directory
    for part in name.split("/"):
        path = os.path.join(path, part)
        if os.path.islink(path):
            found.append(path)
    return found


def _link_out(directory: str, name: str, root: str) -> tuple[str, str] | None:
    """The first symbolic link on the way from ``directory`` to ``name`` that leads out."""
    for path in _links(directory, name):
        if os.path.commonpath([root, os.path.realpath(path)]) != root:
            with contextlib.suppress(OSError):
                return path, os.readlink(path)
    return None


def resolve(
    path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> Location:
    """Turn a local path or an fsspec URL (``s3://bucket/key``) into a :class:`Location`."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise InvalidOptionError(f"expected a path or URL string, found {path!r}")
    if not storage_options and ":" not in path:
        # A plain local path (no protocol, no chain, no options) means what fsspec would make
        # of it, without the cost of its URL parsing and file-system lookup.
        fs_path = _absolute(LocalFileSystem._strip_protocol(path))
        return Location(_local_fs(), fs_path, fs_path)
    try:
        fs, fs_path = fsspec.core.url_to_fs(path, **(storage_options or {}))
    except ImportError as exc:  # fsspec knows the protocol; its package is not installed
        scheme = path.split("://", 1)[0]
        s3 = scheme in ("s3", "s3a")
        # fsspec raises its own ImportError from the one naming the missing package.
        module = getattr(exc.__cause__, "name", None) or exc.name or scheme
        module = "s3fs" if s3 else module
        raise MissingExtraError(
            module, "s3" if s3 else None, f"opening {path!r}", str(exc)
        ) from exc
    except (ValueError, TypeError) as exc:  # an unknown protocol or a bad storage option
        raise InvalidOptionError(f"cannot open {path!r}: {exc}") from exc
    if isinstance(fs, LocalFileSystem):
        fs_path = _absolute(fs_path)
        url = fs_path
    else:
        url = path
    return Location(fs, fs_path, url)


def _absolute(path: str) -> str:
    """``path`` made absolute and normal, naming the file the operating system would open.

    ``os.path.abspath`` drops ``link/..`` as text, but the system goes to the parent of the
    link's target: a path with ``..`` in it has its directory resolved first.
    """
    if ".." not in path.split("/"):
        return os.path.abspath(path)
    head, tail = os.path.split(path.rstrip("/"))
    if tail in ("..", "."):
        return os.path.realpath(path)
    return os.path.join(os.path.realpath(head), tail)


@functools.cache
def _local_fs() -> LocalFileSystem:
    """The local file system (fsspec's own instance: the one ``url_to_fs`` returns)."""
    return LocalFileSystem()


#: How a storage error is handled: ``"missing"`` and ``"denied"`` are raised at once as what
#: they are, ``"transient"`` is worth another attempt, ``"permanent"`` is raised at once.
ErrorKind = Literal["missing", "denied", "transient", "permanent"]

#: Errnos of requests that are wrong in themselves: retrying gives the same answer.
_PERMANENT_ERRNOS = frozenset(
    {
        errno.EINVAL,
        errno.EISDIR,
        errno.ENOTDIR,
        errno.ENOSYS,
        errno.ENAMETOOLONG,
        errno.EMSGSIZE,
        errno.EEXIST,
        errno.ENOTEMPTY,
        getattr(errno, "EREMCHG", errno.EINVAL),  # s3fs: a redirect to another region
    }
)
_DENIED_ERRNOS = frozenset({errno.EACCES, errno.EPERM})
#: Service error codes that mean "later": throttling, timeouts, a busy or failing server.
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestTimeout",
        "RequestTimeoutException",
        "ServiceUnavailable",
        "InternalError",
        "InternalServerError",
        "503",
        "500",
    }
)
_MISSING_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "NoSuchVersion", "NotFound", "404"})
_DENIED_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "403"}
)
#: Exception classes (matched by name anywhere in the class hierarchy, so that the optional
#: libraries that define them need not be imported) raised when a transfer fails on the way:
#: botocore's checksum, timeout, connection and streaming errors, aiohttp's payload and
#: disconnect errors, http.client's short reads, fsspec's sync timeout.
_TRANSIENT_CLASSES = frozenset(
    {
        "FlexibleChecksumError",
        "ChecksumError",
        "HTTPClientError",
        "ReadTimeoutError",
        "ConnectTimeoutError",
        "EndpointConnectionError",
        "ConnectionClosedError",
        "IncompleteReadError",
        "ResponseStreamingError",
        "ResponseParserError",
        "ClientPayloadError",
        "ClientConnectionError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "IncompleteRead",
        "RemoteDisconnected",
        "ChunkedEncodingError",
        "ProtocolError",
        "FSTimeoutError",
        "TimeoutError",
        "ConnectionError",
    }
)
_DENIED_CLASSES = frozenset(
    {"NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"}
)


def _response_status(exc: BaseException) -> tuple[int | None, str | None]:
    """The HTTP status and service error code of a botocore-style ``ClientError``, if any.

    s3fs raises an ``OSError`` caused by the ``ClientError``, so an ``OSError``'s cause is
    looked at too.
    """
    candidates = [exc]
    if isinstance(exc, OSError) and exc.__cause__ is not None:
        candidates.append(exc.__cause__)
    for candidate in candidates:
        response = getattr(candidate, "response", None)
        if isinstance(response, dict):
            error = response.get("Error") or {}
            meta = response.get("ResponseMetadata") or {}
            status = meta.get("HTTPStatusCode")
            code = error.get("Code")
            return (
                status if isinstance(status, int) else None,
                str(code) if code is not None else None,
            )
    return None, None


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status of an error response (aiohttp's ``status``, gcsfs's ``code``)."""
    for name in ("status", "code"):
        value = getattr(exc, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            return value
    return None


def is_precondition_failed(exc: BaseException) -> bool:
    """True when a conditional write was refused because its condition failed (HTTP 412).

    s3fs raises ``FileExistsError`` for a failed ``If-None-Match``; a store that does not name
    the condition still answers 412 ``PreconditionFailed``.
    """
    if isinstance(exc, FileExistsError):
        return True
    status, code = _response_status(exc)
    return status == 412 or code == "PreconditionFailed" or _http_status(exc) == 412


def _kind_of_status(status: int | None, code: str | None) -> ErrorKind | None:
    if code in _MISSING_CODES or status == 404:
        return "missing"
    if code in _DENIED_CODES or status in (401, 403):
        return "denied"
    if code in _TRANSIENT_CODES or status in (408, 429) or (status is not None and status >= 500):
        return "transient"
    if status is not None and 400 <= status < 500:
        return "permanent"
    return None


def classify_error(exc: BaseException) -> ErrorKind:
    """How a storage call's exception is handled: missing, denied, transient or permanent.

    Transient: a transfer that failed on the way (checksum of the transfer, truncated body,
    reset, timeout), a 5xx answer, throttling. Permanent: a request that is wrong in itself
    (a bad range, a bad argument). Libraries are recognized by class name, so that botocore
    and aiohttp stay optional.
    """
    if isinstance(exc, FileNotFoundError):
        return "missing"
    if isinstance(exc, PermissionError):
        return "denied"
    kind = _kind_of_status(*_response_status(exc))
    if kind is not None:
        return kind
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & _DENIED_CLASSES:
        return "denied"
    if isinstance(exc, (IsADirectoryError, NotADirectoryError)):
        return "permanent"
    if names & _TRANSIENT_CLASSES:
        return "transient"
    kind = _kind_of_status(_http_status(exc), None)
    if kind is not None:
        return kind
    if isinstance(exc, OSError):
        if exc.errno == errno.ENOENT:
            return "missing"
        if exc.errno in _DENIED_ERRNOS:
            return "denied"
        return "permanent" if exc.errno in _PERMANENT_ERRNOS else "transient"
    return "permanent"


def storage_error(exc: BaseException, url: str, action: str) -> ShuffleIOError:
    """The :class:`ShuffleIOError` (or :class:`MissingObjectError`) that stands for ``exc``.

    The message names the action and the URL; ``exc`` should be set as its cause.
    """
    if isinstance(exc, ShuffleIOError):
        return exc
    kind = classify_error(exc)
    if kind == "missing":
        return MissingObjectError(errno.ENOENT, f"{action}: {url} does not exist")
    if kind == "denied":
        return ShuffleIOError(errno.EACCES, f"{action}: permission denied for {url}")
    code = exc.errno if isinstance(exc, OSError) and isinstance(exc.errno, int) else None
    detail = str(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
    return ShuffleIOError(code or errno.EIO, f"{action} {url}: {detail}")


@contextlib.contextmanager
def storage_errors(url: str, action: str) -> Iterator[None]:
    """Re-raise any storage error as :class:`ShuffleIOError` naming the URL and the action.

    Everything a storage library raises is mapped, botocore's and aiohttp's exceptions too
    (they are not ``OSError``); only this package's own errors and ``MemoryError`` pass.
    """
    try:
        yield
    except (ArrowShuffleError, MemoryError):
        raise
    except Exception as exc:
        raise storage_error(exc, url, action) from exc


def object_size(location: Location) -> int:
    """Size in bytes of the object at ``location``."""
    with storage_errors(location.url, "reading the size of"):
        return int(location.fs.size(location.path))


def read_bytes(location: Location, start: int | None = None, end: int | None = None) -> bytes:
    """Read ``[start, end)`` of an object (the whole object by default)."""
    with storage_errors(location.url, "reading"):
        data = location.fs.cat_file(location.path, start=start, end=end)
    return bytes(data)


def list_directory(directory: Location) -> dict[str, Mapping[str, Any]]:
    """The objects directly inside ``directory`` by name, with their listing details.

    A listing cache (s3fs keeps one) is dropped first: a cached listing may predate a commit.
    A directory that does not exist lists as empty.
    """
    directory.fs.invalidate_cache(directory.path)
    with storage_errors(directory.url, "listing"):
        try:
            entries = directory.fs.ls(directory.path, detail=True)
        except FileNotFoundError:
            return {}
    return {
        posixpath.basename(str(e["name"]).rstrip("/")): e
        for e in entries
        if e.get("type") != "directory"
    }


def modification_time(entry: Mapping[str, Any]) -> float | None:
    """Seconds since the epoch at which an fsspec listing entry was last modified.

    Local file systems give ``mtime`` (seconds), S3 ``LastModified`` (a datetime); other file
    systems use ``last_modified``, ``updated`` or ``mtime`` as a datetime or an ISO string.
    None when the entry carries no time.
    """
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = entry.get(key)
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:  # naive times from object stores are UTC
                value = value.replace(tzinfo=datetime.timezone.utc)
            return value.timestamp()
    return None


def raise_naming(exc: FormatError, url: str) -> NoReturn:
    """Raise ``exc`` with ``url`` at the start of its message.

    The codecs do not know which object they decode; the reader does.
    """
    if url in str(exc):
        raise exc
    try:
        named = type(exc)(f"{url}: {exc.detail}", rule=exc.rule)
    except TypeError:  # a subclass with another signature: keep it as it is
        raise exc from exc.__cause__
    raise named from exc
