"""Load a dataset's manifest: the one way readers, validators and writers fetch it.

A dataset's manifests are numbered versions, one file per commit in ``_arrowshuffle_versions/``
(spec section 8.1); the one in force is the highest. A dataset written before versions were
numbered has a single ``_arrowshuffle_manifest.json``, read as version 0 when the directory holds
no version.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from arrowshuffle.format.errors import FormatError, MissingObjectError
from arrowshuffle.format.manifest import (
    MAX_MANIFEST_BYTES,
    Manifest,
    check_version_number,
    decode_manifest,
)
from arrowshuffle.format.naming import MANIFEST_NAME, VERSIONS_DIR, version_from_name, version_name
from arrowshuffle.readers.source import ReadStats, RemoteSource
from arrowshuffle.readers.storage import (
    Location,
    list_directory,
    modification_time,
    raise_naming,
    read_bytes,
    storage_errors,
)


@dataclass(frozen=True)
class LoadedManifest:
    """A decoded manifest, the bytes it was decoded from and what fetching them cost."""

    manifest: Manifest
    raw: bytes
    stats: ReadStats | None


@dataclass(frozen=True)
class VersionFile:
    """One file of the versions directory: its version and when the storage last modified it."""

    version: int
    modified: float | None


def list_versions(directory: Location) -> list[VersionFile]:
    """The manifest versions the dataset directory holds, oldest first (one listing request).

    Other names in the versions directory (a committer's temporary file) are not versions.
    A directory without versions (a dataset of one manifest, or none) gives an empty list.
    """
    entries = list_directory(directory.child(VERSIONS_DIR))
    found = [
        VersionFile(number, modification_time(entry))
        for name, entry in entries.items()
        if (number := version_from_name(name)) is not None
    ]
    return sorted(found, key=lambda v: v.version)


def version_location(directory: Location, version: int) -> Location:
    """Where manifest version ``version`` of the dataset lives."""
    return directory.child(VERSIONS_DIR).child(version_name(version))


def load_manifest(
    directory: Location,
    *,
    version: int | None = None,
    versions: list[VersionFile] | None = None,
    name_url: bool = True,
) -> LoadedManifest:
    """Fetch and decode the manifest in force at ``directory``, or one version of it.

    The version in force is the highest of the versions directory (one listing), else the
    single manifest of a dataset written before versions (version 0). On object stores a
    manifest is fetched like any range (transient errors retried, requests counted); one that
    does not decode may have been damaged on the way and is fetched again, unless the same
    bytes come back.

    Args:
        directory: the dataset directory.
        version: the version to read (time travel); the one in force by default. Version 0
            of a dataset without versions is its single manifest.
        versions: the listing of :func:`list_versions`, when the caller has it.
        name_url: prefix the message of a manifest that does not decode with its URL (a
            validation report names the dataset already).

    Raises:
        MissingObjectError: the directory has no manifest (nothing was committed there), or
            not the version asked for.
        FormatError: the manifest does not decode (rules M1-M3, M8, M10): the error of
            :func:`~arrowshuffle.format.manifest.decode_manifest`.
        ShuffleIOError: another storage failure.
    """
    if version is None:
        if versions is None:
            versions = list_versions(directory)
        if versions:
            version = versions[-1].version
    if version is None:
        return _load(directory, directory.child(MANIFEST_NAME), None, name_url)
    location = version_location(directory, version)
    try:
        return _load(directory, location, version, name_url)
    except MissingObjectError as exc:
        retained = list_versions(directory) if versions is None else versions
        if version == 0 and not retained:
            single = _single_manifest(directory, name_url)
            if single is not None:
                return single
        if not retained:
            why = "it holds no manifest versions (a dataset written before versions has only "
            why += "version 0, its single manifest)"
        else:
            span = (
                f"only version {retained[0].version} is"
                if len(retained) == 1
                else f"versions {retained[0].version} to {retained[-1].version} are"
            )
            why = f"{span} retained (vacuum removes versions replaced longer ago than its "
            why += "grace period)"
        raise MissingObjectError(
            exc.errno or errno.ENOENT,
            f"{directory.url} has no manifest version {version}: {why}",
        ) from exc


def _single_manifest(directory: Location, name_url: bool) -> LoadedManifest | None:
    """Version 0 of a dataset written before versions: its single manifest, if it is one."""
    try:
        loaded = _load(directory, directory.child(MANIFEST_NAME), None, name_url)
    except MissingObjectError:
        return None
    return loaded if loaded.manifest.version == 0 else None


def _load(
    directory: Location, location: Location, version: int | None, name_url: bool
) -> LoadedManifest:
    source = None if location.is_local else RemoteSource(location)
    previous: bytes | None = None
    attempt = 0
    while True:
        with storage_errors(location.url, "opening the dataset"):
            try:
                if source is None:
                    # A ranged read from 0: without a range some file systems ask for the size.
                    data = read_bytes(location, 0)
                else:
                    # One byte past the bound, so that a manifest too large is seen to be.
                    data = source.read_prefix(MAX_MANIFEST_BYTES + 1).to_pybytes()
            except MissingObjectError as exc:
                if version is not None:
                    raise
                raise MissingObjectError(
                    exc.errno,
                    f"{directory.url} is not an arrowshuffle dataset: it has no {MANIFEST_NAME} "
                    f"and no {VERSIONS_DIR} (nothing was committed there, or the path is wrong)",
                ) from exc
        try:
            manifest = decode_manifest(data)
            if version is not None:
                check_version_number(version, manifest)
            break
        except FormatError as exc:
            if source is None or data == previous or attempt >= source.retry_budget:
                if not name_url:
                    raise
                raise_naming(exc, location.url)
            previous = data
            attempt += 1
            source.note_refetch("the manifest", attempt, exc)
    return LoadedManifest(manifest, data, None if source is None else source.stats())
