"""The checks of a data file's size, ends and footer (rules V13-V15, V21). Pure: the caller fetches.

Fetching the ends and opening the footer is storage work
(:mod:`arrowshuffle.readers.data_file`); these functions judge what was fetched.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa

from arrowshuffle.format.index import FILE_ID_KEY
from arrowshuffle.format.rule_registry import Violation, implements

#: Magic bytes at both ends of an Arrow IPC file.
ARROW_MAGIC = b"ARROW1"
#: Where a data file's bytes that locate its first record batch lie: the schema message's
#: continuation marker and metadata length, after the 8 bytes of magic and padding.
SCHEMA_PREFIX = (8, 16)
#: Where, counted back from the end, the footer's int32 length lies (the magic follows it).
FOOTER_LENGTH_FROM_END = (10, 6)
#: The end-of-stream marker that ends the record batches, before the footer.
_END_OF_STREAM_BYTES = 8
_CONTINUATION = b"\xff\xff\xff\xff"


@implements("V13")
def check_arrow_file(
    declared: int,
    size: int,
    ends: Callable[[], tuple[bytes, bytes]],
    open_footer: Callable[[], pa.ipc.RecordBatchFileReader],
) -> tuple[pa.ipc.RecordBatchFileReader | None, list[Violation]]:
    """V13: the data file has the declared length, the Arrow magic at both ends, a footer.

    Args:
        declared: the index's ``data_length``.
        size: the data file's size.
        ends: fetches its first and last :data:`ARROW_MAGIC`-long bytes (called only when the
            file is long enough to hold them).
        open_footer: opens its Arrow footer (called only when both magics are in place).

    Returns:
        The opened footer (None when it cannot be opened) and the violations found.
    """
    found: list[Violation] = []
    if size != declared:
        found.append(
            Violation(
                "V13", f"the index declares a data file of {declared} bytes, found {size} bytes"
            )
        )
    if size < 2 * len(ARROW_MAGIC):
        found.append(Violation("V13", f"the data file is {size} bytes, too short for Arrow IPC"))
        return None, found
    head, tail = ends()
    if head != ARROW_MAGIC or tail != ARROW_MAGIC:
        found.append(
            Violation(
                "V13",
                f"the data file is not an Arrow IPC file: expected {ARROW_MAGIC!r} at both ends, "
                f"found {head!r} and {tail!r}",
            )
        )
        return None, found
    try:
        footer = open_footer()
    except (pa.ArrowException, OSError) as exc:
        found.append(Violation("V13", f"the data file's Arrow footer does not decode: {exc}"))
        return None, found
    return footer, found


@implements("V14")
def check_file_id(file_id: bytes, metadata: Mapping[bytes, bytes] | None) -> Violation | None:
    """V14: the footer's ``arrowshuffle.file_id`` is the index's file id, in lowercase hex."""
    expected = file_id.hex().encode()
    found = (metadata or {}).get(FILE_ID_KEY)
    if found == expected:
        return None
    what = "no file id" if found is None else f"file id {found.decode(errors='replace')}"
    return Violation(
        "V14",
        f"the index has file id {expected.decode()}, the data file's footer has {what}: the two "
        "files do not belong together",
    )


@implements("V15")
def check_footer_schema(expected: pa.Schema, found: pa.Schema) -> Violation | None:
    """V15: the footer's schema equals the index's, field and schema metadata included."""
    if found.equals(expected, check_metadata=True):
        return None
    prefix = "the data file's schema differs from the index's: "
    if len(expected) != len(found):
        detail = f"expected {len(expected)} fields {expected.names}, found {found.names}"
    else:
        detail = f"expected metadata {expected.metadata!r}, found {found.metadata!r}"
        for i, (want, got) in enumerate(zip(expected, found, strict=True)):
            if not want.equals(got, check_metadata=True):
                detail = f"field {i}: expected {want}, found {got}"
                break
    return Violation("V15", prefix + detail)


def batch_start(prefix: bytes) -> int | Violation:
    """Where a data file's first record batch starts: right after its schema message.

    v1 files hold no dictionary batch, so the first message after the schema is a record batch
    (or, without any, the end-of-stream marker).

    Args:
        prefix: the file's bytes at :data:`SCHEMA_PREFIX`.
    """
    if len(prefix) < 8 or prefix[:4] != _CONTINUATION:
        return Violation(
            "V21",
            "the data file's schema message does not start at byte 8 (expected the "
            f"continuation marker {_CONTINUATION.hex()}, found {prefix[:4].hex() or 'nothing'})",
        )
    length = int(struct.unpack_from("<i", prefix, 4)[0])
    if length <= 0:
        return Violation("V21", f"the data file's schema message declares {length} bytes")
    return SCHEMA_PREFIX[1] + length


def batch_end(footer_length: bytes, size: int) -> int | Violation:
    """Where a data file's record batches end: where the end-of-stream marker begins.

    Args:
        footer_length: the file's bytes at :data:`FOOTER_LENGTH_FROM_END` (from its end).
        size: its size.
    """
    length = struct.unpack_from("<i", footer_length, 0)[0] if len(footer_length) >= 4 else -1
    end = size - FOOTER_LENGTH_FROM_END[0] - length - _END_OF_STREAM_BYTES
    if length <= 0 or end <= SCHEMA_PREFIX[1]:
        return Violation(
            "V21",
            f"the data file's footer declares {length} bytes, which do not fit in its {size} bytes",
        )
    return end


@implements("V21")
def check_coverage(
    regions: np.ndarray,
    first: int | Violation | None = None,
    end: int | Violation | None = None,
) -> Violation | None:
    """V21: the regions tile the data file's record batches, so no batch is left out.

    Each region starts where the previous one ends. Given ``first`` (see :func:`batch_start`),
    region 0 starts there; given ``end`` (:func:`batch_end`), the last region ends there; given
    both, a file without regions holds no record batch. Without them, only the index's part is
    checked (a reader does so on opening). The regions must lie inside the data file (V8).

    Args:
        regions: the region table.
        first: where the data file's first record batch starts, or why that cannot be told.
        end: where its record batches end, or why that cannot be told.
    """
    starts = regions["offset"]
    ends = starts + regions["length"]  # inside the file (V8 holds): cannot wrap
    gap = starts[1:] != ends[:-1]
    if gap.any():
        r = int(np.argmax(gap)) + 1
        return Violation(
            "V21",
            f"region {r} starts at byte {int(starts[r])}, expected {int(ends[r - 1])} (where "
            f"region {r - 1} ends): the record batches in between belong to no region",
        )
    for anchor in (first, end):
        if isinstance(anchor, Violation):
            return anchor
    if len(regions) == 0:
        if first is None or end is None or first == end:
            return None
        return Violation(
            "V21",
            f"the index has no region, the data file holds record batches in bytes "
            f"[{first}, {end})",
        )
    if first is not None and int(starts[0]) != first:
        return Violation(
            "V21",
            f"region 0 starts at byte {int(starts[0])}, expected {first} (where the data "
            "file's first record batch starts, after its schema message)",
        )
    if end is not None and int(ends[-1]) != end:
        return Violation(
            "V21",
            f"region {len(regions) - 1} ends at byte {int(ends[-1])}, expected {end} (where "
            "the data file's record batches end, before its footer)",
        )
    return None
