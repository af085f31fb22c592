"""``vacuum``: expire old manifest versions and remove what only they, or nobody, listed.

A dataset keeps every file its retained manifest versions list (spec sections 7.3 and 8.1): a
reader that opened a version keeps reading it after newer versions replaced it. Files replaced
by an overwrite or a compaction, and leftovers of killed or failed writers, stay until
:func:`vacuum` removes them:

* a manifest version that was replaced longer ago than the grace period (its successor was
  created then) is expired: its file goes, and so do the files only expired versions listed;
* hidden temporary files ``.<name>.<32 hex>.tmp`` (how writers name a file before it is
  published) whose ``<name>`` is a data file ``part-*.arrow``, its index ``part-*.arrow.idx``, the
  manifest ``_arrowshuffle_manifest.json`` or a manifest version;
* data files ``part-*.arrow`` and indexes ``part-*.arrow.idx`` that no retained version lists.

Other unlisted ``*.arrow`` and ``*.idx`` files are kept: writers name every dataset file
``part-…`` (:func:`~arrowshuffle.format.naming.new_file_name`), so any other name was put there
by someone else, and deleting it would be a guess. The validator counts the same names as
unlisted, so what it reports is what vacuum may remove.
"""

from __future__ import annotations

import datetime
import errno
import itertools
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from arrowshuffle.format.errors import FormatError, MissingObjectError
from arrowshuffle.format.manifest import Manifest, decode_manifest
from arrowshuffle.format.naming import (
    MANIFEST_NAME,
    VERSIONS_DIR,
    is_part_name,
    temp_target,
    version_from_name,
    version_name,
)
from arrowshuffle.format.notation import parse_duration
from arrowshuffle.readers.manifest_io import (
    LoadedManifest,
    VersionFile,
    list_versions,
    load_manifest,
)
from arrowshuffle.readers.storage import (
    Location,
    list_directory,
    member,
    modification_time,
    resolve,
)
from arrowshuffle.writers.commit import write_compat_copy

#: The grace period of :func:`vacuum`: objects modified more recently are left alone.
DEFAULT_OLDER_THAN = "1h"


@dataclass(frozen=True)
class VacuumReport:
    """What :func:`vacuum` removed, or would remove on a dry run.

    Attributes:
        url: the dataset directory.
        dry_run: True when nothing was removed and ``removed`` lists what would have been.
        older_than: the grace period in seconds.
        removed: names (relative to the directory; expired versions as
            ``_arrowshuffle_versions/<n>.json``) removed, or to be removed on a dry run.
        recent: leftovers left alone because they were modified within the grace period.
        failed: ``(name, reason)`` of leftovers whose removal failed.
        retained_versions: the manifest versions kept, the one in force last (empty for a
            dataset written before versions).
    """

    url: str
    dry_run: bool
    older_than: float
    removed: tuple[str, ...]
    recent: tuple[str, ...]
    failed: tuple[tuple[str, str], ...] = ()
    retained_versions: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        """True when every removal that was attempted succeeded."""
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable form."""
        return {
            "url": self.url,
            "ok": self.ok,
            "dry_run": self.dry_run,
            "older_than_seconds": self.older_than,
            "removed": list(self.removed),
            "recent": list(self.recent),
            "failed": [{"name": name, "error": reason} for name, reason in self.failed],
            "retained_versions": list(self.retained_versions),
        }


def vacuum(
    path: str | os.PathLike[str],
    *,
    older_than: float | str | datetime.timedelta = DEFAULT_OLDER_THAN,
    dry_run: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> VacuumReport:
    """Expire old manifest versions and remove files no retained version lists.

    The version in force is always kept, and so is every version replaced less than
    ``older_than`` ago, with every file they list: a reader that opened such a version keeps
    reading it. Beyond that, only objects directly inside the directory (and expired versions
    and stale temporaries in its versions directory) are considered, only leftovers as the
    module documentation defines them, and only those last modified more than ``older_than``
    ago, so the files of a writer still running are left alone.

    The versions are read before the directory is listed and again right before anything is
    removed; only names that no version then retained lists are removed, so a commit that
    lands during the vacuum keeps its files. Two races remain, both bounded by ``older_than``:
    a job that wrote a file more than ``older_than`` ago and commits it after that second read
    loses it (its dataset then reports the file missing), and a reader that opened a version
    replaced more than ``older_than`` ago may find its files gone (it fails with
    :class:`~arrowshuffle.format.errors.MissingObjectError`, never returns other rows). Choose
    ``older_than`` longer than the longest write job and the longest read. Modification times
    come from the storage (``mtime`` locally, ``LastModified`` on S3) and are compared with
    this machine's clock.

    A directory without a manifest is refused, although it may hold only a failed first write:
    it may as well be a first commit in progress, or not a dataset at all. Delete such a
    directory as a whole instead.

    On object stores a killed writer leaves an incomplete multipart upload, which is not an
    object and is not listed: a bucket lifecycle rule (``AbortIncompleteMultipartUpload``)
    removes those.

    Args:
        path: the dataset directory, a local path or an fsspec URL.
        older_than: the grace period: seconds, a ``timedelta`` or a string such as ``"30s"``,
            ``"15m"``, ``"1h"`` or ``"2d"``. ``0`` keeps only the version in force and removes
            every leftover whatever its time.
        dry_run: only report what would be removed.
        storage_options: passed to fsspec for URLs.

    Returns:
        What was removed (or would be), what was too recent, what failed to go, and the
        versions retained.

    Raises:
        MissingObjectError: the directory holds no manifest (nothing is removed).
        FormatError: a retained manifest version cannot be decoded (nothing is removed).
        InvalidOptionError: an unreadable ``older_than`` or path.
        ShuffleIOError: the directory cannot be listed.

    Example:
        >>> vacuum("s3://bucket/shuffle/", older_than="2h", dry_run=True)  # doctest: +SKIP
    """
    grace = parse_duration(older_than, name="older_than")
    directory = resolve(path, storage_options)
    now = time.time()  # before listing: an object modified meanwhile looks younger, not older
    versions = list_versions(directory)
    loaded = _require_manifest(directory, versions)
    current = loaded.manifest
    retained, expired = _split_versions(versions, now, grace)
    listed = _listed(directory, current, retained)
    candidates: list[tuple[str, Mapping[str, Any]]] = sorted(list_directory(directory).items())
    candidates += [
        (f"{VERSIONS_DIR}/{name}", entry)
        for name, entry in sorted(list_directory(directory.child(VERSIONS_DIR)).items())
        if _is_version_temporary(name)
    ]
    recent: list[str] = []
    doomed: list[str] = []
    for name, entry in candidates:
        if name in listed or not (is_leftover(name) or name.startswith(VERSIONS_DIR + "/")):
            continue
        if grace > 0:
            modified = modification_time(entry)
            # Without a time (an unknown file system) the object may belong to a running writer.
            if modified is None or now - modified < grace:
                recent.append(name)
                continue
        doomed.append(name)
    if doomed or expired:
        # A commit that landed since the first read may list some of them.
        latest = list_versions(directory)
        newer = [v for v in latest if v.version > (versions[-1].version if versions else -1)]
        if newer:
            listed |= _listed(directory, None, [v.version for v in newer])
        doomed = [name for name in doomed if name not in listed]
    removed, failed = _remove(
        directory, [_version_path(v) for v in expired] + doomed, dry_run=dry_run
    )
    if versions and not dry_run:
        _refresh_copy(directory, loaded)
    return VacuumReport(
        url=directory.url,
        dry_run=dry_run,
        older_than=grace,
        removed=tuple(removed),
        recent=tuple(recent),
        failed=tuple(failed),
        retained_versions=tuple(retained),
    )


def _split_versions(
    versions: list[VersionFile], now: float, grace: float
) -> tuple[list[int], list[int]]:
    """Retained and expired versions, each oldest first; the one in force is always retained.

    A version was replaced when the next version present was created (a missing successor
    makes this later, never earlier): it expires once that was longer than ``grace`` ago.
    Without a time for the successor, a version is retained. Expired versions are always the
    oldest ones, so the retained versions stay consecutive (rule M11).
    """
    cut = 0
    for _, successor in itertools.pairwise(versions):
        replaced = successor.modified
        if replaced is None or now - replaced < grace:
            break
        cut += 1
    return [v.version for v in versions[cut:]], [v.version for v in versions[:cut]]


def _version_path(version: int) -> str:
    return f"{VERSIONS_DIR}/{version_name(version)}"


def _is_version_temporary(name: str) -> bool:
    target = temp_target(name)
    return target is not None and version_from_name(target) is not None


def _remove(
    directory: Location, names: list[str], *, dry_run: bool
) -> tuple[list[str], list[tuple[str, str]]]:
    """Remove ``names`` (relative to ``directory``) in order; report what went and what failed."""
    failed: list[tuple[str, str]] = []
    removed: list[str] = []
    for name in names:
        try:
            # Never through a link that leads out of the directory (one inside may go).
            location = member(directory, name)
        except FormatError as exc:
            failed.append((name, str(exc)))
            continue
        if dry_run:
            removed.append(name)
            continue
        try:
            directory.fs.rm_file(location.path)
        except FileNotFoundError:
            continue  # already gone: another vacuum or the writer's own cleanup
        except Exception as exc:
            # One object that will not go must not lose the report of the others.
            failed.append((name, " ".join(str(exc).split()) or type(exc).__name__))
        else:
            removed.append(name)
    return removed, failed


def is_leftover(name: str) -> bool:
    """True for names a writer leaves behind: its temporaries, and data and index files.

    Whether a data or index file is a leftover also depends on the manifests, which this
    function does not read.
    """
    target = temp_target(name)
    if target is not None:
        return target == MANIFEST_NAME or is_part_name(target)
    return is_part_name(name)


def _require_manifest(directory: Location, versions: list[VersionFile]) -> LoadedManifest:
    """The manifest in force; no manifest, or one that cannot be decoded, stops the vacuum."""
    try:
        return load_manifest(directory, versions=versions)
    except FormatError as exc:
        raise type(exc)(
            f"not vacuuming {directory.url}: its manifest cannot be decoded: {exc.detail}",
            rule=exc.rule,
        ) from exc
    except MissingObjectError as exc:
        raise MissingObjectError(
            errno.ENOENT,
            f"not vacuuming {directory.url}: expected a dataset directory holding "
            f"{MANIFEST_NAME} or {VERSIONS_DIR}, found neither",
        ) from exc


def _listed(directory: Location, current: Manifest | None, versions: list[int]) -> set[str]:
    """Every name the manifest in force and the given versions list (each version read once)."""
    manifests = [] if current is None else [current]
    for version in versions:
        if current is not None and version == current.version:
            continue
        try:
            manifests.append(load_manifest(directory, version=version).manifest)
        except FormatError as exc:
            raise type(exc)(
                f"not vacuuming {directory.url}: its retained manifest version {version} cannot "
                f"be decoded: {exc.detail}",
                rule=exc.rule,
            ) from exc
    return {name for m in manifests for f in m.files for name in (f.data, f.index)}


def _refresh_copy(directory: Location, loaded: LoadedManifest) -> None:
    """Point the copy that readers before versions read at the version in force.

    A committer that paused between its commit and its copy may have left an older one there,
    which such readers would read after its files expire. A copy of a newer version than the
    one this vacuum read (a commit landed meanwhile) stays.
    """
    location = directory.child(MANIFEST_NAME)
    try:
        existing = bytes(location.fs.cat_file(location.path))
    except Exception:
        existing = None
    if existing == loaded.raw:
        return
    try:
        newer = existing is not None and decode_manifest(existing).version > loaded.manifest.version
    except FormatError:
        newer = False
    if not newer:
        write_compat_copy(directory, loaded.raw)
