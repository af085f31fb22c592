"""``vacuum``: remove what killed or failed writers left inside a dataset directory.

A writer that dies before it finishes leaves objects that readers never see (spec.md, section 7):
hidden temporary files of unfinished data files, indexes and manifests, and pairs that no
manifest lists (written, never committed; or replaced by an overwrite that died before it
cleaned up). Nothing removes them on its own; :func:`vacuum` does, without ever touching the
dataset as readers see it.

What counts as a leftover (the names the writers of this package use, and nothing else):

* temporaries ``.<name>.<32 hex>.tmp`` (how :class:`~arrowshuffle.writers.output.AtomicOutput`
  names a file before its rename) whose ``<name>`` is a data file ``part-*.arrow``, its index
  ``part-*.arrow.idx`` or the manifest ``_arrowshuffle_manifest.json``;
* data files ``part-*.arrow`` and indexes ``part-*.arrow.idx`` that the manifest does not list.

Other unlisted ``*.arrow`` and ``*.idx`` files are kept: writers name every dataset file
``part-…`` (:func:`~arrowshuffle.writers.dataset_writer.new_file_name`), so any other name was put
there by someone else, and deleting it would be a guess. The validator counts the same names as
unlisted, so what it reports is what vacuum may remove.
"""

from __future__ import annotations

import datetime
import errno
import os
import posixpath
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from arrowshuffle.format.errors import FormatError, MissingObjectError
from arrowshuffle.format.manifest import Manifest
from arrowshuffle.format.naming import MANIFEST_NAME, is_part_name, temp_target
from arrowshuffle.format.notation import parse_duration
from arrowshuffle.readers.storage import Location, member, resolve, storage_errors
from arrowshuffle.writers.dataset_writer import read_manifest

#: The grace period of :func:`vacuum`: objects modified more recently are left alone.
DEFAULT_OLDER_THAN = "1h"


@dataclass(frozen=True)
class VacuumReport:
    """What :func:`vacuum` removed, or would remove on a dry run.

    Attributes:
        url: the dataset directory.
        dry_run: True when nothing was removed and ``removed`` lists what would have been.
        older_than: the grace period in seconds.
        removed: names (relative to the directory) removed, or to be removed on a dry run.
        recent: leftovers left alone because they were modified within the grace period.
        failed: ``(name, reason)`` of leftovers whose removal failed.
    """

    url: str
    dry_run: bool
    older_than: float
    removed: tuple[str, ...]
    recent: tuple[str, ...]
    failed: tuple[tuple[str, str], ...] = ()

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
        }


def vacuum(
    path: str | os.PathLike[str],
    *,
    older_than: float | str | datetime.timedelta = DEFAULT_OLDER_THAN,
    dry_run: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> VacuumReport:
    """Remove writers' leftovers from the dataset at ``path``; the dataset itself is untouched.

    Only objects directly inside the directory are considered (never subdirectories, never
    anything outside it), only leftovers as the module documentation defines them, and only
    those last modified more than ``older_than`` ago, so the files of a writer still running
    are left alone. Nothing the manifest lists is removed, nor the manifest.

    The manifest is read before the directory is listed and read again right before anything is
    removed; only names that neither manifest lists are removed, so a commit that lands during
    the vacuum keeps its files. One race remains: a job that wrote a file more than
    ``older_than`` ago and commits it after that second read loses it (its dataset then
    reports the file missing). Choose ``older_than`` longer than the longest write job, from its
    first file to its commit. A local writer that has not written to its temporary file for
    longer than ``older_than`` (it waits on slow input) loses it and fails with an IO error when
    it closes. Modification times come from the storage (``mtime`` locally, ``LastModified`` on
    S3) and are compared with this machine's clock.

    A directory without a manifest is refused, although it may hold only a failed first write:
    it may as well be a first commit in progress, or not a dataset at all. Delete such a
    directory as a whole instead.

    On object stores a killed writer leaves an incomplete multipart upload, which is not an
    object and is not listed: a bucket lifecycle rule (``AbortIncompleteMultipartUpload``)
    removes those.

    Args:
        path: the dataset directory, a local path or an fsspec URL.
        older_than: the grace period: seconds, a ``timedelta`` or a string such as ``"30s"``,
            ``"15m"``, ``"1h"`` or ``"2d"``. ``0`` removes every leftover whatever its time.
        dry_run: only report what would be removed.
        storage_options: passed to fsspec for URLs.

    Returns:
        What was removed (or would be), what was too recent, and what failed to go.

    Raises:
        MissingObjectError: the directory holds no manifest (nothing is removed).
        FormatError: the manifest cannot be decoded (nothing is removed).
        InvalidOptionError: an unreadable ``older_than`` or path.
        ShuffleIOError: the directory cannot be listed.

    Example:
        >>> vacuum("s3://bucket/shuffle/", older_than="2h", dry_run=True)  # doctest: +SKIP
    """
    grace = parse_duration(older_than, name="older_than")
    directory = resolve(path, storage_options)
    listed = _listed(_require_manifest(directory))
    now = time.time()  # before listing: an object modified meanwhile looks younger, not older
    entries = _list(directory)
    recent: list[str] = []
    doomed: list[str] = []
    for name, entry in sorted(entries.items()):
        if name in listed or not is_leftover(name):
            continue
        if grace > 0:
            modified = modification_time(entry)
            # Without a time (an unknown file system) the object may belong to a running writer.
            if modified is None or now - modified < grace:
                recent.append(name)
                continue
        doomed.append(name)
    if doomed:
        # An overwrite or append that committed since the first read may list some of them.
        listed_now = _listed(_require_manifest(directory))
        doomed = [name for name in doomed if name not in listed_now]
    failed: list[tuple[str, str]] = []
    removed: list[str] = []
    for name in doomed:
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
    return VacuumReport(
        url=directory.url,
        dry_run=dry_run,
        older_than=grace,
        removed=tuple(removed),
        recent=tuple(recent),
        failed=tuple(failed),
    )


def is_leftover(name: str) -> bool:
    """True for names a writer leaves behind: its temporaries, and data and index files.

    Whether a data or index file is a leftover also depends on the manifest, which this
    function does not read.
    """
    target = temp_target(name)
    if target is not None:
        return target == MANIFEST_NAME or is_part_name(target)
    return is_part_name(name)


def modification_time(entry: Mapping[str, Any]) -> float | None:
    """Seconds since the epoch at which an fsspec listing entry was last modified.

    Local file systems give ``mtime`` (seconds), S3 ``LastModified`` (a datetime); other file
    systems use ``last_modified``, ``updated`` or ``mtime`` as a datetime or an ISO string.
    None when the entry carries no time.
    """
    for key in ("mtime", "LastModified", "last_modified", "updated"):
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


def _require_manifest(directory: Location) -> Manifest:
    """The manifest in force; no manifest, or one that cannot be decoded, stops the vacuum."""
    directory.fs.invalidate_cache(directory.path)  # a cached listing may predate a commit
    try:
        manifest = read_manifest(directory)
    except FormatError as exc:
        raise type(exc)(
            f"not vacuuming {directory.url}: its {MANIFEST_NAME} cannot be decoded: {exc.detail}",
            rule=exc.rule,
        ) from exc
    if manifest is None:
        raise MissingObjectError(
            errno.ENOENT,
            f"not vacuuming {directory.url}: expected a dataset directory holding "
            f"{MANIFEST_NAME}, found none",
        )
    return manifest


def _listed(manifest: Manifest) -> set[str]:
    return {name for f in manifest.files for name in (f.data, f.index)}


def _list(directory: Location) -> dict[str, Mapping[str, Any]]:
    """The objects directly inside ``directory`` by name, with their listing details."""
    directory.fs.invalidate_cache(directory.path)
    with storage_errors(directory.url, "listing"):
        entries = directory.fs.ls(directory.path, detail=True)
    return {
        posixpath.basename(str(e["name"]).rstrip("/")): e
        for e in entries
        if e.get("type") != "directory"
    }
