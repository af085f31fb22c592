"""The vectors of tests/vectors/v1 as conformance cases, and what each kind of surface must see.

A vector is a file vector (a data file and its index) or a dataset vector (a dataset directory:
one of a single manifest, in ``datasets/``, or one of numbered manifest versions, in
``versioned/``).
Every surface that reads datasets also takes every file vector, as a one-file dataset: the pair
beside a manifest that lists it with its real sizes and index checksum (:func:`one_file_dataset`).

What a surface must make of a vector depends only on the vector's rule and on the surface's
kind (:class:`Kind`), through one table, :data:`SEEN_BY`: a surface of a kind that sees the rule
must refuse the vector naming the rule; any other surface reads the rows the vector's ``reads``
(or, for a valid vector, its content) describe, or finds it valid.
"""

from __future__ import annotations

import enum
import json
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from arrowshuffle.format import index as codec
from arrowshuffle.format.errors import FormatError
from arrowshuffle.format.manifest import Manifest, ManifestFile, encode_manifest
from arrowshuffle.format.naming import MANIFEST_NAME

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "v1"
SPEC = Path(__file__).resolve().parent.parent.parent / "spec.md"
FILES: dict[str, Any] = json.loads((VECTORS / "expected.json").read_text())["vectors"]
DATASETS: dict[str, Any] = json.loads((VECTORS / "datasets" / "expected.json").read_text())[
    "datasets"
]
VERSIONED: dict[str, Any] = json.loads((VECTORS / "versioned" / "expected.json").read_text())[
    "datasets"
]


class Kind(enum.Enum):
    """What a surface does with a vector."""

    #: returns rows from local files (chunk checksums verified where the surface lets the caller
    #: ask)
    READ = "read"
    #: returns rows from object storage or any non-local file system, through ranged reads
    RANGED_READ = "ranged read"
    #: reports the first broken rule, without reading chunks
    VALIDATE = "validate"
    #: reports the first broken rule, reading every chunk (``--deep``)
    DEEP = "deep"


EVERY = frozenset(Kind)
VALIDATORS = frozenset({Kind.VALIDATE, Kind.DEEP})
READERS = frozenset({Kind.READ, Kind.RANGED_READ})

#: The kinds of surface that see each rule (spec.md, sections 6.5, 6.6, 10 and 11).
SEEN_BY: dict[str, frozenset[Kind]] = {
    # Index decoding (V1-V7), the reader's proof (V8-V11, V20 in the region table), the data
    # file's ends, file id and schema (V13-V15, from its first bytes and its footer, fetched in
    # one request by a ranged reader): checked before any row is returned.
    **{f"V{i}": EVERY for i in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15)},
    "V20": EVERY,
    # Regions that do not cover every record batch would drop rows: refused before any is read.
    "V21": EVERY,
    # Readers do not read the trailer's reserved word (spec.md, section 10); validators do.
    "V20 trailer": VALIDATORS,
    # The header's total is a summary: the entries, which readers check, say where rows are.
    "V12": VALIDATORS,
    # Chunk checksums: readers that verify (every read surface here asks to) and deep checks.
    "V16": frozenset({*READERS, Kind.DEEP}),
    # Each chunk's batches and rows are checked while it is decoded, verified or not.
    "V17": frozenset({*READERS, Kind.DEEP}),
    # The footer's block list is never read by readers (chunks come from the index, and V21
    # proves that they cover every batch); the partitioner is recomputed by deep checks only.
    "V18": frozenset({Kind.DEEP}),
    "V19": frozenset({Kind.DEEP}),
    # Manifest rules: M1-M3 and M8 when the manifest is decoded, M4-M7 for every file opened.
    **{f"M{i}": EVERY for i in range(1, 9)},
    # Totals only steer read plans; a read's rows come from the indexes.
    "M9": VALIDATORS,
    # A version file is checked against its name whenever it is read: the version in force by
    # every reader.
    "M10": EVERY,
    # Broken only in an earlier version (its file, or a file only it lists): readers read the
    # version in force; validation checks every version the dataset retains (spec.md, 8.1, 11).
    "M4 older version": VALIDATORS,
    "M10 older version": VALIDATORS,
    # Readers list the versions only to find the highest; validation checks they are a run.
    "M11": VALIDATORS,
}


@dataclass(frozen=True)
class Vector:
    """One conformance case: a file vector or a dataset vector."""

    #: ``file-NAME`` or ``dataset-NAME``
    id: str
    name: str
    #: ``file`` or ``dataset``
    source: str
    #: the rule a validator reports first (``None``: a valid vector)
    rule: str | None
    #: the rule broken first in a one-file dataset (differs where the listing cannot agree with
    #: the index)
    dataset_rule: str | None
    #: the key of :data:`SEEN_BY` (the rule, or the rule and the part of it that is broken)
    key: str | None
    #: rows, broadcast_regions and file_rows of what a reader that does not refuse returns
    reads: dict[str, Any] | None
    #: the subpartition count a read asks for (that of the vector's base or pair)
    num_subpartitions: int
    #: a file vector's data file (its index beside it), or a dataset vector's directory
    path: Path


def _file_vector(name: str) -> Vector:
    entry = FILES[name]
    base = FILES.get(entry.get("base", name), FILES["good_basic"])
    rule = entry.get("rule")
    if entry["kind"] == "good":
        reads: dict[str, Any] | None = entry
    elif entry["kind"] == "valid":
        reads = base
    else:
        reads = entry.get("reads")
    key = None if rule is None else " ".join(filter(None, (rule, entry.get("part"))))
    return Vector(
        f"file-{name}",
        name,
        "file",
        rule,
        entry.get("dataset_rule", rule),
        key,
        reads,
        base["num_subpartitions"],
        VECTORS / entry["data"],
    )


def _dataset_vector(name: str) -> Vector:
    entry = DATASETS[name]
    pair = FILES[entry["pair"].removesuffix(".arrow")]
    rule = entry.get("rule")
    return Vector(
        f"dataset-{name}",
        name,
        "dataset",
        rule,
        rule,
        rule,
        pair,
        pair["num_subpartitions"],
        VECTORS / "datasets" / name,
    )


def _versioned_vector(name: str) -> Vector:
    entry = VERSIONED[name]
    rule = entry.get("rule")
    key = None if rule is None else " ".join(filter(None, (rule, entry.get("part"))))
    return Vector(
        f"dataset-{name}",
        name,
        "dataset",
        rule,
        rule,
        key,
        entry.get("reads"),
        entry["num_subpartitions"],
        VECTORS / "versioned" / name,
    )


FILE_VECTORS = tuple(_file_vector(name) for name in sorted(FILES))
DATASET_VECTORS = tuple(_dataset_vector(name) for name in sorted(DATASETS)) + tuple(
    _versioned_vector(name) for name in sorted(VERSIONED)
)
ALL_VECTORS = FILE_VECTORS + DATASET_VECTORS


# ---------------------------------------------------------------------- expected outcomes


@dataclass(frozen=True)
class Refused:
    """The surface must raise a ``FormatError`` whose ``rule`` is ``rule``."""

    rule: str


def expected(vector: Vector, kind: Kind, *, as_dataset: bool) -> Refused | None:
    """``Refused(rule)`` when a surface of ``kind`` sees the vector's rule, else ``None``.

    ``None`` means: a read returns :func:`expected_rows`, a validation finds no broken rule.
    ``as_dataset``: the surface takes datasets (a file vector is then a one-file dataset).
    """
    if vector.rule is None or vector.key is None:
        return None
    if kind not in SEEN_BY[vector.key]:
        return None
    rule = vector.dataset_rule if as_dataset else vector.rule
    assert rule is not None
    return Refused(rule)


def expected_rows(vector: Vector) -> dict[str, list[Any]]:
    """What reading every subpartition as one run returns, in the documented order.

    Region by region (spec.md, section 6.4); in a regular region the subpartitions in ascending
    order, which is the file order; a broadcast chunk's rows once per subpartition. Computed from
    the generator's inputs recorded in ``expected.json``.
    """
    reads = vector.reads
    assert reads is not None, f"{vector.id}: expected.json says nothing about its rows"
    file_rows: dict[str, list[Any]] = reads["file_rows"]
    out: dict[str, list[Any]] = {name: [] for name in file_rows}
    at = 0
    for counts, broadcast in zip(reads["rows"], reads["broadcast_regions"], strict=True):
        stored = counts[0] if broadcast else sum(counts)
        for _ in range(len(counts) if broadcast else 1):
            for name, values in file_rows.items():
                out[name].extend(values[at : at + stored])
        at += stored
    return out


def columns_of(table: pa.Table) -> dict[str, list[Any]]:
    return {name: table.column(name).to_pylist() for name in table.column_names}


def as_multiset(columns: dict[str, list[Any]]) -> list[tuple[Any, ...]]:
    """The rows as a sorted list of tuples (``None`` sorts first)."""
    rows = list(zip(*columns.values(), strict=True))
    return sorted(rows, key=lambda row: [(v is not None, v) for v in row])


def spec_rules() -> list[str]:
    """Every rule id of spec.md, section 11, from its ``- **V1** —`` lines."""
    section = SPEC.read_text().split("## 11. Validation rules", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^- \*\*([VM]\d+)\*\* —", section, flags=re.MULTILINE)


# ---------------------------------------------------------------------- one-file datasets


def _meta_of(index: bytes, base: str) -> tuple[pa.Schema, int, dict[str, Any], int, int]:
    """Schema, subpartitions, partitioner, rows and regions to list for an index.

    Its own, when it decodes; when only its header is readable (the magic is right), the header's
    rows and regions with the rest from its base vector; for a foreign index, the base's.
    """
    try:
        decoded = codec.decode_index(index)
    except FormatError:
        pass
    else:
        return (
            decoded.schema,
            decoded.num_subpartitions,
            decoded.meta.partitioner,
            decoded.header.total_rows,
            decoded.num_regions,
        )
    schema, n, partitioner, rows, regions = _meta_of(
        (VECTORS / FILES[base]["index"]).read_bytes(), base
    )
    if index[:8] == b"ASHUFIDX" and len(index) >= 96:
        rows = int(struct.unpack_from("<Q", index, 56)[0])
        regions = int(struct.unpack_from("<I", index, 64)[0])
    return schema, n, partitioner, rows, regions


def one_file_dataset(vector: Vector, directory: Path) -> Path:
    """Write the file vector's pair into ``directory`` with a manifest that lists it correctly.

    Sizes are the objects' real sizes, the checksum the one the index's trailer holds, so that the
    file's own rule is what breaks.
    """
    assert vector.source == "file"
    entry = FILES[vector.name]
    base = entry.get("base", vector.name)
    directory.mkdir(parents=True)
    data, index = directory / entry["data"], directory / entry["index"]
    shutil.copyfile(VECTORS / entry["data"], data)
    shutil.copyfile(VECTORS / entry["index"], index)
    raw = index.read_bytes()
    schema, n, partitioner, rows, regions = _meta_of(raw, "good_basic" if base == "plain" else base)
    listed = ManifestFile(
        data=data.name,
        index=index.name,
        data_size=data.stat().st_size,
        index_size=len(raw),
        rows=rows,
        regions=regions,
        index_crc32c=codec.index_checksum(raw),
    )
    (directory / MANIFEST_NAME).write_bytes(
        encode_manifest(Manifest(schema, n, partitioner, (listed,)))
    )
    return directory
