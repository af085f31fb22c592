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
from arrowshuffle.readers.source import (
    ByteSource,
    MappedSource,
    PrefetchedSource,
    RemoteSource,
    SparseFile,
)


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


#: The most bytes of a data file's end a ranged reader fetches with its first bytes, to judge
#: the footer without another request: a footer lists 24 bytes per record batch, so this holds
#: that of about 40,000 batches (a larger footer costs one request more).
TAIL_FETCH_MAX = 1 << 20


def check_remote_data_file(
    header: IndexHeader,
    schema: pa.Schema,
    data: ByteSource,
    regions: np.ndarray,
    whole: pa.Buffer | None = None,
) -> None:
    """Rules V13-V15 and V21 for a reader of object storage, before any chunk is decoded.

    The data file's first bytes and its end (from where the last region ends: the
    end-of-stream marker, the footer, its length and the magic) are asked for in one call
    (concurrently on asynchronous stores), and :func:`check_data_file` judges them: a data file
    beside the wrong index, or of another schema, would otherwise have its chunks decoded with
    the index's schema. Bytes that break a rule are fetched again, up to the source's retry
    budget, since they may have been damaged on the way; when the same bytes come back the
    error is raised.

    Args:
        header: the index's header.
        schema: the index's schema.
        data: the data file.
        regions: the index's region table.
        whole: the data file's bytes, when a read fetched all of them already: they are
            judged without a request.

    Raises:
        CorruptFileError: the first rule broken (V13, V14, V15 or V21).
    """
    size = data.size
    tail = max(0, size - TAIL_FETCH_MAX)
    if len(regions):
        last_end = int(regions["offset"][-1]) + int(regions["length"][-1])
        tail = max(tail, min(last_end, size - FOOTER_LENGTH_FROM_END[0]))
    ranges = [(0, min(SCHEMA_PREFIX[1], size)), (tail, size)]
    if whole is not None and whole.size == size:
        pieces = [whole.slice(begin, end - begin) for begin, end in ranges]
    else:
        pieces = data.read_ranges(ranges)
    starts = [begin for begin, _ in ranges]
    attempt = 0
    while True:
        known = PrefetchedSource(data, list(zip(starts, pieces, strict=True)))
        _, found = check_data_file(header, schema, known, regions)
        if not found:
            return
        error = found[0].error(data.url)
        if not isinstance(data, RemoteSource) or attempt >= data.retry_budget:
            raise error
        attempt += 1
        data.note_refetch("the data file's ends", attempt, error)
        fresh = data.read_ranges(ranges)
        if all(a.equals(b) for a, b in zip(fresh, pieces, strict=True)):
            raise error
        pieces = fresh


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
