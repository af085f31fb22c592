"""Write the format v1 test vectors, deterministically.

Usage: ``python tests/vectors/v1/generate.py [OUT_DIR]`` (default: this directory).

Good vectors are written by the real writer (:class:`arrowshuffle.ShuffleFileWriter`) with a
fixed file id. Their expected contents (``expected.json``) are computed here from the INPUT rows
and subpartition ids, never by reading the written files back. Broken vectors are copies of a
good one with a few bytes edited; the checksums that cover the edit are recomputed where needed
so that exactly the intended rule is the first one to fail.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import shutil
import struct
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle import ShuffleFileWriter, make_partitioner
from arrowshuffle.format import index as codec
from arrowshuffle.format.crc import crc32c
from arrowshuffle.writers import file_writer
from arrowshuffle.writers.file_writer import WrittenFile

HERE = Path(__file__).resolve().parent
SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int32()), ("s", pa.string())])

# Header field offsets (spec.md, "Index header"); the edits below use them directly.
MAJOR_AT, MINOR_AT, HEADER_SIZE_AT = 8, 10, 12
REQUIRED_FLAGS_AT, OPTIONAL_FLAGS_AT, FILE_ID_AT = 16, 20, 24
INDEX_LENGTH_AT, TOTAL_ROWS_AT = 48, 56
REGIONS_AT, SUBPARTITIONS_AT, SCHEMA_LENGTH_AT, PARTITIONER_LENGTH_AT = 64, 68, 72, 76
ENTRIES_OFFSET_AT, META_CRC_AT, HEADER_CRC_AT = 80, 88, 92
REGION_SIZE, ENTRY_SIZE, TRAILER_SIZE = 24, 32, 16


# ---------------------------------------------------------------------- input data


@dataclass(frozen=True)
class Region:
    """The rows written before one flush: ``ids`` per row, or None for a broadcast region."""

    table: pa.Table
    ids: np.ndarray | None

    @property
    def broadcast(self) -> bool:
        return self.ids is None


@dataclass(frozen=True)
class GoodVector:
    name: str
    description: str
    num_subpartitions: int
    regions: tuple[Region, ...]
    file_id: bytes
    compression: str = "none"
    max_batch_rows: int = 3
    #: The columns of a ``hash`` partitioner (seed 42) recorded in the index; ``None``: the
    #: ids are the caller's (``explicit``). The ids of ``regions`` are stored as given.
    hash_by: tuple[str, ...] | None = None

    def partitioner(self) -> Any:
        if self.hash_by is None:
            return None
        return make_partitioner(
            "hash", num_subpartitions=self.num_subpartitions, by=list(self.hash_by)
        )


def rows(region: int, n: int) -> pa.Table:
    """``n`` rows of region ``region``: two integer columns and a string, with some nulls."""
    i = np.arange(n)
    a = pa.array(region * 1000 + i, pa.int64())
    b_values = ((i * 37 + region) % 11 - 5).astype(np.int32)
    b = pa.array(b_values, pa.int32(), mask=(i % 6 == 5))
    s = pa.array(
        [None if k % 9 == 4 else f"r{region}-row{k}" + ("é" if k == 2 else "") for k in range(n)],
        pa.string(),
    )
    return pa.table([a, b, s], schema=SCHEMA)


def ids_for(region: int, n: int, num_subpartitions: int) -> np.ndarray:
    """A fixed, uneven spread of ``n`` rows over the subpartitions."""
    i = np.arange(n)
    return ((i * 7 + region * 3 + (i // 4)) % num_subpartitions).astype(np.int64)


def fid(label: str) -> bytes:
    """A fixed 16-byte file id derived from a label."""
    return hashlib.sha256(label.encode()).digest()[:16]


BASIC_REGIONS = tuple(Region(rows(r, n), ids_for(r, n, 4)) for r, n in enumerate((10, 7, 12)))
BASIC_REGIONS = (
    *BASIC_REGIONS[:2],
    # The last region ends with a chunk of the last subpartition (the V8 vector lengthens it).
    Region(BASIC_REGIONS[2].table, np.where(np.arange(12) == 11, 3, BASIC_REGIONS[2].ids)),
)

GOOD = (
    GoodVector(
        "good_basic",
        "two integer columns and a string with nulls; 3 regions x 4 subpartitions; "
        "uncompressed; chunks of up to 3 rows per batch, so some chunks hold several batches",
        4,
        BASIC_REGIONS,
        fid("good_basic"),
    ),
    GoodVector(
        "good_zstd",
        "the rows of good_basic with ZSTD body compression",
        4,
        BASIC_REGIONS,
        fid("good_zstd"),
        compression="zstd",
        max_batch_rows=65536,
    ),
    GoodVector(
        "good_lz4",
        "the rows of good_basic with LZ4 frame body compression",
        4,
        BASIC_REGIONS,
        fid("good_lz4"),
        compression="lz4",
        max_batch_rows=65536,
    ),
    GoodVector(
        "good_broadcast",
        "a regular region, a broadcast region (one chunk every entry points at), a regular one",
        4,
        (
            Region(rows(0, 9), ids_for(0, 9, 4)),
            Region(rows(1, 5), None),
            Region(rows(2, 6), ids_for(2, 6, 4)),
        ),
        fid("good_broadcast"),
    ),
    GoodVector(
        "good_empty_subpartitions",
        "6 subpartitions, only 1 and 4 hold rows; empty chunks have length 0 and sit at the "
        "offset where the next chunk starts",
        6,
        (
            Region(rows(0, 8), np.array([1, 4, 4, 1, 4, 1, 1, 4], dtype=np.int64)),
            Region(rows(1, 4), np.full(4, 4, dtype=np.int64)),
        ),
        fid("good_empty_subpartitions"),
    ),
    GoodVector(
        "good_zero_rows",
        "no rows at all: 0 regions, an Arrow file with no record batches",
        3,
        (),
        fid("good_zero_rows"),
    ),
)


def hashed(region: int, n: int, num_subpartitions: int, *, shift: int = 0) -> Region:
    """``n`` rows of region ``region`` with the ids Spark's hash of column ``a`` gives them
    (seed 42), each moved ``shift`` subpartitions further (mod ``num_subpartitions``)."""
    table = rows(region, n)
    partitioner = make_partitioner("hash", num_subpartitions=num_subpartitions, by=["a"])
    ids = np.asarray(partitioner.assign(table.to_batches()[0]), dtype=np.int64)
    return Region(table, (ids + shift) % num_subpartitions)


GOOD_HASH = GoodVector(
    "good_hash",
    "the hash partitioner (Spark's Murmur3 of column a, seed 42) places the rows of 2 regions "
    "over 4 subpartitions; V19 holds (validate --deep recomputes it)",
    4,
    (hashed(0, 9, 4), hashed(1, 6, 4)),
    fid("good_hash"),
    hash_by=("a",),
)
GOOD = (*GOOD, GOOD_HASH)
#: ``good_hash``'s rows, each one subpartition further than the partitioner assigns it.
MISASSIGNED = replace(
    GOOD_HASH,
    name="misassigned_rows",
    regions=(hashed(0, 9, 4, shift=1), hashed(1, 6, 4, shift=1)),
    file_id=fid("misassigned_rows"),
)


# ---------------------------------------------------------------------- writing good vectors


@contextlib.contextmanager
def fixed_file_id(file_id: bytes) -> Iterator[None]:
    """Make the writer draw ``file_id`` instead of a random one."""
    original = file_writer.uuid
    file_writer.uuid = SimpleNamespace(uuid4=lambda: uuid.UUID(bytes=file_id))  # type: ignore[assignment]
    try:
        yield
    finally:
        file_writer.uuid = original


def write_good(vector: GoodVector, out: Path, *, file_id: bytes | None = None) -> Path:
    write_pair(vector, out, file_id=file_id)
    return out / f"{vector.name}.arrow"


def write_pair(vector: GoodVector, out: Path, *, file_id: bytes | None = None) -> WrittenFile:
    """Write the vector's pair into ``out``; return what the writer reports of it."""
    path = out / f"{vector.name}.arrow"
    with (
        fixed_file_id(file_id or vector.file_id),
        ShuffleFileWriter(
            path,
            SCHEMA,
            vector.num_subpartitions,
            memory="1GiB",
            max_batch_rows=vector.max_batch_rows,
            compression=vector.compression,
            partitioner=vector.partitioner(),
            overwrite=True,  # regenerating in place replaces the committed vectors
        ) as writer,
    ):
        for region in vector.regions:
            if region.ids is None:
                writer.write_broadcast(region.table)
            else:
                writer.write(region.table, subpartitions=region.ids)
            writer.flush_region()
    assert writer.written is not None
    return writer.written


def neutral(table: pa.Table) -> dict[str, list[Any]]:
    """A table as JSON lists, one per column."""
    return {name: table.column(name).to_pylist() for name in table.column_names}


def expected_for(vector: GoodVector) -> dict[str, Any]:
    """What reading the vector must give, computed from the input rows and ids only."""
    n = vector.num_subpartitions
    rows_matrix: list[list[int]] = []
    file_order: list[pa.Table] = []
    per_sub: list[list[pa.Table]] = [[] for _ in range(n)]
    for region in vector.regions:
        if region.ids is None:
            rows_matrix.append([region.table.num_rows] * n)
            file_order.append(region.table)
            for s in range(n):
                per_sub[s].append(region.table)
            continue
        rows_matrix.append(np.bincount(region.ids, minlength=n).tolist())
        order = np.argsort(region.ids, kind="stable")
        file_order.append(region.table.take(pa.array(order)))
        for s in range(n):
            per_sub[s].append(region.table.filter(pa.array(region.ids == s)))
    empty = SCHEMA.empty_table()
    stored = sum(r.table.num_rows for r in vector.regions)
    return {
        "kind": "good",
        "description": vector.description,
        "data": f"{vector.name}.arrow",
        "index": f"{vector.name}.arrow.idx",
        "file_id": vector.file_id.hex(),
        "num_subpartitions": n,
        "num_regions": len(vector.regions),
        "broadcast_regions": [r.broadcast for r in vector.regions],
        "compression": vector.compression,
        "total_rows": stored,
        "rows": rows_matrix,
        "file_rows": neutral(pa.concat_tables([empty, *file_order])),
        "subpartitions": [neutral(pa.concat_tables([empty, *tables])) for tables in per_sub],
    }


# ---------------------------------------------------------------------- byte edits


def u16(buf: bytearray, at: int) -> int:
    return int(struct.unpack_from("<H", buf, at)[0])


def u32(buf: bytearray, at: int) -> int:
    return int(struct.unpack_from("<I", buf, at)[0])


def u64(buf: bytearray, at: int) -> int:
    return int(struct.unpack_from("<Q", buf, at)[0])


def put32(buf: bytearray, at: int, value: int) -> None:
    struct.pack_into("<I", buf, at, value)


def put64(buf: bytearray, at: int, value: int) -> None:
    struct.pack_into("<Q", buf, at, value)


def pad8(n: int) -> int:
    return (n + 7) // 8 * 8


@dataclass
class Sections:
    """Section offsets of an index, read from its header fields (spec.md, "Layout")."""

    header_size: int
    regions_at: int
    crcs_at: int
    entries_at: int
    trailer_at: int
    num_regions: int
    num_subpartitions: int

    @staticmethod
    def of(buf: bytearray) -> Sections:
        header_size = u32(buf, HEADER_SIZE_AT)
        num_regions = u32(buf, REGIONS_AT)
        num_subpartitions = u32(buf, SUBPARTITIONS_AT)
        regions_at = (
            header_size + pad8(u32(buf, SCHEMA_LENGTH_AT)) + pad8(u32(buf, PARTITIONER_LENGTH_AT))
        )
        crcs_at = regions_at + num_regions * REGION_SIZE
        entries_at = crcs_at + pad8(4 * num_subpartitions)
        trailer_at = entries_at + num_regions * num_subpartitions * ENTRY_SIZE
        return Sections(
            header_size, regions_at, crcs_at, entries_at, trailer_at, num_regions, num_subpartitions
        )

    def entry(self, subpartition: int, region: int) -> int:
        return self.entries_at + (subpartition * self.num_regions + region) * ENTRY_SIZE

    def region(self, region: int) -> int:
        return self.regions_at + region * REGION_SIZE


@dataclass
class Refix:
    """Which checksums to recompute after an edit (all by default)."""

    subpartitions: bool = True
    meta: bool = True
    header: bool = True
    trailer: bool = True


def refix(buf: bytearray, what: Refix | None = None) -> bytearray:
    """Recompute the index checksums, innermost first, so that an edit is self-consistent."""
    what = what or Refix()
    sec = Sections.of(buf)
    if what.subpartitions:
        block = sec.num_regions * ENTRY_SIZE
        for s in range(sec.num_subpartitions):
            start = sec.entries_at + s * block
            put32(buf, sec.crcs_at + 4 * s, crc32c(bytes(buf[start : start + block])))
    if what.meta:
        put32(buf, META_CRC_AT, crc32c(bytes(buf[96 : sec.entries_at])))
    if what.header:
        put32(buf, HEADER_CRC_AT, crc32c(bytes(buf[:HEADER_CRC_AT])))
    if what.trailer:
        put32(buf, sec.trailer_at, crc32c(bytes(buf[: sec.trailer_at])))
    return buf


@dataclass(frozen=True)
class Broken:
    """A vector derived from a good one: how its index or data is edited, and what must fail."""

    name: str
    base: str
    rule: str | None  # None: still valid
    description: str
    edit_index: Callable[[bytearray], bytes] | None = None
    edit_data: Callable[[bytearray], bytes] | None = None
    deep: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    #: What a reader that does not check ``rule`` reads, given the base vector (for
    #: ``expected.json``'s ``reads``); None: rows that must not be returned.
    reads: Callable[[GoodVector], GoodVector] | None = None
    #: The part of ``rule`` that is broken, where readers treat the parts differently.
    part: str | None = None
    #: The rule broken first when the pair is listed in a manifest with its real sizes and
    #: checksum, where that listing cannot agree with the index (``expected.json``'s
    #: ``dataset_rule``); None: the vector's own rule.
    dataset_rule: str | None = None


def same_rows(base: GoodVector) -> GoodVector:
    return base


def set_magic(buf: bytearray) -> bytes:
    buf[0:8] = b"ASHUFIDZ"
    return bytes(refix(buf))


def set_trailer_magic(buf: bytearray) -> bytes:
    buf[-8:] = b"ASHUFEOF"
    return bytes(buf)


def set_major(buf: bytearray) -> bytes:
    struct.pack_into("<H", buf, MAJOR_AT, 2)
    return bytes(refix(buf))


def set_required_flag(buf: bytearray) -> bytes:
    put32(buf, REQUIRED_FLAGS_AT, 1)
    return bytes(refix(buf))


def set_optional_flag(buf: bytearray) -> bytes:
    put32(buf, OPTIONAL_FLAGS_AT, u32(buf, OPTIONAL_FLAGS_AT) | 0x100)
    return bytes(refix(buf))


def longer_header(buf: bytearray) -> bytes:
    """A minor version 1.1 index whose header is 8 bytes longer (an unknown new field)."""
    out = bytearray(buf[:96]) + b"FUTURE!!" + buf[96:]
    struct.pack_into("<H", out, MINOR_AT, 1)
    put32(out, HEADER_SIZE_AT, 104)
    put64(out, ENTRIES_OFFSET_AT, u64(out, ENTRIES_OFFSET_AT) + 8)
    put64(out, INDEX_LENGTH_AT, u64(out, INDEX_LENGTH_AT) + 8)
    return bytes(refix(out))


def flip_header_crc(buf: bytearray) -> bytes:
    put32(buf, HEADER_CRC_AT, u32(buf, HEADER_CRC_AT) ^ 0x5A5A5A5A)
    return bytes(buf)


def huge_regions(buf: bytearray) -> bytes:
    put32(buf, REGIONS_AT, 2**32 - 1)
    put32(buf, HEADER_CRC_AT, crc32c(bytes(buf[:HEADER_CRC_AT])))
    return bytes(buf)


def huge_schema_length(buf: bytearray) -> bytes:
    """A schema length near 2**32 and an index length that agrees with it (the object does not)."""
    put32(buf, SCHEMA_LENGTH_AT, 2**32 - 8)
    sec = Sections.of(buf)
    put64(buf, ENTRIES_OFFSET_AT, sec.entries_at)
    put64(buf, INDEX_LENGTH_AT, sec.trailer_at + TRAILER_SIZE)
    put32(buf, HEADER_CRC_AT, crc32c(bytes(buf[:HEADER_CRC_AT])))
    return bytes(buf)


def region_reserved(buf: bytearray) -> bytes:
    sec = Sections.of(buf)
    put32(buf, sec.region(0) + 20, 0xDEADBEEF)
    return bytes(refix(buf, Refix(subpartitions=False, meta=False, header=False)))


def entry_crc_field(buf: bytearray) -> bytes:
    sec = Sections.of(buf)
    at = sec.entry(1, 0) + 28
    put32(buf, at, u32(buf, at) ^ 1)
    return bytes(refix(buf, Refix(subpartitions=False, meta=False, header=False)))


def trailer_crc(buf: bytearray) -> bytes:
    sec = Sections.of(buf)
    put32(buf, sec.trailer_at, u32(buf, sec.trailer_at) ^ 1)
    return bytes(buf)


def garbage_schema(buf: bytearray) -> bytes:
    length = u32(buf, SCHEMA_LENGTH_AT)
    buf[96 : 96 + length] = (b"not a schema " * (length // 13 + 1))[:length]
    return bytes(refix(buf))


def garbage_partitioner(buf: bytearray) -> bytes:
    sec = Sections.of(buf)
    at = sec.header_size + pad8(u32(buf, SCHEMA_LENGTH_AT))
    length = u32(buf, PARTITIONER_LENGTH_AT)
    buf[at : at + length] = (b"[" + b"1," * length)[: length - 1] + b"]"
    return bytes(refix(buf))


def chunk_past_end(buf: bytearray) -> bytes:
    sec = Sections.of(buf)
    last_region = sec.num_regions - 1
    entry = sec.entry(sec.num_subpartitions - 1, last_region)
    put64(buf, entry + 8, u64(buf, entry + 8) + 4096)
    region = sec.region(last_region)
    put64(buf, region + 8, u64(buf, region + 8) + 4096)
    return bytes(refix(buf))


def overlapping_chunk(buf: bytearray) -> bytes:
    sec = Sections.of(buf)
    entry = sec.entry(1, 1)
    put64(buf, entry, u64(buf, entry) - 8)
    return bytes(refix(buf))


def broadcast_entry_moved(buf: bytearray) -> bytes:
    sec = Sections.of(buf)
    entry = sec.entry(2, 1)  # region 1 of good_broadcast is the broadcast region
    put64(buf, entry, u64(buf, entry) + 8)
    put64(buf, entry + 8, u64(buf, entry + 8) - 8)
    return bytes(refix(buf))


def batches_without_bytes(buf: bytearray) -> bytes:
    sec = Sections.of(buf)
    put32(buf, sec.entry(0, 0) + 24, 0)
    return bytes(refix(buf))


def swap_entries(buf: bytearray) -> bytes:
    """Swap the entries of subpartitions 1 and 2 in region 0: each still points at a real chunk
    with the right checksum, batches and rows, but of the other subpartition."""
    sec = Sections.of(buf)
    one, two = sec.entry(1, 0), sec.entry(2, 0)
    buf[one : one + ENTRY_SIZE], buf[two : two + ENTRY_SIZE] = (
        buf[two : two + ENTRY_SIZE],
        buf[one : one + ENTRY_SIZE],
    )
    return bytes(refix(buf))


def empty_length_keeps_rows(buf: bytearray) -> bytes:
    """Chunk (1, 0) declares 0 bytes but keeps its rows and batches; its bytes are added to
    chunk (0, 0) so that the chunks still tile the region."""
    sec = Sections.of(buf)
    first, second = sec.entry(0, 0), sec.entry(1, 0)
    length = u64(buf, second + 8)
    put64(buf, first + 8, u64(buf, first + 8) + length)
    put64(buf, second, u64(buf, second) + length)
    put64(buf, second + 8, 0)
    return bytes(refix(buf))


def batches_without_rows(buf: bytearray) -> bytes:
    """Chunk (0, 0) declares 0 rows but keeps its bytes and batches (total rows fixed)."""
    sec = Sections.of(buf)
    at = sec.entry(0, 0) + 16
    put64(buf, TOTAL_ROWS_AT, u64(buf, TOTAL_ROWS_AT) - u64(buf, at))
    put64(buf, at, 0)
    return bytes(refix(buf))


def undefined_region_flag(buf: bytearray) -> bytes:
    sec = Sections.of(buf)
    at = sec.region(1) + 16
    put32(buf, at, u32(buf, at) | 0b10)
    return bytes(refix(buf))


def region_reserved_fixed(buf: bytearray) -> bytes:
    sec = Sections.of(buf)
    put32(buf, sec.region(0) + 20, 7)
    return bytes(refix(buf))


def trailer_reserved(buf: bytearray) -> bytes:
    sec = Sections.of(buf)
    put32(buf, sec.trailer_at + 4, 1)
    return bytes(buf)


def total_rows_plus_one(buf: bytearray) -> bytes:
    put64(buf, TOTAL_ROWS_AT, u64(buf, TOTAL_ROWS_AT) + 1)
    return bytes(refix(buf, Refix(subpartitions=False, meta=False)))


def rows_moved_between_chunks(buf: bytearray) -> bytes:
    sec = Sections.of(buf)
    first, second = sec.entry(0, 0) + 16, sec.entry(1, 0) + 16
    put64(buf, first, u64(buf, first) + 1)
    put64(buf, second, u64(buf, second) - 1)
    return bytes(refix(buf))


def _without_regions(buf: bytearray, keep: slice) -> bytes:
    """Re-encode the index keeping only the regions ``keep`` selects (checksums valid)."""
    index = codec.decode_index(bytes(buf))
    return codec.encode_index(
        schema=index.schema,
        partitioner=index.meta.partitioner,
        file_id=index.header.file_id,
        data_length=index.header.data_length,
        regions=index.meta.regions[keep],
        entries=index.entries[:, keep],
        compression=index.header.compression,
    )


def drop_last_region(buf: bytearray) -> bytes:
    """Re-encode the index without its last region: the data file holds batches it omits."""
    return _without_regions(buf, slice(None, -1))


def drop_first_region(buf: bytearray) -> bytes:
    """Re-encode the index without its first region (and that region's rows)."""
    return _without_regions(buf, slice(1, None))


def footer_repeats_first_batch(buf: bytearray) -> bytes:
    """The footer's last record-batch block replaced by its first: same length, other batches."""
    from arrowshuffle.format.ipc_file import BLOCK_DTYPE, footer_blocks_range, split_file_tail

    footer, start = split_file_tail(bytes(buf))
    begin, end = footer_blocks_range(footer)
    blocks = bytearray(footer[begin:end])
    size = BLOCK_DTYPE.itemsize
    blocks[-size:] = blocks[:size]
    out = bytearray(buf)
    out[start + begin : start + end] = blocks
    return bytes(out)


def first_region_swallows_second(buf: bytearray) -> bytes:
    """Re-encode the index with region 0 lengthened over region 1, which is left out."""
    index = codec.decode_index(bytes(buf))
    regions = index.meta.regions.copy()
    regions[0]["length"] += regions[1]["length"]
    keep = [r for r in range(index.num_regions) if r != 1]
    return codec.encode_index(
        schema=index.schema,
        partitioner=index.meta.partitioner,
        file_id=index.header.file_id,
        data_length=index.header.data_length,
        regions=regions[keep].copy(),
        entries=index.entries[:, keep].copy(),
        compression=index.header.compression,
    )


def footer_swaps_two_batches(buf: bytearray) -> bytes:
    """The footer's first two record-batch blocks swapped: the same batches, out of order."""
    from arrowshuffle.format.ipc_file import BLOCK_DTYPE, footer_blocks_range, split_file_tail

    footer, start = split_file_tail(bytes(buf))
    begin, _ = footer_blocks_range(footer)
    size = BLOCK_DTYPE.itemsize
    at = start + begin
    first, second = bytes(buf[at : at + size]), bytes(buf[at + size : at + 2 * size])
    out = bytearray(buf)
    out[at : at + 2 * size] = second + first
    return bytes(out)


def other_schema(buf: bytearray) -> bytes:
    """Re-encode the index with the string column declared as large_string."""
    index = codec.decode_index(bytes(buf))
    return codec.encode_index(
        schema=pa.schema([("a", pa.int64()), ("b", pa.int32()), ("s", pa.large_string())]),
        partitioner=index.meta.partitioner,
        file_id=index.header.file_id,
        data_length=index.header.data_length,
        regions=index.meta.regions,
        entries=index.entries,
        compression=index.header.compression,
    )


def truncate(n: int) -> Callable[[bytearray], bytes]:
    return lambda buf: bytes(buf[:-n])


def append_garbage(buf: bytearray) -> bytes:
    return bytes(buf) + b"\x00GARBAGE"


def corrupt_string_value(buf: bytearray) -> bytes:
    """Change one character of a string value inside a chunk's body."""
    needle = b"r1-row3"
    at = bytes(buf).find(needle)
    assert at > 0 and bytes(buf).count(needle) == 1, "the value must occur exactly once"
    buf[at + 4] = ord("X")
    return bytes(buf)


BROKEN = (
    Broken(
        "bad_index_magic", "good_basic", "V1", "index magic ASHUFIDZ instead of ASHUFIDX", set_magic
    ),
    Broken(
        "bad_trailer_magic",
        "good_basic",
        "V1",
        "trailer magic ASHUFEOF instead of ASHUFEND",
        set_trailer_magic,
    ),
    Broken(
        "unknown_major_version", "good_basic", "V2", "major version 2 (checksums fixed)", set_major
    ),
    Broken(
        "unknown_required_flag",
        "good_basic",
        "V2",
        "required flag bit 0 set (checksums fixed)",
        set_required_flag,
    ),
    Broken("bad_header_crc", "good_basic", "V3", "header CRC32C changed", flip_header_crc),
    Broken("truncated_index", "good_basic", "V4", "index cut 16 bytes short", truncate(16)),
    Broken(
        "index_trailing_garbage",
        "good_basic",
        "V4",
        "8 bytes appended to the index",
        append_garbage,
    ),
    Broken(
        "hostile_num_regions",
        "good_basic",
        "V4",
        "num_regions 2**32-1 (header CRC fixed)",
        huge_regions,
    ),
    Broken(
        "hostile_schema_length",
        "good_basic",
        "V4",
        "schema length 2**32-8 with a matching declared index length (header CRC fixed)",
        huge_schema_length,
    ),
    Broken(
        "bad_metadata_crc",
        "good_basic",
        "V5",
        "region 0 reserved word changed; whole-index CRC fixed",
        region_reserved,
    ),
    Broken(
        "bad_entry_block_crc",
        "good_basic",
        "V6",
        "entry (subpartition 1, region 0) CRC field changed; whole-index CRC fixed",
        entry_crc_field,
    ),
    Broken(
        "bad_index_crc",
        "good_basic",
        "V6",
        "whole-index CRC32C in the trailer changed",
        trailer_crc,
    ),
    Broken(
        "bad_schema_section",
        "good_basic",
        "V7",
        "schema bytes replaced by text (checksums fixed)",
        garbage_schema,
    ),
    Broken(
        "bad_partitioner_section",
        "good_basic",
        "V7",
        "partitioner spec is a JSON list (checksums fixed)",
        garbage_partitioner,
    ),
    Broken(
        "chunk_past_end",
        "good_basic",
        "V8",
        "last chunk and its region 4096 bytes longer than the data file allows",
        chunk_past_end,
    ),
    Broken(
        "overlapping_chunks",
        "good_basic",
        "V9",
        "chunk (subpartition 1, region 1) starts 8 bytes early, inside the previous chunk",
        overlapping_chunk,
    ),
    Broken(
        "broadcast_mismatch",
        "good_broadcast",
        "V10",
        "subpartition 2's entry of the broadcast region points 8 bytes into the chunk",
        broadcast_entry_moved,
    ),
    Broken(
        "batches_without_bytes",
        "good_basic",
        "V11",
        "chunk (subpartition 0, region 0) declares 0 batches but has bytes",
        batches_without_bytes,
    ),
    Broken(
        "swapped_entries",
        "good_basic",
        "V9",
        "entries of subpartitions 1 and 2 in region 0 swapped (checksums fixed): each points at "
        "a real chunk of the other subpartition",
        swap_entries,
    ),
    Broken(
        "length_zero_rows_kept",
        "good_basic",
        "V11",
        "chunk (subpartition 1, region 0) declares 0 bytes but keeps its rows and batches; its "
        "bytes are added to chunk (0, 0), so the region is still tiled (checksums fixed)",
        empty_length_keeps_rows,
    ),
    Broken(
        "batches_without_rows",
        "good_basic",
        "V11",
        "chunk (subpartition 0, region 0) declares 0 rows but has bytes and batches (total rows "
        "and checksums fixed)",
        batches_without_rows,
    ),
    Broken(
        "undefined_region_flag",
        "good_basic",
        "V20",
        "region 1's flags have the undefined bit 1 set (checksums fixed)",
        undefined_region_flag,
    ),
    Broken(
        "reserved_region_word",
        "good_basic",
        "V20",
        "region 0's reserved word is 7 (checksums fixed)",
        region_reserved_fixed,
    ),
    Broken(
        "reserved_trailer_word",
        "good_basic",
        "V20",
        "the trailer's reserved word is 1 (no checksum covers it)",
        trailer_reserved,
        reads=same_rows,
        part="trailer",
    ),
    Broken(
        "total_rows_wrong",
        "good_basic",
        "V12",
        "header total_rows one too many (header CRC fixed)",
        total_rows_plus_one,
        reads=same_rows,
    ),
    Broken(
        "truncated_data",
        "good_basic",
        "V13",
        "data file cut 64 bytes short",
        edit_data=truncate(64),
        dataset_rule="M7",
    ),
    Broken(
        "pair_mismatch",
        "good_basic",
        "V14",
        "index of good_basic beside the same rows written with another file id (equal length)",
    ),
    Broken(
        "schema_mismatch",
        "good_basic",
        "V15",
        "index declares column s as large_string, the data file has string",
        other_schema,
    ),
    Broken(
        "corrupt_chunk_byte",
        "good_basic",
        "V16",
        "one byte of a string value in a chunk changed (valid without --deep)",
        edit_data=corrupt_string_value,
        deep=True,
    ),
    Broken(
        "chunk_rows_wrong",
        "good_basic",
        "V17",
        "one row moved between the row counts of two chunks; totals unchanged "
        "(valid without --deep)",
        rows_moved_between_chunks,
        deep=True,
    ),
    Broken(
        "unindexed_batches",
        "good_basic",
        "V21",
        "index re-encoded without the last region: the data file holds batches no region covers",
        drop_last_region,
    ),
    Broken(
        "first_region_dropped",
        "good_basic",
        "V21",
        "index re-encoded without the first region: region 0 no longer starts at the first batch",
        drop_first_region,
    ),
    Broken(
        "footer_lists_other_batch",
        "good_basic",
        "V18",
        "the data file's footer lists its first record batch in place of its last one "
        "(valid without --deep)",
        edit_data=footer_repeats_first_batch,
        deep=True,
        reads=same_rows,
    ),
    Broken(
        "footer_batches_swapped",
        "good_basic",
        "V18",
        "the data file's footer lists its first two record batches in each other's place: the "
        "same batches and rows, out of file order (valid without --deep)",
        edit_data=footer_swaps_two_batches,
        deep=True,
        reads=same_rows,
    ),
    Broken(
        "region_swallows_next",
        "good_basic",
        "V9",
        "index re-encoded with region 0 lengthened over region 1, which is left out with its "
        "entries: the regions still cover the data file, region 0's chunks do not fill it",
        first_region_swallows_second,
    ),
    Broken(
        "misassigned_rows",
        "good_hash",
        "V19",
        "the rows of good_hash written one subpartition further than its hash partitioner "
        "(recorded in the index) assigns them (valid without --deep)",
        deep=True,
        reads=lambda base: MISASSIGNED,
    ),
    Broken(
        "foreign_random_index", "plain", "V1", "a plain Arrow file beside 200 pseudo-random bytes"
    ),
    Broken("foreign_text_index", "plain", "V1", "a plain Arrow file beside a text file"),
    Broken(
        "ok_unknown_optional_flag",
        "good_basic",
        None,
        "optional flag bit 8 set: readers ignore it; reads like good_basic",
        set_optional_flag,
    ),
    Broken(
        "ok_minor_version_longer_header",
        "good_basic",
        None,
        "version 1.1 with a 104-byte header (8 unknown bytes): reads like good_basic",
        longer_header,
    ),
)


def pseudo_random(n: int, seed: bytes) -> bytes:
    out = b""
    block = seed
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return out[:n]


def write_plain(path: Path) -> None:
    """A plain Arrow IPC file that knows nothing of this format."""
    table = pa.table({"x": pa.array(range(20), pa.int64())})
    with pa.ipc.new_file(path, table.schema) as writer:
        writer.write_table(table)


def write_broken(vector: Broken, out: Path, good: dict[str, GoodVector]) -> dict[str, Any]:
    data = out / f"{vector.name}.arrow"
    index = out / f"{vector.name}.arrow.idx"
    if vector.base == "plain":
        write_plain(data)
        if vector.name == "foreign_random_index":
            index.write_bytes(pseudo_random(200, b"foreign"))
        else:
            index.write_text(
                "This is a text file, not an index.\n"
                "It is longer than an index header so that only its first bytes are judged.\n"
            )
    elif vector.name == "misassigned_rows":
        write_good(MISASSIGNED, out)
    elif vector.name == "pair_mismatch":
        base = good[vector.base]
        with contextlib.ExitStack() as stack:
            temp = Path(stack.enter_context(_tempdir(out)))
            written = write_good(base, temp, file_id=fid("pair_mismatch"))
            shutil.copyfile(written, data)
        shutil.copyfile(out / f"{vector.base}.arrow.idx", index)
    else:
        source = out / f"{vector.base}.arrow"
        data_bytes = bytearray(source.read_bytes())
        index_bytes = bytearray((out / f"{vector.base}.arrow.idx").read_bytes())
        data.write_bytes(vector.edit_data(data_bytes) if vector.edit_data else bytes(data_bytes))
        index.write_bytes(
            vector.edit_index(index_bytes) if vector.edit_index else bytes(index_bytes)
        )
    entry: dict[str, Any] = {
        "kind": "valid" if vector.rule is None else "invalid",
        "description": vector.description,
        "base": vector.base,
        "data": data.name,
        "index": index.name,
    }
    if vector.rule is not None:
        entry.update(rule=vector.rule, deep=vector.deep)
    if vector.part is not None:
        entry["part"] = vector.part
    if vector.dataset_rule is not None:
        entry["dataset_rule"] = vector.dataset_rule
    if vector.reads is not None:
        read = expected_for(vector.reads(good[vector.base]))
        entry["reads"] = {k: read[k] for k in ("rows", "broadcast_regions", "file_rows")}
    return entry


@contextlib.contextmanager
def _tempdir(parent: Path) -> Iterator[str]:
    path = parent / ".generate-tmp"
    path.mkdir(exist_ok=True)
    try:
        yield str(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------- dataset vectors
#
# datasets/NAME/ holds a copy of a good pair (good_basic unless named) and a manifest listing
# it, edited to break one manifest rule; datasets/expected.json names the pair, the rule and
# where it is found ("manifest": when the manifest is decoded, "file": when the listed file is
# checked, "indexes": once every listed index is decoded).

DATASETS = "datasets"
PAIR = "good_basic.arrow"


def _good_manifest(out: Path, pair: str = PAIR) -> dict[str, Any]:
    """The manifest of a dataset holding just the pair ``pair``, as a JSON document."""
    from arrowshuffle.format.manifest import Manifest, ManifestFile, encode_manifest

    raw = (out / f"{pair}.idx").read_bytes()
    index = codec.decode_index(raw)
    entry = ManifestFile(
        data=pair,
        index=f"{pair}.idx",
        data_size=(out / pair).stat().st_size,
        index_size=len(raw),
        rows=index.header.total_rows,
        regions=index.num_regions,
        index_crc32c=codec.index_checksum(raw),
    )
    manifest = Manifest(index.schema, index.num_subpartitions, index.meta.partitioner, (entry,))
    document: dict[str, Any] = json.loads(encode_manifest(manifest))
    # A dataset of one manifest, as written before numbered versions (manifest 1.1): these
    # vectors show that such datasets still read.
    document["format_version_minor"] = 1
    return document


def _totals(out: Path, pair: str) -> dict[str, list[int]]:
    """The per-subpartition totals of a manifest listing just ``pair`` (its entries summed)."""
    index = codec.decode_index((out / f"{pair}.idx").read_bytes())
    entries = index.entries  # [subpartition, region]
    return {
        "bytes": [int(v) for v in entries["length"].sum(axis=1)],
        "rows": [int(v) for v in entries["rows"].sum(axis=1)],
    }


def _one_row_moved(doc: dict[str, Any]) -> None:
    """Per-subpartition totals with one row counted in subpartition 1 instead of 0."""
    rows = doc["subpartitions"]["rows"]
    rows[0] -= 1
    rows[1] += 1


def _seed(value: int) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        assert doc["partitioner"]["seed"] == 42
        doc["partitioner"]["seed"] = value

    return edit


def _listed_twice(doc: dict[str, Any]) -> None:
    doc["files"].append(dict(doc["files"][0]))


def _data_named_as_index(doc: dict[str, Any]) -> None:
    second = dict(doc["files"][0])
    second["data"] = f"{PAIR}.idx"
    second["index"] = f"{PAIR}.idx.idx"
    doc["files"].append(second)


def _file_field(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["files"][0][key] = value

    return edit


def _named(data: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["files"][0]["data"] = data
        doc["files"][0]["index"] = data + ".idx"

    return edit


def _with_properties(value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["properties"] = value

    return edit


@dataclass(frozen=True)
class DatasetVector:
    """A dataset whose manifest is the good one, edited (``edit``) or replaced (``raw``)."""

    name: str
    rule: str | None
    where: str
    description: str
    edit: Callable[[dict[str, Any]], None] | None = None
    raw: Callable[[bytes], bytes] | None = None
    #: The good pair the dataset holds.
    pair: str = PAIR
    #: Whether the manifest lists the per-subpartition totals (before ``edit``).
    totals: bool = False


DATASET_VECTORS = (
    DatasetVector("good_dataset", None, "", "the good_basic pair, listed once"),
    DatasetVector(
        "deep_nesting",
        "M1",
        "manifest",
        "the manifest is 10000 nested arrays (deeper than a recursive parser's limit)",
        raw=lambda good: b"[" * 10_000 + b"]" * 10_000 + b"\n",
    ),
    DatasetVector(
        "deep_properties",
        "M1",
        "manifest",
        "the good manifest with 64 nested arrays in its properties (66 levels in all)",
        edit=_with_properties({"x": json.loads("[" * 64 + "]" * 64)}),
    ),
    DatasetVector(
        "not_utf8",
        "M1",
        "manifest",
        "the good manifest with a Latin-1 byte (0xe9) in a property value",
        raw=lambda good: good.replace(b'"properties": {}', b'"properties": {"k": "caf\xe9"}'),
    ),
    DatasetVector(
        "key_twice",
        "M1",
        "manifest",
        "the good manifest with a second, empty 'files' member",
        raw=lambda good: good.rstrip()[:-1] + b', "files": []}\n',
    ),
    DatasetVector(
        "rows_boolean",
        "M1",
        "manifest",
        "files[0].rows is true",
        edit=_file_field("rows", True),
    ),
    DatasetVector(
        "size_negative",
        "M1",
        "manifest",
        "files[0].data_size is -1",
        edit=_file_field("data_size", -1),
    ),
    DatasetVector(
        "size_too_large",
        "M1",
        "manifest",
        "files[0].index_size is 2**63",
        edit=_file_field("index_size", 2**63),
    ),
    DatasetVector(
        "crc_too_large",
        "M1",
        "manifest",
        "files[0].index_crc32c is 2**32",
        edit=_file_field("index_crc32c", 2**32),
    ),
    DatasetVector(
        "name_leaves_directory",
        "M3",
        "manifest",
        "files[0] is named ../good_basic.arrow",
        edit=_named(f"../{PAIR}"),
    ),
    DatasetVector(
        "name_is_url",
        "M3",
        "manifest",
        "files[0] is named s3://other/good_basic.arrow",
        edit=_named(f"s3://other/{PAIR}"),
    ),
    DatasetVector(
        "index_not_beside_data",
        "M3",
        "manifest",
        "files[0].index is other.idx, not good_basic.arrow.idx",
        edit=_file_field("index", "other.idx"),
    ),
    DatasetVector(
        "pair_listed_twice",
        "M8",
        "manifest",
        "the good_basic pair listed twice",
        edit=_listed_twice,
    ),
    DatasetVector(
        "data_named_as_index",
        "M8",
        "manifest",
        "a second entry whose data file is good_basic.arrow.idx, the first entry's index",
        edit=_data_named_as_index,
    ),
    DatasetVector(
        "index_size_wrong",
        "M4",
        "file",
        "files[0].index_size is 8 bytes more than the index",
        edit=lambda doc: doc["files"][0].update(index_size=doc["files"][0]["index_size"] + 8),
    ),
    DatasetVector(
        "regions_wrong",
        "M7",
        "file",
        "files[0].regions is one more than the index declares",
        edit=lambda doc: doc["files"][0].update(regions=doc["files"][0]["regions"] + 1),
    ),
    DatasetVector(
        "major_version_2",
        "M2",
        "manifest",
        "format_version is 2",
        edit=lambda doc: doc.update(format_version=2),
    ),
    DatasetVector(
        "index_crc_wrong",
        "M5",
        "file",
        "files[0].index_crc32c is one more than the index's trailer holds",
        edit=lambda doc: doc["files"][0].update(
            index_crc32c=(doc["files"][0]["index_crc32c"] + 1) % 2**32
        ),
    ),
    DatasetVector(
        "partitioner_seed_differs",
        "M6",
        "file",
        "the good_hash pair listed under a hash partitioner with seed 7; the index's has seed 42",
        edit=_seed(7),
        pair="good_hash.arrow",
    ),
    DatasetVector(
        "totals_wrong",
        "M9",
        "indexes",
        "per-subpartition totals with one row counted in subpartition 1 instead of 0 (sums "
        "unchanged)",
        edit=_one_row_moved,
        totals=True,
    ),
)


def generate_datasets(out: Path) -> dict[str, Any]:
    """Write the dataset vectors into ``out/datasets`` (after the good pairs are written)."""
    from arrowshuffle.format.naming import MANIFEST_NAME

    root = out / DATASETS
    vectors: dict[str, Any] = {}
    for vector in DATASET_VECTORS:
        if not (out / vector.pair).exists():
            write_good(next(v for v in GOOD if f"{v.name}.arrow" == vector.pair), out)
        good_doc = _good_manifest(out, vector.pair)
        good = (json.dumps(good_doc, indent=1, sort_keys=True) + "\n").encode()
        directory = root / vector.name
        directory.mkdir(parents=True, exist_ok=True)
        for name in (vector.pair, f"{vector.pair}.idx"):
            shutil.copyfile(out / name, directory / name)
        if vector.raw is not None:
            payload = vector.raw(good)
        else:
            doc = json.loads(good)
            if vector.totals:
                doc["subpartitions"] = _totals(out, vector.pair)
            if vector.edit is not None:
                vector.edit(doc)
            payload = (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
        (directory / MANIFEST_NAME).write_bytes(payload)
        vectors[vector.name] = {
            "kind": "good" if vector.rule is None else "invalid",
            "description": vector.description,
            "pair": vector.pair,
            **({} if vector.rule is None else {"rule": vector.rule, "where": vector.where}),
        }
    document = {"pyarrow": pa.__version__, "datasets": vectors}
    (root / "expected.json").write_text(json.dumps(document, indent=1) + "\n")
    return document


# ---------------------------------------------------------------------- versioned datasets
#
# versioned/NAME/ is a dataset of numbered manifest versions (spec.md, section 8.1) written by
# the real committer: a write and two appends of one file each (versions 1 to 3), then a
# compaction that merges the first two files (version 4). Every version is retained, and the
# versions share files. The broken ones are copies of it with one version file edited or one
# file removed; versioned/expected.json names their rule. File names, file ids and commit ids
# are drawn from fixed labels, so regenerating writes the same bytes.

VERSIONED = "versioned"
GOOD_VERSIONED = "good_versioned"
#: The files of the three commits: 2 regions x 4 subpartitions each, explicit ids.
VERSIONED_PARTS = tuple(
    GoodVector(
        f"part-{task:05d}-{fid(f'{GOOD_VERSIONED}/{task}').hex()}",
        f"the file of commit {task + 1}",
        4,
        tuple(
            Region(rows(10 * (task + 1) + r, n), ids_for(10 * (task + 1) + r, n, 4))
            for r, n in enumerate(sizes)
        ),
        fid(f"{GOOD_VERSIONED}/{task}"),
    )
    for task, sizes in enumerate(((8, 6), (7, 9), (10, 5)))
)
#: Enough memory for compaction to merge every input region of a group into one region.
COMPACTION_MEMORY = "1GiB"


@contextlib.contextmanager
def ids_drawn_from(label: str) -> Iterator[None]:
    """Make file names, commit ids and merged files' ids come from ``label``, one after another.

    The committer, compaction and the naming of files draw them from ``uuid.uuid4``; each module
    here draws the next of a fixed sequence instead (the generator runs in one thread, so the
    order of the draws is fixed too).
    """
    from arrowshuffle.format import naming
    from arrowshuffle.writers import commit, merge

    draws = itertools.count()
    fixed = SimpleNamespace(
        uuid4=lambda: uuid.UUID(bytes=fid(f"{label}/uuid/{next(draws)}"), version=4)
    )
    modules = (naming, commit, merge)
    originals = [module.uuid for module in modules]
    for module in modules:
        module.uuid = fixed  # type: ignore[assignment]
    try:
        yield
    finally:
        for module, original in zip(modules, originals, strict=True):
            module.uuid = original


def _reads(vector: GoodVector) -> dict[str, Any]:
    """What a reader of the pair returns: its rows per region, broadcast flags and file rows."""
    expected = expected_for(vector)
    return {k: expected[k] for k in ("rows", "broadcast_regions", "file_rows")}


def _merged_reads(vectors: tuple[GoodVector, ...]) -> dict[str, Any]:
    """What a reader of the file compaction merges ``vectors`` into returns.

    With :data:`COMPACTION_MEMORY` every input region fits one output region, which holds for
    each subpartition in order its chunks of the input regions, file by file, region by region
    (spec.md, section 7.2.1). The inputs here have no broadcast region.
    """
    regions = [region for vector in vectors for region in vector.regions]
    assert all(region.ids is not None for region in regions)
    n = vectors[0].num_subpartitions
    chunks = [
        region.table.filter(pa.array(region.ids == s)) for s in range(n) for region in regions
    ]
    counts = [sum(int(np.count_nonzero(region.ids == s)) for region in regions) for s in range(n)]
    return {
        "rows": [counts],
        "broadcast_regions": [False],
        "file_rows": neutral(pa.concat_tables([SCHEMA.empty_table(), *chunks])),
    }


def _dataset_reads(files: list[dict[str, Any]]) -> dict[str, Any]:
    """What a reader of a dataset of ``files`` returns: the files' reads one after another."""
    return {
        "rows": [counts for f in files for counts in f["rows"]],
        "broadcast_regions": [b for f in files for b in f["broadcast_regions"]],
        "file_rows": {
            name: [value for f in files for value in f["file_rows"][name]] for name in SCHEMA.names
        },
    }


def write_versioned(directory: Path) -> dict[str, Any]:
    """Write the good versioned dataset into ``directory`` (replaced if it exists).

    Returns:
        Per version, the commit's operation, the files it lists and what a reader of it
        returns, computed from the input rows (and the names the writers report).
    """
    from arrowshuffle.writers.compact import compact
    from arrowshuffle.writers.dataset_writer import commit_dataset, prepare_directory

    shutil.rmtree(directory, ignore_errors=True)
    location = prepare_directory(str(directory), None)
    written: list[WrittenFile] = []
    with ids_drawn_from(GOOD_VERSIONED):
        for i, part in enumerate(VERSIONED_PARTS):
            written.append(write_pair(part, directory))
            commit_dataset(
                location,
                [written[-1]],
                schema=SCHEMA,
                num_subpartitions=part.num_subpartitions,
                partitioner={"name": "explicit"},
                mode="error" if i == 0 else "append",
            )
        # The first two files fit the target, the third does not: one group merged, one kept.
        report = compact(
            str(directory),
            target_file_size=written[0].data_size + written[1].data_size,
            memory=COMPACTION_MEMORY,
            rebatch=False,  # the vectors hold the chunks copied byte for byte
        )
    (merged,) = report.written
    names = [f"{part.name}.arrow" for part in VERSIONED_PARTS]
    reads = [_reads(part) for part in VERSIONED_PARTS]
    return {
        "1": {"operation": "write", "files": names[:1], "reads": _dataset_reads(reads[:1])},
        "2": {"operation": "append", "files": names[:2], "reads": _dataset_reads(reads[:2])},
        "3": {"operation": "append", "files": names, "reads": _dataset_reads(reads)},
        "4": {
            "operation": "compact",
            "files": [merged, names[2]],
            "reads": _dataset_reads([_merged_reads(VERSIONED_PARTS[:2]), reads[2]]),
        },
    }


def _version_file(directory: Path, version: int) -> Path:
    from arrowshuffle.format.naming import VERSIONS_DIR, version_name

    return directory / VERSIONS_DIR / version_name(version)


def _set_version(version: int, holds: int) -> Callable[[Path], None]:
    """Version ``version``'s file holds ``holds`` as its ``version``, as a hand edit leaves it."""

    def edit(directory: Path) -> None:
        path = _version_file(directory, version)
        doc = json.loads(path.read_bytes())
        assert doc["version"] == version
        doc["version"] = holds
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")

    return edit


def _remove_version(version: int) -> Callable[[Path], None]:
    def edit(directory: Path) -> None:
        _version_file(directory, version).unlink()

    return edit


def _remove_first_part(directory: Path) -> None:
    """Remove the data file of the first commit: versions 1-3 list it, version 4 does not."""
    (directory / f"{VERSIONED_PARTS[0].name}.arrow").unlink()


@dataclass(frozen=True)
class VersionedVector:
    """A copy of the good versioned dataset broken by ``edit``."""

    name: str
    rule: str
    #: where the rule is found: ``manifest`` (the version in force, when it is decoded),
    #: ``older version`` (an earlier version or one of its files) or ``versions`` (the
    #: versions the directory holds)
    where: str
    description: str
    edit: Callable[[Path], None]

    @property
    def part(self) -> str | None:
        """What the conformance table distinguishes: a rule broken in an older version only."""
        return "older version" if self.where == "older version" else None


VERSIONED_VECTORS = (
    VersionedVector(
        "version_number_differs",
        "M10",
        "manifest",
        "the file of version 4 (in force) holds version 3",
        _set_version(4, 3),
    ),
    VersionedVector(
        "older_version_number_differs",
        "M10",
        "older version",
        "the file of version 2 holds version 7; the version in force is intact",
        _set_version(2, 7),
    ),
    VersionedVector(
        "version_gap",
        "M11",
        "versions",
        "the file of version 2 is removed: versions 1, 3 and 4 are retained",
        _remove_version(2),
    ),
    VersionedVector(
        "older_version_file_missing",
        "M4",
        "older version",
        "the data file of the first commit is removed: versions 1 to 3 list it, version 4 "
        "(compacted) does not",
        _remove_first_part,
    ),
)


def generate_versioned(out: Path) -> dict[str, Any]:
    """Write the versioned dataset vectors into ``out/versioned``."""
    root = out / VERSIONED
    good = root / GOOD_VERSIONED
    versions = write_versioned(good)
    in_force = max(versions, key=int)
    vectors: dict[str, Any] = {
        GOOD_VERSIONED: {
            "kind": "good",
            "description": "a write and two appends of one file each (versions 1 to 3), then a "
            "compaction of the first two files (version 4); every version retained",
            "num_subpartitions": VERSIONED_PARTS[0].num_subpartitions,
            "version": int(in_force),
            "versions": versions,
            "reads": versions[in_force]["reads"],
        }
    }
    for vector in VERSIONED_VECTORS:
        directory = root / vector.name
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(good, directory)
        vector.edit(directory)
        entry: dict[str, Any] = {
            "kind": "invalid",
            "description": vector.description,
            "base": GOOD_VERSIONED,
            "num_subpartitions": VERSIONED_PARTS[0].num_subpartitions,
            "rule": vector.rule,
            "where": vector.where,
        }
        if vector.part is not None:
            entry["part"] = vector.part
        if vector.where != "manifest":  # readers read the version in force, which is intact
            entry["reads"] = versions[in_force]["reads"]
        vectors[vector.name] = entry
    document = {"pyarrow": pa.__version__, "datasets": vectors}
    (root / "expected.json").write_text(json.dumps(document, indent=1) + "\n")
    return document


def generate(out: Path) -> dict[str, Any]:
    """Write every vector and ``expected.json`` into ``out``; return the expected document."""
    out.mkdir(parents=True, exist_ok=True)
    vectors: dict[str, Any] = {}
    for vector in GOOD:
        write_good(vector, out)
        vectors[vector.name] = expected_for(vector)
    good = {v.name: v for v in GOOD}
    for broken in BROKEN:
        vectors[broken.name] = write_broken(broken, out, good)
    document = {
        "format_version": f"{codec.FORMAT_VERSION_MAJOR}.{codec.FORMAT_VERSION_MINOR}",
        "pyarrow": pa.__version__,
        "vectors": vectors,
    }
    (out / "expected.json").write_text(json.dumps(document, indent=1, ensure_ascii=True) + "\n")
    generate_datasets(out)
    generate_versioned(out)
    return document


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
