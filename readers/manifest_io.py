"""Load a dataset's manifest: the one way readers, validators and writers fetch it."""

from __future__ import annotations

from dataclasses import dataclass

from arrowshuffle.format.errors import FormatError, MissingObjectError
from arrowshuffle.format.manifest import MAX_MANIFEST_BYTES, Manifest, decode_manifest
from arrowshuffle.format.naming import MANIFEST_NAME
from arrowshuffle.readers.source import ReadStats, RemoteSource
from arrowshuffle.readers.storage import Location, raise_naming, read_bytes, storage_errors


@dataclass(frozen=True)
class LoadedManifest:
    """A decoded manifest, the bytes it was decoded from and what fetching them cost."""

    manifest: Manifest
    raw: bytes
    stats: ReadStats | None


def load_manifest(directory: Location, *, name_url: bool = True) -> LoadedManifest:
    """Fetch and decode the manifest of the dataset at ``directory``.

    On object stores the manifest is fetched like any range (transient errors retried,
    requests counted); one that does not decode may have been damaged on the way and is
    fetched again, unless the same bytes come back.

    Args:
        directory: the dataset directory.
        name_url: prefix the message of a manifest that does not decode with its URL (a
            validation report names the dataset already).

    Raises:
        MissingObjectError: the directory has no manifest (nothing was committed there).
        FormatError: the manifest does not decode (rules M1-M3, M8): the error of
            :func:`~arrowshuffle.format.manifest.decode_manifest`.
        ShuffleIOError: another storage failure.
    """
    location = directory.child(MANIFEST_NAME)
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
                raise MissingObjectError(
                    exc.errno,
                    f"{directory.url} is not an arrowshuffle dataset: it has no {MANIFEST_NAME} "
                    "(nothing was committed there, or the path is wrong)",
                ) from exc
        try:
            manifest = decode_manifest(data)
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
