"""Encode and decode the index sidecar (format v1). Pure: bytes in, objects out.

The byte layout is normative in ``spec.md`` ("Index sidecar"). In short::

    header (96 B) | schema | partitioner JSON | region table | subpartition CRC table
    | entries (subpartition-major, 32 B each) | trailer (16 B)

Entries are stored subpartition-major, so the entries of subpartitions ``[a, b)`` are one
contiguous byte range, and each subpartition's block of entries has its own CRC32C in the
subpartition CRC table: a reader fetches the header, the metadata and only its slice.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.crc import crc32c
from arrowshuffle.format.errors import (
    ChecksumMismatchError,
    CorruptFileError,
    FormatError,
    InvalidOptionError,
    UnsupportedVersionError,
)
from arrowshuffle.format.json_text import parse_json
from arrowshuffle.format.rule_registry import Violation, implements

INDEX_MAGIC = b"ASHUFIDX"
TRAILER_MAGIC = b"ASHUFEND"
FORMAT_VERSION_MAJOR = 1
FORMAT_VERSION_MINOR = 0
HEADER_SIZE = 96
TRAILER_SIZE = 16
ALIGNMENT = 8
#: A remote index is fetched as this prefix first: header, metadata and often the entries, so
#: that a foreign or hostile object is refused from its header before the rest is downloaded.
INDEX_PREFIX_BYTES = 64 * 1024
#: The most subpartitions a file may have (a signed 32-bit count, as in Spark and Flink).
MAX_SUBPARTITIONS = 2**31 - 1
#: The deepest nesting of arrays and objects a partitioner spec may have (as in a manifest).
MAX_PARTITIONER_DEPTH = 64

#: Required flags: a reader that does not know a set bit must refuse the file. None in v1.
KNOWN_REQUIRED_FLAGS = 0
#: Optional flags, bits 0-1: the body compression the writer asked for (informational).
COMPRESSION_BITS = {"none": 0, "lz4": 1, "zstd": 2}
COMPRESSION_MASK = 0b11
#: Footer metadata key of the data file that carries the index's file id (rule V14).
FILE_ID_KEY = b"arrowshuffle.file_id"
#: Region flag bit 0: a broadcast region, one chunk that every subpartition's entry points at.
REGION_BROADCAST = 1

ENTRY_DTYPE = np.dtype(
    [
        ("offset", "<u8"),
        ("length", "<u8"),
        ("rows", "<u8"),
        ("batches", "<u4"),
        ("crc32c", "<u4"),
    ]
)
REGION_DTYPE = np.dtype(
    [("offset", "<u8"), ("length", "<u8"), ("flags", "<u4"), ("reserved", "<u4")]
)
SUBPARTITION_CRC_DTYPE = np.dtype("<u4")

# magic, major, minor, header size, required flags, optional flags, file id, data length,
# index length, total rows, regions, subpartitions, schema length, partitioner length,
# entries offset, meta CRC32C, header CRC32C.
_HEADER = struct.Struct("<8sHHIII16sQQQIIIIQII")
_TRAILER = struct.Struct("<II8s")
assert _HEADER.size == HEADER_SIZE and _TRAILER.size == TRAILER_SIZE
assert ENTRY_DTYPE.itemsize == 32 and REGION_DTYPE.itemsize == 24


def _pad(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@dataclass(frozen=True)
class IndexSections:
    """Byte offsets of the sections of one index, derived from its header fields."""

    schema_offset: int
    partitioner_offset: int
    regions_offset: int
    subpartition_crcs_offset: int
    entries_offset: int
    trailer_offset: int
    index_length: int

    @staticmethod
    def compute(
        header_size: int,
        schema_length: int,
        partitioner_length: int,
        num_regions: int,
        num_subpartitions: int,
    ) -> IndexSections:
        """Lay out the sections for the given sizes (Python ints, so nothing overflows)."""
        schema_offset = header_size
        partitioner_offset = schema_offset + _pad(schema_length)
        regions_offset = partitioner_offset + _pad(partitioner_length)
        crcs_offset = regions_offset + num_regions * REGION_DTYPE.itemsize
        entries_offset = crcs_offset + _pad(num_subpartitions * SUBPARTITION_CRC_DTYPE.itemsize)
        trailer_offset = entries_offset + num_subpartitions * num_regions * ENTRY_DTYPE.itemsize
        return IndexSections(
            schema_offset,
            partitioner_offset,
            regions_offset,
            crcs_offset,
            entries_offset,
            trailer_offset,
            trailer_offset + TRAILER_SIZE,
        )

    def entry_range(self, num_regions: int, start: int, stop: int) -> tuple[int, int]:
        """Byte range ``[begin, end)`` of the entries of subpartitions ``[start, stop)``."""
        block = num_regions * ENTRY_DTYPE.itemsize
        return self.entries_offset + start * block, self.entries_offset + stop * block


@dataclass(frozen=True)
class IndexHeader:
    """The fixed-size header of an index, as decoded (checksum already verified)."""

    version: tuple[int, int]
    required_flags: int
    optional_flags: int
    file_id: bytes
    data_length: int
    index_length: int
    total_rows: int
    num_regions: int
    num_subpartitions: int
    schema_length: int
    partitioner_length: int
    meta_crc32c: int
    sections: IndexSections

    @property
    def compression(self) -> str:
        """The body compression the writer used: ``none``, ``lz4`` or ``zstd``."""
        bits = self.optional_flags & COMPRESSION_MASK
        for name, value in COMPRESSION_BITS.items():
            if value == bits:
                return name
        return "unknown"


@dataclass(frozen=True)
class IndexMeta:
    """The variable-size metadata that follows the header."""

    schema: pa.Schema
    partitioner: dict[str, Any]
    regions: np.ndarray = field(repr=False)  # REGION_DTYPE, one per region
    subpartition_crcs: np.ndarray = field(repr=False)  # uint32, one per subpartition


@dataclass(frozen=True)
class ShuffleIndex:
    """A whole decoded index.

    ``entries`` has shape ``(num_subpartitions, num_regions)`` and dtype :data:`ENTRY_DTYPE`.
    """

    header: IndexHeader
    meta: IndexMeta
    entries: np.ndarray = field(repr=False)
    #: The trailer's reserved word (written 0; rule V20).
    trailer_reserved: int = 0

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the data file."""
        return self.meta.schema

    @property
    def num_regions(self) -> int:
        """Number of regions in the data file."""
        return self.header.num_regions

    @property
    def num_subpartitions(self) -> int:
        """Number of subpartitions every region is split into."""
        return self.header.num_subpartitions

    @property
    def broadcast_regions(self) -> np.ndarray:
        """Boolean mask over regions: True where the region is a broadcast region."""
        mask: np.ndarray = (self.meta.regions["flags"] & REGION_BROADCAST) != 0
        return mask


def schema_to_bytes(schema: pa.Schema) -> bytes:
    """Serialize an Arrow schema as an encapsulated IPC schema message."""
    return bytes(schema.serialize().to_pybytes())


def schema_from_bytes(data: bytes | memoryview, *, rule: str) -> pa.Schema:
    """Decode an encapsulated IPC schema message, or raise :class:`CorruptFileError`.

    ``rule`` is the rule of the caller's check (V7 for an index, M1 for a manifest).
    """
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(data))
    except (pa.ArrowInvalid, pa.ArrowIOError, pa.ArrowNotImplementedError) as exc:
        raise CorruptFileError(
            f"the schema section is not an Arrow IPC schema message: {exc}", rule=rule
        ) from exc
    try:
        _touch_names(schema)
    except UnicodeDecodeError as exc:
        raise CorruptFileError(
            f"the schema has a field name that is not UTF-8: {exc}", rule=rule
        ) from exc
    return schema


def _touch_names(schema: pa.Schema) -> None:
    """Decode every field name, nested ones too (pyarrow decodes them lazily)."""
    pending = [schema.field(i) for i in range(len(schema))]
    while pending:
        field = pending.pop()
        _ = field.name
        pending.extend(field.type.field(i) for i in range(field.type.num_fields))


def encode_partitioner(spec: dict[str, Any]) -> bytes:
    """Canonical JSON bytes for a partitioner spec (sorted keys, no spaces)."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()


def encode_index(
    *,
    schema: pa.Schema,
    partitioner: dict[str, Any],
    file_id: bytes,
    data_length: int,
    regions: np.ndarray,
    entries: np.ndarray,
    compression: str = "none",
) -> bytes:
    """Encode an index sidecar.

    Args:
        schema: the data file's Arrow schema.
        partitioner: the partitioner spec (JSON-serializable).
        file_id: 16 bytes that also stand in the data file's footer metadata.
        data_length: size of the data file in bytes.
        regions: array of :data:`REGION_DTYPE`, one per region.
        entries: array of :data:`ENTRY_DTYPE` with shape ``(num_subpartitions, num_regions)``.
        compression: the body compression of the data file's batches.

    Returns:
        The complete index bytes.
    """
    if len(file_id) != 16:
        raise InvalidOptionError(f"file_id must be 16 bytes, found {len(file_id)}")
    entries = np.ascontiguousarray(entries, dtype=ENTRY_DTYPE)
    num_subpartitions, num_regions = entries.shape
    if len(regions) != num_regions:
        raise InvalidOptionError(f"{len(regions)} regions but entries have {num_regions} columns")
    schema_bytes = schema_to_bytes(schema)
    partitioner_bytes = encode_partitioner(partitioner)
    sections = IndexSections.compute(
        HEADER_SIZE, len(schema_bytes), len(partitioner_bytes), num_regions, num_subpartitions
    )
    out = bytearray(sections.index_length)
    out[sections.schema_offset : sections.schema_offset + len(schema_bytes)] = schema_bytes
    out[sections.partitioner_offset : sections.partitioner_offset + len(partitioner_bytes)] = (
        partitioner_bytes
    )
    region_bytes = np.ascontiguousarray(regions, dtype=REGION_DTYPE).tobytes()
    out[sections.regions_offset : sections.regions_offset + len(region_bytes)] = region_bytes
    block = num_regions * ENTRY_DTYPE.itemsize
    entry_bytes = entries.tobytes()
    crcs = np.array(
        [crc32c(entry_bytes[s * block : (s + 1) * block]) for s in range(num_subpartitions)],
        dtype=SUBPARTITION_CRC_DTYPE,
    )
    crc_bytes = crcs.tobytes()
    out[sections.subpartition_crcs_offset : sections.subpartition_crcs_offset + len(crc_bytes)] = (
        crc_bytes
    )
    out[sections.entries_offset : sections.trailer_offset] = entry_bytes
    meta_crc = crc32c(memoryview(out)[HEADER_SIZE : sections.entries_offset])
    total_rows = int(_logical_rows(entries, regions))
    header_without_crc = _HEADER.pack(
        INDEX_MAGIC,
        FORMAT_VERSION_MAJOR,
        FORMAT_VERSION_MINOR,
        HEADER_SIZE,
        0,
        COMPRESSION_BITS[compression],
        file_id,
        data_length,
        sections.index_length,
        total_rows,
        num_regions,
        num_subpartitions,
        len(schema_bytes),
        len(partitioner_bytes),
        sections.entries_offset,
        meta_crc,
        0,
    )
    header_crc = crc32c(header_without_crc[:-4])
    out[:HEADER_SIZE] = header_without_crc[:-4] + struct.pack("<I", header_crc)
    index_crc = crc32c(memoryview(out)[: sections.trailer_offset])
    out[sections.trailer_offset :] = _TRAILER.pack(index_crc, 0, TRAILER_MAGIC)
    return bytes(out)


def _logical_rows(entries: np.ndarray, regions: np.ndarray) -> int:
    """Rows stored in the data file: a broadcast region's chunk counts once."""
    if entries.size == 0:
        return 0
    broadcast = (np.asarray(regions["flags"]) & REGION_BROADCAST) != 0
    per_region = entries["rows"].sum(axis=0, dtype=np.uint64)
    if broadcast.any():
        per_region = per_region.copy()
        per_region[broadcast] = entries["rows"][0, broadcast]
    return int(per_region.sum(dtype=np.uint64))


# ---------------------------------------------------------------------- rules V1-V7
# Checked while decoding: a broken one ends the decoding, so the decoders raise the violation.


@implements("V1")
def check_magic(found: bytes, *, trailer: bool = False) -> Violation | None:
    """V1: the index's leading magic (or, with ``trailer``, the trailer's magic)."""
    if trailer:
        if found == TRAILER_MAGIC:
            return None
        return Violation("V1", f"index trailer magic: expected {TRAILER_MAGIC!r}, found {found!r}")
    # A short prefix of the magic is a truncated index (V4); anything else is a foreign file.
    if found == INDEX_MAGIC or (len(found) < len(INDEX_MAGIC) and INDEX_MAGIC.startswith(found)):
        return None
    return Violation(
        "V1",
        f"not an arrowshuffle index: expected magic {INDEX_MAGIC!r}, found {found!r}",
        FormatError,
    )


@implements("V2")
def check_version(major: int, minor: int, required_flags: int = 0) -> Violation | None:
    """V2: the major version is supported and no unknown required flag is set.

    The flags are read only once the header checksum holds (a flipped bit is V3), so the
    decoder calls this a second time with them.
    """
    if major != FORMAT_VERSION_MAJOR:
        return Violation(
            "V2",
            f"index format version {major}.{minor} is not supported: this reader reads "
            f"version {FORMAT_VERSION_MAJOR}.x; "
            + ("upgrade arrowshuffle" if major > FORMAT_VERSION_MAJOR else "the file is invalid"),
            UnsupportedVersionError,
        )
    unknown = required_flags & ~KNOWN_REQUIRED_FLAGS
    if unknown:
        return Violation(
            "V2",
            f"index sets required flags {unknown:#x} that this reader does not know; "
            "upgrade arrowshuffle",
            UnsupportedVersionError,
        )
    return None


def _crc_mismatch(rule: str, what: str, stored: int, data: Any) -> Violation | None:
    actual = crc32c(data)
    if actual == stored:
        return None
    return Violation(
        rule, f"{what}: stored {stored:#010x}, computed {actual:#010x}", ChecksumMismatchError
    )


@implements("V3")
def check_header_crc(header: bytes | memoryview, stored: int) -> Violation | None:
    """V3: the CRC32C of the header's first 92 bytes is the stored one."""
    return _crc_mismatch("V3", "header checksum mismatch", stored, bytes(header[: HEADER_SIZE - 4]))


@implements("V4")
def check_size(what: str, found: int, low: int, high: int | None = None) -> Violation | None:
    """V4: a size of the index (the object, a fetched section, a header field) is in bounds.

    Args:
        what: the size, as the message names it.
        found: its value.
        low: the expected value, or the least one when ``high`` is given.
        high: the greatest value (``-1``: no bound); None when ``low`` is the only one.
    """
    if high is None:
        if found == low:
            return None
        expected = f"{low}"
    else:
        if found >= low and (high < 0 or found <= high):
            return None
        expected = f"at least {low}" if high < 0 else f"{low} to {high}"
    return Violation("V4", f"{what} is {found}, expected {expected}")


@implements("V5")
def check_meta_crc(meta: bytes | memoryview, stored: int) -> Violation | None:
    """V5: the CRC32C of the metadata sections ``[96, entries_offset)`` is the stored one."""
    return _crc_mismatch("V5", "metadata checksum mismatch", stored, meta)


@implements("V6")
def check_entries_crc(what: str, data: Any, stored: int) -> Violation | None:
    """V6: a subpartition's entry block, or the whole index, matches its stored CRC32C."""
    return _crc_mismatch("V6", what, stored, data)


@implements("V7")
def decode_meta_sections(
    schema: bytes | memoryview, partitioner: bytes
) -> tuple[pa.Schema, dict[str, Any]]:
    """V7: the schema section is an Arrow schema message, the partitioner a JSON object.

    Raises:
        CorruptFileError: (V7) naming the section that does not decode.
    """
    decoded = schema_from_bytes(schema, rule="V7")
    # The manifest's parser: bounded nesting and integers, each key once.
    spec = parse_json(
        bytes(partitioner), "partitioner spec", "V7", MAX_PARTITIONER_DEPTH, constants=True
    )
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise CorruptFileError(
            f"partitioner spec must be a JSON object with a 'name', found {partitioner[:80]!r}",
            rule="V7",
        )
    return decoded, spec


def _raise(found: Violation | None) -> None:
    if found is not None:
        raise found.error()


def decode_header(data: bytes | memoryview, *, object_size: int | None = None) -> IndexHeader:
    """Decode and check the fixed header from the first bytes of an index.

    Args:
        data: at least the first :data:`HEADER_SIZE` bytes of the index.
        object_size: the index object's real size, when known; it must equal the declared
            index length (a shorter object is truncated, a longer one has trailing garbage).

    Raises:
        FormatError: rule V1 (magic), V2 (version or flags), V3 (header checksum) or V4
            (sizes that do not add up).
    """
    view = memoryview(data)
    _raise(check_magic(bytes(view[:8])))
    _raise(check_size("the index in bytes (at least its header)", len(view), HEADER_SIZE, -1))
    fields = _HEADER.unpack(view[:HEADER_SIZE])
    (
        _magic,
        major,
        minor,
        header_size,
        required_flags,
        optional_flags,
        file_id,
        data_length,
        index_length,
        total_rows,
        num_regions,
        num_subpartitions,
        schema_length,
        partitioner_length,
        entries_offset,
        meta_crc,
        header_crc,
    ) = fields
    _raise(check_version(major, minor))
    _raise(check_header_crc(view, header_crc))
    _raise(check_version(major, minor, required_flags))
    # A multiple of the alignment of at least the v1 header.
    _raise(check_size("the header size field", header_size, max(HEADER_SIZE, _pad(header_size))))
    _raise(check_size("the subpartition count", num_subpartitions, 1, MAX_SUBPARTITIONS))
    sections = IndexSections.compute(
        header_size, schema_length, partitioner_length, num_regions, num_subpartitions
    )
    _raise(check_size("the declared entries offset", entries_offset, sections.entries_offset))
    _raise(check_size("the declared index length", index_length, sections.index_length))
    if object_size is not None:
        what = "truncated" if object_size < index_length else "longer than declared"
        _raise(check_size(f"the index object ({what}) in bytes", object_size, index_length))
    return IndexHeader(
        version=(major, minor),
        required_flags=required_flags,
        optional_flags=optional_flags,
        file_id=bytes(file_id),
        data_length=data_length,
        index_length=index_length,
        total_rows=total_rows,
        num_regions=num_regions,
        num_subpartitions=num_subpartitions,
        schema_length=schema_length,
        partitioner_length=partitioner_length,
        meta_crc32c=meta_crc,
        sections=sections,
    )


def decode_meta(header: IndexHeader, data: bytes | memoryview) -> IndexMeta:
    """Decode the metadata sections from the index prefix ``[0, entries_offset)``.

    Raises:
        FormatError: V4 if ``data`` is short, V5 on a checksum mismatch, V7 if the schema or
            the partitioner spec does not decode.
    """
    sections = header.sections
    view = memoryview(data)
    _raise(check_size("the index metadata in bytes", len(view), sections.entries_offset, -1))
    _raise(check_meta_crc(view[HEADER_SIZE : sections.entries_offset], header.meta_crc32c))
    schema, partitioner = decode_meta_sections(
        view[sections.schema_offset : sections.schema_offset + header.schema_length],
        view[
            sections.partitioner_offset : sections.partitioner_offset + header.partitioner_length
        ].tobytes(),
    )
    regions = np.frombuffer(
        view[sections.regions_offset : sections.subpartition_crcs_offset],
        dtype=REGION_DTYPE,
    )
    crcs = np.frombuffer(
        view[
            sections.subpartition_crcs_offset : sections.subpartition_crcs_offset
            + header.num_subpartitions * SUBPARTITION_CRC_DTYPE.itemsize
        ],
        dtype=SUBPARTITION_CRC_DTYPE,
    )
    return IndexMeta(
        schema=schema, partitioner=partitioner, regions=regions, subpartition_crcs=crcs
    )


def decode_entries(
    header: IndexHeader, meta: IndexMeta, data: bytes | memoryview, start: int, stop: int
) -> np.ndarray:
    """Decode the entries of subpartitions ``[start, stop)`` from exactly their byte slice.

    Returns:
        An array of shape ``(stop - start, num_regions)`` and dtype :data:`ENTRY_DTYPE`.

    Raises:
        FormatError: V4 if the slice has the wrong size, V6 if a block's checksum differs.
    """
    if not 0 <= start <= stop <= header.num_subpartitions:
        raise InvalidOptionError(
            f"subpartition range [{start}, {stop}) outside [0, {header.num_subpartitions})"
        )
    block = header.num_regions * ENTRY_DTYPE.itemsize
    view = memoryview(data)
    expected = (stop - start) * block
    _raise(
        check_size(
            f"the entry slice of subpartitions [{start}, {stop}) in bytes", len(view), expected
        )
    )
    # One read-only buffer, sliced without copies: the checksum runs over the bytes in place.
    buffer = pa.py_buffer(view)
    stored_crcs = meta.subpartition_crcs[start:stop].tolist()
    for s, stored in zip(range(start, stop), stored_crcs, strict=True):
        block_bytes = buffer.slice((s - start) * block, block)
        _raise(check_entries_crc(f"entries of subpartition {s}: checksum", block_bytes, stored))
    return np.frombuffer(view, dtype=ENTRY_DTYPE).reshape(stop - start, header.num_regions)


def decode_index(data: bytes | memoryview) -> ShuffleIndex:
    """Decode and check a complete index (header, metadata, every entry, the trailer).

    Raises:
        FormatError: for any broken structural rule (V1-V7); see ``spec.md``.
    """
    view = memoryview(data)
    # Same order as a ranged reader: header, metadata, entry blocks, then the whole-index
    # checksum, so that a damaged byte is reported under the same rule locally and remotely.
    header = decode_header(view, object_size=len(view))
    trailer_at = header.sections.trailer_offset
    meta = decode_meta(header, view)
    entries = decode_entries(
        header,
        meta,
        view[header.sections.entries_offset : trailer_at],
        0,
        header.num_subpartitions,
    )
    reserved = check_trailer(header, view)
    return ShuffleIndex(header=header, meta=meta, entries=entries, trailer_reserved=reserved)


def check_trailer(header: IndexHeader, data: bytes | memoryview) -> int:
    """Step 9 of decoding a whole index: the trailer's magic (V1), then its CRC32C (V6).

    ``data`` is the whole index, whose size :func:`decode_header` has already checked.

    Returns:
        The trailer's reserved word.
    """
    view = memoryview(data)
    trailer_at = header.sections.trailer_offset
    index_crc, reserved, magic = _TRAILER.unpack(view[trailer_at : trailer_at + TRAILER_SIZE])
    _raise(check_magic(magic, trailer=True))
    _raise(check_entries_crc("index checksum mismatch", view[:trailer_at], index_crc))
    return int(reserved)


def index_checksum(data: bytes | memoryview) -> int:
    """The whole-index CRC32C stored in an index's trailer (what a manifest records)."""
    view = memoryview(data)
    _raise(check_size("the index in bytes (at least its trailer)", len(view), TRAILER_SIZE, -1))
    crc, _reserved, _magic = _TRAILER.unpack(view[-TRAILER_SIZE:])
    return int(crc)
