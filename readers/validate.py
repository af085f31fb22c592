"""Validate one shuffle file against the numbered rules of ``spec.md`` (V1-V19).

The index is decoded completely (rules V1-V7 raise while decoding and end the check), its layout
is checked without the data (V8-V12), then the data file's ends and footer (V13-V15). A deep
check also streams every chunk, a bounded wave of chunks at a time (V16-V19).

Missing or unreadable objects are storage problems, not invalid data: they raise
:class:`~arrowshuffle.format.errors.ShuffleIOError` instead of producing a report.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa

from arrowshuffle.format.chunks import (
    check_chunk_crc,
    check_footer_batches,
    decode_chunk,
    misplaced_rows,
    placement_exemption,
)
from arrowshuffle.format.errors import FormatError
from arrowshuffle.format.index import (
    HEADER_SIZE,
    INDEX_PREFIX_BYTES,
    ShuffleIndex,
    decode_header,
    decode_index,
)
from arrowshuffle.format.naming import INDEX_SUFFIX
from arrowshuffle.format.rules import Violation, check_index
from arrowshuffle.readers.data_file import check_data_file
from arrowshuffle.readers.projection import read_layout
from arrowshuffle.readers.source import ByteSource, MappedSource, open_source
from arrowshuffle.readers.storage import resolve

#: The most chunk bytes a deep check holds at once (a larger chunk is read on its own).
DEEP_WAVE_BYTES = 64 * 1024 * 1024
#: Rules after which byte ranges of the data file cannot be trusted for a deep check.
_LAYOUT_RULES = frozenset({"V8", "V9", "V10", "V11", "V13", "V20"})


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
        report.violations.append(Violation.from_error(exc, "V4"))
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
    # Whether the regions cover the batches (V21) is judged on regions laid out right.
    laid_out = not {v.rule for v in violations} & {"V8", "V9"}
    footer, data_violations = check_data_file(
        index.header, index.schema, data, index.meta.regions if laid_out else None
    )
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

    def __init__(self) -> None:
        self.first: Violation | None = None
        self.count = 0

    def add(self, found: Violation, times: int = 1) -> None:
        if self.first is None:
            self.first = found
        self.count += times

    def violation(self, unit: str) -> list[Violation]:
        if self.first is None:
            return []
        if self.count == 1:
            return [self.first]
        more = f" ({self.count} {unit} in all)"
        return [replace(self.first, message=self.first.message + more)]


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


def _deep_checks(
    index: ShuffleIndex,
    data: ByteSource,
    footer: pa.ipc.RecordBatchFileReader | None,
    skipped: list[str],
) -> list[Violation]:
    """Rules V16-V19, reading one wave of chunks at a time."""
    crc = _Tally()
    decode = _Tally()
    placement = _Tally()
    spec = dict(index.meta.partitioner)
    exempt = placement_exemption(spec, index.schema, index.num_subpartitions)
    if isinstance(exempt, Violation):  # a spec that cannot be applied: no row is checked
        placement.add(exempt)
    elif exempt is not None:
        skipped.append(f"V19: {exempt}")
    chunks = _stored_chunks(index)
    for wave in _waves(chunks):
        buffers = data.read_ranges([(c.offset, c.offset + c.length) for c in wave])
        for chunk, buffer in zip(wave, buffers, strict=True):
            where = f"{chunk.where} at bytes [{chunk.offset}, {chunk.offset + chunk.length})"
            damaged = check_chunk_crc(buffer, chunk.crc32c, where)
            if damaged is not None:
                crc.add(damaged)  # damaged bytes are not decoded: V16 already condemns them
                continue
            try:
                batches = decode_chunk(
                    buffer,
                    index.schema,
                    chunk.batches,
                    chunk.rows,
                    chunk.where,
                    compression=index.header.compression,
                )
            except FormatError as exc:
                decode.add(Violation.from_error(exc, "V17"))
                continue
            if exempt is None and chunk.subpartition is not None:
                for batch in batches:
                    wrong = misplaced_rows(
                        spec, batch, index.num_subpartitions, chunk.subpartition, chunk.where
                    )
                    if wrong is not None:
                        placement.add(*wrong)
    found = crc.violation("chunks") + decode.violation("chunks")
    if footer is not None:
        listed = check_footer_batches(
            np.array([(c.offset, c.length, c.batches) for c in chunks], dtype=np.int64).reshape(
                -1, 3
            ),
            sum(c.rows for c in chunks),
            lambda: (read_layout(data).batches, footer.count_rows()),
        )
        if listed is not None:
            found.append(listed)
    return found + placement.violation("rows")
