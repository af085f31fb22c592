"""Validate one shuffle file against the numbered rules of ``spec.md`` (V1-V19).

The index is decoded completely (rules V1-V7 raise while decoding and end the check), its layout
is checked without the data (V8-V12), then the data file's ends and footer (V13-V15). A deep
check also streams every chunk, a bounded wave of chunks at a time (V16-V19).

Missing or unreadable objects are storage problems, not invalid data: they raise
:class:`~arrowshuffle.format.errors.ShuffleIOError` instead of producing a report.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.crc import crc32c
from arrowshuffle.format.errors import ArrowShuffleError, FormatError
from arrowshuffle.format.index import (
    HEADER_SIZE,
    ShuffleIndex,
    decode_header,
    decode_index,
)
from arrowshuffle.format.naming import INDEX_SUFFIX
from arrowshuffle.format.rules import Violation, check_index
from arrowshuffle.readers.data_file import check_data_file
from arrowshuffle.readers.source import ByteSource, MappedSource, open_source
from arrowshuffle.readers.storage import resolve

#: A remote index is fetched as this prefix first, so that a foreign or hostile object is
#: refused from its header before the rest of it is downloaded.
INDEX_PREFIX_BYTES = 64 * 1024
#: The most chunk bytes a deep check holds at once (a larger chunk is read on its own).
DEEP_WAVE_BYTES = 64 * 1024 * 1024
#: Rules after which byte ranges of the data file cannot be trusted for a deep check.
_LAYOUT_RULES = frozenset({"V8", "V9", "V10", "V11", "V13", "V20"})

Recompute = Callable[[dict[str, Any], pa.RecordBatch, int], Any]


@dataclass
class ValidationReport:
    """The outcome of validating one shuffle file.

    Attributes:
        url: the data file's path or URL.
        ok: True when no rule is broken.
        violations: every broken rule (the first instance of each, with a count when several).
        summary: regions, subpartitions, rows, bytes (data file), index_bytes, compression,
            partitioner (its name), deep (bool) and skipped (checks that could not run, why).
    """

    url: str
    ok: bool
    violations: list[Violation] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable form of the report."""
        return {
            "url": self.url,
            "ok": self.ok,
            "violations": [{"rule": v.rule, "message": v.message} for v in self.violations],
            "summary": dict(self.summary),
        }


def validate_file(
    path_or_url: str | os.PathLike[str],
    *,
    deep: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> ValidationReport:
    """Check one data/index pair against the rules of ``spec.md``.

    Args:
        path_or_url: the data file (local path or fsspec URL); its index sits beside it.
        deep: also read every chunk: checksums (V16), decoding (V17), the data file's batch
            and row totals (V18) and, when the partitioner can be recomputed, every row's
            subpartition (V19).
        storage_options: passed to fsspec for URLs.

    Returns:
        A report listing every broken rule; ``report.ok`` is True for a valid file.

    Raises:
        MissingObjectError: the data file or the index does not exist.
        ShuffleIOError: another storage failure.
        InvalidOptionError: a path or URL that cannot be opened.
    """
    location = resolve(path_or_url, storage_options)
    data = open_source(location)
    index_source = open_source(location.sibling(INDEX_SUFFIX))
    summary: dict[str, Any] = {
        "bytes": data.size,
        "index_bytes": index_source.size,
        "deep": deep,
        "skipped": [],
    }
    report = ValidationReport(url=location.url, ok=False, summary=summary)
    try:
        index = _read_index(index_source)
    except FormatError as exc:
        report.violations.append(Violation(exc.rule or "V4", exc.detail))
        return report
    return validate_decoded(location.url, index, data, deep=deep)


def validate_decoded(
    url: str, index: ShuffleIndex, data: ByteSource, *, deep: bool = False
) -> ValidationReport:
    """Check a pair whose index is already decoded (rules V1-V7 hold) against V8-V19.

    For callers that fetched the index themselves, such as dataset validation.

    Args:
        url: the data file's path or URL, for the report.
        index: the decoded index.
        data: the data file's bytes.
        deep: also read every chunk (see :func:`validate_file`).
    """
    summary: dict[str, Any] = {
        "bytes": data.size,
        "index_bytes": index.header.index_length,
        "deep": deep,
        "skipped": [],
    }
    report = ValidationReport(url=url, ok=False, summary=summary)
    summary.update(
        regions=index.num_regions,
        subpartitions=index.num_subpartitions,
        rows=index.header.total_rows,
        compression=index.header.compression,
        partitioner=str(index.meta.partitioner.get("name")),
        format_version=f"{index.header.version[0]}.{index.header.version[1]}",
    )
    violations = check_index(index)
    footer, data_violations = check_data_file(index.header, index.schema, data)
    violations.extend(data_violations)
    if deep:
        broken = {v.rule for v in violations} & _LAYOUT_RULES
        if broken:
            summary["skipped"].append(
                "deep checks: the layout is broken (" + ", ".join(sorted(broken)) + ")"
            )
        else:
            violations.extend(_deep_checks(index, data, footer, summary["skipped"]))
    report.violations = violations
    report.ok = not violations
    return report


# ---------------------------------------------------------------------- the index


def _read_index(source: ByteSource) -> ShuffleIndex:
    """Fetch and decode the whole index; a remote one is refused from its header if it can be."""
    size = source.size
    if isinstance(source, MappedSource) or size <= INDEX_PREFIX_BYTES:
        (whole,) = source.read_ranges([(0, size)])
        return decode_index(memoryview(whole))
    (prefix,) = source.read_ranges([(0, INDEX_PREFIX_BYTES)])
    decode_header(memoryview(prefix)[:HEADER_SIZE], object_size=size)
    (rest,) = source.read_ranges([(INDEX_PREFIX_BYTES, size)])
    return decode_index(prefix.to_pybytes() + rest.to_pybytes())


# ---------------------------------------------------------------------- the data file


# ---------------------------------------------------------------------- deep checks


@dataclass(frozen=True)
class _Chunk:
    """One stored chunk: a broadcast region's chunk appears once, with subpartition None."""

    region: int
    subpartition: int | None
    offset: int
    length: int
    rows: int
    batches: int
    crc32c: int

    @property
    def where(self) -> str:
        if self.subpartition is None:
            return f"broadcast chunk of region {self.region}"
        return f"chunk (region {self.region}, subpartition {self.subpartition})"


class _Tally:
    """The first violation of a rule and how many times it occurred."""

    def __init__(self, rule: str) -> None:
        self.rule = rule
        self.first: str | None = None
        self.count = 0

    def add(self, message: str, times: int = 1) -> None:
        if self.first is None:
            self.first = message
        self.count += times

    def violation(self, unit: str) -> list[Violation]:
        if self.first is None:
            return []
        more = f" ({self.count} {unit} in all)" if self.count > 1 else ""
        return [Violation(self.rule, self.first + more)]


def _stored_chunks(index: ShuffleIndex) -> list[_Chunk]:
    """Every non-empty stored chunk in file order; a broadcast chunk once."""
    entries = index.entries
    broadcast = index.broadcast_regions
    chunks: list[_Chunk] = []
    # Region-major order: transpose to (regions, subpartitions) and walk non-empty entries.
    for r, s in np.argwhere(entries["length"].T > 0):
        region, sub = int(r), int(s)
        if broadcast[region] and sub != 0:
            continue
        e = entries[sub, region]
        chunks.append(
            _Chunk(
                region=region,
                subpartition=None if broadcast[region] else sub,
                offset=int(e["offset"]),
                length=int(e["length"]),
                rows=int(e["rows"]),
                batches=int(e["batches"]),
                crc32c=int(e["crc32c"]),
            )
        )
    return chunks


def _waves(chunks: list[_Chunk]) -> Iterator[list[_Chunk]]:
    """Groups of chunks of at most :data:`DEEP_WAVE_BYTES` (a bigger chunk goes alone)."""
    wave: list[_Chunk] = []
    size = 0
    for chunk in chunks:
        if wave and size + chunk.length > DEEP_WAVE_BYTES:
            yield wave
            wave, size = [], 0
        wave.append(chunk)
        size += chunk.length
    if wave:
        yield wave


def _load_recompute() -> Recompute | None:
    """The partitioners' row-id recomputation, when that module provides it."""
    try:
        from arrowshuffle.format.partitioners import recompute_subpartitions
    except ImportError:
        return None
    return recompute_subpartitions


def _decode_chunk(buffer: pa.Buffer, chunk: _Chunk, schema: pa.Schema) -> list[pa.RecordBatch]:
    """Decode exactly ``chunk.batches`` record batches spanning exactly the chunk's bytes.

    Raises:
        FormatError: (rule V17) with what was expected and what was found.
    """
    reader = pa.BufferReader(buffer)
    batches: list[pa.RecordBatch] = []
    try:
        for _ in range(chunk.batches):
            message = pa.ipc.read_message(reader)
            if message.type != "record batch":
                raise FormatError(
                    f"{chunk.where}: batch {len(batches)} is a {message.type!r} message, "
                    "expected a record batch",
                    rule="V17",
                )
            batch = pa.ipc.read_record_batch(message, schema)
            batch.validate(full=True)
            batches.append(batch)
    except (pa.ArrowException, OSError, EOFError) as exc:
        raise FormatError(
            f"{chunk.where}: expected {chunk.batches} record batches of the file's schema, "
            f"batch {len(batches)} does not decode: {exc}",
            rule="V17",
        ) from exc
    rows = sum(b.num_rows for b in batches)
    if rows != chunk.rows or reader.tell() != buffer.size:
        raise FormatError(
            f"{chunk.where}: expected {chunk.batches} batches with {chunk.rows} rows in "
            f"{buffer.size} bytes, decoded {rows} rows from {reader.tell()} bytes",
            rule="V17",
        )
    return batches


def _deep_checks(
    index: ShuffleIndex,
    data: ByteSource,
    footer: pa.ipc.RecordBatchFileReader | None,
    skipped: list[str],
) -> list[Violation]:
    """Rules V16-V19, reading one wave of chunks at a time."""
    crc = _Tally("V16")
    decode = _Tally("V17")
    placement = _Tally("V19")
    recompute = _placement_checker(index, skipped)
    spec = dict(index.meta.partitioner)
    chunks = _stored_chunks(index)
    for wave in _waves(chunks):
        buffers = data.read_ranges([(c.offset, c.offset + c.length) for c in wave])
        for chunk, buffer in zip(wave, buffers, strict=True):
            actual = crc32c(buffer)
            if actual != chunk.crc32c:
                # Damaged bytes are not decoded: V16 already condemns the chunk.
                crc.add(
                    f"{chunk.where} at bytes [{chunk.offset}, {chunk.offset + chunk.length}): "
                    f"stored CRC32C {chunk.crc32c:#010x}, computed {actual:#010x}"
                )
                continue
            try:
                batches = _decode_chunk(buffer, chunk, index.schema)
            except FormatError as exc:
                decode.add(exc.detail)
                continue
            if recompute is not None and chunk.subpartition is not None:
                _check_placement(
                    recompute, spec, batches, chunk, index.num_subpartitions, placement
                )
    found = crc.violation("chunks") + decode.violation("chunks")
    found.extend(_check_footer_totals(chunks, footer))
    return found + placement.violation("rows")


def _placement_checker(index: ShuffleIndex, skipped: list[str]) -> Recompute | None:
    """The recomputation for rule V19 when it applies to this file, else None (and why).

    A spec this version cannot evaluate (unknown name, a partitioner whose rows do not
    determine their subpartition, key columns the schema lacks) skips the rule.
    """
    recompute = _load_recompute()
    if recompute is None:
        skipped.append("V19: the partitioners cannot recompute subpartitions in this version")
        return None
    spec = index.meta.partitioner
    name = spec.get("name")
    empty = pa.RecordBatch.from_pylist([], schema=index.schema)
    try:
        usable = recompute(dict(spec), empty, index.num_subpartitions)
    except ArrowShuffleError as exc:
        skipped.append(f"V19: partitioner {name!r} cannot be evaluated: {exc}")
        return None
    if usable is None:
        skipped.append(f"V19: partitioner {name!r} does not determine a row's subpartition")
        return None
    return recompute


def _check_placement(
    recompute: Recompute,
    spec: dict[str, Any],
    batches: list[pa.RecordBatch],
    chunk: _Chunk,
    num_subpartitions: int,
    tally: _Tally,
) -> None:
    """Rule V19 for one chunk: recompute every row's subpartition and compare.

    A partitioner that refuses a stored row (say, an id column holding 9 in a file of 4
    subpartitions) breaks the rule too.
    """
    name = spec.get("name")
    for batch in batches:
        try:
            ids = np.asarray(recompute(spec, batch, num_subpartitions))
        except ArrowShuffleError as exc:
            tally.add(f"{chunk.where}: partitioner {name!r} refuses a stored row: {exc}")
            continue
        wrong = ids != chunk.subpartition
        if wrong.any():
            row = int(np.argmax(wrong))
            tally.add(
                f"{chunk.where}: row {row} of a batch belongs to subpartition {int(ids[row])} "
                f"by partitioner {name!r}",
                times=int(wrong.sum()),
            )


def _check_footer_totals(
    chunks: list[_Chunk], footer: pa.ipc.RecordBatchFileReader | None
) -> list[Violation]:
    """Rule V18: the footer lists exactly the indexed batches and rows."""
    if footer is None:
        return []
    batches = sum(c.batches for c in chunks)
    rows = sum(c.rows for c in chunks)
    try:
        footer_batches = footer.num_record_batches
        footer_rows = footer.count_rows()
    except (pa.ArrowException, OSError) as exc:
        return [Violation("V18", f"the data file's record batches cannot be counted: {exc}")]
    if footer_batches != batches or footer_rows != rows:
        return [
            Violation(
                "V18",
                f"the index's chunks hold {batches} record batches and {rows} rows, the data "
                f"file's footer lists {footer_batches} batches and {footer_rows} rows",
            )
        ]
    return []
