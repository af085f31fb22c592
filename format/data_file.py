"""The checks of a data file's size, ends and footer (rules V13-V15). Pure: the caller fetches.

Fetching the ends and opening the footer is storage work
(:mod:`arrowshuffle.readers.data_file`); these functions judge what was fetched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pyarrow as pa

from arrowshuffle.format.index import FILE_ID_KEY
from arrowshuffle.format.rule_registry import Violation, implements

#: Magic bytes at both ends of an Arrow IPC file.
ARROW_MAGIC = b"ARROW1"


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
