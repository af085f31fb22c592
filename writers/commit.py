"""One dataset commit: create the next manifest version, or learn that another job did first.

Every commit (a write, an append, an overwrite, a compaction, a Spark job) follows the same
optimistic protocol (spec section 8.1):

1. read the version in force, ``n`` (one listing of the versions directory and one read);
2. build the new manifest from it: the operation decides what a moved base means (an append
   simply builds on whatever is in force; an overwrite refuses a base other than the one it
   started from; a compaction rebases while its inputs are still listed);
3. create version ``n + 1`` only if no other commit created it (:func:`create_exclusive`);
   if another did, go back to 1.

Step 1 always lists the versions, also when the job remembers the version it started from
(which saves the read): a vacuum may have expired that version and removed its successor's
file meanwhile, and creating the successor's number again would succeed below the version in
force, unseen by every reader.

Only step 3 publishes anything, and it cannot half-succeed. On object stores the answer to
step 3 can be lost, and a PUT retried after its first attempt landed answers 412: the commit
then reads version ``n + 1`` and recognizes its own by the random commit id it carries. When
it cannot tell (the store fails meanwhile), it says so (:class:`CommitOutcomeUnknownError`)
and keeps its files, which a committed version might list.

After a commit, the manifest is also copied to ``_arrowshuffle_manifest.json`` for readers that
predate versions (best effort; current readers never read it while versions exist).
"""

from __future__ import annotations

import dataclasses
import errno
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from arrowshuffle.format.errors import (
    ArrowShuffleError,
    CommitConflictError,
    MissingObjectError,
    ShuffleIOError,
)
from arrowshuffle.format.manifest import Manifest, encode_manifest
from arrowshuffle.format.naming import MANIFEST_NAME
from arrowshuffle.readers.manifest_io import (
    VersionFile,
    list_versions,
    load_manifest,
    version_location,
)
from arrowshuffle.readers.storage import Location
from arrowshuffle.writers.exclusive import check_exclusive_create, create_exclusive
from arrowshuffle.writers.output import AtomicOutput

__all__ = [
    "MAX_ATTEMPTS",
    "Base",
    "Build",
    "CommitOutcomeUnknownError",
    "commit_version",
    "read_current",
    "write_compat_copy",
]

#: Commits tried before giving up when other jobs keep committing first.
MAX_ATTEMPTS = 64
#: The longest pause between two attempts, in seconds (pauses grow and are drawn at random,
#: so that committers that collided do not collide again).
_MAX_PAUSE = 2.0

#: Builds the new manifest from the one in force (None: no dataset yet); returns None to
#: commit nothing (the manifest in force stays), raises to refuse.
Build = Callable[[Manifest | None], Manifest | None]


@dataclass(frozen=True)
class Base:
    """The dataset a job started from: the version in force then, None when there was none.

    With the manifest it read, a commit's first attempt builds on it without reading it again
    when the listing shows it still in force (when another commit lands after the listing,
    creating the successor fails and the commit reads the version in force).
    """

    version: int | None
    manifest: Manifest | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, manifest: Manifest | None) -> Base:
        """The base of a job that read ``manifest`` (None: there was no dataset)."""
        return cls(None if manifest is None else manifest.version, manifest)

    @property
    def known(self) -> bool:
        """True when a first attempt may build on this base without reading it again.

        A dataset of one manifest (version 0) is read again: its first commit also keeps the
        manifest as version 0, which needs the versions listing.
        """
        return self.version is None or (self.version > 0 and self.manifest is not None)


class CommitOutcomeUnknownError(ShuffleIOError):
    """A commit whose answer was lost: the new version may or may not have been created.

    The job's files are kept (a committed version might list them; vacuum removes them if
    none does). ``commit_id`` is the id the version would carry.
    """

    def __init__(self, message: str, commit_id: str) -> None:
        super().__init__(errno.EIO, message)
        self.commit_id = commit_id

    def __reduce__(self) -> tuple[type[CommitOutcomeUnknownError], tuple[str, str]]:
        return type(self), (str(self.strerror), self.commit_id)


def read_current(directory: Location, versions: list[VersionFile] | None = None) -> Manifest | None:
    """The manifest in force, or None when the directory holds no dataset.

    Raises:
        FormatError: the manifest in force does not decode.
        ShuffleIOError: a storage failure.
    """
    try:
        return load_manifest(directory, versions=versions).manifest
    except MissingObjectError:
        if versions:  # a listed version is never removed while it is in force
            raise
        return None


def commit_version(
    directory: Location, build: Build, *, operation: str, base: Base | None = None
) -> Manifest | None:
    """Create the next manifest version of ``directory`` from what ``build`` makes of the last.

    Args:
        directory: the dataset directory.
        build: makes the new manifest from the one in force (see :data:`Build`); called again
            whenever another commit landed first.
        operation: what the commit does, recorded in the manifest (``append``, ...).
        base: what the job read when it started; the first attempt builds on it when it is
            :attr:`Base.known` (saving a listing and a read when no other commit came between).

    Returns:
        The manifest committed, or the one in force when ``build`` returned None.

    Raises:
        CommitConflictError: other jobs committed first on every attempt.
        CommitOutcomeUnknownError: the store failed while creating the version, or answered
            that it exists, and whose it is could not be found out.
        InvalidOptionError: the store cannot create a file exclusively.
        ShuffleIOError: a storage failure before anything was committed.
        Exception: whatever ``build`` raises.
    """
    check_exclusive_create(directory)
    commit_id = uuid.uuid4().hex
    for attempt in range(MAX_ATTEMPTS):
        versions = list_versions(directory)
        if attempt == 0 and base is not None and base.known and _in_force(versions, base):
            current = base.manifest
        else:
            try:
                current = read_current(directory, versions)
            except MissingObjectError:
                if not versions or not _replaced(directory, versions[-1].version):
                    raise
                continue  # replaced, then expired by a vacuum, between the listing and the read
        manifest = build(current)
        if manifest is None:
            return current
        if current is not None and not versions:
            _preserve(directory, current)
        number = 1 if current is None else current.version + 1
        candidate = dataclasses.replace(
            manifest, version=number, commit_id=commit_id, operation=operation
        )
        payload = encode_manifest(candidate)
        if _create(directory, number, payload, commit_id):
            write_compat_copy(directory, payload)
            return candidate
        _pause(attempt)
    raise CommitConflictError(
        f"gave up committing to {directory.url} after {MAX_ATTEMPTS} attempts: another job "
        "committed first every time; nothing was committed"
    )


def _in_force(versions: list[VersionFile], base: Base) -> bool:
    """Whether the job's base is still the newest version listed (None: still no version).

    A base read when the job started may be expired since, and a vacuum may have removed its
    successor's version file: creating that number again would succeed below the version in
    force, and no reader would ever see the commit. The listing tells.
    """
    newest = versions[-1].version if versions else None
    return newest == base.version


def _create(directory: Location, number: int, payload: bytes, commit_id: str) -> bool:
    """Create version ``number``; True when this commit created it, False when another did."""
    location = version_location(directory, number)
    try:
        if create_exclusive(location, payload):
            return True
    except ShuffleIOError as exc:
        if location.is_local:
            raise  # a local link either happened or not
        owner = _owner(directory, number)
        if owner is None:
            raise CommitOutcomeUnknownError(
                f"committing version {number} of {directory.url} failed and whether it was "
                f"created is unknown ({exc}); the job's files were kept. If version {number} "
                f"exists and carries commit_id {commit_id}, the commit landed",
                commit_id,
            ) from exc
        return owner == commit_id
    # Taken: by another commit, or by this one's own first attempt whose answer was lost.
    if location.is_local:
        return False  # a local link is never retried
    owner = _owner(directory, number)
    if owner is None:
        # Trying again would build on this very version if it is this commit's own.
        raise CommitOutcomeUnknownError(
            f"committing version {number} of {directory.url}: it exists (maybe created by "
            "this commit's own attempt whose answer was lost) but could not be read, so whether "
            "this commit created it is unknown; the job's files were kept. If version "
            f"{number} carries commit_id {commit_id}, the commit landed",
            commit_id,
        )
    return owner == commit_id


def _replaced(directory: Location, number: int) -> bool:
    """True when a version newer than ``number`` exists now."""
    latest = list_versions(directory)
    return bool(latest) and latest[-1].version > number


def _owner(directory: Location, number: int) -> str | None:
    """The commit id version ``number`` carries; None when it does not exist or cannot be read."""
    try:
        return load_manifest(directory, version=number).manifest.commit_id
    except ArrowShuffleError:
        return None


def _preserve(directory: Location, current: Manifest) -> None:
    """Keep the single manifest of a dataset written before versions as a version of its own.

    Readers that opened it keep a snapshot that vacuum knows of. Another committer doing the
    same at once writes the same bytes, so a taken name is fine.
    """
    create_exclusive(version_location(directory, current.version), encode_manifest(current))


def write_compat_copy(directory: Location, payload: bytes) -> None:
    """Copy the committed manifest to the name readers before versions look for (best effort)."""
    location = directory.child(MANIFEST_NAME)
    try:
        if location.is_local:
            out = AtomicOutput(location)
            try:
                out.file.write(payload)
                out.commit()
            except BaseException:
                out.discard()
                raise
        else:
            location.fs.pipe_file(location.path, payload)
    except Exception:
        pass


def _pause(attempt: int) -> None:
    time.sleep(random.uniform(0, min(_MAX_PAUSE, 0.01 * 2**attempt)))
