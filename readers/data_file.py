"""Fetch what rules V13-V15 and V21 judge: the data file's two ends and its footer.

The checks are :mod:`arrowshuffle.format.data_file`; shared by the reader and the validator.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

from arrowshuffle.format.data_file import (
    ARROW_MAGIC,
    FOOTER_LENGTH_FROM_END,
    SCHEMA_PREFIX,
    batch_end,
    batch_start,
    check_arrow_file,
    check_coverage,
    check_file_id,
    check_footer_schema,
)
from arrowshuffle.format.index import IndexHeader
from arrowshuffle.format.rules import Violation, outside_data_file
from arrowshuffle.readers.source import ByteSource, MappedSource, RemoteSource, SparseFile


def check_data_file(
    header: IndexHeader,
    schema: pa.Schema,
    data: ByteSource,
    regions: np.ndarray | None = None,
) -> tuple[pa.ipc.RecordBatchFileReader | None, list[Violation]]:
    """Rules V13-V15 and, given the region table, V21: the data file against its index.

    Reads only the file's two ends and its footer. Returns the opened footer (None when the
    file is not an Arrow IPC file) and the rules broken, in rule order.
    """
    size = data.size
    fetched: list[bytes] = []

    def ends() -> tuple[bytes, bytes]:
        # Enough of each end for V21 too: the schema message's and the footer's lengths.
        (first, stop), (back, forth) = SCHEMA_PREFIX, FOOTER_LENGTH_FROM_END
        head, tail = _uncounted(data, [(0, min(stop, size)), (max(0, size - back), size)])
        head_bytes, tail_bytes = head.to_pybytes(), tail.to_pybytes()
        fetched.extend((head_bytes[first:], tail_bytes[: back - forth]))
        return head_bytes[: len(ARROW_MAGIC)], tail_bytes[-len(ARROW_MAGIC) :]

    footer, found = check_arrow_file(
        header.data_length, size, ends, lambda: pa.ipc.open_file(_random_access(data))
    )
    if footer is not None:
        for other in (
            check_file_id(header.file_id, footer.metadata),
            check_footer_schema(schema, footer.schema),
        ):
            if other is not None:
                found.append(other)
    if regions is not None and outside_data_file(regions, size, what="region") is None:
        # Without a footer the batches cannot be located: only the index's part is checked.
        if footer is not None:
            coverage = check_coverage(regions, batch_start(fetched[0]), batch_end(fetched[1], size))
        else:
            coverage = check_coverage(regions)
        if coverage is not None:
            found.append(coverage)
    return footer, found


def check_data_coverage(regions: np.ndarray, data: ByteSource) -> None:
    """Rule V21 alone, for a reader of object storage: fetches the data file's two ends.

    The two small ranges are asked for in one call (concurrently on asynchronous stores). Ends
    that break the rule are fetched again, up to the source's retry budget, since they may have
    been damaged on the way; when the same bytes come back the error is raised.

    Raises:
        CorruptFileError: (V21) the regions do not cover the data file's record batches.
    """
    size = data.size
    if outside_data_file(regions, size, what="region") is not None:
        return  # the reader's proof of the region table reports it (V8)
    ends = _fetch_ends(data)
    attempt = 0
    while True:
        found = check_coverage(regions, batch_start(ends[0]), batch_end(ends[1], size))
        if found is None:
            return
        error = found.error(data.url)
        if not isinstance(data, RemoteSource) or attempt >= data.retry_budget:
            raise error
        attempt += 1
        data.note_refetch("the data file's ends", attempt, error)
        fresh = _fetch_ends(data)
        if fresh == ends:
            raise error
        ends = fresh


def _fetch_ends(data: ByteSource) -> tuple[bytes, bytes]:
    """The data file's bytes at :data:`SCHEMA_PREFIX` and :data:`FOOTER_LENGTH_FROM_END`."""
    size = data.size
    back, forth = FOOTER_LENGTH_FROM_END
    head, tail = data.read_ranges(
        [
            (min(SCHEMA_PREFIX[0], size), min(SCHEMA_PREFIX[1], size)),
            (max(0, size - back), max(0, size - forth)),
        ]
    )
    return head.to_pybytes(), tail.to_pybytes()


def _uncounted(data: ByteSource, ranges: list[tuple[int, int]]) -> list[pa.Buffer]:
    """The ranges; from a memory map without counting them (checks are no read's plan)."""
    if isinstance(data, MappedSource):
        return [data.mapped.slice(b, e - b) for b, e in ranges]
    return data.read_ranges(ranges)


def _random_access(data: ByteSource) -> pa.NativeFile:
    """A pyarrow file over the data: zero-copy for a memory map, ranged reads otherwise."""
    if isinstance(data, MappedSource):
        return pa.BufferReader(data.mapped)  # Arrow reads the footer only: not counted
    return pa.PythonFile(SparseFile(data.size, (), functools.partial(_fetch_range, data)), mode="r")


def _fetch_range(data: ByteSource, begin: int, end: int) -> bytes:
    (chunk,) = data.read_ranges([(begin, end)])
    return bytes(chunk.to_pybytes())
