"""Edits of the manifest in force: what a buggy or hostile writer, or a damaged disk, leaves.

Readers read the highest version of ``_arrowshuffle_versions/`` (spec section 8.1) and ignore
the compatibility copy ``_arrowshuffle_manifest.json`` while versions exist, so a test that
damages a dataset's manifest must damage that version. Edits keep the version's number in the
document, so that the rule a test expects is not hidden by M10 (a version file holding another
version). A dataset without versions (written before they were numbered) is edited in its
single manifest.

Every function takes a local path or an fsspec URL (with ``storage_options``); the file is
located by this module's own listing, not by the package's reader.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
from pathlib import Path
from typing import Any

import fsspec

from arrowshuffle.format.manifest import Manifest, decode_manifest, encode_manifest
from arrowshuffle.format.naming import (
    MANIFEST_NAME,
    VERSIONS_DIR,
    version_from_name,
    version_name,
)

__all__ = [
    "current_version",
    "make_legacy",
    "manifest_in_force",
    "read_manifest_bytes",
    "replace_manifest",
]


def _fs(url_or_path: str | os.PathLike[str], storage_options: dict[str, Any] | None) -> Any:
    fs, path = fsspec.core.url_to_fs(os.fspath(url_or_path), **(storage_options or {}))
    return fs, path.rstrip("/")


def _versions(fs: Any, directory: str) -> list[int]:
    """The version numbers present, oldest first (an empty list: no versions directory)."""
    try:
        names = fs.ls(posixpath.join(directory, VERSIONS_DIR), detail=False, refresh=True)
    except FileNotFoundError:
        return []
    found = [version_from_name(posixpath.basename(n.rstrip("/"))) for n in names]
    return sorted(v for v in found if v is not None)


def _in_force(
    url_or_path: str | os.PathLike[str], storage_options: dict[str, Any] | None
) -> tuple[Any, str, int | None]:
    """The file system, the path of the manifest in force and its version (None: legacy)."""
    fs, directory = _fs(url_or_path, storage_options)
    versions = _versions(fs, directory)
    if not versions:
        return fs, posixpath.join(directory, MANIFEST_NAME), None
    number = versions[-1]
    return fs, posixpath.join(directory, VERSIONS_DIR, version_name(number)), number


def manifest_in_force(directory: str | os.PathLike[str]) -> Path:
    """The local file of the manifest readers of ``directory`` read."""
    _, path, _ = _in_force(directory, None)
    return Path(path)


def current_version(
    url_or_path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> int | None:
    """The number of the version in force, None for a dataset without versions."""
    return _in_force(url_or_path, storage_options)[2]


def read_manifest_bytes(
    url_or_path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> bytes:
    """The bytes of the manifest in force."""
    fs, path, _ = _in_force(url_or_path, storage_options)
    return bytes(fs.cat_file(path))


def replace_manifest(
    url_or_path: str | os.PathLike[str],
    manifest: Manifest | dict[str, Any] | bytes,
    storage_options: dict[str, Any] | None = None,
) -> str:
    """Overwrite the manifest in force with ``manifest``; return the path written.

    A :class:`Manifest` or a JSON document is given the number of the version it replaces (a
    document only when it has a ``version`` member or the version is not 0); bytes are written
    as they are (a hostile edit of the bytes :func:`read_manifest_bytes` returned keeps the
    number they carry).
    """
    fs, path, number = _in_force(url_or_path, storage_options)
    if isinstance(manifest, Manifest):
        payload = encode_manifest(dataclasses.replace(manifest, version=number or 0))
    elif isinstance(manifest, dict):
        doc = dict(manifest)
        if number:
            doc["version"] = number
        else:
            doc.pop("version", None)
        payload = json.dumps(doc, indent=1).encode()
    else:
        payload = bytes(manifest)
    fs.pipe_file(path, payload)
    return path


def make_legacy(
    url_or_path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None
) -> Manifest:
    """Turn a dataset into one written before versions: a single manifest, version 0.

    The manifest in force becomes ``_arrowshuffle_manifest.json`` without the members of 1.2
    (``version``, ``commit_id``, ``operation``), and the versions directory is removed.
    """
    fs, directory = _fs(url_or_path, storage_options)
    current = decode_manifest(read_manifest_bytes(url_or_path, storage_options))
    legacy = dataclasses.replace(current, version=0, commit_id="", operation="")
    fs.pipe_file(posixpath.join(directory, MANIFEST_NAME), encode_manifest(legacy))
    versions = posixpath.join(directory, VERSIONS_DIR)
    if fs.exists(versions):
        fs.rm(versions, recursive=True)
    assert not _versions(fs, directory)
    return legacy
