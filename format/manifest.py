"""Encode and decode the dataset manifest (JSON). Pure: bytes in, objects out.

The manifest is written last: a dataset is exactly the files its manifest lists.
"""

from __future__ import annotations

import base64
import json
import os
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from arrowshuffle.format.errors import CorruptFileError, FormatError, UnsupportedVersionError
from arrowshuffle.format.index import (
    FORMAT_VERSION_MAJOR,
    MAX_SUBPARTITIONS,
    schema_from_bytes,
    schema_to_bytes,
)
from arrowshuffle.format.json_text import parse_json
from arrowshuffle.format.naming import INDEX_SUFFIX
from arrowshuffle.format.rule_registry import implements

MANIFEST_KIND = "arrowshuffle-dataset"
#: 1.1 added the optional per-subpartition totals, 1.2 numbered versions (``version``,
#: ``commit_id``, ``operation``); readers of earlier minor versions ignore both.
MANIFEST_VERSION_MINOR = 2
#: The longest commit id or operation name a manifest may carry (M1).
MAX_COMMIT_TEXT = 256
#: A manifest larger than this is refused before it is parsed.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
#: Arrays and objects nested deeper than this are refused before parsing (M1): written
#: manifests nest a few levels, and a parser must never recurse as deep as a document asks.
MAX_MANIFEST_DEPTH = 64

_U32_MAX = 2**32 - 1
_I64_MAX = 2**63 - 1
#: The integer fields of a file entry and their allowed ranges (the index stores sizes and rows
#: as 64-bit, regions and checksums as 32-bit fields; 2**63 and more fits no signed reader).
_FILE_INTEGERS: tuple[tuple[str, int, int], ...] = (
    ("data_size", 0, _I64_MAX),
    ("index_size", 0, _I64_MAX),
    ("rows", 0, _I64_MAX),
    ("regions", 0, _U32_MAX),
    ("index_crc32c", 0, _U32_MAX),
)
#: A plain relative name: components of allowed characters, none of them ``.`` or ``..``.
#: No backslash, colon (a URL scheme, a drive, a chained URL) or control character anywhere.
_COMPONENT = r"(?!\.\.?(?:/|\Z))[^/\\:\x00-\x1f\x7f]+"
_PLAIN_NAME = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*\Z")


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
class SubpartitionTotals:
    """Per subpartition, the chunk bytes and rows of every listed file added up."""

    bytes: tuple[int, ...]
    rows: tuple[int, ...]


@dataclass(frozen=True)
class Manifest:
    """A dataset: a schema, a subpartition count, a partitioner and its committed files."""

    schema: pa.Schema
    num_subpartitions: int
    partitioner: dict[str, Any]
    files: tuple[ManifestFile, ...]
    properties: dict[str, str] = field(default_factory=dict)
    #: Bytes and rows of every subpartition summed over the files (a broadcast chunk counted
    #: for each subpartition), when the writer recorded them (format 1.1); read plans use them.
    sizes: SubpartitionTotals | None = None
    #: The manifest version (1.2): the number of the commit that wrote it, 0 for a manifest
    #: written before versions were numbered (section 8.1).
    version: int = 0
    #: A random id of the commit that wrote it (1.2), so a committer can recognize its own.
    commit_id: str = ""
    #: What that commit did (1.2): ``write``, ``append``, ``overwrite``, ``compact``, ...
    operation: str = ""

    @property
    def total_rows(self) -> int:
        """Rows stored over all files (a broadcast chunk counts once)."""
        return sum(f.rows for f in self.files)


def encode_manifest(manifest: Manifest) -> bytes:
    """Encode a manifest as indented UTF-8 JSON."""
    doc = {
        "kind": MANIFEST_KIND,
        "format_version": FORMAT_VERSION_MAJOR,
        "format_version_minor": MANIFEST_VERSION_MINOR,
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
    if manifest.version:
        doc["version"] = manifest.version
    if manifest.commit_id:
        doc["commit_id"] = manifest.commit_id
    if manifest.operation:
        doc["operation"] = manifest.operation
    if manifest.sizes is not None:
        doc["subpartitions"] = {
            "bytes": list(manifest.sizes.bytes),
            "rows": list(manifest.sizes.rows),
        }
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


_JSON_TYPES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
    list: "an array",
    dict: "an object",
}


def _found(value: object) -> str:
    """What a JSON value is, for messages: its type and a short excerpt."""
    kind = _JSON_TYPES.get(type(value), type(value).__name__)
    text = json.dumps(value) if isinstance(value, (str, int, float, bool)) or value is None else ""
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}".rstrip() if kind != "null" else "null"


def _require(doc: dict[str, Any], key: str, kind: type, where: str) -> Any:
    """``doc[key]`` when it has JSON type ``kind`` (a bool is not an integer), else M1."""
    value = doc.get(key)
    if type(value) is not kind:
        found = "nothing" if key not in doc else _found(value)
        raise CorruptFileError(
            f"manifest {where}: expected '{key}' to be {_JSON_TYPES[kind]}, found {found}",
            rule="M1",
        )
    return value


def _bound(n: int) -> str:
    """A range bound for messages: powers of two near the fields' widths are named as such."""
    for bits in (31, 32, 63, 64):
        if n == 2**bits - 1:
            return f"2**{bits}-1"
    return str(n)


def _require_int(doc: dict[str, Any], key: str, low: int, high: int, where: str) -> int:
    """``doc[key]`` when it is an integer in ``[low, high]``, else M1."""
    value = doc.get(key)
    if type(value) is not int or not low <= value <= high:
        found = "nothing" if key not in doc else _found(value)
        raise CorruptFileError(
            f"manifest {where}: expected '{key}' to be an integer from {low} to {_bound(high)}, "
            f"found {found}",
            rule="M1",
        )
    return value


def _name_problem(name: str) -> str:
    """Why a name that is not plain is refused (the slow path of :func:`_check_name`)."""
    if not name:
        return "it is empty"
    if "://" in name:
        return "it is a URL"
    if "\\" in name:
        return "it holds a backslash"
    if ":" in name:
        return "it holds a colon"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "it holds a control character"
    if name.startswith("/"):
        return "it is absolute"
    if any(part in (".", "..") for part in name.split("/")):
        return "it has a '.' or '..' component"
    return "it has an empty component (a doubled or trailing '/')"


def _check_name(name: str, where: str, what: str) -> str:
    """A name stays inside the dataset directory, whatever reads it (part of rule M3)."""
    if _PLAIN_NAME.match(name) is None:
        raise FormatError(
            f"manifest {where}: {what} name {name!r:.120} leaves the dataset directory or is not "
            f"plain ({_name_problem(name)}); expected a relative name such as 'part-0.arrow'",
            rule="M3",
        )
    return name


@implements("M3")
def check_file_names(data: str, index: str, where: str) -> None:
    """M3: both names are plain relative names and the index is named ``<data>.idx``.

    Raises:
        FormatError: (M3) naming the file and what is wrong with its name.
    """
    _check_name(data, where, "data file")
    _check_name(index, where, "index")
    if index != data + INDEX_SUFFIX:
        raise FormatError(
            f"manifest {where}: the index is listed as {index!r:.120}; expected "
            f"{data + INDEX_SUFFIX!r:.120}, where readers look for it",
            rule="M3",
        )


def check_resolved_inside(
    name: str, resolved: str, root: str, link: tuple[str, str] | None = None
) -> None:
    """Part of rule M3 on a file system with symbolic links: a name resolves inside the directory.

    A plain name can still lead out of the dataset directory through a symbolic link (the
    file's own or a directory's on the way); one that stays inside is allowed.

    Args:
        name: the name as listed.
        resolved: the absolute path it resolves to, every link followed.
        root: the dataset directory, resolved the same way.
        link: the first link on the way that leads out, and what it points to, when known.

    Raises:
        FormatError: (M3) naming the file, the link and where it points.
    """
    inside = os.path.commonpath([root, resolved]) == root
    if inside:
        return
    via = "" if link is None else f" through the symbolic link {link[0]} -> {link[1]}"
    raise FormatError(
        f"{name!r:.120} resolves to {resolved}{via}, outside the dataset directory {root}; "
        "expected every listed file inside the dataset directory (a link that stays inside "
        "is allowed)",
        rule="M3",
    )


@implements("M8")
def check_listed_once(names: tuple[str, ...], seen: dict[str, str], where: str) -> None:
    """M8: no name is listed twice, compared ignoring case; ``seen`` maps keys to names.

    Raises:
        FormatError: (M8) naming the file listed again.
    """
    for name in names:
        key = _name_key(name)
        other = seen.get(key)
        if other is not None:
            alias = "" if other == name else f" (as {other!r:.120}: one file where case is ignored)"
            raise FormatError(
                f"manifest {where}: {name!r:.120} is listed more than once{alias}; expected "
                "each file once",
                rule="M8",
            )
        seen[key] = name


@implements("M2")
def check_manifest_version(version: int) -> None:
    """M2: the manifest's ``format_version`` is the supported major version.

    Raises:
        UnsupportedVersionError: (M2) naming both versions.
    """
    if version != FORMAT_VERSION_MAJOR:
        raise UnsupportedVersionError(
            f"manifest format version {version} is not supported: this reader reads version "
            f"{FORMAT_VERSION_MAJOR}",
            rule="M2",
        )


def _name_key(name: str) -> str:
    """Names that one file system may take for the same file map to one key (rule M8)."""
    if name.isascii():
        return name.lower()
    return unicodedata.normalize("NFC", name).casefold()


def _parse(data: bytes) -> Any:
    """UTF-8 JSON of bounded depth and unique keys, or M1."""
    return parse_json(data, "manifest", "M1", MAX_MANIFEST_DEPTH)


def _decode_file(i: int, entry: Any, seen: dict[str, str]) -> ManifestFile:
    """One entry of ``files``: rules M1 (types), M3 (names) and M8 (each file listed once)."""
    where = f"file #{i}"
    if type(entry) is not dict:
        raise CorruptFileError(
            f"manifest {where}: expected an object, found {_found(entry)}", rule="M1"
        )
    data = _check_name(_require(entry, "data", str, where), where, "data file")
    where = f"file #{i} ({data!r:.80})"
    index = _require(entry, "index", str, where)
    check_file_names(data, index, where)
    sizes = [_require_int(entry, key, low, high, where) for key, low, high in _FILE_INTEGERS]
    check_listed_once((data, index), seen, where)
    return ManifestFile(data, index, *sizes)


def _decode_files(entries: list[Any]) -> tuple[ManifestFile, ...]:
    """Every entry of ``files``; a fast pass, with :func:`_decode_file` to name a problem.

    The fast pass builds no message, since a manifest may list hundreds of thousands of files.
    """
    files: list[ManifestFile] = []
    seen: dict[str, str] = {}
    plain = _PLAIN_NAME.match
    get = dict.get
    for i, entry in enumerate(entries):
        if type(entry) is dict:
            data, index = get(entry, "data"), get(entry, "index")
            data_size, index_size = get(entry, "data_size"), get(entry, "index_size")
            rows, regions, crc = (
                get(entry, "rows"),
                get(entry, "regions"),
                get(entry, "index_crc32c"),
            )
            if (
                type(data) is str
                and type(index) is str
                and index == data + INDEX_SUFFIX  # then index is plain when data is
                and plain(data) is not None
                and type(data_size) is int
                and 0 <= data_size <= _I64_MAX
                and type(index_size) is int
                and 0 <= index_size <= _I64_MAX
                and type(rows) is int
                and 0 <= rows <= _I64_MAX
                and type(regions) is int
                and 0 <= regions <= _U32_MAX
                and type(crc) is int
                and 0 <= crc <= _U32_MAX
            ):
                data_key = _name_key(data)
                index_key = data_key + INDEX_SUFFIX  # case and normalization stop at the '.'
                if data_key not in seen and index_key not in seen:
                    seen[data_key], seen[index_key] = data, index
                    files.append(
                        ManifestFile(data, index, data_size, index_size, rows, regions, crc)
                    )
                    continue
        files.append(_decode_file(i, entry, seen))  # raises, naming what is wrong
    return tuple(files)


@implements("M1")
def decode_manifest(data: bytes) -> Manifest:
    """Decode and check a manifest, trusting nothing in it (M1 here, M2, M3 and M8 on the way).

    Raises:
        FormatError: rule M1 (not a manifest: not UTF-8 JSON, nested too deep, a field missing
            or of the wrong type or range), M2 (version), M3 (a file name outside the dataset
            directory, or an index not named after its data file) or M8 (a file listed twice).
    """
    if len(data) > MAX_MANIFEST_BYTES:
        raise CorruptFileError(
            f"manifest is {len(data)} bytes, more than the {MAX_MANIFEST_BYTES} allowed", rule="M1"
        )
    doc = _parse(bytes(data))
    if type(doc) is not dict or doc.get("kind") != MANIFEST_KIND:
        found = _found(doc.get("kind")) if type(doc) is dict else _found(doc)
        raise CorruptFileError(
            f"not an arrowshuffle manifest: expected kind {MANIFEST_KIND!r}, found {found}",
            rule="M1",
        )
    check_manifest_version(_require(doc, "format_version", int, "header"))
    try:
        schema_bytes = base64.b64decode(_require(doc, "schema", str, "header"), validate=True)
    except ValueError as exc:
        if isinstance(exc, FormatError):
            raise
        raise CorruptFileError(f"manifest schema is not base64: {exc}", rule="M1") from exc
    schema = schema_from_bytes(schema_bytes, rule="M1")
    num_subpartitions = _require_int(doc, "num_subpartitions", 1, MAX_SUBPARTITIONS, "header")
    partitioner = _require(doc, "partitioner", dict, "header")
    if "total_rows" in doc:
        _require_int(doc, "total_rows", 0, _I64_MAX, "header")  # informational, recomputed
    properties = doc.get("properties")
    if properties is None:
        properties = {}
    elif type(properties) is not dict:
        raise CorruptFileError(
            f"manifest header: expected 'properties' to be an object, found {_found(properties)}",
            rule="M1",
        )
    files = _decode_files(_require(doc, "files", list, "header"))
    if "format_version_minor" in doc:
        _require_int(doc, "format_version_minor", 0, _I64_MAX, "header")
    version = _require_int(doc, "version", 0, _I64_MAX, "header") if "version" in doc else 0
    commit_id, operation = (_optional_text(doc, key) for key in ("commit_id", "operation"))
    return Manifest(
        schema=schema,
        num_subpartitions=num_subpartitions,
        partitioner=partitioner,
        files=files,
        properties={str(k): str(v) for k, v in properties.items()},
        sizes=_decode_sizes(doc.get("subpartitions"), num_subpartitions),
        version=version,
        commit_id=commit_id,
        operation=operation,
    )


def _optional_text(doc: dict[str, Any], key: str) -> str:
    """An optional short string of the header (``commit_id``, ``operation``), else M1."""
    if key not in doc:
        return ""
    value = _require(doc, key, str, "header")
    if len(value) > MAX_COMMIT_TEXT:
        raise CorruptFileError(
            f"manifest header: expected '{key}' of at most {MAX_COMMIT_TEXT} characters, found "
            f"{len(value)}",
            rule="M1",
        )
    return str(value)


@implements("M10")
def check_version_number(named: int, manifest: Manifest) -> None:
    """M10: a version file holds the manifest version its name gives.

    Args:
        named: the number in the file's name (``_arrowshuffle_versions/<named>.json``).
        manifest: the decoded manifest it holds.

    Raises:
        CorruptFileError: (M10) naming both numbers.
    """
    if manifest.version != named:
        raise CorruptFileError(
            f"manifest version file {named} holds version {manifest.version}; expected the "
            "version its name gives (a file copied or renamed by hand?)",
            rule="M10",
        )


def _decode_sizes(value: Any, num_subpartitions: int) -> SubpartitionTotals | None:
    """The optional per-subpartition totals: two lists of ``N`` integers, else M1."""
    if value is None:
        return None
    where = "subpartition totals"
    if type(value) is not dict:
        raise CorruptFileError(
            f"manifest {where}: expected an object, found {_found(value)}", rule="M1"
        )
    lists = []
    for key in ("bytes", "rows"):
        items = _require(value, key, list, where)
        if len(items) != num_subpartitions or not all(
            type(v) is int and 0 <= v <= _I64_MAX for v in items
        ):
            raise CorruptFileError(
                f"manifest {where}: expected '{key}' to be {num_subpartitions} integers from 0 "
                f"to {_bound(_I64_MAX)}, found {len(items)} values",
                rule="M1",
            )
        lists.append(tuple(items))
    return SubpartitionTotals(lists[0], lists[1])
