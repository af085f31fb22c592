"""The pure checks of a decoded index (rules V8-V12 and V20), and the registry of every rule.

Rules V1-V7 are enforced while decoding (:mod:`arrowshuffle.format.index`), V13-V15 on the data
file's ends and footer (:mod:`arrowshuffle.format.data_file`), V16-V19 on its chunks
(:mod:`arrowshuffle.format.chunks`), M1-M3 and M8 while decoding a manifest
(:mod:`arrowshuffle.format.manifest`) and M4-M7, M9 on what a dataset's files hold
(:mod:`arrowshuffle.format.manifest_rules`). Importing this module loads them all, so that
:data:`~arrowshuffle.format.rule_registry.IMPLEMENTATIONS` names the check of every rule.

The checks here are vectorized over regions and subpartitions. Each works on the whole index
(validation) and on the entries of a run of subpartitions (a reader proves what it reads before
fetching it, see :mod:`arrowshuffle.readers.proof`).
"""

from __future__ import annotations

import numpy as np

from arrowshuffle.format import chunks as _chunks  # noqa: F401  (registers V16-V19)
from arrowshuffle.format import data_file as _data_file  # noqa: F401  (registers V13-V15, V21)
from arrowshuffle.format import manifest as _manifest  # noqa: F401  (registers M1-M3, M8)
from arrowshuffle.format import manifest_rules as _manifest_rules  # noqa: F401  (M4-M7, M9)
from arrowshuffle.format.index import REGION_BROADCAST, ShuffleIndex
from arrowshuffle.format.rule_registry import (
    IMPLEMENTATIONS,
    MANIFEST_RULES,
    RULES,
    Violation,
    implements,
)

__all__ = [
    "IMPLEMENTATIONS",
    "MANIFEST_RULES",
    "RULES",
    "Violation",
    "broadcast_mismatch",
    "check_index",
    "check_layout",
    "check_reserved",
    "check_total_rows",
    "first_index",
    "half_empty_chunk",
    "outside_data_file",
]


def first_index(mask: np.ndarray) -> tuple[int, ...]:
    """The index of the first True of a boolean array, as a tuple of ints."""
    return tuple(int(i) for i in np.argwhere(mask)[0])


def check_index(index: ShuffleIndex) -> list[Violation]:
    """Check rules V8-V12 and V20 on a decoded index. Returns every rule broken, once each."""
    found: list[Violation] = []
    entries = index.entries
    regions = index.meta.regions
    data_length = index.header.data_length
    outside = outside_data_file(regions, data_length, what="region") or outside_data_file(
        entries, data_length
    )
    if outside is not None:
        found.append(outside)
    else:  # a chunk or region outside the file already says the layout is broken
        run = range(index.num_subpartitions)
        for layout in (check_layout(regions, entries, run), broadcast_mismatch(entries, regions)):
            if layout is not None:
                found.append(layout)
    for other in (half_empty_chunk(entries), check_reserved(regions, index.trailer_reserved)):
        if other is not None:
            found.append(other)
    rows = check_total_rows(index)
    if rows is not None:
        found.append(rows)
    return found


@implements("V8")
def outside_data_file(
    records: np.ndarray, data_length: int, first: int = 0, *, what: str = "chunk"
) -> Violation | None:
    """V8: the first chunk (or, with ``what="region"``, region) not inside the data file.

    ``records`` are entries, one row per subpartition from ``first`` on, or the region table;
    ``offset + length`` is never computed for the comparison, since it could wrap in uint64.
    """
    if records.size == 0:
        return None
    offsets = records["offset"]
    lengths = records["length"]
    past = (offsets > data_length) | (lengths > data_length - np.minimum(offsets, data_length))
    if not past.any():
        return None
    at = first_index(past)
    if what == "region":
        name = f"region {at[0]}"
    else:
        name = f"chunk (region {at[1]}, subpartition {first + at[0]})"
    return Violation(
        "V8",
        f"{name} ends at byte {int(offsets[at]) + int(lengths[at])}, past the data file's "
        f"{data_length} bytes",
    )


@implements("V9")
def check_layout(
    regions: np.ndarray,
    entries: np.ndarray | None = None,
    run: range | None = None,
    *,
    num_subpartitions: int | None = None,
    before: np.ndarray | None = None,
    after: np.ndarray | None = None,
) -> Violation | None:
    """V9: regions in ascending order without overlap; a run's regular chunks laid out in them.

    Without ``entries`` only the region table is checked. With them, the chunks of the
    contiguous run of subpartitions ``run`` (a whole index: ``range(N)``) must lie inside their
    regular region and follow each other without a gap; the run's first chunk starts where the
    region starts (or where ``before``, the entries of subpartition ``run.start - 1``, ends),
    its last ends where the region ends (or where ``after``, those of ``run.stop``, starts).
    The regions and chunks must already lie inside the data file (V8).

    Args:
        regions: the region table.
        entries: the entries of exactly the subpartitions of ``run``, shape ``(len(run), R)``.
        run: the subpartitions.
        num_subpartitions: ``N`` of the file; None when ``run`` ends at ``N``.
        before: the entries of subpartition ``run.start - 1`` (shape ``(R,)``), when known.
        after: the entries of subpartition ``run.stop``, when known.
    """
    if len(regions) == 0:
        return None
    starts = regions["offset"]
    lengths = regions["length"]
    overlap = starts[1:] < starts[:-1] + lengths[:-1]
    if overlap.any():
        r = int(np.argmax(overlap)) + 1
        return Violation(
            "V9",
            f"region {r} starts at byte {int(starts[r])}, before region {r - 1} ends at byte "
            f"{int(starts[r - 1]) + int(lengths[r - 1])}",
        )
    if entries is None or run is None or entries.size == 0:
        return None
    regular = (regions["flags"] & REGION_BROADCAST) == 0
    if not regular.any():
        return None
    numbers = np.flatnonzero(regular)
    if not regular.all():  # drop the broadcast regions (a copy; none to drop, no copy)
        entries, regions = entries[:, regular], regions[regular]
    return _regular_run(
        entries,
        regions,
        numbers,
        run,
        last=num_subpartitions is None or run.stop == num_subpartitions,
        before=None if before is None else before[regular],
        after=None if after is None else after[regular],
    )


def _regular_run(
    entries: np.ndarray,
    regions: np.ndarray,
    numbers: np.ndarray,
    run: range,
    *,
    last: bool,
    before: np.ndarray | None,
    after: np.ndarray | None,
) -> Violation | None:
    region_start = regions["offset"]
    region_end = region_start + regions["length"]  # inside the file: cannot wrap
    offsets = entries["offset"]
    ends = offsets + entries["length"]  # inside the file (V8 holds): cannot wrap
    outside = (offsets < region_start) | (ends > region_end)
    if outside.any():
        i, col = first_index(outside)
        return Violation(
            "V9",
            f"chunk (region {int(numbers[col])}, subpartition {run.start + i}) spans bytes "
            f"[{int(offsets[i, col])}, {int(ends[i, col])}), outside its region "
            f"[{int(region_start[col])}, {int(region_end[col])})",
        )
    gaps = offsets[1:] != ends[:-1]
    if gaps.any():
        i, col = first_index(gaps)
        return Violation(
            "V9",
            f"chunk (region {int(numbers[col])}, subpartition {run.start + i + 1}) starts at "
            f"byte {int(offsets[i + 1, col])}, expected {int(ends[i, col])} (right after the "
            "previous chunk)",
        )
    checks: list[tuple[int, np.ndarray, np.ndarray, str, str]] = []
    # Where the run's first chunk must start: the region's start, or its predecessor's end.
    if run.start == 0:
        checks.append((run.start, offsets[0], region_start, "the start of its region", "starts"))
    elif before is not None:
        neighbour = _neighbour_outside(before, region_start, region_end, numbers, run.start - 1)
        if neighbour is not None:
            return neighbour
        checks.append(
            (
                run.start,
                offsets[0],
                before["offset"] + before["length"],
                f"the end of subpartition {run.start - 1}'s chunk",
                "starts",
            )
        )
    # Where its last chunk must end: the region's end, or its successor's start.
    final = run.stop - 1
    if last:
        checks.append((final, ends[-1], region_end, "the end of its region", "ends"))
    elif after is not None:
        neighbour = _neighbour_outside(after, region_start, region_end, numbers, run.stop)
        if neighbour is not None:
            return neighbour
        successor = f"the start of subpartition {run.stop}'s chunk"
        checks.append((final, ends[-1], after["offset"], successor, "ends"))
    for subpartition, actual, expected, what, edge in checks:
        wrong = actual != expected
        if wrong.any():
            col = int(np.argmax(wrong))
            return Violation(
                "V9",
                f"chunk (region {int(numbers[col])}, subpartition {subpartition}) {edge} at byte "
                f"{int(actual[col])}, expected {int(expected[col])} ({what})",
            )
    return None


def _neighbour_outside(
    entry: np.ndarray,
    region_start: np.ndarray,
    region_end: np.ndarray,
    numbers: np.ndarray,
    subpartition: int,
) -> Violation | None:
    """A neighbour's entry used as an anchor must itself lie inside its region."""
    offset = entry["offset"]
    length = entry["length"]
    inside = (
        (offset >= region_start)
        & (offset <= region_end)
        & (length <= region_end - np.minimum(offset, region_end))
    )
    if inside.all():
        return None
    col = int(np.argmin(inside))
    return Violation(
        "V9",
        f"chunk (region {int(numbers[col])}, subpartition {subpartition}) spans bytes "
        f"[{int(offset[col])}, {int(offset[col]) + int(length[col])}), outside its region "
        f"[{int(region_start[col])}, {int(region_end[col])})",
    )


@implements("V10")
def broadcast_mismatch(entries: np.ndarray, regions: np.ndarray) -> Violation | None:
    """V10: the first broadcast region whose entries are not all its single chunk.

    ``entries`` are those of any run of subpartitions, shape ``(n, R)``.
    """
    broadcast = (regions["flags"] & REGION_BROADCAST) != 0
    if entries.size == 0 or not broadcast.any():
        return None
    b = entries[:, broadcast]
    reg = regions[broadcast]
    differ = (
        (b != b[0:1, :]).any(axis=0)
        | (b[0]["offset"] != reg["offset"])
        | (b[0]["length"] != reg["length"])
    )
    if not differ.any():
        return None
    r = int(np.flatnonzero(broadcast)[int(np.argmax(differ))])
    return Violation(
        "V10",
        f"broadcast region {r}: expected every subpartition's entry to be the region's single "
        "chunk, found differing entries",
    )


@implements("V11")
def half_empty_chunk(entries: np.ndarray, first: int = 0) -> Violation | None:
    """V11: the first entry that has some but not all of bytes, batches and rows.

    The writer writes no record batch without rows, so an empty chunk has none of the three.
    """
    if entries.size == 0:
        return None
    has_batches = entries["batches"] > 0
    bad = ((entries["length"] > 0) != has_batches) | ((entries["rows"] > 0) != has_batches)
    if not bad.any():
        return None
    i, r = first_index(bad)
    e = entries[i, r]
    return Violation(
        "V11",
        f"chunk (region {r}, subpartition {first + i}) has {int(e['length'])} bytes, "
        f"{int(e['batches'])} batches and {int(e['rows'])} rows; expected all three zero or all "
        "three non-zero",
    )


@implements("V12")
def check_total_rows(index: ShuffleIndex) -> Violation | None:
    """V12: the header's total row count is the entries' rows (a broadcast chunk once)."""
    entries = index.entries
    broadcast = index.broadcast_regions
    rows = entries["rows"].sum(axis=0, dtype=np.uint64) if entries.size else np.zeros(0)
    if entries.size and broadcast.any():
        rows = rows.copy()
        rows[broadcast] = entries["rows"][0, broadcast]
    total = int(np.sum(rows, dtype=np.uint64))
    if total == index.header.total_rows:
        return None
    return Violation(
        "V12", f"header declares {index.header.total_rows} rows, the entries hold {total}"
    )


@implements("V20")
def check_reserved(regions: np.ndarray, trailer_reserved: int | None = None) -> Violation | None:
    """V20: region flags use only defined bits; reserved words are zero.

    v1 defines region flag bit 0 only, and a minor version may not define more (section 10):
    a set bit means a writer that does not follow the format, whose regions cannot be trusted.
    ``trailer_reserved`` is None when the trailer was not fetched.
    """
    undefined = (regions["flags"] & ~np.uint32(REGION_BROADCAST)) != 0
    if undefined.any():
        r = int(np.argmax(undefined))
        return Violation(
            "V20",
            f"region {r} has flags {int(regions['flags'][r]):#x}; v1 defines only bit 0 "
            "(broadcast)",
        )
    reserved = regions["reserved"] != 0
    if reserved.any():
        r = int(np.argmax(reserved))
        return Violation(
            "V20", f"region {r}'s reserved word is {int(regions['reserved'][r]):#x}, expected 0"
        )
    if trailer_reserved:
        return Violation("V20", f"the trailer's reserved word is {trailer_reserved:#x}, expected 0")
    return None
