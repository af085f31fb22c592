"""The index codec: round trips, slices, and every decode error with its rule.

Corrupted indexes are built by editing encoded bytes at the offsets of the header's byte table
(magic, version, flags, sizes, checksums) and, where a test needs a later check to be reached,
re-sealing the checksums the way the format defines them.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import google_crc32c
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arrowshuffle.format.errors import (
    ChecksumMismatchError,
    CorruptFileError,
    FormatError,
    UnsupportedVersionError,
)
from arrowshuffle.format.index import (
    ENTRY_DTYPE,
    HEADER_SIZE,
    REGION_BROADCAST,
    REGION_DTYPE,
    TRAILER_SIZE,
    decode_entries,
    decode_header,
    decode_index,
    decode_meta,
    encode_index,
    index_checksum,
)

# Byte offsets of the header fields (the header's byte table).
MAGIC = 0
MAJOR = 8
MINOR = 10
HEADER_SIZE_FIELD = 12
REQUIRED_FLAGS = 16
OPTIONAL_FLAGS = 20
FILE_ID = 24
DATA_LENGTH = 40
INDEX_LENGTH = 48
TOTAL_ROWS = 56
NUM_REGIONS = 64
NUM_SUBPARTITIONS = 68
SCHEMA_LENGTH = 72
PARTITIONER_LENGTH = 76
ENTRIES_OFFSET = 80
META_CRC = 88
HEADER_CRC = 92

SCHEMA = pa.schema([("key", pa.int64()), ("name", pa.string()), ("tags", pa.list_(pa.string()))])
FILE_ID_BYTES = bytes(range(16))
REPO_ROOT = Path(__file__).resolve().parent.parent


def crc(data: bytes) -> int:
    return int(google_crc32c.value(bytes(data)))


def put(buf: bytearray, offset: int, fmt: str, value: int) -> None:
    struct.pack_into("<" + fmt, buf, offset, value)


def get(buf: bytes, offset: int, fmt: str) -> int:
    return int(struct.unpack_from("<" + fmt, buf, offset)[0])


def reseal(buf: bytearray, *, meta: bool = True) -> bytearray:
    """Recompute the metadata, header and index checksums after an edit."""
    entries_offset = get(buf, ENTRIES_OFFSET, "Q")
    if meta:
        put(buf, META_CRC, "I", crc(buf[HEADER_SIZE:entries_offset]))
    put(buf, HEADER_CRC, "I", crc(buf[: HEADER_SIZE - 4]))
    if len(buf) >= TRAILER_SIZE:
        put(buf, len(buf) - TRAILER_SIZE, "I", crc(buf[: len(buf) - TRAILER_SIZE]))
    return buf


def make_layout(
    num_subpartitions: int,
    num_regions: int,
    seed: int = 0,
    broadcast: tuple[int, ...] = (),
) -> tuple[np.ndarray, np.ndarray]:
    """Regions and entries of a plausible data file: contiguous chunks, some empty."""
    rng = np.random.default_rng(seed)
    entries = np.zeros((num_subpartitions, num_regions), dtype=ENTRY_DTYPE)
    regions = np.zeros(num_regions, dtype=REGION_DTYPE)
    position = 8
    for r in range(num_regions):
        if r in broadcast:
            length = int(rng.integers(1, 1000))
            entries[:, r] = (position, length, 10, 1, int(rng.integers(0, 2**32)))
            regions[r] = (position, length, REGION_BROADCAST, 0)
            position += length
            continue
        lengths = rng.integers(0, 3, num_subpartitions) * rng.integers(1, 500, num_subpartitions)
        present = lengths > 0
        column = entries[:, r]
        column["offset"] = position + np.concatenate([[0], np.cumsum(lengths)[:-1]])
        column["length"] = lengths
        column["rows"] = np.where(present, rng.integers(0, 100, num_subpartitions), 0)
        column["batches"] = np.where(present, rng.integers(1, 4, num_subpartitions), 0)
        column["crc32c"] = rng.integers(0, 2**32, num_subpartitions)
        entries[:, r] = column
        regions[r] = (position, int(lengths.sum()), 0, 0)
        position += int(lengths.sum())
    return regions, entries


def encode(
    num_subpartitions: int = 5,
    num_regions: int = 3,
    *,
    broadcast: tuple[int, ...] = (),
    partitioner: dict[str, object] | None = None,
    compression: str = "none",
    seed: int = 0,
) -> bytes:
    regions, entries = make_layout(num_subpartitions, num_regions, seed, broadcast)
    data_length = int(regions["offset"][-1] + regions["length"][-1]) if num_regions else 8
    return encode_index(
        schema=SCHEMA,
        partitioner=partitioner or {"name": "hash", "columns": ["key"], "seed": 42},
        file_id=FILE_ID_BYTES,
        data_length=data_length + 100,
        regions=regions,
        entries=entries,
        compression=compression,
    )


# --------------------------------------------------------------------------- round trips


@settings(max_examples=60, deadline=None)
@given(
    num_subpartitions=st.integers(1, 300),
    num_regions=st.integers(0, 12),
    seed=st.integers(0, 2**32 - 1),
    compression=st.sampled_from(["none", "lz4", "zstd"]),
    partitioner=st.dictionaries(
        st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=8)), max_size=3
    ),
    data=st.data(),
)
def test_encode_decode_round_trip(
    num_subpartitions: int,
    num_regions: int,
    seed: int,
    compression: str,
    partitioner: dict[str, object],
    data: st.DataObject,
) -> None:
    broadcast = tuple(
        data.draw(st.sets(st.integers(0, max(0, num_regions - 1)), max_size=num_regions))
    )
    regions, entries = make_layout(num_subpartitions, num_regions, seed, broadcast)
    spec = {**partitioner, "name": "random ✓"}
    encoded = encode_index(
        schema=SCHEMA,
        partitioner=spec,
        file_id=FILE_ID_BYTES,
        data_length=2**40 + 3,
        regions=regions,
        entries=entries,
        compression=compression,
    )
    index = decode_index(encoded)
    header = index.header
    assert header.version[0] == 1
    assert header.file_id == FILE_ID_BYTES
    assert header.data_length == 2**40 + 3
    assert header.index_length == len(encoded)
    assert header.num_regions == num_regions
    assert header.num_subpartitions == num_subpartitions
    assert header.compression == compression
    assert index.schema.equals(SCHEMA, check_metadata=True)
    assert index.meta.partitioner == spec
    np.testing.assert_array_equal(index.meta.regions, regions)
    np.testing.assert_array_equal(index.entries, entries)
    assert index.entries.shape == (num_subpartitions, num_regions)
    # Total rows: regular chunks add up, a broadcast chunk counts once.
    expected_rows = sum(
        int(entries["rows"][0, r]) if r in broadcast else int(entries["rows"][:, r].sum())
        for r in range(num_regions)
    )
    assert header.total_rows == expected_rows
    np.testing.assert_array_equal(
        index.broadcast_regions, [r in broadcast for r in range(num_regions)]
    )
    # The trailer's checksum covers everything before the trailer.
    assert index_checksum(encoded) == crc(encoded[:-TRAILER_SIZE])
    assert encoded[-8:] == b"ASHUFEND"
    assert encoded[:8] == b"ASHUFIDX"

    # Any contiguous subpartition range is one byte slice that decodes alone.
    start = data.draw(st.integers(0, num_subpartitions))
    stop = data.draw(st.integers(start, num_subpartitions))
    begin, end = header.sections.entry_range(num_regions, start, stop)
    piece = decode_entries(header, index.meta, encoded[begin:end], start, stop)
    np.testing.assert_array_equal(piece, entries[start:stop])


def test_zero_regions_round_trip() -> None:
    encoded = encode(num_subpartitions=7, num_regions=0)
    index = decode_index(encoded)
    assert index.num_regions == 0
    assert index.entries.shape == (7, 0)
    assert index.header.total_rows == 0
    begin, end = index.header.sections.entry_range(0, 2, 5)
    assert begin == end
    assert decode_entries(index.header, index.meta, b"", 2, 5).shape == (3, 0)


def test_many_subpartitions_round_trip() -> None:
    encoded = encode(num_subpartitions=20_000, num_regions=2, seed=7)
    index = decode_index(encoded)
    regions, entries = make_layout(20_000, 2, 7)
    np.testing.assert_array_equal(index.entries, entries)
    np.testing.assert_array_equal(index.meta.regions, regions)


def test_header_and_meta_decode_from_a_prefix() -> None:
    """A remote reader decodes the header and metadata without the entries."""
    encoded = encode(num_subpartitions=50, num_regions=4)
    header = decode_header(encoded[:HEADER_SIZE], object_size=len(encoded))
    meta = decode_meta(header, encoded[: header.sections.entries_offset])
    assert meta.schema.equals(SCHEMA)
    assert len(meta.regions) == 4
    assert len(meta.subpartition_crcs) == 50


def test_encoding_is_deterministic() -> None:
    assert encode(seed=3) == encode(seed=3)
    assert encode(partitioner={"name": "x", "b": 1, "a": 2}) == encode(
        partitioner={"a": 2, "name": "x", "b": 1}
    )


def test_encode_refuses_bad_arguments() -> None:
    regions, entries = make_layout(3, 2)
    with pytest.raises(ValueError, match="16 bytes"):
        encode_index(
            schema=SCHEMA,
            partitioner={"name": "x"},
            file_id=b"short",
            data_length=0,
            regions=regions,
            entries=entries,
        )
    with pytest.raises(ValueError, match="regions"):
        encode_index(
            schema=SCHEMA,
            partitioner={"name": "x"},
            file_id=FILE_ID_BYTES,
            data_length=0,
            regions=regions[:1],
            entries=entries,
        )


# --------------------------------------------------------------------------- decode errors


def expect(data: bytes | bytearray, rule: str, cls: type[FormatError] = FormatError) -> FormatError:
    with pytest.raises(cls) as info:
        decode_index(bytes(data))
    error = info.value
    assert isinstance(error, ValueError)
    assert error.rule == rule, f"expected rule {rule}, found {error.rule}: {error}"
    assert f"[{rule}]" in str(error)
    return error


def test_bad_magic_is_v1() -> None:
    buf = bytearray(encode())
    buf[MAGIC : MAGIC + 8] = b"PAR1\x00\x00\x00\x00"
    error = expect(buf, "V1")
    assert "ASHUFIDX" in str(error) and "PAR1" in str(error)


def test_foreign_bytes_are_v1() -> None:
    expect(b"\x89PNG\r\n\x1a\n" + bytes(200), "V1")


def test_bad_trailer_magic_is_v1() -> None:
    buf = bytearray(encode())
    buf[-8:] = b"ASHUFXXX"
    error = expect(buf, "V1", CorruptFileError)
    assert "ASHUFEND" in str(error)


@pytest.mark.parametrize("major", [0, 2, 65535])
def test_unknown_major_version_is_v2(major: int) -> None:
    buf = bytearray(encode())
    put(buf, MAJOR, "H", major)
    error = expect(buf, "V2", UnsupportedVersionError)
    assert f"{major}." in str(error)


def test_newer_minor_version_is_read() -> None:
    buf = bytearray(encode())
    put(buf, MINOR, "H", 7)
    index = decode_index(bytes(reseal(buf)))
    assert index.header.version == (1, 7)


def test_unknown_required_flag_is_v2() -> None:
    buf = bytearray(encode())
    put(buf, REQUIRED_FLAGS, "I", 1 << 5)
    error = expect(reseal(buf), "V2", UnsupportedVersionError)
    assert "0x20" in str(error)


def test_unknown_optional_flag_is_ignored() -> None:
    buf = bytearray(encode(compression="zstd"))
    put(buf, OPTIONAL_FLAGS, "I", get(buf, OPTIONAL_FLAGS, "I") | (1 << 9))
    assert decode_index(bytes(reseal(buf))).header.compression == "zstd"


@pytest.mark.parametrize("offset", [FILE_ID, DATA_LENGTH, TOTAL_ROWS, META_CRC, HEADER_CRC])
def test_damaged_header_is_v3(offset: int) -> None:
    buf = bytearray(encode())
    buf[offset] ^= 0x01
    expect(buf, "V3", ChecksumMismatchError)


def test_short_index_is_v4() -> None:
    error = expect(encode()[: HEADER_SIZE - 1], "V4", CorruptFileError)
    assert str(HEADER_SIZE) in str(error)
    # Shorter than the magic: a prefix of it is a truncated index, anything else is foreign.
    expect(b"", "V4", CorruptFileError)
    expect(b"ASHU", "V4", CorruptFileError)
    expect(b"PK", "V1")


def test_truncated_index_is_v4() -> None:
    encoded = encode()
    error = expect(encoded[:-1], "V4", CorruptFileError)
    assert str(len(encoded)) in str(error) and str(len(encoded) - 1) in str(error)


def test_trailing_garbage_is_v4() -> None:
    expect(encode() + b"\x00", "V4", CorruptFileError)


@pytest.mark.parametrize("header_size", [0, HEADER_SIZE - 8, HEADER_SIZE + 4])
def test_header_size_below_minimum_or_unaligned_is_v4(header_size: int) -> None:
    buf = bytearray(encode())
    put(buf, HEADER_SIZE_FIELD, "I", header_size)
    expect(reseal(buf, meta=False), "V4", CorruptFileError)


def test_zero_subpartitions_is_v4() -> None:
    buf = bytearray(encode())
    put(buf, NUM_SUBPARTITIONS, "I", 0)
    expect(reseal(buf), "V4", CorruptFileError)


@pytest.mark.parametrize(
    ("offset", "fmt", "delta"),
    [
        (ENTRIES_OFFSET, "Q", 8),
        (INDEX_LENGTH, "Q", 32),
        (NUM_REGIONS, "I", 1),
        (SCHEMA_LENGTH, "I", 8),
        (PARTITIONER_LENGTH, "I", 8),
    ],
)
def test_sizes_that_do_not_add_up_are_v4(offset: int, fmt: str, delta: int) -> None:
    buf = bytearray(encode())
    put(buf, offset, fmt, get(buf, offset, fmt) + delta)
    expect(reseal(buf, meta=False), "V4", CorruptFileError)


def _meta_region(encoded: bytes) -> tuple[int, int]:
    return HEADER_SIZE, get(encoded, ENTRIES_OFFSET, "Q")


def test_damaged_metadata_is_v5() -> None:
    encoded = encode()
    buf = bytearray(encoded)
    start, end = _meta_region(encoded)
    buf[(start + end) // 2] ^= 0x40
    header = decode_header(bytes(buf), object_size=len(buf))
    with pytest.raises(ChecksumMismatchError) as info:
        decode_meta(header, bytes(buf))
    assert info.value.rule == "V5"
    # Read whole, the same damage is reported under the same rule as by a ranged reader.
    expect(buf, "V5", ChecksumMismatchError)


def test_damaged_entries_are_v6() -> None:
    encoded = encode(num_subpartitions=6, num_regions=3)
    header = decode_header(encoded, object_size=len(encoded))
    meta = decode_meta(header, encoded)
    begin, end = header.sections.entry_range(3, 4, 5)
    buf = bytearray(encoded)
    buf[begin + 3] ^= 0x10
    expect(buf, "V6", ChecksumMismatchError)
    with pytest.raises(ChecksumMismatchError, match="subpartition 4") as info:
        decode_entries(header, meta, bytes(buf[begin:end]), 4, 5)
    assert info.value.rule == "V6"
    # Other subpartitions' slices are still good: damage stays local to one block.
    good_begin, good_end = header.sections.entry_range(3, 0, 4)
    decode_entries(header, meta, bytes(buf[good_begin:good_end]), 0, 4)


def test_damaged_index_checksum_is_v6() -> None:
    buf = bytearray(encode())
    buf[-TRAILER_SIZE] ^= 0xFF
    expect(buf, "V6", ChecksumMismatchError)


def test_entry_slice_of_wrong_size_is_v4() -> None:
    encoded = encode(num_subpartitions=6, num_regions=3)
    header = decode_header(encoded, object_size=len(encoded))
    meta = decode_meta(header, encoded)
    begin, end = header.sections.entry_range(3, 1, 3)
    for piece in (encoded[begin : end - 1], encoded[begin : end + 32], b""):
        with pytest.raises(CorruptFileError) as info:
            decode_entries(header, meta, piece, 1, 3)
        assert info.value.rule == "V4"
        assert str(2 * 3 * ENTRY_DTYPE.itemsize) in str(info.value)


@pytest.mark.parametrize(("start", "stop"), [(-1, 2), (3, 2), (0, 7)])
def test_entry_range_outside_the_index_is_refused(start: int, stop: int) -> None:
    encoded = encode(num_subpartitions=6, num_regions=3)
    header = decode_header(encoded, object_size=len(encoded))
    meta = decode_meta(header, encoded)
    with pytest.raises(ValueError, match="outside"):
        decode_entries(header, meta, b"", start, stop)


def _replace_section(encoded: bytes, which: str, content: bytes) -> bytearray:
    """Re-encode with the schema or partitioner section replaced, checksums re-sealed."""
    schema_length = get(encoded, SCHEMA_LENGTH, "I")
    partitioner_length = get(encoded, PARTITIONER_LENGTH, "I")
    pad = (-len(content)) % 8
    if which == "schema":
        old_padded = schema_length + (-schema_length) % 8
        before, after = HEADER_SIZE, HEADER_SIZE + old_padded
        length_field = SCHEMA_LENGTH
    else:
        start = HEADER_SIZE + schema_length + (-schema_length) % 8
        old_padded = partitioner_length + (-partitioner_length) % 8
        before, after = start, start + old_padded
        length_field = PARTITIONER_LENGTH
    buf = bytearray(encoded[:before] + content + bytes(pad) + encoded[after:])
    shift = len(content) + pad - old_padded
    put(buf, length_field, "I", len(content))
    put(buf, ENTRIES_OFFSET, "Q", get(buf, ENTRIES_OFFSET, "Q") + shift)
    put(buf, INDEX_LENGTH, "Q", len(buf))
    return reseal(buf)


def test_section_helper_keeps_a_valid_index() -> None:
    spec = b'{"name":"other"}'
    buf = _replace_section(encode(), "partitioner", spec)
    assert decode_index(bytes(buf)).meta.partitioner == {"name": "other"}


@pytest.mark.parametrize(
    "content",
    [
        b"not json at all",
        b"\xff\xfe\x00",
        b"[1, 2, 3]",
        b'"name"',
        b'{"columns": []}',
        b'{"name": 3}',
    ],
)
def test_bad_partitioner_spec_is_v7(content: bytes) -> None:
    buf = _replace_section(encode(), "partitioner", content)
    expect(buf, "V7", CorruptFileError)


@pytest.mark.parametrize("content", [b"", b"\x00" * 24, b"\xff\xff\xff\xff" + b"\x10" * 20])
def test_bad_schema_is_v7(content: bytes) -> None:
    buf = _replace_section(encode(), "schema", content)
    expect(buf, "V7", CorruptFileError)


def test_schema_field_name_that_is_not_utf8_is_v7() -> None:
    schema = pa.schema([("é", pa.int64())])
    encoded = encode_index(
        schema=schema,
        partitioner={"name": "explicit"},
        file_id=FILE_ID_BYTES,
        data_length=8,
        regions=np.zeros(0, dtype=REGION_DTYPE),
        entries=np.zeros((2, 0), dtype=ENTRY_DTYPE),
    )
    assert encoded.count("é".encode()) == 1
    buf = bytearray(encoded.replace("é".encode(), b"\xc3\x28"))
    expect(reseal(buf), "V7", CorruptFileError)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_single_bit_damage_is_a_format_error(data: st.DataObject) -> None:
    """Flip any checked bit of an index: decoding raises a FormatError naming a rule."""
    encoded = encode(num_subpartitions=4, num_regions=2)
    # The trailer's reserved word is written 0 and ignored (spec: reserved fields); no checksum
    # covers it.
    reserved = range(len(encoded) - TRAILER_SIZE + 4, len(encoded) - TRAILER_SIZE + 8)
    position = data.draw(st.integers(0, len(encoded) - 1).filter(lambda p: p not in reserved))
    bit = data.draw(st.integers(0, 7))
    buf = bytearray(encoded)
    buf[position] ^= 1 << bit
    with pytest.raises(FormatError) as info:
        decode_index(bytes(buf))
    assert info.value.rule in {f"V{i}" for i in range(1, 8)}


# --------------------------------------------------------------------------- hostile headers

# Header values no honest writer produces. Counts and lengths are also tried "consistent":
# with the entries offset and index length recomputed to agree with them.
HOSTILE_COUNTS = {
    "2**32-1 regions": [(NUM_REGIONS, "I", 2**32 - 1)],
    "2**32-1 subpartitions": [(NUM_SUBPARTITIONS, "I", 2**32 - 1)],
    # As large as a 64-bit index length can still agree with.
    "2**32-1 regions and 2**26 subpartitions": [
        (NUM_REGIONS, "I", 2**32 - 1),
        (NUM_SUBPARTITIONS, "I", 2**26),
    ],
    "2**32-1 schema length": [(SCHEMA_LENGTH, "I", 2**32 - 1)],
    "2**32-1 partitioner length": [(PARTITIONER_LENGTH, "I", 2**32 - 1)],
    "2**32-1 header size": [(HEADER_SIZE_FIELD, "I", 2**32 - 1)],
}
HOSTILE_OFFSETS = {
    "2**60 index length": [(INDEX_LENGTH, "Q", 2**60)],
    "2**64-1 index length": [(INDEX_LENGTH, "Q", 2**64 - 1)],
    "2**60 entries offset": [(ENTRIES_OFFSET, "Q", 2**60)],
}
HOSTILE_CASES = [(name, edits, True) for name, edits in HOSTILE_COUNTS.items()] + [
    (name, edits, consistent)
    for table in (HOSTILE_COUNTS, HOSTILE_OFFSETS)
    for name, edits in table.items()
    for consistent in (False,)
]


def hostile_index(edits: list[tuple[int, str, int]], *, consistent: bool) -> bytes:
    """An index whose header declares absurd sizes, with a valid header checksum.

    With ``consistent``, the entries offset and index length are made to agree with the
    absurd counts, so that only the real size of the bytes can give the lie away.
    """
    buf = bytearray(encode(num_subpartitions=3, num_regions=2))
    for offset, fmt, value in edits:
        put(buf, offset, fmt, value)
    if consistent:
        header_size = max(get(buf, HEADER_SIZE_FIELD, "I"), HEADER_SIZE)
        schema = get(buf, SCHEMA_LENGTH, "I")
        partitioner = get(buf, PARTITIONER_LENGTH, "I")
        regions = get(buf, NUM_REGIONS, "I")
        subpartitions = get(buf, NUM_SUBPARTITIONS, "I")
        entries = (
            header_size
            + schema
            + (-schema) % 8
            + partitioner
            + (-partitioner) % 8
            + regions * 24
            + subpartitions * 4
            + (-(subpartitions * 4)) % 8
        )
        put(buf, ENTRIES_OFFSET, "Q", entries)
        put(buf, INDEX_LENGTH, "Q", entries + subpartitions * regions * 32 + TRAILER_SIZE)
    put(buf, HEADER_CRC, "I", crc(buf[: HEADER_SIZE - 4]))
    return bytes(buf)


def _decode_every_way(data: bytes) -> list[FormatError]:
    """Decode like a local reader (whole index) and like a remote one (header, meta, slice)."""
    errors: list[FormatError] = []
    attempts: list[Callable[[], object]] = [
        lambda: decode_index(data),
        lambda: decode_header(data[:HEADER_SIZE], object_size=len(data)),
        lambda: decode_meta(decode_header(data[:HEADER_SIZE]), data),
        lambda: decode_entries(
            decode_header(data[:HEADER_SIZE]),
            decode_meta(decode_header(data[:HEADER_SIZE]), data),
            data[HEADER_SIZE:],
            0,
            1,
        ),
    ]
    for attempt in attempts:
        try:
            attempt()
        except FormatError as error:
            errors.append(error)
        else:
            raise AssertionError("a hostile index decoded without error")
    return errors


@pytest.mark.parametrize(
    ("name", "edits", "consistent"),
    HOSTILE_CASES,
    ids=[f"{name}{' (consistent)' if c else ''}" for name, _, c in HOSTILE_CASES],
)
def test_hostile_header_values_fail_without_allocating(
    name: str, edits: list[tuple[int, str, int]], consistent: bool
) -> None:
    data = hostile_index(edits, consistent=consistent)
    tracemalloc.start()
    try:
        errors = _decode_every_way(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert all(isinstance(e, ValueError) for e in errors)
    assert {e.rule for e in errors} <= {"V3", "V4"}, [str(e) for e in errors]
    assert peak < 1024 * 1024, f"decoding {name} allocated {peak} bytes"


def test_huge_data_length_and_row_count_decode() -> None:
    """Large but well-formed numbers the index cannot check alone (the reader compares the
    data length with the data file, rule V13)."""
    buf = bytearray(encode())
    put(buf, DATA_LENGTH, "Q", 2**60)
    put(buf, TOTAL_ROWS, "Q", 2**63)
    header = decode_header(bytes(reseal(buf)))
    assert header.data_length == 2**60
    assert header.total_rows == 2**63


def test_hostile_headers_under_an_address_space_limit() -> None:
    """The same decodes in a process that cannot map more than 256 MiB beyond its start."""
    cases = [hostile_index(edits, consistent=c).hex() for _, edits, c in HOSTILE_CASES]
    script = textwrap.dedent(
        f"""
        import resource
        import tests.test_index_codec as t
        with open("/proc/self/status") as status:
            vm = next(int(l.split()[1]) for l in status if l.startswith("VmSize:")) * 1024
        limit = vm + 256 * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        cases = {json.dumps(cases)}
        for case in cases:
            errors = t._decode_every_way(bytes.fromhex(case))
            assert all(e.rule for e in errors), errors
        print("ok", len(cases))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == f"ok {len(cases)}"
