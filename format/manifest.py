"""Encode and decode the dataset manifest (JSON). Pure: bytes in, objects out.

The manifest is written last: a dataset is exactly the files its manifest lists.
"""

from __future__ import annotations

import base64
import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from arrowshuffle.format.errors import CorruptFileError, FormatError, UnsupportedVersionError
from arrowshuffle.format.index import FORMAT_VERSION_MAJOR, schema_from_bytes, schema_to_bytes

MANIFEST_NAME = "_arrowshuffle_manifest.json"
MANIFEST_KIND = "arrowshuffle-dataset"
#: A manifest larger than this is refused before it is parsed.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class ManifestFile:
    """One committed data/index pair, with names relative to the dataset directory."""

    data: str
    index: str
    data_size: int
    index_size: int
    rows: int
    regions: int
    index_crc32c: int


@dataclass(frozen=True)
class Manifest:
    """A dataset: a schema, a subpartition count, a partitioner and its committed files."""

    schema: pa.Schema
    num_subpartitions: int
    partitioner: dict[str, Any]
    files: tuple[ManifestFile, ...]
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def total_rows(self) -> int:
        """Rows stored over all files (a broadcast chunk counts once)."""
        return sum(f.rows for f in self.files)


def encode_manifest(manifest: Manifest) -> bytes:
    """Encode a manifest as indented UTF-8 JSON."""
    doc = {
        "kind": MANIFEST_KIND,
        "format_version": FORMAT_VERSION_MAJOR,
        "schema": base64.b64encode(schema_to_bytes(manifest.schema)).decode(),
        "num_subpartitions": manifest.num_subpartitions,
        "partitioner": manifest.partitioner,
        "total_rows": manifest.total_rows,
        "properties": manifest.properties,
        "files": [
            {
                "data": f.data,
                "index": f.index,
                "data_size": f.data_size,
                "index_size": f.index_size,
                "rows": f.rows,
                "regions": f.regions,
                "index_crc32c": f.index_crc32c,
            }
            for f in manifest.files
        ],
    }
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def _require(doc: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = doc.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        expected = (
            kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        )
        raise CorruptFileError(
            f"manifest {where}: expected '{key}' to be {expected}, found {value!r:.80}", rule="M1"
        )
    return value


def _check_name(name: str, where: str) -> str:
    """A file name must stay inside the dataset directory (no absolute path, no '..')."""
    normal = posixpath.normpath(name)
    if (
        not name
        or "\\" in name
        or name.startswith("/")
        or "://" in name
        or normal == ".."
        or normal.startswith("../")
        or normal != name
    ):
        raise FormatError(
            f"manifest {where}: file name {name!r} leaves the dataset directory; expected a "
            "plain relative name",
            rule="M3",
        )
    return name


def decode_manifest(data: bytes) -> Manifest:
    """Decode and check a manifest.

    Raises:
        FormatError: rule M1 (not a manifest), M2 (version) or M3 (a file name outside the
            dataset directory).
    """
    if len(data) > MAX_MANIFEST_BYTES:
        raise CorruptFileError(
            f"manifest is {len(data)} bytes, more than the {MAX_MANIFEST_BYTES} allowed", rule="M1"
        )
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptFileError(f"manifest is not JSON: {exc}", rule="M1") from exc
    if not isinstance(doc, dict) or doc.get("kind") != MANIFEST_KIND:
        found = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
        raise CorruptFileError(
            f"not an arrowshuffle manifest: expected kind {MANIFEST_KIND!r}, found {found!r}",
            rule="M1",
        )
    version = _require(doc, "format_version", int, "header")
    if version != FORMAT_VERSION_MAJOR:
        raise UnsupportedVersionError(
            f"manifest format version {version} is not supported: this reader reads version "
            f"{FORMAT_VERSION_MAJOR}",
            rule="M2",
        )
    try:
        schema_bytes = base64.b64decode(_require(doc, "schema", str, "header"), validate=True)
    except ValueError as exc:
        raise CorruptFileError(f"manifest schema is not base64: {exc}", rule="M1") from exc
    schema = schema_from_bytes(schema_bytes, rule="M1")
    num_subpartitions = _require(doc, "num_subpartitions", int, "header")
    if num_subpartitions < 1:
        raise CorruptFileError(
            f"manifest declares {num_subpartitions} subpartitions, expected at least 1", rule="M1"
        )
    partitioner = _require(doc, "partitioner", dict, "header")
    properties = doc.get("properties") or {}
    if not isinstance(properties, dict):
        raise CorruptFileError(
            f"manifest header: expected 'properties' to be an object, found {properties!r:.80}",
            rule="M1",
        )
    files = []
    for i, entry in enumerate(_require(doc, "files", list, "header")):
        where = f"file #{i}"
        if not isinstance(entry, dict):
            raise CorruptFileError(f"manifest {where}: expected an object", rule="M1")
        files.append(
            ManifestFile(
                data=_check_name(_require(entry, "data", str, where), where),
                index=_check_name(_require(entry, "index", str, where), where),
                data_size=_require(entry, "data_size", int, where),
                index_size=_require(entry, "index_size", int, where),
                rows=_require(entry, "rows", int, where),
                regions=_require(entry, "regions", int, where),
                index_crc32c=_require(entry, "index_crc32c", int, where),
            )
        )
    return Manifest(
        schema=schema,
        num_subpartitions=num_subpartitions,
        partitioner=partitioner,
        files=tuple(files),
        properties={str(k): str(v) for k, v in properties.items()},
    )
